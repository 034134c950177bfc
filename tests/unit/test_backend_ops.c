/* Every op kind through the backend interface (engine/backend.h) on every
 * backend built in, against a scalar reference written here, by normalised
 * mean squared error.
 *
 * A case is a small op list, the steps it runs (a step can first fill the
 * KV cache: long contexts, sliding-window rings, replays of a one-token
 * graph) and the reference of its last step's output: the result rows are
 * gathered straight into the logits (exact), the only output a backend
 * hands back. References are computed once per case; each case then runs
 * on every configuration of its test that takes its group:
 *  - backend_ops_cpu, backend_ops_cpu_threads: the CPU, one and two threads;
 *  - backend_ops_vulkan*: Vulkan device 0 (skipped without one), made from
 *    device params and tuning (the vk_cfg tables below; the engine's device
 *    on it by ig_device_vulkan_wrap): by default; with weights in 4 KiB
 *    parts, staging copies, no fusions (_memory); without int8 activations
 *    and in other mat-vec shapes (_matvec); the split decode attention
 *    merged by a stage of its own, by units of any size, without its int8
 *    copy (_split: the same bytes); the tiled prefill attention in every
 *    step (on tensor cores where there) or recorded but not run
 *    (_attention); the tensor cores' matmuls on one extension only, with
 *    and without int8 (_coopmat). Each variant compiles its kernels anew,
 *    so it runs a subset sized for it; variants a device cannot make are
 *    skipped with the reason.
 * Shapes are chosen to reach the kernels' variants: odd widths, batches of
 * 1, 2, 7, 16, 64 and 130 tokens (the mat-vec's column tiles, partial
 * matmul tiles), several sequences interleaved, head dims 32 to 256 with 1
 * to 16 query heads per KV head, contexts long enough to split the decode
 * attention over chunks, and the op sequences backends fuse (add_rmsnorm +
 * rmsnorm, per-head rmsnorm + RoPE (+ cache store), the q/k/v projections
 * through the store, gate + up + GEGLU) so fused forms are checked too. */
#include "test.h"

#include "core/util.h"
#include "engine/backend.h"
#include "quant/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

/* ---- allocations and inputs ---- */

/* Allocations that must outlive the devices: a device keeps its copies of
 * weights keyed by address, so none is freed (and reused) while one lives. */
typedef struct arena {
    void **p;
    int n, cap;
} arena;

static void *keep(arena *a, void *p) {
    if (p && a->n == a->cap) {
        const int nc = a->cap ? 2 * a->cap : 256;
        void **np = realloc(a->p, (size_t)nc * sizeof *np);
        if (!np) {
            free(p);
            return NULL;
        }
        a->p = np;
        a->cap = nc;
    }
    if (p) a->p[a->n++] = p;
    return p;
}

static void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
    memset(a, 0, sizeof *a);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
