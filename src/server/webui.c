#define _GNU_SOURCE
#include "server/webui.h"

#include "core/util.h"
#include "server/request.h"
#include "server/respond.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const srv_webui_headers[] = {
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options", "nosniff",
    "Referrer-Policy", "no-referrer",
    "X-Frame-Options", "DENY",
    "Cache-Control", "no-cache",
    NULL,
};

static const char *type_of(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    return "application/octet-stream";
}

const srv_webui_file *srv_webui_find(const char *url, const char **ctype) {
    if (!url) return NULL;
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < srv_webui_n_files; i++)
        if (!strcmp(url, srv_webui_files[i].path)) {
            if (ctype) *ctype = type_of(url);
            return &srv_webui_files[i];
        }
    return NULL;
}

size_t srv_webui_total_bytes(void) {
    size_t n = 0;
    for (size_t i = 0; i < srv_webui_n_files; i++) n += srv_webui_files[i].len;
    return n;
}

/* "model name" of /proc/cpuinfo, read once. */
static char cpu_name[128];
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void read_cpu_name(void) {
    snprintf(cpu_name, sizeof cpu_name, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5)) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t n = strcspn(c, "\r\n");
        if (!n) continue;
        snprintf(cpu_name, sizeof cpu_name, "%.*s", (int)n, c);
        break;
    }
    fclose(f);
}

/* The sampling defaults are what the request parser fills in for a request
 * that sets nothing. */
static json_t *sampling_defaults(void) {
    static const char body[] = "{\"prompt\":\"x\"}";
    srv_request r;
    srv_error e;
    if (!srv_parse_request(SRV_COMPLETION, body, sizeof body - 1, NULL, &r, &e)) return NULL;
    json_t *j = json_object();
    if (j) {
        json_object_set_new(j, "temperature", json_real(r.temperature));
        json_object_set_new(j, "top_p", json_real(r.top_p));
        json_object_set_new(j, "top_k", json_integer(r.top_k));
        json_object_set_new(j, "min_p", json_real(r.min_p));
        json_object_set_new(j, "max_tokens", json_null()); /* the rest of the context */
        json_object_set_new(j, "seed", json_null());       /* random */
    }
    srv_request_free(&r);
    return j;
}

static int set(json_t *o, const char *k, json_t *v) { return json_object_set_new(o, k, v); }

/* device_memory and device_busy of the status document (null without an
 * engine; device_busy null where the device's time is not measured). */
static int set_device(json_t *j, const srv_snapshot *sn) {
    if (!sn->have_device)
        return set(j, "device_memory", json_null()) | set(j, "device_busy", json_null());
    const ig_device_stats *d = &sn->dev;
    json_t *mem = json_object();
    if (!mem) return -1;
    int e = 0;
    e |= set(mem, "used_bytes", json_integer((json_int_t)d->used_bytes));
    e |= set(mem, "budget_bytes", json_integer((json_int_t)d->budget_bytes));
    e |= set(mem, "allocated_bytes", json_integer((json_int_t)d->allocated_bytes));
    e |= set(mem, "weight_bytes", json_integer((json_int_t)d->weight_bytes));
    e |= set(mem, "kv_bytes", json_integer((json_int_t)d->kv_bytes));
    e |= set(mem, "source", json_string(d->backend != IG_BACKEND_VULKAN ? "host"
                                        : d->memory_budget         ? "memory_budget"
                                                                   : "heaps"));
    e |= set(j, "device_memory", mem);
    if (d->busy_measured) {
        json_t *busy = json_object();
        if (!busy) return -1;
        e |= set(busy, "seconds", json_real((double)d->busy_ns * 1e-9));
        e |= set(j, "device_busy", busy);
    } else {
        e |= set(j, "device_busy", json_null());
    }
    e |= set(j, "device_lost", json_boolean(d->device_lost));
    return e;
}

