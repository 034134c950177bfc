#define _GNU_SOURCE /* syscall(SYS_futex) */
#include "engine/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spin briefly, then sleep. Steps come back-to-back and ops are short, so a
 * short spin saves a wake-up; but when the machine is oversubscribed (other
 * processes on our cores) a long spin burns the time slice the thread we wait
 * for needs: 2-thread decode fell 3-10x under load with 100k-round spins. */
#define IDLE_SPINS 20000
#define BARRIER_SPINS 2000

/* Sleeps while *addr == val (or returns at once if it already differs). */
static void wait_on(atomic_uint *addr, unsigned val) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)addr;
    (void)val;
    sched_yield();
#endif
}

static void wake_all(atomic_uint *addr) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

typedef struct worker {
    ig_threadpool *tp;
    int ith;
    pthread_t thread;
} worker;

struct ig_threadpool {
    int n_threads;
    worker *workers; /* n_threads - 1 of them */

    /* Run dispatch: generation bumps once per run. */
    atomic_uint generation;
    atomic_uint n_done;
    atomic_int main_sleeping;
    ig_task_fn fn;
    void *arg;
    atomic_bool stop;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    atomic_int n_sleeping;

    /* Barrier state. */
    atomic_int barrier_count;
    atomic_uint barrier_phase;
    atomic_int barrier_sleepers;
};

static void run_task(ig_threadpool *tp, int ith) {
    tp->fn(tp->arg, ith, tp->n_threads);
    atomic_fetch_add(&tp->n_done, 1);
    if (ith != 0 && atomic_load(&tp->main_sleeping)) wake_all(&tp->n_done);
}

static void *worker_main(void *p) {
    worker *w = p;
    ig_threadpool *tp = w->tp;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_acquire)) {
            if (++spins < IDLE_SPINS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mutex);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cond, &tp->mutex);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mutex);
        }
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = gen;
        run_task(tp, w->ith);
    }
    return NULL;
}

ig_status ig_threadpool_create(int n_threads, ig_threadpool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return ig_fail(IG_ERR_INVALID_ARG, "thread count %d out of range [1, 1024]", n_threads);
    ig_threadpool *tp = ig_calloc_array(1, sizeof *tp);
    if (!tp) return IG_ERR_NO_MEMORY;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mutex, NULL);
    pthread_cond_init(&tp->cond, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->n_done, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->barrier_count, 0);
    atomic_init(&tp->barrier_phase, 0);
    atomic_init(&tp->barrier_sleepers, 0);
    atomic_init(&tp->main_sleeping, 0);
    if (n_threads > 1) {
        tp->workers = ig_calloc_array((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            ig_threadpool_free(tp);
            return IG_ERR_NO_MEMORY;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            tp->workers[i].tp = tp;
            tp->workers[i].ith = i + 1;
            if (pthread_create(&tp->workers[i].thread, NULL, worker_main, &tp->workers[i]) != 0) {
                tp->n_threads = i + 1; /* only join what started */
                ig_threadpool_free(tp);
                return ig_fail(IG_ERR_NO_MEMORY, "cannot start worker thread %d", i + 1);
            }
        }
    }
    *out = tp;
    return IG_OK;
}

void ig_threadpool_free(ig_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mutex);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->mutex);
    if (tp->workers)
        for (int i = 0; i < tp->n_threads - 1; i++) pthread_join(tp->workers[i].thread, NULL);
    free(tp->workers);
    pthread_mutex_destroy(&tp->mutex);
    pthread_cond_destroy(&tp->cond);
    free(tp);
}

int ig_threadpool_size(const ig_threadpool *tp) { return tp->n_threads; }

void ig_threadpool_run(ig_threadpool *tp, ig_task_fn fn, void *arg) {
    if (tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->n_done, 0);
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mutex);
        pthread_cond_broadcast(&tp->cond);
        pthread_mutex_unlock(&tp->mutex);
    }
    run_task(tp, 0);
    int spins = 0;
    unsigned done;
    while ((done = atomic_load(&tp->n_done)) < (unsigned)tp->n_threads) {
        if (++spins < BARRIER_SPINS) {
            CPU_RELAX();
            continue;
        }
        atomic_store(&tp->main_sleeping, 1);
        if (atomic_load(&tp->n_done) == done) wait_on(&tp->n_done, done);
        atomic_store(&tp->main_sleeping, 0);
    }
}

void ig_threadpool_barrier(ig_threadpool *tp) {
    int n = tp->n_threads;
    if (n == 1) return;
    unsigned phase = atomic_load(&tp->barrier_phase);
    if (atomic_fetch_add(&tp->barrier_count, 1) == n - 1) {
        atomic_store(&tp->barrier_count, 0);
        atomic_fetch_add(&tp->barrier_phase, 1);
        if (atomic_load(&tp->barrier_sleepers) > 0) wake_all(&tp->barrier_phase);
        return;
    }
    int spins = 0;
    while (atomic_load(&tp->barrier_phase) == phase) {
        if (++spins < BARRIER_SPINS) {
            CPU_RELAX();
            continue;
        }
        /* Dekker pairing with the last arriver (both seq_cst): either we see
         * the new phase, or it sees us counted and wakes us. */
        atomic_fetch_add(&tp->barrier_sleepers, 1);
        if (atomic_load(&tp->barrier_phase) == phase) wait_on(&tp->barrier_phase, phase);
        atomic_fetch_sub(&tp->barrier_sleepers, 1);
    }
}
