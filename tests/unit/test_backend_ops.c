/* Every op kind through the backend interface (engine/backend.h) on every
 * backend built in (the CPU; Vulkan when a usable device exists), against a
 * scalar reference written here, by normalised mean squared error: matmul
 * and embed over the weight types, at awkward shapes (odd widths, one
 * token, odd token counts, two sequences). Each case is a small op list
 * whose result rows are gathered and copied to the logits by an identity
 * projection (exact in f32), the only output a backend hands back. */
#include "test.h"

#include "core/util.h"
#include "engine/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

#define MAX_T 24

/* Allocations that must outlive the devices: a device keeps its copies of
 * weights keyed by address, so none is freed (and reused) while one lives. */
typedef struct arena {
    void *p[4096];
    int n;
} arena;

static void *keep(arena *a, void *p) {
    if (p && a->n < (int)IG_ARRAY_LEN(a->p)) a->p[a->n++] = p;
    else {
        free(p);
        p = NULL;
    }
    return p;
}

static void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    a->n = 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static float *rand_vec(arena *a, int n, float scale, float offset) {
    float *v = keep(a, malloc((size_t)n * sizeof *v));
    if (v)
        for (int i = 0; i < n; i++) v[i] = offset + scale * frand();
    return v;
}

/* A {k, rows} tensor of type t from f32 values; deq gets what it holds. */
static ig_tensor *make_tensor(arena *a, ig_dtype t, int64_t k, int64_t rows, const float *src, float *deq) {
    size_t rb;
    if (!ig_dtype_row_bytes(t, k, &rb)) return NULL;
    ig_tensor *w = keep(a, calloc(1, sizeof *w));
    uint8_t *data = keep(a, malloc(rb * (size_t)rows));
    if (!w || !data) return NULL;
    for (int64_t r = 0; r < rows; r++) {
        ig_quantize_row(t, src + r * k, data + (size_t)r * rb, k);
        ig_dequantize_row(t, data + (size_t)r * rb, deq + r * k, k);
    }
    *w = (ig_tensor){.name = "w", .type = t, .n_dims = 2, .ne = {k, rows, 1, 1}, .data = data,
                     .nbytes = rb * (size_t)rows};
    return w;
}

static ig_tensor *identity(arena *a, int n) {
    float *v = keep(a, calloc((size_t)n * n, sizeof *v)), *d = keep(a, malloc((size_t)n * n * sizeof *d));
    if (!v || !d) return NULL;
    for (int i = 0; i < n; i++) v[(size_t)i * n + i] = 1.0f;
    return make_tensor(a, IG_TYPE_F32, n, n, v, d);
}

/* One case: an op list, its step, and where the result rows come from. */
typedef struct tcase {
    ig_graph g;
    ig_op ops[16];
    int n_tok, n_out;
    int32_t tokens[MAX_T], pos[MAX_T], seq[MAX_T], out_idx[MAX_T];
    int n_head_kv, head_dim; /* the KV cache (one layer) */
    int window;
    ig_kv_type kv_type;
} tcase;

static ig_op *add(tcase *c, ig_op op) {
    c->ops[c->g.n_ops] = op;
    return &c->ops[c->g.n_ops++];
}

static void init_case(tcase *c, int n_tok) {
    memset(c, 0, sizeof *c);
    c->g.ops = c->ops;
    c->n_tok = c->n_out = n_tok;
    for (int t = 0; t < n_tok; t++) c->tokens[t] = t, c->pos[t] = t, c->out_idx[t] = t;
    c->n_head_kv = 1;
    c->head_dim = 4;
    c->kv_type = IG_KV_F32;
}

/* Two sequences interleaved: even tokens in sequence 0, odd in 1. */
static void two_sequences(tcase *c) {
    int next[2] = {0, 0};
    for (int t = 0; t < c->n_tok; t++) c->seq[t] = t % 2, c->pos[t] = next[t % 2]++;
}