static uint32_t urand(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static float *alloc_f(arena *a, size_t n) { return keep(a, calloc(n ? n : 1, sizeof(float))); }

static float *rand_vec(arena *a, size_t n, float scale, float offset) {
    float *v = alloc_f(a, n);
    if (v)
        for (size_t i = 0; i < n; i++) v[i] = offset + scale * frand();
    return v;
}

/* Values next to rounding ties of the int8 activation blocks (units of 32,
 * or 256 for the K-quants' Q8_K): each unit starts with its largest
 * magnitude amax, the others are (k + 1/2) amax / 127 moved by up to three
 * ulps, so a scale an ulp off gives another q now and then. In units of
 * 256 the runs of 32 but the first are quieter, their largest magnitude
 * about amax t/8 for a random t (Q8_K's multiplier), and their values
 * (k + 1/2) amax t / (8 127). */
static float *near_ties(arena *a, size_t n, size_t unit) {
    float *x = alloc_f(a, n);
    if (!x) return NULL;
    for (size_t b = 0; b + unit <= n; b += unit) {
        const float amax = 0.5f + 0.5f * fabsf(frand());
        x[b] = (b / unit) % 2 ? -amax : amax;
        float run = amax;
        for (size_t j = 1; j < unit; j++) {
            if (unit == 256 && j % 32 == 0) run = amax * (float)(1 + urand(8)) / 8.0f;
            const int k = unit == 256 && j % 32 == 1 ? 126 : (int)(fabsf(frand()) * 126.0f);
            const int steps = (int)urand(7) - 3;
            float v = ((float)k + 0.5f) * run / 127.0f;
            for (int m = 0; m < abs(steps); m++) v = nextafterf(v, steps < 0 ? 0.0f : 1.0f);
            x[b + j] = frand() < 0 ? -v : v;
        }
    }
    return x;
}

/* A {k, rows} tensor of type t from f32 values; *deq gets what it holds. */
static ig_tensor *make_tensor(arena *a, ig_dtype t, int64_t k, int64_t rows, const float *src, float **deq) {
    size_t rb;
    if (!ig_dtype_row_bytes(t, k, &rb)) return NULL;
    ig_tensor *w = keep(a, calloc(1, sizeof *w));
    uint8_t *data = keep(a, malloc(rb * (size_t)rows));
    float *d = alloc_f(a, (size_t)(k * rows));
    if (!w || !data || !d) return NULL;
    for (int64_t r = 0; r < rows; r++) {
        ig_quantize_row(t, src + r * k, data + (size_t)r * rb, k);
        ig_dequantize_row(t, data + (size_t)r * rb, d + r * k, k);
    }
    *w = (ig_tensor){.name = "w", .type = t, .n_dims = 2, .ne = {k, rows, 1, 1}, .data = data,
                     .nbytes = rb * (size_t)rows};
    if (deq) *deq = d;
    return w;
}

/* A random {k, rows} weight of type t and its dequantized values. */
static ig_tensor *rand_weight(arena *a, ig_dtype t, int k, int rows, float **deq) {
    const float *src = rand_vec(a, (size_t)k * rows, 1.0f, 0.0f);
    return src ? make_tensor(a, t, k, rows, src, deq) : NULL;
}

/* x as a backend quantizing activations for weights of type t sees it:
 * the CPU's blocks (Q8_K for the K-quants, else Q8_0), dequantized. */
static void x8_round(ig_dtype t, const float *x, float *out, int n) {
    if (t == IG_TYPE_Q4_K || t == IG_TYPE_Q5_K || t == IG_TYPE_Q6_K) {
        ig_block_q8_K q[64];
        ig_quantize_row_q8_K(x, q, n);
        ig_dequantize_row_q8_K(q, out, n);
    } else {
        uint8_t q[64 * 34 * 8];
        ig_quantize_row_q8_0_act(x, q, n);
        ig_dequantize_row(IG_TYPE_Q8_0, q, out, n);
    }
}

#define NO_W ((ig_dtype)999) /* no weight type */

static bool quantized(ig_dtype t) { return ig_dtype_block_elems(t) > 1; }

/* ---- cases ---- */

#define MAX_STEPS 6

typedef struct tstep {
    int n_tok, n_out, first; /* first: index of its first token among all */
    int32_t *out_idx;
} tstep;

enum {
    G_MM = 1 << 0,     /* matmul and embed over the weight types */
    G_MV = 1 << 1,     /* ... of one to eight tokens (the mat-vec shapes) */
    G_NORM = 1 << 2,   /* rmsnorm, add_rmsnorm */
    G_ROPE = 1 << 3,   /* RoPE */
    G_ELT = 1 << 4,    /* GEGLU, softcap, gather */
    G_ATTN = 1 << 5,   /* the cache store and attention */
    G_FUSE = 1 << 6,   /* op sequences a backend may fuse */
    G_X8 = 1 << 7,     /* int8 activations checked exactly (backends quantizing as the CPU) */
    G_SPLIT = 1 << 8,  /* decode attention over long contexts then an int8 matmul of its output */
    G_CM = 1 << 9,     /* matrices large enough for the tensor cores */
    /* subsets for the device variants (a variant compiles its kernels anew) */
    G_SHAPE = 1 << 10, /* mat-vecs of one to eight tokens, a few of each kind */
    G_LONG = 1 << 11,  /* one-token mat-vecs of long rows */
    G_PARTS = 1 << 12, /* weights of several 4 KiB parts */
    G_STAGE = 1 << 13, /* uploads, the cache and the logits through staging copies */
    G_TILE = 1 << 14,  /* attention the tiled prefill kernel can take (f16 caches, head dims 64-256) */
    G_IDLE = 1 << 15,  /* ... a few, where it is recorded but the step does not run it */
    G_ALL = (1 << 16) - 1
};

typedef struct tcase {
    char what[112];
    unsigned group;
    ig_graph g;
    ig_op ops[24];
    int n_steps, n_rows; /* n_rows: tokens of all steps, ids 0..n_rows-1 */
    tstep st[MAX_STEPS];
    int32_t *tokens, *pos, *seq; /* per token of all steps */
    int n_head_kv, head_dim, window, n_seq, n_ctx;
    ig_kv_type kv_type;
    const float *ref; /* the last step's n_out rows of the logits */
    double tol;
    float *last; /* the latest run's output (G_SPLIT: compared across configurations) */
} tcase;

typedef struct suite {
    arena a;
    unsigned want; /* groups to build */
    tcase **c;
    int n, cap;
} suite;

static ig_op *add(tcase *c, ig_op op) {
    if (c->g.n_ops >= (int)IG_ARRAY_LEN(c->ops)) return &c->ops[0];
    c->ops[c->g.n_ops] = op;
    return &c->ops[c->g.n_ops++];
}

/* A case of group `group` (NULL when the suite does not want it) running
 * n_steps steps of n_tok[k] tokens over n_seq sequences: token t of a step
 * belongs to sequence t % n_seq, positions continue per sequence from 0;
 * the last step wants every row. */
static tcase *new_case(suite *s, unsigned group, int n_steps, const int *n_tok, int n_seq) {
    if (!(group & s->want)) return NULL;
    tcase *c = keep(&s->a, calloc(1, sizeof *c));
    if (!c) return NULL;
    if (s->n == s->cap) {
        const int nc = s->cap ? 2 * s->cap : 64;
        tcase **np = realloc(s->c, (size_t)nc * sizeof *np);
        if (!np) return NULL;
        s->c = np;
        s->cap = nc;
    }
    s->c[s->n++] = c;
    c->group = group;
    c->g.ops = c->ops;
    c->n_steps = n_steps;
    for (int k = 0; k < n_steps; k++) c->n_rows += n_tok[k];
    c->tokens = keep(&s->a, calloc((size_t)c->n_rows, sizeof *c->tokens));
    c->pos = keep(&s->a, calloc((size_t)c->n_rows, sizeof *c->pos));
    c->seq = keep(&s->a, calloc((size_t)c->n_rows, sizeof *c->seq));
    if (!c->tokens || !c->pos || !c->seq) return NULL;
    int next[16] = {0}, r = 0;
    for (int k = 0; k < n_steps; k++) {
        tstep *st = &c->st[k];
        st->n_tok = st->n_out = n_tok[k];
        st->first = r;
        st->out_idx = keep(&s->a, calloc((size_t)n_tok[k], sizeof *st->out_idx));
        if (!st->out_idx) return NULL;
        for (int t = 0; t < n_tok[k]; t++, r++) {
            st->out_idx[t] = t;
            c->tokens[r] = r;
            c->seq[r] = t % n_seq;
            c->pos[r] = next[t % n_seq]++;
        }
    }
    c->n_seq = n_seq;
    c->n_ctx = 0;
    for (int i = 0; i < c->n_rows; i++)
        if (c->pos[i] + 1 > c->n_ctx) c->n_ctx = c->pos[i] + 1;
    c->n_head_kv = 1;
    c->head_dim = 4;
    c->kv_type = IG_KV_F32;
    return c;
}

static tcase *one_step(suite *s, unsigned group, int n_tok) { return new_case(s, group, 1, &n_tok, 1); }

static void name(tcase *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void name(tcase *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what, sizeof c->what, fmt, ap);
    va_end(ap);
}

static const tstep *last_step(const tcase *c) { return &c->st[c->n_steps - 1]; }

/* An f32 table of a row per token (of all steps), width w, written into
 * buffer b by EMBED: the values. */
static float *input(suite *s, tcase *c, ig_buf_id b, int w, const float *values) {
    float *v = values ? (float *)values : rand_vec(&s->a, (size_t)c->n_rows * w, 1.0f, 0.0f);
    ig_tensor *t = v ? make_tensor(&s->a, IG_TYPE_F32, w, c->n_rows, v, NULL) : NULL;
    if (!t) return NULL;
    c->g.buf_width[b] = w;
    add(c, (ig_op){.kind = IG_OP_EMBED, .dst = b, .w = t, .width = w, .f0 = 1.0f});
    return v;
}

static float *input_scaled(suite *s, tcase *c, ig_buf_id b, int w, float scale, float offset) {
    const float *v = rand_vec(&s->a, (size_t)c->n_rows * w, scale, offset);
    return v ? input(s, c, b, w, v) : NULL;
}

/* Ends the list: the last step's output rows of buffer b (width w) gathered
 * into the logits; ref: a buffer for the reference (n_out rows of w). */
static float *finish(suite *s, tcase *c, ig_buf_id b, int w, double tol) {
    c->g.buf_width[IG_BUF_LOGITS] = w;
    add(c, (ig_op){.kind = IG_OP_GATHER, .src = b, .dst = IG_BUF_LOGITS, .width = w, .on_outputs = true});
    for (int i = 0; i < IG_BUF_COUNT; i++)
        if (c->g.buf_width[i] == 0) c->g.buf_width[i] = 4;
    c->tol = tol;
    float *ref = alloc_f(&s->a, (size_t)last_step(c)->n_out * w);
    c->ref = ref;
    return ref;
}

/* ---- running a case ---- */

static ig_status run_case(ig_device *dev, const tcase *c, ig_threadpool *pool, float *out) {
    int n_batch = 1;
    for (int k = 0; k < c->n_steps; k++) n_batch = IG_MAX(n_batch, c->st[k].n_tok);
    ig_hparams hp = {0};
    hp.n_layer = 1;
    hp.n_head_kv = c->n_head_kv;
    hp.head_dim = hp.head_dim_v = c->head_dim;
    hp.sliding_window = c->window;
    hp.layer_is_swa[0] = c->window > 0;
    ig_kv_cache kv;
    IG_TRY(ig_kv_cache_init_ex(&kv, &hp, c->kv_type, c->n_seq, c->n_ctx, n_batch, dev->ops->host_kv));
    const ig_backend_desc desc = {.graph = &c->g, .kv = &kv, .n_batch = n_batch, .pool = pool};
    ig_backend *be = NULL;
    ig_status st = dev->ops->backend_create(dev, &desc, &be);
    const int w = c->g.buf_width[IG_BUF_LOGITS];
    float *logits = malloc((size_t)n_batch * w * sizeof *logits);
    if (st == IG_OK && !logits) st = IG_ERR_NO_MEMORY;
    for (int k = 0; k < c->n_steps && st == IG_OK; k++) {
        const tstep *s = &c->st[k];
        const ig_step step = {.n_tokens = s->n_tok, .tokens = c->tokens + s->first, .pos = c->pos + s->first,
                              .seq = c->seq + s->first, .n_out = s->n_out, .out_idx = s->out_idx};
        const float *rows = NULL;
        st = be->ops->compute(be, &step, logits, &rows);
        if (st == IG_OK && k == c->n_steps - 1) memcpy(out, rows, (size_t)s->n_out * w * sizeof *out);
    }
    free(logits);
    if (be) be->ops->destroy(be);
    ig_kv_cache_free(&kv);
    return st;
}

static double nmse(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return num / (den > 0 ? den : 1);
}

/* Where a configuration runs the suite. */
typedef struct target {
    ig_device *dev;
    const char *name;
    ig_threadpool *pool;
    unsigned groups;
    bool x8;   /* quantizes activations as the CPU does (G_X8 holds) */
    bool same; /* G_SPLIT: the same bytes as the previous target's */
} target;

static int run_suite(const suite *s, const target *t) {
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        tcase *c = s->c[i];
        if (!(c->group & t->groups) || ((c->group & G_X8) && !t->x8)) continue;
        const size_t len = (size_t)last_step(c)->n_out * c->g.buf_width[IG_BUF_LOGITS];
        float *out = malloc(len * sizeof *out);
        if (!out) {
            ig_test_fail_at(__FILE__, __LINE__, "out of memory");
            return n;
        }
        const double t0 = ig_time_now();
        ig_status st = run_case(t->dev, c, t->pool, out);
        const double dt = ig_time_now() - t0;
        n++;
        if (st != IG_OK) {
            ig_test_fail_at(__FILE__, __LINE__, "%s: %s: status %d (%s)", t->name, c->what, (int)st, ig_last_error());
            free(out);
            continue;
        }
        const double e = nmse(out, c->ref, len);
        if (!(e <= c->tol)) ig_test_fail_at(__FILE__, __LINE__, "%s: %s: nmse %.3g > %.3g", t->name, c->what, e, c->tol);
        if (getenv("IGNIS_TEST_VERBOSE")) fprintf(stderr, "    %-18s %-62s %6.3fs nmse %.3g\n", t->name, c->what, dt, e);
        if (c->group & G_SPLIT) {
            if (t->same && c->last && memcmp(c->last, out, len * sizeof *out) != 0)
                ig_test_fail_at(__FILE__, __LINE__, "%s: %s: not the same bytes as before", t->name, c->what);
            free(c->last);
            c->last = out;
        } else {
            free(out);
        }
    }
    return n;
}

static void suite_free(suite *s) {
    for (int i = 0; i < s->n; i++) free(s->c[i]->last);
    free(s->c);
    arena_free(&s->a);
}

/* ---- the scalar reference ---- */

static void ref_rmsnorm(const float *x, float *y, const float *w, int d, float eps, bool add_to) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / d + eps);
    for (int i = 0; i < d; i++) y[i] = (float)((add_to ? y[i] : 0) + x[i] * r * w[i]);
}

/* NeoX RoPE; the angle as every backend takes it: pos times the f32
 * frequency (1 / base^(2i/hd)) / factor, in f32. */
static void ref_rope(float *x, int n_heads, int hd, int pos, float base, float factor) {
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            const float inv = 1.0f / powf(base, (float)(2 * i) / (float)hd), ang = (float)pos * (inv / factor);
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

/* y[n] = w[n, k] x[k] in double (w: rows of k dequantized values). */
static float ref_dot(const float *w, const float *x, int k) {
    double s = 0;
    for (int i = 0; i < k; i++) s += (double)w[i] * x[i];
    return (float)s;
}

/* Attention of the last step's tokens over the cache as the steps left it:
 * q, k, v rows per token of all steps (k and v as stored: rounded to f16
 * for an f16 cache by the caller); out: [n_out][nh * hd]. */
static void ref_attention(const tcase *c, const float *q, const float *k, const float *v, int nh, float scale,
                          float softcap, float *out) {
    const int nkv = c->n_head_kv, hd = c->head_dim, group = nh / nkv;
    const tstep *ls = last_step(c);
    double *s = malloc((size_t)(c->n_rows + hd) * sizeof *s);
    if (!s) return;
    for (int o = 0; o < ls->n_out; o++) {
        const int t = ls->first + ls->out_idx[o];
        for (int h = 0; h < nh; h++) {
            const int kvh = h / group;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < c->n_rows; j++) {
                s[j] = -INFINITY;
                if (j >= ls->first + ls->n_tok) break; /* not stored yet */
                if (c->seq[j] != c->seq[t] || c->pos[j] > c->pos[t] ||
                    (c->window && c->pos[j] <= c->pos[t] - c->window))
                    continue;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[((size_t)t * nh + h) * hd + i] * k[((size_t)j * nkv + kvh) * hd + i];
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                s[j] = d;
                if (d > mx) mx = d;
            }
            for (int j = 0; j < c->n_rows; j++) sum += s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx);
            double *acc = s + c->n_rows;
            for (int i = 0; i < hd; i++) acc[i] = 0;
            for (int j = 0; j < c->n_rows; j++)
                if (s[j] != 0)
                    for (int i = 0; i < hd; i++) acc[i] += s[j] / sum * v[((size_t)j * nkv + kvh) * hd + i];
            for (int i = 0; i < hd; i++) out[((size_t)o * nh + h) * hd + i] = (float)acc[i];
        }
    }
    free(s);
}

