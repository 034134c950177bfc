/* The K-quant quantizers of `ignis quantize` against blocks made by ggml's
 * reference quantizers (tests/fixtures/kquant/golden.bin, written by
 * tests/tools/kquant_golden.c), and llama-quantize's per-tensor type rules
 * of the K-quant mixes. */
#include "test.h"

#include "model/gguf.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_ROW (256 * 4 + 144 + 176 + 210)

static unsigned char *read_golden(uint32_t *n_rows) {
    char path[4096];
    snprintf(path, sizeof path, "%s/kquant/golden.bin", ig_test_fixtures());
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char hdr[8];
    unsigned char *buf = NULL;
    if (fread(hdr, 1, 8, f) == 8 && !memcmp(hdr, "IGKQ", 4)) {
        memcpy(n_rows, hdr + 4, 4);
        if (*n_rows > 0 && *n_rows < 1000) {
            const size_t sz = (size_t)*n_rows * GOLDEN_ROW;
            buf = malloc(sz);
            if (buf && fread(buf, 1, sz, f) != sz) {
                free(buf);
                buf = NULL;
            }
        }
    }
    fclose(f);
    return buf;
}

static int count_diff(const unsigned char *a, const unsigned char *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

IG_TEST(quant_k_golden_blocks) {
    uint32_t n = 0;
    unsigned char *g = read_golden(&n);
    REQUIRE(g != NULL);
    CHECK_EQ_INT(n, 20);
    static const ig_dtype types[3] = {IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};
    static const size_t off[3] = {1024, 1024 + 144, 1024 + 144 + 176};
    static const size_t len[3] = {144, 176, 210};
    int nonzero_rows = 0;
    for (uint32_t r = 0; r < n; r++) {
        const unsigned char *row = g + (size_t)r * GOLDEN_ROW;
        float x[256];
        memcpy(x, row, sizeof x);
        for (int t = 0; t < 3; t++) {
            unsigned char q[256];
            memset(q, 0xa5, sizeof q);
            ig_quantize_row_ggml(types[t], x, q, 256);
            const int d = count_diff(q, row + off[t], len[t]);
            if (d) ig_test_fail_at(__FILE__, __LINE__, "row %u %s: %d bytes differ", r,
                                   ig_dtype_name(types[t]), d);
            CHECK_EQ_INT(q[len[t]], 0xa5); /* nothing written past the block */
        }
        float amax = 0;
        for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[i]));
        nonzero_rows += amax > 0;
    }
    CHECK_EQ_INT(nonzero_rows, 19); /* the fixture is not all zeros */
    /* A row of several blocks is those blocks, in order. */
    float x2[512];
    memcpy(x2, g + 3 * GOLDEN_ROW, 1024);
    memcpy(x2 + 256, g + 7 * GOLDEN_ROW, 1024);
    for (int t = 0; t < 3; t++) {
        unsigned char q[2 * 210];
        ig_quantize_row_ggml(types[t], x2, q, 512);
        CHECK_EQ_INT(count_diff(q, g + 3 * GOLDEN_ROW + off[t], len[t]), 0);
        CHECK_EQ_INT(count_diff(q + len[t], g + 7 * GOLDEN_ROW + off[t], len[t]), 0);
    }
    /* The dequantized golden Q6_K block of the weight-like row is close. */
    float y[256];
    ig_dequantize_row(IG_TYPE_Q6_K, g + 3 * GOLDEN_ROW + off[2], y, 256);
    const float *x3 = (const float *)(void *)(g + 3 * GOLDEN_ROW);
    float x3c[256];
    memcpy(x3c, x3, sizeof x3c);
    double err = 0;
    for (int i = 0; i < 256; i++) err = fmax(err, fabs((double)y[i] - x3c[i]));
    CHECK(err > 0 && err < 0.004);
    /* Other types go through ig_quantize_row. */
    unsigned char a[34], b[34];
    ig_quantize_row_ggml(IG_TYPE_Q8_0, x2, a, 32);
    ig_quantize_row(IG_TYPE_Q8_0, x2, b, 32);
    CHECK_EQ_INT(count_diff(a, b, 34), 0);
    free(g);
}

/* A Gemma-3-270M-like table (18 layers, hidden 640, tied embeddings), in a
 * shuffled order: the layer counting must follow llama.cpp's order. */
typedef struct fake_model {
    gguf_file g;
    gguf_kv kv[2];
    ig_tensor t[4 + 18 * 4];
    char names[4 + 18 * 4][48];
} fake_model;

static void add_tensor(fake_model *m, size_t i, const char *name, int n_dims, int64_t ne0,
                       int64_t ne1) {
    snprintf(m->names[i], sizeof m->names[i], "%s", name);
    ig_tensor *t = &m->t[i];
    memset(t, 0, sizeof *t);
    t->name = m->names[i];
    t->type = IG_TYPE_F32;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
}

