/* Engine tests on the tiny HF fixtures: logits against transformers'
 * reference, incremental decoding, mixed multi-sequence batches, ring-buffer
 * KV cache, context overflow, the thread pool. */
#include "test.h"

#include "core/util.h"
#include "engine/threadpool.h"
#include "ignis.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_seq {
    int n;
    int32_t tokens[256];
    float *logits; /* [n, vocab] */
    float *logits_bf16;
} ref_seq;

typedef struct ref_data {
    int n_seq;
    ref_seq seq[4];
    int vocab;
} ref_data;

static float *read_matrix(json_t *rows, int n, int vocab) {
    float *out = calloc((size_t)n * vocab, sizeof(float));
    for (int i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, (size_t)i);
        for (int v = 0; v < vocab; v++) out[(size_t)i * vocab + v] = (float)json_number_value(json_array_get(row, (size_t)v));
    }
    return out;
}

static int load_ref(const char *model, ref_data *r) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/%s/reference.json", ig_test_fixtures(), model);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return -1;
    json_t *seqs = json_object_get(root, "sequences");
    memset(r, 0, sizeof *r);
    r->n_seq = (int)json_array_size(seqs);
    if (r->n_seq > 4) r->n_seq = 4;
    for (int s = 0; s < r->n_seq; s++) {
        json_t *o = json_array_get(seqs, (size_t)s);
        json_t *toks = json_object_get(o, "tokens");
        ref_seq *q = &r->seq[s];
        q->n = (int)json_array_size(toks);
        if (q->n > 256) q->n = 256;
        for (int i = 0; i < q->n; i++) q->tokens[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
        json_t *lg = json_object_get(o, "logits");
        r->vocab = (int)json_array_size(json_array_get(lg, 0));
        q->logits = read_matrix(lg, q->n, r->vocab);
        q->logits_bf16 = read_matrix(json_object_get(o, "logits_bf16_weights"), q->n, r->vocab);
    }
    json_decref(root);
    return 0;
}

static void free_ref(ref_data *r) {
    for (int s = 0; s < r->n_seq; s++) {
        free(r->seq[s].logits);
        free(r->seq[s].logits_bf16);
    }
}

static double rel_err(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static ig_model *load_fixture(const char *name, const char *variant, int threads) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/%s/%s", ig_test_fixtures(), name, variant);
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = threads;
    ig_model *m = NULL;
    if (ig_model_load(path, &mp, &m) != IG_OK) {
        fprintf(stderr, "  cannot load %s: %s\n", path, ig_last_error());
        return NULL;
    }
    return m;
}

/* Full-sequence pass, every position, against the reference. */
static void check_full(const char *name, const char *variant, ig_kv_type kv, double tol, int threads) {
    ref_data r;
    REQUIRE(load_ref(name, &r) == 0);
    ig_model *m = load_fixture(name, variant, threads);
    REQUIRE(m);
    CHECK_EQ_INT(ig_model_hparams(m)->n_vocab, r.vocab);
    for (int s = 0; s < r.n_seq; s++) {
        ref_seq *q = &r.seq[s];
        ig_context_params cp = ig_context_default_params();
        cp.n_ctx = q->n;
        cp.n_batch = q->n;
        cp.kv_type = kv;
        ig_context *ctx = NULL;
        REQUIRE_OK(ig_context_create(m, &cp, &ctx));
        int32_t pos[256], seq[256] = {0};
        uint8_t want[256];
        for (int i = 0; i < q->n; i++) pos[i] = i, want[i] = 1;
        ig_batch b = {q->n, q->tokens, pos, seq, want};
        CHECK_STATUS(ig_decode(ctx, &b), IG_OK);
        CHECK_EQ_INT(ig_n_outputs(ctx), q->n);
        const float *ref = strcmp(variant, "bf16") ? q->logits : q->logits_bf16;
        double worst = 0;
        for (int i = 0; i < q->n && ig_get_logits(ctx, i); i++) {
            double e = rel_err(ig_get_logits(ctx, i), ref + (size_t)i * r.vocab, r.vocab);
            if (e > worst) worst = e;
        }
        if (!(worst <= tol)) ig_test_fail_at(__FILE__, __LINE__, "%s/%s seq %d: rel err %.3g > %.3g", name, variant, s, worst, tol);
        ig_context_free(ctx);
    }
    ig_model_free(m);
    free_ref(&r);
}

