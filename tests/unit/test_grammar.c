/* Grammar engine: GBNF parsing and its errors, byte-level acceptance,
 * token masks on a small hand-made vocabulary, JSON Schema -> grammar. */
#include "test.h"

#include "core/util.h"
#include "gen/seq.h"
#include "grammar/grammar.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* 1 accepted as a complete sentence, 0 a valid prefix only, -1 rejected. */
static int match(const ig_grammar *g, const char *s) {
    ig_grammar_matcher *m = NULL;
    if (ig_grammar_matcher_create(g, &m) != IG_OK) return -2;
    int r;
    if (!ig_grammar_matcher_accept_bytes(m, s, strlen(s))) r = -1;
    else r = ig_grammar_matcher_can_end(m) ? 1 : 0;
    ig_grammar_matcher_free(m);
    return r;
}

static ig_grammar *gbnf(const char *text) {
    ig_grammar *g = NULL;
    ig_status st = ig_grammar_from_gbnf(text, strlen(text), NULL, &g);
    if (st != IG_OK) fprintf(stderr, "  gbnf failed: %s\n", ig_last_error());
    return g;
}

static ig_grammar *schema(const char *text) {
    ig_grammar *g = NULL;
    ig_status st = ig_grammar_from_json_schema(text, strlen(text), &g);
    if (st != IG_OK) fprintf(stderr, "  schema failed: %s\n", ig_last_error());
    return g;
}

/* One of llama.cpp's grammar files, unchanged (tests/fixtures/gbnf/, under
 * llama.cpp's MIT licence). */
static ig_grammar *gbnf_file(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/gbnf/%s", ig_test_fixtures(), name);
    char *text = NULL;
    size_t len = 0;
    ig_grammar *g = NULL;
    if (ig_file_read_all(path, IG_GRAMMAR_MAX_TEXT, &text, &len) != IG_OK ||
        ig_grammar_from_gbnf(text, len, NULL, &g) != IG_OK)
        fprintf(stderr, "  %s: %s\n", name, ig_last_error());
    free(text);
    return g;
}

IG_TEST(grammar_gbnf_json_accepts) {
    ig_grammar *g = gbnf_file("json.gbnf");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\": [1, 2.5e3, true, null, \"x\\n\"]}"), 1);
    CHECK_EQ_INT(match(g, "{\"k\":{\"n\":{}}} "), 1);
    CHECK_EQ_INT(match(g, "{\"caf\xc3\xa9\": \"\xe6\x97\xa5\xe6\x9c\xac\"}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\""), 0);
    CHECK_EQ_INT(match(g, "{\"a\":}"), -1);
    CHECK_EQ_INT(match(g, "[1]"), -1);
    CHECK_EQ_INT(match(g, "{\"a\":01}"), -1);
    CHECK_EQ_INT(match(g, "{\"\x01\":1}"), -1);
    /* a UTF-8 character may be split anywhere */
    ig_grammar_matcher *m = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m));
    CHECK(ig_grammar_matcher_accept_bytes(m, "{\"\xe6", 3));
    CHECK(ig_grammar_matcher_accept_bytes(m, "\x97", 1));
    CHECK(!ig_grammar_matcher_accept_bytes(m, "\"", 1)); /* incomplete character */
    CHECK(ig_grammar_matcher_accept_bytes(m, "\xa5\":1}", 5));
    CHECK(ig_grammar_matcher_can_end(m));
    ig_grammar_matcher_free(m);
    ig_grammar_free(g);
}

IG_TEST(grammar_gbnf_arithmetic_and_list) {
    ig_grammar *g = gbnf_file("arithmetic.gbnf");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "1+2=3\n"), 1);
    CHECK_EQ_INT(match(g, "(a*b)-c= x1\nq=2\n"), 1);
    CHECK_EQ_INT(match(g, "1+=3\n"), -1);
    CHECK_EQ_INT(match(g, "1+2"), 0);
    ig_grammar_free(g);

    /* list.gbnf: items exclude line breaks, \x85 and \u2028 as characters */
    g = gbnf_file("list.gbnf");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "- milk\n- caf\xc3\xa9 au lait\n"), 1);
    CHECK_EQ_INT(match(g, "- a"), 0);
    CHECK_EQ_INT(match(g, "- \n"), -1);
    CHECK_EQ_INT(match(g, "- a\rb\n"), -1);
    CHECK_EQ_INT(match(g, "- a\xc2\x85\n"), -1);      /* U+0085 */
    CHECK_EQ_INT(match(g, "- a\xe2\x80\xa8\n"), -1);  /* U+2028 */
    CHECK_EQ_INT(match(g, "- a\xe2\x80\xa7\n"), 1);   /* U+2027 */
    CHECK_EQ_INT(match(g, "- \x85\n"), -1);            /* not UTF-8 */
    ig_grammar_free(g);

    g = gbnf("root ::= item{2,3}\nitem ::= \"- \" [^\\n]+ \"\\n\"  # a list item\n");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "- a\n"), 0);
    CHECK_EQ_INT(match(g, "- a\n- b\n"), 1);
    CHECK_EQ_INT(match(g, "- a\n- b\n- c\n"), 1);
    CHECK_EQ_INT(match(g, "- a\n- b\n- c\n- d\n"), -1);
    CHECK_EQ_INT(match(g, "- \n"), -1);
    ig_grammar_free(g);

    /* classes: ranges, negation, escapes, '.', alternatives on the next line */
    g = gbnf("root ::= [\\x41-\\x43] [^a-z] . \"\\u00e9\"\n  | \"x\"? \"y\"{2}\n");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "AZ\xe2\x82\xac\xc3\xa9"), 1);
    CHECK_EQ_INT(match(g, "Az!\xc3\xa9"), -1);
    CHECK_EQ_INT(match(g, "xyy"), 1);
    CHECK_EQ_INT(match(g, "yy"), 1);
    CHECK_EQ_INT(match(g, "y"), 0);
    CHECK_EQ_INT(match(g, "A\xed\xa0\x80"), -1); /* a surrogate is not a character */
    ig_grammar_free(g);
}

