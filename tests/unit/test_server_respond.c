/* OpenAI response bodies and SSE chunks built from a job's output. */
#include "test.h"

#include "server/respond.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static srv_job *make_job(srv_kind kind, int n, bool logprobs) {
    srv_request r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.n = n;
    r.logprobs = logprobs;
    int32_t *prompt = malloc(3 * sizeof *prompt);
    if (!prompt) return NULL;
    prompt[0] = 2;
    prompt[1] = 10;
    prompt[2] = 11;
    srv_job *j = srv_job_create(&r, prompt, 3, 16);
    if (!j) free(prompt);
    return j;
}

IG_TEST(server_respond_final_chat_shape) {
    srv_job *j = make_job(SRV_CHAT, 2, false);
    REQUIRE(j);
    j->n_cached = 1;
    REQUIRE(srv_buf_puts(&j->out[0].text, "Hello \xff world")); /* bad byte gets replaced */
    j->out[0].n_gen = 4;
    j->out[0].finish = "stop";
    j->out[0].done = true;
    j->out[1].n_gen = 16;
    j->out[1].finish = "length";
    j->out[1].done = true;
    srv_resp_info ri = {.kind = SRV_CHAT, .id = "chatcmpl-x", .created = 123, .model = "m"};
    char *s = srv_render_final(&ri, j);
    REQUIRE(s);
    json_error_t e;
    json_t *root = json_loads(s, 0, &e);
    free(s);
    REQUIRE(root);
    CHECK(!strcmp(json_string_value(json_object_get(root, "object")), "chat.completion"));
    CHECK(!strcmp(json_string_value(json_object_get(root, "id")), "chatcmpl-x"));
    CHECK_EQ_INT(json_integer_value(json_object_get(root, "created")), 123);
    json_t *choices = json_object_get(root, "choices");
    REQUIRE(json_array_size(choices) == 2);
    json_t *c0 = json_array_get(choices, 0);
    json_t *msg = json_object_get(c0, "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "role")), "assistant"));
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "Hello \xef\xbf\xbd world"));
    CHECK(!strcmp(json_string_value(json_object_get(c0, "finish_reason")), "stop"));
    CHECK(json_is_null(json_object_get(c0, "logprobs")));
    json_t *c1 = json_array_get(choices, 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(c1, "index")), 1);
    CHECK(!strcmp(json_string_value(json_object_get(c1, "finish_reason")), "length"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(c1, "message"), "content")), ""));
    json_t *u = json_object_get(root, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")), 20);
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 23);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"),
                                                    "cached_tokens")),
                 1);
    json_decref(root);
    srv_job_unref(j);
}

IG_TEST(server_respond_final_completion_logprobs) {
    srv_job *j = make_job(SRV_COMPLETION, 1, true);
    REQUIRE(j);
    REQUIRE(srv_buf_puts(&j->out[0].text, "ab"));
    ig_gen_logprob lps[2];
    memset(lps, 0, sizeof lps);
    lps[0].id = 5;
    lps[0].logprob = -0.5f;
    lps[1].id = 6;
    lps[1].logprob = -1.0f / 0.0f; /* -inf must still be valid JSON */
    j->out[0].lps = malloc(sizeof lps);
    REQUIRE(j->out[0].lps);
    memcpy(j->out[0].lps, lps, sizeof lps);
    j->out[0].n_lps = j->out[0].cap_lps = 2;
    j->out[0].n_gen = 2;
    j->out[0].finish = "length";
    j->out[0].done = true;
    srv_resp_info ri = {.kind = SRV_COMPLETION, .id = "cmpl-x", .created = 1, .model = "m"};
    char *s = srv_render_final(&ri, j);
    REQUIRE(s);
    json_error_t e;
    json_t *root = json_loads(s, 0, &e);
    free(s);
    REQUIRE(root);
    CHECK(!strcmp(json_string_value(json_object_get(root, "object")), "text_completion"));
    json_t *c0 = json_array_get(json_object_get(root, "choices"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(c0, "text")), "ab"));
    json_t *lp = json_object_get(c0, "logprobs");
    json_t *tl = json_object_get(lp, "token_logprobs");
    REQUIRE(json_array_size(tl) == 2);
    CHECK_NEAR(json_number_value(json_array_get(tl, 0)), -0.5, 1e-6);
    CHECK_NEAR(json_number_value(json_array_get(tl, 1)), -9999.0, 0);
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "text_offset")), 2);
    json_decref(root);
    srv_job_unref(j);
}

IG_TEST(server_respond_sse_chunks) {
    srv_resp_info ri = {.kind = SRV_CHAT, .id = "chatcmpl-y", .created = 5, .model = "m"};
    srv_buf b = {0};
    REQUIRE(srv_render_chunk(&b, &ri, 0, true, NULL, 0, NULL, 0, 0, NULL, true));
    REQUIRE(srv_render_chunk(&b, &ri, 0, false, "Hi", 2, NULL, 0, 0, NULL, true));
    REQUIRE(srv_render_chunk(&b, &ri, 0, false, NULL, 0, NULL, 0, 0, "stop", true));
    REQUIRE(srv_render_error_event(&b, "boom", "server_error"));
    const char *want =
        "data: {\"id\":\"chatcmpl-y\",\"object\":\"chat.completion.chunk\",\"created\":5,"
        "\"model\":\"m\",\"system_fingerprint\":\"ignis-" IGNIS_VERSION "\",\"choices\":[{\"index\":0,"
        "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":"
        "null}],\"usage\":null}\n\n";
    CHECK(!strncmp(b.data, want, strlen(want)));
    CHECK(strstr(b.data, "\"delta\":{\"content\":\"Hi\"}"));
    CHECK(strstr(b.data, "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\""));
    CHECK(strstr(b.data, "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\","
                         "\"param\":null,\"code\":null}}\n\n"));
    /* every event is one "data: " line followed by a blank line */
    int events = 0;
    for (const char *p = b.data; (p = strstr(p, "\n\n")); p += 2) events++;
    CHECK_EQ_INT(events, 4);
    srv_buf_free(&b);

    srv_resp_info rc = {.kind = SRV_COMPLETION, .id = "cmpl-z", .created = 5, .model = "m"};
    REQUIRE(srv_render_chunk(&b, &rc, 1, false, "x", 1, NULL, 0, 0, NULL, false));
    CHECK(strstr(b.data, "\"object\":\"text_completion\""));
    CHECK(strstr(b.data, "{\"index\":1,\"text\":\"x\",\"logprobs\":null,\"finish_reason\":null}"));
    CHECK(!strstr(b.data, "usage"));
    srv_buf_free(&b);
}

IG_TEST(server_respond_usage_chunk) {
    srv_job *j = make_job(SRV_CHAT, 1, false);
    REQUIRE(j);
    j->out[0].n_gen = 7;
    srv_resp_info ri = {.kind = SRV_CHAT, .id = "c", .created = 5, .model = "m"};
    srv_buf b = {0};
    REQUIRE(srv_render_usage_chunk(&b, &ri, j));
    CHECK(strstr(b.data, "\"choices\":[]"));
    CHECK(strstr(b.data, "\"completion_tokens\":7"));
    CHECK(strstr(b.data, "\"total_tokens\":10"));
    srv_buf_free(&b);
    srv_job_unref(j);
}
