/* Token sampler: logit bias, repetition/presence/frequency penalties, then
 * greedy or top-k -> temperature softmax -> top-p -> min-p -> seeded draw.
 *
 * Cost per token is O(V) with no sort of the vocabulary. Work happens on
 * x = (logit - max) / temperature <= 0 and w = exp(x) (vectorised exp):
 *  - top-k <= HEAP_TOPK_MAX: a size-k heap fused into one scan;
 *  - larger top-k: a histogram of x finds the bucket holding the k-th token,
 *    only tokens down to that bucket are collected, then quickselect;
 *  - top-p without top-k: the total mass, then w summed per x-bucket over
 *    the tokens that can be in the nucleus at all (p_i >= (1-p)/V); the
 *    bucket where the cumulative mass reaches p bounds the nucleus, only
 *    tokens down to it are collected, and a mass-guided quickselect over
 *    the boundary bucket finds the exact cut;
 *  - min-p is a threshold on w (w_max = 1), applied while collecting.
 * Candidates are ordered by (x desc, id asc); this strict total order
 * defines top-k and top-p ties (lower ids win). */
#include "core/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Candidates with exp(x - x_max) below e^-87 (a normal float's limit) have
 * probability < 1.7e-38 of the max; they are left out of the stochastic set. */
#define X_MIN (-87.0f)
/* top-p compares the cumulative mass with p * (1 - TOP_P_REL_EPS): float
 * weights are only good to ~1e-7, and a set whose mass is exactly p (0.5 +
 * 0.3 for p = 0.8) should count as reaching it. */
#define TOP_P_REL_EPS 1e-6
/* Top-k up to this size uses a heap during the scan, larger k a histogram. */
#define HEAP_TOPK_MAX 1024
/* Histogram buckets over x in [X_MIN, 0]: bucket = trunc(-x * HB_SCALE). */
#define HB_SCALE 8.0f
#define HB_N 697 /* -X_MIN * HB_SCALE + 1 */
#define HB_LANES 4
/* Penalty windows longer than this are kept as "all" (no ring buffer). */
#define IG_SAMPLER_MAX_WINDOW (1 << 22)

typedef struct ig_cand {
    float x; /* (logit - max) / temperature, <= 0 */
    float w; /* exp(x), in (0, 1] */
    int32_t id;
} ig_cand;

struct ig_sampler {
    ig_sampler_params p; /* p.logit_bias is not kept (see bias_*) */
    int n_vocab;
    uint64_t rng[4], rng_init[4];

    float *work;   /* n_vocab: processed logits */
    ig_cand *cand; /* n_vocab */
    double hist_mass[HB_LANES][HB_N];  /* per-lane copies break store chains */
    uint32_t hist_count[HB_LANES][HB_N];

    /* Logit bias, one entry per token (the last entry given for a token wins). */
    int32_t *bias_ids;
    float *bias_vals;
    int n_bias;
    float *bias_dense; /* n_vocab, 0 where no bias; NULL when n_bias == 0 */

    /* Penalties: counts over the window, the distinct tokens in it, and the
     * window itself as a ring (absent for penalty_last_n == -1 or beyond
     * IG_SAMPLER_MAX_WINDOW: nothing is ever evicted). */
    bool pen_on;
    int32_t *counts;   /* n_vocab */
    int32_t *dpos;     /* n_vocab: index into distinct[] */
    int32_t *distinct; /* n_vocab */
    int n_distinct;
    int32_t *ring;
    int ring_cap, ring_len, ring_head;
};

/* Internal hook for tests: the final candidate set the next ig_sampler_sample
 * would draw from (ids and renormalised probabilities, arrays of n_vocab_real
 * entries), without consuming randomness. Returns the count, 0 when every
 * processed logit is -inf (sample then falls back to the raw argmax). */
int ig_sampler_debug_candidates(ig_sampler *s, const float *logits, int32_t *ids, float *probs);

/* ---- PRNG: xoshiro256** seeded through splitmix64 ------------------------- */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* ---- exp for x <= 0 (4 lanes, GCC/Clang vector extensions) ----------------- */

typedef float ig_v4f __attribute__((vector_size(16)));
typedef int32_t ig_v4i __attribute__((vector_size(16)));
#define IG_V4(c) ((ig_v4f){(c), (c), (c), (c)})

/* exp(x) for x in [X_MIN, 0] to ~1e-7 relative (Cody-Waite reduction by
 * ln 2 and a degree-7 polynomial, Cephes' expf coefficients); x < X_MIN,
 * -inf and NaN give 0. Larger x are not supported (x <= 0 here always). */
static inline ig_v4f v_exp_le0(ig_v4f x) {
    ig_v4i ok = x >= IG_V4(X_MIN);
    x = (ig_v4f)(((ig_v4i)x & ok) | ((ig_v4i)IG_V4(X_MIN) & ~ok));
    ig_v4f t = x * IG_V4(1.44269504088896341f);
    ig_v4f n = (t + IG_V4(12582912.0f)) - IG_V4(12582912.0f); /* round to nearest */
    ig_v4f r = x - n * IG_V4(0.693359375f);
    r = r - n * IG_V4(-2.12194440e-4f);
    ig_v4f q = IG_V4(1.9875691500e-4f);
    q = q * r + IG_V4(1.3981999507e-3f);
    q = q * r + IG_V4(8.3334519073e-3f);
    q = q * r + IG_V4(4.1665795894e-2f);
    q = q * r + IG_V4(1.6666665459e-1f);
    q = q * r + IG_V4(5.0000001201e-1f);
    q = q * r * r + r + IG_V4(1.0f);
    ig_v4i e2 = (__builtin_convertvector(n, ig_v4i) + 127) << 23; /* 2^n, n >= -126 */
    return (ig_v4f)((ig_v4i)(q * (ig_v4f)e2) & ok);
}