static void expect_error(const char *text, const char *needle) {
    ig_grammar *g = NULL;
    ig_status st = ig_grammar_from_gbnf(text, strlen(text), NULL, &g);
    CHECK(st != IG_OK);
    CHECK(g == NULL);
    if (st != IG_OK && !strstr(ig_last_error(), needle))
        ig_test_fail_at(__FILE__, __LINE__, "error '%s' lacks '%s'", ig_last_error(), needle);
}

IG_TEST(grammar_gbnf_errors) {
    expect_error("root ::= foo\n", "'foo' is used but not defined");
    expect_error("start ::= \"a\"\n", "no rule 'root'");
    expect_error("root ::= \"a\n", "unterminated string");
    expect_error("root ::= [ab\n", "unterminated character class");
    expect_error("root ::= ( \"a\"\n", "expected ')'");
    expect_error("root ::= * \"a\"\n", "must follow something");
    expect_error("root ::= \"a\"{3,2}\n", "n < m");
    expect_error("root ::= \"a\"{99999}\n", "repetition count");
    expect_error("root ::= root \"a\" | \"b\"\n", "left-recursive");
    expect_error("root ::= x\nx ::= y? root\ny ::= \"a\"\n", "left-recursive");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
    expect_error("root = \"a\"\n", "'::='");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= [z-a]\n", "backwards");
    expect_error("root ::= \"a\" ]\n", "end of the line");
    /* the message names the place */
    expect_error("root ::= \"a\"\n\nx ::= \"b\" )\n", "line 3");
    /* deep nesting is bounded */
    char deep[600];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 200; i++) deep[n++] = '(';
    deep[n] = '\0';
    expect_error(deep, "nested too deep");
}

/* A small vocabulary: token i has the bytes voc[i]. */
static const char *VOC[] = {
    "",      /* 0: a control token (no bytes) */
    "{",     /* 1 */
    "}",     /* 2 */
    "\"",    /* 3 */
    "{\"",   /* 4 */
    "a",     /* 5 */
    "ab",    /* 6 */
    "\":",   /* 7 */
    "1",     /* 8 */
    "12",    /* 9 */
    " ",     /* 10 */
    "\xc3",  /* 11: a byte-fallback token, first half of e-acute */
    "\xa9",  /* 12: its second half */
    "\xc3\xa9", /* 13 */
    "a\"",   /* 14: allowed once a character was read */
    "1}",    /* 15 */
    "a",     /* 16: the same bytes as 5 */
    "x",     /* 17 */
};
#define NVOC ((int)(sizeof VOC / sizeof VOC[0]))

static bool bit(const uint32_t *mask, int i) { return (mask[i >> 5] >> (i & 31)) & 1u; }

IG_TEST(grammar_mask_small_vocab) {
    size_t lens[NVOC];
    for (int i = 0; i < NVOC; i++) lens[i] = strlen(VOC[i]);
    ig_token_trie *t = NULL;
    REQUIRE_OK(ig_token_trie_from_bytes(VOC, lens, NVOC, &t));
    ig_grammar *g = gbnf("root ::= \"{\" \"\\\"\" [a\\u00e9]+ \"\\\":\" \" \"? [0-9]+ \"}\"\n");
    REQUIRE(g);
    ig_grammar_matcher *m = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m));
    uint32_t mask[1];
    int n = 0;
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK_EQ_INT(n, 2);
    CHECK(bit(mask, 1) && bit(mask, 4));
    CHECK(!bit(mask, 0) && !bit(mask, 2) && !bit(mask, 3));
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 4));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    /* a, ab? no (b not allowed), the e-acute halves and whole, a" no yet (needs ":) */
    CHECK(bit(mask, 5) && bit(mask, 16) && bit(mask, 11) && bit(mask, 13) && bit(mask, 14));
    CHECK(!bit(mask, 6) && !bit(mask, 12) && !bit(mask, 7) && !bit(mask, 17));
    CHECK_EQ_INT(n, 5);
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 11));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK_EQ_INT(n, 1); /* only the second half */
    CHECK(bit(mask, 12));
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 12));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK(bit(mask, 5) && bit(mask, 7) && bit(mask, 13) && bit(mask, 14) && !bit(mask, 12));
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 7));
    CHECK(!ig_grammar_matcher_can_end(m));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK(bit(mask, 10) && bit(mask, 8) && bit(mask, 9) && bit(mask, 15) && !bit(mask, 2));
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 9));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK(bit(mask, 2) && bit(mask, 8) && bit(mask, 15) && !bit(mask, 10));
    REQUIRE(ig_grammar_matcher_accept_token(m, t, 15));
    CHECK(ig_grammar_matcher_can_end(m));
    CHECK(ig_grammar_matcher_finished(m));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK_EQ_INT(n, 0);
    CHECK(!ig_grammar_matcher_accept_token(m, t, 5));
    /* the same state again hits the mask cache */
    ig_grammar_matcher_reset(m);
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    ig_grammar_stats stats;
    ig_grammar_matcher_stats(m, &stats);
    CHECK(stats.mask_cache_hits >= 1);
    CHECK_EQ_INT(n, 2);
    /* another matcher of the grammar finds the masks this one computed */
    ig_grammar_matcher *m2 = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m2));
    REQUIRE(ig_grammar_matcher_accept_token(m2, t, 4));
    uint32_t mask2[1];
    int n2 = 0;
    REQUIRE_OK(ig_grammar_matcher_mask(m2, t, mask2, &n2));
    ig_grammar_matcher_stats(m2, &stats);
    CHECK_EQ_INT(stats.mask_cache_hits, 1);
    CHECK_EQ_INT(stats.trie_nodes_visited, 0);
    CHECK_EQ_INT(n2, 5);
    CHECK(bit(mask2, 5) && bit(mask2, 14) && !bit(mask2, 6));
    ig_grammar_matcher_free(m2);
    ig_grammar_matcher_free(m);
    ig_grammar_free(g);
    ig_token_trie_free(t);
}

static void *prepare_main(void *arg) {
    return (void *)(intptr_t)ig_gen_seq_prepare_mask(arg);
}

/* A mask computed ahead (on another thread, as while a device computes the
 * logits) gives every step exactly what the step computing it gives:
 * sampled at temperature 1 from the same logits, two sequences of one seed
 * make the same tokens, one with its masks prepared and one without. */