/* Ends the list: gather buffer b (width w) into OUT_H, identity onto the logits. */
static bool finish(tcase *c, arena *a, ig_buf_id b, int w) {
    ig_tensor *id = identity(a, w);
    if (!id) return false;
    c->g.buf_width[IG_BUF_OUT_H] = w;
    c->g.buf_width[IG_BUF_LOGITS] = w;
    add(c, (ig_op){.kind = IG_OP_GATHER, .src = b, .dst = IG_BUF_OUT_H, .width = w, .on_outputs = true});
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_OUT_H, .dst = IG_BUF_LOGITS, .w = id, .width = w,
                   .on_outputs = true});
    for (int i = 0; i < IG_BUF_COUNT; i++)
        if (c->g.buf_width[i] == 0) c->g.buf_width[i] = 4;
    return true;
}

/* An f32 table of n_tok rows of width w written into buffer b by EMBED. */
static float *input(tcase *c, arena *a, ig_buf_id b, int w, float scale, float offset) {
    float *v = rand_vec(a, c->n_tok * w, scale, offset), *d = keep(a, malloc((size_t)c->n_tok * w * sizeof *d));
    if (!v || !d) return NULL;
    ig_tensor *t = make_tensor(a, IG_TYPE_F32, w, c->n_tok, v, d);
    if (!t) return NULL;
    c->g.buf_width[b] = w;
    add(c, (ig_op){.kind = IG_OP_EMBED, .dst = b, .w = t, .width = w, .f0 = 1.0f});
    return v;
}

/* Runs the case on dev; out gets n_out rows of the logits width. */
static ig_status run_case(ig_device *dev, const tcase *c, ig_threadpool *pool, float *out) {
    ig_hparams hp = {0};
    hp.n_layer = 1;
    hp.n_head_kv = c->n_head_kv;
    hp.head_dim = hp.head_dim_v = c->head_dim;
    hp.sliding_window = c->window;
    hp.layer_is_swa[0] = c->window > 0;
    ig_kv_cache kv;
    IG_TRY(ig_kv_cache_init_ex(&kv, &hp, c->kv_type, 2, MAX_T, MAX_T, dev->ops->host_kv));
    const ig_backend_desc desc = {.graph = &c->g, .kv = &kv, .n_batch = MAX_T, .pool = pool};
    ig_backend *be = NULL;
    ig_status st = dev->ops->backend_create(dev, &desc, &be);
    const int w = c->g.buf_width[IG_BUF_LOGITS];
    float *logits = malloc((size_t)c->n_out * w * sizeof *logits);
    if (st == IG_OK && !logits) st = IG_ERR_NO_MEMORY;
    if (st == IG_OK) {
        const ig_step step = {.n_tokens = c->n_tok, .tokens = c->tokens, .pos = c->pos, .seq = c->seq,
                              .n_out = c->n_out, .out_idx = c->out_idx};
        const float *rows = NULL;
        st = be->ops->compute(be, &step, logits, &rows);
        if (st == IG_OK) memcpy(out, rows, (size_t)c->n_out * w * sizeof *out);
    }
    free(logits);
    if (be) be->ops->destroy(be);
    ig_kv_cache_free(&kv);
    return st;
}

static double nmse(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (!isfinite(a[i])) return INFINITY;
    }
    return num / (den > 0 ? den : 1);
}

typedef struct ctx_t {
    ig_device *dev;
    const char *name;
    ig_threadpool *pool;
    arena *a;
    int n_cases;
} ctx_t;

static void check_case(ctx_t *x, const char *what, const tcase *c, const float *ref, double tol) {
    const size_t n = (size_t)c->n_out * c->g.buf_width[IG_BUF_LOGITS];
    float *out = malloc(n * sizeof *out);
    REQUIRE(out);
    ig_status st = run_case(x->dev, c, x->pool, out);
    x->n_cases++;
    if (st != IG_OK) {
        ig_test_fail_at(__FILE__, __LINE__, "%s: %s: status %d (%s)", x->name, what, (int)st, ig_last_error());
    } else {
        const double e = nmse(out, ref, n);
        if (!(e <= tol))
            ig_test_fail_at(__FILE__, __LINE__, "%s: %s: nmse %.3g > %.3g", x->name, what, e, tol);
        if (getenv("IGNIS_TEST_VERBOSE")) fprintf(stderr, "    %s %-40s nmse %.3g\n", x->name, what, e);
    }
    free(out);
}

