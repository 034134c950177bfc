/* Speculative decoding. Greedy output with a draft model or prompt lookup
 * is token-for-token the output of plain greedy decoding (F32 fixture
 * models, f32 KV), also when the sliding window (8 or 16) is smaller than
 * the number of drafts, so rejected positions are dropped from the rings.
 * The verification rule at the sampler level: thousands of draws checked
 * with a chi-square test against the final distribution, and on a fixture
 * model through ig_generate against plain sampling. Prompt lookup's
 * proposals, and the checks on a draft model. */
#include "test.h"

#include "gen/generate.h"
#include "gen/spec.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sids {
    int32_t v[512];
    int n;
} sids;

static void sids_collect(void *user, int32_t id) {
    sids *l = user;
    if (l->n < 512) l->v[l->n++] = id;
}

static ig_model *fixture(const char *name, const char *variant) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/%s/%s", ig_test_fixtures(), name, variant);
    ig_model *m = NULL;
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    return ig_model_load(path, &mp, &m) == IG_OK ? m : NULL;
}

/* Generates n_predict tokens greedily (spec may be NULL) into out. */
static ig_status run_gen(ig_model *m, ig_spec *spec, const int32_t *prompt, int n_prompt,
                         int n_predict, float temperature, uint64_t seed, sids *out,
                         ig_gen_stats *stats, int *seq_len) {
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 16; /* verification steps of up to 13 tokens */
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    ig_status st = ig_context_create(m, &cp, &ctx);
    if (st != IG_OK) return st;
    ig_gen_params gp = {.n_predict = n_predict, .sampling = ig_sampler_default_params(), .spec = spec};
    gp.sampling.temperature = temperature;
    gp.sampling.seed = seed;
    ig_gen_io io = {.on_token = sids_collect, .user = out};
    out->n = 0;
    st = ig_generate(ctx, 0, NULL, prompt, n_prompt, NULL, 0, &gp, &io, stats);
    if (seq_len) *seq_len = ig_seq_len(ctx, 0);
    ig_context_free(ctx);
    return st;
}

static const int32_t k_prompt[] = {2, 17, 91, 33, 5, 250, 17, 91, 33, 120, 64, 8, 17, 91};

static void check_identical(ig_model *target, ig_spec *spec, int n_predict, int *drafted,
                            int *accepted) {
    int np = (int)(sizeof k_prompt / sizeof *k_prompt);
    sids plain, fast;
    ig_gen_stats s0, s1;
    int len0 = -1, len1 = -2;
    REQUIRE_OK(run_gen(target, NULL, k_prompt, np, n_predict, 0.0f, 0, &plain, &s0, &len0));
    REQUIRE_OK(run_gen(target, spec, k_prompt, np, n_predict, 0.0f, 0, &fast, &s1, &len1));
    CHECK_EQ_INT(fast.n, plain.n);
    CHECK_EQ_INT(plain.n, n_predict);
    int first_diff = -1;
    for (int i = 0; i < plain.n && i < fast.n; i++)
        if (plain.v[i] != fast.v[i] && first_diff < 0) first_diff = i;
    CHECK_EQ_INT(first_diff, -1);
    CHECK_EQ_INT(len1, len0); /* the cache holds the same positions */
    CHECK_EQ_INT(s1.finish, IG_FINISH_LENGTH);
    CHECK(s1.n_steps < s0.n_steps || s1.n_accepted == 0);
    CHECK(s1.n_accepted <= s1.n_drafted);
    *drafted = s1.n_drafted;
    *accepted = s1.n_accepted;
}

