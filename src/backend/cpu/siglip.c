/* The vision tower on the CPU: SigLIP encoder (patch embedding, pre-norm
 * layers with bidirectional attention and a GELU-tanh MLP, final
 * LayerNorm), then Gemma 3's projector (average pooling, RMSNorm with
 * 1 + w, projection).
 *
 * The linear layers run on the CPU backend's matmul kernels (matmul.h), as
 * the text model's prefill: float weights with f32 activations, quantized
 * weights with activations quantized once per matmul. The tokens are cut
 * into chunks of CHUNK that the threads take in turn, so that a chunk's
 * activations stay in the core's cache while the weights stream past; the
 * bias, GELU and residual are applied to a chunk as soon as it is done.
 * The attention is tiled with an online softmax in f32, every key visible
 * (attention.h: the AVX2 encoder kernel, else the backend's block kernel).
 * LayerNorm and RMSNorm statistics are in double. One thread-pool run per
 * layer, its phases separated by barriers. */
#include "backend/cpu/matmul.h"
#include "engine/threadpool.h"
#include "quant/quant.h"
#include "vision/vision.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 256 /* tokens per matmul work item (a multiple of IG_MM_GROUP) */

enum { EPI_BIAS, EPI_GELU, EPI_RESIDUAL };

/* One linear layer y[n][out] = x[n][in] · wᵀ + b, then the epilogue. */
typedef struct lin_op {
    ig_dtype type;
    const uint8_t *w;
    size_t row_bytes;
    const float *b, *x;
    float *y, *res; /* EPI_RESIDUAL: res += y + b */
    int in, out, epi;
    atomic_int next; /* next chunk */
} lin_op;

typedef struct enc_run {
    const ig_mm_isa *isa;
    const ig_vision *v;
    ig_threadpool *pool;
    int N, n_chunks;
    int n_split; /* row blocks per chunk: > 1 when there are too few chunks to share */
    uint8_t *act;           /* quantized activations of the current matmul */
    uint8_t **scratch;      /* per thread: matmul scratch, then attention scratch */
    uint8_t **tmp;          /* per thread: one quantized row (grouped layout) */
    float *ones;            /* [max(width, n_ff)] for the GELU */
    float *x, *h, *q, *k, *val, *ff;
    const ig_vision_layer *L;
    lin_op ops[6];
    atomic_int attn_next, pack_next;
} enc_run;

static void layernorm_rows(const float *x, float *y, int D, const float *w, const float *b, float eps, int t0,
                           int t1) {
    for (int t = t0; t < t1; t++) {
        const float *xr = x + (size_t)t * D;
        float *yr = y + (size_t)t * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++) mean += xr[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        const float inv = (float)(1.0 / sqrt(var + eps));
        for (int i = 0; i < D; i++) yr[i] = (float)(xr[i] - mean) * inv * w[i] + b[i];
    }
}

static void ln_phase(enc_run *r, const float *x, float *y, const float *w, const float *b, int ith, int nth) {
    int64_t t0, t1;
    ig_split_range(r->N, ith, nth, &t0, &t1);
    layernorm_rows(x, y, r->v->width, w, b, r->v->eps, (int)t0, (int)t1);
}

static bool op_grouped(const enc_run *r, const lin_op *op) { return ig_mm_use_groups(r->isa, op->type, r->N); }

static size_t op_stride(const enc_run *r, const lin_op *op) {
    const ig_act_kind kind = ig_mm_act_kind(op->type);
    return op_grouped(r, op) ? ig_mm_group_stride(kind, op->in) : ig_mm_row_stride(kind, op->in);
}

/* Quantizes op's input for its weights (nothing for float weights); the
 * threads split the token groups. Ends with a barrier when it did work. */
static void quant_phase(enc_run *r, const lin_op *op, int ith, int nth) {
    const ig_act_kind kind = ig_mm_act_kind(op->type);
    if (kind == IG_ACT_F32) return;
    const bool grouped = op_grouped(r, op);
    const int per = grouped ? IG_MM_GROUP : 1, units = (r->N + per - 1) / per;
    int64_t u0, u1;
    ig_split_range(units, ith, nth, &u0, &u1);
    const int t0 = (int)u0 * per, t1 = (int)IG_MIN((int64_t)r->N, u1 * per);
    if (t0 < t1)
        ig_mm_quantize(r->isa, kind, op->x, op->in, op->in, r->N, t0, t1, r->act, op_stride(r, op), grouped,
                       r->tmp[ith]);
    ig_threadpool_barrier(r->pool);
}