/* ---- the scalar reference ---- */

static void ref_rmsnorm(const float *x, float *y, const float *w, int d, float eps, bool add) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / d + eps);
    for (int i = 0; i < d; i++) y[i] = (float)((add ? y[i] : 0) + x[i] * r * w[i]);
}

static void ref_rope(float *x, int n_heads, int hd, int pos, float base, float scale) {
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + h * hd;
        for (int i = 0; i < half; i++) {
            const double ang = pos / (double)scale * pow(base, -2.0 * i / hd);
            const double a = v[i], b = v[i + half];
            v[i] = (float)(a * cos(ang) - b * sin(ang));
            v[i + half] = (float)(b * cos(ang) + a * sin(ang));
        }
    }
}

static float ref_gelu(float g) {
    const double x = g;
    return (float)(0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
}

/* ---- cases ---- */

static const ig_dtype all_types[] = {IG_TYPE_F32, IG_TYPE_F16,  IG_TYPE_BF16, IG_TYPE_Q8_0, IG_TYPE_Q4_0,
                                     IG_TYPE_Q5_0, IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};

static int k_for(ig_dtype t) {
    switch (t) {
    case IG_TYPE_F32:
    case IG_TYPE_F16:
    case IG_TYPE_BF16: return 70; /* odd widths need a non-block type */
    case IG_TYPE_Q4_K:
    case IG_TYPE_Q5_K:
    case IG_TYPE_Q6_K: return 256;
    default: return 96;
    }
}

/* The CPU rounds activations to 8 bits for quantized rows; f16/bf16 rows
 * may take f16 activations. */
static double mm_tol(ig_dtype t) { return t == IG_TYPE_F32 ? 1e-10 : t == IG_TYPE_F16 || t == IG_TYPE_BF16 ? 1e-5 : 2e-4; }

static void case_matmul(ctx_t *x, ig_dtype t, int n_tok, bool head) {
    tcase c;
    init_case(&c, n_tok);
    const int k = k_for(t), n = 37;
    float *src = rand_vec(x->a, n * k, 1.0f, 0.0f), *deq = keep(x->a, malloc((size_t)n * k * sizeof *deq));
    REQUIRE(src && deq);
    ig_tensor *w = make_tensor(x->a, t, k, n, src, deq);
    REQUIRE(w);
    const float *in = input(&c, x->a, IG_BUF_X, k, 1.0f, 0.0f);
    REQUIRE(in);
    float ref[MAX_T * 37];
    for (int r = 0; r < n_tok; r++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int i = 0; i < k; i++) s += (double)deq[(size_t)j * k + i] * in[(size_t)r * k + i];
            ref[r * n + j] = (float)s;
        }
    if (head) { /* the output projection itself */
        c.g.buf_width[IG_BUF_OUT_H] = k;
        c.g.buf_width[IG_BUF_LOGITS] = n;
        add(&c, (ig_op){.kind = IG_OP_GATHER, .src = IG_BUF_X, .dst = IG_BUF_OUT_H, .width = k, .on_outputs = true});
        add(&c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_OUT_H, .dst = IG_BUF_LOGITS, .w = w, .width = n,
                        .on_outputs = true});
        for (int i = 0; i < IG_BUF_COUNT; i++)
            if (!c.g.buf_width[i]) c.g.buf_width[i] = 4;
    } else {
        c.g.buf_width[IG_BUF_GATE] = n;
        add(&c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_GATE, .w = w, .width = n});
        REQUIRE(finish(&c, x->a, IG_BUF_GATE, n));
    }
    char what[96];
    snprintf(what, sizeof what, "matmul %s %s k=%d n=%d T=%d", head ? "head" : "body", ig_dtype_name(t), k, n, n_tok);
    check_case(x, what, &c, ref, mm_tol(t));
}