static void round_kv(const tcase *c, float *x, size_t n) {
    if (c->kv_type == IG_KV_F16)
        for (size_t i = 0; i < n; i++) x[i] = ig_f16_to_f32(ig_f32_to_f16(x[i]));
}

/* ---- the cases ---- */

static const ig_dtype all_types[] = {IG_TYPE_F32, IG_TYPE_F16,  IG_TYPE_BF16, IG_TYPE_Q8_0, IG_TYPE_Q4_0,
                                     IG_TYPE_Q5_0, IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};

/* Rows of an odd length: floats not a multiple of 8 (no vec4 mat-vec),
 * an odd count of blocks of 32, three super-blocks of 256. */
static int k_for(ig_dtype t) { return !quantized(t) ? 203 : ig_dtype_block_elems(t) == 32 ? 32 * 11 : 256 * 3; }

/* The CPU rounds activations to 8 bits for quantized rows; f16/bf16 rows
 * may take f16 activations; tensor cores round both to f16. */
static double mm_tol(ig_dtype t) { return t == IG_TYPE_F32 ? 1e-10 : t == IG_TYPE_F16 || t == IG_TYPE_BF16 ? 1e-5 : 2e-4; }

enum { MM_HEAD = 1, MM_GEGLU = 2, MM_OUTPUTS = 4 };

/* rows x k matmul of n_tok tokens; MM_HEAD: the output projection itself
 * (gathered rows into the logits); MM_GEGLU: gate and up then GEGLU;
 * MM_OUTPUTS: on the output rows only (the first n_tok - 1). */
static void case_matmul(suite *s, unsigned group, ig_dtype t, int k, int n, int n_tok, int mode) {
    const bool head = mode & MM_HEAD, geglu = mode & MM_GEGLU, outs = mode & MM_OUTPUTS;
    if (n_tok <= 8) group |= G_MV;
    tcase *c = one_step(s, group, n_tok);
    if (!c) return;
    if (outs) c->st[0].n_out = n_tok > 1 ? n_tok - 1 : 1;
    const int n_out = c->st[0].n_out;
    float *dg, *du = NULL;
    ig_tensor *w = rand_weight(&s->a, t, k, n, &dg), *wu = geglu ? rand_weight(&s->a, t, k, n, &du) : NULL;
    const float *in = input(s, c, IG_BUF_X, k, NULL);
    REQUIRE(w && in && (!geglu || wu));
    name(c, "matmul%s %s k=%d n=%d T=%d%s", head ? " head" : geglu ? "+geglu" : "", ig_dtype_name(t), k, n, n_tok,
         outs ? " outputs" : "");
    float *ref;
    if (head) {
        c->g.buf_width[IG_BUF_OUT_H] = k;
        c->g.buf_width[IG_BUF_LOGITS] = n;
        add(c, (ig_op){.kind = IG_OP_GATHER, .src = IG_BUF_X, .dst = IG_BUF_OUT_H, .width = k, .on_outputs = true});
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_OUT_H, .dst = IG_BUF_LOGITS, .w = w, .width = n,
                       .on_outputs = true});
        for (int i = 0; i < IG_BUF_COUNT; i++)
            if (!c->g.buf_width[i]) c->g.buf_width[i] = 4;
        c->tol = mm_tol(t);
        c->ref = ref = alloc_f(&s->a, (size_t)n_tok * n);
    } else {
        c->g.buf_width[IG_BUF_GATE] = c->g.buf_width[IG_BUF_UP] = n;
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_GATE, .w = w, .width = n, .on_outputs = outs});
        if (geglu) {
            add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_UP, .w = wu, .width = n,
                           .on_outputs = outs});
            add(c, (ig_op){.kind = IG_OP_GEGLU, .src = IG_BUF_UP, .dst = IG_BUF_GATE, .width = n, .on_outputs = outs});
        }
        ref = finish(s, c, IG_BUF_GATE, n, geglu ? 2 * mm_tol(t) : mm_tol(t));
    }
    REQUIRE(ref);
    for (int r = 0; r < n_out; r++)
        for (int j = 0; j < n; j++) {
            const float *x = in + (size_t)r * k;
            float a = ref_dot(dg + (size_t)j * k, x, k);
            if (geglu) a = ref_gelu(a) * ref_dot(du + (size_t)j * k, x, k);
            ref[(size_t)r * n + j] = a;
        }
}

/* Quantized weights against x as the CPU quantizes it, to float roundings
 * only (one q off shows): inputs next to rounding ties; onehot: row r holds
 * one nonzero weight, at element r, so each output is one element of the
 * int8 copy, not diluted in a sum. */
static void case_matmul_x8(suite *s, ig_dtype t, int k, int n, int n_tok, bool onehot) {
    tcase *c = one_step(s, G_X8, n_tok);
    if (!c) return;
    const size_t unit = ig_dtype_block_elems(t) == 256 ? 256 : 32;
    float *src = onehot ? alloc_f(&s->a, (size_t)n * k) : rand_vec(&s->a, (size_t)n * k, 1.0f, 0.0f), *deq;
    const float *x = near_ties(&s->a, (size_t)n_tok * k, unit);
    REQUIRE(src && x);
    if (onehot)
        for (int r = 0; r < n; r++) src[(size_t)r * k + r % k] = 1.0f;
    ig_tensor *w = make_tensor(&s->a, t, k, n, src, &deq);
    REQUIRE(w && input(s, c, IG_BUF_X, k, x));
    name(c, "matmul %s k=%d n=%d T=%d int8%s", ig_dtype_name(t), k, n, n_tok, onehot ? " one-hot" : " near ties");
    c->g.buf_width[IG_BUF_GATE] = n;
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_GATE, .w = w, .width = n});
    float *ref = finish(s, c, IG_BUF_GATE, n, 1e-11), *xq = alloc_f(&s->a, (size_t)k);
    REQUIRE(ref && xq);
    for (int r = 0; r < n_tok; r++) {
        x8_round(t, x + (size_t)r * k, xq, k);
        for (int j = 0; j < n; j++) ref[(size_t)r * n + j] = ref_dot(deq + (size_t)j * k, xq, k);
    }
}

static void case_embed(suite *s, unsigned group, ig_dtype t, int n_tok) {
    tcase *c = one_step(s, group, n_tok);
    if (!c) return;
    const int k = quantized(t) ? 3 * (int)ig_dtype_block_elems(t) : 101, rows = 37;
    float *deq;
    ig_tensor *w = rand_weight(&s->a, t, k, rows, &deq);
    REQUIRE(w);
    for (int i = 0; i < n_tok; i++) c->tokens[i] = (int32_t)urand(rows);
    c->g.buf_width[IG_BUF_X] = k;
    add(c, (ig_op){.kind = IG_OP_EMBED, .dst = IG_BUF_X, .w = w, .width = k, .f0 = 33.941f});
    float *ref = finish(s, c, IG_BUF_X, k, 1e-12);
    REQUIRE(ref);
    for (int r = 0; r < n_tok; r++)
        for (int i = 0; i < k; i++) ref[(size_t)r * k + i] = deq[(size_t)c->tokens[r] * k + i] * 33.941f;
    name(c, "embed %s k=%d T=%d", ig_dtype_name(t), k, n_tok);
}

/* rmsnorm over whole rows or per head, in place or not. */
static void case_rmsnorm(suite *s, int w, int heads, int n_tok, bool in_place) {
    tcase *c = one_step(s, G_NORM, n_tok);
    if (!c) return;
    const int d = w / heads;
    const float *in = input_scaled(s, c, IG_BUF_X, w, 3.0f, 0.5f), *nw = rand_vec(&s->a, (size_t)d, 0.5f, 1.0f);
    REQUIRE(in && nw);
    const ig_buf_id dst = in_place ? IG_BUF_X : IG_BUF_XN;
    c->g.buf_width[IG_BUF_XN] = w;
    add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_X, .dst = dst, .norm = nw, .width = w, .n_heads = heads,
                   .f0 = 1e-6f});
    float *ref = finish(s, c, dst, w, 1e-10);
    REQUIRE(ref);
    for (int r = 0; r < n_tok * heads; r++) ref_rmsnorm(in + (size_t)r * d, ref + (size_t)r * d, nw, d, 1e-6f, false);
    name(c, "rmsnorm w=%d heads=%d T=%d%s", w, heads, n_tok, in_place ? " in place" : "");
}

/* add_rmsnorm (x += rmsnorm(src) * w1); then, when norm2, rmsnorm of x into
 * XN (a fusable pair) with XN (out_x: x) as the output; on_outputs: both on
 * the output rows only (the first n_tok - 1). */
static void case_add_norm(suite *s, int w, int n_tok, bool norm2, bool out_x, bool on_outputs) {
    tcase *c = one_step(s, norm2 ? G_FUSE : G_NORM, n_tok);
    if (!c) return;
    const float *x = input_scaled(s, c, IG_BUF_X, w, 1.0f, 0.0f), *src = input_scaled(s, c, IG_BUF_PROJ, w, 3.0f, 0.0f);
    const float *w1 = rand_vec(&s->a, (size_t)w, 0.5f, 1.0f), *w2 = rand_vec(&s->a, (size_t)w, 0.5f, 1.0f);
    REQUIRE(x && src && w1 && w2);
    tstep *ls = &c->st[0];
    if (on_outputs) ls->n_out = n_tok > 1 ? n_tok - 1 : 1;
    c->g.buf_width[IG_BUF_XN] = w;
    add(c, (ig_op){.kind = IG_OP_ADD_RMSNORM, .src = IG_BUF_PROJ, .dst = IG_BUF_X, .norm = w1, .width = w,
                   .f0 = 1e-6f, .on_outputs = on_outputs});
    if (norm2)
        add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_X, .dst = IG_BUF_XN, .norm = w2, .width = w, .n_heads = 1,
                       .f0 = 1e-6f, .on_outputs = on_outputs});
    float *ref = finish(s, c, norm2 && !out_x ? IG_BUF_XN : IG_BUF_X, w, 1e-10), *xr = alloc_f(&s->a, (size_t)w);
    REQUIRE(ref && xr);
    for (int r = 0; r < ls->n_out; r++) {
        memcpy(xr, x + (size_t)r * w, (size_t)w * sizeof *xr);
        ref_rmsnorm(src + (size_t)r * w, xr, w1, w, 1e-6f, true);
        if (norm2 && !out_x) ref_rmsnorm(xr, ref + (size_t)r * w, w2, w, 1e-6f, false);
        else memcpy(ref + (size_t)r * w, xr, (size_t)w * sizeof *xr);
    }
    name(c, "add_rmsnorm%s w=%d T=%d%s%s", norm2 ? "+rmsnorm" : "", w, n_tok, norm2 ? (out_x ? " (x)" : " (xn)") : "",
         on_outputs ? " outputs" : "");
}