/* The chunks of op, taken in turn; no barrier. */
static void lin_phase(enc_run *r, lin_op *op, int ith) {
    const ig_act_kind kind = ig_mm_act_kind(op->type);
    const bool grouped = kind != IG_ACT_F32 && op_grouped(r, op);
    const size_t stride = kind != IG_ACT_F32 ? op_stride(r, op) : 0;
    const int rows = (op->out + r->n_split - 1) / r->n_split, rb = (rows + 15) & ~15;
    for (;;) {
        const int it = atomic_fetch_add_explicit(&op->next, 1, memory_order_relaxed);
        if (it >= r->n_chunks * r->n_split) break;
        const int c = it / r->n_split, r0 = (it % r->n_split) * rb, r1 = IG_MIN(op->out, r0 + rb);
        if (r0 >= r1) continue;
        const int t0 = c * CHUNK, n = IG_MIN(CHUNK, r->N - t0);
        ig_mm m = {.type = op->type,
                   .w = op->w,
                   .row_bytes = op->row_bytes,
                   .k = op->in,
                   .n = n,
                   .x = op->x + (size_t)t0 * op->in,
                   .ldx = op->in,
                   .act = kind == IG_ACT_F32 ? NULL
                                             : r->act + (grouped ? (size_t)(t0 / IG_MM_GROUP) : (size_t)t0) * stride,
                   .act_stride = stride,
                   .grouped = grouped,
                   .y = op->y + (size_t)t0 * op->out,
                   .ldy = op->out};
        ig_mm_matmul(r->isa, &m, r0, r1, r->scratch[ith]);
        for (int t = 0; t < n; t++) {
            float *y = op->y + (size_t)(t0 + t) * op->out;
            if (op->epi == EPI_RESIDUAL) {
                float *x = op->res + (size_t)(t0 + t) * op->out;
                for (int o = r0; o < r1; o++) x[o] += y[o] + (op->b ? op->b[o] : 0.0f);
            } else if (op->b) {
                for (int o = r0; o < r1; o++) y[o] += op->b[o];
            }
            if (op->epi == EPI_GELU) r->isa->geglu(y + r0, r->ones, r1 - r0);
        }
    }
}

/* Attention over every patch, in items of query rows of one head, head by
 * head (so that a head's keys and values stay in the shared cache): the
 * AVX2 encoder kernel (blocks of IG_VATTN_BQ rows) where it applies, else
 * the backend's attention block (16 rows). */
static bool use_vattn(const ig_mm_isa *isa, int hd) {
#if defined(__x86_64__) || defined(__i386__)
    return hd % 8 == 0 && (isa == &ig_mm_isa_avx2 || isa == &ig_mm_isa_avx512);
#else
    (void)isa;
    (void)hd;
    return false;
#endif
}

static int attn_rows_per_item(const ig_mm_isa *isa, int hd) {
    return use_vattn(isa, hd) ? IG_VATTN_BQ : IG_ATTN_MAX_ROWS;
}

/* Floats of the packed keys and values of every head (0: no packing). */
static size_t attn_pack_floats(const ig_mm_isa *isa, int n, int D, int nh) {
#if defined(__x86_64__) || defined(__i386__)
    const int hd = D / nh;
    if (use_vattn(isa, hd)) return 2 * (size_t)nh * ig_vattn_head_floats(n, hd);
#endif
    (void)isa, (void)n, (void)D, (void)nh;
    return 0;
}

/* Packs key/value tile `item` (head-major) into pack (the keys of every
 * head, then the values). */
static void attn_pack(const float *k, const float *v, int n, int D, int nh, int item, float *pack) {
#if defined(__x86_64__) || defined(__i386__)
    const int hd = D / nh, nt = ig_vattn_tiles(n), h = item / nt, t = item % nt;
    const size_t hf = ig_vattn_head_floats(n, hd);
    ig_vattn_pack_avx2(k + (size_t)h * hd, v + (size_t)h * hd, (size_t)D, n, hd, t, t + 1, pack + (size_t)h * hf,
                       pack + (size_t)(nh + h) * hf);
#else
    (void)k, (void)v, (void)n, (void)D, (void)nh, (void)item, (void)pack;
#endif
}

