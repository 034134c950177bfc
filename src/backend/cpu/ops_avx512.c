/* AVX-512 elementwise kernels. */
#include "backend/cpu/ops_simd.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE __mmask16 tail16(int64_t n, int64_t i) {
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

/* e^x, ~1 ulp; overflows to inf above ~88.7, tends to 0 below -87.3. */
static ALWAYS_INLINE __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(z)) = x / (1 + e^(-2z)), z = k (x + 0.044715 x^3) */
void ig_geglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 k2 = _mm512_set1_ps(-2.0f * 0.7978845608028654f), c = _mm512_set1_ps(0.044715f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(n, i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 x2 = _mm512_mul_ps(x, x);
        const __m512 t = _mm512_mul_ps(k2, _mm512_fmadd_ps(_mm512_mul_ps(c, x2), x, x));
        const __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(t));
        const __m512 y = _mm512_div_ps(_mm512_mul_ps(x, _mm512_maskz_loadu_ps(m, u + i)), den);
        _mm512_mask_storeu_ps(g + i, m, y);
    }
}

void ig_rmsnorm_avx512(const float *x, float *y, const float *w, int d, float eps, bool add) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < d; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail16(d, i), x + i);
        const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
    }
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 scale = _mm512_set1_ps((float)(1.0 / sqrt(ss / d + eps)));
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = tail16(d, i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale), _mm512_maskz_loadu_ps(m, w + i));
        if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), v);
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void ig_to_f16_avx512(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(n, i);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(y + i, m, h);
    }
}
