#include "engine/kv_cache.h"

#include <stdlib.h>
#include <string.h>

static int layer_cap(const ig_hparams *hp, int l, int n_ctx, int n_batch) {
    if (!hp->layer_is_swa[l] || hp->sliding_window <= 0) return n_ctx;
    long cap = (long)hp->sliding_window + n_batch - 1;
    return cap < n_ctx ? (int)cap : n_ctx;
}

size_t ig_kv_cache_bytes(const ig_hparams *hp, ig_kv_type type, int n_seq, int n_ctx, int n_batch) {
    size_t total = 0;
    size_t row = ((size_t)hp->n_head_kv * hp->head_dim + (size_t)hp->n_head_kv * hp->head_dim_v) *
                 ig_kv_elem_size(type);
    for (int l = 0; l < hp->n_layer; l++)
        total += row * (size_t)layer_cap(hp, l, n_ctx, n_batch) * (size_t)n_seq;
    return total;
}

ig_status ig_kv_cache_init(ig_kv_cache *kv, const ig_hparams *hp, ig_kv_type type, int n_seq,
                           int n_ctx, int n_batch) {
    return ig_kv_cache_init_ex(kv, hp, type, n_seq, n_ctx, n_batch, true);
}

ig_status ig_kv_cache_init_ex(ig_kv_cache *kv, const ig_hparams *hp, ig_kv_type type, int n_seq,
                              int n_ctx, int n_batch, bool host_data) {
    memset(kv, 0, sizeof *kv);
    kv->type = type;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->n_layer = hp->n_layer;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim = hp->head_dim;
    kv->head_dim_v = hp->head_dim_v;
    kv->k_dim = hp->n_head_kv * hp->head_dim;
    kv->v_dim = hp->n_head_kv * hp->head_dim_v;
    kv->seq_len = ig_calloc_array((size_t)n_seq, sizeof(int));
    kv->seq_written = ig_calloc_array((size_t)n_seq, sizeof(int));
    if (!kv->seq_len || !kv->seq_written) goto oom;
    size_t es = ig_kv_elem_size(type);
    for (int l = 0; l < hp->n_layer; l++) {
        ig_kv_layer *L = &kv->layers[l];
        L->cap = layer_cap(hp, l, n_ctx, n_batch);
        L->window = (hp->layer_is_swa[l] && hp->sliding_window > 0) ? hp->sliding_window : 0;
        size_t rows, kb, vb;
        if (!ig_size_mul((size_t)L->cap, (size_t)n_seq, &rows) ||
            !ig_size_mul(rows, (size_t)kv->k_dim * es, &kb) ||
            !ig_size_mul(rows, (size_t)kv->v_dim * es, &vb))
            goto oom;
        kv->bytes += kb + vb;
        if (!host_data) continue; /* the cache lives on a device */
        L->k = ig_aligned_alloc(64, kb);
        L->v = ig_aligned_alloc(64, vb);
        if (!L->k || !L->v) goto oom;
        /* Zero so that a (never expected) read of an unwritten row is finite. */
        memset(L->k, 0, kb);
        memset(L->v, 0, vb);
    }
    return IG_OK;
oom:
    ig_kv_cache_free(kv);
    return ig_fail(IG_ERR_NO_MEMORY, "cannot allocate the KV cache (%d sequences x %d positions)",
                   n_seq, n_ctx);
}

void ig_kv_cache_free(ig_kv_cache *kv) {
    for (int l = 0; l < IG_MAX_LAYERS; l++) {
        ig_aligned_free(kv->layers[l].k);
        ig_aligned_free(kv->layers[l].v);
        kv->layers[l].k = kv->layers[l].v = NULL;
    }
    free(kv->seq_len);
    free(kv->seq_written);
    kv->seq_len = kv->seq_written = NULL;
}