static void attn_rows(const ig_mm_isa *isa, const float *q, const float *k, const float *v, const float *pack,
                      float *o, int n, int D, int nh, int item, float *scratch) {
    const int hd = D / nh, per = attn_rows_per_item(isa, hd), per_head = (n + per - 1) / per;
    const int h = item / per_head, t0 = (item % per_head) * per;
#if defined(__x86_64__) || defined(__i386__)
    if (use_vattn(isa, hd)) {
        const size_t hf = ig_vattn_head_floats(n, hd);
        const ig_vattn va = {.q = q + (size_t)h * hd,
                             .o = o + (size_t)h * hd,
                             .stride = (size_t)D,
                             .kt = pack + (size_t)h * hf,
                             .vp = pack + (size_t)(nh + h) * hf,
                             .n = n,
                             .hd = hd,
                             .scale = 1.0f / sqrtf((float)hd)};
        ig_vattn_rows_avx2(&va, t0, IG_MIN(per, n - t0), scratch);
        return;
    }
#endif
    ig_attn_block a = {0};
    a.n_rows = IG_MIN(per, n - t0);
    for (int i = 0; i < a.n_rows; i++) {
        a.q[i] = q + (size_t)(t0 + i) * D + (size_t)h * hd;
        a.o[i] = o + (size_t)(t0 + i) * D + (size_t)h * hd;
        a.lo[i] = 0;
        a.hi[i] = n - 1;
    }
    a.jlo = 0;
    a.jhi = n - 1;
    a.k = k + (size_t)h * hd;
    a.v = v + (size_t)h * hd;
    a.kstride = a.vstride = (size_t)D;
    a.cap = n;
    a.f16 = false;
    a.hd = a.hdv = hd;
    a.scale = 1.0f / sqrtf((float)hd);
    a.softcap = 0.0f;
    a.scratch = scratch;
    isa->attn(&a);
    (void)pack; /* the packed tiles serve the AVX2 kernel only */
}

static int attn_items(const ig_mm_isa *isa, int n, int D, int nh) {
    const int per = attn_rows_per_item(isa, D / nh);
    return nh * ((n + per - 1) / per);
}

static size_t attn_scratch_bytes(int hd) {
    return sizeof(float) * IG_MAX(ig_attn_scratch_floats(hd, hd), ig_vattn_scratch_floats(hd));
}

static void layer_task(void *arg, int ith, int nth) {
    enc_run *r = arg;
    const ig_vision *v = r->v;
    const ig_vision_layer *L = r->L;
    ln_phase(r, r->x, r->h, L->ln1_w, L->ln1_b, ith, nth);
    ig_threadpool_barrier(r->pool);
    /* q, k, v share one input: quantized once when their types agree */
    const bool same = r->ops[0].type == r->ops[1].type && r->ops[1].type == r->ops[2].type;
    for (int i = 0; i < 3; i++) {
        if (i == 0 || !same) quant_phase(r, &r->ops[i], ith, nth);
        lin_phase(r, &r->ops[i], ith);
        if (!same) ig_threadpool_barrier(r->pool);
    }
    if (same) ig_threadpool_barrier(r->pool);
    if (attn_pack_floats(r->isa, r->N, v->width, v->n_head)) { /* keys and values packed into ff */
        const int tiles = v->n_head * ig_vattn_tiles(r->N);
        for (;;) {
            const int it = atomic_fetch_add_explicit(&r->pack_next, 1, memory_order_relaxed);
            if (it >= tiles) break;
            attn_pack(r->k, r->val, r->N, v->width, v->n_head, it, r->ff);
        }
        ig_threadpool_barrier(r->pool);
    }
    const int items = attn_items(r->isa, r->N, v->width, v->n_head);
    for (;;) { /* into h (free since q, k, v) */
        const int it = atomic_fetch_add_explicit(&r->attn_next, 1, memory_order_relaxed);
        if (it >= items) break;
        attn_rows(r->isa, r->q, r->k, r->val, r->ff, r->h, r->N, v->width, v->n_head, it,
                  (float *)(void *)r->scratch[ith]);
    }
    ig_threadpool_barrier(r->pool);
    quant_phase(r, &r->ops[3], ith, nth); /* out projection: h -> q, x += q + b */
    lin_phase(r, &r->ops[3], ith);
    ig_threadpool_barrier(r->pool);
    ln_phase(r, r->x, r->h, L->ln2_w, L->ln2_b, ith, nth);
    ig_threadpool_barrier(r->pool);
    quant_phase(r, &r->ops[4], ith, nth);
    lin_phase(r, &r->ops[4], ith);
    ig_threadpool_barrier(r->pool);
    quant_phase(r, &r->ops[5], ith, nth);
    lin_phase(r, &r->ops[5], ith);
}

