#define _GNU_SOURCE
#include "server/request.h"
#include "core/util.h"

#include "server/text.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

static void error_vset(srv_error *e, int status, const char *type, const char *param,
                       const char *code, const char *fmt, va_list ap) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, param, code, fmt, ap);
    va_end(ap);
}

void srv_error_bad(srv_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, 400, "invalid_request_error", param, NULL, fmt, ap);
    va_end(ap);
}

static json_t *json_str_safe(const char *s) {
    if (!s) return json_null();
    size_t n = strlen(s);
    if (srv_utf8_valid(s, n)) return json_stringn(s, n);
    size_t m;
    char *fixed = srv_utf8_sanitize(s, n, &m);
    if (!fixed) return NULL;
    json_t *j = json_stringn(fixed, m);
    free(fixed);
    return j;
}

char *srv_error_json(const srv_error *e) {
    json_t *inner = json_object();
    json_t *root = json_object();
    char *out = NULL;
    if (!inner || !root) goto done;
    json_object_set_new(inner, "message", json_str_safe(e->message));
    json_object_set_new(inner, "type", json_str_safe(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(inner, "param", json_str_safe(e->param));
    json_object_set_new(inner, "code", json_str_safe(e->code));
    json_object_set(root, "error", inner);
    out = json_dumps(root, JSON_COMPACT);
done:
    json_decref(inner);
    json_decref(root);
    return out;
}

/* ---- field helpers ------------------------------------------------------
 * Each returns 1 when the field was given, 0 when absent or null, -1 on a
 * validation error (err filled). */

srv_limits srv_default_limits(void) {
    srv_limits l = {
        .n_vocab = 0,
        .max_n = 16,
        .max_stop = 16,
        .max_stop_len = 512,
        .max_bias = 1024,
        .max_messages = 4096,
    };
    return l;
}

static int get_number(json_t *obj, const char *key, double lo, double hi, double *out,
                      srv_error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) {
        srv_error_bad(err, key, "'%s' must be a number", key);
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) {
        srv_error_bad(err, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
        return -1;
    }
    *out = d;
    return 1;
}

static int get_int(json_t *obj, const char *key, long long lo, long long hi, long long *out,
                   srv_error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18) {
            srv_error_bad(err, key, "'%s' must be an integer", key);
            return -1;
        }
        x = (long long)d;
    } else {
        srv_error_bad(err, key, "'%s' must be an integer", key);
        return -1;
    }
    if (x < lo || x > hi) {
        srv_error_bad(err, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_bool(json_t *obj, const char *key, bool *out, srv_error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        srv_error_bad(err, key, "'%s' must be a boolean", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

static char *dup_json_string(json_t *v, size_t *len) {
    size_t n = json_string_length(v);
    char *s = ig_malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, json_string_value(v), n);
    s[n] = '\0';
    if (len) *len = n;
    return s;
}

static bool parse_body(const char *body, size_t len, json_t **root, srv_error *err) {
    json_error_t jerr;
    *root = NULL;
    if (!body || !len) {
        srv_error_bad(err, NULL, "Request body is empty; expected a JSON object");
        return false;
    }
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (!j) {
        srv_error_bad(err, NULL, "Malformed JSON at line %d column %d: %s", jerr.line,
                      jerr.column, jerr.text);
        return false;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        srv_error_bad(err, NULL, "Request body must be a JSON object");
        return false;
    }
    *root = j;
    return true;
}

static bool oom(srv_error *err) {
    srv_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
    return false;
}

/* ---- messages ------------------------------------------------------------ */

static const char *normalize_role(const char *r) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return "system";
    if (!strcmp(r, "user")) return "user";
    if (!strcmp(r, "assistant") || !strcmp(r, "model")) return "assistant";
    if (!strcmp(r, "tool")) return "tool";
    return NULL;
}

/* ids and names of the tool calls seen so far in the history */
typedef struct call_seen {
    const char *id, *name; /* borrowed from the request JSON */
} call_seen;

/* Renders an assistant message's tool_calls after its content. */
static bool render_history_calls(json_t *calls, size_t idx, char **content, call_seen **seen,
                                 size_t *n_seen, srv_error *err) {
    if (!json_is_array(calls)) {
        srv_error_bad(err, "messages", "messages[%zu].tool_calls must be an array", idx);
        return false;
    }
    srv_buf b = {0};
    if (**content && (!srv_buf_puts(&b, *content) || !srv_buf_puts(&b, "\n"))) goto nomem;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *id = json_is_object(c) ? json_object_get(c, "id") : NULL;
        json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
        json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
        if (!json_is_string(id) || (type && !(json_is_string(type) &&
                                              !strcmp(json_string_value(type), "function"))) ||
            !json_is_string(name) || !json_is_string(args)) {
            srv_buf_free(&b);
            srv_error_bad(err, "messages", "messages[%zu].tool_calls[%zu] must be {\"id\": string, "
                          "\"type\": \"function\", \"function\": {\"name\": string, "
                          "\"arguments\": string}}", idx, i);
            return false;
        }
        json_error_t je;
        json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
        if (!parsed || !json_is_object(parsed)) {
            json_decref(parsed);
            srv_buf_free(&b);
            srv_error_bad(err, "messages", "messages[%zu].tool_calls[%zu].function.arguments is "
                          "not a JSON object", idx, i);
            return false;
        }
        char *compact = json_dumps(parsed, JSON_COMPACT);
        json_decref(parsed);
        if (!compact) goto nomem;
        bool ok = srv_buf_printf(&b, "%s```tool_call\n{\"name\": \"%s\", \"arguments\": %s}\n```",
                                 i ? "\n" : "", json_string_value(name), compact);
        free(compact);
        if (!ok) goto nomem;
        call_seen *v = ig_realloc_array(*seen, *n_seen + 1, sizeof *v);
        if (!v) goto nomem;
        *seen = v;
        v[*n_seen].id = json_string_value(id);
        v[*n_seen].name = json_string_value(name);
        (*n_seen)++;
    }
    free(*content);
    *content = b.data ? b.data : ig_calloc_array(1, 1);
    return *content ? true : oom(err);
nomem:
    srv_buf_free(&b);
    return oom(err);
}

/* A tool result becomes a user turn holding a ```tool_result block. */
static bool render_tool_result(json_t *m, size_t idx, char **content, const call_seen *seen,
                               size_t n_seen, srv_error *err) {
    json_t *id = json_object_get(m, "tool_call_id");
    if (!json_is_string(id)) {
        srv_error_bad(err, "messages", "messages[%zu]: a tool message needs a string "
                      "'tool_call_id'", idx);
        return false;
    }
    const char *name = NULL;
    for (size_t k = n_seen; k-- > 0 && !name;)
        if (!strcmp(seen[k].id, json_string_value(id))) name = seen[k].name;
    if (!name) {
        srv_error_bad(err, "messages", "messages[%zu]: tool_call_id '%.64s' matches no earlier "
                      "assistant tool call", idx, json_string_value(id));
        return false;
    }
    srv_buf b = {0};
    if (!srv_buf_printf(&b, "```tool_result\n{\"name\": \"%s\", \"content\": ", name)) goto nomem;
    json_t *text = json_stringn(*content, strlen(*content));
    char *enc = text ? json_dumps(text, JSON_ENCODE_ANY) : NULL;
    json_decref(text);
    if (!enc) goto nomem;
    bool ok = srv_buf_puts(&b, enc) && srv_buf_puts(&b, "}\n```");
    free(enc);
    if (!ok) goto nomem;
    free(*content);
    *content = b.data;
    return true;
nomem:
    srv_buf_free(&b);
    return oom(err);
}

/* Standard base64 (padding optional, no whitespace) into a malloc'ed
 * buffer; false when malformed. */
static bool base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len) {
    while (n && s[n - 1] == '=') n--;
    if (n % 4 == 1) return false;
    uint8_t *d = ig_malloc(n / 4 * 3 + 3);
    if (!d) return false;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
        if (v < 0) {
            free(d);
            return false;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out = d;
    *out_len = k;
    return true;
}

/* An image_url part: only data: URLs (base64 PNG or JPEG). Remote URLs are
 * refused: fetching them would make the server send requests wherever a
 * client points it (server-side request forgery). */
static bool parse_image_part(json_t *part, const char *role, size_t idx, size_t i, srv_request *r,
                             srv_error *err) {
    if (strcmp(role, "user") != 0) {
        srv_error_bad(err, "messages", "messages[%zu].content[%zu]: images are accepted in user messages only",
                      idx, i);
        return false;
    }
    json_t *iu = json_object_get(part, "image_url");
    json_t *url = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    if (!json_is_string(url)) {
        srv_error_bad(err, "messages", "messages[%zu].content[%zu].image_url.url must be a string", idx, i);
        return false;
    }
    const char *u = json_string_value(url);
    const size_t ulen = json_string_length(url);
    if (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)) {
        srv_error_bad(err, "messages",
                      "messages[%zu].content[%zu]: remote image URLs are not fetched (the server does not make "
                      "requests on a client's behalf); send the image inline as a data: URL "
                      "(data:image/png;base64,...)",
                      idx, i);
        return false;
    }
    const char *comma = memchr(u, ',', ulen);
    if (strncmp(u, "data:", 5) != 0 || !comma || comma - u < 12 || strncmp(comma - 7, ";base64", 7) != 0) {
        srv_error_bad(err, "messages",
                      "messages[%zu].content[%zu].image_url.url must be a base64 data: URL "
                      "(data:image/png;base64,...)",
                      idx, i);
        return false;
    }
    if (r->n_images >= SRV_MAX_IMAGES) {
        srv_error_bad(err, "messages", "at most %d images per request", SRV_MAX_IMAGES);
        return false;
    }
    const size_t b64 = ulen - (size_t)(comma + 1 - u);
    if (b64 / 4 * 3 > SRV_MAX_IMAGE_BYTES) {
        srv_error_bad(err, "messages", "messages[%zu].content[%zu]: the image is larger than %zu bytes", idx, i,
                      SRV_MAX_IMAGE_BYTES);
        return false;
    }
    srv_image img = {0};
    if (!base64_decode(comma + 1, b64, &img.data, &img.len)) {
        srv_error_bad(err, "messages", "messages[%zu].content[%zu].image_url.url: bad base64", idx, i);
        return false;
    }
    srv_image *grown = ig_realloc_array(r->images, r->n_images + 1, sizeof *grown);
    if (!grown) {
        free(img.data);
        return oom(err);
    }
    r->images = grown;
    r->images[r->n_images++] = img;
    return true;
}

static bool parse_content(json_t *c, const char *role, size_t idx, char **out, srv_request *r, srv_error *err) {
    if (!c || json_is_null(c)) {
        if (!strcmp(role, "assistant")) {
            *out = ig_calloc_array(1, 1);
            return *out ? true : oom(err);
        }
        srv_error_bad(err, "messages", "messages[%zu].content is required", idx);
        return false;
    }
    if (json_is_string(c)) {
        *out = dup_json_string(c, NULL);
        return *out ? true : oom(err);
    }
    if (!json_is_array(c)) {
        srv_error_bad(err, "messages", "messages[%zu].content must be a string or an array of "
                      "content parts", idx);
        return false;
    }
    srv_buf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!type || !json_is_string(type)) {
            srv_buf_free(&b);
            srv_error_bad(err, "messages", "messages[%zu].content[%zu] must be an object with a "
                          "string 'type'", idx, i);
            return false;
        }
        if (!strcmp(json_string_value(type), "image_url")) {
            if (!parse_image_part(part, role, idx, i, r, err)) {
                srv_buf_free(&b);
                return false;
            }
            /* where the chat template would put the image */
            if (!srv_buf_append(&b, "<start_of_image>", 16)) {
                srv_buf_free(&b);
                return oom(err);
            }
            continue;
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            srv_buf_free(&b);
            srv_error_bad(err, "messages", "messages[%zu].content[%zu]: content part type '%s' is "
                          "not supported ('text' and 'image_url' are)", idx, i, json_string_value(type));
            return false;
        }
        json_t *text = json_object_get(part, "text");
        if (!text || !json_is_string(text)) {
            srv_buf_free(&b);
            srv_error_bad(err, "messages", "messages[%zu].content[%zu].text must be a string", idx,
                          i);
            return false;
        }
        const bool after_image = b.len >= 16 && !memcmp(b.data + b.len - 16, "<start_of_image>", 16);
        if ((b.len && !after_image && !srv_buf_append(&b, "\n", 1)) ||
            !srv_buf_append(&b, json_string_value(text), json_string_length(text))) {
            srv_buf_free(&b);
            return oom(err);
        }
    }
    if (!b.data) {
        b.data = ig_calloc_array(1, 1);
        if (!b.data) return oom(err);
    }
    *out = b.data;
    return true;
}

