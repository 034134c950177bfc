/* The vision tower on the CPU: SigLIP encoder (patch embedding, pre-norm
 * layers with bidirectional attention and a GELU-tanh MLP, final
 * LayerNorm), then Gemma 3's projector (average pooling, RMSNorm with
 * 1 + w, projection). f32 throughout with f32 accumulation; matrices are
 * converted a row at a time from the file's type. Rows are shared out
 * over a thread pool. */
#include "engine/threadpool.h"
#include "quant/quant.h"
#include "vision/vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lin_arg {
    const ig_tensor *w;
    const float *b, *x;
    float *y;
    int n, in, out;
    float *scratch; /* [nth][in] */
} lin_arg;

/* y[n][out] = x[n][in] · wᵀ + b, thread ith's output columns. */
static void lin_task(void *arg, int ith, int nth) {
    const lin_arg *a = arg;
    int64_t o0, o1;
    ig_split_range(a->out, ith, nth, &o0, &o1);
    float *wr = a->scratch + (size_t)ith * (size_t)a->in;
    const size_t row_bytes = a->w->nbytes / (size_t)a->w->ne[1];
    for (int64_t o = o0; o < o1; o++) {
        ig_dequantize_row(a->w->type, (const uint8_t *)a->w->data + (size_t)o * row_bytes, wr, a->in);
        const float bias = a->b ? a->b[o] : 0.0f;
        for (int t = 0; t < a->n; t++) {
            const float *x = a->x + (size_t)t * a->in;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int i = 0;
            for (; i + 4 <= a->in; i += 4) {
                s0 += x[i] * wr[i];
                s1 += x[i + 1] * wr[i + 1];
                s2 += x[i + 2] * wr[i + 2];
                s3 += x[i + 3] * wr[i + 3];
            }
            for (; i < a->in; i++) s0 += x[i] * wr[i];
            a->y[(size_t)t * a->out + o] = (s0 + s1) + (s2 + s3) + bias;
        }
    }
}

typedef struct attn_arg {
    const float *q, *k, *v;
    float *o;
    int n, D, nh;
    float *scratch; /* [nth][n] */
} attn_arg;

static void attn_task(void *arg, int ith, int nth) {
    const attn_arg *a = arg;
    const int hd = a->D / a->nh;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t r0, r1;
    ig_split_range((int64_t)a->n * a->nh, ith, nth, &r0, &r1);
    float *s = a->scratch + (size_t)ith * (size_t)a->n;
    for (int64_t r = r0; r < r1; r++) {
        const int h = (int)(r % a->nh), t = (int)(r / a->nh);
        const float *q = a->q + (size_t)t * a->D + (size_t)h * hd;
        float mx = -INFINITY;
        for (int j = 0; j < a->n; j++) {
            const float *k = a->k + (size_t)j * a->D + (size_t)h * hd;
            float d = 0;
            for (int i = 0; i < hd; i++) d += q[i] * k[i];
            s[j] = d * scale;
            mx = fmaxf(mx, s[j]);
        }
        float sum = 0;
        for (int j = 0; j < a->n; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        float *o = a->o + (size_t)t * a->D + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int j = 0; j < a->n; j++) {
            const float p = s[j] / sum;
            const float *v = a->v + (size_t)j * a->D + (size_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] += p * v[i];
        }
    }
}

