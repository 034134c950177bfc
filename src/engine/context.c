/* Contexts: KV cache + compute graph + backend; ig_decode validates a batch
 * and hands it to the backend. */
#include "engine/context.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_context_params ig_context_default_params(void) {
    ig_context_params p = {0};
    p.n_ctx = 0;
    p.n_seq = 1;
    p.n_batch = 512;
    p.kv_type = IG_KV_F16;
    p.n_threads = 0;
    return p;
}

/* The model's device, made by its first context (contexts of one model are
 * created one at a time). */
static ig_status model_device(ig_model *model) {
    if (model->device) return IG_OK;
    switch (model->params.backend) {
    case IG_BACKEND_CPU: return ig_device_cpu_create(&model->device);
    case IG_BACKEND_VULKAN: {
#ifdef IGNIS_HAVE_VULKAN
        /* deterministic: the invariant kernels, before any tuning override */
        const char *tuning = model->device_tuning;
        char *spec = NULL;
        if (model->params.deterministic) {
            const size_t n = 16 + (tuning ? strlen(tuning) : 0);
            spec = ig_malloc(n);
            if (!spec) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
            snprintf(spec, n, "invariant=1%s%s", tuning && *tuning ? "," : "", tuning ? tuning : "");
            tuning = spec;
        }
        ig_status st = ig_device_vulkan_create(model->params.device, tuning, &model->device);
        free(spec);
        return st;
#else
        return ig_fail(IG_ERR_UNSUPPORTED, "this ignis was built without the Vulkan backend");
#endif
    }
    }
    return ig_fail(IG_ERR_INVALID_ARG, "unknown backend %d", (int)model->params.backend);
}

ig_status ig_context_create(ig_model *model, const ig_context_params *params, ig_context **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "ig_context_create: out is NULL");
    *out = NULL;
    if (!model) return ig_fail(IG_ERR_INVALID_ARG, "ig_context_create: model is NULL");
    ig_context_params p = params ? *params : ig_context_default_params();
    const ig_hparams *hp = &model->hp;
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_seq == 0) p.n_seq = 1;
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_ctx < 1 || p.n_ctx > (1 << 24))
        return ig_fail(IG_ERR_INVALID_ARG, "n_ctx %d out of range [1, %d]", p.n_ctx, 1 << 24);
    if (p.n_seq < 1 || p.n_seq > 4096)
        return ig_fail(IG_ERR_INVALID_ARG, "n_seq %d out of range [1, 4096]", p.n_seq);
    if (p.n_batch < 1 || p.n_batch > 65536)
        return ig_fail(IG_ERR_INVALID_ARG, "n_batch %d out of range [1, 65536]", p.n_batch);
    if (p.kv_type != IG_KV_F32 && p.kv_type != IG_KV_F16)
        return ig_fail(IG_ERR_INVALID_ARG, "unknown KV cache type %d", (int)p.kv_type);
    if (p.n_threads <= 0) p.n_threads = model->params.n_threads;
    if (p.n_threads <= 0) p.n_threads = 1;

    ig_context *ctx = ig_calloc_array(1, sizeof *ctx);
    if (!ctx) return IG_ERR_NO_MEMORY;
    ctx->model = model;
    ctx->params = p;
    ig_status st = ig_graph_build(model, &ctx->graph);
    if (st != IG_OK) goto fail;
    st = model_device(model);
    if (st != IG_OK) goto fail;
    /* A device backend keeps the KV cache in its memory: only the layout
     * and the bookkeeping are kept on the host then. */
    st = ig_kv_cache_init_ex(&ctx->kv, hp, p.kv_type, p.n_seq, p.n_ctx, p.n_batch, model->device->ops->host_kv);
    if (st != IG_OK) goto fail;
    ctx->out_idx = ig_calloc_array((size_t)p.n_batch, sizeof(int32_t));
    ctx->seq_next = ig_calloc_array((size_t)p.n_seq, sizeof(int32_t));
    ctx->img_span = ig_calloc_array(2 * (size_t)p.n_batch, sizeof(int32_t));
    if (!ctx->out_idx || !ctx->seq_next || !ctx->img_span) {
        st = IG_ERR_NO_MEMORY;
        goto fail;
    }
    st = ig_threadpool_create(p.n_threads, &ctx->pool);
    if (st != IG_OK) goto fail;
    if (p.matmul_observer && model->params.backend != IG_BACKEND_CPU) {
        st = ig_fail(IG_ERR_UNSUPPORTED, "a matmul observer needs the CPU backend");
        goto fail;
    }
    const ig_backend_desc desc = {.graph = &ctx->graph,
                                  .kv = &ctx->kv,
                                  .n_batch = p.n_batch,
                                  .pool = ctx->pool,
                                  .matmul_observer = p.matmul_observer,
                                  .matmul_observer_user = p.matmul_observer_user};
    st = model->device->ops->backend_create(model->device, &desc, &ctx->backend);
    if (st != IG_OK) goto fail;
    st = ig_context_reserve_logits(ctx, 1);
    if (st != IG_OK) goto fail;
    *out = ctx;
    return IG_OK;
