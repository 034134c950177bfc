/* ignis OpenAI-compatible HTTP server (libmicrohttpd + jansson).
 *
 * ig_server_start binds the socket, then loads the model in a background
 * thread (GET /health answers 503 until it is ready) and starts the
 * continuous-batching engine thread. Never calls exit(); installs no signal
 * handlers (the CLI owns signals). */
#ifndef IG_SERVER_H
#define IG_SERVER_H

#include "gen/spec.h"
#include "ignis.h"

#include <stddef.h>

typedef struct ig_server_params {
    const char *model_path;   /* required */
    const char *model_alias;  /* id in /v1/models; NULL: file name without .gguf */
    const char *host;         /* default "127.0.0.1" */
    int port;                 /* 0: any free port (see ig_server_port) */
    int n_parallel;           /* slots (sequences); default 4 */
    int n_ctx;                /* positions per slot; 0: engine default */
    int n_batch;              /* tokens per engine step; default 256 */
    int n_threads;            /* 0: engine default */
    const char *api_key;      /* NULL/"": no authentication */
    int max_queue;            /* sequences waiting beyond the slots; default 64 */
    size_t max_body;          /* bytes; default 16 MiB */
    int timeout_s;            /* idle connection timeout; default 60 */
    int max_connections;      /* open connections at once; default 256 */
    int max_connections_per_ip; /* from one client address; 0 (default): no such limit */
    int log_requests;         /* 1: one line per request on stderr (default) */
    ig_backend_kind backend;
    int device;
    int webui;                /* 1: serve the web page at / (default); 0: / is 404 */
    const char *cors_origin;  /* NULL: no CORS headers; else Access-Control-Allow-Origin */
    int load_delay_ms;        /* testing: wait this long before loading */
    int submit_delay_ms;      /* testing: wait this long before submitting a generation */
    int fault_step, fault_kind; /* testing: the device fails at this engine step (srv_sched_params) */
    const char *device_tuning; /* testing: GPU device tuning overrides (vk_tuning.h), or NULL */
    bool deterministic;        /* batch-invariant kernels (ig_model_params) */
    ig_weight_quant quant;     /* weights quantized at load (ig_model_params) */
    /* Speculative decoding for every request (a request may turn it off
     * with "speculative": false): a draft model, or prompt lookup. */
    const char *draft_path;   /* NULL: no draft model */
    bool lookup;
    ig_spec_params spec;      /* draft_max, draft_min, p_min, n-gram sizes */
    const char *mmproj;       /* the vision tower (llama.cpp mmproj GGUF), or NULL: the model's own,
                                 or an mmproj*.gguf next to a GGUF model */
} ig_server_params;

ig_server_params ig_server_default_params(void);

typedef struct ig_server ig_server;

ig_status ig_server_start(const ig_server_params *p, ig_server **out);
/* The port actually bound. */
int ig_server_port(const ig_server *s);
/* 0 while loading, 1 when ready, -1 when loading failed (detail in err). */
int ig_server_state(ig_server *s, char *err, size_t cap);
/* Stops accepting, lets running requests finish for up to grace_s seconds,
 * cancels the rest, stops every thread and frees everything. */
void ig_server_shutdown(ig_server *s, double grace_s);
/* Cuts a running ig_server_shutdown's grace period short (thread-safe; for
 * a second Ctrl-C). */
void ig_server_abort_grace(ig_server *s);

#endif
