/* Request parsing and validation of the server (pure functions). */
#include "test.h"

#include "server/request.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static bool parse(srv_kind kind, const char *body, srv_request *r, srv_error *e) {
    srv_limits lim = srv_default_limits();
    lim.n_vocab = 1000;
    return srv_parse_request(kind, body, strlen(body), &lim, r, e);
}

/* Parses body expecting failure; returns the error's status and checks the
 * param name when want_param != NULL. */
static int parse_fail(srv_kind kind, const char *body, const char *want_param) {
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (parse(kind, body, &r, &e)) {
        srv_request_free(&r);
        return 0;
    }
    if (want_param && (!e.param || strcmp(e.param, want_param) != 0))
        ig_test_fail_at(__FILE__, __LINE__, "body %s: param %s, want %s", body,
                        e.param ? e.param : "(null)", want_param);
    if (!e.message[0]) ig_test_fail_at(__FILE__, __LINE__, "empty error message for %s", body);
    return e.status;
}

IG_TEST(server_request_chat_minimal_defaults) {
    srv_request r;
    srv_error e;
    REQUIRE(parse(SRV_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r, &e));
    CHECK(r.kind == SRV_CHAT);
    CHECK(r.model && !strcmp(r.model, "m"));
    CHECK_EQ_INT(r.n_messages, 1);
    CHECK(!strcmp(r.messages[0].role, "user"));
    CHECK(!strcmp(r.messages[0].content, "hi"));
    CHECK_EQ_INT(r.max_tokens, -1);
    CHECK_NEAR(r.temperature, 1.0, 0);
    CHECK_NEAR(r.top_p, 1.0, 0);
    CHECK_EQ_INT(r.top_k, 0);
    CHECK_EQ_INT(r.n, 1);
    CHECK(!r.stream);
    CHECK(!r.has_seed);
    CHECK(!r.logprobs);
    CHECK_EQ_INT(r.n_stop, 0);
    srv_request_free(&r);
}

IG_TEST(server_request_chat_all_fields) {
    const char *body =
        "{\"messages\":[{\"role\":\"developer\",\"content\":\"be nice\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null},{\"role\":\"model\","
        "\"content\":\"x\"}],"
        "\"max_tokens\":50,\"max_completion_tokens\":20,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":40,\"min_p\":0.05,\"seed\":-3,\"stop\":[\"\\n\\n\",\"\",\"END\"],\"n\":3,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-1.5,\"logit_bias\":{\"12\":5,\"7\":-100},"
        "\"logprobs\":true,\"top_logprobs\":4,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"user\":\"ignored\",\"tools\":null}";
    srv_request r;
    srv_error e;
    REQUIRE(parse(SRV_CHAT, body, &r, &e));
    REQUIRE(r.n_messages == 4);
    CHECK(!strcmp(r.messages[0].role, "system"));
    CHECK(!strcmp(r.messages[1].content, "a\nb"));
    CHECK(!strcmp(r.messages[2].role, "assistant"));
    CHECK(!strcmp(r.messages[2].content, ""));
    CHECK(!strcmp(r.messages[3].role, "assistant"));
    CHECK_EQ_INT(r.max_tokens, 20); /* the smaller of the two */
    CHECK_NEAR(r.temperature, 0.5, 1e-12);
    CHECK_NEAR(r.top_p, 0.9, 1e-12);
    CHECK_EQ_INT(r.top_k, 40);
    CHECK_NEAR(r.min_p, 0.05, 1e-12);
    CHECK(r.has_seed);
    CHECK(r.seed == (uint64_t)-3);
    REQUIRE(r.n_stop == 2); /* the empty one is dropped */
    CHECK(!strcmp(r.stop[0], "\n\n"));
    CHECK(!strcmp(r.stop[1], "END"));
    CHECK_EQ_INT(r.n, 3);
    CHECK_NEAR(r.presence_penalty, 0.5, 0);
    CHECK_NEAR(r.frequency_penalty, -1.5, 0);
    REQUIRE(r.n_logit_bias == 2);
    int seen12 = 0, seen7 = 0;
    for (size_t i = 0; i < r.n_logit_bias; i++) {
        if (r.logit_bias[i].token == 12 && r.logit_bias[i].bias == 5.0f) seen12 = 1;
        if (r.logit_bias[i].token == 7 && r.logit_bias[i].bias == -100.0f) seen7 = 1;
    }
    CHECK(seen12 && seen7);
    CHECK(r.logprobs);
    CHECK_EQ_INT(r.top_logprobs, 4);
    CHECK(r.stream);
    CHECK(r.include_usage);
    srv_request_free(&r);
}