IG_TEST(grammar_mask_prepared_ahead_matches_the_step) {
    size_t lens[NVOC];
    for (int i = 0; i < NVOC; i++) lens[i] = strlen(VOC[i]);
    ig_token_trie *t = NULL;
    REQUIRE_OK(ig_token_trie_from_bytes(VOC, lens, NVOC, &t));
    ig_grammar *g = gbnf("root ::= (\"{\" \"\\\"\" [a\\u00e9]+ \"\\\":\" \" \"? [0-9]+ \"}\")+\n");
    REQUIRE(g);
    ig_gen_seq_params p = {.sampling = ig_sampler_default_params(), .n_vocab = NVOC, .max_tokens = 40,
                           .grammar = g, .trie = t};
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.seed = 7;
    ig_gen_seq *plain = NULL, *ahead = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &plain));
    REQUIRE_OK(ig_gen_seq_create(&p, &ahead));
    uint64_t rng = 12345;
    float logits[NVOC];
    int steps = 0, prepared = 0;
    for (; steps < 40; steps++) {
        for (int i = 0; i < NVOC; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            logits[i] = (float)((rng >> 40) % 1000) / 250.0f;
        }
        /* `"` and `a"` close a name where no token of this vocabulary
         * continues (it has no ":"), and `{` needs `"` next */
        logits[1] = logits[3] = logits[14] = -INFINITY;
        if (steps % 3 != 2) { /* sometimes not prepared: the step makes it */
            pthread_t th;
            REQUIRE(pthread_create(&th, NULL, prepare_main, ahead) == 0);
            void *r = NULL;
            pthread_join(th, &r);
            CHECK_EQ_INT((int)(intptr_t)r, IG_OK);
            prepared++;
        }
        ig_gen_event e1, e2;
        REQUIRE_OK(ig_gen_seq_step(plain, logits, &e1));
        REQUIRE_OK(ig_gen_seq_step(ahead, logits, &e2));
        CHECK_EQ_INT(e2.token, e1.token);
        CHECK_EQ_INT(e2.finish, e1.finish);
        CHECK(ig_gen_seq_mask_seconds(ahead) > 0.0);
        if (e1.finish != IG_FINISH_NONE) break;
    }
    CHECK(steps >= 30 && prepared >= 20);
    CHECK_EQ_INT(ig_gen_seq_prepare_mask(ahead), IG_OK); /* after the end: nothing to do */
    ig_gen_seq_free(plain);
    ig_gen_seq_free(ahead);
    ig_grammar_free(g);
    ig_token_trie_free(t);
}

IG_TEST(grammar_json_object_mode) {
    ig_grammar *g = NULL;
    REQUIRE_OK(ig_grammar_json_object(&g));
    CHECK_EQ_INT(match(g, "{\"a\": [1, {\"b\": null}], \"c\": -0.5e+3}"), 1);
    CHECK_EQ_INT(match(g, "[1]"), -1);
    CHECK_EQ_INT(match(g, "{\"a\" 1}"), -1);
    CHECK_EQ_INT(match(g, "{\n  \"a\": true\n}"), 1);
    ig_grammar_free(g);
}

IG_TEST(grammar_schema_object) {
    ig_grammar *g = schema("{\"type\":\"object\",\"properties\":{"
                           "\"name\":{\"type\":\"string\"},"
                           "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":130},"
                           "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\xc3\xa9\"]},"
                           "\"minItems\":1,\"maxItems\":2}},"
                           "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":42}"), 1);
    CHECK_EQ_INT(match(g, "{\"name\": \"x\", \"age\": 130, \"tags\": [\"b\xc3\xa9\"]}"), 1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":131}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":-1}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":007}"), -1);
    CHECK_EQ_INT(match(g, "{\"age\":1,\"name\":\"x\"}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\"}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":1,\"tags\":[]}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":1,\"tags\":[\"a\",\"a\",\"a\"]}"), -1);
    CHECK_EQ_INT(match(g, "{\"name\":\"x\",\"age\":1,\"other\":1}"), -1);
    ig_grammar_free(g);
}

/* Extra keys (additionalProperties true or a schema) may not repeat a
 * declared name, however spelled: a validator would see a duplicate key. */
IG_TEST(grammar_schema_extra_keys_are_not_declared_names) {
    ig_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
                           "\"i/d\":{\"type\":\"integer\"},\"n\\u00e9\":{\"type\":\"integer\"},"
                           "\"\":{\"type\":\"integer\"}},\"required\":[\"id\"],\"additionalProperties\":true}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{\"id\":1}"), 1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"x\":\"1\"}"), 1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"idx\":\"1\",\"i\":2,\"ic\":[],\"\\n\":3}"), 1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"n\":1,\"n\xc3\xa9x\":1,\"n\xc3\xa8\":1,\"i\\\\d\":0}"), 1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"id\":\"1\"}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"x\":0,\"id\":2}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"i\\u0064\":2}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"i/d\":2,\"\":3}"), 1); /* declared, in order */
    CHECK_EQ_INT(match(g, "{\"id\":1,\"i/d\":2,\"i/d\":3}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"i/d\":2,\"i\\/d\":3}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"x\":0,\"i\\/d\":2}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"x\":0,\"n\xc3\xa9\":2}"), -1);
    CHECK_EQ_INT(match(g, "{\"id\":1,\"\":2,\"\":3}"), -1);
    ig_grammar_free(g);
    /* the same with a schema for the extra values */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
               "\"additionalProperties\":{\"type\":\"integer\"}}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{\"b\":1,\"ab\":2}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\":\"s\",\"b\":1}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\":\"s\",\"a\":1}"), -1);
    CHECK_EQ_INT(match(g, "{\"b\":\"s\"}"), -1);
    ig_grammar_free(g);
}

IG_TEST(grammar_schema_optional_and_nullable) {
    ig_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},"
                           "\"b\":{\"type\":[\"string\",\"null\"]},\"c\":{\"const\":{\"k\":[1]}}},"
                           "\"required\":[\"c\"]}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{\"c\":{\"k\":[1]}}"), 1);
    CHECK_EQ_INT(match(g, "{\"b\":null,\"c\":{\"k\":[1]}}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\":true,\"b\":\"s\",\"c\":{\"k\":[1]}}"), 1);
    CHECK_EQ_INT(match(g, "{\"a\":true}"), -1);
    CHECK_EQ_INT(match(g, "{\"c\":{\"k\":[2]}}"), -1);
    ig_grammar_free(g);
    /* empty object schema with optional properties only */
    g = schema("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}}}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{}"), 1);
    CHECK_EQ_INT(match(g, "{\"x\":1.5e3}"), 1);
    ig_grammar_free(g);
}

