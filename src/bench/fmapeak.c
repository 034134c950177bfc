/* f32 FMA peak probe: every thread of a pool runs independent chains of
 * fused multiply-adds held in registers (no memory traffic), with the widest
 * vectors the CPU supports; the rate is the compute limit that prefill is
 * quoted against. */
#include "bench/bench.h"

#include "bench/fmapeak.h"
#include "engine/threadpool.h"

#include <string.h>

typedef float (*fma_kernel)(long iters);

typedef struct fma_task {
    ig_threadpool *tp;
    fma_kernel fn;
    long iters;
    double t_start, t_end;
    float sink[512];
} fma_task;

float ig_bench_fma_scalar(long iters) {
    float a[8] = {1.0f, 1.01f, 1.02f, 1.03f, 1.04f, 1.05f, 1.06f, 1.07f};
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 8; k++) a[k] = a[k] * 0.999f + 0.001f;
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void fma_run(void *arg, int ith, int nth) {
    (void)nth;
    fma_task *t = arg;
    ig_threadpool_barrier(t->tp);
    if (ith == 0) t->t_start = ig_time_now();
    t->sink[ith % 512] += t->fn(t->iters);
    ig_threadpool_barrier(t->tp);
    if (ith == 0) t->t_end = ig_time_now();
}

/* Best rate of `runs` passes of about 0.1 s each; flops_per_iter per thread. */
static double measure(fma_task *t, int n_threads, double flops_per_iter, int runs) {
    t->iters = 1 << 16;
    /* Calibrate: grow the pass until it takes at least 20 ms. */
    for (;;) {
        ig_threadpool_run(t->tp, fma_run, t);
        double dt = t->t_end - t->t_start;
        if (dt >= 0.02 || t->iters > (1L << 40)) {
            double scale = dt > 0 ? 0.1 / dt : 1.0;
            if (scale > 1.0) t->iters = (long)((double)t->iters * scale);
            break;
        }
        t->iters *= 4;
    }
    double best = 0;
    for (int r = 0; r < runs; r++) {
        ig_threadpool_run(t->tp, fma_run, t);
        double dt = t->t_end - t->t_start;
        if (dt <= 0) continue;
        double gf = flops_per_iter * (double)t->iters * n_threads / dt / 1e9;
        if (gf > best) best = gf;
    }
    return best;
}

ig_status ig_bench_fma_peak(int n_threads, int runs, ig_fma_result *out) {
    if (!out || n_threads < 1 || n_threads > 512 || runs < 1)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_bench_fma_peak: bad arguments");
    memset(out, 0, sizeof *out);
    fma_task *t = ig_aligned_alloc(64, sizeof *t);
    if (!t) return IG_ERR_NO_MEMORY;
    memset(t, 0, sizeof *t);
    ig_status st = ig_threadpool_create(n_threads, &t->tp);
    if (st != IG_OK) {
        ig_aligned_free(t);
        return st;
    }
    double best = 0;
    const char *isa = "scalar";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        t->fn = ig_bench_fma_avx2;
        best = measure(t, n_threads, IG_FMA_CHAINS * 8 * 2.0, runs);
        isa = "avx2";
    }
    if (__builtin_cpu_supports("avx512f")) {
        t->fn = ig_bench_fma_avx512;
        double g = measure(t, n_threads, IG_FMA_CHAINS * 16 * 2.0, runs);
        if (g > best * 1.02) {
            best = g;
            isa = "avx512";
        }
    }
#endif
    if (best == 0) {
        t->fn = ig_bench_fma_scalar;
        best = measure(t, n_threads, 8 * 2.0, runs);
        isa = "scalar";
    }
    float acc = 0;
    for (int i = 0; i < 512; i++) acc += t->sink[i];
    volatile float keep = acc;
    (void)keep;
    out->gflops = best;
    out->isa = isa;
    out->n_threads = n_threads;
    ig_threadpool_free(t->tp);
    ig_aligned_free(t);
    return IG_OK;
}