static lin_op tensor_op(const ig_tensor *w, const float *b, const float *x, float *y, float *res, int epi) {
    lin_op op = {.type = w->type,
                 .w = w->data,
                 .row_bytes = w->nbytes / (size_t)w->ne[1],
                 .b = b,
                 .x = x,
                 .y = y,
                 .res = res,
                 .in = (int)w->ne[0],
                 .out = (int)w->ne[1],
                 .epi = epi};
    atomic_init(&op.next, 0);
    return op;
}

/* A plain f32 matmul of the tower's own copies (patch kernel, projection). */
typedef struct f32_mm {
    const ig_mm_isa *isa;
    const float *w, *x;
    float *y;
    int n, in, out;
    uint8_t **scratch;
    atomic_int next;
} f32_mm;

static void f32_task(void *arg, int ith, int nth) {
    (void)nth;
    f32_mm *a = arg;
    const int chunks = (a->n + CHUNK - 1) / CHUNK;
    for (;;) {
        const int c = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (c >= chunks) break;
        const int t0 = c * CHUNK;
        ig_mm m = {.type = IG_TYPE_F32,
                   .w = (const uint8_t *)a->w,
                   .row_bytes = (size_t)a->in * sizeof(float),
                   .k = a->in,
                   .n = IG_MIN(CHUNK, a->n - t0),
                   .x = a->x + (size_t)t0 * a->in,
                   .ldx = a->in,
                   .y = a->y + (size_t)t0 * a->out,
                   .ldy = a->out};
        ig_mm_matmul(a->isa, &m, 0, a->out, a->scratch[ith]);
    }
}

static void f32_matmul(enc_run *r, const float *w, const float *x, float *y, int n, int in, int out) {
    f32_mm a = {.isa = r->isa, .w = w, .x = x, .y = y, .n = n, .in = in, .out = out, .scratch = r->scratch};
    atomic_init(&a.next, 0);
    ig_threadpool_run(r->pool, f32_task, &a);
}

typedef struct ln_arg {
    enc_run *r;
    const float *w, *b;
} ln_arg;

static void post_ln_task(void *arg, int ith, int nth) {
    ln_arg *a = arg;
    ln_phase(a->r, a->r->x, a->r->h, a->w, a->b, ith, nth);
}

/* Largest per-thread scratch any op of the tower needs. */
static size_t scratch_need(const ig_mm_isa *isa, const ig_vision *v) {
    const int K = 3 * v->patch * v->patch;
    size_t s = attn_scratch_bytes(v->width / v->n_head);
    const int64_t ks[] = {K, v->width, v->n_ff};
    for (int i = 0; i < 3; i++) s = IG_MAX(s, ig_mm_scratch_bytes(isa, IG_TYPE_F32, ks[i]));
    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        const ig_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->fc1, L->fc2};
        for (int i = 0; i < 6; i++) s = IG_MAX(s, ig_mm_scratch_bytes(isa, ws[i]->type, ws[i]->ne[0]));
    }
    return ig_mm_align64(s);
}

/* Bytes of quantized activations the tower's matmuls need at most. */
static size_t act_need(const ig_mm_isa *isa, const ig_vision *v, int N) {
    size_t s = 0;
    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        const ig_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->fc1, L->fc2};
        for (int i = 0; i < 6; i++) {
            const ig_act_kind kind = ig_mm_act_kind(ws[i]->type);
            if (kind != IG_ACT_F32)
                s = IG_MAX(s, ig_mm_act_bytes(kind, ws[i]->ne[0], N, ig_mm_use_groups(isa, ws[i]->type, N)));
        }
    }
    return s;
}

static size_t tmp_need(const ig_vision *v) {
    size_t s = 0;
    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        const ig_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->fc1, L->fc2};
        for (int i = 0; i < 6; i++) s = IG_MAX(s, ig_mm_row_stride(ig_mm_act_kind(ws[i]->type), ws[i]->ne[0]));
    }
    return ig_mm_align64(s ? s : 64);
}

