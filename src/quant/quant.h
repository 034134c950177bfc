/* Weight element types (ids are ggml's) and the scalar reference kernels:
 * dequantize a row, and dot a quantized row with an f32 vector. These are
 * the ground truth that every optimised kernel is tested against. */
#ifndef IG_QUANT_H
#define IG_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ig_dtype {
    IG_TYPE_F32 = 0,
    IG_TYPE_F16 = 1,
    IG_TYPE_Q4_0 = 2,
    IG_TYPE_Q5_0 = 6,
    IG_TYPE_Q5_1 = 7,
    IG_TYPE_Q8_0 = 8,
    IG_TYPE_Q4_K = 12,
    IG_TYPE_Q5_K = 13,
    IG_TYPE_Q6_K = 14,
    IG_TYPE_BF16 = 30,
} ig_dtype;

/* True for the ids above. */
bool ig_dtype_known(uint32_t type);
const char *ig_dtype_name(ig_dtype type);
/* Elements per block (1 for F32/F16/BF16, 32 or 256 for quants). */
size_t ig_dtype_block_elems(ig_dtype type);
/* Bytes per block. */
size_t ig_dtype_block_bytes(ig_dtype type);
/* Bytes of a row of n elements; false if n is not a whole number of blocks
 * or the size overflows. */
bool ig_dtype_row_bytes(ig_dtype type, int64_t n, size_t *out);

/* Scalar references. n must be a multiple of the block size (trailing
 * elements are ignored; an unknown type dequantizes to zeros and dots to 0).
 * ig_dequantize_row is bit-exact with ggml's dequantize_row_* and with
 * gguf-py's gguf.quants.dequantize: the same float32 operations in the same
 * order (d*sc, then *q, then - dmin*m; the products are exact in float32,
 * so only the final subtraction rounds and an FMA gives the same bits).
 * ig_vec_dot_ref dequantizes 256 elements at a time and accumulates in
 * double, so it equals the dot of the dequantized row with x to within one
 * final rounding to float. */
void ig_dequantize_row(ig_dtype type, const void *src, float *dst, int64_t n);
float ig_vec_dot_ref(ig_dtype type, const void *row, const float *x, int64_t n);

/* Quantize n floats into type (reference, round-to-nearest). Available for
 * F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; used by tests and
 * by `ignis synth`. F16, BF16, Q8_0, Q4_0, Q5_0 and Q5_1 are byte-exact with ggml's
 * quantize_row_*_ref (and gguf-py). The K-quants pick their scales directly
 * (rounded up, no iterative search as in llama.cpp), so every value is
 * within half a quantization step of its input. */
void ig_quantize_row(ig_dtype type, const float *src, void *dst, int64_t n);
/* The blocks llama-quantize writes without an importance matrix: for Q4_K,
 * Q5_K and Q6_K those of ggml's quantize_row_*_ref, bit for bit (its search
 * for the scales and mins, src/quant/quantize_k.c); for the other types
 * ig_quantize_row's, which are already ggml's. Used by `ignis quantize`. */
void ig_quantize_row_ggml(ig_dtype type, const float *src, void *dst, int64_t n);
/* The blocks llama-quantize writes with an importance matrix: qw holds one
 * weight per element of the row (n floats: the imatrix's mean square of
 * the matmul input in each column). Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K
 * take ggml's importance-weighted searches (quantize_row_*_impl), bit for
 * bit; Q8_0 and the float types ignore qw, as llama-quantize does. qw NULL
 * is ig_quantize_row_ggml. */
void ig_quantize_row_imatrix(ig_dtype type, const float *src, void *dst, int64_t n, const float *qw);

/* Half-precision conversions (IEEE binary16 and bfloat16), round to nearest
 * even. Widening is exact (subnormals, infinities, NaN payloads kept). A NaN
 * narrows to f16 as numpy does (payload truncated, kept non-zero, signaling
 * stays signaling) and to bf16 as ggml does (made quiet). */
float ig_f16_to_f32(uint16_t h);
uint16_t ig_f32_to_f16(float f);
float ig_bf16_to_f32(uint16_t h);
uint16_t ig_f32_to_bf16(float f);

/* ---- Block layouts ------------------------------------------------------
 * Byte-for-byte ggml's (ggml-common.h). Every fp16 field is an IEEE binary16
 * bit pattern. Rows in memory are packed arrays of these blocks and are only
 * guaranteed 2-byte aligned (34-, 18-, 22-, 210-byte blocks): the reference
 * code copies each block out with memcpy before reading it. */
#define IG_QK 32   /* elements per Q4_0 / Q5_0 / Q5_1 / Q8_0 block */
#define IG_QK_K 256 /* elements per K-quant super-block */
#define IG_K_SCALE_SIZE 12

/* x[i] = d * (q[i] - 8); q[j] is the low nibble of qs[j], q[j+16] the high. */
typedef struct ig_block_q4_0 {
    uint16_t d;
    uint8_t qs[IG_QK / 2];
} ig_block_q4_0;

/* x[i] = d * (q[i] - 16); the low 4 bits of q as in Q4_0, bit 4 of q[i] is
 * bit i of the little-endian u32 qh. */
typedef struct ig_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[IG_QK / 2];
} ig_block_q5_0;

/* x[i] = d * q[i] + m, q in 0..31 packed as in Q5_0 (not centred). */
typedef struct ig_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[IG_QK / 2];
} ig_block_q5_1;

/* x[i] = d * qs[i]. Also the activation type of the Q4_0/Q5_0/Q8_0 dots. */
typedef struct ig_block_q8_0 {
    uint16_t d;
    int8_t qs[IG_QK];
} ig_block_q8_0;