fail:
    ig_context_free(ctx);
    return st;
}

void ig_context_free(ig_context *ctx) {
    if (!ctx) return;
    if (ctx->backend) ctx->backend->ops->destroy(ctx->backend);
    ig_threadpool_free(ctx->pool);
    ig_kv_cache_free(&ctx->kv);
    ig_graph_free(&ctx->graph);
    ig_aligned_free(ctx->logits);
    free(ctx->out_idx);
    free(ctx->seq_next);
    free(ctx->img_span);
    free(ctx);
}

const ig_context_params *ig_context_params_get(const ig_context *ctx) { return &ctx->params; }

ig_status ig_context_reserve_logits(ig_context *ctx, int n) {
    if (n <= ctx->logits_cap) return IG_OK;
    size_t elems;
    if (!ig_size_mul((size_t)n, (size_t)ctx->model->hp.n_vocab, &elems) ||
        !ig_size_mul(elems, sizeof(float), &elems))
        return ig_fail(IG_ERR_NO_MEMORY, "logits buffer size overflows");
    float *p = ig_aligned_alloc(64, elems);
    if (!p) return IG_ERR_NO_MEMORY;
    ig_aligned_free(ctx->logits);
    ctx->logits = p;
    ctx->logits_cap = n;
    return IG_OK;
}

ig_status ig_decode(ig_context *ctx, const ig_batch *b) { return ig_decode_images(ctx, b, NULL); }

/* The image spans of a batch: each image's tokens consecutive, of one
 * sequence, all in the batch. */
static ig_status image_spans(ig_context *ctx, const ig_batch *b, const int32_t *image) {
    int32_t *lo = ctx->img_span, *hi = ctx->img_span + b->n_tokens;
    for (int i = 0; i < b->n_tokens;) {
        lo[i] = hi[i] = -1;
        if (image[i] <= 0) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < b->n_tokens && image[j] == image[i]) {
            if (b->seq[j] != b->seq[i])
                return ig_fail(IG_ERR_INVALID_ARG, "image %d spans two sequences", image[i]);
            j++;
        }
        for (int k = j; k < b->n_tokens; k++)
            if (image[k] == image[i] && b->seq[k] == b->seq[i])
                return ig_fail(IG_ERR_INVALID_ARG, "the tokens of image %d are not consecutive", image[i]);
        for (int k = i; k < j; k++) {
            lo[k] = b->pos[i];
            hi[k] = b->pos[j - 1];
        }
        i = j;
    }
    return IG_OK;
}

