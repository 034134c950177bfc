/* Server text helpers and metrics rendering (pure functions). */
#include "test.h"

#include "server/metrics.h"
#include "server/text.h"

#include <stdlib.h>
#include <string.h>

IG_TEST(server_utf8_validation_and_sanitize) {
    CHECK(srv_utf8_valid("abc", 3));
    CHECK(srv_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9));
    CHECK(!srv_utf8_valid("\xc3", 1));           /* truncated */
    CHECK(!srv_utf8_valid("\xc0\xaf", 2));       /* overlong */
    CHECK(!srv_utf8_valid("\xed\xa0\x80", 3));   /* surrogate */
    CHECK(!srv_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(!srv_utf8_valid("\xff", 1));
    CHECK_EQ_INT(srv_utf8_valid_prefix("ab\xe2\x82", 4), 2);
    CHECK_EQ_INT(srv_utf8_valid_prefix("ab\xe2\x82\xac", 5), 5);
    size_t n;
    char *s = srv_utf8_sanitize("a\xff" "b\xe2\x82", 5, &n);
    REQUIRE(s);
    CHECK(!strcmp(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd"));
    CHECK_EQ_INT(n, strlen(s));
    free(s);
    s = srv_utf8_sanitize("", 0, &n);
    REQUIRE(s);
    CHECK_EQ_INT(n, 0);
    free(s);
}

IG_TEST(server_ct_equal_and_bearer) {
    CHECK(srv_ct_equal("secret", 6, "secret", 6));
    CHECK(!srv_ct_equal("secreT", 6, "secret", 6));
    CHECK(!srv_ct_equal("secret1", 7, "secret", 6));
    CHECK(!srv_ct_equal("secre", 5, "secret", 6));
    CHECK(!srv_ct_equal("", 0, "secret", 6));
    size_t n = 0;
    const char *t = srv_bearer_token("Bearer abc123", &n);
    REQUIRE(t);
    CHECK_EQ_INT(n, 6);
    CHECK(!strncmp(t, "abc123", n));
    t = srv_bearer_token("  bearer   k  ", &n);
    REQUIRE(t);
    CHECK_EQ_INT(n, 1);
    CHECK(t[0] == 'k');
    CHECK(srv_bearer_token("Basic abc", &n) == NULL);
    CHECK(srv_bearer_token("Bearer", &n) == NULL);
    CHECK(srv_bearer_token("Bearer   ", &n) == NULL);
    CHECK(srv_bearer_token("Bearerabc", &n) == NULL);
    CHECK(srv_bearer_token(NULL, &n) == NULL);
}

IG_TEST(server_buf_printf_grows) {
    srv_buf b = {0};
    for (int i = 0; i < 1000; i++) REQUIRE(srv_buf_printf(&b, "%04d,", i));
    CHECK_EQ_INT(b.len, 5000);
    CHECK(!strncmp(b.data + 4995, "0999,", 5));
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    REQUIRE(srv_buf_printf(&b, "[%s]", big));
    CHECK_EQ_INT(b.len, 5000 + 1001);
    CHECK(b.data[b.len] == '\0');
    srv_buf_free(&b);
}

IG_TEST(server_metrics_render_prometheus_text) {
    srv_metrics m;
    srv_metrics_init(&m);
    srv_metrics_http(&m, 200);
    srv_metrics_http(&m, 200);
    srv_metrics_http(&m, 404);
    srv_metrics_http(&m, 9999); /* ignored */
    srv_hist_observe(&m.ttft, 0.03);
    srv_hist_observe(&m.ttft, 0.3);
    srv_hist_observe(&m.ttft, 1000);
    m.prompt_tokens = 12;
    m.generated_tokens = 34;
    m.running = 2;
    m.kv_tokens = 50;
    m.kv_capacity = 200;
    srv_buf b = {0};
    REQUIRE(srv_metrics_render(&m, &b));
    CHECK(strstr(b.data, "ignis_http_requests_total{status=\"200\"} 2\n"));
    CHECK(strstr(b.data, "ignis_http_requests_total{status=\"404\"} 1\n"));
    CHECK(strstr(b.data, "ignis_prompt_tokens_total 12\n"));
    CHECK(strstr(b.data, "ignis_generation_tokens_total 34\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_bucket{le=\"80\"} 2\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
    CHECK(strstr(b.data, "ignis_time_to_first_token_seconds_count 3\n"));
    CHECK(strstr(b.data, "ignis_requests_running 2\n"));
    CHECK(strstr(b.data, "ignis_kv_cache_usage_ratio 0.25\n"));
    CHECK(strstr(b.data, "# TYPE ignis_inter_token_latency_seconds histogram\n"));
    srv_buf_free(&b);
    srv_metrics_destroy(&m);
}
