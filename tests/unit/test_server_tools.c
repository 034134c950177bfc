/* Structured output and tools in request parsing: response_format, the
 * grammar field, tools and tool_choice, tool messages rendered into the
 * prompt, and tool calls read back from generated text. */
#include "test.h"

#include "grammar/grammar.h"
#include "server/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse(const char *body, srv_request *r, srv_error *e) {
    srv_limits lim = srv_default_limits();
    return srv_parse_request(SRV_CHAT, body, strlen(body), &lim, r, e);
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define WEATHER                                                                                    \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","   \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"         \
    "\"required\":[\"city\"],\"additionalProperties\":false}}}"

IG_TEST(server_tools_response_format) {
    srv_request r;
    srv_error e;
    REQUIRE(parse("{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}", &r, &e));
    CHECK(r.grammar != NULL);
    srv_request_free(&r);
    REQUIRE(parse("{" MSGS ",\"response_format\":{\"type\":\"text\"}}", &r, &e));
    CHECK(r.grammar == NULL);
    srv_request_free(&r);
    /* the same schema twice: the cached grammar comes back */
    const char *body = "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                       "{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"integer\"}}}}";
    srv_request r2;
    REQUIRE(parse(body, &r, &e));
    REQUIRE(parse(body, &r2, &e));
    CHECK(r.grammar != NULL && r.grammar == r2.grammar);
    srv_request_free(&r);
    srv_request_free(&r2);
    CHECK(!parse("{" MSGS ",\"response_format\":{\"type\":\"bogus\"}}", &r, &e));
    CHECK_EQ_INT(e.status, 400);
    CHECK(!strcmp(e.param, "response_format"));
    CHECK(!parse("{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                 "\"name\":\"x\",\"schema\":{\"type\":\"object\",\"minProperties\":1}}}}",
                 &r, &e));
    CHECK(strstr(e.message, "'minProperties'") != NULL);
    CHECK(!parse("{" MSGS ",\"grammar\":\"root ::= nothing\"}", &r, &e));
    CHECK(!strcmp(e.param, "grammar"));
    CHECK(strstr(e.message, "not defined") != NULL);
    REQUIRE(parse("{" MSGS ",\"grammar\":\"root ::= [a-z]+\"}", &r, &e));
    CHECK(r.grammar != NULL);
    srv_request_free(&r);
}

IG_TEST(server_tools_parse_and_render) {
    srv_request r;
    srv_error e;
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
                  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
                  "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                  "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"rain\"}],"
                  "\"tools\":[" WEATHER "],\"tool_choice\":\"required\","
                  "\"parallel_tool_calls\":false}",
                  &r, &e));
    CHECK_EQ_INT(r.n_tools, 1);
    CHECK(r.tool_choice == SRV_TOOLS_REQUIRED);
    CHECK(!r.parallel_tool_calls);
    CHECK(r.grammar != NULL);
    REQUIRE(r.n_messages == 4); /* the tool instructions became a system message */
    CHECK(!strcmp(r.messages[0].role, "system"));
    CHECK(strstr(r.messages[0].content, "- get_weather: Weather") != NULL);
    CHECK(strstr(r.messages[0].content, "```tool_call") != NULL);
    CHECK(!strcmp(r.messages[2].role, "assistant"));
    CHECK(!strcmp(r.messages[2].content, "```tool_call\n{\"name\": \"get_weather\", "
                                         "\"arguments\": {\"city\":\"Paris\"}}\n```"));
    CHECK(!strcmp(r.messages[3].role, "user"));
    CHECK(!strcmp(r.messages[3].content, "```tool_result\n{\"name\": \"get_weather\", "
                                         "\"content\": \"rain\"}\n```"));

    /* reading calls back */
    srv_tool_call *calls = NULL;
    size_t content_len = 0;
    const char *text = "Let me check.\n```tool_call\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": \"Oslo\"}}\n```\n```tool_call\n{\"name\": \"unknown\", "
                       "\"arguments\": {}}\n```\n```tool_call\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Rome\"}}\n```";
    int n = srv_parse_tool_calls(&r, text, strlen(text), &calls, &content_len);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(content_len, strlen("Let me check."));
    if (n == 2) {
        CHECK(!strcmp(calls[0].name, "get_weather"));
        CHECK(!strcmp(calls[0].arguments, "{\"city\":\"Oslo\"}"));
        CHECK(!strcmp(calls[1].arguments, "{\"city\":\"Rome\"}"));
        CHECK(!strncmp(calls[0].id, "call_", 5) && strcmp(calls[0].id, calls[1].id) != 0);
    }
    srv_tool_calls_free(calls, n);
    /* a cut block is no call */
    const char *cut = "```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"ci";
    n = srv_parse_tool_calls(&r, cut, strlen(cut), &calls, &content_len);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(content_len, strlen(cut));
    srv_tool_calls_free(calls, n);
    srv_request_free(&r);
}