/* The scalar form, bit-identical to a lane of v_exp_le0. */
static inline float exp_le0(float x) { return v_exp_le0(IG_V4(x))[0]; }

static inline ig_v4f v_load(const float *p) {
    ig_v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* x clamped into [X_MIN, 0] (NaN -> X_MIN) and its histogram bucket. */
static inline ig_v4i v_bucket(ig_v4f x) {
    ig_v4i ok = x >= IG_V4(X_MIN);
    x = (ig_v4f)(((ig_v4i)x & ok) | ((ig_v4i)IG_V4(X_MIN) & ~ok));
    return __builtin_convertvector(-x * IG_V4(HB_SCALE), ig_v4i);
}

static inline int32_t bucket_of(float x) { return v_bucket(IG_V4(x))[0]; }

/* sum of exp((p[i] - m) * inv_t) over 16 floats, in a fixed order. */
static inline float block16_sum(const float *p, ig_v4f vm, ig_v4f vt) {
    ig_v4f a = v_exp_le0((v_load(p) - vm) * vt);
    ig_v4f b = v_exp_le0((v_load(p + 4) - vm) * vt);
    ig_v4f c = v_exp_le0((v_load(p + 8) - vm) * vt);
    ig_v4f d = v_exp_le0((v_load(p + 12) - vm) * vt);
    ig_v4f sum = (a + b) + (c + d);
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

/* sum over i of exp((src[i] - m) * inv_t), src[i] <= m (NaN counts 0). */
static double sum_exp_le0(const float *src, size_t n, float m, float inv_t) {
    ig_v4f vm = IG_V4(m), vt = IG_V4(inv_t);
    double z = 0.0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) z += (double)block16_sum(src + i, vm, vt);
    for (; i < n; i++) z += exp_le0((src[i] - m) * inv_t);
    return z;
}

/* Draws from softmax((src - m) * inv_t) over all of src[0, n) with u in
 * [0, 1), without building candidates: the total, then a scan that adds
 * the very same block sums in the same order, so the running sum reaches
 * u * total inside the array. -1 only if rounding defeats that. */
static int32_t draw_all(const float *src, size_t n, float m, float inv_t, double u) {
    ig_v4f vm = IG_V4(m), vt = IG_V4(inv_t);
    double r = u * sum_exp_le0(src, n, m, inv_t);
    double acc = 0.0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        double next = acc + (double)block16_sum(src + i, vm, vt);
        if (r < next) break; /* the token lies in this block */
        acc = next;
    }
    /* Either the block at i holds the token, or it is in the tail. */
    size_t end = IG_MIN(i + 16, n);
    int32_t last = -1;
    for (; i < end; i++) {
        float w = exp_le0((src[i] - m) * inv_t);
        if (!(w > 0.0f)) continue;
        last = (int32_t)i;
        acc += w;
        if (r < acc) return (int32_t)i;
    }
    return last; /* r within rounding of the block's end */
}

/* ---- Logit processing ------------------------------------------------------ */

static inline float apply_bias(float l, float b) {
    if (b <= -100.0f) return -INFINITY; /* also -inf */
    float r = l + b;
    return isnan(r) ? -INFINITY : r;
}

static inline float apply_penalty(const ig_sampler *s, float l, int32_t count) {
    float rp = s->p.repeat_penalty;
    if (rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
    l -= (float)count * s->p.frequency_penalty + s->p.presence_penalty;
    return isnan(l) ? -INFINITY : l;
}

/* dst[i] = processed logit of token i (NaN -> -inf, bias, penalties). */
static void fill_processed(const ig_sampler *s, const float *logits, float *dst) {
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        dst[i] = isnan(v) ? -INFINITY : v;
    }
    for (int j = 0; j < s->n_bias; j++) {
        int32_t t = s->bias_ids[j];
        dst[t] = apply_bias(dst[t], s->bias_vals[j]);
    }
    if (s->pen_on) {
        for (int j = 0; j < s->n_distinct; j++) {
            int32_t t = s->distinct[j];
            dst[t] = apply_penalty(s, dst[t], s->counts[t]);
        }
    }
}

/* Processed logit of one token, identical to fill_processed's. */
static inline float processed_one(const ig_sampler *s, const float *logits, int32_t i) {
    float v = logits[i];
    if (isnan(v)) v = -INFINITY;
    if (s->bias_dense) v = apply_bias(v, s->bias_dense[i]);
    if (s->pen_on && s->counts[i] > 0) v = apply_penalty(s, v, s->counts[i]);
    return v;
}

/* Argmax of the raw logits (NaN ignored, ties -> lowest id), or 0. */
static int32_t raw_argmax(const ig_sampler *s, const float *logits) {
    int32_t best = 0;
    float m = -INFINITY;
    for (int i = 0; i < s->n_vocab; i++) {
        if (logits[i] > m) {
            m = logits[i];
            best = i;
        }
    }
    return best;
}