static bool parse_messages(json_t *root, const srv_limits *lim, srv_request *r, srv_error *err) {
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs)) {
        srv_error_bad(err, "messages", "'messages' is required");
        return false;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        srv_error_bad(err, "messages", "'messages' must be a non-empty array");
        return false;
    }
    size_t n = json_array_size(msgs);
    if (lim->max_messages > 0 && n > (size_t)lim->max_messages) {
        srv_error_bad(err, "messages", "too many messages (%zu, at most %d)", n, lim->max_messages);
        return false;
    }
    r->messages = ig_calloc_array(n + 1, sizeof *r->messages); /* + room for tool instructions */
    if (!r->messages) return oom(err);
    call_seen *seen = NULL;
    size_t n_seen = 0;
    bool ok = true;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        ok = false;
        if (!json_is_object(m)) {
            srv_error_bad(err, "messages", "messages[%zu] must be an object", i);
            break;
        }
        json_t *role = json_object_get(m, "role");
        if (!role || !json_is_string(role)) {
            srv_error_bad(err, "messages", "messages[%zu].role must be a string", i);
            break;
        }
        const char *nr = normalize_role(json_string_value(role));
        if (!nr) {
            srv_error_bad(err, "messages", "messages[%zu].role '%s' is not supported (use system, "
                          "developer, user, assistant or tool)", i, json_string_value(role));
            break;
        }
        bool tool = !strcmp(nr, "tool");
        r->messages[i].role = ig_strdup(tool ? "user" : nr);
        if (!r->messages[i].role) {
            oom(err);
            break;
        }
        r->n_messages = i + 1;
        json_t *calls = json_object_get(m, "tool_calls");
        bool has_calls = calls && !json_is_null(calls) && !strcmp(nr, "assistant");
        if (calls && !json_is_null(calls) && !has_calls) {
            srv_error_bad(err, "messages", "messages[%zu]: only assistant messages carry "
                          "tool_calls", i);
            break;
        }
        if (!parse_content(json_object_get(m, "content"), has_calls || tool ? "assistant" : nr, i,
                           &r->messages[i].content, r, err))
            break;
        if (has_calls && !render_history_calls(calls, i, &r->messages[i].content, &seen, &n_seen, err))
            break;
        if (tool && !render_tool_result(m, i, &r->messages[i].content, seen, n_seen, err)) break;
        ok = true;
    }
    free(seen);
    return ok;
}

