/* Sampler tests: greedy, determinism, draw statistics, top-k / top-p / min-p
 * boundaries (against a sort-based reference on a 262k vocabulary), logit
 * bias, penalties, NaN/inf handling, logprobs and top_logprobs. */
#include "test.h"

#include "ignis.h"
#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Internal hook in src/sampler/sampler.c: the final candidate set (ids and
 * renormalised probabilities) the next sample would draw from. */
int ig_sampler_debug_candidates(ig_sampler *s, const float *logits, int32_t *ids, float *probs);

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t t_rng_next(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}


/* Bell-shaped, unit variance (sum of two uniforms from one draw). */
static float t_normal(uint64_t *st) {
    uint64_t r = t_rng_next(st);
    double a = (double)(r >> 32) * 0x1.0p-32, b = (double)(r & 0xffffffffu) * 0x1.0p-32;
    return (float)((a + b - 1.0) * 2.449489742783178);
}

static ig_sampler_params t_params(float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    ig_sampler_params p = ig_sampler_default_params();
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

/* Counts draws of each of n tokens over `draws` samples. */
static void t_count_draws(ig_sampler *s, const float *logits, int n, int draws, int *counts) {
    memset(counts, 0, sizeof(int) * (size_t)n);
    for (int i = 0; i < draws; i++) {
        int32_t t = ig_sampler_sample(s, logits);
        if (t >= 0 && t < n) counts[t]++;
        else counts[0] = -1000000; /* poison: out-of-range id */
    }
}

/* Checks the observed frequency of each token against probs within 5
 * standard errors (plus exact zeros where probs is 0). */
static void t_check_freqs(const int *counts, const double *probs, int n, int draws) {
    for (int i = 0; i < n; i++) {
        double f = (double)counts[i] / draws;
        double se = sqrt(probs[i] * (1 - probs[i]) / draws);
        if (probs[i] == 0) CHECK_EQ_INT(counts[i], 0);
        else CHECK_NEAR(f, probs[i], 5 * se + 1e-12);
    }
}

/* ---- greedy ----------------------------------------------------------------- */

IG_TEST(sampler_greedy_argmax_ties_vocab_limit) {
    ig_sampler_params p = t_params(0.0f, 0, 1.0f, 0.0f, 1);
    ig_sampler *s = NULL;
    REQUIRE_OK(ig_sampler_create(&p, 6, &s));
    /* Argmax at 3; ids 6 and 7 exist in the array (padding) with larger
     * logits but must never be returned. */
    float l1[8] = {0.1f, -2.0f, 1.5f, 3.25f, 3.0f, -7.0f, 100.0f, 50.0f};
    CHECK_EQ_INT(ig_sampler_sample(s, l1), 3);
    /* Ties go to the lowest id. */
    float l2[8] = {1.0f, 4.0f, 2.0f, 4.0f, 4.0f, 0.0f, 9.0f, 9.0f};
    CHECK_EQ_INT(ig_sampler_sample(s, l2), 1);
    float l3[8] = {-1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, 0.0f, 0.0f};
    CHECK_EQ_INT(ig_sampler_sample(s, l3), 0);
    /* The logits are not modified. */
    CHECK(l1[3] == 3.25f && l1[6] == 100.0f);
    ig_sampler_free(s);

    /* Negative temperature is greedy too. */
    p.temperature = -1.0f;
    REQUIRE_OK(ig_sampler_create(&p, 6, &s));
    CHECK_EQ_INT(ig_sampler_sample(s, l1), 3);
    ig_sampler_free(s);

    /* With temperature > 0, padding ids still never appear. */
    p = t_params(1.0f, 0, 1.0f, 0.0f, 7);
    REQUIRE_OK(ig_sampler_create(&p, 6, &s));
    float l4[8] = {0, 0, 0, 0, 0, 0, 30.0f, 30.0f};
    int seen[6] = {0};
    for (int i = 0; i < 3000; i++) {
        int32_t t = ig_sampler_sample(s, l4);
        REQUIRE(t >= 0 && t < 6);
        seen[t]++;
    }
    for (int i = 0; i < 6; i++) CHECK(seen[i] > 350); /* uniform: ~500 each */
    ig_sampler_free(s);
}

/* ---- determinism -------------------------------------------------------------- */

IG_TEST(sampler_seed_determinism) {
    enum { V = 50, N = 1000 };
    float logits[V];
    uint64_t st = 42;
    for (int i = 0; i < V; i++) logits[i] = t_normal(&st);
    ig_sampler_params p = t_params(1.0f, 0, 1.0f, 0.0f, 1234);
    ig_sampler *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_OK(ig_sampler_create(&p, V, &a));
    REQUIRE_OK(ig_sampler_create(&p, V, &b));
    p.seed = 1235;
    REQUIRE_OK(ig_sampler_create(&p, V, &c));
    static int32_t seq[N];
    int same_ab = 0, same_ac = 0, distinct = 0;
    int used[V] = {0};
    for (int i = 0; i < N; i++) {
        int32_t ta = ig_sampler_sample(a, logits);
        int32_t tb = ig_sampler_sample(b, logits);
        int32_t tc = ig_sampler_sample(c, logits);
        seq[i] = ta;
        same_ab += ta == tb;
        same_ac += ta == tc;
        if (ta >= 0 && ta < V && !used[ta]++) distinct++;
    }
    CHECK_EQ_INT(same_ab, N);
    CHECK(same_ac < N / 2); /* independent streams agree rarely */
    CHECK(distinct > 10);   /* the stream actually varies */
    /* reset rewinds the stream to the seed. */
    ig_sampler_reset(a);
    int replay = 0;
    for (int i = 0; i < N; i++) replay += ig_sampler_sample(a, logits) == seq[i];
    CHECK_EQ_INT(replay, N);
    ig_sampler_free(a);
    ig_sampler_free(b);
    ig_sampler_free(c);
}

/* ---- statistics --------------------------------------------------------------- */

IG_TEST(sampler_softmax_statistics) {
    const float logits[4] = {1.0f, 2.0f, 0.5f, -1.0f};
    const int draws = 100000;
    int counts[4];
    const float temps[2] = {1.0f, 0.5f};
    for (int ti = 0; ti < 2; ti++) {
        double probs[4], z = 0;
        for (int i = 0; i < 4; i++) z += exp(logits[i] / temps[ti]);
        for (int i = 0; i < 4; i++) probs[i] = exp(logits[i] / temps[ti]) / z;
        ig_sampler_params p = t_params(temps[ti], 0, 1.0f, 0.0f, 99 + (uint64_t)ti);
        ig_sampler *s = NULL;
        REQUIRE_OK(ig_sampler_create(&p, 4, &s));
        t_count_draws(s, logits, 4, draws, counts);
        t_check_freqs(counts, probs, 4, draws);
        ig_sampler_free(s);
    }
}

/* Plain softmax (no filters) draws straight from the logits in blocks of
 * 16; 50 tokens = 3 blocks + a tail of 2, with NaN, -inf and a ban mixed in. */
IG_TEST(sampler_plain_softmax_statistics) {
    enum { V = 50 };
    float logits[V + 3];
    uint64_t st = 5;
    for (int i = 0; i < V + 3; i++) logits[i] = t_normal(&st) * 0.8f;
    logits[3] = NAN;
    logits[20] = -INFINITY;
    logits[V - 1] = 2.5f; /* tail token */
    logits[V] = 50.0f;    /* beyond n_vocab_real */
    ig_logit_bias ban = {33, -100.0f};
    ig_sampler_params p = t_params(1.3f, 0, 1.0f, 0.0f, 77);
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    ig_sampler *s = NULL;
    REQUIRE_OK(ig_sampler_create(&p, V, &s));
    double probs[V], z = 0;
    for (int i = 0; i < V; i++) {
        bool out = i == 3 || i == 20 || i == 33;
        probs[i] = out ? 0.0 : exp(logits[i] / 1.3);
        z += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] /= z;
    const int draws = 200000;
    static int counts[V];
    t_count_draws(s, logits, V, draws, counts);
    t_check_freqs(counts, probs, V, draws);
    ig_sampler_free(s);
}

/* ---- top-k / top-p / min-p ------------------------------------------------------ */

IG_TEST(sampler_top_k_one_equals_greedy) {
    enum { V = 3000 };
    static float logits[V];
    uint64_t st = 7;
    ig_sampler_params pg = t_params(0.0f, 0, 1.0f, 0.0f, 1);
    ig_sampler_params pk = t_params(1.5f, 1, 0.9f, 0.0f, 2);
    ig_sampler *g = NULL, *k = NULL;
    REQUIRE_OK(ig_sampler_create(&pg, V, &g));
    REQUIRE_OK(ig_sampler_create(&pk, V, &k));
    for (int row = 0; row < 50; row++) {
        /* Quantised logits: plenty of ties for the maximum. */
        for (int i = 0; i < V; i++) logits[i] = roundf(t_normal(&st) * 2.0f) / 2.0f;
        int32_t want = ig_sampler_sample(g, logits);
        float m = -INFINITY;
        int32_t ref = -1;
        for (int i = 0; i < V; i++)
            if (logits[i] > m) m = logits[i], ref = i;
        CHECK_EQ_INT(want, ref);
        CHECK_EQ_INT(ig_sampler_sample(k, logits), want);
    }
    ig_sampler_free(g);
    ig_sampler_free(k);
}

/* probs 0.5 / 0.3 / 0.15 / 0.05 placed on ids perm[0..3]. */
static void t_four_probs(float *logits, const int *perm) {
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++) logits[perm[i]] = (float)log(pr[i]) + 3.0f;
}