/* 1 / temperature (1 for temperature <= 0); finite even for denormal t, so
 * that (l - max) * inv_t stays 0 for the max and never becomes NaN. */
static inline float inv_temperature(float t) {
    if (!(t > 0.0f)) return 1.0f;
    float r = 1.0f / t;
    return r <= FLT_MAX ? r : FLT_MAX;
}

/* ---- Selection helpers ----------------------------------------------------- */

/* Strict total order: larger x first, then lower id. */
static inline bool cand_better(const ig_cand *a, const ig_cand *b) {
    return a->x > b->x || (a->x == b->x && a->id < b->id);
}

static inline void cand_swap(ig_cand *a, ig_cand *b) {
    ig_cand t = *a;
    *a = *b;
    *b = t;
}

/* Cheap deterministic pivot source (independent of the sampler's stream). */
static inline size_t pivot_pick(uint64_t *st, size_t lo, size_t hi) {
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;
    return lo + (size_t)(*st % (uint64_t)(hi - lo));
}

/* Partitions a[lo, hi) around a[piv]: better elements first. Returns the
 * pivot's final index; *upper_mass gets the sum of w over the better ones. */
static size_t cand_partition(ig_cand *a, size_t lo, size_t hi, size_t piv, double *upper_mass) {
    cand_swap(&a[piv], &a[hi - 1]);
    ig_cand pv = a[hi - 1];
    size_t st = lo;
    double mass = 0.0;
    for (size_t i = lo; i < hi - 1; i++) {
        if (cand_better(&a[i], &pv)) {
            mass += a[i].w;
            cand_swap(&a[i], &a[st]);
            st++;
        }
    }
    cand_swap(&a[st], &a[hi - 1]);
    *upper_mass = mass;
    return st;
}

/* Rearranges a[0, n) so that its k best elements come first (any order). */
static void cand_select_top(ig_cand *a, size_t n, size_t k) {
    if (k == 0 || k >= n) return;
    uint64_t rs = 0x2545F4914F6CDD1Dull;
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        double unused;
        size_t q = cand_partition(a, lo, hi, pivot_pick(&rs, lo, hi), &unused);
        if (q == k || q + 1 == k) return;
        if (q > k) hi = q;
        else lo = q + 1;
    }
}

/* Index of the best element of a[0, n), n > 0. */
static size_t cand_best(const ig_cand *a, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (cand_better(&a[i], &a[b])) b = i;
    return b;
}

/* Rearranges a[0, n) so that a[0, r) is the smallest prefix, in candidate
 * order, whose mass reaches target (all of it if the total is below target);
 * returns r >= 1. */
static size_t cand_nucleus(ig_cand *a, size_t n, double target) {
    if (n == 0) return 0;
    uint64_t rs = 0x9E3779B97F4A7C15ull;
    size_t lo = 0, hi = n;
    double acc = 0.0; /* mass of a[0, lo), all inside the nucleus */
    while (lo < hi) {
        double upper;
        size_t q = cand_partition(a, lo, hi, pivot_pick(&rs, lo, hi), &upper);
        if (acc + upper >= target && q > lo) {
            hi = q; /* the boundary lies strictly above the pivot */
        } else if (acc + upper + a[q].w >= target) {
            return q + 1;
        } else {
            acc += upper + a[q].w;
            lo = q + 1;
        }
    }
    return lo > 0 ? lo : 1;
}

/* Keeps the elements with w >= thr; returns the new count. */
static size_t cand_compact(ig_cand *a, size_t n, float thr) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].w >= thr) a[m++] = a[i];
    return m;
}

/* Min-heap by candidate order (root = worst kept), on logits in .x. */
static void heap_sift_down(ig_cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(&h[w], &h[l])) w = l;
        if (r < n && cand_better(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand_swap(&h[i], &h[w]);
        i = w;
    }
}

static void heap_sift_up(ig_cand *h, size_t i) {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_better(&h[parent], &h[i])) return;
        cand_swap(&h[parent], &h[i]);
        i = parent;
    }
}

/* ---- Candidate construction ------------------------------------------------ */

/* The logits the filters read: the caller's array when there is nothing to
 * modify (NaN then drops out through failed comparisons), else s->work. */
static const float *processed_logits(ig_sampler *s, const float *logits) {
    if (s->n_bias == 0 && (!s->pen_on || s->n_distinct == 0)) return logits;
    fill_processed(s, logits, s->work);
    return s->work;
}

/* Largest value of src[0, n), NaN ignored (-inf if there is none). */
static float max_of(const float *src, size_t n) {
    ig_v4f vm = IG_V4(-INFINITY);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        ig_v4f v = v_load(src + i);
        ig_v4i gt = v > vm; /* false for NaN */
        vm = (ig_v4f)(((ig_v4i)v & gt) | ((ig_v4i)vm & ~gt));
    }
    float m = -INFINITY;
    for (int j = 0; j < 4; j++) m = vm[j] > m ? vm[j] : m;
    for (; i < n; i++) m = src[i] > m ? src[i] : m;
    return m;
}

/* Adds w into s->hist_mass per bucket for every token of bucket <= blim
 * (whole buckets; blocks of 4 with no such token are skipped, and tokens of
 * deeper buckets that share a block may add too, so only buckets <= blim
 * hold complete sums). */