/* 8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j] packed in scales[12]
 * (see ig_q4_K_scale_min): x = d*sc[j] * q - dmin*m[j], q in 0..15. For each
 * 64-element chunk c, qs[32c + l] holds element 64c + l (low nibble) and
 * 64c + 32 + l (high nibble). */
typedef struct ig_block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[IG_K_SCALE_SIZE];
    uint8_t qs[IG_QK_K / 2];
} ig_block_q4_K;

/* As Q4_K with q in 0..31: bit 4 of element 32g + l is bit g of qh[l]. */
typedef struct ig_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[IG_K_SCALE_SIZE];
    uint8_t qh[IG_QK_K / 8];
    uint8_t qs[IG_QK_K / 2];
} ig_block_q5_K;

/* 16 sub-blocks of 16 with int8 scales: x = d*scales[i/16] * (q - 32), q in
 * 0..63. In each 128-element half h, element 128h + 32k + l (k = 0..3) takes
 * its low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k < 2, high
 * nibble otherwise) and its high 2 bits from bits 2k..2k+1 of qh[32h + l]. */
typedef struct ig_block_q6_K {
    uint8_t ql[IG_QK_K / 2];
    uint8_t qh[IG_QK_K / 4];
    int8_t scales[IG_QK_K / 16];
    uint16_t d;
} ig_block_q6_K;

/* Activation type of the K-quant dots: a 256-element block with one scale
 * and a small integer multiplier t[j] (1..IG_Q8K_T) per 32 elements, so that
 * the 32-element runs far below the block's largest value keep their
 * precision (the inputs of ffn_down carry a few very large values):
 * x[i] = d * t[i/32] * qs[i]; bsums[j] = t[j/2] * (the sum of qs[16j ..
 * 16j+15]). Never stored in files. */
#define IG_Q8K_T 8
typedef struct ig_block_q8_K {
    float d;
    int8_t qs[IG_QK_K];
    int16_t bsums[IG_QK_K / 16];
    uint8_t t[IG_QK_K / 32];
} ig_block_q8_K;

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
void ig_q4_K_scale_min(const uint8_t scales[IG_K_SCALE_SIZE], int j, uint8_t *sc, uint8_t *m);

/* ---- Integer dot products (references for the SIMD kernels) --------------
 * The activation is quantized first (Q8_0 for Q4_0/Q5_0/Q8_0 rows with
 * ig_quantize_row_q8_0_act; also Q5_1 rows), Q8_K for the K-quants with ig_quantize_row_q8_K). Each block
 * forms exact int32 sums and the blocks are accumulated in f32, in order:
 *   Q8_0/Q4_0/Q5_0: sum += (float)isum * (d_w * d_x), isum = sum of q_w*q_x
 *                   (q_w centred: q-8 for Q4_0, q-16 for Q5_0);
 *   Q5_1:           sum += (float)isum * (d_w * d_x) + m_w * (d_x * (float)sx),
 *                   q_w in 0..31, sx = the sum of the block's q_x;
 *   Q4_K/Q5_K:      sum += (d_w*d_x) * (float)sum_j(sc[j] * t[j] * sum q*q_x)
 *                        - (dmin_w*d_x) * (float)sum_j(m[j] * (bsums[2j] + bsums[2j+1]));
 *   Q6_K:           sum += (d_w*d_x) * (float)sum_j(sc[j] * t[j/2] * sum (q-32)*q_x)
 *                   (Q6_K's sub-blocks are 16 elements, t's 32).
 * n must be a multiple of the block size (trailing elements are ignored). */
void ig_quantize_row_q8_K(const float *x, ig_block_q8_K *y, int64_t n);
/* The run multipliers of ig_quantize_row_q8_K: iscale * ig_q8k_mul[t]
 * quantizes a run with multiplier t (8/t as the nearest float). */
extern const float ig_q8k_mul[IG_Q8K_T + 1];
/* The multiplier t of a run whose largest magnitude is a, in a block whose
 * largest is amax: 1 + the number of k in 1..7 with a > amax * k/8 (one
 * IEEE product per k, so every quantizer forms the same t). */
static inline int ig_q8k_run_t(float a, float amax) {
    int t = 1;
    for (int k = 1; k < IG_Q8K_T; k++) t += a > amax * (0.125f * (float)k);
    return t;
}
/* Q8_0 blocks of an activation as llama.cpp's x86 CPU backend makes them
 * (quantize_row_q8_0 with AVX/AVX2, and the same formula in its 4-row
 * repack quantizer): d = amax/127 stored as f16, q = nearest-even(x *
 * (127/amax)) clamped to [-127, 127] (NaN gives -127); an all-zero block
 * gets d = 0, q = 0. Differs from ig_quantize_row(IG_TYPE_Q8_0, ...) (ggml's
 * quantize_row_q8_0_ref, used for weights: q = roundf(x * (1/d))) at exact
 * ties and where 127/amax and 1/(amax/127) differ in the last bit, i.e.
 * rarely, but this model family turns such single-element differences into
 * logit differences of several percent (tests/e2e/test_logits.py). */
void ig_quantize_row_q8_0_act(const float *x, void *y, int64_t n);
void ig_dequantize_row_q8_K(const ig_block_q8_K *x, float *y, int64_t n);
float ig_vec_dot_q8_0_q8_0(const void *row, const void *xq, int64_t n);
float ig_vec_dot_q4_0_q8_0(const void *row, const void *xq, int64_t n);
float ig_vec_dot_q5_0_q8_0(const void *row, const void *xq, int64_t n);
float ig_vec_dot_q5_1_q8_0(const void *row, const void *xq, int64_t n);
float ig_vec_dot_q4_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n);
float ig_vec_dot_q5_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n);
float ig_vec_dot_q6_K_q8_K(const void *row, const ig_block_q8_K *xq, int64_t n);

#endif
