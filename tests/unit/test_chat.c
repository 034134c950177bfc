/* Chat template tests: exact rendering of Gemma 3 turns, role validation,
 * and the token layout of a rendered chat under the real tokenizers. */
#include "test.h"

#include "core/util.h"
#include "ignis.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* From test_tokenizer.c. */
const ig_tokenizer *tok_test_hf(void);
const ig_tokenizer *tok_test_gguf(bool *skipped);

static void check_render(const ig_chat_message *m, size_t n, bool gen, const char *want, int line) {
    char *out = NULL;
    ig_status st = ig_chat_render(m, n, gen, &out);
    if (st != IG_OK) {
        ig_test_fail_at(__FILE__, line, "ig_chat_render failed: %s", ig_last_error());
        return;
    }
    if (strcmp(out, want) != 0)
        ig_test_fail_at(__FILE__, line, "rendered\n---\n%s\n---\nwant\n---\n%s\n---", out, want);
    free(out);
}

static const ig_chat_message k_conv[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hi there!"},
    {"assistant", "Hello! How can I help?"},
    {"user", "Tell me a joke."},
};
static const char k_conv_text[] =
    "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHi there!<end_of_turn>\n"
    "<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"
    "<start_of_turn>user\nTell me a joke.<end_of_turn>\n"
    "<start_of_turn>model\n";

IG_TEST(chat_render_system_user_assistant_user) {
    check_render(k_conv, 4, true, k_conv_text, __LINE__);
    /* without the generation prompt */
    size_t n = strlen(k_conv_text) - strlen("<start_of_turn>model\n");
    char want[512];
    REQUIRE(n < sizeof want);
    memcpy(want, k_conv_text, n);
    want[n] = '\0';
    check_render(k_conv, 4, false, want, __LINE__);
}

IG_TEST(chat_render_variants) {
    /* no system; "model" is accepted for "assistant"; contents trimmed
     * (ASCII and Unicode whitespace, as Python's str.strip) */
    const ig_chat_message a[] = {
        {"user", "  \n\tWhat is 2+2?\n "},
        {"model", "\xE3\x80\x80"
                  "4"
                  "\xC2\xA0"},           /* U+3000 ... U+00A0 */
        {"user", "Thanks \xE2\x96\x81"}, /* U+2581 is not whitespace */
    };
    check_render(a, 3, true,
                 "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                 "<start_of_turn>model\n4<end_of_turn>\n"
                 "<start_of_turn>user\nThanks \xE2\x96\x81<end_of_turn>\n"
                 "<start_of_turn>model\n",
                 __LINE__);
    /* the system text is kept as given (the Jinja template does not trim it) */
    const ig_chat_message b[] = {{"system", "Be brief. "}, {"user", " ok "}};
    check_render(b, 2, true,
                 "<bos><start_of_turn>user\nBe brief. \n\nok<end_of_turn>\n<start_of_turn>model\n",
                 __LINE__);
    /* empty contents, and an all-whitespace one */
    const ig_chat_message c[] = {{"user", ""}, {"assistant", " \n "}};
    check_render(c, 2, false,
                 "<bos><start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n",
                 __LINE__);
    /* no messages at all: just BOS (+ the prompt) */
    check_render(NULL, 0, true, "<bos><start_of_turn>model\n", __LINE__);
    check_render(NULL, 0, false, "<bos>", __LINE__);
    /* ending on a model turn, invalid UTF-8 passes through untouched */
    const ig_chat_message d[] = {{"user", "\xFF x \xC3"}, {"assistant", "y"}};
    check_render(d, 2, false,
                 "<bos><start_of_turn>user\n\xFF x \xC3<end_of_turn>\n"
                 "<start_of_turn>model\ny<end_of_turn>\n",
                 __LINE__);
}

IG_TEST(chat_render_errors) {
    static const struct {
        ig_chat_message m[3];
        size_t n;
        const char *why; /* expected in ig_last_error() */
    } cases[] = {
        {{{"user", "a"}, {"user", "b"}}, 2, "alternate"},
        {{{"assistant", "a"}, {"user", "b"}}, 2, "alternate"},
        {{{"system", "s"}, {"assistant", "a"}}, 2, "alternate"},
        {{{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}}, 3, "alternate"},
        {{{"system", "s"}}, 1, "followed by a user"},
        {{{"user", "a"}, {"system", "s"}}, 2, "only come first"},
        {{{"system", "s"}, {"system", "t"}, {"user", "u"}}, 3, "only come first"},
        {{{"tool", "a"}}, 1, "unknown role 'tool'"},
        {{{"User", "a"}}, 1, "unknown role"},
        {{{"", "a"}}, 1, "unknown role"},
        {{{"user", NULL}}, 1, "NULL content"},
        {{{NULL, "a"}}, 1, "NULL role"},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        char *out = (char *)1;
        ig_status st = ig_chat_render(cases[i].m, cases[i].n, true, &out);
        if (st != IG_ERR_INVALID_ARG)
            ig_test_fail_at(__FILE__, __LINE__, "case %zu: status %d, want %d", i, (int)st,
                            (int)IG_ERR_INVALID_ARG);
        if (!strstr(ig_last_error(), cases[i].why))
            ig_test_fail_at(__FILE__, __LINE__, "case %zu: message \"%s\" lacks \"%s\"", i,
                            ig_last_error(), cases[i].why);
        CHECK(out == NULL);
    }
    CHECK_STATUS(ig_chat_render(k_conv, 4, true, NULL), IG_ERR_INVALID_ARG);
    char *out = NULL;
    CHECK_STATUS(ig_chat_render(NULL, 2, true, &out), IG_ERR_INVALID_ARG);
}