IG_TEST(sampler_top_p_excludes_tail) {
    const int perm[4] = {2, 0, 3, 1}; /* order independent of ids */
    float logits[4];
    t_four_probs(logits, perm);
    int32_t ids[4];
    float probs[4];
    ig_sampler *s = NULL;

    ig_sampler_params p = t_params(1.0f, 0, 0.8f, 0.0f, 5);
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    int n = ig_sampler_debug_candidates(s, logits, ids, probs);
    REQUIRE(n == 2);
    for (int i = 0; i < n; i++) {
        CHECK(ids[i] == perm[0] || ids[i] == perm[1]);
        CHECK_NEAR(probs[i], ids[i] == perm[0] ? 0.625 : 0.375, 1e-6);
    }
    int counts[4];
    t_count_draws(s, logits, 4, 20000, counts);
    double want[4] = {0};
    want[perm[0]] = 0.625;
    want[perm[1]] = 0.375;
    t_check_freqs(counts, want, 4, 20000);
    ig_sampler_free(s);

    /* Just above 0.8 the third token joins; a mass of exactly p counts as
     * reaching it (0.5 -> one token, 0.95 -> three); above 0.95 all four. */
    const float ps[5] = {0.81f, 0.5f, 0.3f, 0.95f, 0.96f};
    const int want_n[5] = {3, 1, 1, 3, 4};
    for (int j = 0; j < 5; j++) {
        p.top_p = ps[j];
        REQUIRE_OK(ig_sampler_create(&p, 4, &s));
        CHECK_EQ_INT(ig_sampler_debug_candidates(s, logits, ids, probs), want_n[j]);
        ig_sampler_free(s);
    }
    /* top_p 0 keeps the single best token. */
    p.top_p = 0.0f;
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    for (int i = 0; i < 200; i++) CHECK_EQ_INT(ig_sampler_sample(s, logits), perm[0]);
    ig_sampler_free(s);
}

