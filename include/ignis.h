/* ignis — Gemma 3 inference engine: public C API.
 *
 * Conventions
 *  - Every fallible call returns an ig_status; on failure the out-pointer is
 *    left NULL and ig_last_error() holds a human-readable detail message
 *    (thread-local, valid until the next failing call on the same thread).
 *  - Whoever creates a handle destroys it; every *_free accepts NULL.
 *  - The library never calls exit() and never aborts on bad input: files,
 *    token ids and sizes coming from outside are validated.
 */
#ifndef IGNIS_H
#define IGNIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IGNIS_VERSION "0.1.0"

typedef enum ig_status {
    IG_OK = 0,
    IG_ERR_INVALID_ARG = -1,  /* caller passed something out of range */
    IG_ERR_IO = -2,           /* open/read/mmap failed */
    IG_ERR_FORMAT = -3,       /* file content is malformed or truncated */
    IG_ERR_UNSUPPORTED = -4,  /* well-formed but not something ignis handles */
    IG_ERR_NO_MEMORY = -5,    /* allocation failed or size overflowed */
    IG_ERR_CONTEXT_FULL = -6, /* a sequence would exceed n_ctx */
    IG_ERR_BACKEND = -7,      /* the compute backend failed */
    IG_ERR_INTERNAL = -8,     /* a broken invariant inside ignis */
} ig_status;

const char *ig_status_str(ig_status st);
/* Detail of the most recent failure on this thread ("" if none). */
const char *ig_last_error(void);

/* ---- Model ------------------------------------------------------------ */

#define IG_MAX_LAYERS 128

/* Hyper-parameters of a loaded Gemma 3 text model. */
typedef struct ig_hparams {
    char arch[32];             /* "gemma3" */
    char name[128];            /* general.name or config name, may be "" */
    int n_vocab;               /* rows of the embedding (may be padded) */
    int n_vocab_real;          /* ids that are real tokens (<= n_vocab) */
    int n_embd;                /* H */
    int n_ff;                  /* F */
    int n_layer;               /* L */
    int n_head;                /* query heads */
    int n_head_kv;             /* key/value heads */
    int head_dim;              /* key/query head size */
    int head_dim_v;            /* value head size */
    int n_ctx_train;           /* trained context length */
    int sliding_window;        /* W; 0 = no sliding-window layers */
    float rms_eps;
    float rope_base_global;    /* theta of global layers */
    float rope_base_local;     /* theta of sliding-window layers */
    float rope_scale_global;   /* linear factor: angle uses pos / factor */
    float rope_scale_local;
    float attn_scale;          /* multiplies q·k (query_pre_attn_scalar^-0.5) */
    float final_logit_softcap; /* 0 = none */
    float attn_logit_softcap;  /* 0 = none */
    uint8_t layer_is_swa[IG_MAX_LAYERS]; /* 1 = sliding-window layer */
    int bos_id, eos_id, eot_id, pad_id;  /* -1 when unknown */
} ig_hparams;

typedef struct ig_model ig_model;

typedef enum ig_backend_kind {
    IG_BACKEND_CPU = 0,
    IG_BACKEND_VULKAN = 1,
} ig_backend_kind;

/* Weights quantized in memory at load (`--quant`), with the blocks of
 * `ignis quantize --type T --pure`: from F32/F16/BF16 weights only. */
typedef enum ig_weight_quant {
    IG_WEIGHT_AS_STORED = 0,
    IG_WEIGHT_Q8_0 = 1,
    IG_WEIGHT_Q4_0 = 2,
    IG_WEIGHT_Q4_K = 3, /* Q4_K where rows are whole 256-blocks, else Q5_0 */
} ig_weight_quant;