/* ---- prompt (completions) ------------------------------------------------ */

static bool parse_prompt(json_t *root, const srv_limits *lim, srv_request *r, srv_error *err) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) {
        srv_error_bad(err, "prompt", "'prompt' is required");
        return false;
    }
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt = dup_json_string(p, &r->prompt_len);
        return r->prompt ? true : oom(err);
    }
    if (json_is_array(p) && json_array_size(p) > 0) {
        size_t n = json_array_size(p);
        r->prompt_ids = ig_calloc_array(n, sizeof *r->prompt_ids);
        if (!r->prompt_ids) return oom(err);
        size_t i;
        json_t *v;
        json_array_foreach(p, i, v) {
            if (!json_is_integer(v)) {
                srv_error_bad(err, "prompt", "'prompt' must be a string, an array of one string, or "
                              "an array of token ids");
                return false;
            }
            json_int_t id = json_integer_value(v);
            if (id < 0 || id > INT32_MAX || (lim->n_vocab > 0 && id >= lim->n_vocab)) {
                srv_error_bad(err, "prompt", "prompt[%zu]: token id %lld is out of range", i,
                              (long long)id);
                return false;
            }
            r->prompt_ids[i] = (int32_t)id;
        }
        r->n_prompt_ids = n;
        return true;
    }
    srv_error_bad(err, "prompt", "'prompt' must be a string, an array of one string, or a "
                  "non-empty array of token ids");
    return false;
}

