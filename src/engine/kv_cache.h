/* The KV cache of a context: per layer, per sequence, a ring of `cap` rows.
 * Global layers keep the whole context (cap = n_ctx); sliding-window layers
 * keep cap = min(n_ctx, W + n_batch - 1) rows, so memory is bounded by the
 * window while a batch of up to n_batch new tokens can still see the W keys
 * before each of them. Position p of a sequence lives in row p % cap. K is
 * stored after QK-norm and RoPE, so rows never need re-rotation. */
#ifndef IG_KV_CACHE_H
#define IG_KV_CACHE_H

#include "model/model.h"

typedef struct ig_kv_layer {
    void *k;          /* [n_seq][cap][k_dim] of the cache type */
    void *v;          /* [n_seq][cap][v_dim] */
    int cap;
    int window;       /* 0 = global (no window) */
} ig_kv_layer;

typedef struct ig_kv_cache {
    ig_kv_type type;
    int n_seq, n_ctx, n_layer;
    int n_head_kv, head_dim, head_dim_v;
    int k_dim, v_dim; /* n_head_kv * head_dim (_v) */
    ig_kv_layer layers[IG_MAX_LAYERS];
    int *seq_len;     /* positions held per sequence */
    int *seq_written; /* highest position ever written + 1 since the last clear */
    size_t bytes;
} ig_kv_cache;

ig_status ig_kv_cache_init(ig_kv_cache *kv, const ig_hparams *hp, ig_kv_type type, int n_seq,
                           int n_ctx, int n_batch);
/* As ig_kv_cache_init; with host_data false the K/V arrays are not allocated
 * (k = v = NULL): a GPU backend keeps the cache in device memory and only
 * the layout (cap, window) and the per-sequence bookkeeping live here. */
ig_status ig_kv_cache_init_ex(ig_kv_cache *kv, const ig_hparams *hp, ig_kv_type type, int n_seq,
                              int n_ctx, int n_batch, bool host_data);
void ig_kv_cache_free(ig_kv_cache *kv);
/* Bytes the cache would take, without allocating. */
size_t ig_kv_cache_bytes(const ig_hparams *hp, ig_kv_type type, int n_seq, int n_ctx, int n_batch);
static inline size_t ig_kv_elem_size(ig_kv_type t) { return t == IG_KV_F16 ? 2 : 4; }

#endif
