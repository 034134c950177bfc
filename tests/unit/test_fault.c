/* Allocation-failure injection (ig_test_alloc_fail_nth): each operation
 * below runs with its 1st, 2nd, 3rd, ... allocation failing, until a run
 * makes fewer allocations than N. Every injected failure must come back as
 * an error with a message (no crash; under ASan, no leak: the sanitizer
 * build runs these at exit with detect_leaks=1), and the same call must
 * succeed right after. A call that succeeds although one of its allocations
 * failed has lost the failure somewhere (a grammar missing a rule), so that
 * fails the test too. */
#include "test.h"

#include "core/util.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* One attempt: true on success; on failure *status and the detail message
 * describe the error (status 0 where the API reports none). */
typedef bool (*fault_op)(void *user, int *status);

typedef struct walk_result {
    long n_allocs;    /* allocations of a clean run */
    long n_failed;    /* injected failures that came back as errors */
    long n_absorbed;  /* injected failures the call succeeded through (a defect) */
} walk_result;

/* Walks N = 1, 2, ... over op. want_status: the status every reported
 * failure must carry (IG_ERR_NO_MEMORY for library calls, 500 for the
 * server's parsers). */
static walk_result walk(const char *what, fault_op op, void *user, int want_status, long max_n) {
    walk_result w = {0, 0, 0};
    long n;
    for (n = 1; n <= max_n; n++) {
        int status = 0;
        ig_clear_error();
        ig_test_alloc_fail_nth(n);
        bool ok = op(user, &status);
        bool fired = ig_test_alloc_failed();
        long count = ig_test_alloc_count();
        ig_test_alloc_fail_nth(0);
        if (!fired) {
            if (!ok)
                ig_test_fail_at(__FILE__, __LINE__, "%s: failed with no injected failure (N=%ld): %s",
                                what, n, ig_last_error());
            w.n_allocs = count;
            break;
        }
        if (ok) {
            /* the call went on as if the allocation had succeeded */
            w.n_absorbed++;
            ig_test_fail_at(__FILE__, __LINE__, "%s: allocation %ld failed and the call succeeded",
                            what, n);
        } else {
            w.n_failed++;
            if (status != want_status)
                ig_test_fail_at(__FILE__, __LINE__, "%s: allocation %ld failed with status %d, want %d (%s)",
                                what, n, status, want_status, ig_last_error());
            if (!ig_last_error()[0] && want_status < 0) /* library calls */
                ig_test_fail_at(__FILE__, __LINE__, "%s: allocation %ld failed with no message", what, n);
        }
        int st2 = 0;
        ig_clear_error();
        if (!op(user, &st2))
            ig_test_fail_at(__FILE__, __LINE__, "%s: the attempt after failing allocation %ld failed: %d (%s)",
                            what, n, st2, ig_last_error());
    }
    if (n > max_n) ig_test_fail_at(__FILE__, __LINE__, "%s: still allocating after %ld", what, max_n);
    printf("  %s: %ld allocations, %ld failures reported, %ld absorbed\n", what, w.n_allocs, w.n_failed,
           w.n_absorbed);
    return w;
}

/* ---- model loading and context creation --------------------------------- */

static bool op_model_load(void *user, int *status) {
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1; /* allocations on this thread only */
    ig_model *m = NULL;
    ig_status st = ig_model_load((const char *)user, &mp, &m);
    *status = (int)st;
    if (st != IG_OK) {
        if (m) ig_test_fail_at(__FILE__, __LINE__, "failed load left a model");
        return false;
    }
    ig_model_free(m);
    return true;
}

static void fixture_path(char *path, size_t cap) {
    snprintf(path, cap, "%s/hf/tiny-1b-like/f32", ig_test_fixtures());
}

IG_TEST(fault_alloc_model_load) {
    char path[1024];
    fixture_path(path, sizeof path);
    walk_result w = walk("model load (safetensors)", op_model_load, path, IG_ERR_NO_MEMORY, 20000);
    CHECK(w.n_allocs > 10);
    CHECK(w.n_failed > 0);
}

typedef struct ctx_case {
    ig_model *model;
} ctx_case;

