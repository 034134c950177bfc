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

/* Scalar references. n must be a multiple of the block size. */
void ig_dequantize_row(ig_dtype type, const void *src, float *dst, int64_t n);
float ig_vec_dot_ref(ig_dtype type, const void *row, const float *x, int64_t n);

/* Quantize n floats into type (reference, round-to-nearest). Available for
 * F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K; used by tests and by
 * `ignis synth`. */
void ig_quantize_row(ig_dtype type, const float *src, void *dst, int64_t n);

/* Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even. */
float ig_f16_to_f32(uint16_t h);
uint16_t ig_f32_to_f16(float f);
float ig_bf16_to_f32(uint16_t h);
uint16_t ig_f32_to_bf16(float f);

#endif
