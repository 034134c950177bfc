/* The CPU kernels of the graph ops: work split between the threads, the
 * arithmetic in the ISA's kernels (matmul*.c, attention*.c, ops*.c). */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

static int op_rows(const ig_cpu_exec *ex, const ig_op *op) {
    return op->on_outputs ? ex->step->n_out : ex->step->n_tokens;
}

static void op_embed(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    int64_t b, e;
    ig_split_range(ex->step->n_tokens, ith, nth, &b, &e);
    const ig_tensor *w = op->w;
    size_t row_bytes = w->nbytes / (size_t)w->ne[1];
    float *dst = ex->buf[op->dst];
    for (int64_t t = b; t < e; t++) {
        float *y = dst + t * op->width;
        ig_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)ex->step->tokens[t] * row_bytes,
                          y, op->width);
        for (int i = 0; i < op->width; i++) y[i] *= op->f0;
    }
}

static void op_rmsnorm(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    int heads = op->n_heads > 0 ? op->n_heads : 1;
    int d = op->width / heads;
    int64_t rows = (int64_t)op_rows(ex, op) * heads, b, e;
    ig_split_range(rows, ith, nth, &b, &e);
    const float *src = ex->buf[op->src];
    float *dst = ex->buf[op->dst];
    for (int64_t r = b; r < e; r++) ex->isa->rmsnorm(src + r * d, dst + r * d, op->norm, d, op->f0, false);
}

static void op_add_rmsnorm(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    int64_t b, e;
    ig_split_range(op_rows(ex, op), ith, nth, &b, &e);
    const int d = op->width;
    for (int64_t r = b; r < e; r++)
        ex->isa->rmsnorm(ex->buf[op->src] + r * d, ex->buf[op->dst] + r * d, op->norm, d, op->f0, true);
}

/* Rows per chunk of the dot phase: small enough that both threads stay busy
 * to the end (chunks are claimed dynamically), large enough to amortize the
 * claim; a multiple of 16 (the row tiles of the kernels). */
static int64_t chunk_rows(int64_t rows, int nth, bool grouped) {
    if (grouped) return 16;
    int64_t c = rows / ((int64_t)nth * 8);
    c = (c + 15) & ~(int64_t)15;
    return IG_MAX(16, IG_MIN(c, 512));
}

void ig_cpu_matmuls(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, atomic_int *next, int ith,
                    int nth) {
    const int n = op_rows(ex, &ops[0]);
    if (n == 0) return;
    const ig_tensor *w0 = ops[0].w;
    const ig_act_kind kind = ig_mm_act_kind(w0->type);
    const int64_t k = w0->ne[0];
    const float *x = ex->buf[ops[0].src];
    const bool grouped = ig_mm_use_groups(ex->isa, w0->type, n);
    size_t stride = 0;
    if (kind != IG_ACT_F32) {
        stride = grouped ? ig_mm_group_stride(kind, k) : ig_mm_row_stride(kind, k);
        int64_t b, e;
        if (grouped) {
            ig_split_range((n + IG_MM_GROUP - 1) / IG_MM_GROUP, ith, nth, &b, &e);
            b *= IG_MM_GROUP;
            e = IG_MIN(e * IG_MM_GROUP, n);
        } else {
            ig_split_range(n, ith, nth, &b, &e);
        }
        ig_mm_quantize(ex->isa, kind, x, k, k, n, (int)b, (int)e, ex->act, stride, grouped,
                       ex->scratch[ith].tmp);
        ig_threadpool_barrier(ex->ctx->pool);
    }
    int64_t chunks[4], total = 0;
    for (int i = 0; i < n_ops; i++) {
        const int64_t rows = ops[i].w->ne[1];
        chunks[i] = (rows + chunk_rows(rows, nth, grouped) - 1) / chunk_rows(rows, nth, grouped);
        total += chunks[i];
    }
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
        if (c >= total) break;
        int i = 0;
        while (c >= chunks[i]) c -= chunks[i++];
        const ig_op *op = &ops[i];
        const ig_tensor *w = op->w;
        const int64_t rows = w->ne[1], cr = chunk_rows(rows, nth, grouped);
        ig_mm m = {.type = w->type,
                   .w = w->data,
                   .row_bytes = w->nbytes / (size_t)rows,
                   .k = k,
                   .n = n,
                   .x = x,
                   .ldx = k,
                   .act = ex->act,
                   .act_stride = stride,
                   .grouped = grouped,
                   .y = ex->buf[op->dst],
                   .ldy = op->width};
        ex->isa->matmul(&m, c * cr, IG_MIN(rows, (c + 1) * cr), ex->scratch[ith].mm);
    }
}

