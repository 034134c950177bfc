/* ig_context_device_stats: what a context's device holds and how busy it
 * is, for monitoring (the server's /metrics, the end of `ignis run`). */
#include "engine/context.h"

#include <string.h>
#include <unistd.h>

/* The machine's physical memory in bytes, or 0 when unknown. */
static uint64_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    if ((uint64_t)pages > UINT64_MAX / (uint64_t)page) return UINT64_MAX;
    return (uint64_t)pages * (uint64_t)page;
}

ig_status ig_context_device_stats(const ig_context *ctx, ig_device_stats *out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "ig_context_device_stats: out is NULL");
    memset(out, 0, sizeof *out);
    if (!ctx) return ig_fail(IG_ERR_INVALID_ARG, "ig_context_device_stats: ctx is NULL");
    const ig_model *m = ctx->model;
    const ig_context_params *p = &ctx->params;
    out->backend = m->params.backend;
    out->weight_bytes = m->weight_bytes;
    out->kv_bytes = ig_kv_cache_bytes(&m->hp, p->kv_type, p->n_seq, p->n_ctx, p->n_batch);
    const ig_device *d = m->device;
    if (d && d->ops->stats) {
        d->ops->stats(d, out);
        return IG_OK;
    }
    /* the host: weights and cache are the memory that grows with the model */
    out->allocated_bytes = out->weight_bytes + out->kv_bytes;
    if (out->allocated_bytes < out->weight_bytes) out->allocated_bytes = UINT64_MAX;
    out->used_bytes = out->allocated_bytes;
    out->budget_bytes = physical_memory();
    return IG_OK;
}