IG_TEST(server_request_stop_string_and_integral_real) {
    srv_request r;
    srv_error e;
    REQUIRE(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}],\"stop\":\"###\","
                            "\"max_tokens\":8.0}",
                  &r, &e));
    REQUIRE(r.n_stop == 1);
    CHECK(!strcmp(r.stop[0], "###"));
    CHECK_EQ_INT(r.max_tokens, 8);
    srv_request_free(&r);
}

IG_TEST(server_request_malformed_json) {
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}", NULL),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "[1,2,3]", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "\"just a string\"", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "null", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[] } trailing", NULL), 400);
    /* invalid UTF-8 inside a string */
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
                            NULL),
                 400);
    /* NUL characters are refused */
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
                            NULL),
                 400);
    /* integer overflow */
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                      "\"max_tokens\":99999999999999999999999}",
                            NULL),
                 400);
}

IG_TEST(server_request_deep_nesting_does_not_crash) {
    size_t depth = 100000;
    char *s = malloc(depth * 2 + 1);
    REQUIRE(s);
    for (size_t i = 0; i < depth; i++) s[i] = '[';
    for (size_t i = 0; i < depth; i++) s[depth + i] = ']';
    s[2 * depth] = '\0';
    CHECK_EQ_INT(parse_fail(SRV_CHAT, s, NULL), 400);
    free(s);
}

IG_TEST(server_request_messages_validation) {
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[]}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":\"hi\"}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[1]}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", "messages"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
                            "messages"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":42}]}",
                            "messages"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                      "\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                            "messages"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                      "\"text\",\"text\":7}]}]}",
                            "messages"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}",
                            "messages"),
                 400);
    /* a failure after some messages were parsed must not leak (ASan) */
    CHECK_EQ_INT(parse_fail(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"ok\"},"
                                      "{\"role\":\"user\",\"content\":{}}]}",
                            "messages"),
                 400);
}

#define CHAT_PREFIX "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"

IG_TEST(server_request_wrong_types) {
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"model\":3}", "model"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_tokens\":\"10\"}", "max_tokens"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_tokens\":1.5}", "max_tokens"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"temperature\":\"hot\"}", "temperature"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stream\":1}", "stream"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stream_options\":true}", "stream_options"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stream_options\":{\"include_usage\":\"y\"}}",
                            "stream_options"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stop\":5}", "stop"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stop\":[\"a\",5]}", "stop"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":[1]}", "logit_bias"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"abc\":1}}", "logit_bias"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"5\":\"x\"}}", "logit_bias"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logprobs\":\"yes\"}", "logprobs"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"seed\":\"1\"}", "seed"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"n\":[2]}", "n"), 400);
}

IG_TEST(server_request_out_of_range) {
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_tokens\":0}", "max_tokens"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_tokens\":-5}", "max_tokens"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_tokens\":4294967296}", "max_tokens"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"max_completion_tokens\":-1}",
                            "max_completion_tokens"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"temperature\":-0.1}", "temperature"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"temperature\":2.5}", "temperature"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"temperature\":1e400}", NULL), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"top_p\":1.5}", "top_p"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"top_k\":-2}", "top_k"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"min_p\":2}", "min_p"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"n\":0}", "n"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"n\":1000000}", "n"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"presence_penalty\":3}", "presence_penalty"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"frequency_penalty\":-2.01}",
                            "frequency_penalty"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"5\":101}}", "logit_bias"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"-5\":1}}", "logit_bias"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"1000\":1}}", "logit_bias"),
                 400); /* n_vocab is 1000 */
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"logit_bias\":{\"99999999999999999999\":1}}",
                            "logit_bias"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"top_logprobs\":21,\"logprobs\":true}",
                            "top_logprobs"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"top_logprobs\":3}", "top_logprobs"), 400);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, CHAT_PREFIX "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\","
                                      "\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\","
                                      "\"16\",\"17\"]}",
                            "stop"),
                 400);
}