IG_TEST(sampler_min_p_excludes_tail) {
    const int perm[4] = {3, 1, 0, 2};
    float logits[4];
    t_four_probs(logits, perm);
    int32_t ids[4];
    float probs[4];
    ig_sampler *s = NULL;
    /* min_p 0.2: threshold 0.1 drops only the 0.05 token. */
    ig_sampler_params p = t_params(1.0f, 0, 1.0f, 0.2f, 11);
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    int n = ig_sampler_debug_candidates(s, logits, ids, probs);
    CHECK_EQ_INT(n, 3);
    for (int i = 0; i < n; i++) CHECK(ids[i] != perm[3]);
    int counts[4];
    t_count_draws(s, logits, 4, 20000, counts);
    double want[4] = {0};
    want[perm[0]] = 0.5 / 0.95;
    want[perm[1]] = 0.3 / 0.95;
    want[perm[2]] = 0.15 / 0.95;
    t_check_freqs(counts, want, 4, 20000);
    ig_sampler_free(s);
    /* min_p 0.35: threshold 0.175 keeps 0.5 and 0.3. */
    p.min_p = 0.35f;
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    n = ig_sampler_debug_candidates(s, logits, ids, probs);
    CHECK_EQ_INT(n, 2);
    for (int i = 0; i < n; i++) CHECK(ids[i] == perm[0] || ids[i] == perm[1]);
    ig_sampler_free(s);
    /* Temperature applies before min-p: at T=0.5 the probs are squared
     * (0.25/0.09/0.0225/0.0025 relative), min_p 0.3 keeps 0.25 and 0.09. */
    p = t_params(0.5f, 0, 1.0f, 0.3f, 11);
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    CHECK_EQ_INT(ig_sampler_debug_candidates(s, logits, ids, probs), 2);
    ig_sampler_free(s);
}

/* Reference filter: full sort, double precision. Marks keep[id] and returns
 * the count; probs_ref[id] holds the renormalised probability. */
typedef struct {
    float x;
    int32_t id;
} t_ref;