json_t *srv_status_json(const srv_status_info *in, srv_metrics *m) {
    srv_snapshot *sn = srv_metrics_snapshot(m);
    if (!sn) return NULL;
    const srv_metrics s = sn->m;
    pthread_once(&cpu_once, read_cpu_name);

    json_t *j = json_object(), *model = json_object(), *eng = json_object(),
           *tok = json_object(), *seq = json_object(), *kv = json_object(),
           *proc = json_object(), *http = json_object(), *defs = sampling_defaults();
    if (!j || !model || !eng || !tok || !seq || !kv || !proc || !http || !defs) {
        json_decref(j);
        json_decref(model);
        json_decref(eng);
        json_decref(tok);
        json_decref(seq);
        json_decref(kv);
        json_decref(proc);
        json_decref(http);
        json_decref(defs);
        free(sn);
        return NULL;
    }
    double now = ig_time_now();
    int e = 0;
    e |= set(j, "object", json_string("ignis.status"));
    e |= set(j, "time", json_real(now));
    e |= set(j, "uptime_s", json_real(now - in->started));
    e |= set(j, "state", json_string(in->state));
    e |= set(j, "api_key_required", json_boolean(in->api_key));

    e |= set(model, "id", srv_json_text(in->model_id, strlen(in->model_id)));
    e |= set(model, "n_ctx", json_integer(in->n_ctx));
    e |= set(model, "vision", json_boolean(in->vision));
    e |= set(j, "model", model);

    bool vk = !strcmp(in->backend, "vulkan");
    e |= set(eng, "backend", json_string(in->backend));
    if (vk) {
        char d[32];
        snprintf(d, sizeof d, "Vulkan device %d", in->device);
        e |= set(eng, "device", json_string(d));
    } else {
        e |= set(eng, "device", srv_json_text(cpu_name, strlen(cpu_name)));
    }
    e |= set(eng, "threads", in->n_threads > 0 ? json_integer(in->n_threads) : json_null());
    e |= set(eng, "slots", json_integer(in->n_parallel));
    e |= set(eng, "batch", json_integer(in->n_batch));
    e |= set(eng, "decode_calls", json_integer((json_int_t)s.decode_calls));
    e |= set(j, "engine", eng);

    e |= set(tok, "prompt", json_integer((json_int_t)s.prompt_tokens));
    e |= set(tok, "prompt_cached", json_integer((json_int_t)s.cached_prompt_tokens));
    e |= set(tok, "prefill", json_integer((json_int_t)s.prefill_tokens));
    e |= set(tok, "generated", json_integer((json_int_t)s.generated_tokens));
    e |= set(j, "tokens", tok);

    e |= set(seq, "running", json_integer(s.running));
    e |= set(seq, "waiting", json_integer(s.waiting));
    e |= set(seq, "finished_stop", json_integer((json_int_t)s.requests_finished_stop));
    e |= set(seq, "finished_length", json_integer((json_int_t)s.requests_finished_length));
    e |= set(seq, "cancelled", json_integer((json_int_t)s.requests_cancelled));
    e |= set(j, "sequences", seq);

    uint64_t total = 0, errors = 0;
    for (int st = 100; st < 600; st++) {
        total += s.http_by_status[st];
        if (st >= 500) errors += s.http_by_status[st];
    }
    e |= set(http, "requests", json_integer((json_int_t)total));
    e |= set(http, "server_errors", json_integer((json_int_t)errors));
    e |= set(j, "http", http);

    e |= set(kv, "tokens", json_integer((json_int_t)s.kv_tokens));
    e |= set(kv, "capacity", json_integer((json_int_t)s.kv_capacity));
    e |= set(kv, "usage", json_real(s.kv_capacity > 0 ? (double)s.kv_tokens / (double)s.kv_capacity
                                                       : 0.0));
    e |= set(j, "kv_cache", kv);

    e |= set(proc, "rss_bytes", sn->rss >= 0 ? json_integer(sn->rss) : json_null());
    e |= set(proc, "peak_rss_bytes", sn->peak_rss >= 0 ? json_integer(sn->peak_rss) : json_null());
    e |= set(proc, "cpu_seconds", json_real(sn->cpu_seconds));
    e |= set(proc, "open_fds", sn->open_fds >= 0 ? json_integer(sn->open_fds) : json_null());
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    e |= set(proc, "cpus", json_integer(ncpu > 0 ? ncpu : 1));
    e |= set(j, "process", proc);

    e |= set_device(j, sn);
    e |= set(j, "defaults", defs);
    free(sn);
    if (e) {
        json_decref(j);
        return NULL;
    }
    return j;
}

bool srv_cors_headers_ok(const char *v) {
    if (!v) return false;
    size_t n = 0;
    for (const char *p = v; *p; p++, n++) {
        unsigned char c = (unsigned char)*p;
        if (n >= 1024) return false;
        if (isalnum(c) || c == '-' || c == '_' || c == ',' || c == ' ' || c == '.') continue;
        return false;
    }
    return n > 0;
}