IG_TEST(server_request_long_stop_string_rejected) {
    char body[2048];
    char stop[600];
    memset(stop, 'a', sizeof stop - 1);
    stop[sizeof stop - 1] = '\0';
    snprintf(body, sizeof body, CHAT_PREFIX "\"stop\":\"%s\"}", stop);
    CHECK_EQ_INT(parse_fail(SRV_CHAT, body, "stop"), 400);
}

IG_TEST(server_request_completion_prompts) {
    srv_request r;
    srv_error e;
    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":\"Once upon\",\"max_tokens\":5,\"logprobs\":2}", &r,
                  &e));
    CHECK(r.prompt && !strcmp(r.prompt, "Once upon"));
    CHECK_EQ_INT(r.prompt_len, 9);
    CHECK(!r.prompt_ids);
    CHECK(r.logprobs);
    CHECK_EQ_INT(r.top_logprobs, 2);
    srv_request_free(&r);

    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":[\"only one\"]}", &r, &e));
    CHECK(!strcmp(r.prompt, "only one"));
    srv_request_free(&r);

    REQUIRE(parse(SRV_COMPLETION, "{\"prompt\":[2, 10, 999]}", &r, &e));
    REQUIRE(r.n_prompt_ids == 3);
    CHECK_EQ_INT(r.prompt_ids[0], 2);
    CHECK_EQ_INT(r.prompt_ids[2], 999);
    CHECK(!r.prompt);
    srv_request_free(&r);

    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":5}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":[]}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":[1, 1000]}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":[1, -1]}", "prompt"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", "logprobs"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs"),
                 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix"), 400);
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", "best_of"), 400);
    /* a chat body is not a completion body */
    CHECK_EQ_INT(parse_fail(SRV_COMPLETION,
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "prompt"),
                 400);
}

IG_TEST(server_request_error_json_shape) {
    srv_error e;
    srv_error_set(&e, 400, "invalid_request_error", "messages", "context_length_exceeded",
                  "too long: %d", 5000);
    char *s = srv_error_json(&e);
    REQUIRE(s);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    free(s);
    REQUIRE(j);
    json_t *err = json_object_get(j, "error");
    REQUIRE(json_is_object(err));
    CHECK(!strcmp(json_string_value(json_object_get(err, "message")), "too long: 5000"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "param")), "messages"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "code")), "context_length_exceeded"));
    json_decref(j);

    /* null param/code, and a message with invalid UTF-8 still renders */
    srv_error_set(&e, 401, "authentication_error", NULL, NULL, "bad \xff key");
    s = srv_error_json(&e);
    REQUIRE(s);
    j = json_loads(s, 0, &je);
    free(s);
    REQUIRE(j);
    err = json_object_get(j, "error");
    CHECK(json_is_null(json_object_get(err, "param")));
    CHECK(json_is_null(json_object_get(err, "code")));
    CHECK(!strcmp(json_string_value(json_object_get(err, "message")), "bad \xef\xbf\xbd key"));
    json_decref(j);
}

IG_TEST(server_request_tokenize_detokenize) {
    srv_tokenize_req t;
    srv_error e;
    const char *b = "{\"content\":\"hello\",\"add_special\":true}";
    REQUIRE(srv_parse_tokenize(b, strlen(b), &t, &e));
    CHECK(!strcmp(t.text, "hello"));
    CHECK(t.add_special);
    CHECK(t.parse_special);
    srv_tokenize_req_free(&t);
    b = "{\"prompt\":\"p\"}";
    REQUIRE(srv_parse_tokenize(b, strlen(b), &t, &e));
    CHECK(!strcmp(t.text, "p"));
    CHECK(!t.add_special);
    srv_tokenize_req_free(&t);
    b = "{\"content\":3}";
    CHECK(!srv_parse_tokenize(b, strlen(b), &t, &e));
    CHECK_EQ_INT(e.status, 400);
    b = "{}";
    CHECK(!srv_parse_tokenize(b, strlen(b), &t, &e));

    int32_t *ids;
    size_t n;
    b = "{\"tokens\":[1,2,3]}";
    REQUIRE(srv_parse_detokenize(b, strlen(b), 100, &ids, &n, &e));
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[2], 3);
    free(ids);
    b = "{\"tokens\":[]}";
    REQUIRE(srv_parse_detokenize(b, strlen(b), 100, &ids, &n, &e));
    CHECK_EQ_INT(n, 0);
    free(ids);
    b = "{\"tokens\":[1,100]}";
    CHECK(!srv_parse_detokenize(b, strlen(b), 100, &ids, &n, &e));
    CHECK_EQ_INT(e.status, 400);
    b = "{\"tokens\":[\"a\"]}";
    CHECK(!srv_parse_detokenize(b, strlen(b), 100, &ids, &n, &e));
    b = "{\"tokens\":5}";
    CHECK(!srv_parse_detokenize(b, strlen(b), 100, &ids, &n, &e));
    CHECK(ids == NULL);
}

