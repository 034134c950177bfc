#define _GNU_SOURCE
#include "cli.h"

#include "core/util.h"
#include "gen_options.h"
#include "server/server.h"

#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: ignis serve [MODEL] [options]\n\n"
            "OpenAI-compatible HTTP server with continuous batching.\n\n"
            "  --host ADDR          address to bind (default 127.0.0.1)\n"
            "  --port N             port (default 8006; 0 = any free port)\n"
            "  --parallel N, -np N  concurrent sequences (slots) (default 4)\n"
            "  --ctx N, -c N        context positions per slot (default: min(train, 4096))\n"
            "  --batch N, -b N      tokens per engine step (prefill chunk bound) (default 256)\n"
            "  --api-key KEY        require 'Authorization: Bearer KEY' (all but /health)\n"
            "  --api-key-file F     read the key from the first line of F\n"
            "  --max-queue N        sequences that may wait for a slot (default 64)\n"
            "  --max-body BYTES     largest request body (default 16777216)\n"
            "  --timeout-s S        close a connection idle for S seconds (default 60; also --timeout)\n"
            "  --max-connections N  open connections at once (default 256)\n"
            "  --max-connections-per-ip N  from one client address (default 0: no limit)\n"
            "  --grace S            on SIGINT/SIGTERM, let requests finish for S s (default 10)\n"
            "  --alias NAME         model id shown in /v1/models (default: file name)\n"
            "  --mmproj FILE        the vision tower (llama.cpp mmproj GGUF) for image inputs; an\n"
            "                       mmproj*.gguf next to a GGUF model is found without it\n"
            "  -t N, --threads N    compute threads (default: physical cores)\n"
            "  --backend cpu|vulkan, --device N\n"
            "  --quant q8_0|q4_0|q4_k  quantize F32/F16/BF16 weights at load (no file written)\n"
            "  --quiet              no per-request log lines\n"
            "  --no-webui           no web chat and dashboard at / (default: served)\n"
            "  --cors-origin ORIGIN allow browsers on ORIGIN (or *) to call the API (CORS)\n");
    fprintf(f, "Speculative decoding for every request (off per request with \"speculative\": false):\n");
    spec_options_help(f);
}

static char *read_key_file(const char *path) {
    char *data = NULL;
    size_t len = 0;
    if (ig_file_read_all(path, 1 << 16, &data, &len) != IG_OK) {
        fprintf(stderr, "ignis serve: cannot read --api-key-file %s: %s\n", path, ig_last_error());
        return NULL;
    }
    size_t n = strcspn(data, "\r\n");
    data[n] = '\0';
    while (n && (data[n - 1] == ' ' || data[n - 1] == '\t')) data[--n] = '\0';
    char *start = data;
    while (*start == ' ' || *start == '\t') start++;
    if (!*start) {
        fprintf(stderr, "ignis serve: --api-key-file %s is empty\n", path);
        free(data);
        return NULL;
    }
    memmove(data, start, strlen(start) + 1);
    return data;
}

/* During the drain a second SIGINT/SIGTERM cuts the grace period short. */
typedef struct sig_watch {
    ig_server *srv;
    sigset_t set;
    atomic_int done;
} sig_watch;

static void *watch_second_signal(void *arg) {
    sig_watch *w = arg;
    while (!atomic_load(&w->done)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&w->set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "ignis serve: second signal, cancelling running requests\n");
            ig_server_abort_grace(w->srv);
        }
    }
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    ig_server_params p = ig_server_default_params();
    const char *model = NULL, *key = NULL, *key_file = NULL, *mmproj = NULL;
    double grace = 10.0;
    long v;
    double d;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int sr;
