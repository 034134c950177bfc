/* Activation quantization to Q8_K and the scalar integer dot products of a
 * quantized weight row with a quantized activation: the references that the
 * SIMD kernels are checked against. The formulas are spelled out in quant.h;
 * each block's sums are exact int32, the block results are summed in f32. */
#include "quant/quant.h"
#include "quant/quant_internal.h"

#include <math.h>
#include <string.h>

/* Round to nearest, ties to even (ggml's nearest_int), for |v| <= 2^22. */
static int nearest_even(float v) {
    return (int)rintf(v);
}

/* ggml's quantize_row_q8_K_ref per 256 values (iscale = -127/max, where
 * max is the first value of largest magnitude amax; q = nearest_even(iscale
 * * x) clipped to [-128, 127]), refined per 32 values: t = 1 + the number of
 * k in 1..7 with a > amax * k/8 (a the run's largest magnitude), and the run
 * is quantized with iscale * (8/t) instead. The run of max keeps ggml's q
 * (t = 8); d = (1/iscale) / 8. Only IEEE multiplications of the inputs and
 * of the constants below, so every backend can form the same bytes. An
 * all-zero (or non-finite) block gets d = 0, q = 0, t = 1. */
const float ig_q8k_mul[IG_Q8K_T + 1] = {0.0f, 8.0f, 4.0f, 8.0f / 3.0f, 2.0f, 8.0f / 5.0f, 8.0f / 6.0f, 8.0f / 7.0f, 1.0f};

void ig_quantize_row_q8_K(const float *x, ig_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / IG_QK_K; i++, x += IG_QK_K) {
        ig_block_q8_K *b = &y[i];
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < IG_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        memset(b->bsums, 0, sizeof b->bsums);
        memset(b->t, 1, sizeof b->t);
        if (!(amax > 0.0f) || !isfinite(amax)) {
            b->d = 0.0f;
            memset(b->qs, 0, sizeof b->qs);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int r = 0; r < IG_QK_K / 32; r++) {
            const float *xr = x + 32 * r;
            float a = 0.0f;
            for (int j = 0; j < 32; j++) a = fmaxf(a, fabsf(xr[j]));
            const int t = ig_q8k_run_t(a, amax);
            const float s = iscale * ig_q8k_mul[t];
            b->t[r] = (uint8_t)t;
            for (int j = 0; j < 32; j++) {
                const float v = s * xr[j]; /* within [-127, 127] */
                const int q = nearest_even(fmaxf(-128.0f, fminf(127.0f, v)));
                b->qs[32 * r + j] = (int8_t)q;
                b->bsums[2 * r + j / 16] = (int16_t)(b->bsums[2 * r + j / 16] + t * q);
            }
        }
        b->d = (1.0f / iscale) * 0.125f;
    }
}