/* Quantized matmuls of a norm's output (a backend may write their int8
 * input in the norm and share it between them), then of that output
 * normed again in place (the int8 copy made anew): matmul `which` (0, 1:
 * Q4_K and Q8_0 of the first, 2: Q4_K of the second) as the output. */
static void case_norm_matmuls(suite *s, int which) {
    const int w = 1280, n = 40, T = 3;
    tcase *c = one_step(s, G_FUSE, T);
    if (!c) return;
    float *da, *db;
    const float *x = input(s, c, IG_BUF_X, w, NULL), *src = input_scaled(s, c, IG_BUF_PROJ, w, 3.0f, 0.0f);
    const float *w1 = rand_vec(&s->a, (size_t)w, 0.5f, 1.0f), *w2 = rand_vec(&s->a, (size_t)w, 0.5f, 1.0f);
    ig_tensor *a = rand_weight(&s->a, IG_TYPE_Q4_K, w, n, &da), *b = rand_weight(&s->a, IG_TYPE_Q8_0, w, n, &db);
    float *xr = alloc_f(&s->a, (size_t)w), *xn = alloc_f(&s->a, (size_t)w);
    REQUIRE(x && src && w1 && w2 && a && b && xr && xn);
    const ig_buf_id outs[3] = {IG_BUF_UP, IG_BUF_Q, IG_BUF_K};
    c->g.buf_width[IG_BUF_XN] = w;
    c->g.buf_width[IG_BUF_GATE] = c->g.buf_width[IG_BUF_UP] = c->g.buf_width[IG_BUF_Q] = c->g.buf_width[IG_BUF_K] = n;
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_PROJ, .dst = IG_BUF_GATE, .w = a, .width = n});
    add(c, (ig_op){.kind = IG_OP_ADD_RMSNORM, .src = IG_BUF_PROJ, .dst = IG_BUF_X, .norm = w1, .width = w, .f0 = 1e-6f});
    add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_X, .dst = IG_BUF_XN, .norm = w2, .width = w, .n_heads = 1,
                   .f0 = 1e-6f});
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_XN, .dst = IG_BUF_UP, .w = a, .width = n});
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_XN, .dst = IG_BUF_Q, .w = b, .width = n});
    add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_XN, .dst = IG_BUF_XN, .norm = w1, .width = w, .n_heads = 1,
                   .f0 = 1e-6f});
    add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_XN, .dst = IG_BUF_K, .w = a, .width = n});
    float *ref = finish(s, c, outs[which], n, 3e-4);
    REQUIRE(ref);
    for (int t = 0; t < T; t++) {
        memcpy(xr, x + (size_t)t * w, (size_t)w * sizeof *xr);
        ref_rmsnorm(src + (size_t)t * w, xr, w1, w, 1e-6f, true);
        ref_rmsnorm(xr, xn, w2, w, 1e-6f, false);
        if (which == 2) ref_rmsnorm(xn, xn, w1, w, 1e-6f, false);
        for (int j = 0; j < n; j++) ref[(size_t)t * n + j] = ref_dot((which == 1 ? db : da) + (size_t)j * w, xn, w);
    }
    name(c, "add_rmsnorm+rmsnorm+matmuls w=%d T=%d: %s", w, T,
         which == 0 ? "Q4_K of the norm" : which == 1 ? "Q8_0 of the norm" : "Q4_K of the norm normed again");
}

/* RoPE at random positions below pos_max (norm: a per-head rmsnorm first,
 * in place: a fusable pair); sequences interleaved. */
static void case_rope(suite *s, int heads, int hd, int n_tok, float base, float factor, int pos_max, bool norm) {
    tcase *c = new_case(s, norm ? G_FUSE : G_ROPE, 1, &n_tok, 2);
    if (!c) return;
    const int w = heads * hd;
    for (int t = 0; t < n_tok; t++) c->pos[t] = (int32_t)urand((uint32_t)pos_max);
    const float *in = input_scaled(s, c, IG_BUF_Q, w, 2.0f, 0.0f), *nw = rand_vec(&s->a, (size_t)hd, 0.5f, 1.0f);
    REQUIRE(in && nw);
    if (norm)
        add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_Q, .dst = IG_BUF_Q, .norm = nw, .width = w, .n_heads = heads,
                       .f0 = 1e-6f});
    add(c, (ig_op){.kind = IG_OP_ROPE, .dst = IG_BUF_Q, .width = w, .n_heads = heads, .f0 = base, .f1 = factor});
    /* an angle is pos * freq in f32 everywhere; its cos and sin are not
       (f32 on a GPU): 1e-6 of the largest angles */
    float *ref = finish(s, c, IG_BUF_Q, w, pos_max > 1000 ? 1e-9 : 1e-10);
    REQUIRE(ref);
    memcpy(ref, in, (size_t)n_tok * w * sizeof *ref);
    for (int t = 0; t < n_tok; t++) {
        if (norm)
            for (int h = 0; h < heads; h++) {
                const size_t o = ((size_t)t * heads + h) * hd;
                ref_rmsnorm(in + o, ref + o, nw, hd, 1e-6f, false);
            }
        ref_rope(ref + (size_t)t * w, heads, hd, c->pos[t], base, factor);
    }
    name(c, "%srope heads=%d hd=%d T=%d base=%g factor=%g pos<%d", norm ? "rmsnorm+" : "", heads, hd, n_tok,
         (double)base, (double)factor, pos_max);
}

/* GEGLU (gate in place, not after a gate/up pair), softcap; gather of some rows. */
static void case_elementwise(suite *s, int w, int n_tok) {
    for (int variant = 0; variant < 3; variant++) {
        tcase *c = one_step(s, G_ELT, n_tok);
        if (!c) return;
        const float *g = input_scaled(s, c, IG_BUF_GATE, w, 3.0f, 0.0f);
        REQUIRE(g);
        if (variant == 2) { /* every other row, the last one always */
            tstep *ls = &c->st[0];
            ls->n_out = 0;
            for (int t = n_tok % 2 ? 0 : 1; t < n_tok; t += 2) ls->out_idx[ls->n_out++] = t;
        }
        if (variant == 0) {
            const float *u = input(s, c, IG_BUF_UP, w, NULL);
            REQUIRE(u);
            add(c, (ig_op){.kind = IG_OP_GEGLU, .src = IG_BUF_UP, .dst = IG_BUF_GATE, .width = w});
            float *ref = finish(s, c, IG_BUF_GATE, w, 1e-9);
            REQUIRE(ref);
            for (int i = 0; i < n_tok * w; i++) ref[i] = ref_gelu(g[i]) * u[i];
        } else if (variant == 1) {
            add(c, (ig_op){.kind = IG_OP_SOFTCAP, .dst = IG_BUF_GATE, .width = w, .f0 = 30.0f});
            float *ref = finish(s, c, IG_BUF_GATE, w, 1e-9);
            REQUIRE(ref);
            for (int i = 0; i < n_tok * w; i++) ref[i] = (float)(30.0 * tanh(g[i] / 30.0));
        } else {
            float *ref = finish(s, c, IG_BUF_GATE, w, 0);
            REQUIRE(ref);
            for (int j = 0; j < c->st[0].n_out; j++)
                memcpy(ref + (size_t)j * w, g + (size_t)c->st[0].out_idx[j] * w, (size_t)w * sizeof *ref);
        }
        name(c, "%s w=%d T=%d", variant == 0 ? "geglu" : variant == 1 ? "softcap" : "gather", w, n_tok);
    }
}

/* The attention shapes: query / KV heads, head dim, the cache, sequences,
 * window, softcap; the steps (a first one filling the cache). */
typedef struct attn_shape {
    int nh, nkv, hd;
    ig_kv_type kv;
    int n_seq, window;
    float softcap;
    int pre, n_tok; /* tokens of each first step (0: none) and of the checked one */
    int pre_steps;  /* first steps (0: one where pre) */
} attn_shape;

enum { ATTN_PLAIN, ATTN_NORM_ROPE, ATTN_ROPE, ATTN_QKV, ATTN_INT8_OUT };

/* KV_STORE and ATTENTION after q, k and v come in (ATTN_PLAIN); with a
 * per-head rmsnorm and RoPE of q and k first (ATTN_NORM_ROPE: the fusable
 * pairs, k's with the store), RoPE of k only (ATTN_ROPE), the three
 * projections of one input as well (ATTN_QKV: a one-token step twice after
 * the first); ATTN_INT8_OUT: a quantized matmul reading the attention's
 * output (after one of its input, so producers know its int8 blocks), the
 * checked step twice (the graph replayed: its counters back at zero). */