ig_status ig_decode_images(ig_context *ctx, const ig_batch *b, const ig_batch_images *images) {
    if (!ctx || !b) return ig_fail(IG_ERR_INVALID_ARG, "ig_decode: NULL argument");
    const ig_context_params *p = &ctx->params;
    if (b->n_tokens < 1 || b->n_tokens > p->n_batch)
        return ig_fail(IG_ERR_INVALID_ARG, "batch of %d tokens (allowed 1..%d)", b->n_tokens, p->n_batch);
    if (!b->tokens || !b->pos || !b->seq)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_decode: batch arrays missing");
    const int n_vocab = ctx->model->hp.n_vocab;
    for (int s = 0; s < p->n_seq; s++) ctx->seq_next[s] = ctx->kv.seq_len[s];
    int n_out = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t tok = b->tokens[i], s = b->seq[i], pos = b->pos[i];
        if (tok < 0 || tok >= n_vocab)
            return ig_fail(IG_ERR_INVALID_ARG, "token id %d out of range [0, %d)", tok, n_vocab);
        if (s < 0 || s >= p->n_seq)
            return ig_fail(IG_ERR_INVALID_ARG, "sequence id %d out of range [0, %d)", s, p->n_seq);
        if (pos != ctx->seq_next[s])
            return ig_fail(IG_ERR_INVALID_ARG,
                           "token %d of sequence %d has position %d, expected %d", i, s, pos,
                           ctx->seq_next[s]);
        if (pos >= p->n_ctx)
            return ig_fail(IG_ERR_CONTEXT_FULL, "sequence %d would exceed the context of %d tokens",
                           s, p->n_ctx);
        ctx->seq_next[s]++;
        bool want = b->want_logits ? b->want_logits[i] != 0 : i == b->n_tokens - 1;
        if (want) ctx->out_idx[n_out++] = i;
    }
    const bool has_images = images && (images->embd || images->image);
    if (has_images && strcmp(ctx->backend->ops->name, "cpu") != 0)
        return ig_fail(IG_ERR_UNSUPPORTED, "the %s backend does not run image tokens (the CPU backend does)",
                       ctx->backend->ops->name);
    if (has_images && images->image) IG_TRY(image_spans(ctx, b, images->image));
    IG_TRY(ig_context_reserve_logits(ctx, n_out > 0 ? n_out : 1));
    ig_step step = {
        .n_tokens = b->n_tokens,
        .tokens = b->tokens,
        .pos = b->pos,
        .seq = b->seq,
        .n_out = n_out,
        .out_idx = ctx->out_idx,
        .embd = has_images ? images->embd : NULL,
        .img_lo = has_images && images->image ? ctx->img_span : NULL,
        .img_hi = has_images && images->image ? ctx->img_span + b->n_tokens : NULL,
    };
    ctx->n_outputs = 0;
    ctx->logits_out = ctx->logits;
    IG_TRY(ctx->backend->ops->compute(ctx->backend, &step, ctx->logits, &ctx->logits_out));
    for (int s = 0; s < p->n_seq; s++) {
        ctx->kv.seq_len[s] = ctx->seq_next[s];
        if (ctx->kv.seq_written[s] < ctx->seq_next[s]) ctx->kv.seq_written[s] = ctx->seq_next[s];
    }
    ctx->n_outputs = n_out;
    return IG_OK;
}

const float *ig_get_logits(const ig_context *ctx, int i) {
    if (!ctx || i < 0 || i >= ctx->n_outputs) return NULL;
    return ctx->logits_out + (size_t)i * (size_t)ctx->model->hp.n_vocab;
}

int ig_n_outputs(const ig_context *ctx) { return ctx ? ctx->n_outputs : 0; }

int ig_seq_len(const ig_context *ctx, int seq) {
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq) return 0;
    return ctx->kv.seq_len[seq];
}

void ig_seq_clear(ig_context *ctx, int seq) {
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq) return;
    ctx->kv.seq_len[seq] = 0;
    ctx->kv.seq_written[seq] = 0;
}

ig_status ig_seq_truncate(ig_context *ctx, int seq, int n) {
    if (!ctx || seq < 0 || seq >= ctx->params.n_seq)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_seq_truncate: bad sequence %d", seq);
    int len = ctx->kv.seq_len[seq];
    if (n < 0 || n > len)
        return ig_fail(IG_ERR_INVALID_ARG, "cannot truncate sequence %d of %d positions to %d", seq,
                       len, n);
    if (n == 0) {
        ig_seq_clear(ctx, seq);
        return IG_OK;
    }
    /* A ring of cap rows still holds position j iff j >= written - cap; the
     * next token at position n needs n - W + 1 .. n - 1. */
    int written = ctx->kv.seq_written[seq];
    for (int l = 0; l < ctx->kv.n_layer; l++) {
        const ig_kv_layer *L = &ctx->kv.layers[l];
        int oldest_needed = L->window ? IG_MAX(0, n - L->window + 1) : 0;
        if (oldest_needed < written - L->cap)
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "sequence %d: the sliding-window cache no longer holds position %d", seq,
                           oldest_needed);
    }
    ctx->kv.seq_len[seq] = n;
    return IG_OK;
}
