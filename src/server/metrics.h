/* Server metrics and their Prometheus text exposition. Thread-safe: every
 * update and the rendering take the metrics' own mutex. */
#ifndef IG_SERVER_METRICS_H
#define IG_SERVER_METRICS_H

#include "server/text.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SRV_HIST_MAX 20

typedef struct srv_hist {
    int n_bounds;
    double bounds[SRV_HIST_MAX];
    uint64_t counts[SRV_HIST_MAX + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t http_by_status[600];
    uint64_t prompt_tokens;
    uint64_t generated_tokens;
    uint64_t cached_prompt_tokens;
    uint64_t prefill_tokens; /* prompt tokens computed (not reused from a cache) */
    uint64_t requests_finished_stop, requests_finished_length, requests_cancelled;
    uint64_t decode_calls;
    uint64_t spec_drafted, spec_accepted; /* speculative decoding: drafts verified, accepted */
    srv_hist ttft;
    srv_hist itl;
    srv_hist e2e;
    int running;
    int waiting;
    int slots;
    int64_t kv_tokens;
    int64_t kv_capacity;
    bool ready;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double v);

void srv_metrics_http(srv_metrics *m, int status);
/* Renders Prometheus text format 0.0.4 into b. */
bool srv_metrics_render(srv_metrics *m, srv_buf *b);

#endif
