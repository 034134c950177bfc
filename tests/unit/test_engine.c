/* Engine tests on the tiny HF fixtures: logits against transformers'
 * reference, incremental decoding, mixed multi-sequence batches, ring-buffer
 * KV cache, context overflow, the thread pool. */
#include "test.h"

#include "core/util.h"
#include "engine/fuse.h"
#include "engine/threadpool.h"
#include "graph_permute.h"
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

/* ---- fusion patterns (engine/fuse.h) ---- */

typedef struct found_fusion {
    ig_fusion_kind kind;
    int n;
    int op[IG_FUSE_MAX_OPS]; /* members in role order, as indices of the unpermuted graph */
} found_fusion;

/* Walks the ops as a backend does: at each op not yet done, the first of
 * kinds that matches there. perm maps indices to the unpermuted graph. */
static int walk_fusions(const ig_graph *g, const int *perm, const ig_fusion_kind *kinds, int n_kinds,
                        found_fusion *out, int cap) {
    bool *done = calloc((size_t)g->n_ops, sizeof *done);
    int n = 0;
    for (int i = 0; done && i < g->n_ops; i++) {
        if (done[i]) continue;
        for (int k = 0; k < n_kinds && n < cap; k++) {
            ig_fusion f;
            if (!ig_fuse_match(g, done, i, kinds[k], &f)) continue;
            out[n] = (found_fusion){.kind = f.kind, .n = f.n};
            for (int m = 0; m < f.n; m++) {
                out[n].op[m] = perm ? perm[f.op[m]] : f.op[m];
                done[f.op[m]] = true;
            }
            n++;
            break;
        }
        done[i] = true;
    }
    free(done);
    return n;
}

static bool same_fusion(const found_fusion *a, const found_fusion *b) {
    if (a->kind != b->kind || a->n != b->n) return false;
    for (int m = 0; m < a->n; m++)
        if (a->op[m] != b->op[m]) return false;
    return true;
}

static const ig_fusion_kind all_fusions[] = {IG_FUSE_QKV,       IG_FUSE_MATMUL_GEGLU, IG_FUSE_NORM_ROPE_STORE,
                                             IG_FUSE_NORM_ROPE, IG_FUSE_ROPE_STORE,   IG_FUSE_ADD_NORM_NORM};

/* The fusions found, with and without the q/k/v one, and after reordering
 * independent ops: the same ops in the same roles. */
IG_TEST(engine_fusions_match_by_dataflow) {
    ig_model *m = load_fixture("tiny-27b-like", "f32", 1);
    REQUIRE(m);
    const int L = ig_model_hparams(m)->n_layer;
    ig_graph g, p;
    REQUIRE(ig_graph_build(m, &g) == IG_OK);
    REQUIRE(ig_graph_build(m, &p) == IG_OK);
    int *perm = calloc((size_t)p.n_ops, sizeof *perm);
    found_fusion *a = calloc(8 * (size_t)L, sizeof *a), *b = calloc(8 * (size_t)L, sizeof *b);
    REQUIRE(perm && a && b);
    CHECK_EQ_INT(permute_graph(&p, perm), 4 * L);
    for (int variant = 0; variant < 2; variant++) {
        const ig_fusion_kind *kinds = all_fusions + variant; /* variant 1: without IG_FUSE_QKV */
        const int nk = 6 - variant;
        const int na = walk_fusions(&g, NULL, kinds, nk, a, 8 * L);
        const int nb = walk_fusions(&p, perm, kinds, nk, b, 8 * L);
        /* per layer: qkv (or norm_rope + norm_rope_store), matmul_geglu and
         * two add_norm_norm but after the last layer */
        CHECK_EQ_INT(na, (variant ? 5 : 4) * L - 1);
        CHECK_EQ_INT(nb, na);
        for (int i = 0; i < na; i++) {
            bool seen = false;
            for (int j = 0; j < nb && !seen; j++) seen = same_fusion(&a[i], &b[j]);
            if (!seen) ig_test_fail_at(__FILE__, __LINE__, "%s at op %d lost by the reordering",
                                       ig_fusion_name(a[i].kind), a[i].op[0]);
        }
        for (int i = 0; i < na; i++) {
            const ig_op *o = g.ops;
            if (a[i].kind == IG_FUSE_QKV) {
                CHECK(o[a[i].op[0]].dst == IG_BUF_Q && o[a[i].op[1]].dst == IG_BUF_K &&
                      o[a[i].op[2]].dst == IG_BUF_V && o[a[i].op[7]].kind == IG_OP_KV_STORE);
            } else if (a[i].kind == IG_FUSE_MATMUL_GEGLU) {
                CHECK(o[a[i].op[0]].dst == IG_BUF_GATE && o[a[i].op[1]].dst == IG_BUF_UP &&
                      o[a[i].op[2]].kind == IG_OP_GEGLU);
            }
        }
    }
    free(perm);
    free(a);
    free(b);
    ig_graph_free(&p);
    ig_graph_free(&g);
    ig_model_free(m);
}

static int find_op(const ig_graph *g, int from, ig_op_kind kind, ig_buf_id dst) {
    for (int i = from; i < g->n_ops; i++)
        if (g->ops[i].kind == kind && g->ops[i].dst == dst) return i;
    return -1;
}

