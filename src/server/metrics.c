#include "server/metrics.h"

#include <string.h>

static void hist_init(srv_hist *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    if (n > SRV_HIST_MAX) n = SRV_HIST_MAX;
    h->n_bounds = n;
    memcpy(h->bounds, bounds, (size_t)n * sizeof *bounds);
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    static const double ttft[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1,
                                  2.5,  5,     10,   20,  40,   80};
    static const double itl[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                 0.1,   0.15,   0.2,   0.3,  0.5,  1,    2.5};
    static const double e2e[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
    hist_init(&m->ttft, ttft, (int)(sizeof ttft / sizeof ttft[0]));
    hist_init(&m->itl, itl, (int)(sizeof itl / sizeof itl[0]));
    hist_init(&m->e2e, e2e, (int)(sizeof e2e / sizeof e2e[0]));
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_hist_observe(srv_hist *h, double v) {
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void srv_metrics_http(srv_metrics *m, int status) {
    pthread_mutex_lock(&m->mu);
    if (status >= 100 && status < 600) m->http_by_status[status]++;
    pthread_mutex_unlock(&m->mu);
}

static bool render_hist(srv_buf *b, const char *name, const char *help, const srv_hist *h) {
    bool ok = srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        ok = ok && srv_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    ok = ok && srv_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    ok = ok && srv_buf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name,
                              (unsigned long long)h->count);
    return ok;
}

static bool render_counter(srv_buf *b, const char *name, const char *help, uint64_t v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                          (unsigned long long)v);
}

static bool render_gauge(srv_buf *b, const char *name, const char *help, double v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.9g\n", name, help, name, name, v);
}

bool srv_metrics_render(srv_metrics *m, srv_buf *b) {
    pthread_mutex_lock(&m->mu);
    srv_metrics s = *m; /* snapshot; the copied mutex is never used */
    pthread_mutex_unlock(&m->mu);

    bool ok = srv_buf_puts(b, "# HELP ignis_http_requests_total HTTP requests answered, by status "
                              "code.\n# TYPE ignis_http_requests_total counter\n");
    for (int st = 100; st < 600; st++)
        if (s.http_by_status[st])
            ok = ok && srv_buf_printf(b, "ignis_http_requests_total{status=\"%d\"} %llu\n", st,
                                      (unsigned long long)s.http_by_status[st]);
    ok = ok && render_counter(b, "ignis_prompt_tokens_total", "Prompt tokens of admitted "
                              "requests.", s.prompt_tokens);
    ok = ok && render_counter(b, "ignis_prompt_tokens_cached_total", "Prompt tokens reused from a "
                              "slot's KV cache instead of recomputed.", s.cached_prompt_tokens);
    ok = ok && render_counter(b, "ignis_prefill_tokens_total", "Prompt tokens computed by the "
                              "engine (prefill).", s.prefill_tokens);
    ok = ok && render_counter(b, "ignis_generation_tokens_total", "Tokens generated.",
                              s.generated_tokens);
    ok = ok && srv_buf_puts(b, "# HELP ignis_sequences_finished_total Generated sequences by "
                               "finish reason.\n# TYPE ignis_sequences_finished_total counter\n");
    ok = ok && srv_buf_printf(b, "ignis_sequences_finished_total{reason=\"stop\"} %llu\n",
                              (unsigned long long)s.requests_finished_stop);
    ok = ok && srv_buf_printf(b, "ignis_sequences_finished_total{reason=\"length\"} %llu\n",
                              (unsigned long long)s.requests_finished_length);
    ok = ok && srv_buf_printf(b, "ignis_sequences_finished_total{reason=\"cancelled\"} %llu\n",
                              (unsigned long long)s.requests_cancelled);
    ok = ok && render_counter(b, "ignis_decode_calls_total", "Engine steps (ig_decode calls).",
                              s.decode_calls);
    ok = ok && render_counter(b, "ignis_draft_tokens_total", "Draft tokens verified (speculative decoding).",
                              s.spec_drafted);
    ok = ok && render_counter(b, "ignis_draft_tokens_accepted_total",
                              "Draft tokens accepted (speculative decoding).", s.spec_accepted);
    ok = ok && render_hist(b, "ignis_time_to_first_token_seconds", "Time from admission to the "
                           "first generated token.", &s.ttft);
    ok = ok && render_hist(b, "ignis_inter_token_latency_seconds", "Time between consecutive "
                           "generated tokens of a sequence.", &s.itl);
    ok = ok && render_hist(b, "ignis_e2e_request_latency_seconds", "Time from admission to the "
                           "last token of a sequence.", &s.e2e);
    ok = ok && render_gauge(b, "ignis_requests_running", "Sequences holding a slot (a request "
                            "with n choices counts n).", s.running);
    ok = ok && render_gauge(b, "ignis_requests_waiting", "Sequences queued for a slot.",
                            s.waiting);
    ok = ok && render_gauge(b, "ignis_slots_total", "Parallel slots (sequences of the context).",
                            s.slots);
    ok = ok && render_gauge(b, "ignis_kv_cache_tokens", "Positions held in the KV cache over all "
                            "slots.", (double)s.kv_tokens);
    ok = ok && render_gauge(b, "ignis_kv_cache_usage_ratio", "Fraction of the KV cache in use.",
                            s.kv_capacity > 0 ? (double)s.kv_tokens / (double)s.kv_capacity : 0.0);
    ok = ok && render_gauge(b, "ignis_model_ready", "1 once the model is loaded.", s.ready ? 1 : 0);
    return ok;
}
