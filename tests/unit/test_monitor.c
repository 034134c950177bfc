/* Monitoring: the /proc readers of src/server/proc.c, the rates of
 * /metrics (srv_rates_update), ig_context_device_stats on the CPU and on a
 * Vulkan device (busy time from timestamps, memory), and the new /metrics
 * series and /health's queue check. */
#include "test.h"

#include "core/util.h"
#include "ignis.h"
#include "server/metrics.h"
#include "server/proc.h"
#include "server/webui.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

IG_TEST(monitor_proc_parsers) {
    CHECK(srv_proc_parse_statm("61234 5678 1234 12 0 4567 0\n", 4096) == 5678LL * 4096);
    CHECK(srv_proc_parse_statm("  7 3", 65536) == 3LL * 65536);
    CHECK(srv_proc_parse_statm("61234\n", 4096) == -1);
    CHECK(srv_proc_parse_statm("a 5", 4096) == -1);
    CHECK(srv_proc_parse_statm("", 4096) == -1);
    CHECK(srv_proc_parse_statm(NULL, 4096) == -1);
    CHECK(srv_proc_parse_statm("1 2", 0) == -1);
    CHECK(srv_proc_parse_statm("1 99999999999999999999", 4096) == -1); /* overflows strtoull */
    CHECK(srv_proc_parse_statm("1 9000000000000000", 4096) == -1);     /* overflows the product */

    const char *status = "Name:\tignis\nVmPeak:\t  812345 kB\nVmHWM:\t  40960 kB\nVmRSS:\t   1024 kB\n"
                         "Threads:\t4\nVmBad:\t12 MB\n";
    CHECK(srv_proc_parse_status_kb(status, "VmHWM") == 40960LL * 1024);
    CHECK(srv_proc_parse_status_kb(status, "VmRSS") == 1024LL * 1024);
    CHECK(srv_proc_parse_status_kb(status, "VmPeak") == 812345LL * 1024);
    CHECK(srv_proc_parse_status_kb(status, "VmSwap") == -1);
    CHECK(srv_proc_parse_status_kb(status, "Threads") == -1); /* no unit */
    CHECK(srv_proc_parse_status_kb(status, "VmBad") == -1);
    CHECK(srv_proc_parse_status_kb(status, "Vm") == -1); /* a prefix is not a key */
    CHECK(srv_proc_parse_status_kb(status, "") == -1);

    char dir[] = "/tmp/ignis-monitor-XXXXXX";
    REQUIRE(mkdtemp(dir));
    CHECK_EQ_INT(srv_proc_count_dir(dir), 0);
    char path[64];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fclose(f);
    }
    CHECK_EQ_INT(srv_proc_count_dir(dir), 3);
    CHECK_EQ_INT(srv_proc_count_dir("/nonexistent/ignis"), -1);

    /* this process: an open file adds exactly one descriptor */
    int before = srv_process_open_fds();
    CHECK(before >= 1);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    CHECK_EQ_INT(srv_process_open_fds(), before + 1);
    close(fd);
    CHECK_EQ_INT(srv_process_open_fds(), before);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/f%d", dir, i);
        unlink(path);
    }
    rmdir(dir);

    long long rss = srv_process_rss_bytes(), peak = srv_process_peak_rss_bytes();
    CHECK(rss > 1 << 20 && rss < (1LL << 40));
    CHECK(peak > 1 << 20);
    CHECK(srv_process_max_fds() == -1 || srv_process_max_fds() > before);
}

IG_TEST(monitor_rates_window) {
    srv_rate_ring r;
    memset(&r, 0, sizeof r);
    srv_rates out;
    srv_rate_sample s = {100.0, 0, 0, 0};
    CHECK(!srv_rates_update(&r, &s, &out)); /* nothing earlier */
    CHECK_EQ_INT(r.n, 1);
    /* 10 tokens/s generated, 40 prefilled, the device busy half the time,
     * one sample a second for 30 s */
    for (int k = 1; k <= 30; k++) {
        s = (srv_rate_sample){100.0 + k, 10u * (uint64_t)k, 40u * (uint64_t)k, 500000000ull * (uint64_t)k};
        REQUIRE(srv_rates_update(&r, &s, &out));
    }
    CHECK_NEAR(out.window_s, 10.0, 1e-9);
    CHECK_NEAR(out.decode_tps, 10.0, 1e-9);
    CHECK_NEAR(out.prefill_tps, 40.0, 1e-9);
    CHECK_NEAR(out.busy_ratio, 0.5, 1e-9);
    CHECK_EQ_INT(r.n, 31);
    /* a request 0.3 s later adds no sample, and sees 10.3 s */
    s.t += 0.3;
    s.generated += 3;
    REQUIRE(srv_rates_update(&r, &s, &out));
    CHECK_EQ_INT(r.n, 31);
    CHECK_NEAR(out.window_s, 10.3, 1e-9);
    CHECK_NEAR(out.decode_tps, 103.0 / 10.3, 1e-9);
    /* idle for a minute: the window reaches back to the last sample (t = 130) */
    s.t += 60;
    REQUIRE(srv_rates_update(&r, &s, &out));
    CHECK_NEAR(out.window_s, 60.3, 1e-9);
    CHECK_NEAR(out.decode_tps, 3.0 / 60.3, 1e-9);
    CHECK_NEAR(out.busy_ratio, 0.0, 1e-12);
    /* the ring wraps: 40 more samples keep the newest 32 */
    for (int k = 1; k <= 40; k++) {
        s.t += 2;
        s.busy_ns += 4000000000ull; /* more than the wall time: capped at 1 */
        srv_rates_update(&r, &s, &out);
    }
    CHECK_EQ_INT(r.n, SRV_RATE_SAMPLES);
    CHECK_NEAR(out.window_s, 10.0, 1e-9);
    CHECK_NEAR(out.busy_ratio, 1.0, 0);
    /* a counter going back (never happens) gives 0, not a huge rate */
    s.t += 1;
    s.generated = 0;
    REQUIRE(srv_rates_update(&r, &s, &out));
    CHECK_NEAR(out.decode_tps, 0.0, 0);
}