IG_TEST(spec_greedy_draft_model_identical) {
    const char *names[] = {"tiny-1b-like", "tiny-27b-like"}; /* windows 16 and 8 */
    for (int k = 0; k < 2; k++) {
        ig_model *t = fixture(names[k], "f32");
        ig_model *d = fixture(names[k], "bf16");
        REQUIRE(t && d);
        t->hp.eot_id = t->hp.eos_id = -1;
        ig_spec_params p = ig_spec_default_params();
        p.draft = d;
        p.draft_max = 12; /* more than the window of 8 */
        p.kv_type = IG_KV_F32;
        ig_spec *sp = NULL;
        REQUIRE_OK(ig_spec_create(&p, t, 256, 1, &sp));
        int drafted = 0, accepted = 0;
        check_identical(t, sp, 100, &drafted, &accepted);
        fprintf(stderr, "  %s, bf16 drafter: %d drafted, %d accepted\n", names[k], drafted, accepted);
        CHECK(drafted >= 24); /* the draft model always proposes */
        CHECK(accepted > drafted / 2); /* bf16 copy of the same weights mostly agrees */
        /* The same model as its own drafter agrees almost always. */
        ig_spec_free(sp);
        p.draft = t;
        REQUIRE_OK(ig_spec_create(&p, t, 256, 1, &sp));
        check_identical(t, sp, 100, &drafted, &accepted);
        fprintf(stderr, "  %s, itself as drafter: %d drafted, %d accepted\n", names[k], drafted, accepted);
        CHECK(accepted >= drafted * 9 / 10);
        ig_spec_free(sp);
        ig_model_free(d);
        ig_model_free(t);
    }
}

IG_TEST(spec_greedy_lookup_identical) {
    const char *names[] = {"tiny-1b-like", "tiny-27b-like"};
    for (int k = 0; k < 2; k++) {
        ig_model *t = fixture(names[k], "f32");
        REQUIRE(t);
        t->hp.eot_id = t->hp.eos_id = -1;
        ig_spec_params p = ig_spec_default_params();
        p.draft_max = 12;
        ig_spec *sp = NULL;
        REQUIRE_OK(ig_spec_create(&p, t, 256, 1, &sp));
        int drafted = 0, accepted = 0;
        check_identical(t, sp, 120, &drafted, &accepted);
        fprintf(stderr, "  %s, lookup: %d drafted, %d accepted\n", names[k], drafted, accepted);
        CHECK(drafted > 0);
        ig_spec_free(sp);
        ig_model_free(t);
    }
}

/* A drafter that knows the plain greedy output and proposes it with
 * mistakes: the first `good` tokens right, then wrong ones, good cycling
 * through 0..K so every rejection point occurs, up to K positions back. */
typedef struct liar {
    const sids *ref;
    int n_prompt, calls;
} liar;

static int liar_propose(void *user, const int32_t *toks, int n, int max, int32_t *out) {
    liar *l = user;
    int g = n - l->n_prompt; /* tokens generated so far */
    int good = l->calls++ % (max + 1);
    for (int i = 0; i < max; i++) {
        int at = g + i;
        int32_t right = at < l->ref->n ? l->ref->v[at] : 0;
        out[i] = i < good ? right : (right + 1 + i) % 300;
    }
    (void)toks;
    return max;
}

IG_TEST(spec_greedy_rejections_rewind_the_rings) {
    const char *names[] = {"tiny-1b-like", "tiny-27b-like"}; /* windows 16 and 8 */
    /* A prompt whose greedy continuation varies before it settles. */
    int np = (int)(sizeof k_prompt / sizeof *k_prompt);
    for (int k = 0; k < 2; k++) {
        ig_model *t = fixture(names[k], "f32");
        REQUIRE(t);
        t->hp.eot_id = t->hp.eos_id = -1;
        sids ref;
        ig_gen_stats s0;
        REQUIRE_OK(run_gen(t, NULL, k_prompt, np, 150, 0.0f, 0, &ref, &s0, NULL));
        REQUIRE(ref.n == 150);
        liar l = {.ref = &ref, .n_prompt = np};
        ig_spec_params p = ig_spec_default_params();
        p.propose = liar_propose;
        p.propose_user = &l;
        p.draft_max = 12;
        ig_spec *sp = NULL;
        REQUIRE_OK(ig_spec_create(&p, t, 256, 1, &sp));
        int drafted = 0, accepted = 0;
        check_identical(t, sp, 150, &drafted, &accepted);
        CHECK(drafted > 0);
        CHECK(accepted > 0 && accepted < drafted);
        /* Each step accepts exactly the `good` prefix (the liar's wrong
         * tokens never equal the right ones). */
        CHECK(l.calls > 13);
        ig_spec_free(sp);
        ig_model_free(t);
    }
}