/* ---- sampling and output options ---------------------------------------- */

static bool parse_stop(json_t *root, const srv_limits *lim, srv_request *r, srv_error *err) {
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return true;
    size_t n = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : 0;
    if (!json_is_string(s) && !json_is_array(s)) {
        srv_error_bad(err, "stop", "'stop' must be a string or an array of strings");
        return false;
    }
    if (lim->max_stop > 0 && n > (size_t)lim->max_stop) {
        srv_error_bad(err, "stop", "'stop' may hold at most %d strings", lim->max_stop);
        return false;
    }
    if (!n) return true;
    r->stop = ig_calloc_array(n, sizeof *r->stop);
    if (!r->stop) return oom(err);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v)) {
            srv_error_bad(err, "stop", "'stop' must be a string or an array of strings");
            return false;
        }
        size_t len = json_string_length(v);
        if (lim->max_stop_len > 0 && len > (size_t)lim->max_stop_len) {
            srv_error_bad(err, "stop", "stop strings may be at most %d bytes", lim->max_stop_len);
            return false;
        }
        if (!len) continue; /* an empty stop string never stops anything */
        r->stop[r->n_stop] = dup_json_string(v, NULL);
        if (!r->stop[r->n_stop]) return oom(err);
        r->n_stop++;
    }
    return true;
}

static bool parse_logit_bias(json_t *root, const srv_limits *lim, srv_request *r,
                             srv_error *err) {
    json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb)) return true;
    if (!json_is_object(lb)) {
        srv_error_bad(err, "logit_bias", "'logit_bias' must be an object mapping token ids to "
                      "numbers");
        return false;
    }
    size_t n = json_object_size(lb);
    if (lim->max_bias > 0 && n > (size_t)lim->max_bias) {
        srv_error_bad(err, "logit_bias", "'logit_bias' may hold at most %d entries", lim->max_bias);
        return false;
    }
    if (!n) return true;
    r->logit_bias = ig_calloc_array(n, sizeof *r->logit_bias);
    if (!r->logit_bias) return oom(err);
    const char *key;
    json_t *v;
    json_object_foreach(lb, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (end == key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id < 0 ||
            id > INT32_MAX || (lim->n_vocab > 0 && id >= lim->n_vocab)) {
            srv_error_bad(err, "logit_bias", "logit_bias: '%.64s' is not a valid token id", key);
            return false;
        }
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < -100 ||
            json_number_value(v) > 100) {
            srv_error_bad(err, "logit_bias", "logit_bias: the bias of token %lld must be a number "
                          "between -100 and 100", id);
            return false;
        }
        r->logit_bias[r->n_logit_bias].token = (int32_t)id;
        r->logit_bias[r->n_logit_bias].bias = (float)json_number_value(v);
        r->n_logit_bias++;
    }
    return true;
}

static bool parse_options(json_t *root, const srv_limits *lim, srv_request *r, srv_error *err) {
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            srv_error_bad(err, "model", "'model' must be a string");
            return false;
        }
        r->model = dup_json_string(model, NULL);
        if (!r->model) return oom(err);
    }

    long long a = -1, b = -1, x;
    int ga = get_int(root, "max_tokens", 1, INT32_MAX, &a, err);
    if (ga < 0) return false;
    int gb = get_int(root, "max_completion_tokens", 1, INT32_MAX, &b, err);
    if (gb < 0) return false;
    if (ga > 0 && gb > 0) r->max_tokens = (int)(a < b ? a : b);
    else if (ga > 0) r->max_tokens = (int)a;
    else if (gb > 0) r->max_tokens = (int)b;

    if (get_number(root, "temperature", 0, 2, &r->temperature, err) < 0) return false;
    if (get_number(root, "top_p", 0, 1, &r->top_p, err) < 0) return false;
    if (get_number(root, "min_p", 0, 1, &r->min_p, err) < 0) return false;
    if (get_number(root, "presence_penalty", -2, 2, &r->presence_penalty, err) < 0) return false;
    if (get_number(root, "frequency_penalty", -2, 2, &r->frequency_penalty, err) < 0) return false;
    int g = get_int(root, "top_k", -1, INT32_MAX, &x, err);
    if (g < 0) return false;
    if (g > 0) r->top_k = (int)x;
    g = get_int(root, "seed", LLONG_MIN, LLONG_MAX, &x, err);
    if (g < 0) return false;
    if (g > 0) {
        r->has_seed = true;
        r->seed = (uint64_t)x;
    }
    g = get_int(root, "n", 1, lim->max_n > 0 ? lim->max_n : 128, &x, err);
    if (g < 0) return false;
    if (g > 0) r->n = (int)x;

    if (get_bool(root, "stream", &r->stream, err) < 0) return false;
    bool speculative = true;
    if (get_bool(root, "speculative", &speculative, err) < 0) return false;
    r->no_speculative = !speculative;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            srv_error_bad(err, "stream_options", "'stream_options' must be an object");
            return false;
        }
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu)) {
            if (!json_is_boolean(iu)) {
                srv_error_bad(err, "stream_options", "'stream_options.include_usage' must be a "
                              "boolean");
                return false;
            }
            r->include_usage = json_is_true(iu);
        }
    }

    if (r->kind == SRV_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, err) < 0) return false;
        g = get_int(root, "top_logprobs", 0, 20, &x, err);
        if (g < 0) return false;
        if (g > 0) {
            if (!r->logprobs && x > 0) {
                srv_error_bad(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
                return false;
            }
            r->top_logprobs = (int)x;
        }
    } else {
        /* legacy completions: logprobs is the number of alternatives (0-5) */
        json_t *lp = json_object_get(root, "logprobs");
        if (lp && json_is_boolean(lp)) {
            srv_error_bad(err, "logprobs", "'logprobs' must be an integer between 0 and 5 for "
                          "/v1/completions");
            return false;
        }
        g = get_int(root, "logprobs", 0, 5, &x, err);
        if (g < 0) return false;
        if (g > 0) {
            r->logprobs = true;
            r->top_logprobs = (int)x;
        }
        bool echo = false;
        if (get_bool(root, "echo", &echo, err) < 0) return false;
        if (echo) {
            srv_error_bad(err, "echo", "'echo' is not supported");
            return false;
        }
        json_t *suffix = json_object_get(root, "suffix");
        if (suffix && !json_is_null(suffix)) {
            srv_error_bad(err, "suffix", "'suffix' is not supported");
            return false;
        }
        g = get_int(root, "best_of", 1, 128, &x, err);
        if (g < 0) return false;
        if (g > 0 && x != r->n) {
            srv_error_bad(err, "best_of", "'best_of' different from 'n' is not supported");
            return false;
        }
    }
    if (!parse_stop(root, lim, r, err)) return false;
    if (!parse_logit_bias(root, lim, r, err)) return false;
    return true;
}

