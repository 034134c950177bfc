/* AVX2 elementwise kernels. */
#include "backend/cpu/ops_simd.h"
#include "backend/cpu/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void geglu8(float *g, const float *u) {
    const __m256 k2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    const __m256 x = _mm256_loadu_ps(g);
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 t = _mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, x2), x, x));
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), ig_exp8(t));
    _mm256_storeu_ps(g, _mm256_div_ps(_mm256_mul_ps(x, _mm256_loadu_ps(u)), den));
}

void ig_geglu_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) geglu8(g + i, u + i);
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(tu, u + i, sizeof(float) * (size_t)(n - i));
        geglu8(tg, tu);
        memcpy(g + i, tg, sizeof(float) * (size_t)(n - i));
    }
}

void ig_rmsnorm_avx2(const float *x, float *y, const float *w, int d, float eps, bool add) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= d; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(a, a, s0);
        s1 = _mm256_fmadd_pd(b, b, s1);
    }
    double buf[4];
    _mm256_storeu_pd(buf, _mm256_add_pd(s0, s1));
    double ss = (buf[0] + buf[1]) + (buf[2] + buf[3]);
    for (; i < d; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / d + eps));
    const __m256 sv = _mm256_set1_ps(scale);
    i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i));
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(y + i), v);
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < d; i++) y[i] = (add ? y[i] : 0.0f) + x[i] * scale * w[i];
}

void ig_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) {
        const __m128i h = _mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        y[i] = (uint16_t)_mm_extract_epi16(h, 0);
    }
}
