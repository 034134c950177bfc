/* Weight types: the type table, and the scalar reference dequantizers,
 * quantizers and f32 dot product. Every block is copied out of the row with
 * memcpy before it is read (rows are only 2-byte aligned).
 *
 * The dequantizers perform the float32 operations of ggml's
 * dequantize_row_* and gguf-py's numpy code in the same order. Note for
 * optimised kernels: every product there is exact in float32 (an fp16 scale
 * has 11 significant bits, sub-block scales <= 8 bits, quants <= 6 bits), so
 * only the last operation rounds: d*q, (d*sc)*q and d*(sc*q) all agree, and
 * (d*sc)*q - dmin*m may be fused into one FMA without changing a bit. */
#include "quant/quant.h"
#include "quant/quant_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

_Static_assert(sizeof(ig_block_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(ig_block_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(ig_block_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(ig_block_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(ig_block_q4_K) == 144, "Q4_K block");
_Static_assert(sizeof(ig_block_q5_K) == 176, "Q5_K block");
_Static_assert(sizeof(ig_block_q6_K) == 210, "Q6_K block");
_Static_assert(sizeof(ig_block_q8_K) == 300, "Q8_K block");

/* ---- Small helpers -------------------------------------------------------- */

/* (int)trunc(v) clamped to [lo, hi]; NaN gives lo. Never converts an
 * out-of-range float to int. */
static int trunc_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(v) (halves away from zero) clamped to [lo, hi]; NaN gives lo. */
static int round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)roundf(v);
}

/* ceilf(v) clamped to [lo, hi]; NaN gives lo. */
static int ceil_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)ceilf(v);
}

/* The smallest finite non-negative fp16 >= v (v >= 0), saturating at 65504,
 * so that a super-block scale never comes out smaller than needed. */
static uint16_t f16_ceil(float v) {
    if (!(v > 0.0f)) return 0;
    uint16_t h = ig_f32_to_f16(v);
    if (h >= 0x7c00u) return 0x7bffu;
    if (ig_f16_to_f32(h) < v) h++;
    return h >= 0x7c00u ? (uint16_t)0x7bffu : h;
}

/* Index of the element of largest magnitude (the first on ties), as ggml's
 * reference quantizers pick it. */
static int argmax_abs(const float *x, int n) {
    float amax = 0.0f;
    int imax = 0;
    for (int i = 0; i < n; i++) {
        if (amax < fabsf(x[i])) {
            amax = fabsf(x[i]);
            imax = i;
        }
    }
    return imax;
}

void ig_q4_K_scale_min(const uint8_t scales[IG_K_SCALE_SIZE], int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = scales[j] & 63u;
        *m = scales[j + 4] & 63u;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xfu) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Inverse of ig_q4_K_scale_min for all 8 sub-blocks (values < 64). */
static void q4_K_pack_scale_min(const uint8_t sc[8], const uint8_t m[8],
                                uint8_t scales[IG_K_SCALE_SIZE]) {
    memset(scales, 0, IG_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = sc[j];
            scales[j + 4] = m[j];
        } else {
            scales[j + 4] = (uint8_t)((sc[j] & 0xfu) | ((m[j] & 0xfu) << 4));
            scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            scales[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* ---- F32, F16, BF16 ------------------------------------------------------- */

static void dequant_f32(const uint8_t *src, float *dst, int64_t nb) {
    memcpy(dst, src, (size_t)nb * sizeof(float));
}

static void quant_f32(const float *src, uint8_t *dst, int64_t nb) {
    memcpy(dst, src, (size_t)nb * sizeof(float));
}

static void dequant_f16(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = ig_f16_to_f32(h);
    }
}

static void quant_f16(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h = ig_f32_to_f16(src[i]);
        memcpy(dst + 2 * i, &h, sizeof h);
    }
}

static void dequant_bf16(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = ig_bf16_to_f32(h);
    }
}

static void quant_bf16(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h = ig_f32_to_bf16(src[i]);
        memcpy(dst + 2 * i, &h, sizeof h);
    }
}

/* ---- Q8_0 ------------------------------------------------------------------ */

static void dequant_q8_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK) {
        ig_block_q8_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        const float d = ig_f16_to_f32(b.d);
        for (int j = 0; j < IG_QK; j++) dst[j] = (float)b.qs[j] * d;
    }
}

/* ggml's quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)). */
static void quant_q8_0(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK) {
        ig_block_q8_0 b;
        float amax = 0.0f;
        for (int j = 0; j < IG_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = ig_f32_to_f16(d);
        for (int j = 0; j < IG_QK; j++) b.qs[j] = (int8_t)round_clamp(src[j] * id, -127, 127);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- Q4_0 ------------------------------------------------------------------ */

static void dequant_q4_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK) {
        ig_block_q4_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        const float d = ig_f16_to_f32(b.d);
        for (int j = 0; j < IG_QK / 2; j++) {
            dst[j] = d * (float)((b.qs[j] & 0xf) - 8);
            dst[j + IG_QK / 2] = d * (float)((b.qs[j] >> 4) - 8);
        }
    }
}

