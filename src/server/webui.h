/* The server's web page (chat and dashboard, src/server/webui/) and the
 * GET /v1/status document the dashboard reads. The page's files are
 * embedded in the binary at build time (webui/embed.cmake). */
#ifndef IG_SERVER_WEBUI_H
#define IG_SERVER_WEBUI_H

#include "server/metrics.h"
#include "server/proc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_webui_file {
    const char *path; /* "/index.html", "/app.js", ... */
    const unsigned char *data;
    size_t len;
} srv_webui_file;

/* Generated table of the embedded files. */
extern const srv_webui_file srv_webui_files[];
extern const size_t srv_webui_n_files;

/* The embedded file served at URL path url ("/" is the page itself), or
 * NULL. *ctype gets its Content-Type. */
const srv_webui_file *srv_webui_find(const char *url, const char **ctype);
/* Bytes of every embedded file together. */
size_t srv_webui_total_bytes(void);

/* Headers every page file goes out with: a Content-Security-Policy that
 * allows only the page's own files and same-origin requests, nosniff, no
 * referrer, no framing. NULL-terminated name/value pairs. */
extern const char *const srv_webui_headers[];


/* What GET /v1/status reports besides the metrics. */
typedef struct srv_status_info {
    const char *model_id;
    const char *state;   /* "loading", "ready", "failed", "stopping" */
    const char *backend; /* "cpu", "vulkan" */
    int device;          /* device index (Vulkan) */
    int n_threads;       /* requested compute threads; 0: automatic */
    int n_ctx;           /* positions per slot; 0 while loading */
    int n_parallel;
    int n_batch;
    bool vision;         /* the model reads images (image_url content parts) */
    bool api_key;        /* an API key is required */
    double started;      /* ig_time_now() at start */
} srv_status_info;

/* The status document (see docs/server.md); NULL when out of memory. */
json_t *srv_status_json(const srv_status_info *in, srv_metrics *m);

/* Is origin-list value v a safe Access-Control-Request-Headers echo
 * (token characters, commas and spaces only, at most 1024 bytes)? */
bool srv_cors_headers_ok(const char *v);

#endif