static int t_ref_cmp(const void *pa, const void *pb) {
    const t_ref *a = pa, *b = pb;
    if (a->x != b->x) return a->x > b->x ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

static int t_reference(const float *logits, int V, const ig_sampler_params *p, double *probs_ref) {
    t_ref *r = malloc(sizeof *r * (size_t)V);
    if (!r) return -1;
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
    float inv_t = 1.0f / p->temperature;
    int n_pos = 0; /* tokens of non-zero probability */
    for (int i = 0; i < V; i++) {
        float x = isnan(logits[i]) ? -INFINITY : (logits[i] - m) * inv_t;
        r[i] = (t_ref){x, i};
        n_pos += x > -INFINITY;
    }
    qsort(r, (size_t)V, sizeof *r, t_ref_cmp);
    int n = n_pos;
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(r[i].x);
    if (p->top_p < 1.0f) {
        double acc = 0;
        int j = 0;
        while (j < n) {
            acc += exp(r[j].x);
            j++;
            if (acc >= (double)p->top_p * z * (1 - 1e-6)) break; /* see TOP_P_REL_EPS */
        }
        n = j;
    }
    if (p->min_p > 0) {
        int j = 0;
        while (j < n && exp(r[j].x) >= p->min_p) j++;
        n = j;
    }
    for (int i = 0; i < V; i++) probs_ref[i] = 0;
    double zz = 0;
    for (int i = 0; i < n; i++) zz += exp(r[i].x);
    for (int i = 0; i < n; i++) probs_ref[r[i].id] = exp(r[i].x) / zz;
    free(r);
    return n;
}

IG_TEST(sampler_matches_reference_large_vocab) {
    const int V = 262144;
    float *logits = ig_calloc_array((size_t)V, sizeof *logits);
    double *ref = ig_calloc_array((size_t)V, sizeof *ref);
    int32_t *ids = ig_calloc_array((size_t)V, sizeof *ids);
    float *probs = ig_calloc_array((size_t)V, sizeof *probs);
    uint8_t *seen = ig_calloc_array((size_t)V, 1);
    REQUIRE(logits && ref && ids && probs && seen);
    float *mod = ig_calloc_array((size_t)V, sizeof *mod);
    REQUIRE(mod);
    struct {
        float t;
        int k;
        float p, min_p, scale;
        bool quantise, mods;
    } cases[] = {
        /* heap top-k; histogram top-p; top-p + min-p with ties */
        {1.0f, 40, 0.95f, 0.0f, 3.0f, false, false},   {0.7f, 0, 0.99f, 0.0f, 1.0f, false, false},
        {1.0f, 0, 0.5f, 0.02f, 0.5f, true, false},
        /* histogram top-k (with / without ties), min-p only, near-flat p */
        {1.0f, 5000, 0.9f, 0.01f, 1.0f, false, false}, {1.0f, 3000, 0.95f, 0.02f, 1.0f, true, false},
        {1.0f, 0, 1.0f, 0.05f, 2.0f, false, false},    {2.0f, 0, 0.999f, 0.0f, 0.3f, false, false},
        /* with bias and penalties: histogram top-p, heap, plain, large k */
        {1.0f, 0, 0.9f, 0.0f, 2.0f, false, true},      {0.8f, 50, 0.9f, 0.01f, 2.0f, true, true},
        {1.0f, 0, 1.0f, 0.0f, 2.0f, false, true},      {1.0f, 1500, 0.97f, 0.0f, 1.5f, true, true},
    };
    /* Bias and penalties (cases with mods): re-applied by hand for the
     * reference. The accepted history: 1, 2, 2, 3, 9, 9, 9. */
    const int32_t hist[7] = {1, 2, 2, 3, 9, 9, 9};
    uint64_t st = 2024;
    for (size_t c = 0; c < IG_ARRAY_LEN(cases); c++) {
        for (int i = 0; i < V; i++) {
            float v = t_normal(&st) * cases[c].scale;
            logits[i] = cases[c].quantise ? roundf(v * 4.0f) / 4.0f : v;
        }
        logits[11] = NAN;
        logits[12] = -INFINITY;
        logits[13] = NAN;
        ig_sampler_params p =
            t_params(cases[c].t, cases[c].k, cases[c].p, cases[c].min_p, 1 + (uint64_t)c);
        memcpy(mod, logits, sizeof *mod * (size_t)V);
        int32_t top = 0;
        for (int i = 0; i < V; i++)
            if (logits[i] > logits[top]) top = i;
        ig_logit_bias bias[3] = {{7, 2.0f}, {top, -100.0f}, {100, -INFINITY}};
        if (cases[c].mods) {
            p.logit_bias = bias;
            p.n_logit_bias = 3;
            p.repeat_penalty = 1.3f;
            p.presence_penalty = 1.5f;
            p.frequency_penalty = 0.5f;
            p.penalty_last_n = -1;
            mod[7] += 2.0f;
            mod[top] = -INFINITY;
            mod[100] = -INFINITY;
            const int32_t cnt_ids[4] = {1, 2, 3, 9}, cnt[4] = {1, 2, 1, 3};
            for (int j = 0; j < 4; j++) {
                float l = mod[cnt_ids[j]];
                l = l > 0 ? l / 1.3f : l * 1.3f;
                mod[cnt_ids[j]] = l - (float)cnt[j] * 0.5f - 1.5f;
            }
        }
        ig_sampler *s = NULL;
        REQUIRE_OK(ig_sampler_create(&p, V, &s));
        if (cases[c].mods)
            for (int j = 0; j < 7; j++) ig_sampler_accept(s, hist[j]);
        int n_ref = t_reference(mod, V, &p, ref);
        REQUIRE(n_ref > 0);
        double t0 = ig_time_now();
        int n = ig_sampler_debug_candidates(s, logits, ids, probs);
        double dt = ig_time_now() - t0;
        fprintf(stderr, "  case %zu: %d candidates, %.2f ms\n", c, n, dt * 1e3);
        CHECK_EQ_INT(n, n_ref);
        int mismatched = 0;
        memset(seen, 0, (size_t)V);
        for (int i = 0; i < n && i < V; i++) {
            if (ids[i] < 0 || ids[i] >= V || seen[ids[i]] || ref[ids[i]] == 0) {
                mismatched++;
                continue;
            }
            seen[ids[i]] = 1;
            if (fabs(probs[i] - ref[ids[i]]) > 1e-5 + 1e-4 * ref[ids[i]]) mismatched++;
        }
        CHECK_EQ_INT(mismatched, 0);
        /* Draws land only inside the set. */
        int outside = 0;
        for (int i = 0; i < 50; i++) {
            int32_t t = ig_sampler_sample(s, logits);
            outside += t < 0 || t >= V || ref[t] == 0;
        }
        CHECK_EQ_INT(outside, 0);
        ig_sampler_free(s);
    }
    free(logits);
    free(mod);
    free(ref);
    free(ids);
    free(probs);
    free(seen);
}

/* ---- logit bias ----------------------------------------------------------------- */

IG_TEST(sampler_logit_bias_force_and_ban) {
    float logits[5] = {1.0f, 5.0f, 2.0f, -3.0f, 0.0f};
    ig_sampler *s = NULL;
    /* Ban the argmax: greedy moves to the next best. */
    ig_logit_bias ban[2] = {{1, -100.0f}, {2, -INFINITY}};
    ig_sampler_params p = t_params(0.0f, 0, 1.0f, 0.0f, 3);
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    CHECK_EQ_INT(ig_sampler_sample(s, logits), 2);
    ig_sampler_free(s);
    p.n_logit_bias = 2;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    CHECK_EQ_INT(ig_sampler_sample(s, logits), 0);
    ig_sampler_free(s);
    /* Sampling never draws banned tokens (even at high temperature). */
    p.temperature = 5.0f;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    int counts[5];
    t_count_draws(s, logits, 5, 5000, counts);
    CHECK_EQ_INT(counts[1], 0);
    CHECK_EQ_INT(counts[2], 0);
    CHECK(counts[0] > 0 && counts[3] > 0 && counts[4] > 0);
    float lp[5];
    ig_sampler_logprobs(s, logits, lp);
    CHECK(lp[1] == -INFINITY && lp[2] == -INFINITY);
    ig_sampler_free(s);
    /* A +100 bias forces a weak token; a finite bias shifts by exactly that. */
    ig_logit_bias force[2] = {{3, 100.0f}, {4, 1.5f}};
    p = t_params(1.0f, 0, 1.0f, 0.0f, 3);
    p.logit_bias = force;
    p.n_logit_bias = 2;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    for (int i = 0; i < 1000; i++) CHECK_EQ_INT(ig_sampler_sample(s, logits), 3);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[4] - lp[0], (0.0 + 1.5) - 1.0, 1e-5);
    CHECK_NEAR(lp[3], 0.0, 1e-6);
    ig_sampler_free(s);
    /* A repeated token: the last entry wins. */
    ig_logit_bias dup[2] = {{0, -100.0f}, {0, 2.0f}};
    p.logit_bias = dup;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[2], (1.0 + 2.0) - 2.0, 1e-5);
    ig_sampler_free(s);
    /* Out-of-range token ids are rejected. */
    ig_logit_bias bad = {5, 1.0f};
    p.logit_bias = &bad;
    p.n_logit_bias = 1;
    s = (ig_sampler *)&bad;
    CHECK_STATUS(ig_sampler_create(&p, 5, &s), IG_ERR_INVALID_ARG);
    CHECK(s == NULL);
}