IG_TEST(spec_draft_cache_follows_the_text) {
    ig_model *t = fixture("tiny-27b-like", "f32");
    REQUIRE(t);
    ig_spec_params p = ig_spec_default_params();
    p.draft = t;
    p.draft_max = 6;
    p.kv_type = IG_KV_F32;
    ig_spec *a = NULL, *b = NULL;
    REQUIRE_OK(ig_spec_create(&p, t, 128, 2, &a));
    int32_t text[64];
    for (int i = 0; i < 64; i++) text[i] = (int32_t)((i * 37 + 11) % 500);
    int32_t d1[8], d2[8];
    /* a follows a text that grows, is cut back, and diverges; each answer
     * equals that of a fresh drafter on the same text. */
    const int lens[] = {20, 23, 30, 25, 40};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        if (k == 3) text[24] = 7; /* diverges inside what a holds */
        int n1 = ig_spec_draft(a, 1, text, lens[k], 6, d1);
        REQUIRE_OK(ig_spec_create(&p, t, 128, 1, &b));
        int n2 = ig_spec_draft(b, 0, text, lens[k], 6, d2);
        ig_spec_free(b);
        CHECK_EQ_INT(n1, 6);
        CHECK_EQ_INT(n1, n2);
        for (int i = 0; i < n1 && i < n2; i++) CHECK_EQ_INT(d1[i], d2[i]);
    }
    CHECK(ig_spec_failure(a, NULL) == NULL);
    ig_spec_free(a);
    ig_model_free(t);
}

IG_TEST(spec_stop_and_length_cut_like_plain) {
    ig_model *t = fixture("tiny-27b-like", "f32");
    REQUIRE(t);
    t->hp.eot_id = t->hp.eos_id = -1;
    int np = (int)(sizeof k_prompt / sizeof *k_prompt);
    sids plain;
    ig_gen_stats s0;
    REQUIRE_OK(run_gen(t, NULL, k_prompt, np, 40, 0.0f, 0, &plain, &s0, NULL));
    REQUIRE(plain.n == 40);
    t->hp.eot_id = plain.v[25]; /* ends the turn at its first occurrence */
    int first = 0;
    while (plain.v[first] != plain.v[25]) first++;
    ig_spec_params p = ig_spec_default_params();
    p.draft = t;
    p.draft_max = 10;
    p.kv_type = IG_KV_F32;
    ig_spec *sp = NULL;
    REQUIRE_OK(ig_spec_create(&p, t, 256, 1, &sp));
    sids fast;
    ig_gen_stats s1;
    int len = 0;
    REQUIRE_OK(run_gen(t, sp, k_prompt, np, 40, 0.0f, 0, &fast, &s1, &len));
    CHECK_EQ_INT(fast.n, first);
    CHECK_EQ_INT(s1.finish, IG_FINISH_STOP);
    CHECK_EQ_INT(s1.stop_token, plain.v[25]);
    CHECK_EQ_INT(len, np + first); /* everything generated was fed, nothing beyond */
    for (int i = 0; i < first && i < fast.n; i++) CHECK_EQ_INT(fast.v[i], plain.v[i]);
    /* max_tokens in the middle of a verified step. */
    t->hp.eot_id = -1;
    for (int n = 1; n <= 7; n += 3) {
        REQUIRE_OK(run_gen(t, sp, k_prompt, np, n, 0.0f, 0, &fast, &s1, &len));
        CHECK_EQ_INT(fast.n, n);
        CHECK_EQ_INT(len, np + n - 1);
        CHECK_EQ_INT(s1.finish, IG_FINISH_LENGTH);
        for (int i = 0; i < n && i < fast.n; i++) CHECK_EQ_INT(fast.v[i], plain.v[i]);
    }
    ig_spec_free(sp);
    ig_model_free(t);
}