IG_TEST(engine_tiny27b_f32_logits) { check_full("tiny-27b-like", "f32", IG_KV_F32, 1e-4, 2); }
IG_TEST(engine_tiny27b_bf16_logits) { check_full("tiny-27b-like", "bf16", IG_KV_F32, 1e-4, 1); }
IG_TEST(engine_tiny27b_f16kv_logits) { check_full("tiny-27b-like", "f32", IG_KV_F16, 2e-3, 2); }
IG_TEST(engine_tiny1b_f32_logits) { check_full("tiny-1b-like", "f32", IG_KV_F32, 1e-4, 2); }
IG_TEST(engine_tiny1b_bf16_logits) { check_full("tiny-1b-like", "bf16", IG_KV_F16, 2e-3, 2); }

/* Two sequences fed in interleaved chunks of different sizes through one
 * context (n_batch smaller than the window + sequence, so sliding rings
 * wrap) give the reference logits at every position. */
IG_TEST(engine_mixed_batches_match_reference) {
    ref_data r;
    REQUIRE(load_ref("tiny-27b-like", &r) == 0);
    REQUIRE(r.n_seq >= 2);
    ig_model *m = load_fixture("tiny-27b-like", "f32", 2);
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq = 3;
    cp.n_batch = 5;
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    int done[2] = {0, 0};
    const int chunk[2] = {3, 1}; /* seq 0 prefill-like chunks, seq 1 one token a step */
    double worst = 0;
    while (done[0] < r.seq[0].n || done[1] < r.seq[1].n) {
        int32_t tok[5], pos[5], seq[5];
        uint8_t want[5];
        int n = 0;
        for (int s = 0; s < 2; s++) {
            for (int k = 0; k < chunk[s] && done[s] + k < r.seq[s].n && n < 5; k++) {
                tok[n] = r.seq[s].tokens[done[s] + k];
                pos[n] = done[s] + k;
                seq[n] = s == 0 ? 2 : 0; /* use slots 2 and 0 */
                want[n] = 1;
                n++;
            }
        }
        ig_batch b = {n, tok, pos, seq, want};
        REQUIRE_OK(ig_decode(ctx, &b));
        for (int i = 0; i < n; i++) {
            int s = seq[i] == 2 ? 0 : 1;
            const float *ref = r.seq[s].logits + (size_t)pos[i] * r.vocab;
            double e = rel_err(ig_get_logits(ctx, i), ref, r.vocab);
            if (e > worst) worst = e;
        }
        for (int i = 0; i < n; i++) done[seq[i] == 2 ? 0 : 1]++;
    }
    CHECK(worst <= 1e-4);
    CHECK_EQ_INT(ig_seq_len(ctx, 2), r.seq[0].n);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), r.seq[1].n);
    CHECK_EQ_INT(ig_seq_len(ctx, 1), 0);
    ig_context_free(ctx);
    ig_model_free(m);
    free_ref(&r);
}

