/* Gemma 3 chat template, rendered in C. It reproduces the Jinja template of
 * Gemma 3's tokenizer_config.json:
 *
 *   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n
 *   <start_of_turn>model\n{assistant}<end_of_turn>\n ... [<start_of_turn>model\n]
 *
 *  - Gemma has no system role: the first message may be "system"; its text
 *    (as given, untrimmed, like the Jinja template) plus "\n\n" opens the
 *    first user turn;
 *  - every other content is trimmed (Python str.strip(): Unicode whitespace);
 *  - after the optional system message roles alternate user, model, user...
 *    ("assistant" is written "model"); anything else is IG_ERR_INVALID_ARG.
 * Two choices where the Jinja template is silent or lax: a system message
 * with no user message after it is an error (the template drops it), and
 * only the roles system/user/assistant/model are accepted (the template
 * passes any other role through). */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

bool ig_chat_template_is_gemma(const char *template_text) {
    return template_text && strstr(template_text, "<start_of_turn>") != NULL;
}

bool ig_chat_template_has_tools(const char *template_text) {
    if (!template_text) return false;
    static const char *const needles[] = {"tools", "tool_calls", "'tool'", "\"tool\""};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        if (strstr(template_text, needles[i])) return true;
    return false;
}

/* Python's str.isspace() code points. */
static bool is_space_cp(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Decodes the (well-formed enough) character at s[0..n); returns its length
 * or 0 when the bytes are not UTF-8 (which then count as non-space). */
static size_t decode_cp(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    size_t len;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2;
        *cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        *cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        *cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        *cp = (*cp << 6) | (s[i] & 0x3F);
    }
    return len;
}

static void trim(const char *s, size_t *begin, size_t *end) {
    const uint8_t *u = (const uint8_t *)s;
    size_t b = 0, e = strlen(s);
    uint32_t cp;
    while (b < e) {
        size_t l = decode_cp(u + b, e - b, &cp);
        if (!l || !is_space_cp(cp)) break;
        b += l;
    }
    while (e > b) {
        size_t k = e - 1; /* start of the last character: at most 3 continuation bytes back */
        while (k > b && e - k < 4 && (u[k] & 0xC0) == 0x80) k--;
        size_t l = decode_cp(u + k, e - k, &cp);
        if (l != e - k || !is_space_cp(cp)) break;
        e = k;
    }
    *begin = b;
    *end = e;
}

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool failed;
} strbuf;

static void put(strbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    size_t need;
    if (!ig_size_add(b->len, n, &need) || !ig_size_add(need, 1, &need)) {
        ig_fail(IG_ERR_NO_MEMORY, "ig_chat_render: text size overflows");
        b->failed = true;
        return;
    }
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < need) {
            if (!ig_size_mul(nc, 2, &nc)) nc = need;
        }
        char *p = ig_realloc_array(b->p, nc, 1);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(strbuf *b, const char *s) { put(b, s, strlen(s)); }

enum { ROLE_BAD = 0, ROLE_SYSTEM, ROLE_USER, ROLE_MODEL };

static int role_of(const char *r) {
    if (!strcmp(r, "system")) return ROLE_SYSTEM;
    if (!strcmp(r, "user")) return ROLE_USER;
    if (!strcmp(r, "assistant") || !strcmp(r, "model")) return ROLE_MODEL;
    return ROLE_BAD;
}

ig_status ig_chat_render(const ig_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                         char **out) {
    if (out) *out = NULL;
    if (!out || (!msgs && n_msgs))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_chat_render: NULL argument");
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return ig_fail(IG_ERR_INVALID_ARG, "ig_chat_render: message %zu has a NULL %s", i,
                           msgs[i].role ? "content" : "role");
    size_t first = 0;
    const char *system = NULL;
    if (n_msgs > 0 && role_of(msgs[0].role) == ROLE_SYSTEM) {
        system = msgs[0].content;
        first = 1;
        if (n_msgs == 1)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "ig_chat_render: the system message must be followed by a user message");
    }
    for (size_t i = first; i < n_msgs; i++) {
        int role = role_of(msgs[i].role);
        int want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_MODEL;
        if (role == ROLE_BAD)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "ig_chat_render: message %zu has unknown role '%.32s' (expected "
                           "system, user, assistant or model)",
                           i, msgs[i].role);
        if (role == ROLE_SYSTEM)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "ig_chat_render: message %zu: a system message may only come first", i);
        if (role != want)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "ig_chat_render: roles must alternate user/model after the optional "
                           "system message; message %zu is '%s' but '%s' was expected",
                           i, msgs[i].role, want == ROLE_USER ? "user" : "assistant");
    }
    strbuf b = {0};
    puts_(&b, "<bos>");
    for (size_t i = first; i < n_msgs; i++) {
        bool user = role_of(msgs[i].role) == ROLE_USER;
        puts_(&b, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && system) {
            puts_(&b, system);
            puts_(&b, "\n\n");
        }
        size_t s, e;
        trim(msgs[i].content, &s, &e);
        put(&b, msgs[i].content + s, e - s);
        puts_(&b, "<end_of_turn>\n");
    }
    if (add_generation_prompt) puts_(&b, "<start_of_turn>model\n");
    if (b.failed) {
        free(b.p);
        return IG_ERR_NO_MEMORY;
    }
    *out = b.p;
    return IG_OK;
}