/* ggml's quantize_row_q4_0_ref: d = max / -8 where max is the signed value of
 * largest magnitude, q = min(15, trunc(x * (1/d) + 8.5)). */
static void quant_q4_0(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK) {
        ig_block_q4_0 b;
        const float max = src[argmax_abs(src, IG_QK)];
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = ig_f32_to_f16(d);
        for (int j = 0; j < IG_QK / 2; j++) {
            int q0 = trunc_clamp(src[j] * id + 8.5f, 0, 15);
            int q1 = trunc_clamp(src[j + IG_QK / 2] * id + 8.5f, 0, 15);
            b.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- Q5_0 ------------------------------------------------------------------ */

static void dequant_q5_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK) {
        ig_block_q5_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        const float d = ig_f16_to_f32(b.d);
        const uint32_t qh = ig_q5_0_qh(&b);
        for (int j = 0; j < IG_QK / 2; j++) {
            int q0 = (int)((b.qs[j] & 0xfu) | (((qh >> j) & 1u) << 4));
            int q1 = (int)((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            dst[j] = d * (float)(q0 - 16);
            dst[j + IG_QK / 2] = d * (float)(q1 - 16);
        }
    }
}

/* ggml's quantize_row_q5_0_ref: d = max / -16, q = min(31, trunc(x/d + 16.5)). */
static void quant_q5_0(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK) {
        ig_block_q5_0 b;
        const float max = src[argmax_abs(src, IG_QK)];
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = ig_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < IG_QK / 2; j++) {
            int q0 = trunc_clamp(src[j] * id + 16.5f, 0, 31);
            int q1 = trunc_clamp(src[j + IG_QK / 2] * id + 16.5f, 0, 31);
            b.qs[j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b.qh[k] = (uint8_t)(qh >> (8 * k));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- Q5_1 ------------------------------------------------------------------ */

/* x = q*d + m: q*d is exact in float32 (5 x 11 bits), so only the add rounds. */
static void dequant_q5_1(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK) {
        ig_block_q5_1 b;
        uint8_t q[IG_QK];
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        ig_q5_1_unpack(&b, q);
        const float d = ig_f16_to_f32(b.d), m = ig_f16_to_f32(b.m);
        for (int j = 0; j < IG_QK; j++) {
            const float v = (float)q[j] * d;
            dst[j] = v + m;
        }
    }
}

/* ggml's quantize_row_q5_1_ref: d = (max - min) / 31, q = trunc((x - min) *
 * (1/d) + 0.5) (min itself kept in f32 for q, stored as f16). */
static void quant_q5_1(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK) {
        ig_block_q5_1 b;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < IG_QK; j++) {
            if (src[j] < min) min = src[j];
            if (src[j] > max) max = src[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = ig_f32_to_f16(d);
        b.m = ig_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < IG_QK / 2; j++) {
            const float x0 = (src[j] - min) * id, x1 = (src[j + IG_QK / 2] - min) * id;
            const int q0 = trunc_clamp(x0 + 0.5f, 0, 31), q1 = trunc_clamp(x1 + 0.5f, 0, 31);
            b.qs[j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b.qh[k] = (uint8_t)(qh >> (8 * k));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- Q4_K and Q5_K ---------------------------------------------------------- */

/* x = (d*sc[j]) * q - (dmin*m[j]), sub-block by sub-block of 32. */
static void dequant_k_asym(uint16_t d16, uint16_t dmin16, const uint8_t scales[IG_K_SCALE_SIZE],
                           const uint8_t q[IG_QK_K], float *dst) {
    const float d = ig_f16_to_f32(d16), dmin = ig_f16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ig_q4_K_scale_min(scales, j, &sc, &m);
        const float dsc = d * (float)sc;
        const float dm = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const float v = dsc * (float)q[32 * j + l];
            dst[32 * j + l] = v - dm;
        }
    }
}

static void dequant_q4_K(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK_K) {
        ig_block_q4_K b;
        uint8_t q[IG_QK_K];
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        ig_q4_K_unpack(&b, q);
        dequant_k_asym(b.d, b.dmin, b.scales, q, dst);
    }
}

static void dequant_q5_K(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK_K) {
        ig_block_q5_K b;
        uint8_t q[IG_QK_K];
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        ig_q5_K_unpack(&b, q);
        dequant_k_asym(b.d, b.dmin, b.scales, q, dst);
    }
}

/* A straightforward quantizer for the asymmetric K formats (nmax = 15 or 31
 * levels above the sub-block minimum). Per sub-block j of 32: the offset
 * -min(0, min x) is rounded *up* to a multiple m[j] of dmin, and the step
 * d*sc[j] is rounded *up* so that the top of the sub-block stays in range;
 * dmin and d are the fp16 values (rounded up) that make the largest m and sc
 * 63. Each value then rounds to the nearest level, so its error is at most
 * half a step, and a step is at most range_j/nmax + 2*R/(63*nmax) for a
 * super-block range R. No iterative search as in llama.cpp. */
static void quant_k_asym(const float *x, int nmax, ig_block_q4_K *hdr, uint8_t q[IG_QK_K]) {
    float negmin[8], top[8], need[8];
    float max_negmin = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        negmin[j] = -lo;
        top[j] = hi;
        max_negmin = fmaxf(max_negmin, negmin[j]);
    }
    hdr->dmin = f16_ceil(max_negmin / 63.0f);
    const float dmin = ig_f16_to_f32(hdr->dmin);
    uint8_t sc[8], m[8];
    float offs[8], max_need = 0.0f;
    for (int j = 0; j < 8; j++) {
        m[j] = (uint8_t)(dmin > 0.0f ? ceil_clamp(negmin[j] / dmin, 0, 63) : 0);
        offs[j] = dmin * (float)m[j];
        need[j] = fmaxf(0.0f, (top[j] + offs[j]) / (float)nmax);
        max_need = fmaxf(max_need, need[j]);
    }
    hdr->d = f16_ceil(max_need / 63.0f);
    const float d = ig_f16_to_f32(hdr->d);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0.0f ? ceil_clamp(need[j] / d, 0, 63) : 0);
        const float dsc = d * (float)sc[j];
        for (int l = 0; l < 32; l++) {
            const float v = x[32 * j + l] + offs[j];
            q[32 * j + l] = (uint8_t)(dsc > 0.0f ? round_clamp(v / dsc, 0, nmax) : 0);
        }
    }
    q4_K_pack_scale_min(sc, m, hdr->scales);
}