static void case_attention(suite *s, unsigned group, attn_shape a, int kind, ig_dtype wt, ig_dtype wv, int n_in) {
    const int n_pre = a.pre ? (a.pre_steps ? a.pre_steps : 1) : 0;
    const int n_steps = n_pre + (kind == ATTN_QKV || kind == ATTN_INT8_OUT ? 2 : 1);
    int steps[MAX_STEPS];
    for (int i = 0; i < n_steps; i++) steps[i] = i < n_pre ? a.pre : a.n_tok;
    tcase *c = new_case(s, group, n_steps, steps, a.n_seq);
    if (!c) return;
    /* decode over a long context: a cache of 2048 (the split attention
       takes as many chunks as its size allows: 32) */
    if (kind == ATTN_INT8_OUT && a.pre >= 200) c->n_ctx = 2048;
    const int wq = a.nh * a.hd, wk = a.nkv * a.hd, R = c->n_rows;
    c->n_head_kv = a.nkv;
    c->head_dim = a.hd;
    c->window = a.window;
    c->kv_type = a.kv;
    const float scale = 1.0f / sqrtf((float)a.hd), eps = 1e-6f, base = 10000.0f, factor = 2.0f;
    float *q, *k, *v, *dq = NULL, *dk = NULL, *dv = NULL;
    const float *x = NULL, *nq = rand_vec(&s->a, (size_t)a.hd, 0.5f, 1.0f), *nk = rand_vec(&s->a, (size_t)a.hd, 0.5f, 1.0f);
    float *deqo = NULL;
    ig_tensor *wo = NULL;
    c->g.buf_width[IG_BUF_Q] = wq;
    c->g.buf_width[IG_BUF_K] = c->g.buf_width[IG_BUF_V] = wk;
    if (kind == ATTN_QKV) {
        x = input(s, c, IG_BUF_X, n_in, NULL);
        ig_tensor *tq = rand_weight(&s->a, wt, n_in, wq, &dq), *tk = rand_weight(&s->a, wt, n_in, wk, &dk),
                  *tv = rand_weight(&s->a, wv, n_in, wk, &dv);
        REQUIRE(x && tq && tk && tv);
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_Q, .w = tq, .width = wq});
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_K, .w = tk, .width = wk});
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_X, .dst = IG_BUF_V, .w = tv, .width = wk});
        q = alloc_f(&s->a, (size_t)R * wq);
        k = alloc_f(&s->a, (size_t)R * wk);
        v = alloc_f(&s->a, (size_t)R * wk);
        REQUIRE(q && k && v);
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < wq; j++) q[(size_t)r * wq + j] = ref_dot(dq + (size_t)j * n_in, x + (size_t)r * n_in, n_in);
            for (int j = 0; j < wk; j++) {
                k[(size_t)r * wk + j] = ref_dot(dk + (size_t)j * n_in, x + (size_t)r * n_in, n_in);
                v[(size_t)r * wk + j] = ref_dot(dv + (size_t)j * n_in, x + (size_t)r * n_in, n_in);
            }
        }
    } else {
        const float *q0 = input_scaled(s, c, IG_BUF_Q, wq, 2.0f, 0.0f);
        if (kind == ATTN_INT8_OUT) { /* a matmul of the attention's width before it */
            wo = rand_weight(&s->a, wt, wq, 24, &deqo);
            REQUIRE(wo);
            c->g.buf_width[IG_BUF_GATE] = c->g.buf_width[IG_BUF_PROJ] = 24;
            add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_Q, .dst = IG_BUF_GATE, .w = wo, .width = 24});
        }
        const float *k0 = input_scaled(s, c, IG_BUF_K, wk, 2.0f, 0.0f), *v0 = input(s, c, IG_BUF_V, wk, NULL);
        q = alloc_f(&s->a, (size_t)R * wq);
        k = alloc_f(&s->a, (size_t)R * wk);
        v = alloc_f(&s->a, (size_t)R * wk);
        REQUIRE(q0 && k0 && v0 && q && k && v);
        memcpy(q, q0, (size_t)R * wq * sizeof *q);
        memcpy(k, k0, (size_t)R * wk * sizeof *k);
        memcpy(v, v0, (size_t)R * wk * sizeof *v);
    }
    REQUIRE(nq && nk);
    if (kind == ATTN_NORM_ROPE || kind == ATTN_QKV) {
        add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_Q, .dst = IG_BUF_Q, .norm = nq, .width = wq,
                       .n_heads = a.nh, .f0 = eps});
        add(c, (ig_op){.kind = IG_OP_RMSNORM, .src = IG_BUF_K, .dst = IG_BUF_K, .norm = nk, .width = wk,
                       .n_heads = a.nkv, .f0 = eps});
        add(c, (ig_op){.kind = IG_OP_ROPE, .dst = IG_BUF_Q, .width = wq, .n_heads = a.nh, .f0 = base, .f1 = factor});
    }
    if (kind != ATTN_PLAIN && kind != ATTN_INT8_OUT)
        add(c, (ig_op){.kind = IG_OP_ROPE, .dst = IG_BUF_K, .width = wk, .n_heads = a.nkv, .f0 = base, .f1 = factor});
    for (int r = 0; r < R; r++) {
        if (kind == ATTN_NORM_ROPE || kind == ATTN_QKV) {
            for (int h = 0; h < a.nh; h++) {
                float *qh = q + ((size_t)r * a.nh + h) * a.hd;
                ref_rmsnorm(qh, qh, nq, a.hd, eps, false);
            }
            for (int h = 0; h < a.nkv; h++) {
                float *kh = k + ((size_t)r * a.nkv + h) * a.hd;
                ref_rmsnorm(kh, kh, nk, a.hd, eps, false);
            }
            ref_rope(q + (size_t)r * wq, a.nh, a.hd, c->pos[r], base, factor);
        }
        if (kind != ATTN_PLAIN && kind != ATTN_INT8_OUT) ref_rope(k + (size_t)r * wk, a.nkv, a.hd, c->pos[r], base, factor);
    }
    round_kv(c, k, (size_t)R * wk);
    round_kv(c, v, (size_t)R * wk);
    c->g.buf_width[IG_BUF_ATTN] = wq;
    add(c, (ig_op){.kind = IG_OP_KV_STORE, .layer = 0});
    add(c, (ig_op){.kind = IG_OP_ATTENTION, .src = IG_BUF_Q, .dst = IG_BUF_ATTN, .layer = 0, .n_heads = a.nh,
                   .width = wq, .f0 = scale, .f1 = a.softcap});
    /* f16 caches: the CPU may round q and the probabilities to f16, tensor
       cores do; quantized projections: 8-bit activations */
    const double tol = kind == ATTN_QKV || kind == ATTN_INT8_OUT ? 3e-4 : a.kv == IG_KV_F16 ? 1e-5 : 1e-9;
    const int n_out = last_step(c)->n_out;
    float *att = alloc_f(&s->a, (size_t)n_out * wq);
    REQUIRE(att);
    if (kind == ATTN_INT8_OUT) {
        add(c, (ig_op){.kind = IG_OP_MATMUL, .src = IG_BUF_ATTN, .dst = IG_BUF_PROJ, .w = wo, .width = 24});
        float *ref = finish(s, c, IG_BUF_PROJ, 24, tol);
        REQUIRE(ref);
        ref_attention(c, q, k, v, a.nh, scale, a.softcap, att);
        for (int o = 0; o < n_out; o++)
            for (int j = 0; j < 24; j++) ref[(size_t)o * 24 + j] = ref_dot(deqo + (size_t)j * wq, att + (size_t)o * wq, wq);
    } else {
        float *ref = finish(s, c, IG_BUF_ATTN, wq, tol);
        REQUIRE(ref);
        ref_attention(c, q, k, v, a.nh, scale, a.softcap, ref);
    }
    static const char *kinds[] = {"attention", "rmsnorm+rope+attention", "rope+attention", "qkv+attention",
                                  "attention+matmul"};
    name(c, "%s %d/%d hd=%d %s seqs=%d window=%d softcap=%g T=%dx%d+%d%s%s", kinds[kind], a.nh, a.nkv, a.hd,
         a.kv == IG_KV_F16 ? "f16" : "f32", a.n_seq, a.window, (double)a.softcap, n_pre, a.pre, a.n_tok,
         wt != NO_W ? " " : "", wt != NO_W ? ig_dtype_name(wt) : "");
}

static void attn(suite *s, unsigned group, attn_shape a) {
    if (a.kv == IG_KV_F16 && (a.hd == 64 || a.hd == 128 || a.hd == 256)) group |= G_TILE;
    case_attention(s, group, a, ATTN_PLAIN, NO_W, NO_W, 0);
}

/* ---- the suite ---- */

