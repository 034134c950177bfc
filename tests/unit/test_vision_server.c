/* The server's image_url content parts: data: URLs decoded into the
 * request, a <start_of_image> left where each image was; remote URLs and
 * malformed parts refused with a 400. */
#include "test.h"

#include "server/request.h"

#include <stdlib.h>
#include <string.h>

static bool parse_chat(const char *body, srv_request *r, srv_error *e) {
    srv_limits lim = srv_default_limits();
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    return srv_parse_request(SRV_CHAT, body, strlen(body), &lim, r, e);
}

IG_TEST(vision_server_data_url) {
    /* "hello" and "\x89PNG" in base64 */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":["
                       "{\"type\":\"text\",\"text\":\"look\"},"
                       "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,aGVsbG8=\"}},"
                       "{\"type\":\"text\",\"text\":\"and\"},"
                       "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/jpeg;base64,iVBORw\"}}]}]}";
    srv_request r;
    srv_error e;
    REQUIRE(parse_chat(body, &r, &e));
    REQUIRE(r.n_images == 2);
    CHECK_EQ_INT(r.images[0].len, 5);
    CHECK(!memcmp(r.images[0].data, "hello", 5));
    CHECK_EQ_INT(r.images[1].len, 4);
    CHECK(!memcmp(r.images[1].data, "\x89PNG", 4));
    REQUIRE(r.n_messages == 1);
    CHECK(!strcmp(r.messages[0].content, "look<start_of_image>and<start_of_image>"));
    srv_request_free(&r);
}

static void expect_400(const char *body, const char *needle) {
    srv_request r;
    srv_error e;
    bool ok = parse_chat(body, &r, &e);
    CHECK(!ok);
    if (ok) {
        srv_request_free(&r);
        return;
    }
    CHECK_EQ_INT(e.status, 400);
    if (!strstr(e.message, needle)) ig_test_fail_at(__FILE__, __LINE__, "message '%s' lacks '%s'", e.message, needle);
}

IG_TEST(vision_server_refusals) {
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "{\"url\":\"https://example.com/cat.png\"}}]}]}",
               "remote image URLs are not fetched");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "{\"url\":\"http://169.254.169.254/latest\"}}]}]}",
               "data: URL");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "{\"url\":\"data:image/png;base64,!!!!\"}}]}]}",
               "bad base64");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "{\"url\":\"file:///etc/passwd\"}}]}]}",
               "base64 data: URL");
    expect_400("{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "{\"url\":\"data:image/png;base64,aGVsbG8=\"}}]}]}",
               "user messages only");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
               "must be a string");
    expect_400("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", "not supported");
}
