/* Matrix products of the CPU backend: y[t, r] = w[r] · x[t].
 *
 * Quantized weights are multiplied with activations quantized once per
 * matmul (per group of matmuls sharing an input): to Q8_0 (32-element blocks)
 * for Q8_0/Q4_0/Q5_0 weights and to Q8_K (256-element blocks) for the
 * K-quants, with exact integer block sums as in the references of quant.h.
 * Float weights (F32/F16/BF16) use the f32 activations directly.
 *
 * Two layouts of quantized activations:
 *  - rows (few tokens, matrix-vector kernels): one record per token;
 *  - groups (many tokens, blocked matrix-matrix kernels): 16 tokens side by
 *    side, 4 consecutive elements of one token per 32-bit lane, stored as
 *    unsigned bytes x + 128, so that one VNNI/maddubs step multiplies 4
 *    elements of one weight row with 16 tokens at once.
 * Each ISA (scalar, AVX2, AVX-512, NEON) provides the quantizer and the
 * kernels; the layouts are shared, so that their results can be compared. */
#ifndef IG_CPU_MATMUL_H
#define IG_CPU_MATMUL_H

#include "backend/cpu/attention.h"
#include "quant/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ig_act_kind {
    IG_ACT_F32,  /* float weights: no quantization */
    IG_ACT_Q8_0, /* Q8_0, Q4_0, Q5_0, Q5_1 */
    IG_ACT_Q8_K, /* Q4_K, Q5_K, Q6_K */
} ig_act_kind;

ig_act_kind ig_mm_act_kind(ig_dtype type);
/* True for the weight types the kernels handle. */
bool ig_mm_type_supported(ig_dtype type);

#define IG_MM_GROUP 16 /* tokens per group of the grouped layout */

static inline size_t ig_mm_align64(size_t v) { return (v + 63) & ~(size_t)63; }

/* ---- Rows layout: token t at act + t * stride ------------------------------
 * Q8_0: int8 q[k] | float d[k/32] | int32 s[k/32] (s = sum of the block's q;
 *       d is the block scale rounded to f16, as Q8_0 stores it).
 * Q8_K: int8 q[k] | float d[k/256] | int16 bsums[k/16] | uint8 t[k/32]
 *       (ig_block_q8_K's fields: x = d * t * q, bsums include t). */
static inline size_t ig_mm_row_stride(ig_act_kind kind, int64_t k) {
    if (kind == IG_ACT_Q8_0) return ig_mm_align64((size_t)k + 8 * (size_t)(k / IG_QK));
    if (kind == IG_ACT_Q8_K)
        return ig_mm_align64((size_t)k + 4 * (size_t)(k / IG_QK_K) + 2 * (size_t)(k / 16) + (size_t)(k / 32));
    return 0;
}

/* ---- Groups layout: group g (tokens 16g .. 16g+15) at act + g * stride -----
 * u8 u[k/4][16][4]: u[(i/4)*64 + 4*t + i%4] = q of element i of token t, +128
 *                   (padding tokens past n are 0);
 * float d[nblocks][16]: the token's scale of each block (0 for padding);
 * Q8_K only: int32 bs[k/256][4][16]: lane t of pair p = (int16)B[2p] |
 *            (int16)B[2p+1] << 16 where B[j] is the sum of the token's q over
 *            the 32 elements of sub-block j times its t (for Q4_K/Q5_K mins);
 *            int32 tt[k/32][16]: lane t = t | t << 16, the token's multiplier
 *            of each 32 elements (1 for padding). */
static inline size_t ig_mm_group_stride(ig_act_kind kind, int64_t k) {
    if (kind == IG_ACT_Q8_0) return 16 * (size_t)k + 64 * (size_t)(k / IG_QK);
    if (kind == IG_ACT_Q8_K) return 16 * (size_t)k + 320 * (size_t)(k / IG_QK_K) + 64 * (size_t)(k / 32);
    return 0;
}

/* Bytes of quantized activations for n tokens of k elements. */
static inline size_t ig_mm_act_bytes(ig_act_kind kind, int64_t k, int n, bool grouped) {
    if (grouped)
        return ig_mm_group_stride(kind, k) * (size_t)((n + IG_MM_GROUP - 1) / IG_MM_GROUP);
    return ig_mm_row_stride(kind, k) * (size_t)n;
}

