#include "server/text.h"
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool buf_reserve(srv_buf *b, size_t extra) {
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || __builtin_add_overflow(need, 1, &need))
        return false;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = ig_realloc_array(b->data, cap, 1);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

bool srv_buf_append(srv_buf *b, const void *s, size_t n) {
    if (!buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool srv_buf_puts(srv_buf *b, const char *s) { return srv_buf_append(b, s, strlen(s)); }

bool srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return srv_buf_append(b, small, (size_t)n);
    if (!buf_reserve(b, (size_t)n)) return false;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

void srv_buf_free(srv_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Length of the well-formed UTF-8 character at s[0..n), 0 if ill-formed or
 * incomplete. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

size_t srv_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_char_len(u + i, n - i);
        if (!l) break;
        i += l;
    }
    return i;
}

bool srv_utf8_valid(const char *s, size_t n) { return srv_utf8_valid_prefix(s, n) == n; }

char *srv_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t cap;
    /* worst case: every byte becomes 3 bytes */
    if (__builtin_mul_overflow(n, (size_t)3, &cap) || __builtin_add_overflow(cap, 1, &cap))
        return NULL;
    char *out = ig_malloc(cap);
    if (!out) return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t l = utf8_char_len(u + i, n - i);
        if (l) {
            memcpy(out + o, u + i, l);
            o += l;
            i += l;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i++;
        }
    }
    out[o] = '\0';
    if (out_len) *out_len = o;
    return out;
}

bool srv_ct_equal(const char *given, size_t given_len, const char *expected, size_t expected_len) {
    volatile unsigned char diff = (unsigned char)(given_len != expected_len);
    for (size_t i = 0; i < expected_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)expected[i]);
    }
    return diff == 0;
}

const char *srv_bearer_token(const char *value, size_t *len) {
    if (!value) return NULL;
    while (*value == ' ' || *value == '\t') value++;
    static const char scheme[] = "bearer";
    for (size_t i = 0; i < sizeof scheme - 1; i++) {
        char c = value[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != scheme[i]) return NULL;
    }
    value += sizeof scheme - 1;
    if (*value != ' ' && *value != '\t') return NULL;
    while (*value == ' ' || *value == '\t') value++;
    size_t n = strlen(value);
    while (n && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
    if (!n) return NULL;
    *len = n;
    return value;
}