static void quant_q4_K(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK_K) {
        ig_block_q4_K b;
        uint8_t q[IG_QK_K];
        quant_k_asym(src, 15, &b, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void quant_q5_K(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK_K) {
        ig_block_q4_K hdr;
        ig_block_q5_K b;
        uint8_t q[IG_QK_K];
        quant_k_asym(src, 31, &hdr, q);
        b.d = hdr.d;
        b.dmin = hdr.dmin;
        memcpy(b.scales, hdr.scales, sizeof b.scales);
        memset(b.qh, 0, sizeof b.qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b.qs[32 * c + l] =
                    (uint8_t)((q[64 * c + l] & 0xfu) | ((q[64 * c + 32 + l] & 0xfu) << 4));
        for (int e = 0; e < IG_QK_K; e++) b.qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- Q6_K ------------------------------------------------------------------ */

static void dequant_q6_K(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, dst += IG_QK_K) {
        ig_block_q6_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        const float d = ig_f16_to_f32(b.d);
        for (int e = 0; e < IG_QK_K; e++) {
            const float dsc = d * (float)b.scales[e / 16];
            dst[e] = dsc * (float)(ig_q6_K_get(&b, e) - 32);
        }
    }
}

/* Symmetric: per sub-block of 16 the step is rounded *up* from amax/31 (so
 * q stays in -31..31 and nothing clips), as an int8 multiple of an fp16 d
 * (rounded up) that makes the largest scale 127. Error <= half a step. */
static void quant_q6_K(const float *src, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, src += IG_QK_K) {
        ig_block_q6_K b;
        float need[16], max_need = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(src[16 * j + l]));
            need[j] = amax / 31.0f;
            max_need = fmaxf(max_need, need[j]);
        }
        b.d = f16_ceil(max_need / 127.0f);
        const float d = ig_f16_to_f32(b.d);
        memset(b.ql, 0, sizeof b.ql);
        memset(b.qh, 0, sizeof b.qh);
        for (int j = 0; j < 16; j++) {
            b.scales[j] = (int8_t)(d > 0.0f ? ceil_clamp(need[j] / d, 0, 127) : 0);
            const float dsc = d * (float)b.scales[j];
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l;
                const int q = (dsc > 0.0f ? round_clamp(src[e] / dsc, -32, 31) : 0) + 32;
                const int h = e / 128, k = (e % 128) / 32, ll = e % 32;
                b.ql[64 * h + 32 * (k & 1) + ll] |= (uint8_t)((q & 0xf) << (k < 2 ? 0 : 4));
                b.qh[32 * h + ll] |= (uint8_t)((q >> 4) << (2 * k));
            }
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* ---- The type table ------------------------------------------------------- */

/* nb is a number of blocks. */
typedef void (*dequant_fn)(const uint8_t *src, float *dst, int64_t nb);
typedef void (*quant_fn)(const float *src, uint8_t *dst, int64_t nb);

typedef struct type_traits {
    const char *name;
    size_t block_elems;
    size_t block_bytes;
    dequant_fn dequant;
    quant_fn quant;
} type_traits;

static const type_traits g_traits[] = {
    [IG_TYPE_F32] = {"F32", 1, 4, dequant_f32, quant_f32},
    [IG_TYPE_F16] = {"F16", 1, 2, dequant_f16, quant_f16},
    [IG_TYPE_Q4_0] = {"Q4_0", IG_QK, sizeof(ig_block_q4_0), dequant_q4_0, quant_q4_0},
    [IG_TYPE_Q5_0] = {"Q5_0", IG_QK, sizeof(ig_block_q5_0), dequant_q5_0, quant_q5_0},
    [IG_TYPE_Q5_1] = {"Q5_1", IG_QK, sizeof(ig_block_q5_1), dequant_q5_1, quant_q5_1},
    [IG_TYPE_Q8_0] = {"Q8_0", IG_QK, sizeof(ig_block_q8_0), dequant_q8_0, quant_q8_0},
    [IG_TYPE_Q4_K] = {"Q4_K", IG_QK_K, sizeof(ig_block_q4_K), dequant_q4_K, quant_q4_K},
    [IG_TYPE_Q5_K] = {"Q5_K", IG_QK_K, sizeof(ig_block_q5_K), dequant_q5_K, quant_q5_K},
    [IG_TYPE_Q6_K] = {"Q6_K", IG_QK_K, sizeof(ig_block_q6_K), dequant_q6_K, quant_q6_K},
    [IG_TYPE_BF16] = {"BF16", 1, 2, dequant_bf16, quant_bf16},
};

static const type_traits *traits(uint32_t type) {
    if (type >= sizeof g_traits / sizeof g_traits[0] || !g_traits[type].name) return NULL;
    return &g_traits[type];
}

bool ig_dtype_known(uint32_t type) { return traits(type) != NULL; }

const char *ig_dtype_name(ig_dtype type) {
    const type_traits *t = traits((uint32_t)type);
    return t ? t->name : "unknown";
}

size_t ig_dtype_block_elems(ig_dtype type) {
    const type_traits *t = traits((uint32_t)type);
    return t ? t->block_elems : 0;
}

size_t ig_dtype_block_bytes(ig_dtype type) {
    const type_traits *t = traits((uint32_t)type);
    return t ? t->block_bytes : 0;
}

bool ig_dtype_row_bytes(ig_dtype type, int64_t n, size_t *out) {
    const type_traits *t = traits((uint32_t)type);
    if (!t || n < 0 || (uint64_t)n % t->block_elems != 0) return false;
    uint64_t nb = (uint64_t)n / t->block_elems;
    if (nb > SIZE_MAX) return false;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)nb, t->block_bytes, &bytes)) return false;
    *out = bytes;
    return true;
}

