/* The context internals shared by the engine and its backends. */
#ifndef IG_CONTEXT_H
#define IG_CONTEXT_H

#include "engine/backend.h"

struct ig_context {
    ig_model *model;
    ig_context_params params;
    ig_graph graph;
    ig_kv_cache kv;
    ig_backend *backend;
    ig_threadpool *pool;
    float *logits;     /* [logits_cap, n_vocab] */
    int logits_cap;
    const float *logits_out; /* what ig_get_logits reads: logits or a backend's rows */
    int n_outputs;
    /* scratch for the batch (positions checked, output indices) */
    int32_t *out_idx;
    int32_t *seq_next; /* per sequence: next expected position while checking a batch */
    int32_t *img_span; /* [2 * n_batch]: per token, the first and last position of its image (-1: none) */
};

/* Ensures the logits buffer holds n rows. */
ig_status ig_context_reserve_logits(ig_context *ctx, int n);

#endif