/* Every prefix of a valid request is either rejected cleanly or parsed. */
IG_TEST(server_request_truncations_never_crash) {
    const char *body = CHAT_PREFIX "\"stop\":[\"a\"],\"logit_bias\":{\"3\":1},\"n\":2,"
                                   "\"stream_options\":{\"include_usage\":true}}";
    size_t len = strlen(body);
    int ok = 0;
    for (size_t i = 0; i <= len; i++) {
        srv_request r;
        srv_error e;
        char *cut = malloc(i + 1);
        REQUIRE(cut);
        memcpy(cut, body, i);
        cut[i] = '\0';
        if (srv_parse_request(SRV_CHAT, cut, i, NULL, &r, &e)) {
            ok++;
            srv_request_free(&r);
        } else {
            CHECK_EQ_INT(e.status, 400);
        }
        free(cut);
    }
    CHECK_EQ_INT(ok, 1); /* only the complete body */
}

/* Deterministic mutation fuzzing: random byte flips, insertions and cuts of
 * valid bodies never crash, leak or return anything but 400 on failure. */
IG_TEST(server_request_mutation_fuzz) {
    const char *seeds[] = {
        CHAT_PREFIX "\"stop\":[\"a\",\"bc\"],\"logit_bias\":{\"3\":1.5},\"n\":2,\"seed\":9,"
                    "\"logprobs\":true,\"top_logprobs\":2,\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true},\"max_tokens\":7}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"\\u00e9\\ud83d\\ude00\"}]}],\"temperature\":0.7}",
        "{\"prompt\":[1,2,3],\"logprobs\":3,\"top_k\":5,\"min_p\":0.1}",
    };
    const char alphabet[] = "{}[]\",:0123456789-.eE truefalsnul\\u\xc3\xa9\xff";
    uint64_t rng = 0x12345678ull;
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 6000; iter++) {
        const char *seed = seeds[iter % 3];
        size_t len = strlen(seed);
        char *buf = malloc(len + 16);
        REQUIRE(buf);
        memcpy(buf, seed, len);
        int n_mut = 1 + (int)((rng >> 33) % 4);
        for (int m = 0; m < n_mut; m++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = len ? (size_t)(rng >> 33) % len : 0;
            int op = (int)((rng >> 20) % 3);
            char ch = alphabet[(rng >> 40) % (sizeof alphabet - 1)];
            if (op == 0 && len) buf[pos] = ch;
            else if (op == 1 && len < strlen(seed) + 15) {
                memmove(buf + pos + 1, buf + pos, len - pos);
                buf[pos] = ch;
                len++;
            } else len = pos;
        }
        srv_request r;
        srv_error e;
        srv_kind kind = iter % 3 == 2 ? SRV_COMPLETION : SRV_CHAT;
        srv_limits lim = srv_default_limits();
        lim.n_vocab = 100;
        if (srv_parse_request(kind, buf, len, &lim, &r, &e)) {
            accepted++;
            CHECK(r.n >= 1 && r.n <= lim.max_n);
            CHECK(r.max_tokens == -1 || r.max_tokens >= 1);
            CHECK(r.temperature >= 0 && r.temperature <= 2);
            srv_request_free(&r);
        } else {
            rejected++;
            if (e.status != 400) ig_test_fail_at(__FILE__, __LINE__, "status %d", e.status);
        }
        free(buf);
    }
    CHECK(accepted > 100);
    CHECK(rejected > 1000);
}