static void hist_mass_pass(ig_sampler *s, const float *src, size_t V, float m, float inv_t,
                           int32_t blim) {
    memset(s->hist_mass, 0, sizeof s->hist_mass);
    /* bucket <= blim  <=>  -x * HB_SCALE < blim + 1; a slightly loose bound */
    float xlo = blim >= HB_N - 1 ? X_MIN : -(float)(blim + 1) / HB_SCALE - 1e-3f;
    ig_v4f vm = IG_V4(m), vt = IG_V4(inv_t), vlo = IG_V4(xlo);
    size_t i = 0;
    for (; i + 4 <= V; i += 4) {
        ig_v4f x = (v_load(src + i) - vm) * vt;
        ig_v4i hit = x >= vlo;
        if (!(hit[0] | hit[1] | hit[2] | hit[3])) continue;
        ig_v4f w = v_exp_le0(x);
        ig_v4i b = v_bucket(x);
        for (int j = 0; j < HB_LANES; j++) s->hist_mass[j][b[j]] += w[j];
    }
    for (; i < V; i++) {
        float x = (src[i] - m) * inv_t;
        s->hist_mass[0][bucket_of(x)] += exp_le0(x);
    }
}

/* Fills s->hist_count with the number of tokens (x >= X_MIN) per bucket. */
static void hist_count_pass(ig_sampler *s, const float *src, size_t V, float m, float inv_t) {
    memset(s->hist_count, 0, sizeof s->hist_count);
    ig_v4f vm = IG_V4(m), vt = IG_V4(inv_t);
    size_t i = 0;
    for (; i + 4 <= V; i += 4) {
        ig_v4f x = (v_load(src + i) - vm) * vt;
        ig_v4i ok = x >= IG_V4(X_MIN);
        ig_v4i b = v_bucket(x);
        for (int j = 0; j < HB_LANES; j++) s->hist_count[j][b[j]] += ok[j] & 1;
    }
    for (; i < V; i++) {
        float x = (src[i] - m) * inv_t;
        if (x >= X_MIN) s->hist_count[0][bucket_of(x)]++;
    }
}

/* Collects the tokens with x >= X_MIN, w >= wthr and bucket <= bmax into
 * c (capacity V); returns the count. Tokens of bucket < bsure come first,
 * *n_sure of them, then the rest. Blocks with no lane above a (slightly
 * loose) x bound are skipped after one vector compare. */
static size_t collect(const float *src, size_t V, float m, float inv_t, float wthr, int32_t bsure,
                      int32_t bmax, ig_cand *c, size_t *n_sure) {
    float xcut = X_MIN;
    if (wthr > 0.0f) xcut = IG_MAX(xcut, logf(wthr) - 1e-3f);
    if (bmax < HB_N - 1) xcut = IG_MAX(xcut, -(float)(bmax + 1) / HB_SCALE - 1e-3f);
    ig_v4f vm = IG_V4(m), vt = IG_V4(inv_t), vc = IG_V4(xcut);
    size_t front = 0, back = V; /* front grows up, the rest grows down from V */
    size_t i = 0;
    for (; i + 4 <= V; i += 4) {
        ig_v4f x = (v_load(src + i) - vm) * vt;
        ig_v4i hit = x >= vc;
        if (!(hit[0] | hit[1] | hit[2] | hit[3])) continue;
        ig_v4f w = v_exp_le0(x);
        ig_v4i b = v_bucket(x);
        /* Branch-free: both slots are free (front < back while i < V). */
        ig_v4i keep = hit & (w > IG_V4(0.0f)) & (w >= IG_V4(wthr)) & (b <= bmax);
        ig_v4i sure = keep & (b < bsure);
        for (int j = 0; j < 4; j++) {
            ig_cand e = {.x = x[j], .w = w[j], .id = (int32_t)(i + (size_t)j)};
            c[front] = e;
            c[back - 1] = e;
            front += (size_t)(sure[j] & 1);
            back -= (size_t)((keep[j] & ~sure[j]) & 1);
        }
    }
    for (; i < V; i++) {
        float x = (src[i] - m) * inv_t;
        if (!(x >= xcut)) continue;
        float w = exp_le0(x);
        int32_t b = bucket_of(x);
        if (!(w > 0.0f && w >= wthr && b <= bmax)) continue;
        ig_cand e = {.x = x, .w = w, .id = (int32_t)i};
        if (b < bsure) c[front++] = e;
        else c[--back] = e;
    }
    if (back < V) memmove(c + front, c + back, (V - back) * sizeof *c);
    *n_sure = front;
    return front + (V - back);
}

/* Builds the final candidate set in s->cand with unnormalised weights w.
 * Returns the count, or 0 when every processed logit is -inf. */
