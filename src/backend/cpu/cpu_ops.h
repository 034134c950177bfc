/* CPU kernels of the graph ops. Each runs thread ith's share of the work of
 * one op (ith in [0, nth)); the executor puts a barrier between ops. */
#ifndef IG_CPU_OPS_H
#define IG_CPU_OPS_H

#include "engine/context.h"

/* Per-thread scratch: room for one dequantized row or one row of scores. */
typedef struct ig_cpu_scratch {
    float *f;
    size_t n;
} ig_cpu_scratch;

typedef struct ig_cpu_exec {
    ig_context *ctx;
    const ig_step *step;
    float *buf[IG_BUF_COUNT];
    ig_cpu_scratch *scratch; /* [nth] */
} ig_cpu_exec;

void ig_cpu_op(const ig_cpu_exec *ex, const ig_op *op, int ith, int nth);

/* y[t, r] = w[r] · x[t] for rows r in [r0, r1) and all n tokens.
 * ldx/ldy: row strides of x and y in floats. */
void ig_cpu_matmul_rows(const ig_tensor *w, const float *x, int n, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, ig_cpu_scratch *scratch);

#endif