/* NeoX RoPE of n_ops ops with the same base and scale (Q and K): the
 * angles of a token are computed once for all of them. */
static void op_rope(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, int ith, int nth) {
    const int hd = ops[0].width / ops[0].n_heads, half = hd / 2;
    int64_t b, e;
    ig_split_range(ex->step->n_tokens, ith, nth, &b, &e);
    if (b >= e) return;
    float *cs = ex->scratch[ith].f; /* [half] cos, [half] sin, [half] inverse frequencies */
    float *inv = cs + 2 * half;
    for (int i = 0; i < half; i++) {
        /* As HF: inv_freq in f32, divided by the linear factor, times pos. */
        inv[i] = (1.0f / powf(ops[0].f0, (float)(2 * i) / (float)hd)) / ops[0].f1;
    }
    for (int64_t t = b; t < e; t++) {
        const float p = (float)ex->step->pos[t];
        for (int i = 0; i < half; i++) {
            const float ang = p * inv[i];
            cs[i] = cosf(ang);
            cs[half + i] = sinf(ang);
        }
        for (int o = 0; o < n_ops; o++) {
            const ig_op *op = &ops[o];
            for (int h = 0; h < op->n_heads; h++) {
                float *x = ex->buf[op->dst] + t * op->width + (int64_t)h * hd;
                for (int i = 0; i < half; i++) {
                    const float a = x[i], c = x[i + half];
                    x[i] = a * cs[i] - c * cs[half + i];
                    x[i + half] = c * cs[i] + a * cs[half + i];
                }
            }
        }
    }
}

static void store_row(const ig_cpu_exec *ex, ig_kv_type type, void *base, size_t index,
                      const float *src, int n) {
    if (type == IG_KV_F16) {
        ex->isa->to_f16(src, (uint16_t *)base + index * (size_t)n, n);
    } else {
        memcpy((float *)base + index * (size_t)n, src, (size_t)n * sizeof(float));
    }
}

static void op_kv_store(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    const ig_kv_cache *kv = &ex->ctx->kv;
    const ig_kv_layer *L = &kv->layers[op->layer];
    int64_t b, e;
    ig_split_range(ex->step->n_tokens, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) {
        size_t slot = (size_t)ex->step->seq[t] * (size_t)L->cap + (size_t)(ex->step->pos[t] % L->cap);
        store_row(ex, kv->type, L->k, slot, ex->buf[IG_BUF_K] + t * kv->k_dim, kv->k_dim);
        store_row(ex, kv->type, L->v, slot, ex->buf[IG_BUF_V] + t * kv->v_dim, kv->v_dim);
    }
}

/* Attention in blocks of query rows sharing a KV head and a sequence: the
 * heads of a GQA group for up to 16 / group consecutive tokens (fewer, or a
 * part of the group, when that leaves a thread idle). Blocks are claimed
 * dynamically, latest tokens (the most keys) first. */