static ig_model *load_tiny(ig_backend_kind be) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/tiny-1b-like/f32", ig_test_fixtures());
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    mp.backend = be;
    ig_model *m = NULL;
    if (ig_model_load(path, &mp, &m) != IG_OK) {
        fprintf(stderr, "  cannot load %s: %s\n", path, ig_last_error());
        return NULL;
    }
    return m;
}

/* A few decode steps on ctx (sequence 0). */
static ig_status decode_some(ig_context *ctx, int n) {
    int32_t tok[8], pos[8], seq[8];
    for (int i = 0; i < 8; i++) tok[i] = 10 + i, pos[i] = i, seq[i] = 0;
    ig_batch b = {.n_tokens = 8, .tokens = tok, .pos = pos, .seq = seq, .want_logits = NULL};
    ig_status st = ig_decode(ctx, &b);
    for (int k = 0; k < n && st == IG_OK; k++) {
        int32_t t = 20 + k, p = 8 + k, s = 0;
        ig_batch one = {.n_tokens = 1, .tokens = &t, .pos = &p, .seq = &s, .want_logits = NULL};
        st = ig_decode(ctx, &one);
    }
    return st;
}

IG_TEST(monitor_device_stats_cpu) {
    ig_model *m = load_tiny(IG_BACKEND_CPU);
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq = 2;
    cp.n_batch = 16;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    ig_device_stats d;
    CHECK_STATUS(ig_context_device_stats(NULL, &d), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_context_device_stats(ctx, NULL), IG_ERR_INVALID_ARG);
    REQUIRE_OK(ig_context_device_stats(ctx, &d));
    const ig_hparams *hp = ig_model_hparams(m);
    CHECK(d.backend == IG_BACKEND_CPU);
    CHECK_EQ_INT(d.weight_bytes, ig_model_weight_bytes(m));
    /* every layer keeps min(n_ctx, window + n_batch - 1) rows of K and V per sequence */
    uint64_t kv = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int cap = cp.n_ctx;
        if (hp->layer_is_swa[l] && hp->sliding_window + cp.n_batch - 1 < cap) cap = hp->sliding_window + cp.n_batch - 1;
        kv += (uint64_t)cp.n_seq * (uint64_t)cap * 2 /* f16 */ * (uint64_t)hp->n_head_kv *
              (uint64_t)(hp->head_dim + hp->head_dim_v);
    }
    CHECK_EQ_INT(d.kv_bytes, kv);
    CHECK_EQ_INT(d.allocated_bytes, d.weight_bytes + d.kv_bytes);
    CHECK_EQ_INT(d.used_bytes, d.allocated_bytes);
    CHECK(d.budget_bytes > d.used_bytes);
    CHECK(!d.busy_measured && d.busy_ns == 0 && !d.memory_budget && !d.device_lost);

    /* the /metrics series of the attached context */
    srv_metrics mt;
    srv_metrics_init(&mt);
    mt.slots = 2;
    srv_metrics_attach(&mt, ctx, 1);
    REQUIRE_OK(decode_some(ctx, 2));
    srv_hist_observe(&mt.step_decode, 0.004);
    srv_hist_observe(&mt.step_prefill, 0.3);
    mt.kv_sequences = 1;
    srv_buf b = {0};
    REQUIRE(srv_metrics_render(&mt, &b));
    char want[256];
    snprintf(want, sizeof want, "\nignis_kv_cache_bytes %llu\n", (unsigned long long)kv);
    CHECK(strstr(b.data, want));
    snprintf(want, sizeof want, "\nignis_device_memory_used_bytes{device=\"cpu\"} %llu\n",
             (unsigned long long)(d.weight_bytes + kv));
    CHECK(strstr(b.data, want));
    CHECK(strstr(b.data, "\nignis_device_memory_budget_bytes{device=\"cpu\"} "));
    CHECK(strstr(b.data, "\nignis_kv_cache_sequences 1\n"));
    CHECK(strstr(b.data, "\nignis_engine_step_seconds_bucket{phase=\"decode\",le=\"0.005\"} 1\n"));
    CHECK(strstr(b.data, "\nignis_engine_step_seconds_bucket{phase=\"decode\",le=\"0.0025\"} 0\n"));
    CHECK(strstr(b.data, "\nignis_engine_step_seconds_bucket{phase=\"prefill\",le=\"0.25\"} 0\n"));
    CHECK(strstr(b.data, "\nignis_engine_step_seconds_bucket{phase=\"prefill\",le=\"+Inf\"} 1\n"));
    CHECK(strstr(b.data, "\nignis_engine_step_seconds_count{phase=\"prefill\"} 1\n"));
    CHECK(strstr(b.data, "\n# TYPE ignis_engine_step_seconds histogram\n"));
    CHECK(strstr(b.data, "\n# TYPE process_cpu_seconds_total counter\n"));
    CHECK(strstr(b.data, "\nprocess_open_fds "));
    CHECK(strstr(b.data, "\nignis_decode_tokens_per_second 0\n"));
    CHECK(strstr(b.data, "\nignis_device_lost 0\n"));
    CHECK(!strstr(b.data, "ignis_device_busy")); /* not measured on the CPU */
    const char *r = strstr(b.data, "\nprocess_resident_memory_bytes ");
    REQUIRE(r);
    long long rss = atoll(r + strlen("\nprocess_resident_memory_bytes "));
    CHECK(rss > (long long)d.kv_bytes && rss < (1LL << 40));
    srv_buf_free(&b);

    /* the status document's device part */
    srv_status_info in = {.model_id = "tiny", .state = "ready", .backend = "cpu", .n_ctx = 64,
                          .n_parallel = 2, .n_batch = 16, .vision = false};
    json_t *j = srv_status_json(&in, &mt);
    REQUIRE(j);
    json_t *dm = json_object_get(j, "device_memory");
    CHECK(json_integer_value(json_object_get(dm, "kv_bytes")) == (json_int_t)kv);
    CHECK(json_integer_value(json_object_get(dm, "used_bytes")) == (json_int_t)(d.weight_bytes + kv));
    CHECK(!strcmp(json_string_value(json_object_get(dm, "source")), "host"));
    CHECK(json_is_null(json_object_get(j, "device_busy")));
    CHECK(json_is_false(json_object_get(json_object_get(j, "model"), "vision")));
    CHECK(json_integer_value(json_object_get(json_object_get(j, "process"), "open_fds")) > 0);
    json_decref(j);

    /* /health's check: slots and queue full */
    mt.running = 2;
    mt.waiting = 0;
    CHECK(!srv_metrics_queue_full(&mt));
    mt.waiting = 1;
    CHECK(srv_metrics_queue_full(&mt));
    mt.running = 1;
    CHECK(!srv_metrics_queue_full(&mt));
    CHECK(!srv_metrics_device_lost(&mt));
    srv_metrics_destroy(&mt);
    ig_context_free(ctx);
    ig_model_free(m);
}