/* The rendered chat, tokenized with parse_special and no add_bos: one BOS
 * first, and every turn marker a single control token. */
static void check_chat_tokens(const ig_tokenizer *t, const char *label) {
    char *text = NULL;
    REQUIRE_OK(ig_chat_render(k_conv, 4, true, &text));
    int32_t *ids = NULL;
    size_t n = 0;
    ig_status st = ig_tokenize(t, text, strlen(text), false, true, &ids, &n);
    free(text);
    REQUIRE_OK(st);
    REQUIRE(n > 20);
    int n_bos = 0, n_sot = 0, n_eot = 0;
    for (size_t i = 0; i < n; i++) {
        n_bos += ids[i] == 2;
        n_sot += ids[i] == 105;
        n_eot += ids[i] == 106;
    }
    if (n_bos != 1 || n_sot != 4 || n_eot != 3)
        ig_test_fail_at(__FILE__, __LINE__, "%s: %d BOS, %d <start_of_turn>, %d <end_of_turn>",
                        label, n_bos, n_sot, n_eot);
    CHECK_EQ_INT(ids[0], 2);
    /* <start_of_turn> user|model \n ... <end_of_turn> \n */
    static const int32_t roles[] = {2364, 4368, 2364, 4368}; /* user, model, user, model */
    int turn = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 105) {
            REQUIRE(i + 2 < n);
            if (turn < 4) CHECK_EQ_INT(ids[i + 1], roles[turn]);
            CHECK_EQ_INT(ids[i + 2], 107);
            turn++;
        } else if (ids[i] == 106) {
            REQUIRE(i + 1 < n);
            CHECK_EQ_INT(ids[i + 1], 107);
        }
    }
    CHECK_EQ_INT(ids[1], 105);
    /* the prompt ends with "<start_of_turn>model\n" */
    CHECK_EQ_INT(ids[n - 3], 105);
    CHECK_EQ_INT(ids[n - 2], 4368);
    CHECK_EQ_INT(ids[n - 1], 107);
    /* "...assistant.\n\nHi there!": the blank line is the single piece 108 */
    bool has_nn = false;
    for (size_t i = 0; i < n; i++) has_nn |= ids[i] == 108;
    CHECK(has_nn);
    /* decoding without specials drops exactly the markers */
    char *back = NULL;
    REQUIRE_OK(ig_detokenize(t, ids, n, false, &back));
    CHECK(strcmp(back, "user\nYou are a helpful assistant.\n\nHi there!\nmodel\nHello! How can I "
                       "help?\nuser\nTell me a joke.\nmodel\n") == 0);
    free(back);
    free(ids);
}

IG_TEST(chat_tokens_hf) {
    const ig_tokenizer *t = tok_test_hf();
    REQUIRE(t);
    check_chat_tokens(t, "tokenizer.json");
}

IG_TEST(chat_tokens_gguf) {
    bool skipped;
    const ig_tokenizer *t = tok_test_gguf(&skipped);
    if (skipped) return;
    REQUIRE(t);
    check_chat_tokens(t, "gguf");
}

IG_TEST(chat_template_detect) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/gemma3/tokenizer_config.json", ig_test_fixtures());
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    CHECK(tmpl != NULL);
    if (tmpl) CHECK(ig_chat_template_is_gemma(tmpl));
    if (tmpl) CHECK(!ig_chat_template_has_tools(tmpl)); /* Gemma 3's has no tool format */
    json_decref(cfg);
    CHECK(ig_chat_template_has_tools("{%- if tools %}{{ tools | tojson }}{% endif %}"));
    CHECK(ig_chat_template_has_tools("{% for c in m.tool_calls %}{{ c.function.name }}{% endfor %}"));
    CHECK(ig_chat_template_has_tools("{% if m['role'] == 'tool' %}<tool>{% endif %}"));
    CHECK(!ig_chat_template_has_tools("{% for m in messages %}<start_of_turn>{{ m.role }}"
                                      "{% endfor %}"));
    CHECK(!ig_chat_template_has_tools(NULL));
    CHECK(ig_chat_template_is_gemma("{{ bos_token }}{% for m in messages %}<start_of_turn>"
                                    "{{ m.role }}\n{% endfor %}"));
    CHECK(!ig_chat_template_is_gemma("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                     "{{ m.content }}<|im_end|>{% endfor %}"));
    CHECK(!ig_chat_template_is_gemma(""));
    CHECK(!ig_chat_template_is_gemma(NULL));
}
