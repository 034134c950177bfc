/* Kernels of the FMA peak probe (fmapeak.c): each runs `iters` rounds of
 * IG_FMA_CHAINS independent f32 fused multiply-add vectors and returns a sum
 * of the results (so the work cannot be dropped). */
#ifndef IG_BENCH_FMAPEAK_H
#define IG_BENCH_FMAPEAK_H

#define IG_FMA_CHAINS 12

float ig_bench_fma_scalar(long iters); /* 8 lanes of plain a * m + c */
#if defined(__x86_64__) || defined(__i386__)
float ig_bench_fma_avx2(long iters);   /* 8 lanes per vector */
float ig_bench_fma_avx512(long iters); /* 16 lanes per vector */
#endif

#endif