IG_TEST(grammar_schema_numbers) {
    ig_grammar *g = schema("{\"type\":\"integer\",\"minimum\":-15,\"exclusiveMaximum\":250}");
    REQUIRE(g);
    const char *ok[] = {"-15", "-9", "-1", "0", "7", "10", "99", "100", "199", "249"};
    const char *bad[] = {"-16", "-0", "250", "251", "1000", "01", "-20", "2500"};
    for (size_t i = 0; i < IG_ARRAY_LEN(ok); i++)
        if (match(g, ok[i]) != 1) ig_test_fail_at(__FILE__, __LINE__, "%s refused", ok[i]);
    for (size_t i = 0; i < IG_ARRAY_LEN(bad); i++)
        if (match(g, bad[i]) == 1) ig_test_fail_at(__FILE__, __LINE__, "%s accepted", bad[i]);
    ig_grammar_free(g);
    /* an exhaustive check of a range */
    g = schema("{\"type\":\"integer\",\"minimum\":37,\"maximum\":1234}");
    REQUIRE(g);
    for (int v = -50; v < 1400; v++) {
        char s[16];
        snprintf(s, sizeof s, "%d", v);
        int want = v >= 37 && v <= 1234;
        if ((match(g, s) == 1) != want) ig_test_fail_at(__FILE__, __LINE__, "%d: wrong", v);
    }
    ig_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"minimum\":5}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "5"), 1);
    CHECK(match(g, "4") != 1);
    CHECK_EQ_INT(match(g, "-4"), -1);
    CHECK_EQ_INT(match(g, "12345678"), 1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"number\",\"minimum\":-2,\"maximum\":5}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "4.99"), 1);
    CHECK_EQ_INT(match(g, "5"), 1);
    CHECK_EQ_INT(match(g, "5.00"), 1);
    CHECK_EQ_INT(match(g, "5.5"), -1);
    CHECK_EQ_INT(match(g, "-1.5"), 1);
    CHECK_EQ_INT(match(g, "-2.0"), 1);
    CHECK_EQ_INT(match(g, "-2.1"), -1);
    CHECK_EQ_INT(match(g, "6"), -1);
    CHECK_EQ_INT(match(g, "1e3"), -1);
    ig_grammar_free(g);
}

IG_TEST(grammar_schema_strings) {
    ig_grammar *g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"2024-02-28\""), 1);
    CHECK_EQ_INT(match(g, "\"2024-02-30\""), -1);
    CHECK_EQ_INT(match(g, "\"2024-13-01\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"123e4567-e89b-12d3-a456-426614174000\""), 1);
    CHECK_EQ_INT(match(g, "\"123e4567e89b-12d3-a456-426614174000\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date-time\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"2024-01-05T10:20:30Z\""), 1);
    CHECK_EQ_INT(match(g, "\"2024-01-05T10:20:30.123+02:00\""), 1);
    CHECK_EQ_INT(match(g, "\"2024-01-05 10:20:30Z\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"AB-123\""), 1);
    CHECK_EQ_INT(match(g, "\"AB-123yz\""), 1);
    CHECK_EQ_INT(match(g, "\"AB-12\""), -1);
    CHECK_EQ_INT(match(g, "\"ab-123\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"a\\\"b\"}"); /* unanchored, a quote */
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"xxa\\\"bq\""), 1);
    CHECK_EQ_INT(match(g, "\"a\"b\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"a\""), -1);
    CHECK_EQ_INT(match(g, "\"\xc3\xa9\\n\""), 1);
    CHECK_EQ_INT(match(g, "\"abcd\""), -1);
    ig_grammar_free(g);
}

/* The formats OpenAI's structured outputs list beyond dates and uuids. */
IG_TEST(grammar_schema_more_formats) {
    ig_grammar *g = schema("{\"type\":\"string\",\"format\":\"ipv4\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"192.168.0.1\""), 1);
    CHECK_EQ_INT(match(g, "\"255.255.255.255\""), 1);
    CHECK_EQ_INT(match(g, "\"256.1.1.1\""), -1);
    CHECK_EQ_INT(match(g, "\"01.1.1.1\""), -1); /* leading zeros are not valid */
    CHECK_EQ_INT(match(g, "\"1.2.3\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"ipv6\"}");
    REQUIRE(g);
    const char *v6ok[] = {"\"2001:db8:0:0:0:0:2:1\"", "\"::\"", "\"::1\"", "\"fe80::\"",
                          "\"2001:DB8::8:800:200c:417a\"", "\"1:2:3:4:5:6:7::\"",
                          "\"1::2:3:4:5:6:7\""};
    const char *v6bad[] = {"\"1:2:3:4:5:6:7\"", "\"1::2::3\"", "\"12345::\"",
                           "\"1:2:3:4:5:6:7:8:9\"", "\"1::2:3:4:5:6:7:8\"", "\":::\""};
    for (size_t i = 0; i < IG_ARRAY_LEN(v6ok); i++)
        if (match(g, v6ok[i]) != 1) ig_test_fail_at(__FILE__, __LINE__, "%s refused", v6ok[i]);
    for (size_t i = 0; i < IG_ARRAY_LEN(v6bad); i++)
        if (match(g, v6bad[i]) == 1) ig_test_fail_at(__FILE__, __LINE__, "%s accepted", v6bad[i]);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"hostname\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"example.com\""), 1);
    CHECK_EQ_INT(match(g, "\"a-b.c\""), 1);
    CHECK_EQ_INT(match(g, "\"-a.com\""), -1);
    CHECK_EQ_INT(match(g, "\"a-.com\""), -1);
    CHECK_EQ_INT(match(g, "\"a..b\""), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"duration\"}");
    REQUIRE(g);
    const char *dok[] = {"\"P3Y6M4DT12H30M5S\"", "\"PT20M\"", "\"P2W\"", "\"P1D\"",
                         "\"P1M\"", "\"PT36H\"", "\"PT1M5S\""};
    const char *dbad[] = {"\"P\"", "\"PT\"", "\"P1H\"", "\"P1W2D\"", "\"P1D2Y\"", "\"1D\""};
    for (size_t i = 0; i < IG_ARRAY_LEN(dok); i++)
        if (match(g, dok[i]) != 1) ig_test_fail_at(__FILE__, __LINE__, "%s refused", dok[i]);
    for (size_t i = 0; i < IG_ARRAY_LEN(dbad); i++)
        if (match(g, dbad[i]) == 1) ig_test_fail_at(__FILE__, __LINE__, "%s accepted", dbad[i]);
    ig_grammar_free(g);
}

