/* The library's JSON reader (src/core/json.c): values, escapes, UTF-8,
 * limits, and the errors it reports. */
#include "test.h"

#include "core/json.h"
#include "ignis.h"

#include <stdlib.h>
#include <string.h>

static ig_json_doc *parse(const char *text, unsigned flags, ig_json_error *err) {
    return ig_json_parse(text, strlen(text), flags, err);
}

/* Parsing fails, and the error names the place. */
static void expect_error(const char *text, unsigned flags, int line, int column, const char *what) {
    ig_json_error err;
    ig_json_doc *doc = parse(text, flags, &err);
    if (doc) {
        ig_test_fail_at(__FILE__, __LINE__, "accepted: %s", text);
        ig_json_free(doc);
        return;
    }
    if (err.line != line || err.column != column || !strstr(err.text, what))
        ig_test_fail_at(__FILE__, __LINE__, "%s: line %d col %d \"%s\", want %d:%d \"%s\"", text,
                        err.line, err.column, err.text, line, column, what);
}

IG_TEST(json_values) {
    ig_json_error err;
    ig_json_doc *doc = parse(" {\"a\": [1, -2, 3.5, -0.25e2, 1E3, true, false, null],\n"
                             "  \"s\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"o\": {}, \"e\": []} ",
                             0, &err);
    REQUIRE(doc);
    const ig_json *root = ig_json_root(doc);
    REQUIRE(ig_json_is_object(root));
    CHECK_EQ_INT(ig_json_size(root), 4);
    const ig_json *a = ig_json_get(root, "a");
    REQUIRE(ig_json_is_array(a));
    CHECK_EQ_INT(ig_json_size(a), 8);
    CHECK(ig_json_is_integer(ig_json_at(a, 0)));
    CHECK_EQ_INT(ig_json_int(ig_json_at(a, 0)), 1);
    CHECK_EQ_INT(ig_json_int(ig_json_at(a, 1)), -2);
    CHECK(ig_json_is_real(ig_json_at(a, 2)));
    CHECK_NEAR(ig_json_real(ig_json_at(a, 2)), 3.5, 0);
    CHECK_NEAR(ig_json_number(ig_json_at(a, 3)), -25.0, 0);
    CHECK(ig_json_is_real(ig_json_at(a, 4)));
    CHECK_NEAR(ig_json_number(ig_json_at(a, 4)), 1000.0, 0);
    CHECK_NEAR(ig_json_number(ig_json_at(a, 1)), -2.0, 0);
    CHECK(ig_json_is_true(ig_json_at(a, 5)));
    CHECK(ig_json_is(ig_json_at(a, 6), IG_JSON_FALSE));
    CHECK(ig_json_is_null(ig_json_at(a, 7)));
    CHECK(ig_json_at(a, 8) == NULL);
    const ig_json *s = ig_json_get(root, "s");
    CHECK_EQ_INT(ig_json_str_len(s), 9);
    CHECK(memcmp(ig_json_str(s), "x\"\\/\b\f\n\r\t", 10) == 0);
    CHECK(ig_json_is_object(ig_json_get(root, "o")) && ig_json_size(ig_json_get(root, "o")) == 0);
    CHECK(ig_json_is_array(ig_json_get(root, "e")) && ig_json_size(ig_json_get(root, "e")) == 0);
    /* members keep their order and carry their names */
    CHECK(strcmp(ig_json_at(root, 1)->key, "s") == 0 && ig_json_at(root, 1)->key_len == 1);
    CHECK(strcmp(ig_json_at(root, 3)->key, "e") == 0);
    /* accessors on the wrong type or NULL answer nothing */
    CHECK(ig_json_get(a, "a") == NULL);
    CHECK(ig_json_get(root, "missing") == NULL);
    CHECK(ig_json_str(a) == NULL && ig_json_int(s) == 0 && ig_json_size(s) == 0);
    CHECK(ig_json_get(NULL, "a") == NULL && ig_json_at(NULL, 0) == NULL && !ig_json_is_null(NULL));
    ig_json_free(doc);
    ig_json_free(NULL);

    /* any value at the top; integers at the long long limits */
    doc = parse("\"top\"", 0, &err);
    REQUIRE(doc);
    CHECK(strcmp(ig_json_str(ig_json_root(doc)), "top") == 0);
    ig_json_free(doc);
    doc = parse("[9223372036854775807, -9223372036854775808, 1e-400]", 0, &err);
    REQUIRE(doc);
    CHECK(ig_json_int(ig_json_at(ig_json_root(doc), 0)) == 9223372036854775807LL);
    CHECK(ig_json_int(ig_json_at(ig_json_root(doc), 1)) == -9223372036854775807LL - 1);
    CHECK_NEAR(ig_json_real(ig_json_at(ig_json_root(doc), 2)), 0.0, 1e-300);
    ig_json_free(doc);
}

