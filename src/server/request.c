#define _GNU_SOURCE
#include "server/request.h"

#include "server/text.h"

#include <jansson.h>
#include <limits.h>
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
    char *s = malloc(n + 1);
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
    return NULL;
}

/* Standard base64 (padding optional, no whitespace) into a malloc'ed
 * buffer; false when malformed. */
static bool base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len) {
    while (n && s[n - 1] == '=') n--;
    if (n % 4 == 1) return false;
    uint8_t *d = malloc(n / 4 * 3 + 3);
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
    srv_image *grown = realloc(r->images, (r->n_images + 1) * sizeof *grown);
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
            *out = calloc(1, 1);
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
        b.data = calloc(1, 1);
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
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return oom(err);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) {
            srv_error_bad(err, "messages", "messages[%zu] must be an object", i);
            return false;
        }
        json_t *role = json_object_get(m, "role");
        if (!role || !json_is_string(role)) {
            srv_error_bad(err, "messages", "messages[%zu].role must be a string", i);
            return false;
        }
        const char *nr = normalize_role(json_string_value(role));
        if (!nr) {
            srv_error_bad(err, "messages", "messages[%zu].role '%s' is not supported (use system, "
                          "developer, user or assistant)", i, json_string_value(role));
            return false;
        }
        r->messages[i].role = strdup(nr);
        if (!r->messages[i].role) return oom(err);
        r->n_messages = i + 1;
        if (!parse_content(json_object_get(m, "content"), nr, i, &r->messages[i].content, r, err))
            return false;
    }
    return true;
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
        r->prompt_ids = calloc(n, sizeof *r->prompt_ids);
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
    r->stop = calloc(n, sizeof *r->stop);
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
    r->logit_bias = calloc(n, sizeof *r->logit_bias);
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
    int32_t *v = calloc(n ? n : 1, sizeof *v);
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