/* multipleOf: exhaustive against arithmetic, with and without bounds. */
IG_TEST(grammar_schema_multiple_of) {
    static const struct {
        const char *schema;
        int m, lo, hi; /* lo/hi: INT_MIN/INT_MAX when absent */
    } cases[] = {
        {"{\"type\":\"integer\",\"multipleOf\":7}", 7, -1000000, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":12,\"minimum\":0}", 12, 0, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":5,\"exclusiveMinimum\":0}", 5, 1, 1000000},
        {"{\"type\":\"integer\",\"multipleOf\":3,\"maximum\":2}", 3, -1000000, 2},
        {"{\"type\":\"number\",\"multipleOf\":25,\"minimum\":-100,\"maximum\":1000}", 25, -100, 1000},
        {"{\"type\":\"integer\",\"multipleOf\":1,\"maximum\":3}", 1, -1000000, 3},
    };
    for (size_t c = 0; c < IG_ARRAY_LEN(cases); c++) {
        ig_grammar *g = schema(cases[c].schema);
        if (!g) {
            ig_test_fail_at(__FILE__, __LINE__, "%s refused", cases[c].schema);
            continue;
        }
        for (int v = -1500; v <= 1500; v++) {
            char s[24];
            snprintf(s, sizeof s, "%d", v);
            int want = v % cases[c].m == 0 && v >= cases[c].lo && v <= cases[c].hi;
            if ((match(g, s) == 1) != want)
                ig_test_fail_at(__FILE__, __LINE__, "%s: %d wrong", cases[c].schema, v);
        }
        ig_grammar_free(g);
    }
    ig_grammar *g = schema("{\"type\":\"integer\",\"multipleOf\":7}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "700000000000007"), 1);
    CHECK_EQ_INT(match(g, "-0"), -1);
    CHECK_EQ_INT(match(g, "07"), -1);
    CHECK_EQ_INT(match(g, "7.0"), -1);
    CHECK_EQ_INT(match(g, "70000000000000000007"), -1); /* at most 16 digits */
    ig_grammar_free(g);
}

/* Every schema of the end-to-end corpus compiles (the sampling tests in
 * tests/e2e/test_structured.py need the real model), and a few documents
 * show that the new keywords are enforced inside it. */
IG_TEST(grammar_schema_corpus_compiles) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/schemas", ig_test_fixtures());
    DIR *d = opendir(dir);
    REQUIRE(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *text = NULL;
        size_t tlen = 0;
        ig_grammar *g = NULL;
        if (ig_file_read_all(path, IG_GRAMMAR_MAX_TEXT, &text, &tlen) != IG_OK ||
            ig_grammar_from_json_schema(text, tlen, &g) != IG_OK)
            ig_test_fail_at(__FILE__, __LINE__, "%s: %s", e->d_name, ig_last_error());
        if (g && !strcmp(e->d_name, "multiple_of.json")) {
            CHECK_EQ_INT(match(g, "{\"minutes\": 45, \"cents\": 105, \"steps\": -12}"), 1);
            CHECK_EQ_INT(match(g, "{\"minutes\": 50"), -1);
            CHECK_EQ_INT(match(g, "{\"minutes\": 255"), -1);
            CHECK_EQ_INT(match(g, "{\"minutes\": 0, \"cents\": -5"), -1);
        }
        if (g && !strcmp(e->d_name, "format_network.json")) {
            CHECK_EQ_INT(match(g, "{\"host\": \"db.local\", \"v4\": \"10.0.0.1\", "
                                  "\"v6\": \"fe80::1\"}"), 1);
            CHECK_EQ_INT(match(g, "{\"host\": \"db.local\", \"v4\": \"10.0.0.300"), -1);
        }
        ig_grammar_free(g);
        free(text);
        n++;
    }
    closedir(d);
    CHECK(n >= 30);
}

/* enum / const next to "type": only the values of that type are produced. */
IG_TEST(grammar_schema_enum_with_type) {
    ig_grammar *g = schema("{\"type\":[\"string\",\"integer\"],\"enum\":[\"a\",1,2.0,2.5,true,null]}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"a\""), 1);
    CHECK_EQ_INT(match(g, "1"), 1);
    CHECK(match(g, "2.0") == 1 || match(g, "2") == 1); /* 2.0 is an integer in JSON Schema */
    CHECK_EQ_INT(match(g, "2.5"), -1);
    CHECK_EQ_INT(match(g, "true"), -1);
    CHECK_EQ_INT(match(g, "null"), -1);
    ig_grammar_free(g);
    g = schema("{\"type\":\"string\",\"nullable\":true,\"enum\":[\"x\",null,3]}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "\"x\""), 1);
    CHECK_EQ_INT(match(g, "null"), 1);
    CHECK_EQ_INT(match(g, "3"), -1);
    ig_grammar_free(g);
}

IG_TEST(grammar_schema_refs) {
    ig_grammar *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                           "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":"
                           "{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                           "\"$ref\":\"#/$defs/node\"}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}"), 1);
    CHECK_EQ_INT(match(g, "{\"v\":1,\"kids\":[{\"w\":2}]}"), -1);
    ig_grammar_free(g);
    g = schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"enum\":[\"x\"]}]}");
    REQUIRE(g);
    CHECK_EQ_INT(match(g, "12"), 1);
    CHECK_EQ_INT(match(g, "\"x\""), 1);
    CHECK_EQ_INT(match(g, "\"y\""), -1);
    ig_grammar_free(g);
}

static void schema_error(const char *text, const char *needle) {
    ig_grammar *g = NULL;
    ig_status st = ig_grammar_from_json_schema(text, strlen(text), &g);
    CHECK(st != IG_OK);
    CHECK(g == NULL);
    if (st != IG_OK && !strstr(ig_last_error(), needle))
        ig_test_fail_at(__FILE__, __LINE__, "error '%s' lacks '%s'", ig_last_error(), needle);
}

