/* CPU attention blocks (backend/cpu/attention.h) of every ISA against a
 * double-precision softmax(q.k * scale) . v over each row's own key range,
 * on a ring-buffer cache (positions wrap), f16 and f32, head sizes that are
 * not multiples of the vector width, sliding windows, logit softcap.
 * The kernels accumulate in f32 with an online softmax; their error is a
 * few f32 roundings of each term: bound 1e-5 of max |v| (+ the f16 of the
 * cache is applied to the reference too, so it is exact there). */
#include "test.h"

#include "backend/cpu/matmul.h"
#include "core/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 4503599627370496.0 - 1.0);
}

typedef struct attn_case {
    int hd, hdv, rows, cap;
    bool f16;
    float softcap;
    int first_pos, window;
} attn_case;

static double run_case(const ig_mm_isa *isa, const attn_case *c) {
    const int hd = c->hd, hdv = c->hdv, R = c->rows, cap = c->cap;
    /* The cache: kvs distinct values per position, stored at j % cap. */
    const size_t kst = (size_t)hd + 3, vst = (size_t)hdv + 5; /* row strides wider than a head */
    float *kf = malloc(sizeof(float) * kst * (size_t)cap), *vf = malloc(sizeof(float) * vst * (size_t)cap);
    uint16_t *kh = malloc(2 * kst * (size_t)cap), *vh = malloc(2 * vst * (size_t)cap);
    for (size_t i = 0; i < kst * (size_t)cap; i++) {
        kh[i] = ig_f32_to_f16(frand() * 2.0f);
        kf[i] = c->f16 ? ig_f16_to_f32(kh[i]) : frand() * 2.0f;
    }
    for (size_t i = 0; i < vst * (size_t)cap; i++) {
        vh[i] = ig_f32_to_f16(frand());
        vf[i] = c->f16 ? ig_f16_to_f32(vh[i]) : frand();
    }
    ig_attn_block a;
    memset(&a, 0, sizeof a);
    a.n_rows = R;
    float *q = malloc(sizeof(float) * (size_t)R * (size_t)hd), *o = malloc(sizeof(float) * (size_t)R * (size_t)hdv);
    for (int i = 0; i < R * hd; i++) q[i] = frand() * 3.0f;
    a.jlo = INT32_MAX;
    a.jhi = -1;
    for (int r = 0; r < R; r++) {
        const int p = c->first_pos + r / 2; /* two query heads per token */
        a.q[r] = q + r * hd;
        a.o[r] = o + r * hdv;
        a.hi[r] = p;
        a.lo[r] = c->window ? IG_MAX(0, p - c->window + 1) : 0;
        a.jlo = IG_MIN(a.jlo, a.lo[r]);
        a.jhi = IG_MAX(a.jhi, a.hi[r]);
    }
    if (a.jhi - a.jlo + 1 > cap) return INFINITY; /* the case must fit the ring */
    a.k = c->f16 ? (const void *)kh : (const void *)kf;
    a.v = c->f16 ? (const void *)vh : (const void *)vf;
    a.kstride = kst;
    a.vstride = vst;
    a.cap = cap;
    a.f16 = c->f16;
    a.hd = hd;
    a.hdv = hdv;
    a.scale = 1.0f / sqrtf((float)hd);
    a.softcap = c->softcap;
    a.scratch = ig_aligned_alloc(64, ig_mm_align64(sizeof(float) * ig_attn_scratch_floats(hd, hdv)));
    isa->attn(&a);
    double worst = 0;
    double *s = malloc(sizeof(double) * (size_t)(a.jhi + 1));
    for (int r = 0; r < R; r++) {
        double mx = -INFINITY, sum = 0;
        for (int j = a.lo[r]; j <= a.hi[r]; j++) {
            const float *k = kf + (size_t)(j % cap) * kst;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[r * hd + i] * k[i];
            d *= a.scale;
            if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
            s[j] = d;
            if (d > mx) mx = d;
        }
        for (int j = a.lo[r]; j <= a.hi[r]; j++) sum += (s[j] = exp(s[j] - mx));
        for (int i = 0; i < hdv; i++) {
            double acc = 0;
            for (int j = a.lo[r]; j <= a.hi[r]; j++) acc += s[j] * vf[(size_t)(j % cap) * vst + i];
            const double err = fabs(acc / sum - o[r * hdv + i]);
            if (err > worst) worst = err;
        }
    }
    free(s);
    ig_aligned_free(a.scratch);
    free(q);
    free(o);
    free(kf);
    free(vf);
    free(kh);
    free(vh);
    return worst;
}

IG_TEST(matmul_attention_blocks) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    const attn_case cases[] = {
        {32, 32, 1, 40, true, 0, 0, 0},       {32, 32, 4, 64, true, 0, 17, 0},
        {256, 256, 8, 600, true, 0, 530, 512}, /* window, ring wraps */
        {40, 24, 7, 80, false, 0, 90, 33},    {16, 48, 16, 50, true, 0, 3, 0},
        {64, 64, 3, 70, false, 50.0f, 60, 0}, /* softcap */
        {256, 256, 16, 1040, true, 0, 1500, 1024},
        {8, 8, 2, 9, false, 0, 20, 8},        {33, 17, 5, 300, true, 0, 257, 0},
    };
    for (int i = 0; i < n_isa; i++) {
        double worst = 0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const double e = run_case(isas[i], &cases[c]);
            if (!(e <= 1e-5))
                ig_test_fail_at(__FILE__, __LINE__, "%s case %zu: max error %.3g", isas[i]->name, c, e);
            if (e > worst) worst = e;
        }
        printf("    %-6s attention worst abs error %.3g\n", isas[i]->name, worst);
    }
}