static size_t build_candidates(ig_sampler *s, const float *logits) {
    const ig_sampler_params *p = &s->p;
    ig_cand *c = s->cand;
    size_t V = (size_t)s->n_vocab;
    const float *src = processed_logits(s, logits);

    float m = max_of(src, V);
    if (m == -INFINITY) return 0;
    if (p->temperature <= 0.0f) {
        size_t arg = 0;
        while (src[arg] != m) arg++; /* the lowest id holding the max */
        c[0] = (ig_cand){.x = 0.0f, .w = 1.0f, .id = (int32_t)arg};
        return 1;
    }

    size_t k = p->top_k > 0 && (size_t)p->top_k < V ? (size_t)p->top_k : V;
    float inv_t = inv_temperature(p->temperature);
    bool use_p = p->top_p < 1.0f;
    /* min-p keeps w >= min_p * w_max, and w_max = exp(0) = 1. */
    float min_p_thr = p->min_p > 0.0f ? IG_MIN(p->min_p, 1.0f) : 0.0f;
    size_t n = 0;
    double z = 0.0; /* mass of the top-k set, before top-p / min-p */

    if (m == INFINITY) {
        /* The limit distribution: uniform over the +inf tokens. */
        for (size_t i = 0; i < V && n < k; i++)
            if (src[i] == INFINITY) c[n++] = (ig_cand){.x = 0.0f, .w = 1.0f, .id = (int32_t)i};
        z = (double)n;
    } else if (k <= HEAP_TOPK_MAX) {
        /* Heap of the k best logits, fused into the scan; ids rise, so a later
         * equal logit is worse and only a strictly larger one enters. */
        float root = -INFINITY;
        for (size_t i = 0; i < V; i++) {
            float l = src[i];
            if (!(l > root)) continue;
            ig_cand e = {.x = l, .w = 0.0f, .id = (int32_t)i};
            if (n < k) {
                c[n] = e;
                heap_sift_up(c, n);
                n++;
                if (n == k) root = c[0].x;
            } else {
                c[0] = e;
                heap_sift_down(c, n, 0);
                root = c[0].x;
            }
        }
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            float x = (c[i].x - m) * inv_t;
            float w = exp_le0(x);
            if (w > 0.0f) {
                c[j++] = (ig_cand){.x = x, .w = w, .id = c[i].id};
                z += w;
            }
        }
        n = j;
    } else if (k < V) {
        /* The bucket holding the k-th best token bounds the top-k set; the
         * buckets above it lie wholly inside, only that one needs selecting. */
        hist_count_pass(s, src, V, m, inv_t);
        int32_t bmax = HB_N - 1;
        uint64_t cum = 0;
        for (int32_t b = 0; b < HB_N; b++) {
            for (int j = 0; j < HB_LANES; j++) cum += s->hist_count[j][b];
            if (cum >= k) {
                bmax = b;
                break;
            }
        }
        size_t n_sure;
        n = collect(src, V, m, inv_t, 0.0f, bmax, bmax, c, &n_sure);
        if (n > k) {
            cand_select_top(c + n_sure, n - n_sure, k - n_sure);
            n = k;
        }
        for (size_t i = 0; i < n; i++) z += c[i].w;
    } else if (use_p && p->top_p > 0.0f) {
        /* Nucleus without top-k, from the mass per bucket: buckets whose
         * cumulative mass stays below the target (with a margin for rounding)
         * lie wholly inside; the first bucket where it reaches the target
         * (again with a margin) bounds it, as every token below has at least
         * the target mass before it. Only the boundary buckets need an exact
         * cut. min-p, like the nucleus, keeps a prefix of the candidate
         * order, so applying it while collecting (with the nucleus target
         * still from the full z) equals top-p followed by min-p: when it
         * drops a surely-inside token, it drops all boundary ones too. */
        z = sum_exp_le0(src, V, m, inv_t);
        double target = (double)p->top_p * z * (1.0 - TOP_P_REL_EPS);
        /* A token with p_i < (1-p)/V has at most V tokens from it onwards,
         * of total mass < 1-p, so it is outside the nucleus (halved for
         * rounding): the histogram only needs the buckets down to there. */
        float tail_w = (float)((1.0 - (double)p->top_p) * z / (double)V * 0.5);
        int32_t blim = tail_w > 0.0f ? bucket_of(logf(tail_w)) : HB_N - 1;
        hist_mass_pass(s, src, V, m, inv_t, blim);
        int32_t bsure = 0, bmax = HB_N - 1;
        double cum = 0.0;
        for (int32_t b = 0; b <= blim; b++) {
            for (int j = 0; j < HB_LANES; j++) cum += s->hist_mass[j][b];
            if (cum < target * (1.0 - 1e-5)) bsure = b + 1;
            if (cum >= target * (1.0 + 1e-5)) {
                bmax = b;
                break;
            }
        }
        size_t n_sure;
        n = collect(src, V, m, inv_t, min_p_thr, bsure, bmax, c, &n_sure);
        if (n == n_sure) return n;
        double acc = 0.0;
        for (size_t i = 0; i < n_sure; i++) acc += c[i].w;
        return n_sure + cand_nucleus(c + n_sure, n - n_sure, target - acc);
    } else if (use_p) {
        /* top_p <= 0: the single best token. */
        size_t n_sure;
        n = collect(src, V, m, inv_t, 1.0f, HB_N, HB_N - 1, c, &n_sure); /* the max (ties) */
        if (n == 0) return 0;
        c[0] = c[cand_best(c, n)];
        return 1;
    } else {
        size_t n_sure;
        return collect(src, V, m, inv_t, min_p_thr, HB_N, HB_N - 1, c, &n_sure);
    }

    /* c[0, n) is the top-k set, z its mass. */
    if (n == 0) return 0;
    if (use_p && p->top_p <= 0.0f) {
        c[0] = c[cand_best(c, n)];
        return 1;
    }
    if (min_p_thr > 0.0f) n = cand_compact(c, n, min_p_thr);
    if (use_p) n = cand_nucleus(c, n, (double)p->top_p * z * (1.0 - TOP_P_REL_EPS));
    return n;
}

