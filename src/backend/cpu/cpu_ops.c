/* The CPU kernels of the graph ops: work split between the threads, the
 * arithmetic in the ISA's kernels (matmul*.c, attention*.c, ops*.c).
 *
 * Most ops are row-local: row t of their output depends only on row t of
 * their inputs (and on buffers completed by earlier steps). A run of them is
 * executed by each thread on its own range of rows, without barriers, and
 * may end with the quantization of the input of the next matmuls: the
 * thread quantizes the rows it has just produced. */
#include "backend/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

static int op_rows(const ig_cpu_exec *ex, const ig_op *op) {
    return op->on_outputs ? ex->step->n_out : ex->step->n_tokens;
}

bool ig_cpu_op_row_local(const ig_op *op) {
    switch (op->kind) {
    case IG_OP_EMBED:
    case IG_OP_RMSNORM:
    case IG_OP_ADD_RMSNORM:
    case IG_OP_ROPE:
    case IG_OP_KV_STORE:
    case IG_OP_GEGLU:
    case IG_OP_GATHER:
    case IG_OP_SOFTCAP: return true;
    default: return false;
    }
}

static void rows_embed(const ig_cpu_exec *ex, const ig_op *op, int64_t t0, int64_t t1) {
    const ig_tensor *w = op->w;
    const size_t row_bytes = w->nbytes / (size_t)w->ne[1];
    for (int64_t t = t0; t < t1; t++) {
        float *y = ex->buf[op->dst] + t * op->width;
        if (ex->step->embd && ex->step->embd[t]) { /* an image's embedding, as is */
            memcpy(y, ex->step->embd[t], (size_t)op->width * sizeof(float));
            continue;
        }
        ig_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)ex->step->tokens[t] * row_bytes,
                          y, op->width);
        for (int i = 0; i < op->width; i++) y[i] *= op->f0;
    }
}

static void rows_rmsnorm(const ig_cpu_exec *ex, const ig_op *op, int64_t t0, int64_t t1) {
    const int heads = op->n_heads > 0 ? op->n_heads : 1, d = op->width / heads;
    const float *src = ex->buf[op->src];
    float *dst = ex->buf[op->dst];
    for (int64_t r = t0 * heads; r < t1 * heads; r++)
        ex->isa->rmsnorm(src + r * d, dst + r * d, op->norm, d, op->f0, op->kind == IG_OP_ADD_RMSNORM);
}

/* NeoX RoPE of n_ops ops with the same base and scale (Q and K): the
 * angles of a token are computed once for all of them. */
static void rows_rope(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, int64_t t0, int64_t t1,
                      int ith) {
    const int hd = ops[0].width / ops[0].n_heads, half = hd / 2;
    if (t0 >= t1) return;
    float *cs = ex->scratch[ith].f; /* [half] cos, [half] sin, [half] inverse frequencies */
    float *inv = cs + 2 * half;
    for (int i = 0; i < half; i++) {
        /* As HF: inv_freq in f32, divided by the linear factor, times pos. */
        inv[i] = (1.0f / powf(ops[0].f0, (float)(2 * i) / (float)hd)) / ops[0].f1;
    }
    for (int64_t t = t0; t < t1; t++) {
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
    if (type == IG_KV_F16) ex->isa->to_f16(src, (uint16_t *)base + index * (size_t)n, n);
    else memcpy((float *)base + index * (size_t)n, src, (size_t)n * sizeof(float));
}

static void rows_kv_store(const ig_cpu_exec *ex, const ig_op *op, int64_t t0, int64_t t1) {
    const ig_kv_cache *kv = ex->kv;
    const ig_kv_layer *L = &kv->layers[op->layer];
    for (int64_t t = t0; t < t1; t++) {
        size_t slot = (size_t)ex->step->seq[t] * (size_t)L->cap + (size_t)(ex->step->pos[t] % L->cap);
        store_row(ex, kv->type, L->k, slot, ex->buf[IG_BUF_K] + t * kv->k_dim, kv->k_dim);
        store_row(ex, kv->type, L->v, slot, ex->buf[IG_BUF_V] + t * kv->v_dim, kv->v_dim);
    }
}

static void rows_geglu(const ig_cpu_exec *ex, const ig_op *op, int64_t t0, int64_t t1) {
    if (t0 < t1)
        ex->isa->geglu(ex->buf[op->dst] + t0 * op->width, ex->buf[op->src] + t0 * op->width,
                       (t1 - t0) * op->width);
}

static void rows_gather(const ig_cpu_exec *ex, const ig_op *op, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; j++)
        memcpy(ex->buf[op->dst] + j * op->width,
               ex->buf[op->src] + (int64_t)ex->step->out_idx[j] * op->width,
               (size_t)op->width * sizeof(float));
}

static void rows_softcap(const ig_cpu_exec *ex, const ig_op *op, int64_t t0, int64_t t1) {
    float *x = ex->buf[op->dst];
    for (int64_t i = t0 * op->width; i < t1 * op->width; i++) x[i] = op->f0 * tanhf(x[i] / op->f0);
}