static void op_attention(const ig_cpu_exec *ex, const ig_op *op, atomic_int *next, int ith,
                         int nth) {
    (void)ith;
    const ig_hparams *hp = &ex->ctx->model->hp;
    const ig_kv_cache *kv = &ex->ctx->kv;
    const ig_kv_layer *L = &kv->layers[op->layer];
    const int hd = hp->head_dim, hdv = hp->head_dim_v, n_head = hp->n_head;
    const int n_kv = hp->n_head_kv, group = n_head / n_kv;
    const int n = ex->step->n_tokens;
    int hs = IG_MIN(group, IG_ATTN_MAX_ROWS);
    int bt = IG_MAX(1, IG_ATTN_MAX_ROWS / hs);
    for (;;) {
        const int64_t tasks = (int64_t)((n + bt - 1) / bt) * n_kv * ((group + hs - 1) / hs);
        if (tasks >= 2 * nth || (bt == 1 && hs == 1)) break;
        if (bt > 1) bt = (bt + 1) / 2;
        else if (tasks >= nth) break;
        else hs = (hs + 1) / 2;
    }
    const int n_tb = (n + bt - 1) / bt, n_hs = (group + hs - 1) / hs;
    const int64_t tasks = (int64_t)n_tb * n_kv * n_hs;
    const size_t es = ig_kv_elem_size(kv->type);
    ig_attn_block blk;
    blk.cap = L->cap;
    blk.f16 = kv->type == IG_KV_F16;
    blk.hd = hd;
    blk.hdv = hdv;
    blk.kstride = (size_t)kv->k_dim;
    blk.vstride = (size_t)kv->v_dim;
    blk.scale = op->f0;
    blk.softcap = op->f1;
    blk.scratch = ex->scratch[ith].f;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
        if (c >= tasks) break;
        const int tb = n_tb - 1 - (int)(c / ((int64_t)n_kv * n_hs));
        const int kvh = (int)(c / n_hs % n_kv), h0 = kvh * group + (int)(c % n_hs) * hs;
        const int h1 = IG_MIN(h0 + hs, (kvh + 1) * group);
        const int t_end = IG_MIN(n, (tb + 1) * bt);
        for (int t0 = tb * bt; t0 < t_end;) {
            const int s = ex->step->seq[t0];
            int t1 = t0 + 1;
            while (t1 < t_end && ex->step->seq[t1] == s) t1++;
            blk.n_rows = 0;
            blk.jlo = INT32_MAX;
            blk.jhi = -1;
            for (int t = t0; t < t1; t++) {
                const int p = ex->step->pos[t];
                const int lo = L->window ? IG_MAX(0, p - L->window + 1) : 0;
                for (int h = h0; h < h1; h++) {
                    const int r = blk.n_rows++;
                    blk.q[r] = ex->buf[op->src] + (int64_t)t * n_head * hd + (int64_t)h * hd;
                    blk.o[r] = ex->buf[op->dst] + (int64_t)t * n_head * hdv + (int64_t)h * hdv;
                    blk.lo[r] = lo;
                    blk.hi[r] = p;
                }
                blk.jlo = IG_MIN(blk.jlo, lo);
                blk.jhi = IG_MAX(blk.jhi, p);
            }
            const size_t seq_off = (size_t)s * (size_t)L->cap;
            blk.k = (const uint8_t *)L->k + (seq_off * (size_t)kv->k_dim + (size_t)kvh * hd) * es;
            blk.v = (const uint8_t *)L->v + (seq_off * (size_t)kv->v_dim + (size_t)kvh * hdv) * es;
            ex->isa->attn(&blk);
            t0 = t1;
        }
    }
}

static void op_geglu(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    const int64_t n = (int64_t)op_rows(ex, op) * op->width;
    int64_t b, e;
    ig_split_range((n + 15) / 16, ith, nth, &b, &e);
    b *= 16;
    e = IG_MIN(e * 16, n);
    if (b < e) ex->isa->geglu(ex->buf[op->dst] + b, ex->buf[op->src] + b, e - b);
}

static void op_gather(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    int64_t b, e;
    ig_split_range(ex->step->n_out, ith, nth, &b, &e);
    for (int64_t j = b; j < e; j++)
        memcpy(ex->buf[op->dst] + j * op->width,
               ex->buf[op->src] + (int64_t)ex->step->out_idx[j] * op->width,
               (size_t)op->width * sizeof(float));
}

static void op_softcap(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth) {
    int64_t n = (int64_t)op_rows(ex, op) * op->width, b, e;
    ig_split_range(n, ith, nth, &b, &e);
    float *x = ex->buf[op->dst];
    for (int64_t i = b; i < e; i++) x[i] = op->f0 * tanhf(x[i] / op->f0);
}

void ig_cpu_op(const ig_cpu_exec *ex, const ig_op *op, atomic_int *next, int ith, int nth) {
    switch (op->kind) {
    case IG_OP_EMBED: op_embed(ex, op, ith, nth); break;
    case IG_OP_RMSNORM: op_rmsnorm(ex, op, ith, nth); break;
    case IG_OP_MATMUL: break; /* grouped and run by ig_cpu_matmuls */
    case IG_OP_ROPE: op_rope(ex, op, 1, ith, nth); break;
    case IG_OP_KV_STORE: op_kv_store(ex, op, ith, nth); break;
    case IG_OP_ATTENTION: op_attention(ex, op, next, ith, nth); break;
    case IG_OP_GEGLU: op_geglu(ex, op, ith, nth); break;
    case IG_OP_ADD_RMSNORM: op_add_rmsnorm(ex, op, ith, nth); break;
    case IG_OP_GATHER: op_gather(ex, op, ith, nth); break;
    case IG_OP_SOFTCAP: op_softcap(ex, op, ith, nth); break;
    }
}

void ig_cpu_ops(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, atomic_int *next, int ith,
                int nth) {
    if (ops[0].kind == IG_OP_ROPE) {
        op_rope(ex, ops, n_ops, ith, nth);
        return;
    }
    for (int i = 0; i < n_ops; i++) ig_cpu_op(ex, &ops[i], next, ith, nth);
}
