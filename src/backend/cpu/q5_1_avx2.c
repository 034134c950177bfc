/* The integer part of the Q5_1 matmul (matmul.c, scalar_q5_1) with AVX2:
 * the exact int32 sum of each 32-element block's products, so the result is
 * the portable kernel's bit for bit (the float part stays there). Used by the
 * AVX2 and AVX-512 ISAs. */
#include "backend/cpu/matmul_impl.h"

#include <immintrin.h>

void ig_q5_1_isums_avx2(const uint8_t *q, const int8_t *xq, int64_t nb, int32_t *isum) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * b));
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * b));
        /* u8 (<= 31) x s8: pair sums <= 2*31*128, no i16 saturation */
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        isum[b] = _mm_cvtsi128_si32(s);
    }
}