IG_TEST(spec_lookup_proposals) {
    ig_model *t = fixture("tiny-1b-like", "f32");
    REQUIRE(t);
    ig_spec_params p = ig_spec_default_params();
    p.draft_max = 5;
    ig_spec *sp = NULL;
    REQUIRE_OK(ig_spec_create(&p, t, 64, 2, &sp));
    int32_t out[8];
    /* "1 2 3" occurred at 0: what followed it comes back. */
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 1, 2, 3};
    REQUIRE(ig_spec_draft(sp, 0, a, 9, 8, out) == 5);
    const int32_t wa[] = {4, 5, 6, 1, 2};
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(out[i], wa[i]);
    /* The longest n-gram wins over a later shorter match, the latest
     * occurrence of that n-gram over earlier ones. */
    const int32_t b[] = {7, 8, 9, 1, 8, 9, 2, 5, 9, 3, 8, 9};
    REQUIRE(ig_spec_draft(sp, 1, b, 12, 3, out) == 3);
    CHECK_EQ_INT(out[0], 2);
    CHECK_EQ_INT(out[1], 5);
    CHECK_EQ_INT(out[2], 9);
    /* Nothing to match: no drafts. A short continuation: as many as exist. */
    const int32_t c[] = {1, 2, 3, 4};
    CHECK_EQ_INT(ig_spec_draft(sp, 0, c, 4, 8, out), 0);
    const int32_t e[] = {4, 6, 4};
    CHECK_EQ_INT(ig_spec_draft(sp, 0, e, 3, 8, out), 2);
    /* draft_min: fewer than that is no proposal. */
    ig_spec_free(sp);
    p.draft_min = 3;
    REQUIRE_OK(ig_spec_create(&p, t, 64, 1, &sp));
    CHECK_EQ_INT(ig_spec_draft(sp, 0, e, 3, 8, out), 0);
    CHECK_EQ_INT(ig_spec_draft(sp, 0, a, 9, 8, out), 5);
    /* Room in the context caps the proposal. */
    ig_spec_free(sp);
    p.draft_min = 0;
    REQUIRE_OK(ig_spec_create(&p, t, 11, 1, &sp));
    CHECK_EQ_INT(ig_spec_draft(sp, 0, a, 9, 8, out), 2);
    ig_spec_free(sp);
    /* Bad settings are refused. */
    p.draft_max = 0;
    CHECK_STATUS(ig_spec_create(&p, t, 64, 1, &sp), IG_ERR_INVALID_ARG);
    p.draft_max = 4;
    p.draft_min = 5;
    CHECK_STATUS(ig_spec_create(&p, t, 64, 1, &sp), IG_ERR_INVALID_ARG);
    p.draft_min = 0;
    p.ngram_min = 3;
    p.ngram_max = 2;
    CHECK_STATUS(ig_spec_create(&p, t, 64, 1, &sp), IG_ERR_INVALID_ARG);
    CHECK(sp == NULL);
    ig_model_free(t);
}

IG_TEST(spec_draft_model_checks) {
    ig_model *a = fixture("tiny-1b-like", "f32");  /* 384 tokens */
    ig_model *b = fixture("tiny-27b-like", "f32"); /* 512 tokens */
    ig_model *a16 = fixture("tiny-1b-like", "bf16");
    REQUIRE(a && b && a16);
    ig_spec_params p = ig_spec_default_params();
    ig_spec *sp = NULL;
    p.draft = b;
    CHECK_STATUS(ig_spec_create(&p, a, 64, 1, &sp), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "384") && strstr(ig_last_error(), "512"));
    CHECK(sp == NULL);
    CHECK_STATUS(ig_spec_check_draft(a, b), IG_ERR_UNSUPPORTED);
    CHECK_STATUS(ig_spec_check_draft(a, a), IG_OK);
    if (ig_model_weight_bytes(a) > ig_model_weight_bytes(a16)) {
        /* The F32 copy is larger than the BF16 target. */
        CHECK_STATUS(ig_spec_check_draft(a16, a), IG_ERR_UNSUPPORTED);
        CHECK(strstr(ig_last_error(), "larger") != NULL);
        CHECK_STATUS(ig_spec_check_draft(a, a16), IG_OK);
    }
    snprintf(b->hp.arch, sizeof b->hp.arch, "llama");
    b->hp.n_vocab_real = a->hp.n_vocab_real;
    CHECK_STATUS(ig_spec_check_draft(a, b), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "not Gemma 3") != NULL);
    ig_model_free(a);
    ig_model_free(b);
    ig_model_free(a16);
}

/* ---- the verification rule at the sampler level --------------------------- */

/* Chi-square statistic of counts against probabilities over n categories
 * (categories of zero probability must have zero counts: else +inf). */
static double chi_square(const int *counts, const float *p, int n, int total, int *df) {
    double x = 0.0;
    *df = -1;
    for (int i = 0; i < n; i++) {
        double e = (double)p[i] * total;
        if (p[i] <= 0.0f) {
            if (counts[i]) return INFINITY;
            continue;
        }
        (*df)++;
        x += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x;
}

/* Upper 0.999 quantile of chi-square with df degrees of freedom
 * (Wilson-Hilferty). */
static double chi_crit(int df) {
    double z = 3.0902, k = df > 0 ? df : 1;
    double t = 1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k));
    return k * t * t * t;
}