/* ---- penalties ------------------------------------------------------------------- */

IG_TEST(sampler_penalties_exact) {
    /* token:          0     1     2     3     4 (never seen, reference) */
    float logits[5] = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f};
    float lp[5];
    ig_sampler *s = NULL;
    ig_sampler_params p = t_params(1.0f, 0, 1.0f, 0.0f, 3);
    p.penalty_last_n = -1;

    /* Repetition only: positive divided, negative multiplied, once per token. */
    p.repeat_penalty = 2.0f;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 1);
    ig_sampler_accept(s, 3);
    ig_sampler_accept(s, 77); /* out of range: ignored */
    ig_sampler_accept(s, -1);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], 1.0 - 1.0, 1e-5);
    CHECK_NEAR(lp[1] - lp[4], -2.0 - 1.0, 1e-5);
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 1.0, 1e-5);
    CHECK_NEAR(lp[3] - lp[4], 0.0 - 1.0, 1e-5);
    /* reset forgets the history */
    ig_sampler_reset(s);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], 2.0 - 1.0, 1e-5);
    ig_sampler_free(s);

    /* All three: token 0 seen twice, 1 once. */
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 1);
    ig_sampler_accept(s, 0);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], (2.0 / 2 - 2 * 0.25 - 0.5) - 1.0, 1e-5);
    CHECK_NEAR(lp[1] - lp[4], (-1.0 * 2 - 1 * 0.25 - 0.5) - 1.0, 1e-5);
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 1.0, 1e-5);
    ig_sampler_free(s);

    /* Frequency/presence alone (OpenAI): count * f + p subtracted. */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.75f;
    p.frequency_penalty = 0.5f;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    for (int i = 0; i < 3; i++) ig_sampler_accept(s, 2);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[2] - lp[4], (0.5 - 3 * 0.5 - 0.75) - 1.0, 1e-5);
    CHECK_NEAR(lp[0] - lp[4], 2.0 - 1.0, 1e-5);
    /* Penalties steer greedy: token 0 (2.0) drops below 4 (1.0). */
    ig_sampler_params pg = p;
    pg.temperature = 0.0f;
    ig_sampler *g = NULL;
    REQUIRE_OK(ig_sampler_create(&pg, 5, &g));
    CHECK_EQ_INT(ig_sampler_sample(g, logits), 0);
    ig_sampler_accept(g, 0);
    CHECK_EQ_INT(ig_sampler_sample(g, logits), 4); /* 2 - 0.5 - 0.75 = 0.75 < 1 */
    ig_sampler_free(g);
    ig_sampler_free(s);

    /* Window: penalty_last_n = 2 keeps only the last two accepted tokens. */
    p = t_params(1.0f, 0, 1.0f, 0.0f, 3);
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = 2;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 1);
    ig_sampler_accept(s, 2);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], 2.0 - 1.0, 1e-5);        /* evicted */
    CHECK_NEAR(lp[1] - lp[4], -1.0 - 1.0 - 1.0, 1e-5); /* in window */
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 1.0 - 1.0, 1e-5);
    ig_sampler_accept(s, 2);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[1] - lp[4], -1.0 - 1.0, 1e-5);
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 2.0 - 1.0, 1e-5);

    /* reset empties the window too; counting restarts cleanly. */
    ig_sampler_reset(s);
    ig_sampler_accept(s, 1);
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 0);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], 2.0 - 2.0 - 1.0, 1e-5);
    CHECK_NEAR(lp[1] - lp[4], -1.0 - 1.0, 1e-5); /* evicted again */
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 1.0, 1e-5);
    ig_sampler_free(s);

    /* A huge window is accepted (kept as "all"). */
    p.penalty_last_n = 2147483647;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    for (int i = 0; i < 4; i++) ig_sampler_accept(s, 2);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[2] - lp[4], 0.5 - 4.0 - 1.0, 1e-5);
    ig_sampler_free(s);

    /* penalty_last_n = 0 disables penalties. */
    p.penalty_last_n = 0;
    REQUIRE_OK(ig_sampler_create(&p, 5, &s));
    ig_sampler_accept(s, 0);
    ig_sampler_logprobs(s, logits, lp);
    CHECK_NEAR(lp[0] - lp[4], 2.0 - 1.0, 1e-5);
    ig_sampler_free(s);
}