typedef struct ig_model_params {
    int n_threads;           /* 0 = number of physical cores */
    ig_backend_kind backend; /* IG_BACKEND_CPU by default */
    int device;              /* Vulkan device index */
    /* Batch-invariant kernels everywhere: a token's logits are the same bits
     * whether it is alone in a step, in a prompt chunk, after a cached
     * prefix or beside other sequences, so temperature-0 and seeded output
     * does not depend on load. The CPU backend always is; on Vulkan this
     * keeps prefill and large batches off the tensor-core and tiled kernels
     * (slower there: docs/vulkan.md). */
    bool deterministic;
    ig_weight_quant quant; /* IG_WEIGHT_AS_STORED by default */
} ig_model_params;

ig_model_params ig_model_default_params(void);

/* path: a .gguf file or a Hugging Face directory (config.json + safetensors). */
ig_status ig_model_load(const char *path, const ig_model_params *params, ig_model **out);

/* ---- Images (Gemma 3 vision-language models) --------------------------- */

/* A decoded image, 8-bit RGB. */
typedef struct ig_image ig_image;

/* Decodes a PNG or JPEG from memory (the format is sniffed) or a file.
 * Alpha is dropped, grey is replicated; oversized, truncated and corrupt
 * images are errors. */
ig_status ig_image_decode(const void *data, size_t size, ig_image **out);
ig_status ig_image_load(const char *path, ig_image **out);
void ig_image_free(ig_image *img);
int ig_image_width(const ig_image *img);
int ig_image_height(const ig_image *img);

/* Loads a llama.cpp multimodal projector GGUF (the vision tower and the
 * projector) for the model; replaces a vision tower loaded with it. Fails
 * with a clear message when it does not fit the text model. */
ig_status ig_model_load_mmproj(ig_model *model, const char *path);
/* Whether the model has a vision tower. */
bool ig_model_has_vision(const ig_model *model);
/* Embeddings per image (0 without a vision tower), and the token ids of
 * the image placeholder, <start_of_image> and <end_of_image> (-1 when
 * unknown). */
int ig_model_image_tokens(const ig_model *model);
int32_t ig_model_image_token_id(const ig_model *model);
int32_t ig_model_image_start_id(const ig_model *model);
int32_t ig_model_image_end_id(const ig_model *model);
/* The encoder's input for img: [3][S][S] floats (S: the encoder's image
 * size), as the Gemma 3 image processor makes it. */
ig_status ig_image_preprocess(const ig_model *model, const ig_image *img, float **pixels, int *size);
/* Runs the vision tower and the projector on img: out receives
 * ig_model_image_tokens() rows of n_embd floats (allocated, free()).
 * vision_out (optional) receives the tower's output [n_patches][width]. */
ig_status ig_image_embed(ig_model *model, const ig_image *img, int n_threads, float **out,
                         float **vision_out);
/* Expands each <start_of_image> of a tokenized prompt into what Gemma 3's
 * processor makes of it: "\n\n", <start_of_image>, ig_model_image_tokens()
 * placeholders, <end_of_image>, "\n\n". *out is malloc'ed; *n_images
 * counts the images the prompt now holds. */
ig_status ig_image_expand_prompt(const ig_model *model, const int32_t *ids, int n, int32_t **out, int *n_out,
                                 int *n_images);

void ig_model_free(ig_model *model);
const ig_hparams *ig_model_hparams(const ig_model *model);
/* Bytes of weight data the model maps (what a decode step must read). */
size_t ig_model_weight_bytes(const ig_model *model);
/* Tokenizer carried by the model file (GGUF metadata or tokenizer.json next
 * to an HF checkpoint); NULL when the model has none. Owned by the model. */
typedef struct ig_tokenizer ig_tokenizer;
const ig_tokenizer *ig_model_tokenizer(const ig_model *model);
/* Chat template text from the model (GGUF tokenizer.chat_template or
 * tokenizer_config.json), or NULL. */
const char *ig_model_chat_template(const ig_model *model);

/* ---- Context: KV cache for n_seq sequences + compute buffers ---------- */

typedef enum ig_kv_type {
    IG_KV_F32 = 0,
    IG_KV_F16 = 1,
} ig_kv_type;