#define INT_OPT(name, lo, hi, dst)                                                                 \
    do {                                                                                           \
        if (cli_parse_int(name, val, lo, hi, &v)) return 2;                                        \
        dst = v;                                                                                   \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--host")) {
            if (!val) {
                fprintf(stderr, "ignis: --host needs a value\n");
                return 2;
            }
            p.host = val;
            i++;
        } else if (!strcmp(a, "--port")) INT_OPT("--port", 0, 65535, p.port);
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) INT_OPT(a, 1, 256, p.n_parallel);
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) INT_OPT(a, 0, 1 << 24, p.n_ctx);
        else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) INT_OPT(a, 1, 1 << 16, p.n_batch);
        else if (!strcmp(a, "--max-queue")) INT_OPT(a, 0, 1 << 20, p.max_queue);
        else if (!strcmp(a, "--max-body")) {
            if (cli_parse_int(a, val, 1, 1L << 40, &v)) return 2;
            p.max_body = (size_t)v;
            i++;
        } else if (!strcmp(a, "--timeout") || !strcmp(a, "--timeout-s"))
            INT_OPT(a, 1, 86400 * 7, p.timeout_s);
        else if (!strcmp(a, "--max-connections")) INT_OPT(a, 1, 65536, p.max_connections);
        else if (!strcmp(a, "--max-connections-per-ip"))
            INT_OPT(a, 0, 65536, p.max_connections_per_ip);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT_OPT(a, 0, 1024, p.n_threads);
        else if (!strcmp(a, "--device")) INT_OPT(a, 0, 64, p.device);
        else if (!strcmp(a, "--grace")) {
            if (cli_parse_float(a, val, 0, 86400, &d)) return 2;
            grace = d;
            i++;
        } else if (!strcmp(a, "--backend")) {
            if (cli_parse_backend(val, &p.backend)) return 2;
            i++;
        } else if (!strcmp(a, "--quant")) {
            if (cli_parse_quant(val, &p.quant)) return 2;
            i++;
        } else if (!strcmp(a, "--api-key")) {
            if (!val || !*val) {
                fprintf(stderr, "ignis: --api-key needs a non-empty value\n");
                return 2;
            }
            key = val;
            i++;
        } else if (!strcmp(a, "--api-key-file")) {
            if (!val) {
                fprintf(stderr, "ignis: --api-key-file needs a value\n");
                return 2;
            }
            key_file = val;
            i++;
        } else if (!strcmp(a, "--mmproj")) {
            if (!val) {
                fprintf(stderr, "ignis: --mmproj needs a value\n");
                return 2;
            }
            mmproj = val;
            i++;
        } else if (!strcmp(a, "--alias")) {
            if (!val) {
                fprintf(stderr, "ignis: --alias needs a value\n");
                return 2;
            }
            p.model_alias = val;
            i++;
        } else if ((sr = spec_options_parse(&p.draft_path, &p.lookup, &p.spec, argc, argv, &i)) != 0) {
            if (sr < 0) return 2;
        } else if (!strcmp(a, "--quiet")) p.log_requests = 0;
        /* testing: keep /health at 503 this long before loading; hold each
           generation this long between its checks and its submission */
        else if (!strcmp(a, "--debug-load-delay-ms")) INT_OPT(a, 0, 3600 * 1000, p.load_delay_ms);
        else if (!strcmp(a, "--debug-submit-delay-ms")) INT_OPT(a, 0, 3600 * 1000, p.submit_delay_ms);
        /* testing: the device reports lost / out of memory at engine step N */
        else if (!strcmp(a, "--debug-device-lost-step")) {
            INT_OPT(a, 1, INT32_MAX, p.fault_step);
            p.fault_kind = 1;
        } else if (!strcmp(a, "--debug-device-oom-step")) {
            INT_OPT(a, 1, INT32_MAX, p.fault_step);
            p.fault_kind = 2;
        }
        else if (!strcmp(a, "--no-webui")) p.webui = 0;
        else if (!strcmp(a, "--cors-origin")) {
            if (!val || !*val) {
                fprintf(stderr, "ignis: --cors-origin needs a value (an origin such as "
                                "http://localhost:3000, or *)\n");
                return 2;
            }
            p.cors_origin = val;
            i++;
        }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis serve: unknown option '%s'\n\n", a);
            serve_usage(stderr);
            return 2;
        } else if (!model) model = a;
        else {
            fprintf(stderr, "ignis serve: more than one MODEL given ('%s')\n", a);
            return 2;
        }