/* ---- structured output ----------------------------------------------------- */

/* Compiled grammars by source text, so a schema sent with every request is
 * compiled once: a small table, least recently used out. */
#define GRAMMAR_CACHE 16

typedef struct grammar_slot {
    uint64_t hash;
    char *text; /* kind byte + source */
    size_t len;
    ig_grammar *g;
    uint64_t used;
} grammar_slot;

static grammar_slot g_cache[GRAMMAR_CACHE];
static uint64_t g_cache_clock;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t text_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* kind: 'g' GBNF, 's' JSON Schema, 'o' any object. A new reference in *out. */
static ig_status grammar_get(char kind, const char *src, size_t n, ig_grammar **out) {
    *out = NULL;
    char *key = ig_malloc(n + 1);
    if (!key) return IG_ERR_NO_MEMORY;
    key[0] = kind;
    memcpy(key + 1, src, n);
    uint64_t h = text_hash(key, n + 1);
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        grammar_slot *sl = &g_cache[i];
        if (sl->g && sl->hash == h && sl->len == n + 1 && !memcmp(sl->text, key, n + 1)) {
            sl->used = ++g_cache_clock;
            *out = ig_grammar_ref(sl->g);
            pthread_mutex_unlock(&g_cache_mu);
            free(key);
            return IG_OK;
        }
    }
    pthread_mutex_unlock(&g_cache_mu);
    ig_grammar *g = NULL;
    ig_status st = kind == 'g' ? ig_grammar_from_gbnf(src, n, "root", &g)
                   : kind == 's' ? ig_grammar_from_json_schema(src, n, &g)
                                 : ig_grammar_json_object(&g);
    if (st != IG_OK) {
        free(key);
        return st;
    }
    pthread_mutex_lock(&g_cache_mu);
    int victim = 0;
    for (int i = 1; i < GRAMMAR_CACHE; i++)
        if (g_cache[i].used < g_cache[victim].used) victim = i;
    grammar_slot *sl = &g_cache[victim];
    ig_grammar_free(sl->g);
    free(sl->text);
    *sl = (grammar_slot){.hash = h, .text = key, .len = n + 1, .g = ig_grammar_ref(g),
                         .used = ++g_cache_clock};
    pthread_mutex_unlock(&g_cache_mu);
    *out = g;
    return IG_OK;
}

static bool grammar_error(srv_error *err, const char *param, ig_status st, const char *what) {
    if (st == IG_ERR_NO_MEMORY) return oom(err);
    srv_error_bad(err, param, "%s: %s", what, *ig_last_error() ? ig_last_error() : ig_status_str(st));
    return false;
}

/* ---- tools ------------------------------------------------------------------ */

static bool tool_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* The instructions that present the tools (docs/server.md). */
static bool tool_instructions(const srv_request *r, srv_buf *b) {
    bool ok = srv_buf_puts(b, "You have access to the following tools. To call a tool, answer "
                              "with only this block, with the arguments as a JSON object:\n"
                              "```tool_call\n{\"name\": \"<tool name>\", \"arguments\": "
                              "{...}}\n```\n");
    if (r->parallel_tool_calls)
        ok = ok && srv_buf_puts(b, "To call several tools, write one block after another.\n");
    ok = ok && srv_buf_puts(b, "Each result comes back in a ```tool_result block. Tools:\n");
    for (size_t i = 0; ok && i < r->n_tools; i++) {
        const srv_tool *t = &r->tools[i];
        ok = srv_buf_printf(b, "- %s", t->name) &&
             (!t->description || (srv_buf_puts(b, ": ") && srv_buf_puts(b, t->description))) &&
             srv_buf_puts(b, "\n  parameters: ") &&
             srv_buf_puts(b, t->parameters ? t->parameters : "{\"type\": \"object\"}") &&
             srv_buf_puts(b, "\n");
    }
    return ok;
}

/* The grammar of the output when a call is required: one call (of the
 * named tool when named), or several when parallel calls are allowed. */