typedef struct ig_context_params {
    int n_ctx;          /* max positions per sequence; 0 = min(train, 4096) */
    int n_seq;          /* independent sequences (slots); default 1 */
    int n_batch;        /* max tokens in one ig_decode call; default 512 */
    ig_kv_type kv_type; /* default IG_KV_F16 */
    int n_threads;      /* 0 = the model's setting */
    /* Observer of the weight matmuls' inputs (NULL: none, the default; the
     * CPU backend only, another backend refuses the context). After each
     * step of the forward pass that ran matmuls, called once per matmul, on
     * one thread while the others wait, with the weight's name and the
     * input rows exactly as the matmul read them (rows x width f32,
     * row-major). `ignis imatrix` collects its statistics through it. */
    void (*matmul_observer)(void *user, const char *weight, const float *x, int rows, int width);
    void *matmul_observer_user;
} ig_context_params;

ig_context_params ig_context_default_params(void);

typedef struct ig_context ig_context;

ig_status ig_context_create(ig_model *model, const ig_context_params *params, ig_context **out);
void ig_context_free(ig_context *ctx);
const ig_context_params *ig_context_params_get(const ig_context *ctx);

/* One forward step over a batch of tokens that may belong to several
 * sequences. For each sequence its tokens must appear in position order and
 * continue it exactly: pos == the sequence's current length, then +1, ...
 * want_logits[i] != 0 asks for the logits of token i (NULL: only the last
 * token of the batch). */
typedef struct ig_batch {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    const uint8_t *want_logits;
} ig_batch;

ig_status ig_decode(ig_context *ctx, const ig_batch *batch);

/* What a batch with images adds (see ig_image_embed), per token of the
 * batch: embd[i] != NULL replaces token i's embedding by these n_embd
 * floats (used as they are, not scaled); image[i] > 0 marks token i as part
 * of image number image[i]: the tokens of one image are consecutive, all
 * in this batch, and attend to each other in both directions (in every
 * layer, sliding-window ones included). Either array may be NULL. The CPU
 * backend only. */
typedef struct ig_batch_images {
    const float *const *embd;
    const int32_t *image;
} ig_batch_images;

ig_status ig_decode_images(ig_context *ctx, const ig_batch *batch, const ig_batch_images *images);
/* Evaluates tokens [0, n) of sequence seq (which must be empty) with the
 * images placed: each run of placeholder ids takes the next image's
 * embeddings, in order (images[k]: ig_image_embed's output). The runs must
 * match the images exactly. Chunks of at most the context's n_batch tokens,
 * never splitting an image. Logits are those of the last token. */
ig_status ig_decode_prompt_images(ig_context *ctx, int seq, const int32_t *tokens, int n,
                                  const float *const *images, int n_images);
/* Logits of the i-th requested output of the last ig_decode (n_vocab floats,
 * valid until the next ig_decode), or NULL if i is out of range. */
const float *ig_get_logits(const ig_context *ctx, int i);
int ig_n_outputs(const ig_context *ctx);

/* Memory and busy time of the device a context runs on, for monitoring.
 * Thread-safe: it may be called while another thread runs ig_decode on the
 * context. On the CPU backend the "device" is the host: allocated and used
 * are the weights plus the KV cache, the budget is the machine's physical
 * memory, and no busy time is measured. */
typedef struct ig_device_stats {
    ig_backend_kind backend;
    uint64_t weight_bytes;    /* the model's weights (as stored in the file) */
    uint64_t kv_bytes;        /* this context's KV cache */
    uint64_t allocated_bytes; /* device memory the engine allocated (every context of the model) */
    uint64_t used_bytes;      /* device-local memory in use by every process where the device
                                 reports it (memory_budget), else allocated_bytes */
    uint64_t budget_bytes;    /* device-local memory this process may use (memory_budget), else
                                 the device-local heaps' size */
    bool memory_budget;       /* used and budget come from VK_EXT_memory_budget */
    bool busy_measured;       /* busy_ns is measured (GPU timestamps around each step) */
    uint64_t busy_ns;         /* device time spent executing the engine's steps, since the
                                 model's device was made */
    bool device_lost;         /* the GPU reported VK_ERROR_DEVICE_LOST: nothing more will run */
} ig_device_stats;