static void build_suite(suite *s) {
    /* matmul, embed: every weight type at every batch shape */
    const int toks[] = {1, 2, 7, 16, 64, 130};
    for (size_t i = 0; i < IG_ARRAY_LEN(all_types); i++) {
        const ig_dtype t = all_types[i];
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) case_matmul(s, G_MM, t, k_for(t), 67, toks[k], 0);
        if (!quantized(t)) /* rows of whole vec4s: the fast mat-vec */
            for (int T = 1; T <= 5; T += 4) case_matmul(s, G_MM, t, 200, 67, T, 0);
        case_matmul(s, G_MM, t, k_for(t), 37, 3, MM_HEAD);
        case_matmul(s, G_MM, t, k_for(t), 37, 17, MM_HEAD);
        case_matmul(s, G_FUSE | G_MM, t, k_for(t), 45, 1, MM_GEGLU);
        case_matmul(s, G_FUSE | G_MM, t, k_for(t), 45, 17, MM_GEGLU);
        const unsigned eg = t == IG_TYPE_Q6_K || t == IG_TYPE_F32 ? G_PARTS : t == IG_TYPE_Q5_0 ? G_STAGE : 0;
        case_embed(s, G_MM, t, 1);
        case_embed(s, G_MM | eg, t, 17);
        if (quantized(t)) case_matmul_x8(s, t, 1024, 16, 8, false);
    }
    case_matmul(s, G_FUSE | G_MM, IG_TYPE_Q8_0, 256, 40, 64, MM_GEGLU);
    case_matmul(s, G_FUSE | G_MM, IG_TYPE_Q4_K, 512, 37, 130, MM_GEGLU);
    case_matmul(s, G_MM, IG_TYPE_Q8_0, 32, 140000, 1, 0); /* more workgroups than a grid row */
    case_matmul(s, G_MM, IG_TYPE_F16, 1152, 300, 64, 0);
    case_matmul(s, G_MM, IG_TYPE_Q4_K, 256 * 21, 3, 1, 0); /* long rows, few */
    case_matmul(s, G_MM, IG_TYPE_Q6_K, 256, 300, 2, 0);    /* rows of one block */
    /* one-token rows long against their count (a row per workgroup where
       a mat-vec shape says so), and a few tokens of them */
    case_matmul(s, G_MM | G_LONG, IG_TYPE_Q6_K, 256 * 7, 9, 1, 0);
    case_matmul(s, G_MM | G_LONG, IG_TYPE_Q4_K, 256 * 9, 37, 1, 0);
    case_matmul(s, G_MM | G_LONG, IG_TYPE_Q4_K, 256 * 9, 37, 3, 0);
    case_matmul(s, G_MM | G_LONG, IG_TYPE_Q8_0, 32 * 21, 10, 1, MM_GEGLU | MM_OUTPUTS);
    case_matmul(s, G_MM | G_LONG, IG_TYPE_F16, 520, 12, 1, 0);
    /* the mat-vec shapes: several rows per group, rows of at most 32 items */
    case_matmul(s, G_SHAPE, IG_TYPE_Q4_K, 256 * 5, 37, 1, MM_GEGLU);
    case_matmul(s, G_SHAPE, IG_TYPE_Q6_K, 256 * 3, 37, 3, 0);
    case_matmul(s, G_SHAPE, IG_TYPE_Q8_0, 32 * 9, 37, 8, MM_GEGLU);
    case_matmul(s, G_SHAPE, IG_TYPE_F16, 200, 37, 2, 0);
    case_matmul(s, G_SHAPE, IG_TYPE_Q6_K, 256 * 3, 37, 1, MM_GEGLU);
    case_matmul(s, G_SHAPE, IG_TYPE_Q8_0, 32 * 9, 37, 1, 0);
    case_matmul(s, G_SHAPE, IG_TYPE_F16, 200, 37, 1, 0);
    /* weights in parts, staging copies */
    case_matmul(s, G_PARTS, IG_TYPE_Q4_K, 512, 50, 3, 0);
    case_matmul(s, G_PARTS, IG_TYPE_Q4_K, 512, 50, 17, 0);
    case_matmul(s, G_PARTS, IG_TYPE_Q4_K, 512, 50, 1, 0);
    case_matmul(s, G_PARTS, IG_TYPE_F32, 100, 33, 3, MM_GEGLU);
    case_matmul(s, G_PARTS, IG_TYPE_Q8_0, 256, 40, 64, MM_GEGLU);
    case_matmul(s, G_PARTS, IG_TYPE_Q6_K, 512, 50, 3, MM_GEGLU);
    case_matmul(s, G_PARTS, IG_TYPE_Q8_0, 256, 50, 1, 0);
    case_matmul(s, G_PARTS, IG_TYPE_Q5_0, 256, 50, 4, MM_GEGLU);
    case_matmul(s, G_PARTS, IG_TYPE_Q6_K, 512, 50, 130, 0);
    case_matmul(s, G_PARTS, IG_TYPE_Q6_K, 512, 40, 5, MM_HEAD);
    case_matmul(s, G_STAGE, IG_TYPE_Q5_K, 256, 50, 3, MM_GEGLU);
    case_matmul(s, G_STAGE, IG_TYPE_BF16, 64, 50, 17, 0);
    case_matmul(s, G_STAGE, IG_TYPE_Q4_K, 512, 40, 2, 0);
    case_matmul(s, G_STAGE, IG_TYPE_F16, 64, 40, 1, MM_GEGLU);
    case_matmul(s, G_STAGE, IG_TYPE_Q5_0, 256, 40, 2, MM_HEAD);
    case_matmul(s, G_MM, IG_TYPE_Q5_0, 320, 37, 32, 0);
    case_matmul(s, G_MM, IG_TYPE_Q6_K, 256, 70, 5, MM_OUTPUTS);
    case_matmul(s, G_MM, IG_TYPE_Q4_0, 64, 70, 20, MM_OUTPUTS);
    case_matmul(s, G_FUSE | G_MM, IG_TYPE_Q8_0, 32 * 11, 45, 5, MM_GEGLU | MM_OUTPUTS);
    case_matmul_x8(s, IG_TYPE_Q8_0, 1024, 1024, 3, true); /* blocks of 32, f16 scales */
    case_matmul_x8(s, IG_TYPE_Q4_0, 1024, 1024, 2, true); /* ... and their half sums */
    case_matmul_x8(s, IG_TYPE_Q4_K, 1024, 1024, 3, true); /* units of 256, f32 scales */

    /* norms */
    const int ntoks[] = {1, 3, 17, 64};
    for (size_t k = 0; k < IG_ARRAY_LEN(ntoks); k++) {
        const int T = ntoks[k];
        case_rmsnorm(s, 1152, 1, T, false);
        case_rmsnorm(s, 4 * 256, 4, T, true); /* QK-norm, head dim 256 */
        case_rmsnorm(s, 3 * 128, 3, T, false);
        case_rmsnorm(s, 5 * 32, 5, T, true);
        case_add_norm(s, 1000, T, false, false, false);
    }
    case_rmsnorm(s, 67, 1, 7, false);
    case_rmsnorm(s, 3 * 18, 3, 7, true);
    case_add_norm(s, 5376, 3, false, false, false);
    /* add_rmsnorm then rmsnorm: the post-norm, residual and next pre-norm */
    case_add_norm(s, 1152, 1, true, false, false);
    case_add_norm(s, 640, 17, true, false, false);
    case_add_norm(s, 640, 17, true, true, false);
    case_add_norm(s, 5376, 3, true, false, true);
    case_add_norm(s, 100, 5, true, false, false);
    case_add_norm(s, 99, 2, true, false, false); /* not whole vec4s */
    for (int which = 0; which < 3; which++) case_norm_matmuls(s, which);

    /* RoPE, alone and after a per-head rmsnorm */
    const int hds[] = {32, 128, 256};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(ntoks); k++) {
            case_rope(s, 3, hds[i], ntoks[k], 10000.0f, 1.0f, 600, false);
            case_rope(s, 2, hds[i], ntoks[k], 1000000.0f, 8.0f, 131072, false);
        }
        case_rope(s, 4 >> i, hds[i], 3, 10000.0f, 2.0f, 600, true);
    }
    case_rope(s, 3, 18, 9, 10000.0f, 2.0f, 20, false);

    for (size_t k = 0; k < IG_ARRAY_LEN(ntoks); k++) case_elementwise(s, 1000, ntoks[k]);
    case_elementwise(s, 75, 5);

    /* attention: GQA, sequences interleaved, windows, softcap, f16 caches */
    attn(s, G_ATTN, (attn_shape){4, 2, 16, IG_KV_F32, 2, 0, 0, 0, 1, 0});
    attn(s, G_ATTN, (attn_shape){4, 2, 16, IG_KV_F32, 2, 0, 0, 0, 11, 0});
    attn(s, G_ATTN, (attn_shape){4, 2, 16, IG_KV_F32, 2, 3, 50.0f, 0, 11, 0});
    attn(s, G_ATTN, (attn_shape){4, 2, 16, IG_KV_F16, 2, 0, 0, 0, 11, 0});
    /* head dims 64..256 and the query heads per KV head of every Gemma 3
       size (4: 270M, 1B; 2: 4B, 12B, 27B), blocks of query rows ending
       mid-batch, three sequences in one block, rings smaller than the
       context (a first step fills them) */
    const int atoks[] = {1, 7, 64, 100};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        const int hd = hds[i] == 32 ? 64 : hds[i];
        for (size_t k = 0; k < IG_ARRAY_LEN(atoks); k++) {
            const int T = atoks[k];
            attn(s, G_ATTN, (attn_shape){4, 1, hd, IG_KV_F16, 1, 0, 0, 0, T, 0});
            attn(s, G_ATTN | (hd == 128 && T == 64 ? G_IDLE : 0), (attn_shape){4, 2, hd, IG_KV_F16, 3, 0, 0, 0, T, 0});
            attn(s, G_ATTN | (hd == 256 && T == 7 ? G_IDLE : 0),
                 (attn_shape){2, 2, hd, IG_KV_F16, 1, 37, 0, T > 16 ? T : 16, T, 4});
            attn(s, G_ATTN, (attn_shape){4, 2, hd, IG_KV_F32, 2, T == 1 ? 0 : 37, 0, 0, T, 0});
        }
    }
    attn(s, G_ATTN, (attn_shape){8, 1, 128, IG_KV_F16, 1, 0, 0, 0, 33, 0});  /* 8 heads per KV head */
    attn(s, G_ATTN, (attn_shape){16, 1, 64, IG_KV_F16, 2, 0, 0, 0, 20, 0});  /* 16 */
    attn(s, G_ATTN, (attn_shape){16, 1, 256, IG_KV_F16, 2, 0, 0, 0, 9, 0});
    attn(s, G_ATTN, (attn_shape){8, 4, 128, IG_KV_F16, 1, 0, 0, 0, 5, 0});
    attn(s, G_ATTN, (attn_shape){4, 4, 64, IG_KV_F16, 1, 0, 50.0f, 0, 50, 0});
    attn(s, G_ATTN, (attn_shape){4, 4, 64, IG_KV_F32, 1, 0, 50.0f, 0, 3, 0});
    attn(s, G_ATTN | G_STAGE, (attn_shape){4, 2, 128, IG_KV_F16, 2, 37, 0, 16, 17, 3});
    /* long contexts: many key tiles, a window of 200 over 360 */
    attn(s, G_ATTN, (attn_shape){4, 2, 128, IG_KV_F16, 1, 0, 0, 300, 64, 0});
    attn(s, G_ATTN, (attn_shape){4, 1, 256, IG_KV_F16, 1, 200, 0, 300, 64, 0});
    attn(s, G_ATTN | G_IDLE, (attn_shape){4, 2, 128, IG_KV_F16, 1, 0, 0, 300, 1, 0});
    attn(s, G_ATTN, (attn_shape){4, 1, 256, IG_KV_F32, 1, 200, 0, 300, 3, 0});

    /* decode steps over long contexts (the keys split over chunks, merged
       after) with an int8-quantized matmul of the output: query heads per
       KV head 1 to 8, heads sharing a block of 256, heads of several */
    const struct {
        attn_shape a;
        ig_dtype wt;
    } split[] = {
        {{32, 16, 128, IG_KV_F16, 1, 0, 0, 40, 1, 0}, IG_TYPE_Q4_K}, {{4, 1, 256, IG_KV_F16, 1, 0, 0, 100, 1, 0}, IG_TYPE_Q4_K},
        {{4, 1, 256, IG_KV_F16, 1, 0, 0, 200, 3, 0}, IG_TYPE_Q6_K},   {{8, 4, 256, IG_KV_F32, 1, 0, 0, 50, 2, 0}, IG_TYPE_Q4_K},
        {{8, 8, 128, IG_KV_F32, 1, 0, 0, 40, 3, 0}, IG_TYPE_Q4_K},    {{8, 2, 128, IG_KV_F16, 1, 0, 0, 40, 2, 0}, IG_TYPE_Q4_K},
        {{4, 2, 64, IG_KV_F32, 1, 0, 0, 200, 3, 0}, IG_TYPE_Q8_0},    {{8, 1, 64, IG_KV_F16, 1, 0, 0, 70, 1, 0}, IG_TYPE_Q8_0},
        {{4, 4, 64, IG_KV_F32, 1, 0, 0, 90, 2, 0}, IG_TYPE_Q4_K},     {{4, 2, 128, IG_KV_F32, 1, 0, 0, 40, 3, 0}, IG_TYPE_Q8_0},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(split); i++)
        case_attention(s, G_SPLIT, split[i].a, ATTN_INT8_OUT, split[i].wt, NO_W, 0);

    /* fusable sequences in front of the store: per-head rmsnorm + RoPE of q
       and k, RoPE of k; the q/k/v projections of one token (their tails) */
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        case_attention(s, G_FUSE, (attn_shape){4, 2, hds[i], IG_KV_F32, 1, 0, 0, 2, 5, 0}, ATTN_NORM_ROPE, NO_W,
                       NO_W, 0);
        case_attention(s, G_FUSE, (attn_shape){2, 1, hds[i], IG_KV_F16, 1, 0, 0, 4, 1, 0}, ATTN_NORM_ROPE, NO_W,
                       NO_W, 0);
        case_attention(s, G_FUSE, (attn_shape){2, 2, hds[i], IG_KV_F16, 2, 0, 0, 0, 3, 0}, ATTN_ROPE, NO_W,
                       NO_W, 0);
        case_attention(s, G_FUSE, (attn_shape){2, 1, hds[i], IG_KV_F32, 2, 0, 0, 3, 6, 0}, ATTN_ROPE, NO_W,
                       NO_W, 0);
    }
    case_attention(s, G_FUSE, (attn_shape){4, 1, 256, IG_KV_F16, 1, 0, 0, 3, 1, 0}, ATTN_QKV, IG_TYPE_Q5_0, IG_TYPE_Q8_0, 640);
    case_attention(s, G_FUSE | G_PARTS | G_SHAPE, (attn_shape){8, 4, 128, IG_KV_F16, 1, 0, 0, 2, 1, 0}, ATTN_QKV,
                   IG_TYPE_Q4_K, IG_TYPE_Q6_K, 512);
    case_attention(s, G_FUSE, (attn_shape){6, 2, 64, IG_KV_F32, 1, 10, 0, 12, 1, 0}, ATTN_QKV, IG_TYPE_Q4_0, IG_TYPE_Q8_0, 96);
    case_attention(s, G_FUSE, (attn_shape){4, 2, 64, IG_KV_F32, 1, 0, 0, 2, 1, 0}, ATTN_QKV, IG_TYPE_F16, IG_TYPE_F32, 64);

    /* the tensor cores' sizes (quantized matrices of at least 4M weights
       from 8 or 9 tokens on): partial tiles of rows and tokens, a half step
       at the row end, wide tiles, K split into ranges, GEGLU */
    const ig_dtype cm_types[] = {IG_TYPE_Q8_0, IG_TYPE_Q4_0, IG_TYPE_Q5_0, IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};
    const int cm_toks[] = {9, 17, 64, 130, 200};
    for (size_t i = 0; i < IG_ARRAY_LEN(cm_types); i++) {
        const ig_dtype t = cm_types[i];
        const int k = ig_dtype_block_elems(t) == 256 ? 256 * 9 : 32 * 73;
        for (size_t j = 0; j < IG_ARRAY_LEN(cm_toks); j++)
            case_matmul(s, G_CM, t, k, 1800 + 7 * (int)j, cm_toks[j],
                        cm_toks[j] == 17 || cm_toks[j] == 130 ? MM_GEGLU : 0);
        case_matmul(s, G_CM, t, 4096, 1024, 40, 0);
        case_matmul(s, G_CM, t, 4096, 1024, 12, MM_GEGLU);
        case_matmul(s, G_CM, t, k, 1830, 30, MM_HEAD);
    }
}

