#define _GNU_SOURCE
#include "server/server.h"

#include "core/util.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/respond.h"
#include "server/sched.h"
#include "server/text.h"
#include "server/webui.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum { ST_LOADING = 0, ST_READY = 1, ST_FAILED = -1 };

struct ig_server {
    ig_server_params p;
    char *model_path, *model_id, *host, *api_key, *cors_origin;
    size_t api_key_len;
    struct MHD_Daemon *d;
    int port;
    srv_metrics metrics;

    pthread_t loader;
    bool loader_started;
    atomic_int state;
    char load_error[512];
    atomic_bool stopping;   /* refuse new generation requests */
    atomic_bool hard_stop;  /* streams give up */
    atomic_int active_conns;
    atomic_int abort_grace; /* a second signal: stop waiting for running requests */
    atomic_ullong id_counter;
    long long created;
    double started;

    ig_model *model;
    ig_context *ctx;
    ig_model *draft;  /* speculative decoding: draft model, or NULL */
    ig_spec *spec;    /* NULL: off */
    const ig_tokenizer *tok;
    srv_sched *sched;
    int n_ctx, n_vocab;
    size_t max_piece; /* longest token text in bytes: bounds tokens from below */
};

ig_server_params ig_server_default_params(void) {
    ig_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8006;
    p.n_parallel = 4;
    p.n_ctx = 0;
    p.n_batch = 256;
    p.max_queue = 64;
    p.max_body = 16u << 20;
    p.timeout_s = 60;
    p.max_connections = 256;
    p.log_requests = 1;
    p.backend = IG_BACKEND_CPU;
    p.webui = 1;
    p.spec = ig_spec_default_params();
    return p;
}

/* ---- per-request state ------------------------------------------------------ */

typedef enum route {
    R_NONE = 0,
    R_HEALTH,
    R_MODELS,
    R_MODEL_ONE,
    R_METRICS,
    R_CHAT,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_STATUS,
} route;

typedef struct conn {
    double t0;
    char method[16];
    char path[128];
    route r;
    srv_buf body;
    bool too_large;
    bool has_length; /* Content-Length given (else chunked: unbounded) */
    bool http11;     /* HTTP/1.1 request: 1xx interim answers allowed */
    bool probed;     /* a liveness probe went out (see client_gone) */
    bool counted;
    const char *cors; /* Access-Control-Allow-Origin value, or NULL */
    int status;
    srv_job *job; /* for the log line */
} conn;

static double now_s(void) { return ig_time_now(); }

static void make_id(ig_server *S, const char *prefix, char *out, size_t cap) {
    unsigned long long c = atomic_fetch_add(&S->id_counter, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
                 (c * 0x9E3779B97F4A7C15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)x, c & 0xffffffffull);
}

/* ---- responses ---------------------------------------------------------------- */