ig_status ig_context_device_stats(const ig_context *ctx, ig_device_stats *out);

/* Number of positions cached for sequence seq. */
int ig_seq_len(const ig_context *ctx, int seq);
/* Forget everything of sequence seq. */
void ig_seq_clear(ig_context *ctx, int seq);
/* Keep only the first n positions of seq. Fails with IG_ERR_UNSUPPORTED when
 * a sliding-window ring has already overwritten what position n would need
 * (the caller then clears and re-feeds). */
ig_status ig_seq_truncate(ig_context *ctx, int seq, int n);

/* ---- Tokenizer -------------------------------------------------------- */

/* Encode UTF-8 text. add_bos prepends BOS; parse_special lets control-token
 * text such as "<start_of_turn>" map to its id. *ids is malloc'ed (free()). */
ig_status ig_tokenize(const ig_tokenizer *tok, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **ids, size_t *n_ids);
/* Decode ids to UTF-8 (malloc'ed, NUL-terminated). Control tokens render as
 * "" unless render_special. */
ig_status ig_detokenize(const ig_tokenizer *tok, const int32_t *ids, size_t n_ids,
                        bool render_special, char **text);
int ig_tokenizer_n_vocab(const ig_tokenizer *tok);
/* Piece text of one id (as stored, with U+2581 for spaces), or NULL. */
const char *ig_token_piece(const ig_tokenizer *tok, int32_t id);
/* Look up a token by its exact piece text; -1 if absent. */
int32_t ig_token_lookup(const ig_tokenizer *tok, const char *piece);
bool ig_token_is_control(const ig_tokenizer *tok, int32_t id);

/* Streaming detokenizer: feeds ids, emits only complete UTF-8. */
typedef struct ig_detok_stream ig_detok_stream;
ig_status ig_detok_stream_create(const ig_tokenizer *tok, ig_detok_stream **out);
void ig_detok_stream_free(ig_detok_stream *s);
/* Appends the text of id to out (NUL-terminated, at most cap-1 bytes);
 * returns the number of bytes written; an incomplete UTF-8 tail is held back. */
size_t ig_detok_stream_push(ig_detok_stream *s, int32_t id, char *out, size_t cap);
/* Flushes what is held back (invalid bytes become U+FFFD). */
size_t ig_detok_stream_flush(ig_detok_stream *s, char *out, size_t cap);

/* ---- Chat template ---------------------------------------------------- */

typedef struct ig_chat_message {
    const char *role; /* "system", "user", "assistant" (or "model") */
    const char *content;
} ig_chat_message;

/* Render Gemma 3 turns; the text starts with "<bos>" (tokenize it with
 * add_bos = false, parse_special = true). *out is malloc'ed. */
ig_status ig_chat_render(const ig_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                         char **out);

/* ---- Sampling --------------------------------------------------------- */

/* A sampler turns one row of logits into a token id. Order of operations
 * (as in llama.cpp / vLLM): logit bias, penalties over the last
 * penalty_last_n accepted tokens, then greedy argmax when temperature <= 0;
 * otherwise top-k, temperature softmax, top-p, min-p, renormalise, and a
 * draw from a seeded xoshiro256** stream. NaN logits are never chosen; ties
 * go to the lowest id (in argmax and at the top-k / top-p boundaries). Only
 * ids below n_vocab_real are ever returned. A sampler serves one sequence:
 * ig_sampler_sample / accept / reset must not run concurrently on it. */

typedef struct ig_logit_bias {
    int32_t token; /* must be < n_vocab_real; a repeated token: the last entry wins */
    float bias;    /* added to the logit; -inf or <= -100 bans the token */
} ig_logit_bias;