static void layernorm(const float *x, float *y, int n, int D, const float *w, const float *b, float eps) {
    for (int t = 0; t < n; t++) {
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

static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

ig_status ig_vision_encode(const ig_vision *v, const float *pixels, int n_threads, float *tower_out, float *embd) {
    if (!v || !pixels || !embd) return ig_fail(IG_ERR_INVALID_ARG, "ig_vision_encode: NULL argument");
    const int D = v->width, F = v->n_ff, P = v->patch, S = v->image_size, side = v->side, N = side * side;
    const int K = 3 * P * P;
    size_t nd = (size_t)N * D, nf = (size_t)N * F;
    const size_t widest = (size_t)IG_MAX(IG_MAX(K, F), IG_MAX(N, D));
    if (n_threads < 1) n_threads = 1;
    float *x = ig_calloc_array(nd, sizeof(float)), *h = ig_calloc_array(nd, sizeof(float));
    float *q = ig_calloc_array(nd, sizeof(float)), *k = ig_calloc_array(nd, sizeof(float));
    float *val = ig_calloc_array(nd, sizeof(float)), *att = ig_calloc_array(nd, sizeof(float));
    float *ff = ig_calloc_array(nf, sizeof(float));
    float *patches = ig_calloc_array((size_t)N * K, sizeof(float));
    float *scratch = ig_calloc_array((size_t)n_threads * widest, sizeof(float));
    ig_threadpool *pool = NULL;
    ig_status st = IG_OK;
    if (!x || !h || !q || !k || !val || !att || !ff || !patches || !scratch) st = IG_ERR_NO_MEMORY;
    if (st == IG_OK) st = ig_threadpool_create(n_threads, &pool);
    if (st != IG_OK) goto done;
    n_threads = ig_threadpool_size(pool);

    /* Patch embedding: each patch's pixels in the kernel's [c][ky][kx] order. */
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *pr = patches + ((size_t)py * side + px) * K;
            for (int c = 0; c < 3; c++)
                for (int ky = 0; ky < P; ky++)
                    memcpy(pr + (c * P + ky) * P, pixels + ((size_t)c * S + (size_t)py * P + ky) * S + (size_t)px * P,
                           (size_t)P * sizeof(float));
        }
    for (int t = 0; t < N; t++)
        for (int o = 0; o < D; o++) {
            const float *w = v->patch_w + (size_t)o * K, *pr = patches + (size_t)t * K;
            float s = 0;
            for (int i = 0; i < K; i++) s += w[i] * pr[i];
            x[(size_t)t * D + o] = s + v->patch_b[o] + v->pos[(size_t)t * D + o];
        }

    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        layernorm(x, h, N, D, L->ln1_w, L->ln1_b, v->eps);
        lin_arg la = {.x = h, .n = N, .in = D, .out = D, .scratch = scratch};
        la.w = L->wq, la.b = L->bq, la.y = q;
        ig_threadpool_run(pool, lin_task, &la);
        la.w = L->wk, la.b = L->bk, la.y = k;
        ig_threadpool_run(pool, lin_task, &la);
        la.w = L->wv, la.b = L->bv, la.y = val;
        ig_threadpool_run(pool, lin_task, &la);
        attn_arg aa = {.q = q, .k = k, .v = val, .o = att, .n = N, .D = D, .nh = v->n_head, .scratch = scratch};
        ig_threadpool_run(pool, attn_task, &aa);
        la = (lin_arg){.w = L->wo, .b = L->bo, .x = att, .y = h, .n = N, .in = D, .out = D, .scratch = scratch};
        ig_threadpool_run(pool, lin_task, &la);
        for (size_t i = 0; i < nd; i++) x[i] += h[i];
        layernorm(x, h, N, D, L->ln2_w, L->ln2_b, v->eps);
        la = (lin_arg){.w = L->fc1, .b = L->b1, .x = h, .y = ff, .n = N, .in = D, .out = F, .scratch = scratch};
        ig_threadpool_run(pool, lin_task, &la);
        for (size_t i = 0; i < nf; i++) ff[i] = gelu_tanh(ff[i]);
        la = (lin_arg){.w = L->fc2, .b = L->b2, .x = ff, .y = h, .n = N, .in = F, .out = D, .scratch = scratch};
        ig_threadpool_run(pool, lin_task, &la);
        for (size_t i = 0; i < nd; i++) x[i] += h[i];
    }
    layernorm(x, h, N, D, v->post_w, v->post_b, v->eps);
    if (tower_out) memcpy(tower_out, h, nd * sizeof(float));

    /* Projector: average-pool the patch grid, RMSNorm, project. */
    const int ps = side / v->pool, kk = v->pool;
    float *pooled = q; /* [n_tokens][D] */
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
    const int T = v->n_tokens, E = v->n_embd;
    for (int t = 0; t < T; t++) {
        float *pr = pooled + (size_t)t * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)pr[i] * pr[i];
        const float inv = 1.0f / sqrtf((float)(ss / D) + v->eps);
        for (int i = 0; i < D; i++) pr[i] = pr[i] * inv * v->mm_norm[i];
        float *er = embd + (size_t)t * E;
        for (int j = 0; j < E; j++) er[j] = 0;
        for (int i = 0; i < D; i++) {
            const float a = pr[i], *w = v->mm_proj + (size_t)i * E;
            for (int j = 0; j < E; j++) er[j] += a * w[j];
        }
    }
done:
    ig_threadpool_free(pool);
    free(x);
    free(h);
    free(q);
    free(k);
    free(val);
    free(att);
    free(ff);
    free(patches);
    free(scratch);
    return st;
}