IG_TEST(grammar_schema_errors) {
    schema_error("{\"type\":\"string\",\"contentEncoding\":\"base64\"}", "'contentEncoding'");
    schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[]}}}",
                 "#/properties/a: the keyword 'oneOf'");
    schema_error("{\"type\":\"strin\"}", "unknown type");
    schema_error("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    schema_error("{\"$ref\":\"http://x/y\"}", "only references inside");
    schema_error("{\"type\":\"string\",\"format\":\"uri\"}", "format 'uri'");
    schema_error("{\"minimum\":3}", "'minimum' without 'type'");
    schema_error("{\"type\":\"object\",\"anyOf\":[{\"required\":[]}]}", "'type' next to 'anyOf'");
    schema_error("{\"type\":\"string\",\"enum\":[1,2]}", "no value of 'enum'");
    schema_error("{\"type\":\"integer\",\"const\":\"7\"}", "no value of 'const'");
    schema_error("{\"properties\":{\"a\":{\"pattern\":\"x\"}}}", "'pattern' without 'type'");
    schema_error("{\"type\":\"number\",\"multipleOf\":0.5}", "only whole numbers");
    schema_error("{\"type\":\"integer\",\"multipleOf\":0}", "above 0");
    schema_error("{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":30}", "bounds are not supported");
    schema_error("{\"type\":\"integer\",\"multipleOf\":1000}", "above 100");
    schema_error("{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":6,\"maximum\":9}",
                 "no multiple");
    schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround");
    schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer");
    schema_error("{\"type\":", "malformed JSON");
    schema_error("{\"type\":\"object\",\"required\":[\"z\"]}", "'z' is not among");
    schema_error("{\"type\":\"array\",\"maxItems\":100000}", "'maxItems' above");
    /* self-reference without progress is refused by the grammar compiler */
    schema_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "");
}

/* The mask equals feeding each token's bytes on its own, on a random
 * vocabulary over bytes that matter to JSON (plain ASCII, quotes,
 * backslashes, UTF-8 pieces), in states inside and outside strings. */
IG_TEST(grammar_mask_matches_brute_force) {
    static const char alphabet[] = "ab {}[]:,\"\\1-.e\xc3\xa9\xe6\x97\xa5\n";
    enum { NV = 400 };
    char *bytes[NV];
    size_t lens[NV];
    uint64_t x = 0x1234567;
    for (int i = 0; i < NV; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = 1 + (x >> 60) % 6;
        bytes[i] = malloc(len + 1);
        for (size_t k = 0; k < len; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            bytes[i][k] = alphabet[(x >> 33) % (sizeof alphabet - 1)];
        }
        lens[i] = len;
    }
    ig_token_trie *t = NULL;
    ig_grammar *g = NULL;
    REQUIRE_OK(ig_token_trie_from_bytes((const char *const *)bytes, lens, NV, &t));
    REQUIRE_OK(ig_grammar_json_object(&g));
    const char *prefixes[] = {"", "{", "{\"", "{\"ab", "{\"a\\", "{\"a\xc3", "{\"a\": ",
                              "{\"a\": [1, -1.", "{\"a\": \"b", "{\"a\": {}}"};
    for (size_t p = 0; p < IG_ARRAY_LEN(prefixes); p++) {
        ig_grammar_matcher *m = NULL;
        REQUIRE_OK(ig_grammar_matcher_create(g, &m));
        REQUIRE(ig_grammar_matcher_accept_bytes(m, prefixes[p], strlen(prefixes[p])));
        uint32_t mask[(NV + 31) / 32];
        int n = 0;
        REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
        int want_n = 0;
        for (int i = 0; i < NV; i++) {
            ig_grammar_matcher *b = NULL;
            REQUIRE_OK(ig_grammar_matcher_create(g, &b));
            bool ok = ig_grammar_matcher_accept_bytes(b, prefixes[p], strlen(prefixes[p])) &&
                      ig_grammar_matcher_accept_bytes(b, bytes[i], lens[i]);
            ig_grammar_matcher_free(b);
            want_n += ok;
            if (ok != bit(mask, i))
                ig_test_fail_at(__FILE__, __LINE__, "prefix '%s' token %d '%.*s': mask %d, feed %d",
                                prefixes[p], i, (int)lens[i], bytes[i], bit(mask, i), ok);
        }
        CHECK_EQ_INT(n, want_n);
        ig_grammar_matcher_free(m);
    }
    ig_grammar_free(g);
    /* strings of bounded length: the plain run shrinks with every byte */
    const char *sch = "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"string\","
                      "\"maxLength\":4}},\"required\":[\"ab\"]}";
    REQUIRE_OK(ig_grammar_from_json_schema(sch, strlen(sch), &g));
    const char *prefixes2[] = {"{\"ab\": \"", "{\"ab\": \"a", "{\"ab\": \"ab1", "{\"ab\":\"\\n-."};
    for (size_t p = 0; p < IG_ARRAY_LEN(prefixes2); p++) {
        ig_grammar_matcher *m = NULL;
        REQUIRE_OK(ig_grammar_matcher_create(g, &m));
        REQUIRE(ig_grammar_matcher_accept_bytes(m, prefixes2[p], strlen(prefixes2[p])));
        uint32_t mask[(NV + 31) / 32];
        int n = 0, want_n = 0;
        REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
        for (int i = 0; i < NV; i++) {
            ig_grammar_matcher *b = NULL;
            REQUIRE_OK(ig_grammar_matcher_create(g, &b));
            bool ok = ig_grammar_matcher_accept_bytes(b, prefixes2[p], strlen(prefixes2[p])) &&
                      ig_grammar_matcher_accept_bytes(b, bytes[i], lens[i]);
            ig_grammar_matcher_free(b);
            want_n += ok;
            if (ok != bit(mask, i))
                ig_test_fail_at(__FILE__, __LINE__, "prefix '%s' token %d '%.*s': mask %d, feed %d",
                                prefixes2[p], i, (int)lens[i], bytes[i], bit(mask, i), ok);
        }
        CHECK_EQ_INT(n, want_n);
        CHECK(want_n > 0);
        ig_grammar_matcher_free(m);
    }
    ig_grammar_free(g);
    ig_token_trie_free(t);
    for (int i = 0; i < NV; i++) free(bytes[i]);
}

