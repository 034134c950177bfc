#include "server/respond.h"

#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

json_t *srv_json_text(const char *s, size_t n) {
    if (!s) return json_string("");
    if (srv_utf8_valid(s, n)) return json_stringn(s, n);
    size_t m;
    char *fixed = srv_utf8_sanitize(s, n, &m);
    if (!fixed) return NULL;
    json_t *j = json_stringn(fixed, m);
    free(fixed);
    return j;
}

static json_t *json_lp(float v) {
    /* JSON has no -inf: OpenAI reports impossible tokens as -9999 */
    return json_real(isfinite(v) ? (double)v : -9999.0);
}

/* Raw bytes of a token as the client sees them (control tokens: their piece). */
static size_t token_bytes(const ig_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t n = tok ? ig_token_bytes(tok, id, true, buf, cap) : 0;
    return n > cap ? cap : n;
}

static json_t *bytes_array(const char *b, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* Chat: {"token","logprob","bytes","top_logprobs":[...]} */
static json_t *chat_lp_entry(const ig_tokenizer *tok, const ig_gen_logprob *e) {
    char buf[256];
    size_t n = token_bytes(tok, e->id, buf, sizeof buf);
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "token", srv_json_text(buf, n));
    json_object_set_new(o, "logprob", json_lp(e->logprob));
    json_object_set_new(o, "bytes", bytes_array(buf, n));
    json_t *tops = json_array();
    for (int k = 0; tops && k < e->n_top; k++) {
        json_t *t = json_object();
        if (!t) break;
        size_t m = token_bytes(tok, e->top[k].id, buf, sizeof buf);
        json_object_set_new(t, "token", srv_json_text(buf, m));
        json_object_set_new(t, "logprob", json_lp(e->top[k].logprob));
        json_object_set_new(t, "bytes", bytes_array(buf, m));
        json_array_append_new(tops, t);
    }
    json_object_set_new(o, "top_logprobs", tops);
    return o;
}

static json_t *chat_logprobs(const ig_tokenizer *tok, const ig_gen_logprob *lps, size_t n) {
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++) json_array_append_new(content, chat_lp_entry(tok, &lps[i]));
    json_t *o = json_object();
    if (!o) {
        json_decref(content);
        return NULL;
    }
    json_object_set_new(o, "content", content);
    json_object_set_new(o, "refusal", json_null());
    return o;
}