static void make_fake(fake_model *m, int64_t hidden, bool with_output) {
    memset(m, 0, sizeof *m);
    static char k0[] = "general.architecture", k1[] = "gemma3.block_count";
    m->kv[0].key = k0;
    m->kv[0].type = GGUF_TYPE_STRING;
    m->kv[0].v.str.ptr = "gemma3";
    m->kv[0].v.str.len = 6;
    m->kv[1].key = k1;
    m->kv[1].type = GGUF_TYPE_UINT32;
    m->kv[1].v.u64 = 18;
    m->g.kv = m->kv;
    m->g.n_kv = 2;
    size_t n = 0;
    add_tensor(m, n++, "token_embd.weight", 2, hidden, 1000);
    add_tensor(m, n++, "output_norm.weight", 1, hidden, 1);
    add_tensor(m, n++, with_output ? "output.weight" : "rope_freqs.weight", with_output ? 2 : 1, hidden,
               with_output ? 1000 : 1);
    add_tensor(m, n++, "blk.0.attn_norm.weight", 1, hidden, 1);
    for (int l = 17; l >= 0; l--) { /* reverse order: blk.9 after blk.10 by name */
        char name[48];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        add_tensor(m, n++, name, 2, 2048, hidden);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        add_tensor(m, n++, name, 2, hidden, 256);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        add_tensor(m, n++, name, 2, hidden, 1024);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", l);
        add_tensor(m, n++, name, 2, 1024, hidden);
    }
    m->g.tensors.items = m->t;
    m->g.tensors.count = n;
}

static int layer_more_bits(int l) { /* llama.cpp's use_more_bits for 18 layers */
    return l < 2 || l >= 15 || (l - 2) % 3 == 2;
}

IG_TEST(quant_k_mix_rules) {
    fake_model *m = malloc(sizeof *m);
    REQUIRE(m != NULL);
    ig_dtype out[4 + 18 * 4];
    char err[256];
    make_fake(m, 640, false);
    REQUIRE(ig_quant_mix_types(&m->g, IG_FTYPE_Q4_K_M, false, out, err, sizeof err));
    CHECK_EQ_INT(out[0], IG_TYPE_Q8_0); /* tied embedding, 640 not whole 256-blocks */
    CHECK_EQ_INT(out[1], IG_TYPE_F32);
    CHECK_EQ_INT(out[2], IG_TYPE_F32); /* one dimension */
    CHECK_EQ_INT(out[3], IG_TYPE_F32);
    int n_q6 = 0;
    for (int k = 0; k < 18; k++) {
        const int l = 17 - k;
        const size_t b = 4 + 4 * (size_t)k;
        const int more = layer_more_bits(l);
        n_q6 += more;
        CHECK_EQ_INT(out[b], more ? IG_TYPE_Q6_K : IG_TYPE_Q4_K); /* ffn_down, 2048 wide */
        CHECK_EQ_INT(out[b + 1], more ? IG_TYPE_Q8_0 : IG_TYPE_Q5_0); /* attn_v: fallbacks */
        CHECK_EQ_INT(out[b + 2], IG_TYPE_Q5_0);                       /* attn_q */
        CHECK_EQ_INT(out[b + 3], IG_TYPE_Q4_K);                       /* attn_output */
    }
    CHECK_EQ_INT(n_q6, 9);
    /* --pure: the K type everywhere it fits, its fallback elsewhere. */
    REQUIRE(ig_quant_mix_types(&m->g, IG_FTYPE_Q6_K, true, out, err, sizeof err));
    CHECK_EQ_INT(out[0], IG_TYPE_Q8_0);
    CHECK_EQ_INT(out[4], IG_TYPE_Q6_K);
    CHECK_EQ_INT(out[5], IG_TYPE_Q8_0);
    CHECK_EQ_INT(out[7], IG_TYPE_Q6_K);
    /* Q5_K_M: Q5_K's fallback is Q5_1. */
    REQUIRE(ig_quant_mix_types(&m->g, IG_FTYPE_Q5_K_M, false, out, err, sizeof err));
    CHECK_EQ_INT(out[0], IG_TYPE_Q8_0);
    for (int k = 0; k < 18; k++) {
        const int more = layer_more_bits(17 - k);
        const size_t b = 4 + 4 * (size_t)k;
        CHECK_EQ_INT(out[b], more ? IG_TYPE_Q6_K : IG_TYPE_Q5_K);
        CHECK_EQ_INT(out[b + 1], more ? IG_TYPE_Q8_0 : IG_TYPE_Q5_1);
        CHECK_EQ_INT(out[b + 2], IG_TYPE_Q5_1);
        CHECK_EQ_INT(out[b + 3], IG_TYPE_Q5_K);
    }
    CHECK(!ig_quant_mix_types(&m->g, 2, false, out, err, sizeof err));

    /* Hidden 1024 with an output matrix: output Q6_K, embedding keeps the
     * default type, Q5_K_M works and bumps the same layers to Q6_K. */
    make_fake(m, 1024, true);
    REQUIRE(ig_quant_mix_types(&m->g, IG_FTYPE_Q5_K_M, false, out, err, sizeof err));
    CHECK_EQ_INT(out[0], IG_TYPE_Q5_K);
    CHECK_EQ_INT(out[2], IG_TYPE_Q6_K);
    for (int k = 0; k < 18; k++) {
        const int more = layer_more_bits(17 - k);
        const size_t b = 4 + 4 * (size_t)k;
        CHECK_EQ_INT(out[b], more ? IG_TYPE_Q6_K : IG_TYPE_Q5_K);
        CHECK_EQ_INT(out[b + 1], more ? IG_TYPE_Q6_K : IG_TYPE_Q5_K);
        CHECK_EQ_INT(out[b + 2], IG_TYPE_Q5_K);
    }
    REQUIRE(ig_quant_mix_types(&m->g, IG_FTYPE_Q6_K, false, out, err, sizeof err));
    for (size_t i = 0; i < m->g.tensors.count; i++)
        CHECK_EQ_INT(out[i], m->t[i].n_dims >= 2 ? IG_TYPE_Q6_K : IG_TYPE_F32);
    free(m);
}