#undef INT_OPT
    }
    if (key && key_file) {
        fprintf(stderr, "ignis serve: use either --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (!model) model = cli_default_model();
    if (!model || access(model, R_OK) != 0) {
        fprintf(stderr,
                "ignis serve: model %s is missing or unreadable.\n"
                "Fetch the default one with:  make model   (or scripts/fetch-model.sh)\n",
                model ? model : "(none)");
        return 1;
    }
    p.model_path = model;
    p.device_tuning = cli_vk_tuning;
    p.deterministic = cli_deterministic;
    if (p.draft_path && p.lookup) {
        fprintf(stderr, "ignis serve: --draft and --lookup are exclusive\n");
        return 2;
    }
    if (p.spec.draft_min > p.spec.draft_max) {
        fprintf(stderr, "ignis serve: --draft-min %d exceeds --draft-max %d\n", p.spec.draft_min,
                p.spec.draft_max);
        return 2;
    }
    if (p.draft_path && access(p.draft_path, R_OK) != 0) {
        fprintf(stderr, "ignis serve: the draft model %s is missing or unreadable\n", p.draft_path);
        return 1;
    }
    p.mmproj = mmproj;
    char *file_key = NULL;
    if (key_file) {
        file_key = read_key_file(key_file);
        if (!file_key) return 1;
        key = file_key;
    }
    p.api_key = key;

    /* Signals: block them in every thread and wait for them here. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, &set, &old);
    (void)old;
    signal(SIGPIPE, SIG_IGN);
#if defined(__GLIBC__)
    /* glibc keeps freed memory in per-thread arenas (the server runs a
     * thread per connection) and raises its mmap threshold after each large
     * free, so under a long mixed load RSS crept up by tens of MiB without
     * a leak (docs/benchmarks/2026-12-02-soak.md). One arena, and blocks of
     * 64 KiB and more mapped and unmapped, keep it flat. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 64 << 10);
    mallopt(M_TRIM_THRESHOLD, 64 << 10);
#endif

    ig_server *srv = NULL;
    ig_status st = ig_server_start(&p, &srv);
    if (st != IG_OK) {
        fprintf(stderr, "ignis serve: %s\n", *ig_last_error() ? ig_last_error() : ig_status_str(st));
        free(file_key);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    fprintf(stderr, "ignis serve: listening on http://%s%s%s:%d (loading %s)%s\n",
            strchr(p.host, ':') ? "[" : "", p.host, strchr(p.host, ':') ? "]" : "",
            ig_server_port(srv), model, key ? ", API key required" : "");
    if (p.webui) {
        /* a wildcard bind is reached through loopback on this machine */
        const char *h = p.host;
        if (!strcmp(h, "0.0.0.0")) h = "127.0.0.1";
        else if (!strcmp(h, "::")) h = "::1";
        fprintf(stderr, "ignis serve: chat and dashboard: http://%s%s%s:%d/\n",
                strchr(h, ':') ? "[" : "", h, strchr(h, ':') ? "]" : "", ig_server_port(srv));
    }
    int rc = 0;
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "ignis serve: %s received, shutting down\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
        if (ig_server_state(srv, NULL, 0) < 0) {
            rc = 1;
            break;
        }
    }
    sig_watch w = {.srv = srv, .set = set};
    atomic_init(&w.done, 0);
    pthread_t watcher;
    bool watching = pthread_create(&watcher, NULL, watch_second_signal, &w) == 0;
    ig_server_shutdown(srv, rc ? 0 : grace);
    if (watching) {
        atomic_store(&w.done, 1);
        pthread_join(watcher, NULL);
    }
    free(file_key);
    /* Signals stay blocked: one arriving now must not kill a clean exit. */
    fprintf(stderr, "ignis serve: stopped\n");
    return rc;
}