IG_TEST(spec_verify_rule_matches_target_distribution) {
    enum { V = 12, N = 20000 };
    const float logits[V] = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, 1.0f, 0.9f, -3.0f, 0.1f, 0.5f, -1.0f, 1.2f};
    const ig_logit_bias bias[] = {{4, 1.0f}, {6, -INFINITY}};
    ig_sampler_params sp = ig_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_k = 9;
    sp.top_p = 0.97f;
    sp.min_p = 0.02f;
    sp.presence_penalty = 0.4f;
    sp.repeat_penalty = 1.3f;
    sp.logit_bias = bias;
    sp.n_logit_bias = 2;
    sp.seed = 1234;
    ig_sampler *s = NULL;
    REQUIRE_OK(ig_sampler_create(&sp, V, &s));
    ig_sampler_accept(s, 0);
    ig_sampler_accept(s, 5);
    float p[V];
    int nz = ig_sampler_probs(s, logits, p);
    REQUIRE(nz >= 4 && nz < V);
    CHECK_NEAR(p[6], 0.0f, 0.0f); /* banned */
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += p[i];
    CHECK_NEAR(sum, 1.0, 1e-5);
    /* The distribution a draw follows: check plain sampling itself first. */
    int cnt[V];
    int df;
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < N; i++) cnt[ig_sampler_sample(s, logits)]++;
    double x = chi_square(cnt, p, V, N, &df);
    CHECK(x < chi_crit(df));
    /* Drafts: likely, unlikely, outside the candidates (never accepted),
     * banned; q one-hot (NULL) and a dense q that differs from p. */
    /* Fixed drafts (a deterministic drafter, q one-hot): likely, unlikely,
     * outside the candidates and banned (never accepted). */
    const int32_t drafts[] = {0, 3, 7, 6, 1};
    for (size_t k = 0; k < sizeof drafts / sizeof *drafts; k++) {
        memset(cnt, 0, sizeof cnt);
        int acc_n = 0;
        for (int i = 0; i < N; i++) {
            bool acc = false;
            int32_t t = ig_sampler_verify(s, logits, drafts[k], NULL, &acc);
            REQUIRE(t >= 0 && t < V);
            if (acc) CHECK_EQ_INT(t, drafts[k]);
            acc_n += acc;
            cnt[t]++;
        }
        x = chi_square(cnt, p, V, N, &df);
        CHECK(x < chi_crit(df));
        /* With a one-hot q the acceptance rate is p(draft). */
        CHECK_NEAR((double)acc_n / N, p[drafts[k]], 0.015);
        if (p[drafts[k]] == 0.0f) CHECK_EQ_INT(acc_n, 0);
    }
    /* A drafter that samples its drafts from a distribution q unlike p
     * (q covers tokens outside p's support too). */
    float q[V];
    for (int i = 0; i < V; i++) q[i] = (float)(i + 1) / (V * (V + 1) / 2.0f);
    double overlap = 0.0;
    for (int i = 0; i < V; i++) overlap += p[i] < q[i] ? p[i] : q[i];
    int cq[V], acc_n = 0;
    memset(cnt, 0, sizeof cnt);
    memset(cq, 0, sizeof cq);
    uint64_t r = 99;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(r >> 11) / 9007199254740992.0, a = 0.0;
        int d = V - 1;
        for (int j = 0; j < V; j++)
            if (u < (a += q[j])) {
                d = j;
                break;
            }
        if (p[d] > 0.0f) cq[d]++;
        bool acc = false;
        int32_t t = ig_sampler_verify(s, logits, d, q, &acc);
        REQUIRE(t >= 0 && t < V);
        if (acc) CHECK_EQ_INT(t, d);
        acc_n += acc;
        cnt[t]++;
    }
    x = chi_square(cnt, p, V, N, &df);
    CHECK(x < chi_crit(df));
    /* The acceptance rate of the rule is the overlap sum min(p, q). */
    CHECK_NEAR((double)acc_n / N, overlap, 0.015);
    /* The test has power: the drafts themselves (q, not p) fail it. */
    x = chi_square(cq, p, V, N, &df);
    CHECK(x > chi_crit(df));
    /* Greedy: the argmax, accepted only when it is the draft; no draws. */
    ig_sampler_free(s);
    sp.temperature = 0.0f;
    REQUIRE_OK(ig_sampler_create(&sp, V, &s));
    bool acc = true;
    int32_t g = ig_sampler_sample(s, logits);
    CHECK_EQ_INT(ig_sampler_verify(s, logits, (g + 1) % V, NULL, &acc), g);
    CHECK(!acc);
    CHECK_EQ_INT(ig_sampler_verify(s, logits, g, NULL, &acc), g);
    CHECK(acc);
    CHECK_EQ_INT(ig_sampler_probs(s, logits, p), 1);
    CHECK_NEAR(p[g], 1.0f, 0.0f);
    ig_sampler_free(s);
}

