/* The context internals shared by the engine and its backends. */
#ifndef IG_CONTEXT_H
#define IG_CONTEXT_H

#include "engine/graph.h"
#include "engine/kv_cache.h"
#include "engine/threadpool.h"

typedef struct ig_backend ig_backend;

/* A compute backend runs the op list of a context. */
typedef struct ig_backend_ops {
    const char *name;
    /* Runs the whole graph for one step; leaves logits in ctx->logits, or
     * points ctx->logits_out at rows of its own that stay valid until the
     * next step (a mapped readback buffer: no copy). */
    ig_status (*compute)(ig_backend *be, ig_context *ctx, const ig_step *step);
    void (*destroy)(ig_backend *be);
} ig_backend_ops;

struct ig_backend {
    const ig_backend_ops *ops;
    void *impl;
};

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
};

ig_status ig_backend_cpu_create(ig_context *ctx, ig_backend **out);
#ifdef IGNIS_HAVE_VULKAN
ig_status ig_backend_vulkan_create(ig_context *ctx, ig_backend **out);
#endif

/* Ensures the logits buffer holds n rows. */
ig_status ig_context_reserve_logits(ig_context *ctx, int n);

#endif