/* What breaks a fusion: a later reader of a buffer the fused form leaves
 * unwritten, an op in between that the members cannot move past, a member
 * already emitted, an anchor that is not the first member. */
IG_TEST(engine_fusions_respect_dataflow) {
    ig_model *m = load_fixture("tiny-27b-like", "f32", 1);
    REQUIRE(m);
    ig_graph g;
    REQUIRE(ig_graph_build(m, &g) == IG_OK);
    ig_fusion f;
    const int gate = find_op(&g, 0, IG_OP_MATMUL, IG_BUF_GATE), down = find_op(&g, gate, IG_OP_MATMUL, IG_BUF_PROJ);
    const int q = find_op(&g, 0, IG_OP_MATMUL, IG_BUF_Q), att = find_op(&g, q, IG_OP_ATTENTION, IG_BUF_ATTN);
    const int rk = find_op(&g, q, IG_OP_ROPE, IG_BUF_K), nk = find_op(&g, q, IG_OP_RMSNORM, IG_BUF_K);
    const int nq = find_op(&g, q, IG_OP_RMSNORM, IG_BUF_Q);
    REQUIRE(gate > 0 && down > gate && q > 0 && att > q && rk > q && nk > q && nq > q);
    REQUIRE(ig_fuse_match(&g, NULL, gate, IG_FUSE_MATMUL_GEGLU, &f));
    CHECK(f.op[0] == gate && f.op[1] == gate + 1 && f.op[2] == gate + 2);
    CHECK(ig_fuse_match(&g, NULL, q, IG_FUSE_QKV, &f));
    CHECK(ig_fuse_match(&g, NULL, nk, IG_FUSE_NORM_ROPE_STORE, &f));
    /* the K projection does not start the q/k/v pattern: q comes before it */
    CHECK(!ig_fuse_match(&g, NULL, q + 1, IG_FUSE_QKV, &f));
    /* a member already emitted */
    bool *done = calloc((size_t)g.n_ops, sizeof *done);
    REQUIRE(done);
    done[gate + 1] = true;
    CHECK(!ig_fuse_match(&g, done, gate, IG_FUSE_MATMUL_GEGLU, &f));
    free(done);
    /* the down projection reading `up`, which the fused form does not write */
    g.ops[down].src = IG_BUF_UP;
    CHECK(!ig_fuse_match(&g, NULL, gate, IG_FUSE_MATMUL_GEGLU, &f));
    g.ops[down].src = IG_BUF_GATE;
    /* attention reading K after the store: K must be written back */
    g.ops[att].src = IG_BUF_K;
    CHECK(!ig_fuse_match(&g, NULL, q, IG_FUSE_QKV, &f));
    CHECK(!ig_fuse_match(&g, NULL, nk, IG_FUSE_NORM_ROPE_STORE, &f));
    CHECK(!ig_fuse_match(&g, NULL, rk, IG_FUSE_ROPE_STORE, &f));
    CHECK(ig_fuse_match(&g, NULL, nk, IG_FUSE_NORM_ROPE, &f));
    g.ops[att].src = IG_BUF_Q;
    /* an op between gate and up rewriting their source (the FFN pre-norm
     * moved after gate): up cannot move up to gate */
    CHECK(g.ops[gate - 1].kind == IG_OP_RMSNORM && g.ops[gate - 1].dst == IG_BUF_XN);
    ig_op t = g.ops[gate - 1];
    g.ops[gate - 1] = g.ops[gate];
    g.ops[gate] = t;
    CHECK(!ig_fuse_match(&g, NULL, gate - 1, IG_FUSE_MATMUL_GEGLU, &f));
    g.ops[gate] = g.ops[gate - 1];
    g.ops[gate - 1] = t;
    CHECK(ig_fuse_match(&g, NULL, gate, IG_FUSE_MATMUL_GEGLU, &f));
    /* the q-norm and RoPE fuse, whatever sits between them that leaves Q alone */
    CHECK(ig_fuse_match(&g, NULL, nq, IG_FUSE_NORM_ROPE, &f) && f.op[1] == find_op(&g, nq, IG_OP_ROPE, IG_BUF_Q));
    ig_graph_free(&g);
    ig_model_free(m);
}

/* The family table: names and config.json model types find the builder. */
IG_TEST(engine_arch_table) {
    const ig_arch *a = ig_arch_find("gemma3", 6);
    REQUIRE(a);
    CHECK(strcmp(a->name, "gemma3") == 0 && a->build_graph == ig_gemma3_build_graph);
    CHECK(ig_arch_find("gemma3x", 6) == a); /* the first len bytes only */
    CHECK(ig_arch_find("gemma", 5) == NULL);
    CHECK(ig_arch_find("llama", 5) == NULL);
    CHECK(ig_arch_find(NULL, 0) == NULL);
    CHECK(ig_arch_find_hf("gemma3_text") == a);
    CHECK(ig_arch_find_hf("gemma3") == a);
    CHECK(ig_arch_find_hf("gemma2") == NULL);
    ig_model *m = load_fixture("tiny-1b-like", "f32", 1);
    REQUIRE(m);
    CHECK(m->arch == a);
    ig_graph g;
    REQUIRE(ig_graph_build(m, &g) == IG_OK);
    CHECK_EQ_INT(g.n_ops, 18 * ig_model_hparams(m)->n_layer + 4); /* embed; gather, final norm, output */
    ig_graph_free(&g);
    ig_model_free(m);
}