typedef struct ig_sampler_params {
    float temperature;       /* <= 0: greedy (must be finite) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off; smallest set with mass >= top_p (>= 1 token) */
    float min_p;             /* <= 0: off; drops tokens with p < min_p * p_max */
    float repeat_penalty;    /* 1: off; > 0. Positive logits / it, negative * it */
    float presence_penalty;  /* 0: off; subtracted once from each token in the window */
    float frequency_penalty; /* 0: off; subtracted count times */
    int penalty_last_n;      /* tokens of history the penalties see; -1 = all, 0 = off
                                (windows over 2^22 tokens count as all) */
    uint64_t seed;           /* used as is: equal seeds give equal draws */
    const ig_logit_bias *logit_bias; /* copied by ig_sampler_create */
    size_t n_logit_bias;
} ig_sampler_params;

/* temperature 1, top_k 64, top_p 0.95, min_p 0 (Gemma 3's generation
 * config), no penalties (penalty_last_n 64), seed 0, no bias. */
ig_sampler_params ig_sampler_default_params(void);

typedef struct ig_sampler ig_sampler;
/* n_vocab_real: only ids below it are ever sampled. p NULL = defaults.
 * IG_ERR_INVALID_ARG for NaN/non-finite settings, repeat_penalty <= 0,
 * penalty_last_n < -1, or a logit_bias token outside [0, n_vocab_real). */
ig_status ig_sampler_create(const ig_sampler_params *p, int n_vocab_real, ig_sampler **out);
void ig_sampler_free(ig_sampler *s);
/* Picks a token from logits (n_vocab_real floats read, not modified; the
 * array may be longer). When every processed logit is -inf (all NaN, -inf or
 * banned) it returns the argmax of the raw logits, or 0. -1 only for NULL
 * arguments. Each call with temperature > 0 consumes one random draw (none
 * in that all -inf case). */
int32_t ig_sampler_sample(ig_sampler *s, const float *logits);
/* Records a token in the history the penalties look at (prompt and output);
 * ids outside [0, n_vocab_real) are ignored. */
void ig_sampler_accept(ig_sampler *s, int32_t token);
/* Forgets the history and rewinds the random stream to the seed. */
void ig_sampler_reset(ig_sampler *s);
/* Log-probability of every token: log-softmax of the logits after bias,
 * penalties and temperature (temperature <= 0 counts as 1), before top-k /
 * top-p / min-p; written into out (n_vocab_real floats; banned tokens get
 * -inf). Safe to call concurrently with other const calls. */
void ig_sampler_logprobs(const ig_sampler *s, const float *logits, float *out);
/* The k most likely tokens under ig_sampler_logprobs' distribution, best
 * first (ties: lower id first), into ids[k] / logprobs[k]. Tokens of zero
 * probability are left out. Returns the number written (<= k), or -1 for
 * bad arguments. O(n_vocab_real log k), no allocation. */
int ig_sampler_top_logprobs(const ig_sampler *s, const float *logits, int k, int32_t *ids,
                            float *logprobs);

/* Speculative decoding. ig_sampler_probs writes the final distribution
 * ig_sampler_sample draws from (after bias, penalties, temperature, top-k,
 * top-p, min-p; renormalised) into probs[n_vocab_real]: zero outside the
 * candidate set, one-hot on the chosen id when greedy or when every logit is
 * -inf. Returns the number of non-zero entries, -1 for NULL arguments. No
 * randomness is consumed. */
int ig_sampler_probs(ig_sampler *s, const float *logits, float *probs);
/* Verifies a drafted token against this distribution p with the
 * speculative-sampling rule, drawing from the sampler's random stream:
 * accept draft with probability min(1, p(draft) / q(draft)), else return a
 * draw from the normalised residual max(0, p - q). q is the drafter's
 * distribution (n_vocab_real floats) or NULL for a deterministic drafter
 * (q one-hot on draft: accept with probability p(draft), else draw from p
 * without draft). When greedy, the result is the argmax and *accepted says
 * whether it equals draft. The returned id is distributed exactly as
 * ig_sampler_sample's. draft < 0: a plain ig_sampler_sample. -1 for NULL
 * arguments. */
int32_t ig_sampler_verify(ig_sampler *s, const float *logits, int32_t draft, const float *q,
                          bool *accepted);

#ifdef __cplusplus
}
#endif
#endif /* IGNIS_H */