/* Legacy completions: {"tokens","token_logprobs","top_logprobs","text_offset"} */
static json_t *completion_logprobs(const ig_tokenizer *tok, const ig_gen_logprob *lps, size_t n,
                                   size_t text_offset) {
    json_t *o = json_object();
    json_t *tokens = json_array(), *lpv = json_array(), *tops = json_array(), *offs = json_array();
    char buf[256];
    size_t off = text_offset;
    for (size_t i = 0; tokens && lpv && tops && offs && i < n; i++) {
        size_t m = token_bytes(tok, lps[i].id, buf, sizeof buf);
        json_array_append_new(tokens, srv_json_text(buf, m));
        json_array_append_new(lpv, json_lp(lps[i].logprob));
        json_t *t = json_object();
        for (int k = 0; t && k < lps[i].n_top; k++) {
            size_t q = token_bytes(tok, lps[i].top[k].id, buf, sizeof buf - 1);
            json_t *key = srv_json_text(buf, q);
            if (key) json_object_set_new(t, json_string_value(key), json_lp(lps[i].top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, t);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += m;
    }
    if (o) {
        json_object_set_new(o, "tokens", tokens);
        json_object_set_new(o, "token_logprobs", lpv);
        json_object_set_new(o, "top_logprobs", tops);
        json_object_set_new(o, "text_offset", offs);
    } else {
        json_decref(tokens);
        json_decref(lpv);
        json_decref(tops);
        json_decref(offs);
    }
    return o;
}

/* message.tool_calls, or (delta) the streamed form with indexes. */
static json_t *tool_calls_json(const srv_choice_out *o, bool delta) {
    json_t *a = json_array();
    for (int i = 0; a && i < o->n_calls; i++) {
        json_t *c = json_object(), *f = json_object();
        if (!c || !f) {
            json_decref(c);
            json_decref(f);
            break;
        }
        if (delta) json_object_set_new(c, "index", json_integer(i));
        json_object_set_new(c, "id", json_string(o->calls[i].id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(f, "name", srv_json_text(o->calls[i].name, strlen(o->calls[i].name)));
        json_object_set_new(f, "arguments",
                            srv_json_text(o->calls[i].arguments, strlen(o->calls[i].arguments)));
        json_object_set_new(c, "function", f);
        json_array_append_new(a, c);
    }
    return a;
}

static json_t *usage_json(const srv_job *j) {
    long long gen = 0;
    for (int i = 0; i < j->n_choices; i++) gen += j->out[i].n_gen;
    json_t *u = json_object();
    if (!u) return NULL;
    json_object_set_new(u, "prompt_tokens", json_integer(j->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(gen));
    json_object_set_new(u, "total_tokens", json_integer(j->n_prompt + gen));
    json_t *d = json_object();
    if (d) json_object_set_new(d, "cached_tokens", json_integer(j->n_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static json_t *envelope(const srv_resp_info *ri, bool chunk) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(ri->id));
    const char *obj = ri->kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                           : "text_completion";
    json_object_set_new(o, "object", json_string(obj));
    json_object_set_new(o, "created", json_integer(ri->created));
    json_object_set_new(o, "model", srv_json_text(ri->model, strlen(ri->model)));
    json_object_set_new(o, "system_fingerprint", json_string("ignis-" IGNIS_VERSION));
    return o;
}

char *srv_render_final(const srv_resp_info *ri, const srv_job *j) {
    json_t *root = envelope(ri, false);
    json_t *choices = json_array();
    char *out = NULL;
    if (!root || !choices) goto done;
    for (int i = 0; i < j->n_choices; i++) {
        const srv_choice_out *o = &j->out[i];
        json_t *c = json_object();
        if (!c) goto done;
        json_object_set_new(c, "index", json_integer(i));
        json_t *text = srv_json_text(o->text.data ? o->text.data : "", o->text.len);
        if (ri->kind == SRV_CHAT) {
            json_t *msg = json_object();
            if (msg) {
                json_object_set_new(msg, "role", json_string("assistant"));
                if (o->n_calls && o->text.len == 0) {
                    json_decref(text);
                    text = json_null();
                }
                json_object_set_new(msg, "content", text);
                json_object_set_new(msg, "refusal", json_null());
                if (o->n_calls) json_object_set_new(msg, "tool_calls", tool_calls_json(o, false));
            } else json_decref(text);
            json_object_set_new(c, "message", msg);
            json_object_set_new(c, "logprobs", j->req.logprobs
                                                   ? chat_logprobs(ri->tok, o->lps, o->n_lps)
                                                   : json_null());
        } else {
            json_object_set_new(c, "text", text);
            json_object_set_new(c, "logprobs", j->req.logprobs
                                                   ? completion_logprobs(ri->tok, o->lps, o->n_lps, 0)
                                                   : json_null());
        }
        json_object_set_new(c, "finish_reason", o->finish ? json_string(o->finish) : json_null());
        json_array_append_new(choices, c);
    }
    json_object_set(root, "choices", choices);
    json_object_set_new(root, "usage", usage_json(j));
    out = json_dumps(root, JSON_COMPACT);
done:
    json_decref(choices);
    json_decref(root);
    return out;
}

static bool append_event(srv_buf *out, json_t *obj) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) return false;
    bool ok = srv_buf_puts(out, "data: ") && srv_buf_puts(out, s) && srv_buf_puts(out, "\n\n");
    free(s);
    return ok;
}

bool srv_render_chunk(srv_buf *out, const srv_resp_info *ri, int index, bool role,
                      const char *text, size_t n_text, const ig_gen_logprob *lps, size_t n_lps,
                      size_t text_offset, const char *finish, bool usage_null) {
    json_t *root = envelope(ri, true);
    json_t *choices = json_array();
    json_t *c = json_object();
    if (!root || !choices || !c) {
        json_decref(root);
        json_decref(choices);
        json_decref(c);
        return false;
    }
    json_object_set_new(c, "index", json_integer(index));
    if (ri->kind == SRV_CHAT) {
        json_t *delta = json_object();
        if (delta && role) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        }
        if (delta && n_text) json_object_set_new(delta, "content", srv_json_text(text, n_text));
        json_object_set_new(c, "delta", delta);
        json_object_set_new(c, "logprobs", n_lps ? chat_logprobs(ri->tok, lps, n_lps) : json_null());
    } else {
        json_object_set_new(c, "text", srv_json_text(text, n_text));
        json_object_set_new(c, "logprobs", n_lps ? completion_logprobs(ri->tok, lps, n_lps,
                                                                       text_offset)
                                                 : json_null());
    }
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_array_append_new(choices, c);
    json_object_set_new(root, "choices", choices);
    if (usage_null) json_object_set_new(root, "usage", json_null());
    return append_event(out, root);
}

bool srv_render_tool_call_chunks(srv_buf *out, const srv_resp_info *ri, int index,
                                 const srv_choice_out *o, bool usage_null) {
    /* one chunk per call: its id, name and all of its arguments */
    for (int k = 0; k < o->n_calls; k++) {
        json_t *root = envelope(ri, true);
        json_t *choices = json_array(), *c = json_object(), *delta = json_object();
        if (!root || !choices || !c || !delta) {
            json_decref(root);
            json_decref(choices);
            json_decref(c);
            json_decref(delta);
            return false;
        }
        srv_choice_out one = *o;
        one.calls = o->calls + k;
        one.n_calls = 1;
        json_t *calls = tool_calls_json(&one, true);
        if (calls && json_array_size(calls) == 1)
            json_object_set_new(json_array_get(calls, 0), "index", json_integer(k));
        json_object_set_new(delta, "tool_calls", calls);
        json_object_set_new(c, "index", json_integer(index));
        json_object_set_new(c, "delta", delta);
        json_object_set_new(c, "logprobs", json_null());
        json_object_set_new(c, "finish_reason", json_null());
        json_array_append_new(choices, c);
        json_object_set_new(root, "choices", choices);
        if (usage_null) json_object_set_new(root, "usage", json_null());
        if (!append_event(out, root)) return false;
    }
    return true;
}

bool srv_render_usage_chunk(srv_buf *out, const srv_resp_info *ri, const srv_job *j) {
    json_t *root = envelope(ri, true);
    if (!root) return false;
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", usage_json(j));
    return append_event(out, root);
}

bool srv_render_error_event(srv_buf *out, const char *message, const char *type) {
    json_t *root = json_object(), *e = json_object();
    if (!root || !e) {
        json_decref(root);
        json_decref(e);
        return false;
    }
    json_object_set_new(e, "message", srv_json_text(message, strlen(message)));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", json_null());
    json_object_set_new(e, "code", json_null());
    json_object_set_new(root, "error", e);
    return append_event(out, root);
}