/* Two-sample chi-square of equal-size samples a and b over n categories;
 * categories with fewer than 10 draws together are pooled. */
static double chi_two(const int *a, const int *b, int n, int *df) {
    double x = 0.0;
    int pa = 0, pb = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] + b[i] < 10) {
            pa += a[i];
            pb += b[i];
            continue;
        }
        x += (double)(a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
        k++;
    }
    if (pa + pb > 0) {
        x += (double)(pa - pb) * (pa - pb) / (pa + pb);
        k++;
    }
    *df = k - 1;
    return x;
}

/* A synthetic "model": logits of the next token as a function of the last
 * two tokens (V = 16). */
#define SV 16
static void toy_logits(int32_t a, int32_t b, float *out) {
    for (int i = 0; i < SV; i++) {
        uint32_t h = (uint32_t)(a * 2654435761u) ^ (uint32_t)(b * 40503u) ^ (uint32_t)(i * 97u);
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        out[i] = (float)(h % 1000) / 250.0f; /* 0 .. 4 */
    }
}

/* Runs one sequence of 4 tokens after (a, b) through ig_gen_seq, plain or
 * with a drafter that proposes the two tokens `guess` after every token,
 * verified step by step (ig_gen_seq_step_draft) as ig_spec_verify does. */
static void toy_sequence(const ig_gen_seq_params *gp, bool spec, const int32_t *guess, int32_t *out,
                         int *drafted, int *accepted) {
    ig_gen_seq *gs = NULL;
    REQUIRE_OK(ig_gen_seq_create(gp, &gs));
    int32_t hist[8] = {3, 5};
    int n = 2, produced = 0;
    float rows[3][SV];
    while (produced < 4) {
        int32_t d[2] = {guess[0], guess[1]};
        int nd = spec ? 2 : 0;
        /* The "target" evaluates the context and each draft. */
        toy_logits(hist[n - 2], hist[n - 1], rows[0]);
        if (nd) {
            toy_logits(hist[n - 1], d[0], rows[1]);
            toy_logits(d[0], d[1], rows[2]);
        }
        *drafted += nd;
        for (int i = 0; i <= nd && produced < 4; i++) {
            bool acc = false;
            ig_gen_event ev;
            REQUIRE_OK(ig_gen_seq_step_draft(gs, rows[i], i < nd ? d[i] : -1, NULL, &acc, &ev));
            hist[n++] = ev.token;
            out[produced++] = ev.token;
            *accepted += acc;
            if (!acc) break;
        }
    }
    ig_gen_seq_free(gs);
}