/* Creates a context and decodes three tokens. */
static bool op_context(void *user, int *status) {
    ctx_case *c = user;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 8;
    cp.n_threads = 1;
    ig_context *ctx = NULL;
    ig_status st = ig_context_create(c->model, &cp, &ctx);
    if (st == IG_OK) {
        int32_t tok[3] = {2, 10, 20}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
        uint8_t want[3] = {0, 0, 1};
        ig_batch b = {3, tok, pos, seq, want};
        st = ig_decode(ctx, &b);
        if (st == IG_OK && !ig_get_logits(ctx, 0)) st = IG_ERR_INTERNAL;
    } else if (ctx) {
        ig_test_fail_at(__FILE__, __LINE__, "failed create left a context");
    }
    ig_context_free(ctx);
    *status = (int)st;
    return st == IG_OK;
}

IG_TEST(fault_alloc_context) {
    char path[1024];
    fixture_path(path, sizeof path);
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1;
    ctx_case c = {NULL};
    REQUIRE_OK(ig_model_load(path, &mp, &c.model));
    walk_result w = walk("context create + decode", op_context, &c, IG_ERR_NO_MEMORY, 20000);
    CHECK(w.n_failed > 0);
    ig_model_free(c.model);
}

/* ---- tokenizer ----------------------------------------------------------- */

static const char *k_tok_json =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<bos>\", \"special\": true},"
    " {\"id\": 9, \"content\": \"<x>\", \"special\": false}],"
    " \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
    " \"content\": \"\xE2\x96\x81\"},"
    " \"pre_tokenizer\": null,"
    " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","
    " \"vocab\": {\"<bos>\": 0, \"<unk>\": 1, \"a\": 2, \"b\": 3, \"c\": 4, \"ab\": 5,"
    " \"bc\": 6, \"<0x64>\": 7, \"\xE2\x96\x81\": 8, \"<x>\": 9, \"abc\": 10},"
    " \"merges\": [[\"a\", \"b\"], [\"b\", \"c\"], [\"ab\", \"c\"]]}}";

/* Loads the tokenizer and encodes a text with a special piece and a byte
 * fallback; checks the ids. */
static bool op_tokenizer(void *user, int *status) {
    (void)user;
    ig_tokenizer *t = NULL;
    ig_status st = ig_tokenizer_from_hf_json_buf(k_tok_json, strlen(k_tok_json), &t);
    if (st == IG_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        st = ig_tokenize(t, "abc d<x>", 8, true, true, &ids, &n);
        static const int32_t want[] = {0, 10, 8, 7, 9};
        if (st == IG_OK && (n != 5 || memcmp(ids, want, sizeof want) != 0)) {
            ig_test_fail_at(__FILE__, __LINE__, "tokenizer: wrong ids (%zu)", n);
            for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
            printf("\n");
            st = IG_ERR_INTERNAL;
        }
        free(ids);
    } else if (t) {
        ig_test_fail_at(__FILE__, __LINE__, "failed load left a tokenizer");
    }
    ig_tokenizer_free(t);
    *status = (int)st;
    return st == IG_OK;
}

IG_TEST(fault_alloc_tokenizer) {
    walk_result w = walk("tokenizer load + encode", op_tokenizer, NULL, IG_ERR_NO_MEMORY, 20000);
    CHECK(w.n_failed > 0);
}

/* ---- the server's request parsing --------------------------------------- */

typedef struct req_case {
    srv_kind kind;
    const char *body; /* "@" becomes a number new on every call */
} req_case;

/* The body with "@" replaced by a fresh number, so that a grammar it names
 * misses the server's grammar cache and is compiled on every attempt. */