size_t ig_vision_act_bytes(const ig_vision *v, int n_threads) {
    if (!v) return 0;
    if (n_threads < 1) n_threads = 1;
    const ig_mm_isa *isa = ig_mm_isa_select();
    const size_t N = (size_t)v->side * v->side, D = (size_t)v->width, F = (size_t)v->n_ff;
    const size_t K = 3 * (size_t)v->patch * v->patch;
    size_t s = 4 * (5 * N * D + IG_MAX(N * IG_MAX(F, K), attn_pack_floats(isa, (int)N, (int)D, v->n_head)) +
                    IG_MAX(D, F)); /* x h q k v, ff, ones */
    s += act_need(isa, v, (int)N) + 64;
    s += (size_t)n_threads * (scratch_need(isa, v) + tmp_need(v) + 128);
    return s;
}

static void free_per_thread(uint8_t **p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++) ig_aligned_free(p[i]);
    free(p);
}

static uint8_t **alloc_per_thread(int n, size_t bytes) {
    uint8_t **p = ig_calloc_array((size_t)n, sizeof *p);
    if (!p) return NULL;
    for (int i = 0; i < n; i++)
        if (!(p[i] = ig_aligned_alloc(64, bytes))) {
            free_per_thread(p, n);
            return NULL;
        }
    return p;
}

ig_status ig_vision_encode(const ig_vision *v, const float *pixels, int n_threads, float *tower_out, float *embd) {
    if (!v || !pixels || !embd) return ig_fail(IG_ERR_INVALID_ARG, "ig_vision_encode: NULL argument");
    const int D = v->width, F = v->n_ff, P = v->patch, S = v->image_size, side = v->side, N = side * side;
    const int K = 3 * P * P;
    if (n_threads < 1) n_threads = 1;
    enc_run r = {.isa = ig_mm_isa_select(), .v = v, .N = N, .n_chunks = (N + CHUNK - 1) / CHUNK};
    /* ff: the MLP's activations, the patches, the packed keys and values */
    const size_t nd = (size_t)N * D,
                 nf = IG_MAX((size_t)N * (size_t)IG_MAX(F, K), attn_pack_floats(r.isa, N, D, v->n_head));
    r.x = ig_calloc_array(nd, sizeof(float));
    r.h = ig_calloc_array(nd, sizeof(float));
    r.q = ig_calloc_array(nd, sizeof(float));
    r.k = ig_calloc_array(nd, sizeof(float));
    r.val = ig_calloc_array(nd, sizeof(float));
    size_t ff_bytes = 0;
    r.ff = ig_size_mul(nf, sizeof(float), &ff_bytes) ? ig_aligned_alloc(64, ff_bytes) : NULL; /* vector stores */
    r.ones = ig_calloc_array((size_t)IG_MAX(D, F), sizeof(float));
    const size_t act_bytes = act_need(r.isa, v, N);
    r.act = act_bytes ? ig_aligned_alloc(64, act_bytes) : NULL;
    ig_status st = IG_OK;
    if (!r.x || !r.h || !r.q || !r.k || !r.val || !r.ff || !r.ones || (act_bytes && !r.act)) st = IG_ERR_NO_MEMORY;
    if (st == IG_OK) st = ig_threadpool_create(n_threads, &r.pool);
    if (st == IG_OK) {
        n_threads = ig_threadpool_size(r.pool);
        r.scratch = alloc_per_thread(n_threads, scratch_need(r.isa, v));
        r.tmp = alloc_per_thread(n_threads, tmp_need(v));
        if (!r.scratch || !r.tmp) st = IG_ERR_NO_MEMORY;
    }
    if (st != IG_OK) goto done;
    for (int i = 0; i < IG_MAX(D, F); i++) r.ones[i] = 1.0f;
    /* at least 4 items per thread */
    r.n_split = IG_MAX(1, (4 * n_threads + r.n_chunks - 1) / r.n_chunks);

    /* Patch embedding: each patch's pixels in the kernel's [c][ky][kx] order. */
    float *patches = r.ff;
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *pr = patches + ((size_t)py * side + px) * K;
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(pr + (c * P + ky) * P, pixels + ((size_t)c * S + (size_t)py * P + ky) * S + (size_t)px * P,
                           (size_t)P * sizeof(float));
        }
    f32_matmul(&r, v->patch_w, patches, r.x, N, K, D);
    for (int t = 0; t < N; t++) {
        float *xr = r.x + (size_t)t * D;
        const float *pos = v->pos + (size_t)t * D;
        for (int o = 0; o < D; o++) xr[o] += v->patch_b[o] + pos[o];
    }

    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        r.L = L;
        r.ops[0] = tensor_op(L->wq, L->bq, r.h, r.q, NULL, EPI_BIAS);
        r.ops[1] = tensor_op(L->wk, L->bk, r.h, r.k, NULL, EPI_BIAS);
        r.ops[2] = tensor_op(L->wv, L->bv, r.h, r.val, NULL, EPI_BIAS);
        r.ops[3] = tensor_op(L->wo, L->bo, r.h, r.q, r.x, EPI_RESIDUAL);
        r.ops[4] = tensor_op(L->fc1, L->b1, r.h, r.ff, NULL, EPI_GELU);
        r.ops[5] = tensor_op(L->fc2, L->b2, r.ff, r.h, r.x, EPI_RESIDUAL);
        atomic_init(&r.attn_next, 0);
        atomic_init(&r.pack_next, 0);
        ig_threadpool_run(r.pool, layer_task, &r);
    }
    ln_arg la = {.r = &r, .w = v->post_w, .b = v->post_b};
    ig_threadpool_run(r.pool, post_ln_task, &la);
    const float *h = r.h;
    if (tower_out) memcpy(tower_out, h, nd * sizeof(float));

    /* Projector: average-pool the patch grid, RMSNorm, project. */
    const int ps = side / v->pool, kk = v->pool;
    float *pooled = r.q; /* [n_tokens][D] */
    for (int ty = 0; ty < ps; ty++)
        for (int tx = 0; tx < ps; tx++) {
            float *pr = pooled + ((size_t)ty * ps + tx) * D;
            for (int i = 0; i < D; i++) {
                float s = 0;
                for (int dy = 0; dy < kk; dy++)
                    for (int dx = 0; dx < kk; dx++) s += h[((size_t)(ty * kk + dy) * side + tx * kk + dx) * D + i];
                pr[i] = s / (float)(kk * kk);
            }
        }
    const int T = v->n_tokens;
    for (int t = 0; t < T; t++) {
        float *pr = pooled + (size_t)t * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)pr[i] * pr[i];
        const float inv = 1.0f / sqrtf((float)(ss / D) + v->eps);
        for (int i = 0; i < D; i++) pr[i] = pr[i] * inv * v->mm_norm[i];
    }
    f32_matmul(&r, v->mm_proj_t, pooled, embd, T, D, v->n_embd);