static void case_embed(ctx_t *x, ig_dtype t) {
    tcase c;
    init_case(&c, 5);
    const int k = k_for(t), rows = 11;
    float *src = rand_vec(x->a, rows * k, 1.0f, 0.0f), *deq = keep(x->a, malloc((size_t)rows * k * sizeof *deq));
    REQUIRE(src && deq);
    ig_tensor *w = make_tensor(x->a, t, k, rows, src, deq);
    REQUIRE(w);
    const int32_t ids[5] = {10, 0, 3, 3, 7};
    memcpy(c.tokens, ids, sizeof ids);
    c.g.buf_width[IG_BUF_X] = k;
    add(&c, (ig_op){.kind = IG_OP_EMBED, .dst = IG_BUF_X, .w = w, .width = k, .f0 = 1.5f});
    REQUIRE(finish(&c, x->a, IG_BUF_X, k));
    float ref[5 * 256];
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < k; i++) ref[r * k + i] = deq[(size_t)ids[r] * k + i] * 1.5f;
    char what[64];
    snprintf(what, sizeof what, "embed %s k=%d", ig_dtype_name(t), k);
    check_case(x, what, &c, ref, 1e-12);
}

/* rmsnorm over whole rows (odd width) and per head in place; add_rmsnorm. */
static void case_norms(ctx_t *x, int n_tok) {
    for (int variant = 0; variant < 3; variant++) {
        tcase c;
        init_case(&c, n_tok);
        const int heads = variant == 1 ? 3 : 1, w = variant == 1 ? 3 * 18 : 67;
        const float *in = input(&c, x->a, IG_BUF_X, w, 2.0f, 0.5f);
        float *nw = rand_vec(x->a, w / heads, 0.5f, 1.0f);
        REQUIRE(in && nw);
        float ref[MAX_T * 67];
        if (variant == 2) {
            const float *res = input(&c, x->a, IG_BUF_PROJ, w, 1.0f, 0.0f);
            REQUIRE(res);
            add(&c, (ig_op){.kind = IG_OP_ADD_RMSNORM, .src = IG_BUF_PROJ, .dst = IG_BUF_X, .norm = nw, .width = w,
                            .f0 = 1e-6f});
            memcpy(ref, in, (size_t)n_tok * w * sizeof *ref);
            for (int r = 0; r < n_tok; r++) ref_rmsnorm(res + r * w, ref + r * w, nw, w, 1e-6f, true);
            REQUIRE(finish(&c, x->a, IG_BUF_X, w));
        } else {
            const ig_buf_id dst = variant == 1 ? IG_BUF_X : IG_BUF_XN;
            c.g.buf_width[IG_BUF_XN] = w;
            add(&c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_X, .dst = dst, .norm = nw, .width = w,
                            .n_heads = heads, .f0 = 1e-6f});
            for (int r = 0; r < n_tok * heads; r++)
                ref_rmsnorm(in + r * (w / heads), ref + r * (w / heads), nw, w / heads, 1e-6f, false);
            REQUIRE(finish(&c, x->a, dst, w));
        }
        char what[64];
        snprintf(what, sizeof what, "%s w=%d heads=%d T=%d", variant == 2 ? "add_rmsnorm" : "rmsnorm", w, heads,
                 n_tok);
        check_case(x, what, &c, ref, 1e-10);
    }
}

static void case_rope(ctx_t *x, int n_tok) {
    tcase c;
    init_case(&c, n_tok);
    two_sequences(&c);
    const int heads = 3, hd = 18, w = heads * hd;
    const float *in = input(&c, x->a, IG_BUF_Q, w, 1.0f, 0.0f);
    REQUIRE(in);
    add(&c, (ig_op){.kind = IG_OP_ROPE, .dst = IG_BUF_Q, .width = w, .n_heads = heads, .f0 = 10000.0f, .f1 = 2.0f});
    REQUIRE(finish(&c, x->a, IG_BUF_Q, w));
    float ref[MAX_T * 54];
    memcpy(ref, in, (size_t)n_tok * w * sizeof *ref);
    for (int t = 0; t < n_tok; t++) ref_rope(ref + t * w, heads, hd, c.pos[t], 10000.0f, 2.0f);
    char what[64];
    snprintf(what, sizeof what, "rope heads=%d hd=%d T=%d", heads, hd, n_tok);
    check_case(x, what, &c, ref, 1e-10);
}