IG_TEST(spec_sampling_output_distribution_unchanged) {
    /* Tens of thousands of seeded 4-token sequences with sampling (top-k,
     * top-p, min-p, penalties over the generated tokens, a bias), plain and
     * with drafts verified by the rule: the joint frequencies of the 2nd
     * and 3rd token, and those of the 4th, agree (chi-square, 0.999). */
    enum { M = 30000 };
    const ig_logit_bias bias[] = {{7, 1.5f}};
    ig_gen_seq_params gp = {.n_vocab = SV, .max_tokens = -1};
    gp.sampling = ig_sampler_default_params();
    gp.sampling.temperature = 0.9f;
    gp.sampling.top_k = 10;
    gp.sampling.top_p = 0.95f;
    gp.sampling.min_p = 0.02f;
    gp.sampling.repeat_penalty = 1.4f;
    gp.sampling.presence_penalty = 0.5f;
    gp.sampling.logit_bias = bias;
    gp.sampling.n_logit_bias = 1;
    static int c23[2][SV * SV], c4[2][SV];
    memset(c23, 0, sizeof c23);
    memset(c4, 0, sizeof c4);
    const int32_t guess[2] = {7, 2};
    int drafted = 0, accepted = 0, dummy = 0;
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < M; r++) {
            gp.sampling.seed = 7919ULL * (uint64_t)r + (uint64_t)k * 100000007ULL;
            int32_t o[4];
            toy_sequence(&gp, k == 1, guess, o, k ? &drafted : &dummy, k ? &accepted : &dummy);
            c23[k][o[1] * SV + o[2]]++;
            c4[k][o[3]]++;
        }
    }
    int df;
    double x = chi_two(c23[0], c23[1], SV * SV, &df);
    fprintf(stderr, "  2nd and 3rd token: chi2 %.1f, df %d (critical %.1f)\n", x, df, chi_crit(df));
    CHECK(df >= 20);
    CHECK(x < chi_crit(df));
    x = chi_two(c4[0], c4[1], SV, &df);
    fprintf(stderr, "  4th token: chi2 %.1f, df %d (critical %.1f)\n", x, df, chi_crit(df));
    CHECK(df >= 5);
    CHECK(x < chi_crit(df));
    fprintf(stderr, "  %d drafted, %d accepted\n", drafted, accepted);
    CHECK(accepted > drafted / 20 && accepted < drafted);
    /* The test has power: a verifier that always accepts the drafts (a
     * wrong rule) is told apart. */
    memset(c23[1], 0, sizeof c23[1]);
    for (int r = 0; r < M; r++) {
        gp.sampling.seed = 7919ULL * (uint64_t)r + 100000007ULL;
        int32_t o[4];
        ig_gen_seq *gs = NULL;
        REQUIRE_OK(ig_gen_seq_create(&gp, &gs));
        float row[SV];
        ig_gen_event ev;
        toy_logits(3, 5, row);
        REQUIRE_OK(ig_gen_seq_step(gs, row, &ev));
        o[0] = ev.token;
        o[1] = guess[0]; /* "accepted" without looking */
        toy_logits(o[0], o[1], row);
        REQUIRE_OK(ig_gen_seq_step(gs, row, &ev));
        o[2] = ev.token;
        c23[1][o[1] * SV + o[2]]++;
        ig_gen_seq_free(gs);
    }
    x = chi_two(c23[0], c23[1], SV * SV, &df);
    CHECK(x > chi_crit(df));
}

IG_TEST(spec_draft_model_failure_turns_drafting_off) {
    ig_model *t = fixture("tiny-27b-like", "f32");
    REQUIRE(t);
    ig_spec_params p = ig_spec_default_params();
    p.draft = t;
    p.draft_max = 4;
    ig_spec *sp = NULL;
    REQUIRE_OK(ig_spec_create(&p, t, 64, 1, &sp));
    int32_t good[] = {2, 10, 20, 30}, bad[] = {2, 10, -5, 30}, out[8];
    CHECK_EQ_INT(ig_spec_draft(sp, 0, good, 4, 4, out), 4);
    bool first = true;
    CHECK(ig_spec_failure(sp, &first) == NULL);
    CHECK(!first);
    /* The draft model refuses the text: no drafts, the failure is kept and
     * reported once, and the drafter stays off. */
    CHECK_EQ_INT(ig_spec_draft(sp, 0, bad, 4, 4, out), 0);
    const char *why = ig_spec_failure(sp, &first);
    REQUIRE(why != NULL);
    CHECK(first);
    CHECK(strstr(why, "draft model failed") != NULL);
    CHECK(ig_spec_failure(sp, &first) != NULL);
    CHECK(!first);
    CHECK_EQ_INT(ig_spec_draft(sp, 0, good, 4, 4, out), 0);
    /* Generation goes on plainly with it. */
    t->hp.eot_id = t->hp.eos_id = -1;
    sids a, b;
    ig_gen_stats st;
    REQUIRE_OK(run_gen(t, NULL, good, 4, 8, 0.0f, 0, &a, &st, NULL));
    REQUIRE_OK(run_gen(t, sp, good, 4, 8, 0.0f, 0, &b, &st, NULL));
    CHECK_EQ_INT(st.n_drafted, 0);
    CHECK_EQ_INT(b.n, a.n);
    for (int i = 0; i < a.n && i < b.n; i++) CHECK_EQ_INT(b.v[i], a.v[i]);
    ig_spec_free(sp);
    ig_model_free(t);
}

