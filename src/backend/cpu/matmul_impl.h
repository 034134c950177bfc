/* Helpers shared by the matmul kernels of every ISA (src/backend/cpu only):
 * scalar block unpacking into the integers the reference dots use, and the
 * accessors of the activation layouts of matmul.h. */
#ifndef IG_CPU_MATMUL_IMPL_H
#define IG_CPU_MATMUL_IMPL_H

#include "backend/cpu/matmul.h"

#include <string.h>

/* ---- Rows layout accessors ------------------------------------------------ */

static inline const int8_t *ig_act_q(const uint8_t *row) { return (const int8_t *)row; }
static inline const float *ig_act_d(const uint8_t *row, int64_t k) {
    return (const float *)(const void *)(row + k);
}
/* Q8_0: block sums; Q8_K: int16 sums of 16. */
static inline const int32_t *ig_act_s(const uint8_t *row, int64_t k) {
    return (const int32_t *)(const void *)(row + k + 4 * (k / IG_QK));
}
static inline const int16_t *ig_act_bsums(const uint8_t *row, int64_t k) {
    return (const int16_t *)(const void *)(row + k + 4 * (k / IG_QK_K));
}
/* Q8_K: the multiplier of each 32 elements. */
static inline const uint8_t *ig_act_t(const uint8_t *row, int64_t k) {
    return row + k + 4 * (k / IG_QK_K) + 2 * (k / 16);
}

/* ---- Groups layout accessors ---------------------------------------------- */

static inline const float *ig_grp_d(const uint8_t *grp, int64_t k) {
    return (const float *)(const void *)(grp + 16 * k);
}
static inline const int32_t *ig_grp_bs(const uint8_t *grp, int64_t k) {
    return (const int32_t *)(const void *)(grp + 16 * k + 64 * (k / IG_QK_K));
}
/* Q8_K: tt[k/32][16]. */
static inline const int32_t *ig_grp_t(const uint8_t *grp, int64_t k) {
    return (const int32_t *)(const void *)(grp + 16 * k + 320 * (k / IG_QK_K));
}

/* ---- Scalar block unpacking ----------------------------------------------- */

static inline uint16_t ig_ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t ig_ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Centred integers of one 32-element block (q - 8, q - 16, or q). */
static inline void ig_unpack_q8_0(const uint8_t *b, int8_t q[IG_QK]) {
    memcpy(q, b + 2, IG_QK);
}

static inline void ig_unpack_q4_0(const uint8_t *b, int8_t q[IG_QK]) {
    for (int j = 0; j < IG_QK / 2; j++) {
        q[j] = (int8_t)((b[2 + j] & 0xf) - 8);
        q[j + IG_QK / 2] = (int8_t)((b[2 + j] >> 4) - 8);
    }
}

static inline void ig_unpack_q5_0(const uint8_t *b, int8_t q[IG_QK]) {
    const uint32_t qh = ig_ld32(b + 2);
    for (int j = 0; j < IG_QK / 2; j++) {
        q[j] = (int8_t)((int)((b[6 + j] & 0xfu) | (((qh >> j) & 1u) << 4)) - 16);
        q[j + IG_QK / 2] = (int8_t)((int)((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
}

/* Unpacks block b of a 32-element type into centred integers. */
static inline void ig_unpack32(ig_dtype type, const uint8_t *blk, int8_t q[IG_QK]) {
    if (type == IG_TYPE_Q8_0) ig_unpack_q8_0(blk, q);
    else if (type == IG_TYPE_Q4_0) ig_unpack_q4_0(blk, q);
    else ig_unpack_q5_0(blk, q);
}

/* Q4_K / Q5_K: 0..15 / 0..31 values, 6-bit scales and mins. */
static inline void ig_unpack_q4_K(const uint8_t *b, uint8_t q[IG_QK_K]) {
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = qs[32 * c + l] & 0xfu;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
}

static inline void ig_unpack_q5_K(const uint8_t *b, uint8_t q[IG_QK_K]) {
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const int e0 = 64 * c + l, e1 = e0 + 32;
            q[e0] = (uint8_t)((qs[32 * c + l] & 0xfu) | (((qh[l] >> (e0 / 32)) & 1u) << 4));
            q[e1] = (uint8_t)((qs[32 * c + l] >> 4) | (((qh[l] >> (e1 / 32)) & 1u) << 4));
        }
}

static inline void ig_unpack_k_scales(const uint8_t *b, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) ig_q4_K_scale_min(b + 4, j, &sc[j], &m[j]);
}

/* Q6_K: q - 32 of every element; scales at b + 192, d at b + 208. */
static inline void ig_unpack_q6_K(const uint8_t *b, int8_t q[IG_QK_K]) {
    const uint8_t *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lb = ql[64 * h + 32 * (k & 1) + l];
                const int lo = k < 2 ? (lb & 0xf) : (lb >> 4);
                const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
                q[128 * h + 32 * k + l] = (int8_t)((lo | (hi << 4)) - 32);
            }
}

/* Block geometry of the supported types. */
static inline int64_t ig_blk_elems(ig_dtype t) {
    return t == IG_TYPE_Q4_K || t == IG_TYPE_Q5_K || t == IG_TYPE_Q6_K ? IG_QK_K : IG_QK;
}
static inline size_t ig_blk_bytes(ig_dtype t) {
    switch (t) {
    case IG_TYPE_Q8_0: return 34;
    case IG_TYPE_Q4_0: return 18;
    case IG_TYPE_Q5_0: return 22;
    case IG_TYPE_Q5_1: return 24;
    case IG_TYPE_Q4_K: return 144;
    case IG_TYPE_Q5_K: return 176;
    case IG_TYPE_Q6_K: return 210;
    default: return 0;
    }
}

/* Exact int32 sums of q[32b..32b+31] * xq[...] for nb blocks (q: 0..31),
 * for the Q5_1 kernel of matmul.c (q5_1_avx2.c). */
void ig_q5_1_isums_avx2(const uint8_t *q, const int8_t *xq, int64_t nb, int32_t *isum);

/* The scalar ISA's pieces, for ISAs that fall back on some of them. */
void ig_mm_quant_row_scalar(ig_act_kind kind, const float *x, int64_t k, uint8_t *dst);
void ig_mm_matmul_scalar(const ig_mm *m, int64_t r0, int64_t r1, void *scratch);
size_t ig_mm_scratch_scalar(int64_t k);

/* Generic writer of the groups layout from a rows-layout record of token t. */
void ig_mm_scatter_group(ig_act_kind kind, int64_t k, const uint8_t *row, int lane, uint8_t *grp);
void ig_mm_pad_group(ig_act_kind kind, int64_t k, int lane0, uint8_t *grp);

#endif
