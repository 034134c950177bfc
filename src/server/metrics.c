#include "server/metrics.h"

#include "core/util.h"
#include "server/proc.h"

#include <stdlib.h>
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
    static const double step[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                  0.25,  0.5,    1,     2.5,  5,     10};
    hist_init(&m->step_decode, step, (int)(sizeof step / sizeof step[0]));
    hist_init(&m->step_prefill, step, (int)(sizeof step / sizeof step[0]));
}

bool srv_rates_update(srv_rate_ring *r, const srv_rate_sample *now, srv_rates *out) {
    memset(out, 0, sizeof *out);
    /* the newest sample at least SRV_RATE_WINDOW old, else the oldest */
    const srv_rate_sample *ref = NULL;
    for (int k = 0; k < r->n; k++) {
        const srv_rate_sample *s = &r->s[(r->head - 1 - k + 2 * SRV_RATE_SAMPLES) % SRV_RATE_SAMPLES];
        if (s->t > now->t) continue; /* clocks never go back; ignore it if one did */
        ref = s;
        if (now->t - s->t >= SRV_RATE_WINDOW) break;
    }
    bool ok = false;
    if (ref && now->t > ref->t) {
        double dt = now->t - ref->t;
        out->window_s = dt;
        out->decode_tps = now->generated >= ref->generated ? (double)(now->generated - ref->generated) / dt : 0;
        out->prefill_tps = now->prefill >= ref->prefill ? (double)(now->prefill - ref->prefill) / dt : 0;
        out->busy_ratio = now->busy_ns >= ref->busy_ns ? (double)(now->busy_ns - ref->busy_ns) * 1e-9 / dt : 0;
        if (out->busy_ratio > 1) out->busy_ratio = 1; /* timestamps and the host clock differ slightly */
        ok = true;
    }
    const srv_rate_sample *newest = r->n ? &r->s[(r->head - 1 + SRV_RATE_SAMPLES) % SRV_RATE_SAMPLES] : NULL;
    if (!newest || now->t - newest->t >= 1.0) {
        r->s[r->head] = *now;
        r->head = (r->head + 1) % SRV_RATE_SAMPLES;
        if (r->n < SRV_RATE_SAMPLES) r->n++;
    }
    return ok;
}

void srv_metrics_attach(srv_metrics *m, const ig_context *ctx, int max_queue) {
    ig_device_stats d;
    bool dev = ctx && ig_context_device_stats(ctx, &d) == IG_OK;
    pthread_mutex_lock(&m->mu);
    m->ctx = ctx;
    m->max_queue = max_queue;
    srv_rate_sample s = {ig_time_now(), m->generated_tokens, m->prefill_tokens, dev ? d.busy_ns : 0};
    srv_rates unused;
    srv_rates_update(&m->rates, &s, &unused);
    pthread_mutex_unlock(&m->mu);
}

srv_snapshot *srv_metrics_snapshot(srv_metrics *m) {
    srv_snapshot *s = ig_calloc_array(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_lock(&m->mu);
    const ig_context *ctx = m->ctx;
    pthread_mutex_unlock(&m->mu);
    /* the device query may take a system call: outside the lock */
    s->have_device = ctx && ig_context_device_stats(ctx, &s->dev) == IG_OK;
    pthread_mutex_lock(&m->mu);
    s->now = ig_time_now();
    if (s->have_device) {
        srv_rate_sample now = {s->now, m->generated_tokens, m->prefill_tokens, s->dev.busy_ns};
        s->have_rates = srv_rates_update(&m->rates, &now, &s->rates);
    }
    s->m = *m; /* the copied mutex is never used */
    pthread_mutex_unlock(&m->mu);
    s->rss = srv_process_rss_bytes();
    s->peak_rss = srv_process_peak_rss_bytes();
    if (s->peak_rss >= 0 && s->peak_rss < s->rss) s->peak_rss = s->rss; /* the kernel updates it lazily */
    s->cpu_seconds = srv_process_cpu_seconds();
    s->open_fds = srv_process_open_fds();
    s->max_fds = srv_process_max_fds();
    return s;
}

bool srv_metrics_queue_full(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    bool full = m->slots > 0 && m->running >= m->slots && m->waiting >= m->max_queue;
    pthread_mutex_unlock(&m->mu);
    return full;
}

bool srv_metrics_device_lost(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    const ig_context *ctx = m->ctx;
    pthread_mutex_unlock(&m->mu);
    ig_device_stats d;
    return ctx && ig_context_device_stats(ctx, &d) == IG_OK && d.device_lost;
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

/* One histogram's series; label: another label of every series
 * ("phase=\"decode\"") or NULL. */
static bool render_hist_series(srv_buf *b, const char *name, const char *label, const srv_hist *h) {
    const char *l = label ? label : "", *sep = label ? "," : "";
    bool ok = true;
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        ok = ok && srv_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, l, sep, h->bounds[i],
                                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    ok = ok && srv_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep, (unsigned long long)cum);
    const char *lo = label ? "{" : "", *lc = label ? "}" : "";
    ok = ok && srv_buf_printf(b, "%s_sum%s%s%s %.9g\n%s_count%s%s%s %llu\n", name, lo, l, lc, h->sum, name, lo, l,
                              lc, (unsigned long long)h->count);
    return ok;
}

static bool render_hist(srv_buf *b, const char *name, const char *help, const srv_hist *h) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name) &&
           render_hist_series(b, name, NULL, h);
}

static bool render_counter(srv_buf *b, const char *name, const char *help, uint64_t v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                          (unsigned long long)v);
}