#ifndef IG_SPEC_DRAWS
#define IG_SPEC_DRAWS 1500
#endif

/* Draws n_draws sequences of 3 tokens from the fixture (target t) with
 * sampling, plain or with the drafter sp, in one reused context; counts the
 * 2nd and 3rd tokens. */
static void model_draws(ig_model *t, ig_spec *sp, float temperature, int n_draws, uint64_t seed0,
                        int *c2, int *c3, int *drafted, int *accepted) {
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.kv_type = IG_KV_F32;
    cp.n_threads = 1; /* tiny steps: threads would cost more than they give */
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(t, &cp, &ctx));
    for (int r = 0; r < n_draws; r++) {
        ig_gen_params gp = {.n_predict = 3, .sampling = ig_sampler_default_params(), .spec = sp};
        gp.sampling.temperature = temperature;
        gp.sampling.top_k = 6;
        gp.sampling.top_p = 1.0f;
        gp.sampling.min_p = 0.0f;
        gp.sampling.seed = seed0 + 7919ULL * (uint64_t)r;
        sids out = {.n = 0};
        ig_gen_io io = {.on_token = sids_collect, .user = &out};
        ig_gen_stats st;
        /* the prompt stays cached: each draw decodes its 3 tokens only */
        REQUIRE_OK(ig_generate(ctx, 0, NULL, k_prompt, 14, NULL, 0, &gp, &io, &st));
        REQUIRE(out.n == 3);
        c2[out.v[1]]++;
        c3[out.v[2]]++;
        *drafted += st.n_drafted;
        *accepted += st.n_accepted;
    }
    ig_context_free(ctx);
}

IG_TEST(spec_sampling_on_a_model_matches_plain) {
    /* The whole path on a model: ig_generate with a draft model (the bf16
     * copy, greedy drafts) and sampling (top-k 6; the fixture's logits are
     * tens apart, hence temperature 40) gives the
     * 2nd and 3rd tokens with plain sampling's frequencies (chi-square,
     * 0.999, thousands of draws), while a plain run at another temperature
     * is told apart. */
    enum { N = IG_SPEC_DRAWS, NV = 512 };
    ig_model *t = fixture("tiny-1b-like", "f32");
    ig_model *d = fixture("tiny-1b-like", "bf16");
    REQUIRE(t && d);
    REQUIRE(ig_model_hparams(t)->n_vocab_real <= NV);
    t->hp.eot_id = t->hp.eos_id = -1;
    ig_spec_params p = ig_spec_default_params();
    p.draft = d;
    p.draft_max = 2;
    p.kv_type = IG_KV_F32;
    p.n_threads = 1;
    ig_spec *sp = NULL;
    REQUIRE_OK(ig_spec_create(&p, t, 64, 1, &sp));
    static int c2[3][NV], c3[3][NV];
    memset(c2, 0, sizeof c2);
    memset(c3, 0, sizeof c3);
    int drafted = 0, accepted = 0, dummy = 0;
    model_draws(t, NULL, 40.0f, N, 11, c2[0], c3[0], &dummy, &dummy);
    model_draws(t, sp, 40.0f, N, 100000007ULL, c2[1], c3[1], &drafted, &accepted);
    model_draws(t, NULL, 25.0f, N, 200000011ULL, c2[2], c3[2], &dummy, &dummy);
    int df;
    double x2 = chi_two(c2[0], c2[1], NV, &df);
    fprintf(stderr, "  2nd token: chi2 %.1f, df %d (critical %.1f)\n", x2, df, chi_crit(df));
    CHECK(df >= 5);
    CHECK(x2 < chi_crit(df));
    double x3 = chi_two(c3[0], c3[1], NV, &df);
    fprintf(stderr, "  3rd token: chi2 %.1f, df %d (critical %.1f)\n", x3, df, chi_crit(df));
    CHECK(df >= 5);
    CHECK(x3 < chi_crit(df));
    fprintf(stderr, "  %d drafted, %d accepted\n", drafted, accepted);
    CHECK(accepted > drafted / 10 && accepted < drafted); /* both branches of the rule ran */
    /* The test has power: another temperature is a different distribution. */
    x2 = chi_two(c2[0], c2[2], NV, &df);
    CHECK(x2 > chi_crit(df));
    ig_spec_free(sp);
    ig_model_free(d);
    ig_model_free(t);
}