/* ---- NaN / inf -------------------------------------------------------------------- */

IG_TEST(sampler_nan_inf_handling) {
    ig_sampler *g = NULL, *s = NULL;
    ig_sampler_params pg = t_params(0.0f, 0, 1.0f, 0.0f, 1);
    ig_sampler_params ps = t_params(1.0f, 2, 0.9f, 0.05f, 1);
    REQUIRE_OK(ig_sampler_create(&pg, 4, &g));
    REQUIRE_OK(ig_sampler_create(&ps, 4, &s));

    /* NaN is never picked, even against very small finite logits. */
    float a[4] = {NAN, -50.0f, NAN, -60.0f};
    CHECK_EQ_INT(ig_sampler_sample(g, a), 1);
    for (int i = 0; i < 200; i++) {
        int32_t t = ig_sampler_sample(s, a);
        CHECK(t == 1 || t == 3);
    }
    float lp[4];
    ig_sampler_logprobs(s, a, lp);
    CHECK(lp[0] == -INFINITY && lp[2] == -INFINITY);
    CHECK_NEAR(exp(lp[1]) + exp(lp[3]), 1.0, 1e-6);

    /* All NaN / all -inf: 0, no crash. */
    float b[4] = {NAN, NAN, NAN, NAN};
    CHECK_EQ_INT(ig_sampler_sample(g, b), 0);
    CHECK_EQ_INT(ig_sampler_sample(s, b), 0);
    float c[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(ig_sampler_sample(s, c), 0);
    ig_sampler_logprobs(s, c, lp);
    CHECK(lp[0] == 0.0f && lp[1] == -INFINITY);

    /* +inf wins; several +inf share the mass uniformly. */
    float d[4] = {3.0f, INFINITY, 1.0f, NAN};
    CHECK_EQ_INT(ig_sampler_sample(g, d), 1);
    CHECK_EQ_INT(ig_sampler_sample(s, d), 1);
    float e[4] = {INFINITY, 0.0f, INFINITY, 1.0f};
    ig_sampler_free(s);
    ps.top_k = 0;
    ps.top_p = 1.0f;
    REQUIRE_OK(ig_sampler_create(&ps, 4, &s));
    int counts[4];
    t_count_draws(s, e, 4, 10000, counts);
    double want[4] = {0.5, 0, 0.5, 0};
    t_check_freqs(counts, want, 4, 10000);
    ig_sampler_logprobs(s, e, lp);
    CHECK_NEAR(lp[0], log(0.5), 1e-6);
    CHECK(lp[1] == -INFINITY);
    ig_sampler_free(s);

    /* Everything banned: the raw argmax (here id 2) comes back. */
    ig_logit_bias ban[4] = {{0, -INFINITY}, {1, -100.0f}, {2, -1000.0f}, {3, -INFINITY}};
    ps.logit_bias = ban;
    ps.n_logit_bias = 4;
    REQUIRE_OK(ig_sampler_create(&ps, 4, &s));
    float f[4] = {0.5f, 1.0f, 2.0f, NAN};
    CHECK_EQ_INT(ig_sampler_sample(s, f), 2);
    int32_t ids[2];
    float lps[2];
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, f, 2, ids, lps), 1);
    CHECK_EQ_INT(ids[0], 2);
    ig_sampler_free(s);

    /* A denormal temperature behaves like greedy, without NaN trouble. */
    ig_sampler_params pt = t_params(1e-45f, 0, 1.0f, 0.0f, 1);
    REQUIRE_OK(ig_sampler_create(&pt, 4, &s));
    float h[4] = {1.0f, 3.0f, 3.0f - 1e-6f, 2.0f};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(ig_sampler_sample(s, h), 1);
    ig_sampler_free(s);
    pt.top_p = 0.9f;
    pt.top_k = 2;
    REQUIRE_OK(ig_sampler_create(&pt, 4, &s));
    CHECK_EQ_INT(ig_sampler_sample(s, h), 1);
    ig_sampler_free(s);

    /* NULL arguments do not crash. */
    CHECK_EQ_INT(ig_sampler_sample(NULL, f), -1);
    CHECK_EQ_INT(ig_sampler_sample(g, NULL), -1);
    ig_sampler_accept(NULL, 1);
    ig_sampler_reset(NULL);
    ig_sampler_free(NULL);
    ig_sampler_free(g);
}