static char *unique_body(const char *body) {
    static long counter;
    char num[24];
    snprintf(num, sizeof num, "%ld", ++counter);
    size_t n = strlen(body) + strlen(num) * 4 + 1;
    char *out = malloc(n), *o = out;
    if (!out) return NULL;
    for (const char *p = body; *p; p++) {
        if (*p == '@') {
            memcpy(o, num, strlen(num));
            o += strlen(num);
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

/* Parses the body; for chat with tools, also reads tool calls back from a
 * model answer, and renders the error JSON of a failure. */
static bool op_request(void *user, int *status) {
    *status = 0;
    const req_case *c = user;
    srv_limits lim = srv_default_limits();
    lim.n_vocab = 1000;
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    char *body = unique_body(c->body);
    if (!body) return false;
    bool parsed = srv_parse_request(c->kind, body, strlen(body), &lim, &r, &e);
    free(body);
    if (!parsed) {
        *status = e.status;
        if (!e.message[0]) ig_test_fail_at(__FILE__, __LINE__, "request error with no message");
        char *json = srv_error_json(&e);
        free(json);
        return false;
    }
    bool ok = true;
    if (r.n_tools > 0) {
        static const char answer[] =
            "Sure.\n```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
        srv_tool_call *calls = NULL;
        size_t content_len = 0;
        int n = srv_parse_tool_calls(&r, answer, sizeof answer - 1, &calls, &content_len);
        if (n < 0) {
            *status = 500;
            ok = false;
        } else {
            if (n != 1 || strcmp(calls[0].name, "get_weather") != 0 || content_len != 5) {
                ig_test_fail_at(__FILE__, __LINE__, "tool calls: %d found, content %zu", n, content_len);
                ok = false;
            }
            srv_tool_calls_free(calls, n);
        }
    }
    srv_request_free(&r);
    return ok;
}

IG_TEST(fault_alloc_server_request) {
    static const req_case cases[] = {
        {SRV_CHAT,
         "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
         " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]},"
         " {\"role\": \"assistant\", \"content\": \"Hello\"}, {\"role\": \"user\", \"content\": \"More\"}],"
         " \"stop\": [\"\\n\\n\", \"END\"], \"n\": 2, \"logprobs\": true, \"top_logprobs\": 3,"
         " \"logit_bias\": {\"5\": -100, \"7\": 2}, \"stream\": true,"
         " \"stream_options\": {\"include_usage\": true}, \"seed\": 7}"},
        {SRV_CHAT,
         "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"},"
         " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
         " \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Bergen\\\"}\"}}]},"
         " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"rain\"}],"
         " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
         " \"description\": \"Weather of a city\", \"parameters\": {\"type\": \"object\","
         " \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"@\"}}, \"required\": [\"city\"]}}}]}"},
        {SRV_COMPLETION,
         "{\"prompt\": [2, 10, 20, 30], \"max_tokens\": 4, \"stop\": \"x\","
         " \"response_format\": {\"type\": \"json_object\"}}"},
        {SRV_COMPLETION, "{\"prompt\": \"Once upon a time\", \"grammar\": "
                         "\"root ::= \\\"a@\\\" item+\\nitem ::= [a-z] | \\\"-\\\" [0-9]*\"}"},
        {SRV_CHAT,
         "{\"messages\": [{\"role\": \"user\", \"content\": \"List\"}], \"response_format\":"
         " {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"s\", \"schema\": {\"type\": \"object\","
         " \"properties\": {\"k@\": {\"type\": \"array\", \"items\": {\"enum\": [\"x\", 2]}}},"
         " \"required\": [\"k@\"]}}}}"},
    };
    /* jansson's own allocations are not failed: its lexer (2.14) ignores a
     * failed buffer growth and reads past the buffer */
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        char what[64];
        snprintf(what, sizeof what, "request %zu", i);
        walk_result w = walk(what, op_request, (void *)&cases[i], 500, 20000);
        CHECK(w.n_failed > 0);
    }
}

static bool op_tokenize_req(void *user, int *status) {
    (void)user;
    static const char body[] = "{\"content\": \"Hello world\", \"add_special\": true}";
    srv_tokenize_req t;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (!srv_parse_tokenize(body, sizeof body - 1, &t, &e)) {
        *status = e.status;
        return false;
    }
    bool ok = t.len == 11 && !memcmp(t.text, "Hello world", 11);
    srv_tokenize_req_free(&t);
    return ok;
}

static bool op_detokenize_req(void *user, int *status) {
    (void)user;
    static const char body[] = "{\"tokens\": [1, 2, 3, 999]}";
    int32_t *ids = NULL;
    size_t n = 0;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (!srv_parse_detokenize(body, sizeof body - 1, 1000, &ids, &n, &e)) {
        *status = e.status;
        return false;
    }
    bool ok = n == 4 && ids[3] == 999;
    free(ids);
    return ok;
}

IG_TEST(fault_alloc_server_tokenize) {
    walk_result a = walk("tokenize request", op_tokenize_req, NULL, 500, 1000);
    walk_result b = walk("detokenize request", op_detokenize_req, NULL, 500, 1000);
    CHECK(a.n_failed > 0);
    CHECK(b.n_failed > 0);
}