/* ---- Public API ------------------------------------------------------------ */

ig_sampler_params ig_sampler_default_params(void) {
    ig_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 64;
    p.top_p = 0.95f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    return p;
}

ig_status ig_sampler_create(const ig_sampler_params *params, int n_vocab_real, ig_sampler **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    ig_sampler_params p = params ? *params : ig_sampler_default_params();
    if (n_vocab_real <= 0) return ig_fail(IG_ERR_INVALID_ARG, "sampler: n_vocab_real %d", n_vocab_real);
    if (!isfinite(p.temperature))
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: temperature must be finite");
    if (isnan(p.top_p) || isnan(p.min_p))
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: top_p/min_p is NaN");
    if (!isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f)
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: repeat_penalty must be > 0");
    if (!isfinite(p.presence_penalty) || !isfinite(p.frequency_penalty))
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: presence/frequency penalty must be finite");
    if (p.penalty_last_n < -1)
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: penalty_last_n %d", p.penalty_last_n);
    if (p.n_logit_bias > 0 && !p.logit_bias)
        return ig_fail(IG_ERR_INVALID_ARG, "sampler: logit_bias is NULL");
    for (size_t i = 0; i < p.n_logit_bias; i++) {
        const ig_logit_bias *b = &p.logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab_real)
            return ig_fail(IG_ERR_INVALID_ARG, "sampler: logit_bias token %d out of range [0, %d)",
                           (int)b->token, n_vocab_real);
        if (isnan(b->bias))
            return ig_fail(IG_ERR_INVALID_ARG, "sampler: logit_bias for token %d is NaN",
                           (int)b->token);
    }

    ig_sampler *s = ig_calloc_array(1, sizeof *s);
    if (!s) return IG_ERR_NO_MEMORY;
    s->p = p;
    s->p.logit_bias = NULL;
    s->p.n_logit_bias = 0;
    s->n_vocab = n_vocab_real;
    size_t V = (size_t)n_vocab_real;

    s->work = ig_calloc_array(V, sizeof *s->work);
    s->cand = ig_calloc_array(V, sizeof *s->cand);
    if (!s->work || !s->cand) goto oom;

    if (p.n_logit_bias > 0) {
        s->bias_dense = ig_calloc_array(V, sizeof *s->bias_dense);
        uint8_t *seen = ig_calloc_array(V, 1);
        s->bias_ids = ig_calloc_array(p.n_logit_bias, sizeof *s->bias_ids);
        s->bias_vals = ig_calloc_array(p.n_logit_bias, sizeof *s->bias_vals);
        if (!s->bias_dense || !seen || !s->bias_ids || !s->bias_vals) {
            free(seen);
            goto oom;
        }
        for (size_t i = 0; i < p.n_logit_bias; i++)
            s->bias_dense[p.logit_bias[i].token] = p.logit_bias[i].bias; /* last wins */
        for (size_t i = 0; i < p.n_logit_bias; i++) {
            int32_t t = p.logit_bias[i].token;
            if (seen[t]) continue;
            seen[t] = 1;
            s->bias_ids[s->n_bias] = t;
            s->bias_vals[s->n_bias] = s->bias_dense[t];
            s->n_bias++;
        }
        free(seen);
    }

    s->pen_on = p.penalty_last_n != 0 &&
                (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f ||
                 p.frequency_penalty != 0.0f);
    if (s->pen_on) {
        s->counts = ig_calloc_array(V, sizeof *s->counts);
        s->dpos = ig_calloc_array(V, sizeof *s->dpos);
        s->distinct = ig_calloc_array(V, sizeof *s->distinct);
        if (!s->counts || !s->dpos || !s->distinct) goto oom;
        if (p.penalty_last_n > 0 && p.penalty_last_n <= IG_SAMPLER_MAX_WINDOW) {
            s->ring_cap = p.penalty_last_n;
            s->ring = ig_calloc_array((size_t)s->ring_cap, sizeof *s->ring);
            if (!s->ring) goto oom;
        }
    }

    uint64_t sm = p.seed;
    for (int i = 0; i < 4; i++) s->rng_init[i] = splitmix64(&sm);
    memcpy(s->rng, s->rng_init, sizeof s->rng);
    *out = s;
    return IG_OK;

oom:
    ig_sampler_free(s);
    return ig_fail(IG_ERR_NO_MEMORY, "sampler: out of memory (n_vocab_real %d)", n_vocab_real);
}

void ig_sampler_free(ig_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cand);
    free(s->bias_ids);
    free(s->bias_vals);
    free(s->bias_dense);
    free(s->counts);
    free(s->dpos);
    free(s->distinct);
    free(s->ring);
    free(s);
}

int ig_sampler_debug_candidates(ig_sampler *s, const float *logits, int32_t *ids, float *probs) {
    if (!s || !logits || !ids || !probs) return -1;
    size_t n = build_candidates(s, logits);
    double z = 0.0;
    for (size_t i = 0; i < n; i++) z += s->cand[i].w;
    for (size_t i = 0; i < n; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = (float)(s->cand[i].w / z);
    }
    return (int)n;
}