static void cpu_run(int threads) {
    suite s = {.want = G_ALL & ~G_CM};
    build_suite(&s);
    target t = {.name = threads == 1 ? "cpu" : "cpu 2 threads", .groups = G_ALL, .x8 = true};
    REQUIRE(ig_device_cpu_create(&t.dev) == IG_OK);
    REQUIRE(ig_threadpool_create(threads, &t.pool) == IG_OK);
    CHECK(run_suite(&s, &t) > 280);
    ig_threadpool_free(t.pool);
    ig_device_free(t.dev);
    suite_free(&s);
}

IG_TEST(backend_ops_cpu) { cpu_run(1); }
IG_TEST(backend_ops_cpu_threads) { cpu_run(2); }

/* Q5_1 weights, on the CPU only (the Vulkan backend refuses them): every
 * batch shape (grouped-layout sizes included), the head, GEGLU, the
 * embedding, and a step where a Q5_0 matmul shares the input. */
IG_TEST(backend_ops_cpu_q5_1) {
    suite s = {.want = G_ALL & ~G_CM};
    const int toks[] = {1, 2, 7, 16, 64, 130};
    for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) case_matmul(&s, G_MM, IG_TYPE_Q5_1, 32 * 11, 67, toks[k], 0);
    case_matmul(&s, G_MM, IG_TYPE_Q5_1, 32 * 11, 37, 17, MM_HEAD);
    case_matmul(&s, G_FUSE | G_MM, IG_TYPE_Q5_1, 32 * 11, 45, 17, MM_GEGLU);
    case_matmul(&s, G_FUSE | G_MM, IG_TYPE_Q5_1, 32 * 11, 45, 1, MM_GEGLU | MM_OUTPUTS);
    case_embed(&s, G_MM, IG_TYPE_Q5_1, 17);
    case_attention(&s, G_FUSE, (attn_shape){4, 1, 256, IG_KV_F16, 1, 0, 0, 3, 1, 0}, ATTN_QKV, IG_TYPE_Q5_1,
                   IG_TYPE_Q5_0, 640);
    for (int threads = 1; threads <= 2; threads++) {
        target t = {.name = threads == 1 ? "cpu" : "cpu 2 threads", .groups = G_ALL, .x8 = true};
        REQUIRE(ig_device_cpu_create(&t.dev) == IG_OK);
        REQUIRE(ig_threadpool_create(threads, &t.pool) == IG_OK);
        CHECK(run_suite(&s, &t) == 11);
        ig_threadpool_free(t.pool);
        ig_device_free(t.dev);
    }
    suite_free(&s);
}

/* The comparison can fail: a result one value off from its reference. */
IG_TEST(backend_ops_reference_checked) {
    suite s = {.want = G_NORM | G_MM};
    case_rmsnorm(&s, 67, 1, 3, false);
    case_matmul(&s, G_MM, IG_TYPE_Q4_K, 256, 5, 2, 0);
    REQUIRE(s.n == 2);
    target t = {.name = "cpu", .groups = G_ALL, .x8 = true};
    REQUIRE(ig_device_cpu_create(&t.dev) == IG_OK);
    REQUIRE(ig_threadpool_create(1, &t.pool) == IG_OK);
    for (int i = 0; i < s.n; i++) {
        float *out = malloc((size_t)last_step(s.c[i])->n_out * s.c[i]->g.buf_width[IG_BUF_LOGITS] * sizeof *out);
        REQUIRE(out);
        REQUIRE_OK(run_case(t.dev, s.c[i], t.pool, out));
        const size_t n = (size_t)last_step(s.c[i])->n_out * s.c[i]->g.buf_width[IG_BUF_LOGITS];
        CHECK(nmse(out, s.c[i]->ref, n) <= s.c[i]->tol);
        out[n / 2] += 0.5f * fabsf(out[n / 2]) + 0.1f; /* one value off */
        CHECK(nmse(out, s.c[i]->ref, n) > s.c[i]->tol);
        free(out);
    }
    ig_threadpool_free(t.pool);
    ig_device_free(t.dev);
    suite_free(&s);
}

#ifdef IGNIS_HAVE_VULKAN

/* A Vulkan configuration: device params on top of the defaults, what it
 * needs of the device (else skipped), the groups it runs. */
enum { NEED_NONE, NEED_INT8, NEED_CM_NV, NEED_CM_KHR, NEED_CMQ, NEED_ATTN_CM, NEED_ATTN_CM_KHR };
typedef struct vk_cfg {
    const char *name;
    unsigned groups;
    uint64_t part_bytes;
    bool staging;
    ig_vk_coopmat_ext ext;
    const char *tuning;
    int need;
    bool same; /* G_SPLIT: the same bytes as the previous configuration */
} vk_cfg;

static const char *need_text[] = {"", "integer dot product", "NV cooperative-matrix matmul",
                                  "KHR cooperative-matrix matmul", "int8 cooperative-matrix matmul",
                                  "cooperative-matrix attention", "KHR cooperative-matrix attention"};

