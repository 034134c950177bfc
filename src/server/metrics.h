/* Server metrics and their Prometheus text exposition. Thread-safe: every
 * update and the rendering take the metrics' own mutex. */
#ifndef IG_SERVER_METRICS_H
#define IG_SERVER_METRICS_H

#include "ignis.h"
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

/* The counters behind the rates of /metrics at one moment. */
typedef struct srv_rate_sample {
    double t; /* ig_time_now() */
    uint64_t generated, prefill, busy_ns;
} srv_rate_sample;

#define SRV_RATE_SAMPLES 32
#define SRV_RATE_WINDOW 10.0 /* seconds the rates look back, at least */

typedef struct srv_rate_ring {
    srv_rate_sample s[SRV_RATE_SAMPLES];
    int n, head; /* head: where the next sample goes */
} srv_rate_ring;

typedef struct srv_rates {
    double window_s;   /* the time the rates cover */
    double decode_tps, prefill_tps;
    double busy_ratio; /* device busy time over window_s */
} srv_rates;

/* Adds now to the ring when its newest sample is at least a second older,
 * and gives the rates between now and the newest sample at least
 * SRV_RATE_WINDOW seconds older (the oldest one when none is). False, with
 * *out zeroed, when the ring held no earlier sample. */
bool srv_rates_update(srv_rate_ring *r, const srv_rate_sample *now, srv_rates *out);

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
    int kv_sequences;   /* sequences holding cached positions */
    int max_queue;
    bool ready;
    srv_hist step_decode;  /* engine steps of generating tokens only, seconds */
    srv_hist step_prefill; /* steps with prompt tokens */
    srv_rate_ring rates;
    const ig_context *ctx; /* the engine's context once it runs (ig_context_device_stats) */
} srv_metrics;

/* What /metrics and /v1/status report at one moment: a copy of the metrics,
 * the device and the process. */
typedef struct srv_snapshot {
    srv_metrics m;     /* its mutex is never used */
    double now;
    bool have_device;  /* dev is filled (the engine runs) */
    ig_device_stats dev;
    bool have_rates;
    srv_rates rates;
    long long rss, peak_rss, max_fds; /* -1: unknown */
    int open_fds;                     /* -1: unknown */
    double cpu_seconds;
} srv_snapshot;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double v);

void srv_metrics_http(srv_metrics *m, int status);
/* The engine runs: its context (for the device numbers), the queue's
 * length; the first sample of the rates. */
void srv_metrics_attach(srv_metrics *m, const ig_context *ctx, int max_queue);
/* Takes a snapshot (and a sample for the rates); heap-allocated as it is
 * large; NULL when out of memory. */
srv_snapshot *srv_metrics_snapshot(srv_metrics *m);
/* Slots and queue full: a new request would get 503. */
bool srv_metrics_queue_full(srv_metrics *m);
/* The GPU was lost: nothing more can run. */
bool srv_metrics_device_lost(srv_metrics *m);
/* Renders Prometheus text format 0.0.4 into b. */
bool srv_metrics_render(srv_metrics *m, srv_buf *b);

#endif
