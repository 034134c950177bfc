/* The SIMD elementwise kernels of ops_<isa>.c (src/backend/cpu only). */
#ifndef IG_CPU_OPS_SIMD_H
#define IG_CPU_OPS_SIMD_H

#include <stdbool.h>
#include <stdint.h>

void ig_geglu_avx512(float *g, const float *u, int64_t n);
void ig_rmsnorm_avx512(const float *x, float *y, const float *w, int d, float eps, bool add);
void ig_to_f16_avx512(const float *x, uint16_t *y, int64_t n);
void ig_geglu_avx2(float *g, const float *u, int64_t n);
void ig_rmsnorm_avx2(const float *x, float *y, const float *w, int d, float eps, bool add);
void ig_to_f16_avx2(const float *x, uint16_t *y, int64_t n);

#endif