void ig_quantize_row_q8_0_act(const float *x, void *y, int64_t n) {
    uint8_t *dst = y;
    for (int64_t i = 0; i < n / IG_QK; i++, x += IG_QK) {
        ig_block_q8_0 b;
        float amax = 0.0f;
        for (int j = 0; j < IG_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b.d = ig_f32_to_f16(amax / 127.0f);
        for (int j = 0; j < IG_QK; j++) {
            const float v = x[j] * id;
            /* NaN and v <= -127 give -127, v >= 127 gives 127 */
            b.qs[j] = (int8_t)(!(v > -127.0f) ? -127 : v >= 127.0f ? 127 : nearest_even(v));
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

void ig_dequantize_row_q8_K(const ig_block_q8_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / IG_QK_K; i++, y += IG_QK_K)
        for (int j = 0; j < IG_QK_K; j++) y[j] = x[i].d * (float)(x[i].t[j / 32] * x[i].qs[j]);
}

/* ---- 32-element blocks × Q8_0 -------------------------------------------------- */

/* Unpacks block i of a 32-element weight row to centred integers. */
typedef void (*unpack32_fn)(const uint8_t *row, int64_t i, float *d, int q[IG_QK]);

static void unpack_q8_0(const uint8_t *row, int64_t i, float *d, int q[IG_QK]) {
    ig_block_q8_0 b;
    memcpy(&b, row + i * (int64_t)sizeof b, sizeof b);
    *d = ig_f16_to_f32(b.d);
    for (int j = 0; j < IG_QK; j++) q[j] = b.qs[j];
}

static void unpack_q4_0(const uint8_t *row, int64_t i, float *d, int q[IG_QK]) {
    ig_block_q4_0 b;
    memcpy(&b, row + i * (int64_t)sizeof b, sizeof b);
    *d = ig_f16_to_f32(b.d);
    for (int j = 0; j < IG_QK / 2; j++) {
        q[j] = (b.qs[j] & 0xf) - 8;
        q[j + IG_QK / 2] = (b.qs[j] >> 4) - 8;
    }
}

static void unpack_q5_0(const uint8_t *row, int64_t i, float *d, int q[IG_QK]) {
    ig_block_q5_0 b;
    memcpy(&b, row + i * (int64_t)sizeof b, sizeof b);
    *d = ig_f16_to_f32(b.d);
    const uint32_t qh = ig_q5_0_qh(&b);
    for (int j = 0; j < IG_QK / 2; j++) {
        q[j] = (int)((b.qs[j] & 0xfu) | (((qh >> j) & 1u) << 4)) - 16;
        q[j + IG_QK / 2] = (int)((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    }
}

static float dot_blocks_q8_0(unpack32_fn unpack, const void *row, const void *xq, int64_t n) {
    const uint8_t *x = xq;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / IG_QK; i++) {
        float dw;
        int q[IG_QK];
        unpack(row, i, &dw, q);
        ig_block_q8_0 a;
        memcpy(&a, x + i * (int64_t)sizeof a, sizeof a);
        int32_t isum = 0;
        for (int j = 0; j < IG_QK; j++) isum += q[j] * a.qs[j];
        const float dd = dw * ig_f16_to_f32(a.d);
        sum += (float)isum * dd;
    }
    return sum;
}

float ig_vec_dot_q8_0_q8_0(const void *row, const void *xq, int64_t n) {
    return dot_blocks_q8_0(unpack_q8_0, row, xq, n);
}

float ig_vec_dot_q4_0_q8_0(const void *row, const void *xq, int64_t n) {
    return dot_blocks_q8_0(unpack_q4_0, row, xq, n);
}

float ig_vec_dot_q5_0_q8_0(const void *row, const void *xq, int64_t n) {
    return dot_blocks_q8_0(unpack_q5_0, row, xq, n);
}

float ig_vec_dot_q5_1_q8_0(const void *row, const void *xq, int64_t n) {
    const uint8_t *w = row, *x = xq;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / IG_QK; i++) {
        ig_block_q5_1 b;
        ig_block_q8_0 a;
        memcpy(&b, w + i * (int64_t)sizeof b, sizeof b);
        memcpy(&a, x + i * (int64_t)sizeof a, sizeof a);
        uint8_t q[IG_QK];
        ig_q5_1_unpack(&b, q);
        int32_t isum = 0, sx = 0;
        for (int j = 0; j < IG_QK; j++) {
            isum += q[j] * a.qs[j];
            sx += a.qs[j];
        }
        const float dx = ig_f16_to_f32(a.d);
        const float dd = ig_f16_to_f32(b.d) * dx;
        const float hi = (float)isum * dd;
        const float lo = ig_f16_to_f32(b.m) * (dx * (float)sx);
        sum += hi + lo;
    }
    return sum;
}

/* ---- K-quants × Q8_K ---------------------------------------------------------- */

/* Q4_K / Q5_K: q[] are the 0..15 / 0..31 values of one super-block. */
static float dot_k_asym(const uint8_t scales[IG_K_SCALE_SIZE], float dw, float dminw,
                        const uint8_t q[IG_QK_K], const ig_block_q8_K *a) {
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ig_q4_K_scale_min(scales, j, &sc, &m);
        int32_t s = 0;
        for (int l = 0; l < 32; l++) s += q[32 * j + l] * a->qs[32 * j + l];
        isum += (int32_t)sc * a->t[j] * s;
        imin += (int32_t)m * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    const float d = dw * a->d;
    const float dmin = dminw * a->d;
    const float hi = d * (float)isum;
    const float lo = dmin * (float)imin;
    return hi - lo;
}

float ig_vec_dot_q4_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n) {
    const uint8_t *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / IG_QK_K; i++) {
        ig_block_q4_K b;
        memcpy(&b, w + i * (int64_t)sizeof b, sizeof b);
        uint8_t q[IG_QK_K];
        ig_q4_K_unpack(&b, q);
        sum += dot_k_asym(b.scales, ig_f16_to_f32(b.d), ig_f16_to_f32(b.dmin), q, &xq[i]);
    }
    return sum;
}

float ig_vec_dot_q5_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n) {
    const uint8_t *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / IG_QK_K; i++) {
        ig_block_q5_K b;
        memcpy(&b, w + i * (int64_t)sizeof b, sizeof b);
        uint8_t q[IG_QK_K];
        ig_q5_K_unpack(&b, q);
        sum += dot_k_asym(b.scales, ig_f16_to_f32(b.d), ig_f16_to_f32(b.dmin), q, &xq[i]);
    }
    return sum;
}

float ig_vec_dot_q6_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n) {
    const uint8_t *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / IG_QK_K; i++) {
        ig_block_q6_K b;
        memcpy(&b, w + i * (int64_t)sizeof b, sizeof b);
        const ig_block_q8_K *a = &xq[i];
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++)
                s += (ig_q6_K_get(&b, 16 * j + l) - 32) * a->qs[16 * j + l];
            isum += (int32_t)b.scales[j] * a->t[j / 2] * s;
        }
        const float d = ig_f16_to_f32(b.d) * a->d;
        sum += d * (float)isum;
    }
    return sum;
}
