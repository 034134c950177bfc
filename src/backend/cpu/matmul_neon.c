/* NEON (AArch64) kernels: matrix-vector products of the float types and of
 * the 32-element-block types with exact int32 block sums (vmull_s8 +
 * vpadalq_s16, no dot-product extension needed) followed by the reference's
 * float steps, so these match the scalar kernels bit for bit. K-quants,
 * attention and the elementwise ops use the portable kernels. Built only on
 * aarch64; not exercised on the x86 development machines. */
#include "backend/cpu/matmul_impl.h"

#include <arm_neon.h>
#include <limits.h>

static inline float f16_to_f32(const uint8_t *p) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(ig_ld16(p)))), 0);
}

/* 4 weights from element i of a float-type row, as f32. */
static inline float32x4_t load_w4(ig_dtype t, const uint8_t *row, int64_t i) {
    if (t == IG_TYPE_F32) return vreinterpretq_f32_u8(vld1q_u8(row + 4 * i));
    const uint16x4_t h = vreinterpret_u16_u8(vld1_u8(row + 2 * i));
    if (t == IG_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(h), 16));
}

static float float_dot(ig_dtype t, const uint8_t *row, const float *x, int64_t k) {
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        a0 = vfmaq_f32(a0, load_w4(t, row, i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, load_w4(t, row, i + 4), vld1q_f32(x + i + 4));
    }
    float s = vaddvq_f32(vaddq_f32(a0, a1));
    if (i < k) {
        float w[8];
        ig_dequantize_row(t, row + (t == IG_TYPE_F32 ? 4 : 2) * i, w, k - i);
        for (int64_t j = i; j < k; j++) s += w[j - i] * x[j];
    }
    return s;
}

/* Centred int8 of a 32-element block, as two 16-lane vectors. */
static inline void dec32(ig_dtype t, const uint8_t *blk, int8x16_t *w0, int8x16_t *w1) {
    if (t == IG_TYPE_Q8_0) {
        *w0 = vreinterpretq_s8_u8(vld1q_u8(blk + 2));
        *w1 = vreinterpretq_s8_u8(vld1q_u8(blk + 18));
        return;
    }
    const uint8x16_t qs = vld1q_u8(blk + (t == IG_TYPE_Q4_0 ? 2 : 6));
    uint8x16_t lo = vandq_u8(qs, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(qs, 4);
    if (t == IG_TYPE_Q4_0) {
        *w0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8));
        *w1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8));
        return;
    }
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t sel = vld1q_u8(bits), b16 = vdupq_n_u8(16);
    const uint8x16_t h0 = vcombine_u8(vdup_n_u8(blk[2]), vdup_n_u8(blk[3]));
    const uint8x16_t h1 = vcombine_u8(vdup_n_u8(blk[4]), vdup_n_u8(blk[5]));
    lo = vorrq_u8(lo, vandq_u8(vtstq_u8(h0, sel), b16));
    hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h1, sel), b16));
    *w0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(16));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(16));
}

static inline int32_t idot32(int8x16_t w0, int8x16_t w1, const int8_t *x) {
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int32x4_t acc = vdupq_n_s32(0);
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    acc = vpadalq_s16(acc, vmull_high_s8(w0, x0));
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    acc = vpadalq_s16(acc, vmull_high_s8(w1, x1));
    return vaddvq_s32(acc);
}

static void matmul_neon(const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    const ig_act_kind kind = ig_mm_act_kind(m->type);
    if (kind == IG_ACT_Q8_K || m->grouped) {
        ig_mm_matmul_scalar(m, r0, r1, scratch);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = m->w + (size_t)r * m->row_bytes;
        for (int t = 0; t < m->n; t++) {
            float sum = 0.0f;
            if (kind == IG_ACT_F32) {
                sum = float_dot(m->type, row, m->x + (int64_t)t * m->ldx, m->k);
            } else {
                const uint8_t *a = m->act + (size_t)t * m->act_stride;
                const int8_t *xq = ig_act_q(a);
                const float *xd = ig_act_d(a, m->k);
                const size_t bb = ig_blk_bytes(m->type);
                for (int64_t b = 0; b < m->k / IG_QK; b++) {
                    const uint8_t *blk = row + (size_t)b * bb;
                    int8x16_t w0, w1;
                    dec32(m->type, blk, &w0, &w1);
                    const int32_t isum = idot32(w0, w1, xq + IG_QK * b);
                    const float dd = f16_to_f32(blk) * xd[b];
                    sum += (float)isum * dd;
                }
            }
            m->y[(int64_t)t * m->ldy + r] = sum;
        }
    }
}

const ig_mm_isa ig_mm_isa_neon = {
    .name = "neon",
    .gemm_min = INT_MAX,
    .quant_row = ig_mm_quant_row_scalar,
    .matmul = matmul_neon,
    .scratch_bytes = ig_mm_scratch_scalar,
    .attn = ig_attn_block_scalar,
    .geglu = ig_geglu_scalar,
    .rmsnorm = ig_rmsnorm_scalar,
    .to_f16 = ig_to_f16_scalar,
};