/* ---- logprobs ---------------------------------------------------------------------- */

IG_TEST(sampler_logprobs_and_top_logprobs) {
    enum { V = 1000 };
    static float logits[V], lp[V];
    uint64_t st = 77;
    for (int i = 0; i < V; i++) logits[i] = roundf(t_normal(&st) * 8.0f) / 4.0f; /* ties */
    logits[17] = NAN;
    const float temps[3] = {1.0f, 2.0f, 0.0f};
    for (int ti = 0; ti < 3; ti++) {
        ig_sampler_params p = t_params(temps[ti], 5, 0.5f, 0.1f, 1);
        ig_sampler *s = NULL;
        REQUIRE_OK(ig_sampler_create(&p, V, &s));
        ig_sampler_logprobs(s, logits, lp);
        /* log-softmax of logits / T (T <= 0 counts as 1), untruncated. */
        double t = temps[ti] > 0 ? temps[ti] : 1.0, m = -INFINITY, z = 0;
        for (int i = 0; i < V; i++)
            if (i != 17 && logits[i] > m) m = logits[i];
        for (int i = 0; i < V; i++)
            if (i != 17) z += exp((logits[i] - m) / t);
        int bad = 0;
        for (int i = 0; i < V; i++) {
            double want = i == 17 ? -INFINITY : (logits[i] - m) / t - log(z);
            if (i == 17 ? lp[i] != -INFINITY : fabs(lp[i] - want) > 1e-5) bad++;
        }
        CHECK_EQ_INT(bad, 0);

        /* top_logprobs: the k best, sorted, ties by id, equal to lp[]. */
        int32_t ids[40];
        float tl[40];
        int n = ig_sampler_top_logprobs(s, logits, 40, ids, tl);
        CHECK_EQ_INT(n, 40);
        for (int i = 0; i < n; i++) {
            CHECK_NEAR(tl[i], lp[ids[i]], 1e-6);
            if (i > 0) CHECK(tl[i - 1] > tl[i] || (tl[i - 1] == tl[i] && ids[i - 1] < ids[i]));
        }
        /* Nothing outside the list beats its last entry. */
        int beats = 0;
        for (int i = 0; i < V; i++) {
            bool in = false;
            for (int j = 0; j < n; j++) in |= ids[j] == i;
            if (!in && (lp[i] > tl[n - 1] || (lp[i] == tl[n - 1] && i < ids[n - 1]))) beats++;
        }
        CHECK_EQ_INT(beats, 0);
        ig_sampler_free(s);
    }

    /* k larger than the vocabulary, and zero-probability tokens left out. */
    float small[4] = {0.0f, -INFINITY, 1.0f, NAN};
    ig_sampler_params p = t_params(1.0f, 0, 1.0f, 0.0f, 1);
    ig_sampler *s = NULL;
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    int32_t ids[8];
    float tl[8];
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, small, 8, ids, tl), 2);
    CHECK_EQ_INT(ids[0], 2);
    CHECK_EQ_INT(ids[1], 0);
    CHECK_NEAR(tl[0], -log(1 + exp(-1.0)), 1e-6);
    CHECK_NEAR(tl[1], -1.0 - log(1 + exp(-1.0)), 1e-6);
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, small, 0, ids, tl), 0);
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, small, -1, ids, tl), -1);
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, small, 2, NULL, tl), -1);
    ig_sampler_free(s);

    /* top_logprobs sees bias and penalties like logprobs. */
    ig_logit_bias b = {0, 3.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    p.presence_penalty = 0.5f;
    REQUIRE_OK(ig_sampler_create(&p, 4, &s));
    ig_sampler_accept(s, 0);
    float full[4];
    ig_sampler_logprobs(s, small, full);
    CHECK_EQ_INT(ig_sampler_top_logprobs(s, small, 2, ids, tl), 2);
    CHECK_EQ_INT(ids[0], 0); /* 0 + 3 - 0.5 = 2.5 > 1 */
    CHECK_NEAR(tl[0], full[0], 1e-6);
    CHECK_NEAR(tl[1], full[2], 1e-6);
    CHECK_NEAR(full[0] - full[2], 1.5, 1e-5);
    ig_sampler_free(s);
}

