/* Importance matrices: the CPU backend's matmul observer sees each matmul's
 * real input (checked against the first layer's input computed here from
 * the weights) without changing the logits, and the imatrix files (GGUF and legacy) read back what was
 * written, with llama-quantize's normalisation; bad files are refused. */
#include "test.h"

#include "engine/context.h"
#include "model/model.h"
#include "quant/imatrix.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct obs {
    ig_imatrix *im;
    int calls;
    bool failed;
} obs;

static void on_matmul(void *user, const char *weight, const float *x, int rows, int width) {
    obs *o = user;
    o->calls++;
    if (ig_imatrix_add(o->im, weight, x, rows, width) != IG_OK) o->failed = true;
}

static bool same_sums(const ig_imatrix_entry *a, const ig_imatrix_entry *b) {
    if (!a || !b || a->n != b->n || a->count != b->count) return false;
    return memcmp(a->sum2, b->sum2, sizeof *a->sum2 * (size_t)a->n) == 0;
}

IG_TEST(imatrix_observer_sees_matmul_inputs) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/tiny-1b-like/f32", ig_test_fixtures());
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    ig_model *m = NULL;
    REQUIRE(ig_model_load(path, &mp, &m) == IG_OK);
    obs o = {.im = ig_imatrix_new()};
    REQUIRE(o.im);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.matmul_observer = on_matmul;
    cp.matmul_observer_user = &o;
    ig_context *ctx = NULL;
    REQUIRE(ig_context_create(m, &cp, &ctx) == IG_OK);
    enum { N = 20 };
    int32_t tok[N], pos[N], seq[N] = {0};
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)((i * 37 + 2) % m->hp.n_vocab);
        pos[i] = i;
    }
    const ig_batch b = {N, tok, pos, seq, NULL};
    REQUIRE(ig_decode(ctx, &b) == IG_OK);
    CHECK(!o.failed);
    const int L = m->hp.n_layer, H = m->hp.n_embd;
    /* 7 matrices per layer, and the output projection of the one logits row */
    CHECK_EQ_INT(o.calls, 7 * L + 1);
    CHECK_EQ_INT((long)o.im->n_entries, 7 * L + 1);
    const ig_imatrix_entry *out = ig_imatrix_find(o.im, m->output->name);
    REQUIRE(out);
    CHECK_EQ_INT((long)out->count, 1);
    char a[64], c[64];
    for (int l = 0; l < L; l++) {
        /* siblings read the same buffer */
        snprintf(a, sizeof a, "blk.%d.attn_q.weight", l);
        snprintf(c, sizeof c, "blk.%d.attn_v.weight", l);
        CHECK(same_sums(ig_imatrix_find(o.im, a), ig_imatrix_find(o.im, c)));
        snprintf(a, sizeof a, "blk.%d.ffn_gate.weight", l);
        snprintf(c, sizeof c, "blk.%d.ffn_up.weight", l);
        CHECK(same_sums(ig_imatrix_find(o.im, a), ig_imatrix_find(o.im, c)));
        snprintf(a, sizeof a, "blk.%d.ffn_down.weight", l);
        const ig_imatrix_entry *d = ig_imatrix_find(o.im, a);
        REQUIRE(d);
        CHECK_EQ_INT((long)d->n, m->hp.n_ff); /* the GEGLU product, n_ff wide */
        CHECK_EQ_INT((long)d->count, N);
    }
    /* Layer 0's q input: rmsnorm(embedding * sqrt(H)) * attn_norm, in double. */
    const ig_imatrix_entry *q0 = ig_imatrix_find(o.im, "blk.0.attn_q.weight");
    REQUIRE(q0 && q0->n == H && m->tok_embd->type == IG_TYPE_F32);
    double *want = calloc((size_t)H, sizeof *want);
    REQUIRE(want);
    for (int t = 0; t < N; t++) {
        const float *e = (const float *)m->tok_embd->data + (size_t)tok[t] * (size_t)H;
        double ss = 0;
        for (int j = 0; j < H; j++) ss += (double)e[j] * e[j] * H;
        const double r = 1.0 / sqrt(ss / H + m->hp.rms_eps);
        for (int j = 0; j < H; j++) {
            const double v = e[j] * sqrt((double)H) * r * m->layers[0].attn_norm[j];
            want[j] += v * v;
        }
    }
    double worst = 0;
    for (int j = 0; j < H; j++) worst = fmax(worst, fabs(q0->sum2[j] - want[j]) / want[j]);
    CHECK(worst < 1e-5);
    free(want);
    /* the observer leaves the computation alone: the same logits without it */
    cp.matmul_observer = NULL;
    ig_context *plain = NULL;
    REQUIRE(ig_context_create(m, &cp, &plain) == IG_OK);
    REQUIRE(ig_decode(plain, &b) == IG_OK);
    const float *l1 = ig_get_logits(ctx, 0), *l2 = ig_get_logits(plain, 0);
    REQUIRE(l1 && l2);
    CHECK(memcmp(l1, l2, sizeof *l1 * (size_t)m->hp.n_vocab) == 0);
    ig_context_free(plain);
    ig_context_free(ctx);
    ig_imatrix_free(o.im);
    ig_model_free(m);
}