IG_TEST(json_unicode) {
    ig_json_error err;
    /* escapes of 1-, 2-, 3-byte and surrogate-pair code points; raw UTF-8 kept */
    ig_json_doc *doc = parse("[\"\\u0041\\u00e9\\u2581\\uD83D\\uDE00\", \"\xe2\x96\x81\xf0\x9f\x98\x80\"]",
                             0, &err);
    REQUIRE(doc);
    const ig_json *a = ig_json_root(doc);
    CHECK(strcmp(ig_json_str(ig_json_at(a, 0)), "A\xc3\xa9\xe2\x96\x81\xf0\x9f\x98\x80") == 0);
    CHECK_EQ_INT(ig_json_str_len(ig_json_at(a, 0)), 10);
    CHECK(strcmp(ig_json_str(ig_json_at(a, 1)), "\xe2\x96\x81\xf0\x9f\x98\x80") == 0);
    ig_json_free(doc);
    /* a key is unescaped like any string */
    doc = parse("{\"\\u2581a\": 1}", 0, &err);
    REQUIRE(doc);
    CHECK(ig_json_int(ig_json_get(ig_json_root(doc), "\xe2\x96\x81" "a")) == 1);
    CHECK_EQ_INT(ig_json_at(ig_json_root(doc), 0)->key_len, 4);
    ig_json_free(doc);

    expect_error("[\"\\u0000\"]", 0, 1, 9, "\\u0000");
    expect_error("[\"\\uD83D\"]", 0, 1, 9, "surrogate");
    expect_error("[\"\\uDE00\"]", 0, 1, 9, "surrogate");
    expect_error("[\"\\u12G4\"]", 0, 1, 5, "\\u escape");
    expect_error("[\"\\q\"]", 0, 1, 4, "bad escape");
    expect_error("[\"a\xc3\"]", 0, 1, 4, "UTF-8");          /* truncated sequence */
    expect_error("[\"\xc0\xaf\"]", 0, 1, 3, "UTF-8");        /* overlong */
    expect_error("[\"\xed\xa0\x80\"]", 0, 1, 3, "UTF-8");    /* encoded surrogate */
    expect_error("[\"\xf4\x90\x80\x80\"]", 0, 1, 3, "UTF-8"); /* above U+10FFFF */
    expect_error("[\"tab\there\"]", 0, 1, 6, "control character");
}

IG_TEST(json_errors) {
    expect_error("", 0, 1, 1, "end of input");
    expect_error("  \n ", 0, 2, 2, "end of input");
    expect_error("{\"a\": 1,\n \"b\" 2}", 0, 2, 6, "':' expected");
    expect_error("[1, 2", 0, 1, 6, "']' expected");
    expect_error("[1 2]", 0, 1, 4, "']' expected");
    expect_error("{\"a\": 1,}", 0, 1, 9, "member name");
    expect_error("{1: 2}", 0, 1, 2, "member name");
    expect_error("[1] x", 0, 1, 5, "after the value");
    expect_error("\"abc", 0, 1, 5, "unterminated");
    expect_error("[tru]", 0, 1, 2, "unexpected character");
    expect_error("[01]", 0, 1, 3, "']' expected");
    expect_error("[-]", 0, 1, 3, "bad number");
    expect_error("[1.]", 0, 1, 4, "bad number");
    expect_error("[1e+]", 0, 1, 5, "bad number");
    expect_error("[0x10]", 0, 1, 3, "']' expected");
    expect_error("[9223372036854775808]", 0, 1, 21, "out of range");
    expect_error("[1e400]", 0, 1, 7, "out of range");
    /* line numbers count the input's lines, not those of unescaped strings */
    expect_error("[\"a\\nb\\nc\",\n tx]", 0, 2, 2, "unexpected character");

    /* duplicate names: refused on request (small and large objects), else
     * the last one is the value looked up */
    expect_error("{\"a\": 1, \"b\": 2, \"a\": 3}", IG_JSON_REJECT_DUPLICATES, 1, 25, "\"a\"");
    char big[512];
    size_t n = 0;
    n += (size_t)snprintf(big + n, sizeof big - n, "{");
    for (int i = 0; i < 20; i++) n += (size_t)snprintf(big + n, sizeof big - n, "\"k%d\": %d, ", i, i);
    snprintf(big + n, sizeof big - n, "\"k7\": 0}");
    expect_error(big, IG_JSON_REJECT_DUPLICATES, 1, (int)strlen(big) + 1, "\"k7\"");
    ig_json_error err;
    ig_json_doc *doc = parse(big, 0, &err);
    REQUIRE(doc);
    CHECK_EQ_INT(ig_json_size(ig_json_root(doc)), 21);
    CHECK_EQ_INT(ig_json_int(ig_json_get(ig_json_root(doc), "k7")), 0);
    CHECK_EQ_INT(ig_json_int(ig_json_get(ig_json_root(doc), "k19")), 19);
    ig_json_free(doc);

    /* nesting is bounded (no stack exhaustion on hostile input) */
    size_t depth = 100000;
    char *deep = malloc(depth + 1);
    REQUIRE(deep);
    memset(deep, '[', depth);
    deep[depth] = '\0';
    doc = ig_json_parse(deep, depth, 0, &err);
    CHECK(doc == NULL && strstr(err.text, "deeply"));
    ig_json_free(doc);
    /* ... but a few hundred levels are fine */
    size_t ok_depth = 300;
    for (size_t i = 0; i < ok_depth; i++) deep[ok_depth + i] = ']';
    doc = ig_json_parse(deep, 2 * ok_depth, 0, &err);
    CHECK(doc != NULL);
    ig_json_free(doc);
    free(deep);

    /* not NUL-terminated input: only len bytes are read */
    doc = ig_json_parse("[1][", 3, 0, &err);
    CHECK(doc != NULL);
    ig_json_free(doc);
    CHECK(ig_json_parse(NULL, 0, 0, &err) == NULL);
}