static bool has(const ig_vk_device *d, int need) {
    switch (need) {
    case NEED_INT8: return ig_vk_device_int8(d);
    case NEED_CM_NV: return ig_vk_device_coopmat(d) && !ig_vk_device_coopmat_khr(d);
    case NEED_CM_KHR: return ig_vk_device_coopmat_khr(d);
    case NEED_CMQ: return ig_vk_device_coopmat_int8(d);
    case NEED_ATTN_CM: return ig_vk_device_attn_coopmat(d);
    case NEED_ATTN_CM_KHR: return ig_vk_device_attn_coopmat(d) && ig_vk_device_coopmat_khr(d);
    default: return true;
    }
}

static bool vk_usable(void) {
    ig_vk_device_info *infos = NULL;
    int n = 0;
    bool have = false;
    if (ig_vk_list_devices(&infos, &n) == IG_OK) have = n > 0 && infos[0].usable;
    free(infos);
    if (!have) ig_test_skip("no usable Vulkan device 0");
    return have;
}

/* Builds the suite for the configurations' groups and runs it on each;
 * *ran: how many configurations ran. */
static void vk_run(const vk_cfg *cfg, int n_cfg, int *ran) {
    *ran = 0;
    if (!vk_usable()) return;
    suite s = {0};
    for (int i = 0; i < n_cfg; i++) s.want |= cfg[i].groups;
    ig_threadpool *pool;
    REQUIRE_OK(ig_threadpool_create(1, &pool));
    bool built = false;
    for (int i = 0; i < n_cfg; i++) {
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = 0;
        p.weight_part_bytes = cfg[i].part_bytes;
        p.force_staging = cfg[i].staging;
        p.coopmat_ext = cfg[i].ext;
        p.tuning = cfg[i].tuning;
        ig_vk_device *vk;
        REQUIRE_OK(ig_vk_device_create(&p, &vk));
        if (!has(vk, cfg[i].need)) {
            fprintf(stderr, "  vulkan %s: skipped: no %s on this device\n", cfg[i].name, need_text[cfg[i].need]);
            ig_vk_device_free(vk);
            continue;
        }
        target t = {.name = cfg[i].name, .pool = pool, .groups = cfg[i].groups, .x8 = ig_vk_device_int8(vk),
                    .same = cfg[i].same};
        REQUIRE_OK(ig_device_vulkan_wrap(vk, &t.dev));
        if (!built) { /* references once, for the first configuration that runs */
            build_suite(&s);
            built = true;
        }
        const int n = run_suite(&s, &t);
        if (getenv("IGNIS_TEST_VERBOSE")) fprintf(stderr, "  vulkan %s: %d cases\n", cfg[i].name, n);
        ig_device_free(t.dev);
        (*ran)++;
    }
    ig_threadpool_free(pool);
    suite_free(&s);
}

/* The default device: every group but the tensor cores' sizes. */
IG_TEST(backend_ops_vulkan) {
    static const vk_cfg cfg[] = {
        {"default", G_ALL & ~(G_CM | G_SPLIT), 0, false, IG_VK_COOPMAT_AUTO, NULL, NEED_NONE, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
}

/* Its memory variants: weights split into parts of 4 KiB (several per
 * matrix, no q/k/v tails; tensor cores with 128-token tiles at any size
 * and no split K), the copies of a discrete GPU (staging buffers, logits
 * read back through host memory); and no fusions (the fusable sequences
 * op by op). */
IG_TEST(backend_ops_vulkan_memory) {
    static const vk_cfg cfg[] = {
        {"parts of 4 KiB", G_PARTS, 4096, false, IG_VK_COOPMAT_AUTO, "cm_wide_groups=1,cm_split_groups=1", NEED_NONE,
         false},
        {"staging", G_STAGE, 4096, true, IG_VK_COOPMAT_AUTO, NULL, NEED_NONE, false},
        {"unfused", G_FUSE, 0, false, IG_VK_COOPMAT_AUTO, "fuse=0", NEED_NONE, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
}

/* The mat-vec without int8 activations (f32 ones: every type), and the
 * int8 mat-vec in the GPU's shapes (one token: 64 invocations per row of
 * 128-wide workgroups; several: two rows per group of 32; and row groups
 * of two rows in the q/k tails), the older one (two items per pass), a
 * group of two subgroups' width, and one-token long rows in workgroups of
 * one row. */
IG_TEST_SLOW(backend_ops_vulkan_matvec) {
    static const vk_cfg cfg[] = {
        {"no int8", G_MV, 0, false, IG_VK_COOPMAT_AUTO, "int8=0", NEED_NONE, false},
        {"mv gpu", G_SHAPE, 0, false, IG_VK_COOPMAT_AUTO,
         "mv_wg=128,mv_nr1=1,mv_nrn=2,mv_tpr=64,mv_unroll=1,mv_unrolln=1,mv_nrn_min=0,head_tail_nr=2",
         NEED_NONE, false},
        {"mv older", G_SHAPE, 0, false, IG_VK_COOPMAT_AUTO,
         "mv_wg=128,mv_nr1=1,mv_nrn=1,mv_tpr=64,mv_unroll=2,mv_unrolln=2,mv_nrn_min=0", NEED_NONE, false},
        {"mv wide", G_SHAPE, 0, false, IG_VK_COOPMAT_AUTO,
         "mv_wg=128,mv_nr1=2,mv_nrn=2,mv_tpr=128,mv_unroll=2,mv_unrolln=2,mv_nrn_min=0", NEED_NONE, false},
        {"mv long 128", G_LONG, 0, false, IG_VK_COOPMAT_AUTO,
         "mv_long_tpr=128,mv_long_pct=200,mv_long_unroll=4,mv_long_rows=8", NEED_NONE, false},
        {"mv long 64", G_LONG, 0, false, IG_VK_COOPMAT_AUTO,
         "mv_long_tpr=64,mv_long_pct=200,mv_long_unroll=1,mv_long_rows=8", NEED_NONE, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
}

/* The split decode attention (long contexts, few tokens) merged by the
 * last workgroup of each unit of heads, without writing the int8 copy of
 * its output (the matmul reading it makes it: the same bytes), merged by
 * units of any size, and by a stage of its own; and the int8 copies made
 * through shared memory rather than subgroup shuffles. */
IG_TEST_SLOW(backend_ops_vulkan_split) {
    static const vk_cfg cfg[] = {
        {"default", G_SPLIT, 0, false, IG_VK_COOPMAT_AUTO, NULL, NEED_NONE, false},
        {"no x8 producers", G_SPLIT, 0, false, IG_VK_COOPMAT_AUTO, "x8_producers=0", NEED_INT8, true},
        {"merge any unit", G_SPLIT, 0, false, IG_VK_COOPMAT_AUTO, "attn_merge_max=1048576", NEED_NONE, false},
        {"merge stage", G_SPLIT, 0, false, IG_VK_COOPMAT_AUTO, "attn_merge_max=0", NEED_NONE, false},
        {"x8 shared memory", G_SPLIT | G_X8, 0, false, IG_VK_COOPMAT_AUTO, "x8_shuffle=0", NEED_INT8, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
}

/* The tiled prefill attention in every graph and step (attn_tile.comp;
 * on tensor cores where there, NV's and KHR's), and in every graph but
 * no step (the decode kernel recorded next to it serves them). */
IG_TEST_SLOW(backend_ops_vulkan_attention) {
    static const vk_cfg cfg[] = {
        {"tiled", G_TILE, 0, false, IG_VK_COOPMAT_AUTO, "attn_tile_min=1,attn_tile_run=1,attn_coopmat=0", NEED_NONE,
         false},
        {"tiled idle", G_IDLE, 0, false, IG_VK_COOPMAT_AUTO, "attn_tile_min=1,attn_tile_run=1000000", NEED_NONE,
         false},
        {"tiled coopmat", G_TILE, 0, false, IG_VK_COOPMAT_AUTO, "attn_tile_min=1,attn_tile_run=1", NEED_ATTN_CM, false},
        {"tiled coopmat KHR", G_TILE, 0, false, IG_VK_COOPMAT_KHR, "attn_tile_min=1,attn_tile_run=1",
         NEED_ATTN_CM_KHR, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
}

/* Tensor cores: the f16 matmul on NV's and on KHR's fragments only (the
 * int8 one off, as by default, so Q4_K and Q6_K take it too), the int8 one
 * (asked for; each with
 * weights in parts of 64 KiB, 128-token tiles at any size and no split K;
 * the tensor-core kernels read rows of the weights' f32 width, up to 16 KiB
 * here, so a part must hold one). */
IG_TEST(backend_ops_vulkan_coopmat) {
    static const vk_cfg cfg[] = {
        {"coopmat NV", G_CM, 0, false, IG_VK_COOPMAT_NV, "coopmat_int8=0", NEED_CM_NV, false},
        {"coopmat NV parts", G_CM, 65536, false, IG_VK_COOPMAT_NV, "coopmat_int8=0,cm_wide_groups=1,cm_split_groups=1",
         NEED_CM_NV, false},
        {"coopmat KHR", G_CM, 0, false, IG_VK_COOPMAT_KHR, "coopmat_int8=0", NEED_CM_KHR, false},
        {"coopmat KHR parts", G_CM, 65536, false, IG_VK_COOPMAT_KHR,
         "coopmat_int8=0,cm_wide_groups=1,cm_split_groups=1", NEED_CM_KHR, false},
        {"coopmat int8 NV", G_CM, 0, false, IG_VK_COOPMAT_NV, "coopmat_int8=1", NEED_CMQ, false},
        {"coopmat int8 KHR", G_CM, 0, false, IG_VK_COOPMAT_KHR, "coopmat_int8=1", NEED_CMQ, false},
        {"coopmat int8 parts", G_CM, 65536, false, IG_VK_COOPMAT_AUTO, "coopmat_int8=1,cm_wide_groups=1,cm_split_groups=1",
         NEED_CMQ, false},
    };
    int ran;
    vk_run(cfg, (int)IG_ARRAY_LEN(cfg), &ran);
    if (ran == 0) ig_test_skip("no cooperative-matrix matmul on this device");
}

#endif