/* GEGLU (odd width) and softcap. */
static void case_elementwise(ctx_t *x, int n_tok) {
    for (int variant = 0; variant < 2; variant++) {
        tcase c;
        init_case(&c, n_tok);
        const int w = 75;
        const float *g = input(&c, x->a, IG_BUF_GATE, w, 3.0f, 0.0f);
        REQUIRE(g);
        float ref[MAX_T * 75];
        if (variant == 0) {
            const float *u = input(&c, x->a, IG_BUF_UP, w, 1.0f, 0.0f);
            REQUIRE(u);
            add(&c, (ig_op){.kind = IG_OP_GEGLU, .src = IG_BUF_UP, .dst = IG_BUF_GATE, .width = w});
            for (int i = 0; i < n_tok * w; i++) ref[i] = ref_gelu(g[i]) * u[i];
        } else {
            add(&c, (ig_op){.kind = IG_OP_SOFTCAP, .dst = IG_BUF_GATE, .width = w, .f0 = 2.0f});
            for (int i = 0; i < n_tok * w; i++) ref[i] = (float)(2.0 * tanh(g[i] / 2.0));
        }
        REQUIRE(finish(&c, x->a, IG_BUF_GATE, w));
        char what[64];
        snprintf(what, sizeof what, "%s w=%d T=%d", variant ? "softcap" : "geglu", w, n_tok);
        check_case(x, what, &c, ref, 1e-9);
    }
}

/* The cache store and attention: GQA (4 query heads on 2 KV heads), two
 * sequences, with and without a sliding window and a score softcap. */
static void case_attention(ctx_t *x, int n_tok, int window, ig_kv_type kv_type, float softcap) {
    tcase c;
    init_case(&c, n_tok);
    two_sequences(&c);
    const int nh = 4, nkv = 2, hd = 16, group = nh / nkv;
    c.n_head_kv = nkv;
    c.head_dim = hd;
    c.window = window;
    c.kv_type = kv_type;
    const float *q = input(&c, x->a, IG_BUF_Q, nh * hd, 1.0f, 0.0f);
    const float *k = input(&c, x->a, IG_BUF_K, nkv * hd, 1.0f, 0.0f);
    const float *v = input(&c, x->a, IG_BUF_V, nkv * hd, 1.0f, 0.0f);
    REQUIRE(q && k && v);
    const float scale = 1.0f / sqrtf((float)hd);
    c.g.buf_width[IG_BUF_ATTN] = nh * hd;
    add(&c, (ig_op){.kind = IG_OP_KV_STORE, .layer = 0});
    add(&c, (ig_op){.kind = IG_OP_ATTENTION, .src = IG_BUF_Q, .dst = IG_BUF_ATTN, .layer = 0, .n_heads = nh,
                    .width = nh * hd, .f0 = scale, .f1 = softcap});
    REQUIRE(finish(&c, x->a, IG_BUF_ATTN, nh * hd));
    /* the cache holds f16 rows when asked: the reference reads the same */
    float kq[MAX_T * 32], vq[MAX_T * 32];
    for (int i = 0; i < n_tok * nkv * hd; i++) {
        kq[i] = kv_type == IG_KV_F16 ? ig_f16_to_f32(ig_f32_to_f16(k[i])) : k[i];
        vq[i] = kv_type == IG_KV_F16 ? ig_f16_to_f32(ig_f32_to_f16(v[i])) : v[i];
    }
    float ref[MAX_T * 64];
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < nh; h++) {
            const int kvh = h / group;
            double s[MAX_T], mx = -INFINITY, sum = 0;
            for (int j = 0; j < n_tok; j++) {
                s[j] = -INFINITY;
                if (c.seq[j] != c.seq[t] || c.pos[j] > c.pos[t] || (window && c.pos[j] <= c.pos[t] - window)) continue;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[(t * nh + h) * hd + i] * kq[(j * nkv + kvh) * hd + i];
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                s[j] = d;
                if (d > mx) mx = d;
            }
            for (int j = 0; j < n_tok; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int j = 0; j < n_tok; j++)
                    if (s[j] != -INFINITY) o += exp(s[j] - mx) / sum * vq[(j * nkv + kvh) * hd + i];
                ref[(t * nh + h) * hd + i] = (float)o;
            }
        }
    char what[96];
    snprintf(what, sizeof what, "attention T=%d window=%d kv=%s softcap=%g", n_tok, window,
             kv_type == IG_KV_F16 ? "f16" : "f32", (double)softcap);
    /* the CPU may round q (and probabilities) to f16 in its f16-cache kernels */
    check_case(x, what, &c, ref, kv_type == IG_KV_F16 ? 1e-5 : 1e-9);
}

