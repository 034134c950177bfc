/* The CPU backend: activation buffers allocated once per context, and a
 * step executed as one thread-pool run with a barrier between ops. */
#include "backend/cpu/cpu_ops.h"

#include <stdlib.h>

typedef struct cpu_backend {
    float *buf[IG_BUF_COUNT];
    ig_cpu_scratch *scratch;
    int n_threads;
} cpu_backend;

static void run_graph(void *arg, int ith, int nth) {
    const ig_cpu_exec *ex = arg;
    const ig_graph *g = &ex->ctx->graph;
    for (int i = 0; i < g->n_ops; i++) {
        ig_cpu_op(ex, &g->ops[i], ith, nth);
        ig_threadpool_barrier(ex->ctx->pool);
    }
}

static ig_status cpu_compute(ig_backend *be, ig_context *ctx, const ig_step *step) {
    cpu_backend *cb = be->impl;
    ig_cpu_exec ex = {.ctx = ctx, .step = step, .scratch = cb->scratch};
    for (int i = 0; i < IG_BUF_COUNT; i++) ex.buf[i] = cb->buf[i];
    ex.buf[IG_BUF_LOGITS] = ctx->logits;
    ig_threadpool_run(ctx->pool, run_graph, &ex);
    return IG_OK;
}

static void cpu_destroy(ig_backend *be) {
    if (!be) return;
    cpu_backend *cb = be->impl;
    if (cb) {
        for (int i = 0; i < IG_BUF_COUNT; i++) ig_aligned_free(cb->buf[i]);
        if (cb->scratch)
            for (int i = 0; i < cb->n_threads; i++) ig_aligned_free(cb->scratch[i].f);
        free(cb->scratch);
        free(cb);
    }
    free(be);
}

static const ig_backend_ops cpu_ops = {
    .name = "cpu",
    .compute = cpu_compute,
    .destroy = cpu_destroy,
};

ig_status ig_backend_cpu_create(ig_context *ctx, ig_backend **out) {
    *out = NULL;
    ig_backend *be = ig_calloc_array(1, sizeof *be);
    cpu_backend *cb = ig_calloc_array(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return IG_ERR_NO_MEMORY;
    }
    be->ops = &cpu_ops;
    be->impl = cb;
    const ig_graph *g = &ctx->graph;
    const ig_hparams *hp = &ctx->model->hp;
    for (int i = 0; i < IG_BUF_COUNT; i++) {
        if (i == IG_BUF_LOGITS) continue; /* owned by the context */
        size_t elems;
        if (!ig_size_mul((size_t)ctx->params.n_batch, (size_t)g->buf_width[i], &elems) ||
            !ig_size_mul(elems, sizeof(float), &elems)) {
            cpu_destroy(be);
            return ig_fail(IG_ERR_NO_MEMORY, "activation buffer size overflows");
        }
        cb->buf[i] = ig_aligned_alloc(64, elems);
        if (!cb->buf[i]) {
            cpu_destroy(be);
            return IG_ERR_NO_MEMORY;
        }
    }
    /* Scratch: the widest dequantized row, or a row of attention scores. */
    size_t widest = (size_t)IG_MAX(hp->n_embd, hp->n_ff);
    widest = IG_MAX(widest, (size_t)hp->n_head * hp->head_dim_v);
    widest = IG_MAX(widest, (size_t)ctx->params.n_ctx);
    widest = IG_MAX(widest, (size_t)hp->head_dim * 2);
    cb->n_threads = ig_threadpool_size(ctx->pool);
    cb->scratch = ig_calloc_array((size_t)cb->n_threads, sizeof *cb->scratch);
    if (!cb->scratch) {
        cpu_destroy(be);
        return IG_ERR_NO_MEMORY;
    }
    for (int i = 0; i < cb->n_threads; i++) {
        cb->scratch[i].n = widest;
        cb->scratch[i].f = ig_aligned_alloc(64, widest * sizeof(float));
        if (!cb->scratch[i].f) {
            cpu_destroy(be);
            return IG_ERR_NO_MEMORY;
        }
    }
    *out = be;
    return IG_OK;
}