/* One matrix product over the whole batch; kernels compute rows [r0, r1). */
typedef struct ig_mm {
    ig_dtype type;
    const uint8_t *w; /* row r at w + r * row_bytes */
    size_t row_bytes;
    int64_t k;        /* elements per row (ne[0]) */
    int n;            /* tokens */
    const float *x;   /* f32 activations [n, ldx] (float weight types) */
    int64_t ldx;
    const uint8_t *act; /* quantized activations (quantized types), 64-byte aligned */
    size_t act_stride;  /* row or group stride */
    bool grouped;
    float *y; /* y[t * ldy + r] */
    int64_t ldy;
} ig_mm;

/* The kernels of one instruction set (matmul, and attention). */
typedef struct ig_mm_isa {
    const char *name;
    /* Batches of at least this many tokens use the groups layout and the
     * matrix-matrix kernels (INT32_MAX: never). */
    int gemm_min;
    /* Quantizes one token (k elements, a whole number of blocks) into its
     * rows-layout record. Same bytes on every ISA. */
    void (*quant_row)(ig_act_kind kind, const float *x, int64_t k, uint8_t *dst);
    /* Rows [r0, r1) of m for every token. scratch: scratch_bytes(m->k),
     * 64-byte aligned. */
    void (*matmul)(const ig_mm *m, int64_t r0, int64_t r1, void *scratch);
    size_t (*scratch_bytes)(int64_t k);
    /* One attention block (attention.h). */
    void (*attn)(const ig_attn_block *a);
    /* Elementwise ops: g[i] = gelu_tanh(g[i]) * u[i]; y = x / rms(x) * w
     * (y += ... when add), the sum of squares in double as the reference
     * rmsnorm; IEEE half conversion, round to nearest even. */
    void (*geglu)(float *g, const float *u, int64_t n);
    void (*rmsnorm)(const float *x, float *y, const float *w, int d, float eps, bool add);
    void (*to_f16)(const float *x, uint16_t *y, int64_t n);
} ig_mm_isa;

/* The portable elementwise ops (ops.c). */
void ig_geglu_scalar(float *g, const float *u, int64_t n);
void ig_rmsnorm_scalar(const float *x, float *y, const float *w, int d, float eps, bool add);
void ig_to_f16_scalar(const float *x, uint16_t *y, int64_t n);

extern const ig_mm_isa ig_mm_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const ig_mm_isa ig_mm_isa_avx2;
extern const ig_mm_isa ig_mm_isa_avx512;
#endif
#if defined(__aarch64__)
extern const ig_mm_isa ig_mm_isa_neon;
#endif

/* ISAs this CPU can run, best last (scalar first). Returns the count. */
int ig_mm_isa_available(const ig_mm_isa **out, int cap);
/* The best available ISA (scalar on aarch64 for now: NEON only on
 * request), or the one named by $IGNIS_CPU (scalar, avx2, avx512, neon)
 * when it is available. */
const ig_mm_isa *ig_mm_isa_select(void);

/* Quantizes tokens [t0, t1) of x (row stride ldx) into act (layout per
 * `grouped`, stride = row or group stride). tmp: a row stride of scratch
 * (grouped only). Tokens of a group may be split between callers; padding
 * lanes of the last group are written by whoever writes its last token. */
void ig_mm_quantize(const ig_mm_isa *isa, ig_act_kind kind, const float *x, int64_t ldx,
                    int64_t k, int n, int t0, int t1, uint8_t *act, size_t stride, bool grouped,
                    uint8_t *tmp);

/* Single-threaded convenience for tests and tools: quantizes (into act,
 * ig_mm_act_bytes() of it) and multiplies rows [r0, r1). */
void ig_mm_run(const ig_mm_isa *isa, ig_dtype type, const void *w, int64_t k, int64_t r0,
               int64_t r1, const float *x, int n, float *y, int64_t ldy, uint8_t *act,
               void *scratch, uint8_t *tmp);
bool ig_mm_use_groups(const ig_mm_isa *isa, ig_dtype type, int n);

/* Rows [r0, r1) of m with isa's kernels, or with the portable kernel for the
 * types that only it handles (Q5_1: rows layout only, see ig_mm_use_groups).
 * scratch: ig_mm_scratch_bytes(isa, m->type, m->k). */
void ig_mm_matmul(const ig_mm_isa *isa, const ig_mm *m, int64_t r0, int64_t r1, void *scratch);
size_t ig_mm_scratch_bytes(const ig_mm_isa *isa, ig_dtype type, int64_t k);

#endif
