/* The vision encoder on the CPU kernels: the tiled attention against a
 * plain softmax in double on random data (every ISA this CPU runs), and
 * towers of synthetic mmproj files (src/model/synth_mmproj.c) with Q8_0
 * matrices against the same tower in F16. */
#include "test.h"

#include "backend/cpu/matmul.h"
#include "core/util.h"
#include "model/synth_mmproj.h"
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }
static float unif(uint64_t *s) { return (float)(lcg(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }

/* o = softmax(q kᵀ / sqrt(hd)) v per head, in double. */
static void naive_attention(const float *q, const float *k, const float *v, double *o, int n, int D, int nh) {
    const int hd = D / nh;
    double *s = calloc((size_t)n, sizeof *s);
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < n; t++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[t * D + h * hd + i] * k[j * D + h * hd + i];
                s[j] = d / sqrt((double)hd);
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int j = 0; j < n; j++) a += s[j] * v[j * D + h * hd + i];
                o[t * D + h * hd + i] = a / sum;
            }
        }
    free(s);
}

IG_TEST(vision_attention_tiled_vs_naive) {
    /* n not a multiple of the tile; head sizes of the fixture (16), of the
     * released towers (72), and one that is not a multiple of 8 (20: the
     * block kernel); scores spread enough (x3) for a peaked softmax */
    const int cases[][3] = {{37, 48, 3}, {70, 144, 2}, {16, 72, 1}, {21, 40, 2}};
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c][0], D = cases[c][1], nh = cases[c][2];
        const size_t nd = (size_t)n * D;
        float *q = calloc(nd, 4), *k = calloc(nd, 4), *v = calloc(nd, 4), *o = calloc(nd, 4);
        double *want = calloc(nd, sizeof *want);
        REQUIRE(q && k && v && o && want);
        uint64_t seed = 7 + c;
        for (size_t i = 0; i < nd; i++) q[i] = 3 * unif(&seed), k[i] = unif(&seed), v[i] = unif(&seed);
        naive_attention(q, k, v, want, n, D, nh);
        for (int a = 0; a < n_isa; a++) {
            memset(o, 0xff, nd * 4); /* NaN: every output must be written */
            REQUIRE_OK(ig_vision_attention(isas[a], q, k, v, o, n, D, nh));
            double err = 0, ref = 0;
            for (size_t i = 0; i < nd; i++) {
                err = fmax(err, fabs(o[i] - want[i]));
                ref = fmax(ref, fabs(want[i]));
            }
            printf("  n %d width %d heads %d %s: max abs err %.3g (max |o| %.3g)\n", n, D, nh, isas[a]->name, err, ref);
            CHECK(err <= 2e-6 * fmax(ref, 1.0));
        }
        free(q);
        free(k);
        free(v);
        free(o);
        free(want);
    }
    CHECK_STATUS(ig_vision_attention(NULL, NULL, NULL, NULL, NULL, 4, 48, 5), IG_ERR_INVALID_ARG);
}

/* A small tower: 56x56 images, 4x4 patches pooled to 2x2 tokens; n_ff 80
 * is not a whole number of Q8_0 blocks, so ffn_down stays F16. */
static bool write_tower(ig_dtype type, int n_ff, char *path) {
    ig_synth_mmproj_params p = ig_synth_mmproj_released(64);
    p.image_size = 56;
    p.pool = 2;
    p.width = 64;
    p.n_ff = n_ff;
    p.n_layer = 2;
    p.n_head = 4;
    p.type = type;
    p.seed = 3;
    int fd = mkstemp(path);
    if (fd < 0) return false;
    FILE *f = fdopen(fd, "wb");
    if (!f) return false;
    ig_status st = ig_synth_mmproj_write(&p, f);
    return fclose(f) == 0 && st == IG_OK;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / fmax(den, 1e-30));
}

IG_TEST(vision_mmproj_q8_0) {
    char pf[] = "/tmp/ignis-mmproj-f16-XXXXXX", pq[] = "/tmp/ignis-mmproj-q8-XXXXXX";
    REQUIRE(write_tower(IG_TYPE_F16, 80, pf));
    REQUIRE(write_tower(IG_TYPE_Q8_0, 80, pq));
    ig_vision *vf = NULL, *vq = NULL;
    REQUIRE_OK(ig_vision_from_mmproj(pf, 64, &vf));
    REQUIRE_OK(ig_vision_from_mmproj(pq, 64, &vq));
    CHECK_EQ_INT(vq->n_tokens, 4);
    CHECK_EQ_INT(vq->layers[0].wq->type, IG_TYPE_Q8_0);
    CHECK_EQ_INT(vq->layers[1].fc1->type, IG_TYPE_Q8_0);
    CHECK_EQ_INT(vq->layers[0].fc2->type, IG_TYPE_F16); /* rows of 80 */
    CHECK_EQ_INT(vf->layers[0].wq->type, IG_TYPE_F16);
    CHECK(ig_vision_weight_bytes(vq) < ig_vision_weight_bytes(vf));
    CHECK(ig_vision_act_bytes(vq, 2) > (size_t)16 * 64 * 4 * 5);
    const size_t np = 3 * 56 * 56, nt = 16 * 64, ne = 4 * 64;
    float *px = calloc(np, 4), *tf = calloc(nt, 4), *tq = calloc(nt, 4), *ef = calloc(ne, 4), *eq = calloc(ne, 4);
    float *e1 = calloc(ne, 4);
    REQUIRE(px && tf && tq && ef && eq && e1);
    uint64_t seed = 1;
    for (size_t i = 0; i < np; i++) px[i] = unif(&seed);
    REQUIRE_OK(ig_vision_encode(vf, px, 2, tf, ef));
    REQUIRE_OK(ig_vision_encode(vq, px, 2, tq, eq));
    REQUIRE_OK(ig_vision_encode(vq, px, 1, NULL, e1));
    const double rt = rel_err(tq, tf, nt), re = rel_err(eq, ef, ne), r1 = rel_err(e1, eq, ne);
    printf("  q8_0 vs f16 tower: tower rel err %.3g, embeddings rel err %.3g; 1 vs 2 threads %.3g\n", rt, re, r1);
    /* Q8_0 weights and activations: about 1% per matmul; noise would be ~1 */
    CHECK(rt > 0 && rt < 0.05);
    CHECK(re > 0 && re < 0.05);
    CHECK(r1 == 0); /* the split of the work does not change a result */
    ig_vision_free(vf);
    ig_vision_free(vq);
    unlink(pf);
    unlink(pq);
    free(px);
    free(tf);
    free(tq);
    free(ef);
    free(eq);
    free(e1);
}