done:
    ig_threadpool_free(r.pool);
    free_per_thread(r.scratch, n_threads);
    free_per_thread(r.tmp, n_threads);
    ig_aligned_free(r.act);
    free(r.x);
    free(r.h);
    free(r.q);
    free(r.k);
    free(r.val);
    ig_aligned_free(r.ff);
    free(r.ones);
    return st;
}

ig_status ig_vision_attention(const struct ig_mm_isa *isa, const float *q, const float *k, const float *v, float *o,
                              int n, int width, int n_head) {
    if (!q || !k || !v || !o || n < 1 || n_head < 1 || width % n_head)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_vision_attention: bad argument");
    if (!isa) isa = ig_mm_isa_select();
    const int hd = width / n_head;
    const size_t pf = attn_pack_floats(isa, n, width, n_head);
    float *scratch = ig_aligned_alloc(64, attn_scratch_bytes(hd));
    float *pack = pf ? ig_aligned_alloc(64, pf * sizeof(float)) : NULL;
    if (!scratch || (pf && !pack)) {
        ig_aligned_free(scratch);
        ig_aligned_free(pack);
        return IG_ERR_NO_MEMORY;
    }
    if (pf)
        for (int it = 0; it < n_head * ig_vattn_tiles(n); it++) attn_pack(k, v, n, width, n_head, it, pack);
    const int items = attn_items(isa, n, width, n_head);
    for (int it = 0; it < items; it++) attn_rows(isa, q, k, v, pack, o, n, width, n_head, it, scratch);
    ig_aligned_free(scratch);
    ig_aligned_free(pack);
    return IG_OK;
}