/* Untrusted text: random GBNF-like and schema-like inputs either compile or
 * fail with a message; nothing crashes (run under the sanitizers too). */
IG_TEST(grammar_random_inputs_are_safe) {
    static const char gb[] = "root::= \"a\\[]^-()|*+?{},0123xyz#\n.\\u00e9\xc3\xa9";
    static const char *const pieces[] = {
        "{", "}", "[", "]", ",", ":", "\"type\"", "\"object\"", "\"string\"", "\"integer\"",
        "\"properties\"", "\"items\"", "\"$ref\"", "\"#\"", "\"#/$defs/a\"", "\"$defs\"", "\"a\"",
        "\"anyOf\"", "\"enum\"", "\"pattern\"", "\"^(a|b)*$\"", "\"minimum\"", "-3", "7", "1e3",
        "\"maxItems\"", "\"required\"", "true", "null", "\"format\"", "\"date\"", "\"[^a-\""};
    uint64_t x = 42;
    int compiled = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        char buf[160];
        size_t n = 0;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (x >> 58) + 4;
        if (it % 2 == 0) {
            memcpy(buf, "root ::= ", 9);
            n = 9;
            for (size_t k = 0; k < len && n < sizeof buf - 1; k++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                buf[n++] = gb[(x >> 33) % (sizeof gb - 1)];
            }
            ig_grammar *g = NULL;
            if (ig_grammar_from_gbnf(buf, n, NULL, &g) == IG_OK) {
                compiled++;
                match(g, "aaa");
                ig_grammar_free(g);
            } else {
                refused++;
                CHECK(ig_last_error()[0] != '\0');
            }
        } else {
            for (size_t k = 0; k < len / 2; k++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                const char *p = pieces[(x >> 33) % IG_ARRAY_LEN(pieces)];
                size_t pl = strlen(p);
                if (n + pl >= sizeof buf) break;
                memcpy(buf + n, p, pl);
                n += pl;
            }
            ig_grammar *g = NULL;
            if (ig_grammar_from_json_schema(buf, n, &g) == IG_OK) {
                compiled++;
                match(g, "{}");
                ig_grammar_free(g);
            } else {
                refused++;
            }
        }
    }
    CHECK(compiled > 0);
    CHECK(refused > 0);
    /* a valid schema nested deeper than the limit is refused, not recursed on */
    char deep[8192];
    size_t n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    n += (size_t)snprintf(deep + n, sizeof deep - n, "true");
    for (int i = 0; i < 300; i++) deep[n++] = '}';
    ig_grammar *g = NULL;
    CHECK(ig_grammar_from_json_schema(deep, n, &g) != IG_OK);
    CHECK(g == NULL);
}

/* On Gemma 3's real vocabulary: special tokens have no bytes (never
 * allowed, image markers included, which decoding also leaves out), and a
 * mask allows exactly the tokens whose text fits. */
IG_TEST(grammar_real_vocab_masks) {
    const char *path = ig_test_real_model();
    if (!path) {
        if (getenv("IGNIS_ALLOW_MISSING_MODEL")) ig_test_skip("no real model");
        else ig_test_fail_at(__FILE__, __LINE__, "the real model is missing");
        return;
    }
    ig_model_params mp = ig_model_default_params();
    ig_model *model = NULL;
    REQUIRE_OK(ig_model_load(path, &mp, &model));
    const ig_tokenizer *tok = ig_model_tokenizer(model);
    int32_t img = ig_token_lookup(tok, "<start_of_image>");
    int32_t eot = ig_token_lookup(tok, "<end_of_turn>");
    REQUIRE(img >= 0 && eot >= 0);
    CHECK(ig_token_is_control(tok, img));
    char *text = NULL;
    int32_t ids[3] = {img, ig_token_lookup(tok, "x"), eot};
    REQUIRE_OK(ig_detokenize(tok, ids, 3, false, &text));
    CHECK(!strcmp(text, "x"));
    free(text);
    REQUIRE_OK(ig_detokenize(tok, ids, 3, true, &text));
    CHECK(!strcmp(text, "<start_of_image>x<end_of_turn>"));
    free(text);

    int V = ig_model_hparams(model)->n_vocab_real;
    ig_token_trie *t = NULL;
    REQUIRE_OK(ig_token_trie_create(tok, V, &t));
    size_t len;
    CHECK(ig_token_trie_bytes(t, img, &len) == NULL);
    CHECK(ig_token_trie_bytes(t, eot, &len) == NULL);
    ig_grammar *g = NULL;
    REQUIRE_OK(ig_grammar_json_object(&g));
    ig_grammar_matcher *m = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m));
    uint32_t *mask = calloc(((size_t)V + 31) / 32, sizeof *mask);
    REQUIRE(mask);
    int n = 0;
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    /* every allowed token starts with "{"; these are among them */
    for (int id = 0; id < V; id++) {
        const char *b = ig_token_trie_bytes(t, id, &len);
        if (bit(mask, id) && (!b || b[0] != '{'))
            ig_test_fail_at(__FILE__, __LINE__, "token %d allowed", id);
    }
    const char *fits[] = {"{", "{\"", "{}", "{\n"};
    int found = 0;
    for (size_t k = 0; k < IG_ARRAY_LEN(fits); k++) {
        int32_t id = ig_token_lookup(tok, fits[k]);
        if (id < 0) continue;
        found++;
        if (!bit(mask, id)) ig_test_fail_at(__FILE__, __LINE__, "'%s' refused", fits[k]);
    }
    CHECK(found >= 2);
    CHECK(n >= found && n < 1000);
    CHECK(!bit(mask, img) && !bit(mask, eot));
    /* inside a string nearly everything fits, never a control token */
    REQUIRE(ig_grammar_matcher_accept_bytes(m, "{\"", 2));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK(n > V * 9 / 10);
    CHECK(!bit(mask, img) && !bit(mask, eot) && !bit(mask, ig_token_lookup(tok, "<bos>")));
    CHECK(bit(mask, ig_token_lookup(tok, "x")));
    free(mask);
    ig_grammar_matcher_free(m);
    ig_grammar_free(g);
    ig_token_trie_free(t);
    ig_model_free(model);
}