/* Row-local ops [0, n_ops) on rows [t0, t1). */
static void run_rows(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, int64_t t0, int64_t t1,
                     int ith) {
    for (int i = 0; i < n_ops; i++) {
        const ig_op *op = &ops[i];
        switch (op->kind) {
        case IG_OP_EMBED: rows_embed(ex, op, t0, t1); break;
        case IG_OP_RMSNORM:
        case IG_OP_ADD_RMSNORM: rows_rmsnorm(ex, op, t0, t1); break;
        case IG_OP_ROPE: {
            int n = 1;
            while (i + n < n_ops && ops[i + n].kind == IG_OP_ROPE && ops[i + n].f0 == op->f0 &&
                   ops[i + n].f1 == op->f1 && ops[i + n].width / ops[i + n].n_heads == op->width / op->n_heads)
                n++;
            rows_rope(ex, op, n, t0, t1, ith);
            i += n - 1;
        } break;
        case IG_OP_KV_STORE: rows_kv_store(ex, op, t0, t1); break;
        case IG_OP_GEGLU: rows_geglu(ex, op, t0, t1); break;
        case IG_OP_GATHER: rows_gather(ex, op, t0, t1); break;
        case IG_OP_SOFTCAP: rows_softcap(ex, op, t0, t1); break;
        default: break;
        }
    }
}

/* Thread ith's rows of n: whole groups of 16 when the matmuls that follow
 * use the groups layout (each thread quantizes whole groups). */
static void split_rows(int n, bool grouped, int ith, int nth, int64_t *b, int64_t *e) {
    if (grouped) {
        ig_split_range((n + IG_MM_GROUP - 1) / IG_MM_GROUP, ith, nth, b, e);
        *b *= IG_MM_GROUP;
        *e = IG_MIN(*e * IG_MM_GROUP, n);
        *b = IG_MIN(*b, n);
    } else {
        ig_split_range(n, ith, nth, b, e);
    }
}

/* Rows per chunk of the dot phase: small enough that both threads stay busy
 * to the end (chunks are claimed dynamically), large enough to amortize the
 * claim; a multiple of 16 (the row tiles of the kernels), of 32 when not
 * grouped (the f32 panels of the AVX-512 float kernels). */
static int64_t chunk_rows(int64_t rows, int nth, bool grouped) {
    if (grouped) return 16;
    int64_t c = rows / ((int64_t)nth * 8);
    c = (c + 31) & ~(int64_t)31;
    return IG_MAX(32, IG_MIN(c, 512));
}

void ig_cpu_matmuls(const ig_cpu_exec *ex, const ig_op *pre, int n_pre, const ig_op *ops, int n_ops,
                    atomic_int *next, int ith, int nth) {
    const int n = op_rows(ex, &ops[0]);
    if (n == 0) return;
    const ig_tensor *w0 = ops[0].w;
    const ig_act_kind kind = ig_mm_act_kind(w0->type);
    const int64_t k = w0->ne[0];
    const float *x = ex->buf[ops[0].src];
    const bool grouped = ig_mm_use_groups(ex->isa, w0->type, n);
    size_t stride = 0;
    if (kind != IG_ACT_F32 || n_pre > 0) {
        int64_t b, e;
        split_rows(n, grouped, ith, nth, &b, &e);
        run_rows(ex, pre, n_pre, b, e, ith);
        if (kind != IG_ACT_F32) {
            stride = grouped ? ig_mm_group_stride(kind, k) : ig_mm_row_stride(kind, k);
            ig_mm_quantize(ex->isa, kind, x, k, k, n, (int)b, (int)e, ex->act, stride, grouped,
                           ex->scratch[ith].tmp);
        }
        ig_threadpool_barrier(ex->pool);
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
        ig_mm_matmul(ex->isa, &m, c * cr, IG_MIN(rows, (c + 1) * cr), ex->scratch[ith].mm);
    }
}

/* Attention in blocks of query rows sharing a KV head and a sequence: the
 * heads of a GQA group for up to 16 / group consecutive tokens (fewer, or a
 * part of the group, when that leaves a thread idle). Blocks are claimed
 * dynamically, latest tokens (the most keys) first. */
static void op_attention(const ig_cpu_exec *ex, const ig_op *op, atomic_int *next, int ith,
                         int nth) {
    (void)ith;
    const ig_kv_cache *kv = ex->kv;
    const ig_kv_layer *L = &kv->layers[op->layer];
    const int hd = kv->head_dim, hdv = kv->head_dim_v, n_head = op->n_heads;
    const int n_kv = kv->n_head_kv, group = n_head / n_kv;
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
                int lo = L->window ? IG_MAX(0, p - L->window + 1) : 0, hi = p;
                if (ex->step->img_lo && ex->step->img_lo[t] >= 0) { /* its whole image, both ways */
                    lo = IG_MIN(lo, ex->step->img_lo[t]);
                    hi = IG_MAX(hi, ex->step->img_hi[t]);
                }
                for (int h = h0; h < h1; h++) {
                    const int r = blk.n_rows++;
                    blk.q[r] = ex->buf[op->src] + (int64_t)t * n_head * hd + (int64_t)h * hd;
                    blk.o[r] = ex->buf[op->dst] + (int64_t)t * n_head * hdv + (int64_t)h * hdv;
                    blk.lo[r] = lo;
                    blk.hi[r] = hi;
                }
                blk.jlo = IG_MIN(blk.jlo, lo);
                blk.jhi = IG_MAX(blk.jhi, hi);
            }
            const size_t seq_off = (size_t)s * (size_t)L->cap;
            blk.k = (const uint8_t *)L->k + (seq_off * (size_t)kv->k_dim + (size_t)kvh * hd) * es;
            blk.v = (const uint8_t *)L->v + (seq_off * (size_t)kv->v_dim + (size_t)kvh * hdv) * es;
            ex->isa->attn(&blk);
            t0 = t1;
        }
    }
}

void ig_cpu_ops(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, atomic_int *next, int ith,
                int nth) {
    if (ops[0].kind == IG_OP_ATTENTION) {
        op_attention(ex, &ops[0], next, ith, nth);
        return;
    }
    int64_t b, e;
    split_rows(op_rows(ex, &ops[0]), false, ith, nth, &b, &e);
    run_rows(ex, ops, n_ops, b, e, ith);
}