static void add_cors(struct MHD_Response *r, const conn *cn) {
    if (!cn || !cn->cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cn->cors);
    if (strcmp(cn->cors, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result queue_body(struct MHD_Connection *c, conn *cn, int status, char *body,
                                  const char *ctype, const char *h1, const char *v1) {
    if (!body) {
        static const char oom_body[] =
            "{\"error\":{\"message\":\"Out of memory\",\"type\":\"server_error\",\"param\":null,"
            "\"code\":null}}";
        /* plain strdup: the fault-injection hook must not fail the
         * out-of-memory answer itself */
        body = strdup(oom_body);
        status = 500;
        ctype = "application/json";
        h1 = NULL;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (h1) MHD_add_response_header(r, h1, v1);
    add_cors(r, cn);
    if (cn) cn->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result queue_json(struct MHD_Connection *c, conn *cn, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return queue_body(c, cn, status, s, "application/json", NULL, NULL);
}

static enum MHD_Result queue_error_h(struct MHD_Connection *c, conn *cn, const srv_error *e,
                                     const char *h, const char *v) {
    return queue_body(c, cn, e->status, srv_error_json(e), "application/json", h, v);
}

static enum MHD_Result queue_error(struct MHD_Connection *c, conn *cn, const srv_error *e) {
    return queue_error_h(c, cn, e, NULL, NULL);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, conn *cn, int status,
                                   const char *type, const char *param, const char *code,
                                   const char *msg) {
    srv_error e;
    srv_error_set(&e, status, type, param, code, "%s", msg);
    const char *h = NULL, *v = NULL;
    if (status == 503) {
        h = "Retry-After";
        v = "1";
    } else if (status == 401) {
        h = "WWW-Authenticate";
        v = "Bearer";
    }
    return queue_error_h(c, cn, &e, h, v);
}

/* ---- client liveness ---------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

typedef enum peer_state { PEER_OK, PEER_EOF, PEER_GONE } peer_state;

/* PEER_GONE: the socket failed or was reset (POLLERR/POLLHUP: unwritable).
 * PEER_EOF: the client sent FIN. That is either a close() or a half-close
 * (shutdown(SHUT_WR)) of a client still reading its answer: TCP cannot tell
 * them apart without writing. */
static peer_state peer_check(int fd) {
    if (fd < 0) return PEER_OK;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    int r = poll(&pfd, 1, 0);
    if (r <= 0) return PEER_OK;
    if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) return PEER_GONE;
    if (pfd.revents & POLLRDHUP) return PEER_EOF;
    if (pfd.revents & POLLIN) {
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return PEER_EOF;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return PEER_GONE;
    }
    return PEER_OK;
}

/* For a request still waiting for its answer: has the client hung up?
 * After a FIN, an HTTP/1.1 client is sent one interim "100 Continue"
 * (clients must skip unexpected 1xx answers): a closed socket answers it
 * with a reset, which the next check sees as PEER_GONE, while a client that
 * only half-closed reads on. HTTP/1.0 allows no interim answers, so there a
 * FIN counts as a hang-up (what llama-server and uvicorn do for every
 * client). */
static bool client_gone(conn *cn, int fd) {
    peer_state ps = peer_check(fd);
    if (ps == PEER_GONE) return true;
    if (ps != PEER_EOF || cn->probed) return false;
    cn->probed = true;
    if (!cn->http11) return true;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t n = send(fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- simple routes ----------------------------------------------------------- */

static json_t *model_object(ig_server *S) {
    json_t *m = json_object();
    if (!m) return NULL;
    json_object_set_new(m, "id", srv_json_text(S->model_id, strlen(S->model_id)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(S->created));
    json_object_set_new(m, "owned_by", json_string("ignis"));
    if (atomic_load(&S->state) == ST_READY) {
        json_object_set_new(m, "max_model_len", json_integer(S->n_ctx));
        /* a request's output does not depend on what else is being served
           (batch-invariant engine, per-request random streams) */
        json_object_set_new(m, "deterministic", json_boolean(ig_model_batch_invariant(S->model)));
    }
    return m;
}

static bool model_matches(ig_server *S, const char *name) {
    if (!name || !*name) return true;
    if (!strcmp(name, S->model_id)) return true;
    const char *base = strrchr(S->model_path, '/');
    base = base ? base + 1 : S->model_path;
    return !strcmp(name, base) || !strcmp(name, S->model_path);
}

static enum MHD_Result handle_health(ig_server *S, struct MHD_Connection *c, conn *cn) {
    int st = atomic_load(&S->state);
    if (st == ST_READY && !atomic_load(&S->stopping) && srv_metrics_device_lost(&S->metrics))
        return reply_error(c, cn, 503, "unavailable_error", NULL, "device_lost",
                           "The GPU was lost (VK_ERROR_DEVICE_LOST): restart the server");
    if (st == ST_READY && !atomic_load(&S->stopping)) {
        /* serving, but a new request would be refused: degraded */
        json_t *j = srv_metrics_queue_full(&S->metrics)
                        ? json_pack("{s:s,s:s}", "status", "degraded", "reason", "queue_full")
                        : json_pack("{s:s}", "status", "ok");
        return queue_json(c, cn, 200, j);
    }
    const char *msg = st == ST_FAILED     ? S->load_error
                      : st == ST_LOADING ? "Loading model"
                                         : "Server is shutting down";
    return reply_error(c, cn, 503, "unavailable_error", NULL, NULL, msg);
}

static enum MHD_Result handle_models(ig_server *S, struct MHD_Connection *c, conn *cn) {
    json_t *list = json_array();
    if (list) json_array_append_new(list, model_object(S));
    json_t *j = json_object();
    if (j) {
        json_object_set_new(j, "object", json_string("list"));
        json_object_set_new(j, "data", list);
    } else json_decref(list);
    return queue_json(c, cn, 200, j);
}

static enum MHD_Result handle_model_one(ig_server *S, struct MHD_Connection *c, conn *cn,
                                        const char *url) {
    const char *name = url + strlen("/v1/models/");
    if (!model_matches(S, name) || !*name) {
        char msg[300];
        snprintf(msg, sizeof msg, "The model `%.200s` does not exist", name);
        return reply_error(c, cn, 404, "invalid_request_error", "model", "model_not_found", msg);
    }
    return queue_json(c, cn, 200, model_object(S));
}

static enum MHD_Result handle_metrics(ig_server *S, struct MHD_Connection *c, conn *cn) {
    srv_buf b = {0};
    if (!srv_metrics_render(&S->metrics, &b)) {
        srv_buf_free(&b);
        return queue_body(c, cn, 500, NULL, NULL, NULL, NULL);
    }
    return queue_body(c, cn, 200, b.data, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

static enum MHD_Result handle_status(ig_server *S, struct MHD_Connection *c, conn *cn) {
    int st = atomic_load(&S->state);
    srv_status_info in = {
        .model_id = S->model_id,
        .state = atomic_load(&S->stopping) ? "stopping"
                 : st == ST_READY          ? "ready"
                 : st == ST_FAILED         ? "failed"
                                           : "loading",
        .backend = S->p.backend == IG_BACKEND_VULKAN ? "vulkan" : "cpu",
        .device = S->p.device,
        .n_threads = S->p.n_threads,
        .n_ctx = st == ST_READY ? S->n_ctx : 0,
        .n_parallel = S->p.n_parallel,
        .n_batch = st == ST_READY ? ig_context_params_get(S->ctx)->n_batch : S->p.n_batch,
        .vision = st == ST_READY && ig_model_has_vision(S->model),
        .api_key = S->api_key != NULL,
        .started = S->started,
    };
    return queue_json(c, cn, 200, srv_status_json(&in, &S->metrics));
}

/* GET/HEAD of one of the web page's files (no key needed: the page holds no
 * data; it asks for the key itself). */
static enum MHD_Result handle_page(struct MHD_Connection *c, conn *cn, const srv_webui_file *f,
                                   const char *ctype, const char *method) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        srv_error e;
        srv_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                      "Method %.16s is not allowed here (allowed: GET, HEAD)", method);
        return queue_error_h(c, cn, &e, "Allow", "GET, HEAD");
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    for (int i = 0; srv_webui_headers[i]; i += 2)
        MHD_add_response_header(r, srv_webui_headers[i], srv_webui_headers[i + 1]);
    cn->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* A CORS preflight (OPTIONS with --cors-origin set): 204 with what the
 * browser asks to be allowed. */
static enum MHD_Result handle_preflight(struct MHD_Connection *c, conn *cn) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *h =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    add_cors(r, cn);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            srv_cors_headers_ok(h) ? h : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    cn->status = 204;
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

static bool not_ready(ig_server *S, struct MHD_Connection *c, conn *cn, enum MHD_Result *ret) {
    int st = atomic_load(&S->state);
    if (st == ST_READY && !atomic_load(&S->stopping)) return false;
    const char *msg = st == ST_LOADING  ? "The model is still loading"
                      : st == ST_FAILED ? "The model failed to load"
                                        : "The server is shutting down";
    *ret = reply_error(c, cn, 503, "unavailable_error", NULL, NULL, msg);
    return true;
}

static enum MHD_Result handle_tokenize(ig_server *S, struct MHD_Connection *c, conn *cn) {
    enum MHD_Result ret;
    if (not_ready(S, c, cn, &ret)) return ret;
    srv_tokenize_req tr;
    srv_error e;
    if (!srv_parse_tokenize(cn->body.data, cn->body.len, &tr, &e)) return queue_error(c, cn, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    ig_status st = ig_tokenize(S->tok, tr.text, tr.len, tr.add_special, tr.parse_special, &ids, &n);
    srv_tokenize_req_free(&tr);
    if (st != IG_OK) {
        free(ids);
        return reply_error(c, cn, 400, "invalid_request_error", "content", NULL,
                           "The text could not be tokenized");
    }
    json_t *arr = json_array(), *pieces = tr.with_pieces ? json_array() : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        json_array_append_new(arr, json_integer(ids[i]));
        if (pieces) {
            const char *pc = ig_token_piece(S->tok, ids[i]);
            json_array_append_new(pieces, srv_json_text(pc ? pc : "", pc ? strlen(pc) : 0));
        }
    }
    free(ids);
    json_t *j = json_object();
    if (j) {
        json_object_set_new(j, "tokens", arr);
        if (pieces) json_object_set_new(j, "pieces", pieces);
        json_object_set_new(j, "count", json_integer((json_int_t)n));
        json_object_set_new(j, "max_model_len", json_integer(S->n_ctx));
    } else {
        json_decref(arr);
        json_decref(pieces);
    }
    return queue_json(c, cn, 200, j);
}

static enum MHD_Result handle_detokenize(ig_server *S, struct MHD_Connection *c, conn *cn) {
    enum MHD_Result ret;
    if (not_ready(S, c, cn, &ret)) return ret;
    int32_t *ids;
    size_t n;
    srv_error e;
    if (!srv_parse_detokenize(cn->body.data, cn->body.len, S->n_vocab, &ids, &n, &e))
        return queue_error(c, cn, &e);
    char *text = NULL;
    ig_status st = ig_detokenize(S->tok, ids, n, false, &text);
    free(ids);
    if (st != IG_OK) {
        free(text);
        return reply_error(c, cn, 400, "invalid_request_error", "tokens", NULL,
                           "The tokens could not be detokenized");
    }
    json_t *j = json_object();
    if (j) json_object_set_new(j, "content", srv_json_text(text, text ? strlen(text) : 0));
    free(text);
    return queue_json(c, cn, 200, j);
}

/* ---- generation ------------------------------------------------------------- */

/* Renders and tokenizes the prompt of r. */
static bool build_prompt(ig_server *S, const srv_request *r, int32_t **ids, int *n_ids,
                         srv_error *e) {
    *ids = NULL;
    *n_ids = 0;
    if (r->kind == SRV_COMPLETION && r->prompt_ids) {
        if (r->n_prompt_ids > (size_t)INT32_MAX) goto too_long;
        *ids = ig_calloc_array(r->n_prompt_ids, sizeof **ids);
        if (!*ids) goto oom;
        memcpy(*ids, r->prompt_ids, r->n_prompt_ids * sizeof **ids);
        *n_ids = (int)r->n_prompt_ids;
        return true;
    }
    char *text = NULL;
    const char *src;
    size_t len;
    bool add_bos;
    if (r->kind == SRV_CHAT) {
        /* Consecutive messages of one role become one turn (Gemma's template
         * wants strictly alternating user/model turns). */
        ig_chat_message *msgs = ig_calloc_array(r->n_messages, sizeof *msgs);
        srv_buf *merged = ig_calloc_array(r->n_messages, sizeof *merged);
        if (!msgs || !merged) {
            free(msgs);
            free(merged);
            goto oom;
        }
        size_t n_msgs = 0;
        bool ok = true;
        for (size_t i = 0; i < r->n_messages && ok; i++) {
            const srv_message *m = &r->messages[i];
            if (n_msgs && !strcmp(msgs[n_msgs - 1].role, m->role)) {
                srv_buf *b = &merged[n_msgs - 1];
                if (!b->data) ok = srv_buf_puts(b, msgs[n_msgs - 1].content);
                ok = ok && srv_buf_puts(b, "\n\n") && srv_buf_puts(b, m->content);
                msgs[n_msgs - 1].content = b->data;
            } else {
                msgs[n_msgs].role = m->role;
                msgs[n_msgs].content = m->content;
                n_msgs++;
            }
        }
        ig_status st = ok ? ig_chat_render(msgs, n_msgs, true, &text) : IG_ERR_NO_MEMORY;
        for (size_t i = 0; i < r->n_messages; i++) srv_buf_free(&merged[i]);
        free(merged);
        free(msgs);
        if (st == IG_ERR_NO_MEMORY) goto oom;
        if (st != IG_OK) {
            free(text);
            srv_error_bad(e, "messages", "The messages could not be rendered with the chat "
                          "template: %s", *ig_last_error() ? ig_last_error() : ig_status_str(st));
            return false;
        }
        src = text;
        len = strlen(text);
        add_bos = false;
    } else {
        src = r->prompt;
        len = r->prompt_len;
        add_bos = true;
    }
    size_t n = 0;
    ig_status st = ig_tokenize(S->tok, src, len, add_bos, true, ids, &n);
    free(text);
    if (st != IG_OK) {
        free(*ids);
        *ids = NULL;
        if (st == IG_ERR_NO_MEMORY) goto oom;
        srv_error_bad(e, r->kind == SRV_CHAT ? "messages" : "prompt",
                      "The prompt could not be tokenized");
        return false;
    }
    if (n > (size_t)INT32_MAX) {
        free(*ids);
        *ids = NULL;
        goto too_long;
    }
    *n_ids = (int)n;
    return true;
too_long:
    srv_error_set(e, 400, "invalid_request_error", r->kind == SRV_CHAT ? "messages" : "prompt",
                  "context_length_exceeded", "This model's maximum context length is %d tokens",
                  S->n_ctx);
    return false;
oom:
    srv_error_set(e, 500, "server_error", NULL, NULL, "Out of memory");
    return false;
}

/* Images of a request: each <start_of_image> of the prompt becomes the
 * full image sequence, each image is decoded and embedded (the vision
 * tower runs here, on the request's thread). Placeholder ids must come in
 * whole runs, one per image. */
static bool prepare_images(ig_server *S, srv_request *r, int32_t **ids, int *n_ids, srv_error *e) {
    const int32_t pid = ig_model_image_token_id(S->model);
    if (r->n_images) {
        if (!ig_model_has_vision(S->model)) {
            srv_error_bad(e, "messages", "This model does not accept images (it has no vision tower)");
            return false;
        }
        int32_t *x = NULL;
        int nx = 0, ni = 0;
        if (ig_image_expand_prompt(S->model, *ids, *n_ids, &x, &nx, &ni) != IG_OK) {
            srv_error_set(e, 500, "server_error", NULL, NULL, "Out of memory");
            return false;
        }
        free(*ids);
        *ids = x;
        *n_ids = nx;
    }
    size_t runs = 0;
    const int T = ig_model_image_tokens(S->model);
    for (int i = 0; pid >= 0 && i < *n_ids;) {
        if ((*ids)[i] != pid) {
            i++;
            continue;
        }
        int j = i;
        while (j < *n_ids && (*ids)[j] == pid) j++;
        if (j - i != T) runs = SIZE_MAX - 1;
        else runs++;
        i = j;
    }
    if (runs != r->n_images) {
        srv_error_bad(e, "messages", "The prompt's image tokens do not match its %zu image(s)", r->n_images);
        return false;
    }
    if (!r->n_images) return true;
    r->image_embd = ig_calloc_array(r->n_images, sizeof *r->image_embd);
    if (!r->image_embd) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "Out of memory");
        return false;
    }
    for (size_t k = 0; k < r->n_images; k++) {
        ig_image *img = NULL;
        ig_status st = ig_image_decode(r->images[k].data, r->images[k].len, &img);
        if (st == IG_OK) st = ig_image_embed(S->model, img, S->p.n_threads, &r->image_embd[k], NULL);
        ig_image_free(img);
        if (st == IG_ERR_NO_MEMORY) {
            srv_error_set(e, 500, "server_error", NULL, NULL, "Out of memory");
            return false;
        }
        if (st != IG_OK) {
            srv_error_bad(e, "messages", "Image %zu: %s", k + 1, *ig_last_error() ? ig_last_error() : ig_status_str(st));
            return false;
        }
    }
    return true;
}

typedef struct stream {
    ig_server *S;
    srv_job *job;
    int fd;
    srv_resp_info ri;
    char id[64];
    char *model;
    srv_buf out;
    size_t out_off;
    size_t *sent_text;
    size_t *sent_lps;
    size_t *sent_bytes; /* text offset for legacy logprobs */
    bool *sent_finish;
    bool started;
    bool eos;
    bool pinged; /* an SSE comment went out after the client's FIN */
    double last_out; /* when the last bytes were handed to MHD (ig_time_now) */
} stream;

static void stream_free(void *cls) {
    stream *st = cls;
    if (!st) return;
    srv_job_cancel(st->job); /* no-op when it already finished */
    srv_job_unref(st->job);
    srv_buf_free(&st->out);
    free(st->sent_text);
    free(st->sent_lps);
    free(st->sent_bytes);
    free(st->sent_finish);
    free(st->model);
    free(st);
}

/* How many bytes of choice i's text can be sent now (complete UTF-8 only,
 * unless the choice is done). Caller holds the job mutex. */
static size_t sendable(const stream *st, int i) {
    const srv_choice_out *o = &st->job->out[i];
    size_t from = st->sent_text[i];
    if (o->text.len <= from) return from;
    if (o->done) return o->text.len;
    return from + srv_utf8_valid_prefix(o->text.data + from, o->text.len - from);
}

static bool has_news(const stream *st) {
    const srv_job *j = st->job;
    if (j->n_done == j->n_choices) return true;
    for (int i = 0; i < j->n_choices; i++) {
        if (sendable(st, i) > st->sent_text[i]) return true;
        if (j->out[i].n_lps > st->sent_lps[i]) return true;
        if (j->out[i].done && !st->sent_finish[i]) return true;
    }
    return false;
}

/* Serializes everything new into st->out. Caller holds the job mutex. */
static bool collect(stream *st) {
    srv_job *j = st->job;
    bool ok = true, usage_null = j->req.include_usage;
    for (int i = 0; ok && i < j->n_choices; i++) {
        srv_choice_out *o = &j->out[i];
        size_t upto = sendable(st, i);
        size_t nl = o->n_lps - st->sent_lps[i];
        if (upto > st->sent_text[i] || nl) {
            ok = srv_render_chunk(&st->out, &st->ri, i, false, o->text.data + st->sent_text[i],
                                  upto - st->sent_text[i], o->lps + st->sent_lps[i], nl,
                                  st->sent_bytes[i], NULL, usage_null);
            st->sent_bytes[i] += upto - st->sent_text[i];
            st->sent_text[i] = upto;
            st->sent_lps[i] = o->n_lps;
        }
        if (ok && o->done && !st->sent_finish[i] && st->sent_text[i] == o->text.len) {
            if (o->n_calls) ok = srv_render_tool_call_chunks(&st->out, &st->ri, i, o, usage_null);
            if (ok && o->finish)
                ok = srv_render_chunk(&st->out, &st->ri, i, false, NULL, 0, NULL, 0, 0, o->finish,
                                      usage_null);
            st->sent_finish[i] = true;
        }
    }
    if (ok && j->n_done == j->n_choices) {
        bool all = true;
        for (int i = 0; i < j->n_choices; i++) all = all && st->sent_finish[i];
        if (all) {
            if (j->failed) ok = srv_render_error_event(&st->out, j->fail_msg, "server_error");
            if (ok && j->req.include_usage) ok = srv_render_usage_chunk(&st->out, &st->ri, j);
            if (ok) ok = srv_buf_puts(&st->out, "data: [DONE]\n\n");
            st->eos = true;
        }
    }
    return ok;
}

/* Seconds without output after which a stream sends an SSE comment: half
 * the idle timeout, so that a stream waiting on the engine is never idle
 * for the timeout's length. */
static double keepalive_s(const ig_server *S) {
    return S->p.timeout_s > 1 ? S->p.timeout_s / 2.0 : 0.5;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    for (;;) {
    flush:
        if (st->out_off < st->out.len) {
            size_t n = st->out.len - st->out_off;
            if (n > max) n = max;
            memcpy(buf, st->out.data + st->out_off, n);
            st->out_off += n;
            st->last_out = ig_time_now();
            return (ssize_t)n;
        }
        st->out.len = 0;
        st->out_off = 0;
        if (st->eos) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!st->started) {
            st->started = true;
            if (st->ri.kind == SRV_CHAT) {
                for (int i = 0; i < st->job->n_choices; i++)
                    if (!srv_render_chunk(&st->out, &st->ri, i, true, NULL, 0, NULL, 0, 0, NULL,
                                          st->job->req.include_usage))
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                continue;
            }
        }
        srv_job *j = st->job;
        pthread_mutex_lock(&j->mu);
        while (!has_news(st)) {
            timed_wait(&j->cv, &j->mu, 200);
            if (has_news(st)) break;
            pthread_mutex_unlock(&j->mu);
            peer_state ps = atomic_load(&st->S->hard_stop) ? PEER_GONE : peer_check(st->fd);
            if (ps == PEER_GONE) {
                srv_job_cancel(j);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (ps == PEER_EOF && !st->pinged) {
                /* FIN: a closed client resets on this write (then the
                 * write fails or the next check sees PEER_GONE); a client
                 * that only half-closed keeps reading. */
                st->pinged = true;
                if (!srv_buf_puts(&st->out, ": ping\n\n")) {
                    srv_job_cancel(j);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                goto flush;
            }
            if (ig_time_now() - st->last_out > keepalive_s(st->S)) {
                /* a long prefill or a wait for a slot: a comment keeps the
                 * idle timeout, which closes clients that stopped reading,
                 * from closing one that is only waiting */
                if (!srv_buf_puts(&st->out, ": keep-alive\n\n")) {
                    srv_job_cancel(j);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                goto flush;
            }
            pthread_mutex_lock(&j->mu);
        }
        bool ok = collect(st);
        pthread_mutex_unlock(&j->mu);
        if (!ok) {
            srv_job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static enum MHD_Result start_stream(ig_server *S, struct MHD_Connection *c, conn *cn, srv_job *j,
                                    const char *id, const char *model) {
    stream *st = ig_calloc_array(1, sizeof *st);
    int n = j->n_choices;
    if (st) {
        st->sent_text = ig_calloc_array((size_t)n, sizeof *st->sent_text);
        st->sent_lps = ig_calloc_array((size_t)n, sizeof *st->sent_lps);
        st->sent_bytes = ig_calloc_array((size_t)n, sizeof *st->sent_bytes);
        st->sent_finish = ig_calloc_array((size_t)n, sizeof *st->sent_finish);
        st->model = ig_strdup(model);
    }
    if (!st || !st->sent_text || !st->sent_lps || !st->sent_bytes || !st->sent_finish ||
        !st->model) {
        if (st) {
            free(st->sent_text);
            free(st->sent_lps);
            free(st->sent_bytes);
            free(st->sent_finish);
            free(st->model);
            free(st);
        }
        srv_job_cancel(j);
        return queue_body(c, cn, 500, NULL, NULL, NULL, NULL);
    }
    st->S = S;
    srv_job_ref(j);
    st->job = j;
    st->fd = conn_fd(c);
    st->last_out = ig_time_now();
    snprintf(st->id, sizeof st->id, "%s", id);
    st->ri.kind = j->req.kind;
    st->ri.id = st->id;
    st->ri.created = (long long)time(NULL);
    st->ri.model = st->model;
    st->ri.tok = S->tok;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_cors(r, cn);
    cn->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle_generate(ig_server *S, struct MHD_Connection *c, conn *cn,
                                       srv_kind kind) {
    enum MHD_Result ret;
    if (not_ready(S, c, cn, &ret)) return ret;
    if (srv_metrics_device_lost(&S->metrics)) /* nothing can run any more: /health says so */
        return reply_error(c, cn, 503, "unavailable_error", NULL, "device_lost",
                           "The GPU was lost (VK_ERROR_DEVICE_LOST): restart the server");
    srv_limits lim = srv_default_limits();
    lim.n_vocab = S->n_vocab;
    srv_request req;
    srv_error e;
    if (!srv_parse_request(kind, cn->body.data, cn->body.len, &lim, &req, &e))
        return queue_error(c, cn, &e);
    if (!model_matches(S, req.model)) {
        srv_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "The model `%.200s` does not exist", req.model);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    if (req.n > S->p.n_parallel + S->p.max_queue) {
        srv_error_bad(&e, "n", "'n' may be at most %d on this server (--parallel %d plus "
                      "--max-queue %d)", S->p.n_parallel + S->p.max_queue, S->p.n_parallel,
                      S->p.max_queue);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    /* A text longer than n_ctx * (longest token) cannot fit: refuse it
     * before spending time on tokenizing it. */
    const char *pname0 = kind == SRV_CHAT ? "messages" : "prompt";
    size_t text_bytes = req.prompt_len;
    for (size_t i = 0; i < req.n_messages; i++) text_bytes += strlen(req.messages[i].content);
    if (!req.prompt_ids && text_bytes / S->max_piece > (size_t)S->n_ctx) {
        srv_error_set(&e, 400, "invalid_request_error", pname0, "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, your %s "
                      "(%zu bytes) would need more than %zu tokens.",
                      S->n_ctx, pname0, text_bytes, text_bytes / S->max_piece);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    int32_t *ids;
    int n_ids;
    if (!build_prompt(S, &req, &ids, &n_ids, &e)) {
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    if (!prepare_images(S, &req, &ids, &n_ids, &e)) {
        free(ids);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    const char *pname = kind == SRV_CHAT ? "messages" : "prompt";
    if (n_ids <= 0) {
        free(ids);
        srv_request_free(&req);
        srv_error_bad(&e, pname, "The prompt is empty");
        return queue_error(c, cn, &e);
    }
    if (n_ids >= S->n_ctx) {
        srv_error_set(&e, 400, "invalid_request_error", pname, "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, your %s "
                      "resulted in %d tokens. Please reduce the length of the %s.",
                      S->n_ctx, kind == SRV_CHAT ? "messages" : "prompt", n_ids, pname);
        free(ids);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    int max_tokens = req.max_tokens;
    if (max_tokens > 0 && (long long)n_ids + max_tokens > S->n_ctx) {
        srv_error_set(&e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%lld tokens (%d in the %s, %d in the completion). Please reduce the length "
                      "of the %s or the completion.",
                      S->n_ctx, (long long)n_ids + max_tokens, n_ids, pname, max_tokens, pname);
        free(ids);
        srv_request_free(&req);
        return queue_error(c, cn, &e);
    }
    if (max_tokens <= 0) max_tokens = S->n_ctx - n_ids;

    bool stream_mode = req.stream;
    srv_job *j = srv_job_create(&req, ids, n_ids, max_tokens);
    if (!j) {
        free(ids);
        srv_request_free(&req);
        return queue_body(c, cn, 500, NULL, NULL, NULL, NULL);
    }
    char model[256];
    snprintf(model, sizeof model, "%s", S->model_id);
    if (S->p.submit_delay_ms > 0) usleep((useconds_t)S->p.submit_delay_ms * 1000u);
    int rc = srv_sched_submit(S->sched, j);
    if (rc != 0) {
        srv_job_unref(j);
        if (rc == -1)
            return reply_error(c, cn, 503, "unavailable_error", NULL, "overloaded",
                               "The server is overloaded: every slot is busy and the queue is "
                               "full. Retry later.");
        if (rc == -2)
            return reply_error(c, cn, 503, "unavailable_error", NULL, NULL,
                               "The server is shutting down");
        return queue_body(c, cn, 500, NULL, NULL, NULL, NULL);
    }
    cn->job = j; /* the conn's reference (log line) */
    char id[64];
    make_id(S, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-", id, sizeof id);
    if (stream_mode) return start_stream(S, c, cn, j, id, model);

    int fd = conn_fd(c);
    pthread_mutex_lock(&j->mu);
    while (j->n_done < j->n_choices) {
        timed_wait(&j->cv, &j->mu, 200);
        if (j->n_done == j->n_choices) break;
        pthread_mutex_unlock(&j->mu);
        if (client_gone(cn, fd)) {
            srv_job_cancel(j);
            cn->status = 499; /* client closed the request */
            return MHD_NO;
        }
        pthread_mutex_lock(&j->mu);
    }
    if (j->failed) {
        pthread_mutex_unlock(&j->mu);
        if (atomic_load(&S->stopping)) /* cancelled when the grace period ran out */
            return reply_error(c, cn, 503, "unavailable_error", NULL, NULL,
                               "The server is shutting down: the request was cancelled");
        pthread_mutex_lock(&j->mu);
        char msg[sizeof j->fail_msg];
        snprintf(msg, sizeof msg, "%s", j->fail_msg);
        const int status = j->fail_status ? j->fail_status : 500;
        pthread_mutex_unlock(&j->mu);
        if (status == 503) /* the device, not the request: retrying may work elsewhere */
            return reply_error(c, cn, 503, "unavailable_error", NULL,
                               srv_metrics_device_lost(&S->metrics) ? "device_lost" : NULL, msg);
        srv_error_set(&e, 500, "server_error", NULL, NULL, "%s", msg);
        return queue_error(c, cn, &e);
    }
    srv_resp_info ri = {
        .kind = kind, .id = id, .created = (long long)time(NULL), .model = model, .tok = S->tok};
    char *body = srv_render_final(&ri, j);
    pthread_mutex_unlock(&j->mu);
    return queue_body(c, cn, 200, body, "application/json", NULL, NULL);
}

/* ---- dispatch --------------------------------------------------------------- */

static route find_route(const char *url, const char **allow) {
    static const struct {
        const char *path;
        route r;
        const char *allow;
    } routes[] = {
        {"/health", R_HEALTH, "GET, HEAD"},
        {"/v1/health", R_HEALTH, "GET, HEAD"},
        {"/v1/models", R_MODELS, "GET, HEAD"},
        {"/metrics", R_METRICS, "GET, HEAD"},
        {"/v1/status", R_STATUS, "GET, HEAD"},
        {"/v1/chat/completions", R_CHAT, "POST"},
        {"/v1/completions", R_COMPLETIONS, "POST"},
        {"/tokenize", R_TOKENIZE, "POST"},
        {"/detokenize", R_DETOKENIZE, "POST"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            *allow = routes[i].allow;
            return routes[i].r;
        }
    if (!strncmp(url, "/v1/models/", 11)) {
        *allow = "GET, HEAD";
        return R_MODEL_ONE;
    }
    *allow = NULL;
    return R_NONE;
}

static bool authorized(ig_server *S, struct MHD_Connection *c) {
    if (!S->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    size_t n = 0;
    const char *tok = srv_bearer_token(h, &n);
    if (!tok) {
        /* still spend the comparison time */
        srv_ct_equal("", 0, S->api_key, S->api_key_len);
        return false;
    }
    return srv_ct_equal(tok, n, S->api_key, S->api_key_len);
}

static enum MHD_Result dispatch(ig_server *S, struct MHD_Connection *c, conn *cn,
                                const char *url, const char *method) {
    if (cn->cors && !strcmp(method, "OPTIONS")) return handle_preflight(c, cn);
    if (S->p.webui) {
        const char *ctype;
        const srv_webui_file *f = srv_webui_find(url, &ctype);
        if (f) return handle_page(c, cn, f, ctype, method);
    }
    const char *allow;
    route r = find_route(url, &allow);
    cn->r = r;
    if (r != R_HEALTH && !authorized(S, c))
        return reply_error(c, cn, 401, "authentication_error", NULL, "invalid_api_key",
                           "Invalid or missing API key. Send it as 'Authorization: Bearer KEY'.");
    if (r == R_NONE) {
        char msg[300];
        snprintf(msg, sizeof msg, "Invalid URL (%.16s %.200s)", method, url);
        return reply_error(c, cn, 404, "invalid_request_error", NULL, "not_found", msg);
    }
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool is_post = !strcmp(method, "POST");
    bool want_post = !strcmp(allow, "POST");
    if ((want_post && !is_post) || (!want_post && !is_get)) {
        srv_error e;
        srv_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                      "Method %.16s is not allowed on %.200s (allowed: %s)", method, url, allow);
        return queue_error_h(c, cn, &e, "Allow", allow);
    }
    if (cn->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "The request body exceeds the limit of %zu bytes", S->p.max_body);
        return reply_error(c, cn, 413, "invalid_request_error", NULL, "request_too_large", msg);
    }
    switch (r) {
    case R_HEALTH: return handle_health(S, c, cn);
    case R_MODELS: return handle_models(S, c, cn);
    case R_MODEL_ONE: return handle_model_one(S, c, cn, url);
    case R_METRICS: return handle_metrics(S, c, cn);
    case R_STATUS: return handle_status(S, c, cn);
    case R_CHAT: return handle_generate(S, c, cn, SRV_CHAT);
    case R_COMPLETIONS: return handle_generate(S, c, cn, SRV_COMPLETION);
    case R_TOKENIZE: return handle_tokenize(S, c, cn);
    case R_DETOKENIZE: return handle_detokenize(S, c, cn);
    case R_NONE: break;
    }
    return MHD_NO;
}

/* Answers a body that outgrew --max-body while it is still arriving (chunked,
 * so its size is unbounded) and ends the connection, instead of reading on
 * until the client stops. libmicrohttpd 0.9.x cannot queue a response once
 * the body is being received, so the answer is written to the socket here;
 * returning MHD_NO afterwards makes MHD close the connection. The write side
 * is shut first and the input drained briefly (a "lingering close") so the
 * client can read the answer before the close resets the connection. */
static enum MHD_Result refuse_body_now(ig_server *S, struct MHD_Connection *c, conn *cn,
                                       const char *url) {
    const char *allow;
    route r = find_route(url, &allow);
    srv_error e;
    const char *reason;
    if (r != R_HEALTH && r != R_NONE && !authorized(S, c)) {
        srv_error_set(&e, 401, "authentication_error", NULL, "invalid_api_key",
                      "Invalid or missing API key.");
        reason = "Unauthorized";
    } else {
        srv_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "The request body exceeds the limit of %zu bytes", S->p.max_body);
        reason = "Payload Too Large";
    }
    cn->status = e.status;
    int fd = conn_fd(c);
    char *body = srv_error_json(&e);
    if (fd < 0 || !body) {
        free(body);
        return MHD_NO;
    }
    srv_buf msg = {0};
    char head[256];
    snprintf(head, sizeof head,
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n%s\r\n",
             e.status, reason, strlen(body),
             e.status == 401 ? "WWW-Authenticate: Bearer\r\n" : "");
    bool ok = srv_buf_puts(&msg, head) && srv_buf_puts(&msg, body);
    free(body);
    double deadline = now_s() + 2.0;
    size_t off = 0;
    while (ok && off < msg.len && now_s() < deadline) {
        ssize_t n = send(fd, msg.data + off, msg.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) off += (size_t)n;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, 50);
        } else break;
    }
    srv_buf_free(&msg);
    shutdown(fd, SHUT_WR);
    /* drain for at most 0.5 s, until the client closes */
    deadline = now_s() + 0.5;
    char sink[16384];
    for (double t = now_s(); t < deadline; t = now_s()) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((deadline - t) * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) break;
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    ig_server *S = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = ig_calloc_array(1, sizeof *cn);
        if (!cn) return MHD_NO;
        cn->t0 = now_s();
        snprintf(cn->method, sizeof cn->method, "%s", method ? method : "?");
        snprintf(cn->path, sizeof cn->path, "%s", url ? url : "?");
        for (char *q = cn->path; *q; q++) /* keep the log one line per request */
            if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
        for (char *q = cn->method; *q; q++)
            if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
        *con_cls = cn;
        cn->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        cn->cors = S->cors_origin;
        atomic_fetch_add(&S->active_conns, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        cn->has_length = cl != NULL;
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || end == cl || v > S->p.max_body) cn->too_large = true;
            /* Over the limit: the body is read and dropped, then 413 goes out
             * (answering before reading it makes the close reset the socket
             * under the client's feet). Absurd sizes are refused at once. */
            size_t early = S->p.max_body > SIZE_MAX / 8 ? SIZE_MAX : S->p.max_body * 8;
            if (early < (64u << 20)) early = 64u << 20;
            if (errno || end == cl || v > early) {
                const char *allow;
                route r = find_route(url, &allow);
                /* only answer early where the body would matter */
                if (r != R_HEALTH && r != R_NONE && !authorized(S, c))
                    return reply_error(c, cn, 401, "authentication_error", NULL,
                                       "invalid_api_key", "Invalid or missing API key.");
                char msg[128];
                snprintf(msg, sizeof msg, "The request body exceeds the limit of %zu bytes",
                         S->p.max_body);
                return reply_error(c, cn, 413, "invalid_request_error", NULL, "request_too_large",
                                   msg);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large) {
            if (cn->body.len + *upload_size > S->p.max_body) {
                cn->too_large = true;
                srv_buf_free(&cn->body);
            } else if (!srv_buf_append(&cn->body, upload_data, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        /* A declared length over the limit (up to 8x) is read and dropped;
         * a chunked body has no end in sight: answer now. */
        if (cn->too_large && !cn->has_length) return refuse_body_now(S, c, cn, url);
        return MHD_YES;
    }
    return dispatch(S, c, cn, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c;
    ig_server *S = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    *con_cls = NULL;
    int status = cn->status ? cn->status : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499;
    srv_metrics_http(&S->metrics, status);
    if (S->p.log_requests) {
        int pt = 0, gt = 0;
        if (cn->job) {
            pthread_mutex_lock(&cn->job->mu);
            pt = cn->job->n_prompt;
            for (int i = 0; i < cn->job->n_choices; i++) gt += cn->job->out[i].n_gen;
            pthread_mutex_unlock(&cn->job->mu);
        }
        fprintf(stderr, "ignis serve: %s %s %d %.3fs tokens=%d+%d\n", cn->method, cn->path, status,
                now_s() - cn->t0, pt, gt);
    }
    if (cn->job) {
        srv_job_cancel(cn->job);
        srv_job_unref(cn->job);
    }
    srv_buf_free(&cn->body);
    free(cn);
    atomic_fetch_sub(&S->active_conns, 1);
}

/* ---- model loading ------------------------------------------------------------ */

static void *loader_main(void *arg) {
    ig_server *S = arg;
    if (S->p.load_delay_ms > 0) usleep((useconds_t)S->p.load_delay_ms * 1000u);
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = S->p.n_threads;
    mp.backend = S->p.backend;
    mp.device = S->p.device;
    mp.deterministic = S->p.deterministic;
    mp.quant = S->p.quant;
    const char *load_what = S->model_path;
    ig_status st = ig_model_load(S->model_path, &mp, &S->model);
    if (st == IG_OK && S->p.device_tuning) st = ig_model_set_device_tuning(S->model, S->p.device_tuning);
    if (st == IG_OK && (S->p.mmproj || !ig_model_has_vision(S->model))) {
        char *found = NULL;
        const char *mm = S->p.mmproj;
        if (!mm && !ig_path_is_dir(S->model_path)) {
            st = ig_mmproj_next_to(S->model_path, &found);
            mm = found;
        }
        if (st == IG_OK && mm) st = ig_model_load_mmproj(S->model, mm);
        free(found);
    }
    if (st == IG_OK) {
        ig_context_params cp = ig_context_default_params();
        cp.n_ctx = S->p.n_ctx;
        cp.n_seq = S->p.n_parallel;
        cp.n_batch = S->p.n_batch + (ig_model_has_vision(S->model) ? ig_model_image_tokens(S->model) : 0);
        cp.n_threads = S->p.n_threads;
        st = ig_context_create(S->model, &cp, &S->ctx);
    }
    if (st == IG_OK) {
        S->tok = ig_model_tokenizer(S->model);
        if (!S->tok) st = ig_fail(IG_ERR_UNSUPPORTED, "the model has no tokenizer");
    }
    if (st == IG_OK) {
        const ig_hparams *hp = ig_model_hparams(S->model);
        S->n_ctx = ig_context_params_get(S->ctx)->n_ctx;
        S->n_vocab = hp->n_vocab_real;
        S->max_piece = 1;
        for (int id = 0; id < S->n_vocab; id++) {
            const char *pc = ig_token_piece(S->tok, id);
            size_t l = pc ? strlen(pc) : 0;
            if (l > S->max_piece) S->max_piece = l;
        }
        srv_sched_params sp;
        memset(&sp, 0, sizeof sp);
        sp.n_parallel = S->p.n_parallel;
        sp.n_image = ig_model_has_vision(S->model) ? ig_model_image_tokens(S->model) : 0;
        sp.n_batch = ig_context_params_get(S->ctx)->n_batch - sp.n_image;
        if (sp.n_batch < sp.n_parallel) sp.n_batch = sp.n_parallel;
        sp.max_queue = S->p.max_queue;
        sp.fault_step = S->p.fault_step;
        sp.fault_kind = S->p.fault_kind;
        for (int i = 0; i < 4; i++) sp.stop_ids[i] = -1;
        int k = 0;
        sp.stop_ids[k++] = hp->eos_id;
        sp.stop_ids[k++] = hp->eot_id;
        int32_t eot = ig_token_lookup(S->tok, "<end_of_turn>");
        if (eot >= 0 && eot != hp->eot_id) sp.stop_ids[k++] = eot;
        int32_t eos = ig_token_lookup(S->tok, "<eos>");
        if (eos >= 0 && eos != hp->eos_id) sp.stop_ids[k++] = eos;
        const char *what = S->model_path;
        if (S->p.draft_path || S->p.lookup) {
            ig_spec_params spp = S->p.spec;
            if (S->p.draft_path) {
                what = S->p.draft_path;
                st = ig_model_load(S->p.draft_path, &mp, &S->draft);
                spp.draft = S->draft;
            }
            if (st == IG_OK) st = ig_spec_create(&spp, S->model, S->n_ctx, S->p.n_parallel, &S->spec);
            sp.spec = S->spec;
        }
        if (st == IG_OK) {
            what = S->model_path;
            st = srv_sched_start(S->model, S->ctx, &sp, &S->metrics, &S->sched);
        }
        load_what = what;
    }
    if (st != IG_OK) {
        snprintf(S->load_error, sizeof S->load_error, "cannot load %s: %s", load_what,
                 *ig_last_error() ? ig_last_error() : ig_status_str(st));
        ig_spec_free(S->spec);
        S->spec = NULL;
        ig_model_free(S->draft);
        S->draft = NULL;
        ig_context_free(S->ctx);
        S->ctx = NULL;
        ig_model_free(S->model);
        S->model = NULL;
        atomic_store(&S->state, ST_FAILED);
        fprintf(stderr, "ignis serve: %s\n", S->load_error);
        return NULL;
    }
    pthread_mutex_lock(&S->metrics.mu);
    S->metrics.ready = true;
    pthread_mutex_unlock(&S->metrics.mu);
    atomic_store(&S->state, ST_READY);
    fprintf(stderr, "ignis serve: model ready (%s, ctx %d per slot, %d slots, batch %d)\n",
            S->model_id, S->n_ctx, S->p.n_parallel, ig_context_params_get(S->ctx)->n_batch);
    if (ig_chat_template_has_tools(ig_model_chat_template(S->model)))
        fprintf(stderr, "ignis serve: the model's chat template has its own tool format; requests "
                        "with tools use ignis's convention instead (docs/server.md, Tools)\n");
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------- */

static char *derive_model_id(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5)) len -= 5;
    return ig_strndup(path + b, len);
}

static void server_free(ig_server *S) {
    if (!S) return;
    srv_metrics_destroy(&S->metrics);
    free(S->model_path);
    free(S->model_id);
    free(S->host);
    free(S->api_key);
    free(S->cors_origin);
    free(S);
}

ig_status ig_server_start(const ig_server_params *p, ig_server **out) {
    *out = NULL;
    if (!p || !p->model_path || !*p->model_path)
        return ig_fail(IG_ERR_INVALID_ARG, "no model path given");
    if (p->n_parallel < 1 || p->n_parallel > 256)
        return ig_fail(IG_ERR_INVALID_ARG, "--parallel must be between 1 and 256");
    if (p->port < 0 || p->port > 65535) return ig_fail(IG_ERR_INVALID_ARG, "bad port %d", p->port);
    ig_server *S = ig_calloc_array(1, sizeof *S);
    if (!S) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    S->p = *p;
    if (S->p.n_batch <= 0) S->p.n_batch = 256;
    if (S->p.n_batch < S->p.n_parallel) S->p.n_batch = S->p.n_parallel;
    if (S->p.max_queue < 0) S->p.max_queue = 0;
    if (S->p.max_body == 0) S->p.max_body = 16u << 20;
    if (S->p.timeout_s <= 0) S->p.timeout_s = 60;
    if (S->p.max_connections <= 0) S->p.max_connections = 256;
    if (S->p.max_connections_per_ip < 0) S->p.max_connections_per_ip = 0;
    srv_metrics_init(&S->metrics);
    S->model_path = ig_strdup(p->model_path);
    S->model_id = p->model_alias && *p->model_alias ? ig_strdup(p->model_alias)
                                                    : derive_model_id(p->model_path);
    S->host = ig_strdup(p->host && *p->host ? p->host : "127.0.0.1");
    if (p->api_key && *p->api_key) {
        S->api_key = ig_strdup(p->api_key);
        S->api_key_len = strlen(p->api_key);
    }
    S->p.model_path = S->model_path;
    S->p.host = S->host;
    S->p.api_key = S->api_key;
    S->created = (long long)time(NULL);
    S->started = now_s();
    if (p->cors_origin && *p->cors_origin) {
        S->cors_origin = ig_strdup(p->cors_origin);
        if (!S->cors_origin) {
            server_free(S);
            return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
        }
    }
    S->p.cors_origin = S->cors_origin;
    if (!S->model_path || !S->model_id || !S->host || (p->api_key && *p->api_key && !S->api_key)) {
        server_free(S);
        return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    }
    json_object_seed(0);

    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", p->port);
    int gai = getaddrinfo(S->host, port_s, &hints, &ai);
    if (gai != 0 || !ai) {
        ig_status st = ig_fail(IG_ERR_INVALID_ARG, "cannot resolve host '%s': %s", S->host,
                               gai_strerror(gai));
        if (ai) freeaddrinfo(ai);
        server_free(S);
        return st;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_AUTO;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    S->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, S,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, S,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)S->p.timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)S->p.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)S->p.max_connections_per_ip,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!S->d) {
        server_free(S);
        return ig_fail(IG_ERR_IO, "cannot listen on %s:%d (address in use or not permitted?)",
                       p->host ? p->host : "127.0.0.1", p->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->d, MHD_DAEMON_INFO_BIND_PORT);
    S->port = di ? di->port : p->port;
    if (pthread_create(&S->loader, NULL, loader_main, S) != 0) {
        MHD_stop_daemon(S->d);
        server_free(S);
        return ig_fail(IG_ERR_INTERNAL, "cannot start the loader thread");
    }
    S->loader_started = true;
    *out = S;
    return IG_OK;
}

void ig_server_abort_grace(ig_server *s) {
    if (s) atomic_store(&s->abort_grace, 1);
}

int ig_server_port(const ig_server *s) { return s ? s->port : 0; }

int ig_server_state(ig_server *s, char *err, size_t cap) {
    int st = atomic_load(&s->state);
    if (st == ST_FAILED && err && cap) snprintf(err, cap, "%s", s->load_error);
    return st;
}

void ig_server_shutdown(ig_server *S, double grace_s) {
    if (!S) return;
    atomic_store(&S->stopping, true);
    MHD_socket lsock = MHD_quiesce_daemon(S->d);
    if (S->loader_started) pthread_join(S->loader, NULL);
    /* S->sched is only written by the loader (joined above). Connection
     * threads may still be between their not_ready() check and
     * srv_sched_submit: srv_sched_stop refuses their submissions (503) but
     * keeps the scheduler allocated until MHD_stop_daemon has joined every
     * connection thread. */
    if (S->sched) {
        int running, waiting;
        srv_sched_load(S->sched, &running, &waiting);
        if (running || waiting)
            fprintf(stderr, "ignis serve: shutting down, waiting up to %.0fs for %d running and "
                            "%d queued sequences\n", grace_s, running, waiting);
        srv_sched_stop(S->sched, grace_s, &S->abort_grace);
    }
    /* let finished streams deliver their last events */
    double deadline = now_s() + 2.0;
    while (atomic_load(&S->active_conns) > 0 && now_s() < deadline &&
           !atomic_load(&S->abort_grace))
        usleep(20 * 1000);
    atomic_store(&S->hard_stop, true);
    MHD_stop_daemon(S->d); /* joins every connection thread */
    if (lsock != MHD_INVALID_SOCKET) close(lsock);
    srv_sched_free(S->sched);
    S->sched = NULL;
    ig_spec_free(S->spec);
    ig_model_free(S->draft);
    ig_context_free(S->ctx);
    ig_model_free(S->model);
    server_free(S);
}
