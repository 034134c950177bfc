/* The ignis command-line tool: one function per subcommand. Each returns
 * the process exit status (0 ok, 1 runtime failure, 2 usage error). */
#ifndef IG_CLI_H
#define IG_CLI_H

#include "ignis.h"

#include <stdio.h>

int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_devices(int argc, char **argv);

/* `--debug-vk-tuning NAME=VALUE,...` (main.c): overrides of the Vulkan
 * device's tuning for the models this process loads, or NULL. Testing. */
extern const char *cli_vk_tuning;
extern bool cli_deterministic; /* --deterministic: batch-invariant kernels (main.c) */

/* Shared helpers (cli_common.c). */
/* Default model path (~/.cache/ignis/gemma-3-270m-q4_k_m.gguf), or NULL. */
const char *cli_default_model(void);
/* Loads a model, printing a clear error on failure; NULL on failure. A NULL
 * path means the default model (with instructions when it is missing). */
ig_model *cli_load_model(const char *path, const ig_model_params *params);
/* Parses an integer / float option value strictly; prints an error. */
int cli_parse_int(const char *opt, const char *s, long min, long max, long *out);
int cli_parse_float(const char *opt, const char *s, double min, double max, double *out);
/* Reads a whole file (at most 1 GiB) into a NUL-terminated malloc'ed
 * buffer; NULL on failure. */
char *cli_read_text(const char *path, size_t *len);
/* Parses --backend cpu|vulkan. */
int cli_parse_backend(const char *s, ig_backend_kind *out);
/* Parses --quant q8_0|q4_0|q4_k (weights quantized at load). */
int cli_parse_quant(const char *s, ig_weight_quant *out);
/* The vision tower: from mmproj when given, else an mmproj*.gguf next to a
 * GGUF model that has none; with required, a model without one is an
 * error. Prints the error; 0 on success. */
int cli_attach_vision(ig_model *m, const char *model_path, const char *mmproj, bool required);
/* Embeds the images of n files (ig_image_embed), in order. */
ig_status cli_embed_images(ig_model *m, char **paths, int n, int n_threads, float ***out);
void cli_free_images(float **e, int n);
/* Keeps in *peak the largest device memory seen so far (ig_context_device_stats
 * of ctx; *have says whether *peak holds anything). */
void cli_device_peak(const ig_context *ctx, ig_device_stats *peak, bool *have);
/* One line on stderr: the process's peak resident memory and, from dev
 * (NULL: none), the GPU's memory or the weights and KV cache. */
void cli_print_memory(const ig_device_stats *dev);
/* Most --image options of one command. */
#define CLI_MAX_IMAGES 64

/* An output file written whole or not at all: the bytes go to a temporary
 * file in the same directory, which cli_output_commit flushes, fsyncs and
 * renames onto the final name; cli_output_abort (or a failed commit)
 * removes it, so that no half-written file ever has the final name. A path
 * that exists and is not a regular file (/dev/null, a FIFO) is written
 * directly; a symbolic link is followed. */
typedef struct cli_output {
    FILE *fp;
    char *path; /* the final name (a link resolved) */
    char *tmp;  /* the temporary file, NULL when writing directly */
} cli_output;
/* 0, or -1 with errno set (nothing created). */
int cli_output_open(cli_output *o, const char *path);
/* 0 once the file has its final name; -1 with errno set (the temporary
 * file removed). Closes the stream either way. */
int cli_output_commit(cli_output *o);
/* Closes the stream and removes the temporary file. */
void cli_output_abort(cli_output *o);

#endif