int32_t ig_sampler_sample(ig_sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    const ig_sampler_params *p = &s->p;
    if (p->temperature > 0.0f && (p->top_k <= 0 || p->top_k >= s->n_vocab) && p->top_p >= 1.0f &&
        p->min_p <= 0.0f) {
        /* Plain softmax: draw straight from the logits, no candidate list. */
        const float *src = processed_logits(s, logits);
        float m = max_of(src, (size_t)s->n_vocab);
        if (isfinite(m)) {
            double u = rng_uniform(s->rng);
            int32_t t = draw_all(src, (size_t)s->n_vocab, m, inv_temperature(p->temperature), u);
            if (t >= 0) return t;
            t = 0;
            while (src[t] != m) t++;
            return t;
        }
    }
    size_t n = build_candidates(s, logits);
    if (n == 0) return raw_argmax(s, logits);
    if (s->p.temperature <= 0.0f) return s->cand[0].id;

    const ig_cand *c = s->cand;
    double z = 0.0;
    for (size_t i = 0; i < n; i++) z += c[i].w;
    double r = rng_uniform(s->rng) * z;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].w;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id; /* r within rounding of z */
}

static void pen_inc(ig_sampler *s, int32_t t) {
    if (s->counts[t] == 0) {
        s->dpos[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
    if (s->counts[t] < INT32_MAX) s->counts[t]++;
}

static void pen_dec(ig_sampler *s, int32_t t) {
    if (--s->counts[t] > 0) return;
    int32_t j = s->dpos[t];
    int32_t last = s->distinct[--s->n_distinct];
    s->distinct[j] = last;
    s->dpos[last] = j;
}

void ig_sampler_accept(ig_sampler *s, int32_t token) {
    if (!s || !s->pen_on || token < 0 || token >= s->n_vocab) return;
    if (s->ring) {
        if (s->ring_len == s->ring_cap) {
            pen_dec(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = token;
            s->ring_len++;
        }
    }
    pen_inc(s, token);
}

void ig_sampler_reset(ig_sampler *s) {
    if (!s) return;
    if (s->pen_on) {
        for (int j = 0; j < s->n_distinct; j++) s->counts[s->distinct[j]] = 0;
        s->n_distinct = 0;
        s->ring_len = 0;
        s->ring_head = 0;
    }
    memcpy(s->rng, s->rng_init, sizeof s->rng);
}

void ig_sampler_logprobs(const ig_sampler *s, const float *logits, float *out) {
    if (!s || !logits || !out) return;
    int V = s->n_vocab;
    fill_processed(s, logits, out);
    float m = max_of(out, (size_t)V);
    if (m == -INFINITY) {
        /* sample() then returns the raw argmax with certainty. */
        int32_t t = raw_argmax(s, logits);
        for (int i = 0; i < V; i++) out[i] = -INFINITY;
        out[t] = 0.0f;
        return;
    }
    if (m == INFINITY) {
        int n_inf = 0;
        for (int i = 0; i < V; i++) n_inf += out[i] == INFINITY;
        float lp = -logf((float)n_inf);
        for (int i = 0; i < V; i++) out[i] = out[i] == INFINITY ? lp : -INFINITY;
        return;
    }
    float inv_t = inv_temperature(s->p.temperature);
    double z = sum_exp_le0(out, (size_t)V, m, inv_t);
    for (int i = 0; i < V; i++) out[i] = (out[i] - m) * inv_t;
    float log_z = (float)log(z);
    for (int i = 0; i < V; i++) out[i] -= log_z;
}

/* Heap helpers for ig_sampler_top_logprobs on parallel (ids, x) arrays. */
static inline bool tl_worse(const int32_t *ids, const float *x, size_t a, size_t b) {
    return x[a] < x[b] || (x[a] == x[b] && ids[a] > ids[b]);
}

static inline void tl_swap(int32_t *ids, float *x, size_t a, size_t b) {
    int32_t ti = ids[a];
    ids[a] = ids[b];
    ids[b] = ti;
    float tx = x[a];
    x[a] = x[b];
    x[b] = tx;
}

static void tl_sift_up(int32_t *ids, float *x, size_t i) {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tl_worse(ids, x, i, parent)) return;
        tl_swap(ids, x, i, parent);
        i = parent;
    }
}

static void tl_sift_down(int32_t *ids, float *x, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && tl_worse(ids, x, l, w)) w = l;
        if (r < n && tl_worse(ids, x, r, w)) w = r;
        if (w == i) return;
        tl_swap(ids, x, i, w);
        i = w;
    }
}