IG_TEST(engine_truncate_and_refeed) {
    ref_data r;
    REQUIRE(load_ref("tiny-1b-like", &r) == 0);
    ig_model *m = load_fixture("tiny-1b-like", "f32", 1);
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 4;
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    ref_seq *q = &r.seq[0];
    int32_t pos[64], seq[64] = {0};
    for (int i = 0; i < 64; i++) pos[i] = i;
    /* Feed 10 tokens, truncate to 8 (window 16: ring still holds them), refeed. */
    for (int i = 0; i < 10; i++) {
        ig_batch b = {1, q->tokens + i, pos + i, seq, NULL};
        REQUIRE_OK(ig_decode(ctx, &b));
    }
    REQUIRE_OK(ig_seq_truncate(ctx, 0, 8));
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 8);
    ig_batch b = {1, q->tokens + 8, pos + 8, seq, NULL};
    REQUIRE_OK(ig_decode(ctx, &b));
    CHECK(rel_err(ig_get_logits(ctx, 0), q->logits + (size_t)8 * r.vocab, r.vocab) <= 1e-4);
    /* Feed far past the window, then truncating back before it must fail. */
    for (int i = 9; i < q->n; i++) {
        ig_batch bb = {1, q->tokens + i, pos + i, seq, NULL};
        REQUIRE_OK(ig_decode(ctx, &bb));
    }
    CHECK(rel_err(ig_get_logits(ctx, 0), q->logits + (size_t)(q->n - 1) * r.vocab, r.vocab) <= 1e-4);
    CHECK_STATUS(ig_seq_truncate(ctx, 0, 2), IG_ERR_UNSUPPORTED);
    CHECK_STATUS(ig_seq_truncate(ctx, 0, q->n + 1), IG_ERR_INVALID_ARG);
    ig_context_free(ctx);
    ig_model_free(m);
    free_ref(&r);
}

IG_TEST(engine_rejects_bad_batches) {
    ig_model *m = load_fixture("tiny-1b-like", "f32", 1);
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 4;
    cp.n_batch = 4;
    cp.n_seq = 2;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    int32_t tok[5] = {2, 3, 4, 5, 6}, pos[5] = {0, 1, 2, 3, 4}, seq[5] = {0};
    ig_batch b = {1, tok, pos + 1, seq, NULL}; /* wrong position */
    CHECK_STATUS(ig_decode(ctx, &b), IG_ERR_INVALID_ARG);
    int32_t bad_tok = 100000;
    b = (ig_batch){1, &bad_tok, pos, seq, NULL};
    CHECK_STATUS(ig_decode(ctx, &b), IG_ERR_INVALID_ARG);
    int32_t bad_seq = 2;
    b = (ig_batch){1, tok, pos, &bad_seq, NULL};
    CHECK_STATUS(ig_decode(ctx, &b), IG_ERR_INVALID_ARG);
    b = (ig_batch){5, tok, pos, seq, NULL}; /* larger than n_batch */
    CHECK_STATUS(ig_decode(ctx, &b), IG_ERR_INVALID_ARG);
    b = (ig_batch){4, tok, pos, seq, NULL};
    CHECK_STATUS(ig_decode(ctx, &b), IG_OK);
    b = (ig_batch){1, tok + 4, pos + 4, seq, NULL}; /* position 4 == n_ctx */
    CHECK_STATUS(ig_decode(ctx, &b), IG_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(ig_seq_len(ctx, 0), 4);
    ig_context_free(ctx);
    ig_model_free(m);
}

typedef struct pool_task {
    atomic_int phase_sum[8];
    atomic_int violations;
    ig_threadpool *tp;
} pool_task;

static void pool_fn(void *arg, int ith, int nth) {
    pool_task *t = arg;
    for (int p = 0; p < 8; p++) {
        atomic_fetch_add(&t->phase_sum[p], ith + 1);
        ig_threadpool_barrier(t->tp);
        if (atomic_load(&t->phase_sum[p]) != nth * (nth + 1) / 2) atomic_fetch_add(&t->violations, 1);
        ig_threadpool_barrier(t->tp);
    }
}

IG_TEST(threadpool_barriers_order_phases) {
    for (int n = 1; n <= 4; n++) {
        ig_threadpool *tp = NULL;
        REQUIRE_OK(ig_threadpool_create(n, &tp));
        for (int rep = 0; rep < 50; rep++) {
            pool_task t;
            for (int p = 0; p < 8; p++) atomic_init(&t.phase_sum[p], 0);
            atomic_init(&t.violations, 0);
            t.tp = tp;
            ig_threadpool_run(tp, pool_fn, &t);
            CHECK_EQ_INT(atomic_load(&t.violations), 0);
            CHECK_EQ_INT(atomic_load(&t.phase_sum[7]), n * (n + 1) / 2);
        }
        ig_threadpool_free(tp);
    }
    ig_threadpool *tp = NULL;
    CHECK_STATUS(ig_threadpool_create(0, &tp), IG_ERR_INVALID_ARG);
}