static bool render_gauge(srv_buf *b, const char *name, const char *help, double v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.9g\n", name, help, name, name, v);
}

/* A gauge with one label, e.g. device="vulkan". */
static bool render_gauge_l(srv_buf *b, const char *name, const char *help, const char *label, double v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %.9g\n", name, help, name, name, label, v);
}

/* An integer gauge (bytes: every digit), with a label or none. */
static bool render_gauge_int(srv_buf *b, const char *name, const char *help, const char *label,
                             unsigned long long v) {
    return srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s%s%s%s %llu\n", name, help, name, name,
                          label ? "{" : "", label ? label : "", label ? "}" : "", v);
}

/* Process, device and engine numbers. */
static bool render_resources(srv_buf *b, const srv_snapshot *sn) {
    bool ok = true;
    if (sn->rss >= 0)
        ok = ok && render_gauge_int(b, "process_resident_memory_bytes", "Resident memory size in bytes.", NULL,
                                    (unsigned long long)sn->rss);
    if (sn->peak_rss >= 0)
        ok = ok && render_gauge_int(b, "ignis_process_peak_resident_memory_bytes",
                                    "Largest resident memory size so far in bytes.", NULL,
                                    (unsigned long long)sn->peak_rss);
    ok = ok && srv_buf_printf(b, "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                                 "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                                 "process_cpu_seconds_total %.9g\n", sn->cpu_seconds);
    if (sn->open_fds >= 0)
        ok = ok && render_gauge(b, "process_open_fds", "Number of open file descriptors.", sn->open_fds);
    if (sn->max_fds >= 0)
        ok = ok && render_gauge(b, "process_max_fds", "Maximum number of open file descriptors.",
                                (double)sn->max_fds);
    if (!sn->have_device) return ok;
    const ig_device_stats *d = &sn->dev;
    const char *dev = d->backend == IG_BACKEND_VULKAN ? "device=\"vulkan\"" : "device=\"cpu\"";
    ok = ok && render_gauge_int(b, "ignis_device_memory_used_bytes", "Device memory in use: the device-local "
                                "heaps' usage by every process where the device reports it, else what the "
                                "engine allocated (CPU: weights and KV cache).", dev, d->used_bytes);
    ok = ok && render_gauge_int(b, "ignis_device_memory_budget_bytes", "Device memory this process may use: "
                                "the memory budget where the device reports it, else the device-local heaps' "
                                "size (CPU: physical memory).", dev, d->budget_bytes);
    ok = ok && render_gauge_int(b, "ignis_device_memory_allocated_bytes", "Device memory the engine "
                                "allocated (CPU: weights and KV cache).", dev, d->allocated_bytes);
    ok = ok && render_gauge_int(b, "ignis_model_weight_bytes", "Bytes of the model's weights.", NULL,
                                d->weight_bytes);
    ok = ok && render_gauge_int(b, "ignis_kv_cache_bytes", "Bytes of the KV cache (every slot).", NULL,
                                d->kv_bytes);
    if (d->busy_measured) {
        ok = ok && srv_buf_printf(b, "# HELP ignis_device_busy_seconds_total Device time spent executing the "
                                     "engine's steps (GPU timestamps).\n# TYPE ignis_device_busy_seconds_total "
                                     "counter\nignis_device_busy_seconds_total{%s} %.9g\n", dev,
                                  (double)d->busy_ns * 1e-9);
        if (sn->have_rates)
            ok = ok && render_gauge_l(b, "ignis_device_busy_ratio", "Fraction of the last "
                                      "ignis_rate_window_seconds the device spent executing the engine's "
                                      "steps.", dev, sn->rates.busy_ratio);
    }
    ok = ok && render_gauge(b, "ignis_device_lost", "1 once the GPU reported the device lost.",
                            d->device_lost ? 1 : 0);
    if (sn->have_rates) {
        ok = ok && render_gauge(b, "ignis_decode_tokens_per_second", "Tokens generated per second over the "
                                "last ignis_rate_window_seconds.", sn->rates.decode_tps);
        ok = ok && render_gauge(b, "ignis_prefill_tokens_per_second", "Prompt tokens computed per second "
                                "over the last ignis_rate_window_seconds.", sn->rates.prefill_tps);
        ok = ok && render_gauge(b, "ignis_rate_window_seconds", "The time the rates cover: back to the "
                                "newest sample at least 10 s old (samples: each scrape or status poll, at "
                                "most one a second).", sn->rates.window_s);
    }
    return ok;
}

bool srv_metrics_render(srv_metrics *m, srv_buf *b) {
    srv_snapshot *sn = srv_metrics_snapshot(m);
    if (!sn) return false;
    const srv_metrics s = sn->m;

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
    ok = ok && render_gauge(b, "ignis_kv_cache_sequences", "Sequences holding positions in the KV cache.",
                            s.kv_sequences);
    ok = ok && render_gauge(b, "ignis_model_ready", "1 once the model is loaded.", s.ready ? 1 : 0);
    ok = ok && srv_buf_puts(b, "# HELP ignis_engine_step_seconds Duration of one engine step (ig_decode), "
                               "by whether it held prompt tokens.\n# TYPE ignis_engine_step_seconds histogram\n");
    ok = ok && render_hist_series(b, "ignis_engine_step_seconds", "phase=\"decode\"", &s.step_decode);
    ok = ok && render_hist_series(b, "ignis_engine_step_seconds", "phase=\"prefill\"", &s.step_prefill);
    ok = ok && render_resources(b, sn);
    free(sn);
    return ok;
}
