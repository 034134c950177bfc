/* Synthetic Gemma 3 models: a GGUF with random weights at the real shapes of
 * one of the five sizes (the published configurations of Gemma 3), laid out exactly as
 * llama.cpp's converter and quantizer write them (tensor names, metadata
 * keys, norms stored as 1+w in F32, tied embedding, no output.weight), so
 * that ignis and llama.cpp both load the same file. For benchmarks and
 * tests: the weights are random, the output is noise.
 *
 * Weights are drawn from a seeded PRNG, tensor by tensor (each tensor's
 * stream depends only on the seed and its name), with the scales of a real
 * checkpoint: matrices ~ N(0, 1/fan_in), the embedding ~ N(0, 1/H), norm
 * weights 1 + N(0, 0.1^2). No key records the attention scale: llama.cpp
 * derives 1/sqrt(n_embd/n_head) when n_layer == 62 (27B), else
 * 1/sqrt(key_length); when --layers gives a 27B-wide model another layer
 * count, attn_q_norm is centred on sqrt(168/128)^-1 instead of 1 so that
 * q.k is scaled as 1/sqrt(168) all the same. In the default (fast) mode quantized matrices
 * are random quantized blocks with finite fp16 scales whose values have
 * those standard deviations (uniform over the quantization levels, sign
 * balanced); "exact" mode draws floats and quantizes them with
 * ig_quantize_row instead (several times slower). */
#ifndef IG_SYNTH_H
#define IG_SYNTH_H

#include "model/gguf_write.h"

#include <stdio.h>

typedef enum ig_synth_ftype {
    IG_SYNTH_F16 = 0,    /* matrices F16 (llama.cpp file type 1) */
    IG_SYNTH_Q8_0 = 1,   /* matrices Q8_0 (file type 7) */
    IG_SYNTH_Q4_K_M = 2, /* llama.cpp's Q4_K_M recipe (file type 15) */
} ig_synth_ftype;

/* One Gemma 3 size. */
typedef struct ig_synth_config {
    const char *size;  /* "270m", "1b", "4b", "12b", "27b" */
    const char *label; /* "270M", ... */
    int n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim;
    int sliding_window, n_ctx_train;
    float rope_scale_global; /* linear factor of the global layers (1 = none) */
    int query_pre_attn_scalar; /* attention scale 1/sqrt(this) */
} ig_synth_config;

#define IG_SYNTH_N_VOCAB 262144

/* The config of a size name (case-insensitive), or NULL. */
const ig_synth_config *ig_synth_find_config(const char *size);
/* "f16", "q8_0", "q4_k_m" (case-insensitive); false if unknown. */
bool ig_synth_parse_ftype(const char *s, ig_synth_ftype *out);
const char *ig_synth_ftype_name(ig_synth_ftype t);
/* llama.cpp's general.file_type for the ftype. */
uint32_t ig_synth_file_type(ig_synth_ftype t);

typedef enum ig_synth_kind {
    IG_SYNTH_TOKEN_EMBD = 0,
    IG_SYNTH_ATTN_Q,
    IG_SYNTH_ATTN_K,
    IG_SYNTH_ATTN_V,
    IG_SYNTH_ATTN_OUTPUT,
    IG_SYNTH_FFN_GATE,
    IG_SYNTH_FFN_UP,
    IG_SYNTH_FFN_DOWN,
    IG_SYNTH_NORM, /* every 1-D norm weight: always F32 */
} ig_synth_kind;

/* Storage type of a tensor under ftype. For Q4_K_M (llama.cpp's
 * llama_tensor_get_type): the tied token_embd is Q6_K; attn_v and ffn_down
 * are Q6_K on layers i < L/8, i >= 7L/8 or (i - L/8) % 3 == 2, else Q4_K;
 * every other matrix Q4_K; then a row length ne0 that is not a multiple of
 * 256 falls back Q4_K -> Q5_0 and Q6_K -> Q8_0. */
ig_dtype ig_synth_tensor_type(ig_synth_ftype ftype, ig_synth_kind kind, int layer, int n_layer,
                              int64_t ne0);

typedef struct ig_synth_params {
    const char *size;        /* required: a name ig_synth_find_config knows */
    ig_synth_ftype ftype;
    int n_layer;             /* 0 = the size's own; else 1..IG_MAX_LAYERS */
    uint64_t seed;
    const char *vocab_from;  /* GGUF whose tokenizer.* keys are copied, or NULL
                                for a generated 262144-piece vocabulary */
    bool exact;              /* quantize drawn floats instead of random blocks */
    bool image_tokens;       /* with vocab_from: add <image_soft_token> if missing */
} ig_synth_params;

typedef void (*ig_synth_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct ig_synth ig_synth;

/* Builds the whole plan (metadata, tensor table; reads vocab_from) without
 * writing anything. */
ig_status ig_synth_create(const ig_synth_params *p, ig_synth **out);
void ig_synth_free(ig_synth *s);
/* Size of the file ig_synth_write will produce, in bytes. */
uint64_t ig_synth_file_size(const ig_synth *s);
uint64_t ig_synth_n_params(const ig_synth *s);
const ig_synth_config *ig_synth_get_config(const ig_synth *s); /* n_layer as overridden */
/* Called after each chunk of tensor data with the data bytes written so
 * far and in all (fn NULL: none). */
void ig_synth_set_progress(ig_synth *s, ig_synth_progress_fn fn, void *user);
/* Writes the file to fp (the caller opens and closes it); at most once. */
ig_status ig_synth_write(ig_synth *s, FILE *fp);

#endif
