/* Memory read bandwidth probe: every thread of a pool reads its own slice of
 * a buffer far larger than the last-level cache with 16-byte vector loads
 * into independent accumulators (so neither the loads' latency nor the
 * arithmetic limits the rate); the best of several passes is the machine's
 * read bandwidth for that many threads. */
#include "bench/bench.h"

#include "engine/threadpool.h"

#include <stdio.h>
#include <string.h>

typedef uint64_t v2u64 __attribute__((vector_size(16)));

typedef struct membw_task {
    const v2u64 *buf;
    size_t n_vec;          /* vectors in buf */
    double t_start, t_end; /* set by thread 0 */
    v2u64 sink[512];       /* one slot per thread, keeps the loads alive */
} membw_task;

/* Sums n vectors (n a multiple of 8) with 8 independent accumulators. */
static v2u64 read_slice(const v2u64 *p, size_t n) {
    v2u64 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        a0 += p[i + 0];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
        a4 += p[i + 4];
        a5 += p[i + 5];
        a6 += p[i + 6];
        a7 += p[i + 7];
    }
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}

static void membw_run(void *arg, int ith, int nth) {
    membw_task *t = arg;
    int64_t b, e;
    /* Split in whole groups of 8 vectors (128 bytes, two cache lines). */
    ig_split_range((int64_t)(t->n_vec / 8), ith, nth, &b, &e);
    t->sink[ith % 512] += read_slice(t->buf + b * 8, (size_t)(e - b) * 8);
}

typedef struct membw_pass {
    membw_task *task;
    ig_threadpool *tp;
} membw_pass;

static void membw_timed(void *arg, int ith, int nth) {
    membw_pass *p = arg;
    ig_threadpool_barrier(p->tp);
    if (ith == 0) p->task->t_start = ig_time_now();
    membw_run(p->task, ith, nth);
    ig_threadpool_barrier(p->tp);
    if (ith == 0) p->task->t_end = ig_time_now();
}

/* First touch from the threads that will read (pages land near them). */
static void membw_fill(void *arg, int ith, int nth) {
    membw_task *t = arg;
    int64_t b, e;
    ig_split_range((int64_t)t->n_vec, ith, nth, &b, &e);
    memset((void *)(t->buf + b), 0x5a, (size_t)(e - b) * sizeof(v2u64));
}

ig_status ig_bench_membw(int n_threads, size_t buffer_bytes, int runs, ig_membw_result *out) {
    if (!out || n_threads < 1 || n_threads > 512 || runs < 1)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_bench_membw: bad arguments");
    memset(out, 0, sizeof *out);
    if (buffer_bytes == 0) buffer_bytes = (size_t)512 << 20;
    buffer_bytes -= buffer_bytes % (128 * (size_t)n_threads);
    if (buffer_bytes < (size_t)1 << 20) return ig_fail(IG_ERR_INVALID_ARG, "membw buffer too small");

    membw_task *task = ig_aligned_alloc(64, sizeof *task);
    void *buf = ig_aligned_alloc(4096, buffer_bytes);
    ig_threadpool *tp = NULL;
    ig_status st = IG_OK;
    if (!task || !buf) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
    memset(task, 0, sizeof *task);
    task->buf = buf;
    task->n_vec = buffer_bytes / sizeof(v2u64);
    st = ig_threadpool_create(n_threads, &tp);
    if (st != IG_OK) goto done;
    ig_threadpool_run(tp, membw_fill, task);

    membw_pass pass = {task, tp};
    double best = 0;
    /* One untimed pass warms the TLB and wakes the workers. */
    ig_threadpool_run(tp, membw_timed, &pass);
    for (int r = 0; r < runs; r++) {
        ig_threadpool_run(tp, membw_timed, &pass);
        double dt = task->t_end - task->t_start;
        if (dt > 0) {
            double gbs = (double)buffer_bytes / dt / 1e9;
            if (gbs > best) best = gbs;
        }
    }
    /* Make the sums observable so the reads cannot be dropped. */
    uint64_t acc = 0;
    for (int i = 0; i < 512; i++) acc += task->sink[i][0] ^ task->sink[i][1];
    volatile uint64_t keep = acc;
    (void)keep;

    out->gbs = best;
    out->buffer_bytes = buffer_bytes;
    out->n_threads = n_threads;
    out->runs = runs;
done:
    ig_threadpool_free(tp);
    ig_aligned_free(buf);
    ig_aligned_free(task);
    return st;
}

void ig_bench_cpu_name(char *out, size_t cap) {
    if (!out || cap == 0) return;
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        if (n == 0) continue;
        snprintf(out, cap, "%.*s", (int)n, v);
        break;
    }
    fclose(f);
}