/* ---- Row entry points -------------------------------------------------------- */

void ig_dequantize_row(ig_dtype type, const void *src, float *dst, int64_t n) {
    const type_traits *t = traits((uint32_t)type);
    if (n <= 0) return;
    if (!t) {
        memset(dst, 0, (size_t)n * sizeof *dst);
        return;
    }
    t->dequant(src, dst, n / (int64_t)t->block_elems);
}

void ig_quantize_row(ig_dtype type, const float *src, void *dst, int64_t n) {
    const type_traits *t = traits((uint32_t)type);
    if (!t || n <= 0) return;
    t->quant(src, dst, n / (int64_t)t->block_elems);
}

float ig_vec_dot_ref(ig_dtype type, const void *row, const float *x, int64_t n) {
    enum { CHUNK = IG_QK_K }; /* a multiple of every block size */
    const type_traits *t = traits((uint32_t)type);
    if (!t || n <= 0) return 0.0f;
    const int64_t be = (int64_t)t->block_elems;
    const int64_t total = n / be * be;
    const uint8_t *src = row;
    float buf[CHUNK];
    double acc = 0.0;
    for (int64_t done = 0; done < total; done += CHUNK) {
        const int64_t c = total - done < CHUNK ? total - done : CHUNK;
        t->dequant(src + done / be * (int64_t)t->block_bytes, buf, c / be);
        for (int64_t i = 0; i < c; i++) acc += (double)buf[i] * (double)x[done + i];
    }
    return (float)acc;
}