/* ---- parameters ---------------------------------------------------------------------- */

IG_TEST(sampler_create_validation) {
    ig_sampler_params d = ig_sampler_default_params();
    CHECK_NEAR(d.temperature, 1.0, 0);
    CHECK_EQ_INT(d.top_k, 64);
    CHECK_NEAR(d.top_p, 0.95, 1e-7);
    CHECK_NEAR(d.repeat_penalty, 1.0, 0);
    CHECK(d.logit_bias == NULL && d.n_logit_bias == 0);

    ig_sampler *s = NULL;
    REQUIRE_OK(ig_sampler_create(NULL, 10, &s)); /* NULL params = defaults */
    float l[10] = {0, 0, 0, 9, 0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(ig_sampler_sample(s, l), 3); /* top-p 0.95 keeps only id 3 */
    ig_sampler_free(s);

    struct {
        const char *what;
        ig_sampler_params p;
        int n_vocab;
    } bad[8];
    for (int i = 0; i < 8; i++) bad[i].p = d, bad[i].n_vocab = 10;
    bad[0].what = "nan temperature", bad[0].p.temperature = NAN;
    bad[1].what = "inf temperature", bad[1].p.temperature = INFINITY;
    bad[2].what = "repeat 0", bad[2].p.repeat_penalty = 0.0f;
    bad[3].what = "last_n -2", bad[3].p.penalty_last_n = -2;
    bad[4].what = "nan top_p", bad[4].p.top_p = NAN;
    bad[5].what = "inf presence", bad[5].p.presence_penalty = INFINITY;
    bad[6].what = "vocab 0", bad[6].n_vocab = 0;
    bad[7].what = "bias NULL", bad[7].p.n_logit_bias = 1;
    for (int i = 0; i < 8; i++) {
        s = (ig_sampler *)&d;
        int st = ig_sampler_create(&bad[i].p, bad[i].n_vocab, &s);
        if (st != IG_ERR_INVALID_ARG) fprintf(stderr, "  case %s\n", bad[i].what);
        CHECK_EQ_INT(st, IG_ERR_INVALID_ARG);
        CHECK(s == NULL);
    }
    CHECK_EQ_INT(ig_sampler_create(&d, 10, NULL), IG_ERR_INVALID_ARG);
}
