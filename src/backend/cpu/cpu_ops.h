/* CPU kernels of the graph ops. Each runs thread ith's share of the work of
 * one op (ith in [0, nth)); the executor puts a barrier between ops. */
#ifndef IG_CPU_OPS_H
#define IG_CPU_OPS_H

#include "backend/cpu/matmul.h"
#include "engine/backend.h"

#include <stdatomic.h>

/* Per-thread scratch: room for one row of scores (f), the matmul kernels'
 * working set (mm) and one quantized activation row (tmp). */
typedef struct ig_cpu_scratch {
    float *f;
    size_t n;
    uint8_t *mm;
    uint8_t *tmp;
} ig_cpu_scratch;

typedef struct ig_cpu_exec {
    ig_kv_cache *kv;
    ig_threadpool *pool;
    const ig_step *step;
    float *buf[IG_BUF_COUNT];
    ig_cpu_scratch *scratch; /* [nth] */
    const ig_mm_isa *isa;
    uint8_t *act; /* quantized activations of the current matmul group */
} ig_cpu_exec;

/* True for the ops whose output row t depends only on row t of their
 * inputs (and on buffers complete before the step). */
bool ig_cpu_op_row_local(const ig_op *op);

/* Runs n_ops consecutive ops as one step: a single op that is not
 * row-local (attention), or row-local ops over the same rows, each thread
 * doing its own rows of all of them. next: a counter at 0 on entry, for
 * ops that share work out dynamically. */
void ig_cpu_ops(const ig_cpu_exec *ex, const ig_op *ops, int n_ops, atomic_int *next, int ith,
                int nth);

/* Runs n_pre row-local ops (producing the matmuls' input), then n_ops
 * consecutive matmuls that read the same input: each thread quantizes the
 * rows it produced, a barrier, then the output rows of all the matmuls are
 * shared out in chunks claimed from *next (0 on entry). */
void ig_cpu_matmuls(const ig_cpu_exec *ex, const ig_op *pre, int n_pre, const ig_op *ops, int n_ops,
                    atomic_int *next, int ith, int nth);

#endif