static bool tool_grammar(srv_request *r, srv_error *err) {
    srv_buf g = {0};
    bool ok = true;
    size_t from = r->tool_choice == SRV_TOOLS_NAMED ? (size_t)r->tool_named : 0;
    size_t to = r->tool_choice == SRV_TOOLS_NAMED ? from + 1 : r->n_tools;
    ok = srv_buf_puts(&g, r->parallel_tool_calls && r->tool_choice != SRV_TOOLS_NAMED
                              ? "root ::= call ( \"\\n\" call ){0,7}\ncall ::= "
                              : "root ::= call\ncall ::= ");
    for (size_t i = from; ok && i < to; i++) ok = srv_buf_printf(&g, "%sc%zu", i > from ? " | " : "", i);
    ok = ok && srv_buf_puts(&g, "\n");
    for (size_t i = from; ok && i < to; i++) {
        const srv_tool *t = &r->tools[i];
        ok = srv_buf_printf(&g, "c%zu ::= \"```tool_call\\n{\\\"name\\\": \\\"%s\\\", "
                            "\\\"arguments\\\": \" t%zu-root \"}\\n```\"\n", i, t->name, i);
        if (!ok) break;
        if (t->parameters) {
            char prefix[24], *rules = NULL;
            snprintf(prefix, sizeof prefix, "t%d-", (int)(i % 1000));
            ig_status st = ig_json_schema_to_gbnf_rules(t->parameters, strlen(t->parameters),
                                                        prefix, &rules);
            if (st != IG_OK) {
                srv_buf_free(&g);
                if (st == IG_ERR_NO_MEMORY) return oom(err);
                srv_error_bad(err, "tools", "tools[%zu] (%s): invalid parameters: %s", i, t->name,
                              ig_last_error());
                return false;
            }
            ok = srv_buf_puts(&g, rules);
            free(rules);
        } else {
            ok = srv_buf_printf(&g, "t%zu-root ::= object\n", i);
        }
    }
    ok = ok && srv_buf_puts(&g, ig_gbnf_json());
    if (!ok) {
        srv_buf_free(&g);
        return oom(err);
    }
    ig_status st = grammar_get('g', g.data, g.len, &r->grammar);
    srv_buf_free(&g);
    if (st != IG_OK) return grammar_error(err, "tools", st, "The tools' parameters");
    return true;
}

static bool parse_tools(json_t *root, srv_request *r, srv_error *err) {
    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    r->parallel_tool_calls = true;
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc)) {
            srv_error_bad(err, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
            return false;
        }
        r->parallel_tool_calls = json_is_true(ptc);
    }
    if (tools && !json_is_null(tools)) {
        if (r->kind != SRV_CHAT) {
            srv_error_bad(err, "tools", "'tools' is only supported by /v1/chat/completions");
            return false;
        }
        if (!json_is_array(tools) || json_array_size(tools) == 0 || json_array_size(tools) > 128) {
            srv_error_bad(err, "tools", "'tools' must be an array of 1 to 128 tools");
            return false;
        }
        r->tools = ig_calloc_array(json_array_size(tools), sizeof *r->tools);
        if (!r->tools) return oom(err);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
            json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
            json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            json_t *desc = json_is_object(fn) ? json_object_get(fn, "description") : NULL;
            json_t *params = json_is_object(fn) ? json_object_get(fn, "parameters") : NULL;
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 ||
                !json_is_object(fn)) {
                srv_error_bad(err, "tools", "tools[%zu] must be {\"type\": \"function\", "
                              "\"function\": {...}}", i);
                return false;
            }
            if (!json_is_string(name) || !tool_name_ok(json_string_value(name))) {
                srv_error_bad(err, "tools", "tools[%zu].function.name must be 1 to 64 characters "
                              "of a-z, A-Z, 0-9, _ and -", i);
                return false;
            }
            for (size_t k = 0; k < i; k++)
                if (!strcmp(r->tools[k].name, json_string_value(name))) {
                    srv_error_bad(err, "tools", "tools[%zu]: the name '%s' is used twice", i,
                                  json_string_value(name));
                    return false;
                }
            if ((desc && !json_is_null(desc) && !json_is_string(desc)) ||
                (params && !json_is_null(params) && !json_is_object(params))) {
                srv_error_bad(err, "tools", "tools[%zu]: 'description' must be a string and "
                              "'parameters' a JSON Schema object", i);
                return false;
            }
            srv_tool *dst = &r->tools[i];
            r->n_tools = i + 1;
            dst->name = ig_strdup(json_string_value(name));
            dst->description = json_is_string(desc) ? ig_strdup(json_string_value(desc)) : NULL;
            dst->parameters = json_is_object(params) ? json_dumps(params, JSON_COMPACT) : NULL;
            if (!dst->name || (json_is_string(desc) && !dst->description) ||
                (json_is_object(params) && !dst->parameters))
                return oom(err);
            if (dst->parameters) { /* refuse a bad schema now, whatever tool_choice is */
                char *rules = NULL;
                ig_status st = ig_json_schema_to_gbnf_rules(dst->parameters, strlen(dst->parameters),
                                                            "t-", &rules);
                free(rules);
                if (st != IG_OK) {
                    if (st == IG_ERR_NO_MEMORY) return oom(err);
                    srv_error_bad(err, "tools", "tools[%zu] (%s): invalid parameters: %s", i,
                                  dst->name, ig_last_error());
                    return false;
                }
            }
        }
    }
    r->tool_choice = SRV_TOOLS_AUTO;
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            const char *c = json_string_value(choice);
            if (!strcmp(c, "auto")) r->tool_choice = SRV_TOOLS_AUTO;
            else if (!strcmp(c, "none")) r->tool_choice = SRV_TOOLS_NONE;
            else if (!strcmp(c, "required")) r->tool_choice = SRV_TOOLS_REQUIRED;
            else {
                srv_error_bad(err, "tool_choice", "'tool_choice' must be 'auto', 'none', "
                              "'required' or {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}");
                return false;
            }
        } else {
            json_t *fn = json_is_object(choice) ? json_object_get(choice, "function") : NULL;
            json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(name)) {
                srv_error_bad(err, "tool_choice", "'tool_choice' must be 'auto', 'none', "
                              "'required' or {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}");
                return false;
            }
            r->tool_choice = SRV_TOOLS_NAMED;
            r->tool_named = -1;
            for (size_t k = 0; k < r->n_tools; k++)
                if (!strcmp(r->tools[k].name, json_string_value(name))) r->tool_named = (int)k;
            if (r->tool_named < 0) {
                srv_error_bad(err, "tool_choice", "tool_choice names the function '%.64s', which "
                              "is not among the tools", json_string_value(name));
                return false;
            }
        }
        if (r->n_tools == 0 && r->tool_choice != SRV_TOOLS_NONE && r->tool_choice != SRV_TOOLS_AUTO) {
            srv_error_bad(err, "tool_choice", "'tool_choice' needs 'tools'");
            return false;
        }
    }
    if (!srv_tools_active(r)) return true;
    if (r->grammar && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED)) {
        srv_error_bad(err, "tool_choice", "a required tool call cannot be combined with "
                      "'response_format' or 'grammar'");
        return false;
    }
    /* the instructions open the system text */
    srv_buf b = {0};
    if (!tool_instructions(r, &b)) {
        srv_buf_free(&b);
        return oom(err);
    }
    if (r->n_messages && !strcmp(r->messages[0].role, "system")) {
        if (!srv_buf_puts(&b, "\n") || !srv_buf_puts(&b, r->messages[0].content)) {
            srv_buf_free(&b);
            return oom(err);
        }
        free(r->messages[0].content);
        r->messages[0].content = b.data;
    } else {
        char *role = ig_strdup("system");
        if (!role) {
            srv_buf_free(&b);
            return oom(err);
        }
        memmove(r->messages + 1, r->messages, r->n_messages * sizeof *r->messages);
        r->messages[0].role = role;
        r->messages[0].content = b.data;
        r->n_messages++;
    }
    if (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED)
        return tool_grammar(r, err);
    return true;
}