/* Whether the request's grammar takes text as a complete output. */
static bool grammar_takes(const srv_request *r, const char *text) {
    ig_grammar_matcher *m = NULL;
    if (!r->grammar || ig_grammar_matcher_create(r->grammar, &m) != IG_OK) return false;
    bool ok = ig_grammar_matcher_accept_bytes(m, text, strlen(text)) && ig_grammar_matcher_can_end(m);
    ig_grammar_matcher_free(m);
    return ok;
}

/* parallel_tool_calls decides whether a required output may hold several
 * calls; a named tool_choice is always one call of that tool. */
IG_TEST(server_tools_parallel_calls_grammar) {
#define CLOCK                                                                                      \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":"      \
    "\"object\",\"properties\":{\"zone\":{\"enum\":[\"UTC\"]}},\"required\":[\"zone\"]}}}"
    const char *one = "```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
    const char *two = "```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```\n"
                      "```tool_call\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n```";
    const char *bad = "```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}\n```";
    static const struct {
        const char *extra;
        bool one, two;
    } cases[] = {
        {"\"tool_choice\":\"required\"", true, true},
        {"\"tool_choice\":\"required\",\"parallel_tool_calls\":false", true, false},
        {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", true,
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[2048];
        snprintf(body, sizeof body, "{" MSGS ",\"tools\":[" WEATHER "," CLOCK "],%s}", cases[i].extra);
        srv_request r;
        srv_error e;
        if (!parse(body, &r, &e)) {
            ig_test_fail_at(__FILE__, __LINE__, "refused: %s", body);
            continue;
        }
        CHECK(grammar_takes(&r, one) == cases[i].one);
        CHECK(grammar_takes(&r, two) == cases[i].two);
        CHECK(!grammar_takes(&r, bad)); /* arguments follow the tool's parameters */
        CHECK(!grammar_takes(&r, "The weather is fine."));
        srv_request_free(&r);
    }
#undef CLOCK
}

static void tool_fail(const char *body, const char *param, const char *needle) {
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (parse(body, &r, &e)) {
        srv_request_free(&r);
        ig_test_fail_at(__FILE__, __LINE__, "accepted: %s", body);
        return;
    }
    CHECK_EQ_INT(e.status, 400);
    if (!e.param || strcmp(e.param, param) != 0 || !strstr(e.message, needle))
        ig_test_fail_at(__FILE__, __LINE__, "%s: param %s message '%s'", body,
                        e.param ? e.param : "(null)", e.message);
}

IG_TEST(server_tools_errors) {
    tool_fail("{" MSGS ",\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\","
              "\"function\":{\"name\":\"other\"}}}", "tool_choice", "'other'");
    tool_fail("{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "needs 'tools'");
    tool_fail("{" MSGS ",\"tools\":[" WEATHER "," WEATHER "]}", "tools", "used twice");
    tool_fail("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
              "tools", "name");
    tool_fail("{" MSGS ",\"tools\":[" WEATHER "],\"tool_choice\":\"required\","
              "\"response_format\":{\"type\":\"json_object\"}}", "tool_choice", "cannot be combined");
    tool_fail("{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"r\"}]}",
              "messages", "matches no earlier");
    tool_fail("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
              "\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
              "messages", "not a JSON object");
}

/* A malformed message after an assistant message with tool calls: the
 * list of calls seen so far is freed on that error path too (a leak found
 * by fuzzing; the sanitizer build's leak check catches it). */
IG_TEST(server_tools_error_after_tool_calls) {
    const char *calls = "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}";
    char body[512];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},%s,{\"content\":\"r\"}]}",
             calls);
    tool_fail(body, "messages", "messages[2].role must be a string");
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},%s,7]}",
             calls);
    tool_fail(body, "messages", "messages[2] must be an object");
}