static FILE *tmp_file(char *path) {
    const int fd = mkstemp(path);
    return fd < 0 ? NULL : fdopen(fd, "w+b");
}

IG_TEST(imatrix_gguf_round_trip) {
    ig_imatrix *im = ig_imatrix_new();
    REQUIRE(im);
    const float x[2 * 3] = {1, 2, 3, -4, 0.5f, 0};
    REQUIRE(ig_imatrix_add(im, "blk.1.ffn_up.weight", x, 2, 3) == IG_OK);
    REQUIRE(ig_imatrix_add(im, "blk.0.attn_q.weight", x, 1, 3) == IG_OK);
    CHECK(ig_imatrix_add(im, "blk.0.attn_q.weight", x, 1, 2) == IG_ERR_INVALID_ARG); /* width changed */
    REQUIRE(ig_imatrix_add_dataset(im, "text.txt") == IG_OK);
    im->chunk_count = 2;
    im->chunk_size = 1;
    char path[] = "/tmp/ignis-imatrix-XXXXXX";
    FILE *f = tmp_file(path);
    REQUIRE(f);
    REQUIRE(ig_imatrix_write(im, f) == IG_OK);
    fclose(f);
    ig_imatrix *back = NULL;
    REQUIRE(ig_imatrix_load(path, &back) == IG_OK);
    unlink(path);
    CHECK_EQ_INT((long)back->n_entries, 2);
    CHECK(!strcmp(back->entries[0].name, "blk.0.attn_q.weight")); /* sorted */
    CHECK_EQ_INT((long)back->chunk_count, 2);
    CHECK(back->n_datasets == 1 && !strcmp(back->datasets[0], "text.txt"));
    const ig_imatrix_entry *e = ig_imatrix_find(back, "blk.1.ffn_up.weight");
    REQUIRE(e && e->n == 3 && e->count == 2);
    float w[3];
    ig_imatrix_weights(back, e, w);
    CHECK_NEAR(w[0], (1 + 16) / 2.0, 1e-6);
    CHECK_NEAR(w[1], (4 + 0.25) / 2.0, 1e-6);
    CHECK_NEAR(w[2], (9 + 0) / 2.0, 1e-6);
    ig_imatrix_free(back);
    ig_imatrix_free(im);
}

static void put32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }

IG_TEST(imatrix_reads_legacy_and_refuses_bad_files) {
    char path[] = "/tmp/ignis-imatrix-XXXXXX";
    FILE *f = tmp_file(path);
    REQUIRE(f);
    /* one entry: name, ncall 4, 2 values of mean-square * ncall; trailer */
    put32(f, 1);
    put32(f, 5);
    fwrite("w.abc", 1, 5, f);
    put32(f, 4);
    put32(f, 2);
    const float v[2] = {8, 2};
    fwrite(v, 4, 2, f);
    put32(f, 4);
    put32(f, 3);
    fwrite("kjv", 1, 3, f);
    fclose(f);
    ig_imatrix *im = NULL;
    REQUIRE(ig_imatrix_load(path, &im) == IG_OK);
    CHECK(im->legacy && im->chunk_count == 4 && im->n_datasets == 1);
    float w[2];
    ig_imatrix_weights(im, &im->entries[0], w);
    CHECK_NEAR(w[0], 2.0, 0);
    CHECK_NEAR(w[1], 0.5, 0);
    ig_imatrix_free(im);
    /* truncated in the values, junk, empty, a GGUF without the keys */
    static const unsigned char junk[][12] = {{1, 0, 0, 0, 5, 0, 0, 0, 'w', '.', 'a', 'b'},
                                             {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8},
                                             {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0}};
    for (size_t k = 0; k < sizeof junk / sizeof junk[0] + 1; k++) {
        f = fopen(path, "wb");
        REQUIRE(f);
        if (k < sizeof junk / sizeof junk[0]) fwrite(junk[k], 1, sizeof junk[k], f);
        fclose(f);
        im = NULL;
        CHECK(ig_imatrix_load(path, &im) != IG_OK);
        CHECK(im == NULL);
    }
    unlink(path);
    CHECK(ig_imatrix_load("/nonexistent/imatrix.gguf", &im) == IG_ERR_IO);
}