int ig_sampler_top_logprobs(const ig_sampler *s, const float *logits, int k, int32_t *ids,
                            float *logprobs) {
    if (!s || !logits || k < 0 || (k > 0 && (!ids || !logprobs))) return -1;
    int V = s->n_vocab;
    if (k > V) k = V;
    if (k == 0) return 0;
    /* Without bias or penalties the raw logits are read directly (vector
     * sum); otherwise each token is processed on the fly (no scratch). */
    bool plain = s->n_bias == 0 && (!s->pen_on || s->n_distinct == 0);

    float m = -INFINITY;
    if (plain) {
        m = max_of(logits, (size_t)V);
    } else {
        for (int i = 0; i < V; i++) {
            float v = processed_one(s, logits, i);
            m = v > m ? v : m;
        }
    }
    if (m == -INFINITY) {
        ids[0] = raw_argmax(s, logits);
        logprobs[0] = 0.0f;
        return 1;
    }
    float inv_t = inv_temperature(s->p.temperature);
    double z = 0.0;
    if (m == INFINITY) {
        for (int i = 0; i < V; i++)
            z += (plain ? logits[i] : processed_one(s, logits, i)) == INFINITY;
    } else if (plain) {
        z = sum_exp_le0(logits, (size_t)V, m, inv_t);
    } else {
        for (int i = 0; i < V; i++) z += exp_le0((processed_one(s, logits, i) - m) * inv_t);
    }

    /* A heap of the k best (root = worst kept) held in ids[] / logprobs[]
     * (x values for now); ids rise, so only a strictly larger x enters. */
    size_t n = 0, kk = (size_t)k;
    for (int i = 0; i < V; i++) {
        float v = plain ? logits[i] : processed_one(s, logits, i);
        float x;
        if (m == INFINITY) x = v == INFINITY ? 0.0f : -INFINITY;
        else x = (v - m) * inv_t;
        if (!(x > -INFINITY)) continue; /* -inf or NaN: probability 0 */
        if (n < kk) {
            ids[n] = i;
            logprobs[n] = x;
            tl_sift_up(ids, logprobs, n);
            n++;
        } else if (x > logprobs[0]) {
            ids[0] = i;
            logprobs[0] = x;
            tl_sift_down(ids, logprobs, n, 0);
        }
    }
    /* Heapsort: popping the worst to the back leaves the best first. */
    for (size_t h = n; h > 1; h--) {
        tl_swap(ids, logprobs, 0, h - 1);
        tl_sift_down(ids, logprobs, h - 1, 0);
    }
    float log_z = (float)log(z);
    for (size_t i = 0; i < n; i++) logprobs[i] -= log_z;
    return (int)n;
}

/* ---- Speculative decoding -------------------------------------------------- */

int ig_sampler_probs(ig_sampler *s, const float *logits, float *probs) {
    if (!s || !logits || !probs) return -1;
    size_t V = (size_t)s->n_vocab;
    memset(probs, 0, V * sizeof *probs);
    size_t n = build_candidates(s, logits);
    if (n == 0) {
        probs[raw_argmax(s, logits)] = 1.0f;
        return 1;
    }
    if (s->p.temperature <= 0.0f) {
        probs[s->cand[0].id] = 1.0f;
        return 1;
    }
    double z = 0.0;
    for (size_t i = 0; i < n; i++) z += s->cand[i].w;
    for (size_t i = 0; i < n; i++) probs[s->cand[i].id] = (float)(s->cand[i].w / z);
    return (int)n;
}

/* Draws from the residual max(0, p - q) over the candidate set (q NULL: q is
 * one-hot on draft, so the residual is p without the draft token). Returns
 * -1 when the residual has no mass. */
static int32_t draw_residual(ig_sampler *s, size_t n, double z, int32_t draft, const float *q) {
    const ig_cand *c = s->cand;
    double mass = 0.0;
    for (size_t i = 0; i < n; i++) {
        double p = c[i].w / z;
        double r = q ? p - (double)q[c[i].id] : (c[i].id == draft ? 0.0 : p);
        if (r > 0.0) mass += r;
    }
    if (!(mass > 0.0)) return -1;
    double t = rng_uniform(s->rng) * mass, acc = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < n; i++) {
        double p = c[i].w / z;
        double r = q ? p - (double)q[c[i].id] : (c[i].id == draft ? 0.0 : p);
        if (!(r > 0.0)) continue;
        last = c[i].id;
        acc += r;
        if (t < acc) return c[i].id;
    }
    return last; /* t within rounding of the mass */
}

int32_t ig_sampler_verify(ig_sampler *s, const float *logits, int32_t draft, const float *q,
                          bool *accepted) {
    if (accepted) *accepted = false;
    if (!s || !logits || !accepted) return -1;
    if (draft < 0 || draft >= s->n_vocab) return ig_sampler_sample(s, logits);
    if (s->p.temperature <= 0.0f) {
        int32_t t = ig_sampler_sample(s, logits);
        *accepted = t == draft;
        return t;
    }
    size_t n = build_candidates(s, logits);
    if (n == 0) {
        int32_t t = raw_argmax(s, logits);
        *accepted = t == draft;
        return t;
    }
    const ig_cand *c = s->cand;
    double z = 0.0, pd = 0.0;
    for (size_t i = 0; i < n; i++) {
        z += c[i].w;
        if (c[i].id == draft) pd = c[i].w;
    }
    pd /= z;
    double qd = q ? (double)q[draft] : 1.0;
    double u = rng_uniform(s->rng);
    /* Accept with probability min(1, p(d) / q(d)). */
    if (qd > 0.0 && u * qd < pd) {
        *accepted = true;
        return draft;
    }
    int32_t t = draw_residual(s, n, z, draft, q);
    if (t >= 0) return t;
    /* No residual mass (p == q up to rounding): a plain draw from p. */
    double r = rng_uniform(s->rng) * z, acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].w;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