/* GATHER of some rows only (the rows wanting logits). */
static void case_gather(ctx_t *x) {
    tcase c;
    init_case(&c, 9);
    const int w = 33;
    const float *in = input(&c, x->a, IG_BUF_X, w, 1.0f, 0.0f);
    REQUIRE(in);
    const int32_t idx[3] = {0, 4, 8};
    c.n_out = 3;
    memcpy(c.out_idx, idx, sizeof idx);
    REQUIRE(finish(&c, x->a, IG_BUF_X, w));
    float ref[3 * 33];
    for (int j = 0; j < 3; j++) memcpy(ref + j * w, in + idx[j] * w, (size_t)w * sizeof *ref);
    check_case(x, "gather 3 of 9 rows", &c, ref, 0);
}

static void run_all(ctx_t *x) {
    for (size_t i = 0; i < IG_ARRAY_LEN(all_types); i++) {
        case_matmul(x, all_types[i], 1, false);
        case_matmul(x, all_types[i], 13, false);
        case_matmul(x, all_types[i], 3, true);
        case_matmul(x, all_types[i], 17, true);
        case_embed(x, all_types[i]);
    }
    case_norms(x, 1);
    case_norms(x, 7);
    case_rope(x, 1);
    case_rope(x, 9);
    case_elementwise(x, 1);
    case_elementwise(x, 5);
    case_attention(x, 1, 0, IG_KV_F32, 0);
    case_attention(x, 11, 0, IG_KV_F32, 0);
    case_attention(x, 11, 3, IG_KV_F32, 50.0f);
    case_attention(x, 11, 0, IG_KV_F16, 0);
    case_gather(x);
}

IG_TEST(backend_ops_cpu) {
    arena a = {0};
    ctx_t x = {.name = "cpu", .a = &a};
    REQUIRE(ig_device_cpu_create(&x.dev) == IG_OK);
    REQUIRE(ig_threadpool_create(2, &x.pool) == IG_OK);
    run_all(&x);
    CHECK(x.n_cases > 60);
    ig_threadpool_free(x.pool);
    ig_device_free(x.dev);
    arena_free(&a);
}

#ifdef IGNIS_HAVE_VULKAN
IG_TEST(backend_ops_vulkan) {
    ig_vk_device_info *infos = NULL;
    int n = 0;
    bool have = false;
    if (ig_vk_list_devices(&infos, &n) == IG_OK)
        for (int i = 0; i < n; i++) have |= infos[i].usable;
    free(infos);
    if (!have) {
        ig_test_skip("no usable Vulkan device");
        return;
    }
    arena a = {0};
    ctx_t x = {.name = "vulkan", .a = &a};
    REQUIRE(ig_device_vulkan_create(0, NULL, &x.dev) == IG_OK);
    REQUIRE(ig_threadpool_create(1, &x.pool) == IG_OK);
    run_all(&x);
    ig_threadpool_free(x.pool);
    ig_device_free(x.dev);
    arena_free(&a);
}
#endif
