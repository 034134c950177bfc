/* The web page's embedded files, the /v1/status document and the CORS
 * header check (pure functions of src/server/webui.c). */
#include "test.h"

#include "server/metrics.h"
#include "server/webui.h"

#include <jansson.h>
#include <string.h>

IG_TEST(server_webui_files_are_embedded) {
    const char *ct = NULL;
    const srv_webui_file *f = srv_webui_find("/", &ct);
    REQUIRE(f);
    CHECK(!strcmp(f->path, "/index.html"));
    CHECK(!strcmp(ct, "text/html; charset=utf-8"));
    CHECK(f->len > 500 && !strncmp((const char *)f->data, "<!doctype html>", 15));
    CHECK(f->data[f->len] == 0); /* NUL after the bytes */
    CHECK(strstr((const char *)f->data, "src=\"/app.js\"") != NULL);
    f = srv_webui_find("/app.js", &ct);
    REQUIRE(f);
    CHECK(!strcmp(ct, "text/javascript; charset=utf-8"));
    CHECK_EQ_INT(strlen((const char *)f->data), f->len);
    f = srv_webui_find("/app.css", &ct);
    REQUIRE(f);
    CHECK(!strcmp(ct, "text/css; charset=utf-8"));
    CHECK(srv_webui_find("/favicon.svg", &ct) && !strcmp(ct, "image/svg+xml"));
    CHECK(srv_webui_find("/index.html", NULL) != NULL);
    CHECK(srv_webui_find("/app.js/", NULL) == NULL);
    CHECK(srv_webui_find("/../app.js", NULL) == NULL);
    CHECK(srv_webui_find("", NULL) == NULL);
    CHECK(srv_webui_find(NULL, NULL) == NULL);
    CHECK(srv_webui_find("/v1/models", NULL) == NULL);
    size_t total = 0;
    for (size_t i = 0; i < srv_webui_n_files; i++) total += srv_webui_files[i].len;
    CHECK_EQ_INT(srv_webui_total_bytes(), total);
    CHECK(total > 10000 && total < 100000); /* the page stays small */
    /* the page's headers: a CSP without inline script, nosniff */
    bool csp = false, nosniff = false;
    for (int i = 0; srv_webui_headers[i]; i += 2) {
        if (!strcmp(srv_webui_headers[i], "Content-Security-Policy")) {
            csp = strstr(srv_webui_headers[i + 1], "script-src 'self'") &&
                  !strstr(srv_webui_headers[i + 1], "unsafe");
        }
        if (!strcmp(srv_webui_headers[i], "X-Content-Type-Options"))
            nosniff = !strcmp(srv_webui_headers[i + 1], "nosniff");
    }
    CHECK(csp && nosniff);
}

IG_TEST(server_status_document) {
    srv_metrics m;
    srv_metrics_init(&m);
    m.prompt_tokens = 100;
    m.cached_prompt_tokens = 30;
    m.prefill_tokens = 70;
    m.generated_tokens = 55;
    m.running = 2;
    m.waiting = 1;
    m.kv_tokens = 256;
    m.kv_capacity = 1024;
    m.http_by_status[200] = 7;
    m.http_by_status[503] = 2;
    m.requests_cancelled = 1;
    srv_status_info in = {.model_id = "m\xff", .state = "ready", .backend = "cpu",
                          .n_threads = 0, .n_ctx = 512, .n_parallel = 2, .n_batch = 256,
                          .api_key = true, .started = 0};
    json_t *j = srv_status_json(&in, &m);
    REQUIRE(j);
    CHECK(!strcmp(json_string_value(json_object_get(j, "state")), "ready"));
    CHECK(json_is_true(json_object_get(j, "api_key_required")));
    /* invalid UTF-8 in the id is repaired, not refused */
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(j, "model"), "id")),
                  "m\xef\xbf\xbd"));
    json_t *t = json_object_get(j, "tokens");
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "prompt")), 100);
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "prompt_cached")), 30);
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "prefill")), 70);
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "generated")), 55);
    json_t *s = json_object_get(j, "sequences");
    CHECK_EQ_INT(json_integer_value(json_object_get(s, "running")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(s, "waiting")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(s, "cancelled")), 1);
    json_t *h = json_object_get(j, "http");
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "requests")), 9);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "server_errors")), 2);
    CHECK_NEAR(json_real_value(json_object_get(json_object_get(j, "kv_cache"), "usage")), 0.25,
               1e-12);
    json_t *e = json_object_get(j, "engine");
    CHECK(json_is_null(json_object_get(e, "threads")));
    CHECK_EQ_INT(json_integer_value(json_object_get(e, "slots")), 2);
    CHECK(json_string_length(json_object_get(e, "device")) > 0);
    json_t *p = json_object_get(j, "process");
    CHECK(json_integer_value(json_object_get(p, "rss_bytes")) == srv_process_rss_bytes() ||
          json_integer_value(json_object_get(p, "rss_bytes")) > 1 << 20);
    CHECK(json_real_value(json_object_get(p, "cpu_seconds")) > 0);
    CHECK(json_is_null(json_object_get(j, "device_memory")));
    json_t *d = json_object_get(j, "defaults");
    CHECK_NEAR(json_real_value(json_object_get(d, "temperature")), 1.0, 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "top_k")), 0);
    CHECK(json_is_null(json_object_get(d, "max_tokens")));
    CHECK(json_real_value(json_object_get(j, "uptime_s")) > 0);
    json_decref(j);
    srv_metrics_destroy(&m);
    CHECK(srv_process_rss_bytes() > 1 << 20);
}

IG_TEST(server_cors_request_headers_check) {
    CHECK(srv_cors_headers_ok("authorization, content-type"));
    CHECK(srv_cors_headers_ok("X-Stainless-OS,x-stainless-arch"));
    CHECK(!srv_cors_headers_ok(""));
    CHECK(!srv_cors_headers_ok(NULL));
    CHECK(!srv_cors_headers_ok("a\r\nSet-Cookie: x"));
    CHECK(!srv_cors_headers_ok("a\"b"));
    CHECK(!srv_cors_headers_ok("a;b"));
    char big[1100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(!srv_cors_headers_ok(big));
    big[1024] = 0;
    CHECK(srv_cors_headers_ok(big));
}