/* Skips JSON white space. */
static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r')) i++;
    return i;
}

int srv_parse_tool_calls(const srv_request *r, const char *text, size_t len,
                         srv_tool_call **calls, size_t *content_len) {
    static const char open[] = "```tool_call";
    *calls = NULL;
    *content_len = len;
    int n = 0;
    srv_tool_call *v = NULL;
    size_t i = 0;
    while (text && i < len) {
        const char *p = memmem(text + i, len - i, open, sizeof open - 1);
        if (!p) break;
        size_t start = (size_t)(p - text), j = start + sizeof open - 1;
        j = skip_ws(text, j, len);
        const char *close = memmem(text + j, len - j, "```", 3);
        size_t end = close ? (size_t)(close - text) : len;
        json_error_t je;
        json_t *obj = json_loadb(text + j, end - j, JSON_DISABLE_EOF_CHECK, &je);
        json_t *name = json_is_object(obj) ? json_object_get(obj, "name") : NULL;
        json_t *args = json_is_object(obj) ? json_object_get(obj, "arguments") : NULL;
        bool known = false;
        for (size_t k = 0; json_is_string(name) && k < r->n_tools; k++)
            known = known || !strcmp(r->tools[k].name, json_string_value(name));
        if (known && json_is_object(args)) {
            srv_tool_call *nv = ig_realloc_array(v, (size_t)n + 1, sizeof *v);
            char *a = json_dumps(args, JSON_COMPACT);
            char *nm = ig_strdup(json_string_value(name));
            if (!nv || !a || !nm) {
                free(a);
                free(nm);
                if (nv) v = nv;
                json_decref(obj);
                srv_tool_calls_free(v, n);
                return -1;
            }
            v = nv;
            if (n == 0) {
                size_t c = start;
                while (c > 0 && (text[c - 1] == ' ' || text[c - 1] == '\n' || text[c - 1] == '\t' ||
                                 text[c - 1] == '\r'))
                    c--;
                *content_len = c;
            }
            static atomic_ullong counter;
            unsigned long long k = atomic_fetch_add(&counter, 1) + 1;
            uint64_t x = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (k * 0xBF58476D1CE4E5B9ull);
            x ^= x >> 29;
            snprintf(v[n].id, sizeof v[n].id, "call_%016llx%04llx", (unsigned long long)x, k & 0xffff);
            v[n].name = nm;
            v[n].arguments = a;
            n++;
        }
        json_decref(obj);
        i = close ? end + 3 : len;
    }
    *calls = v;
    if (n == 0) *content_len = len;
    return n;
}

