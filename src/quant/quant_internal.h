/* Bit unpacking shared by the reference dequantizers and the integer dots
 * (src/quant only). Blocks are the structs of quant.h, already copied out of
 * the row. */
#ifndef IG_QUANT_INTERNAL_H
#define IG_QUANT_INTERNAL_H

#include "quant/quant.h"

/* The 32 fifth bits of a Q5_0 block (bit i belongs to element i). */
static inline uint32_t ig_q5_0_qh(const ig_block_q5_0 *b) {
    return (uint32_t)b->qh[0] | ((uint32_t)b->qh[1] << 8) | ((uint32_t)b->qh[2] << 16) |
           ((uint32_t)b->qh[3] << 24);
}

/* The 32 fifth bits of a Q5_1 block. */
static inline uint32_t ig_q5_1_qh(const ig_block_q5_1 *b) {
    return (uint32_t)b->qh[0] | ((uint32_t)b->qh[1] << 8) | ((uint32_t)b->qh[2] << 16) |
           ((uint32_t)b->qh[3] << 24);
}

/* 0..31 value of every element of a Q5_1 block. */
static inline void ig_q5_1_unpack(const ig_block_q5_1 *b, uint8_t q[IG_QK]) {
    const uint32_t qh = ig_q5_1_qh(b);
    for (int j = 0; j < IG_QK / 2; j++) {
        q[j] = (uint8_t)((b->qs[j] & 0xfu) | (((qh >> j) & 1u) << 4));
        q[j + IG_QK / 2] = (uint8_t)((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
}

/* 0..15 value of every element of a Q4_K block. */
static inline void ig_q4_K_unpack(const ig_block_q4_K *b, uint8_t q[IG_QK_K]) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = b->qs[32 * c + l] & 0xfu;
            q[64 * c + 32 + l] = b->qs[32 * c + l] >> 4;
        }
}

/* 0..31 value of every element of a Q5_K block. */
static inline void ig_q5_K_unpack(const ig_block_q5_K *b, uint8_t q[IG_QK_K]) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const int e0 = 64 * c + l, e1 = e0 + 32;
            q[e0] = (uint8_t)((b->qs[32 * c + l] & 0xfu) | (((b->qh[l] >> (e0 / 32)) & 1u) << 4));
            q[e1] = (uint8_t)((b->qs[32 * c + l] >> 4) | (((b->qh[l] >> (e1 / 32)) & 1u) << 4));
        }
}

/* 0..63 value of element e (0..255) of a Q6_K block. */
static inline int ig_q6_K_get(const ig_block_q6_K *b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b->ql[64 * h + 32 * (k & 1) + l];
    const int lo = k < 2 ? (lb & 0xf) : (lb >> 4);
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

#endif