IG_TEST(monitor_device_stats_vulkan) {
#ifdef IGNIS_HAVE_VULKAN
    ig_vk_device_info *infos = NULL;
    int n = 0;
    bool have = false;
    if (ig_vk_list_devices(&infos, &n) == IG_OK)
        for (int i = 0; i < n; i++) have |= infos[i].usable;
    free(infos);
    if (!have) {
        ig_test_skip("no usable Vulkan device");
        return;
    }
    ig_model *m = load_tiny(IG_BACKEND_VULKAN);
    REQUIRE(m);
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    ig_device_stats d0, d1;
    REQUIRE_OK(ig_context_device_stats(ctx, &d0));
    CHECK(d0.backend == IG_BACKEND_VULKAN);
    /* the weights and the cache are on the device, with the activations */
    CHECK(d0.allocated_bytes >= d0.weight_bytes + d0.kv_bytes);
    CHECK(d0.used_bytes > 0 && d0.budget_bytes > d0.used_bytes);
    if (!d0.memory_budget) CHECK_EQ_INT(d0.used_bytes, d0.allocated_bytes);
    double t0 = ig_time_now();
    REQUIRE_OK(decode_some(ctx, 3));
    double wall = ig_time_now() - t0;
    REQUIRE_OK(ig_context_device_stats(ctx, &d1));
    if (d1.busy_measured) {
        /* four steps ran on the GPU, within the wall time they took */
        uint64_t busy = d1.busy_ns - d0.busy_ns;
        CHECK(busy > 0);
        CHECK((double)busy * 1e-9 <= wall * 1.05 + 1e-3);
    } else {
        ig_test_skip("the device has no timestamps on its compute queue");
    }
    CHECK(!d1.device_lost);
    ig_context_free(ctx);
    ig_model_free(m);
#else
    ig_test_skip("built without the Vulkan backend");
#endif
}