/* A trie of the 256 single bytes. */
static ig_token_trie *byte_trie(void) {
    static char singles[256];
    const char *bytes[256];
    size_t lens[256];
    for (int i = 0; i < 256; i++) {
        singles[i] = (char)i;
        bytes[i] = &singles[i];
        lens[i] = 1;
    }
    ig_token_trie *t = NULL;
    return ig_token_trie_from_bytes(bytes, lens, 256, &t) == IG_OK ? t : NULL;
}

static const char AMBIGUOUS_NESTING[] = "root ::= item (\",\" item)*\n"
                                        "item ::= [a&-z]+ | \"(\" root root | num\n"
                                        "num ::= [0-9]{1,3} \"x\"?\n";

/* "(" root root makes the parses of "((((..." grow like Fibonacci numbers
 * (where the first root ends is ambiguous at every level): the matcher must
 * give up with a clear error at IG_GRAMMAR_MAX_STACKS, in a few milliseconds,
 * instead of running for minutes (a grammar from a request would pin a
 * server thread). Masks before that are exact. */
IG_TEST(grammar_ambiguous_nesting_fails_cleanly) {
    ig_token_trie *t = byte_trie();
    REQUIRE(t);
    ig_grammar *g = gbnf(AMBIGUOUS_NESTING);
    REQUIRE(g);
    ig_grammar_matcher *m = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m));
    uint32_t mask[8];
    int n = 0, depth = 0;
    ig_status st = IG_OK;
    for (; depth < 64; depth++) {
        st = ig_grammar_matcher_mask(m, t, mask, &n);
        if (st != IG_OK) break;
        /* [a&-z] is a and & to z (0x26-0x7A, "(" and "," among them) */
        CHECK_EQ_INT(n, 0x7A - 0x26 + 1);
        CHECK(bit(mask, '(') && bit(mask, 'q') && bit(mask, '7') && !bit(mask, '~'));
        REQUIRE(ig_grammar_matcher_accept_bytes(m, "(", 1));
    }
    CHECK_STATUS(st, IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "too ambiguous") != NULL);
    /* Fibonacci growth passes 4096 stacks after about 12 "(" (not at once,
     * not never) */
    CHECK(depth >= 8 && depth <= 20);
    ig_grammar_stats stats;
    ig_grammar_matcher_stats(m, &stats);
    CHECK(stats.max_state_stacks <= IG_GRAMMAR_MAX_STACKS);
    CHECK(stats.work <= (uint64_t)(depth + 2) * IG_GRAMMAR_MAX_WORK);
    /* the failure sticks: no more masks or bytes */
    CHECK_STATUS(ig_grammar_matcher_mask(m, t, mask, &n), IG_ERR_UNSUPPORTED);
    CHECK_EQ_INT(n, 0);
    CHECK(!ig_grammar_matcher_accept_bytes(m, "a", 1));
    CHECK_STATUS(ig_grammar_matcher_status(m), IG_ERR_UNSUPPORTED);
    ig_grammar_matcher_free(m);
    ig_grammar_free(g);
    ig_token_trie_free(t);
}

/* The same shape without the ambiguity ("(" root ")") nests 200 deep with
 * one live stack and exact masks: the limit is on parses, not on depth. */
IG_TEST(grammar_deep_unambiguous_nesting_is_fine) {
    ig_token_trie *t = byte_trie();
    REQUIRE(t);
    ig_grammar *g = gbnf("root ::= item (\",\" item)*\n"
                         "item ::= [a-z]+ | \"(\" root \")\" | num\n"
                         "num ::= [0-9]{1,3} \"x\"?\n");
    REQUIRE(g);
    ig_grammar_matcher *m = NULL;
    REQUIRE_OK(ig_grammar_matcher_create(g, &m));
    uint32_t mask[8];
    int n = 0;
    for (int depth = 0; depth < 200; depth++) REQUIRE(ig_grammar_matcher_accept_bytes(m, "(", 1));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK_EQ_INT(n, 26 + 10 + 1);
    CHECK(bit(mask, '(') && !bit(mask, ')') && !bit(mask, ','));
    REQUIRE(ig_grammar_matcher_accept_bytes(m, "ab", 2));
    REQUIRE_OK(ig_grammar_matcher_mask(m, t, mask, &n));
    CHECK_EQ_INT(n, 26 + 2); /* more letters, ")" or "," */
    CHECK(bit(mask, ')') && bit(mask, ',') && !bit(mask, '('));
    ig_grammar_stats stats;
    ig_grammar_matcher_stats(m, &stats);
    CHECK(stats.max_state_stacks <= 4); /* a handful, whatever the depth */
    CHECK_STATUS(ig_grammar_matcher_status(m), IG_OK);
    ig_grammar_matcher_free(m);
    ig_grammar_free(g);
    ig_token_trie_free(t);
}

/* Mid-generation, the sequence ends with the matcher's own error (what the
 * server sends back), not "out of memory" and not a crash. */
IG_TEST(grammar_ambiguous_nesting_ends_the_sequence) {
    ig_token_trie *t = byte_trie();
    REQUIRE(t);
    ig_grammar *g = gbnf(AMBIGUOUS_NESTING);
    REQUIRE(g);
    ig_gen_seq_params p = {.sampling = ig_sampler_default_params(), .n_vocab = 256, .max_tokens = 64,
                           .grammar = g, .trie = t};
    p.sampling.temperature = 0.0f;
    ig_gen_seq *s = NULL;
    REQUIRE_OK(ig_gen_seq_create(&p, &s));
    float logits[256];
    for (int i = 0; i < 256; i++) logits[i] = 0.0f;
    logits['('] = 10.0f; /* greedy: "(" while the grammar allows it */
    ig_status st = IG_OK;
    int steps = 0;
    for (; steps < 64; steps++) {
        ig_gen_event ev;
        st = ig_gen_seq_step(s, logits, &ev);
        if (st != IG_OK) break;
        CHECK_EQ_INT(ev.token, '(');
        REQUIRE(ev.finish == IG_FINISH_NONE);
    }
    CHECK_STATUS(st, IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "grammar") && strstr(ig_last_error(), "too ambiguous"));
    CHECK(steps >= 8 && steps <= 20);
    ig_gen_seq_free(s);
    ig_grammar_free(g);
    ig_token_trie_free(t);
}
