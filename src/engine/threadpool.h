/* A persistent pool of worker threads. One ig_threadpool_run() wakes every
 * worker once; inside the task, ig_threadpool_barrier() separates the ops of
 * a step, so a whole forward pass costs one wake-up, not one per op. */
#ifndef IG_THREADPOOL_H
#define IG_THREADPOOL_H

#include "core/util.h"

typedef struct ig_threadpool ig_threadpool;
/* ith in [0, nth); the calling thread runs ith == 0. */
typedef void (*ig_task_fn)(void *arg, int ith, int nth);

ig_status ig_threadpool_create(int n_threads, ig_threadpool **out);
void ig_threadpool_free(ig_threadpool *tp);
int ig_threadpool_size(const ig_threadpool *tp);
/* Runs fn on every thread and returns when all have finished. Not
 * re-entrant: one run at a time per pool. */
void ig_threadpool_run(ig_threadpool *tp, ig_task_fn fn, void *arg);
/* Called by every thread of the current run: returns once all have arrived.
 * Spins briefly, then yields. */
void ig_threadpool_barrier(ig_threadpool *tp);

/* Splits [0, n) into nth near-equal chunks; returns thread ith's [*b, *e). */
static inline void ig_split_range(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    int64_t per = n / nth, rem = n % nth;
    *b = ith * per + (ith < rem ? ith : rem);
    *e = *b + per + (ith < rem ? 1 : 0);
}

#endif