void srv_tool_calls_free(srv_tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

static bool parse_structured(json_t *root, srv_request *r, srv_error *err) {
    json_t *rf = json_object_get(root, "response_format");
    json_t *gr = json_object_get(root, "grammar");
    bool constrained = false;
    if (rf && !json_is_null(rf)) {
        json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!type || !json_is_string(type)) {
            srv_error_bad(err, "response_format", "'response_format' must be an object with a "
                          "string 'type' (text, json_object or json_schema)");
            return false;
        }
        const char *t = json_string_value(type);
        if (!strcmp(t, "json_object")) {
            ig_status st = grammar_get('o', "", 0, &r->grammar);
            if (st != IG_OK) return grammar_error(err, "response_format", st, "json_object");
            constrained = true;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!js || !json_is_object(js)) {
                srv_error_bad(err, "response_format", "'response_format.json_schema' must be an "
                              "object with 'name' and 'schema'");
                return false;
            }
            json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
            if (name && !json_is_string(name)) {
                srv_error_bad(err, "response_format", "'response_format.json_schema.name' must "
                              "be a string");
                return false;
            }
            if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
                srv_error_bad(err, "response_format", "'response_format.json_schema.strict' must "
                              "be a boolean");
                return false;
            }
            json_t *schema = json_object_get(js, "schema");
            if (!schema || !(json_is_object(schema) || json_is_true(schema))) {
                srv_error_bad(err, "response_format", "'response_format.json_schema.schema' must "
                              "be a JSON Schema object");
                return false;
            }
            char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!text) return oom(err);
            ig_status st = grammar_get('s', text, strlen(text), &r->grammar);
            free(text);
            if (st != IG_OK)
                return grammar_error(err, "response_format", st, "Invalid JSON schema");
            constrained = true;
        } else if (strcmp(t, "text") != 0) {
            srv_error_bad(err, "response_format", "'response_format.type' must be 'text', "
                          "'json_object' or 'json_schema', got '%.64s'", t);
            return false;
        }
    }
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) {
            srv_error_bad(err, "grammar", "'grammar' must be a string (GBNF)");
            return false;
        }
        if (constrained) {
            srv_error_bad(err, "grammar", "'grammar' cannot be combined with a JSON "
                          "response_format");
            return false;
        }
        ig_status st = grammar_get('g', json_string_value(gr), json_string_length(gr), &r->grammar);
        if (st != IG_OK) return grammar_error(err, "grammar", st, "Invalid grammar");
    }
    return true;
}

bool srv_parse_request(srv_kind kind, const char *body, size_t len, const srv_limits *lim,
                       srv_request *out, srv_error *err) {
    srv_limits dl = srv_default_limits();
    if (!lim) lim = &dl;
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    out->temperature = 1.0;
    out->top_p = 1.0;
    out->top_k = 0;
    out->min_p = 0.0;
    out->n = 1;
    json_t *root;
    if (!parse_body(body, len, &root, err)) return false;
    bool ok = kind == SRV_CHAT ? parse_messages(root, lim, out, err)
                               : parse_prompt(root, lim, out, err);
    if (ok) ok = parse_options(root, lim, out, err);
    if (ok) ok = parse_structured(root, out, err);
    if (ok) ok = parse_tools(root, out, err);
    json_decref(root);
    if (!ok) {
        srv_request_free(out);
        out->kind = kind;
    }
    return ok;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (size_t i = 0; i < r->n_images; i++) {
        free(r->images[i].data);
        if (r->image_embd) free(r->image_embd[i]);
    }
    free(r->images);
    free(r->image_embd);
    free(r->prompt);
    free(r->prompt_ids);
    if (r->stop)
        for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->logit_bias);
    ig_grammar_free(r->grammar);
    for (size_t i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].description);
        free(r->tools[i].parameters);
    }
    free(r->tools);
    memset(r, 0, sizeof *r);
}

/* ---- /tokenize, /detokenize ---------------------------------------------- */

bool srv_parse_tokenize(const char *body, size_t len, srv_tokenize_req *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    out->parse_special = true;
    json_t *root;
    if (!parse_body(body, len, &root, err)) return false;
    bool ok = false;
    json_t *c = json_object_get(root, "content");
    const char *param = "content";
    if (!c || json_is_null(c)) {
        c = json_object_get(root, "prompt");
        param = "prompt";
    }
    if (!c || json_is_null(c)) {
        srv_error_bad(err, "content", "'content' is required");
        goto done;
    }
    if (!json_is_string(c)) {
        srv_error_bad(err, param, "'%s' must be a string", param);
        goto done;
    }
    if (get_bool(root, "add_special", &out->add_special, err) < 0) goto done;
    if (get_bool(root, "parse_special", &out->parse_special, err) < 0) goto done;
    if (get_bool(root, "with_pieces", &out->with_pieces, err) < 0) goto done;
    out->text = dup_json_string(c, &out->len);
    ok = out->text ? true : oom(err);
done:
    json_decref(root);
    return ok;
}

void srv_tokenize_req_free(srv_tokenize_req *r) {
    if (!r) return;
    free(r->text);
    r->text = NULL;
}

bool srv_parse_detokenize(const char *body, size_t len, int n_vocab, int32_t **ids, size_t *n_ids,
                          srv_error *err) {
    *ids = NULL;
    *n_ids = 0;
    json_t *root;
    if (!parse_body(body, len, &root, err)) return false;
    bool ok = false;
    json_t *t = json_object_get(root, "tokens");
    if (!t || !json_is_array(t)) {
        srv_error_bad(err, "tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    size_t n = json_array_size(t);
    int32_t *v = ig_calloc_array(n ? n : 1, sizeof *v);
    if (!v) {
        oom(err);
        goto done;
    }
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        json_int_t id = json_is_integer(e) ? json_integer_value(e) : -1;
        if (!json_is_integer(e) || id < 0 || id > INT32_MAX || (n_vocab > 0 && id >= n_vocab)) {
            free(v);
            srv_error_bad(err, "tokens", "tokens[%zu] is not a valid token id", i);
            goto done;
        }
        v[i] = (int32_t)id;
    }
    *ids = v;
    *n_ids = n;
    ok = true;
done:
    json_decref(root);
    return ok;
}
