/* Small pure text helpers of the server: UTF-8 repair, constant-time
 * comparison, a growable byte buffer. No engine or HTTP dependencies
 * (unit-tested under sanitizers). */
#ifndef IG_SERVER_TEXT_H
#define IG_SERVER_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable NUL-terminated byte buffer. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
} srv_buf;

/* Appends n bytes; false when out of memory (the buffer is unchanged). */
bool srv_buf_append(srv_buf *b, const void *s, size_t n);
bool srv_buf_puts(srv_buf *b, const char *s);
bool srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);

/* Length of the longest prefix of s[0..n) that is well-formed UTF-8 made of
 * complete characters. */
size_t srv_utf8_valid_prefix(const char *s, size_t n);
/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
bool srv_utf8_valid(const char *s, size_t n);
/* Copy of s[0..n) with every ill-formed sequence replaced by U+FFFD,
 * NUL-terminated, length in *out_len (may be NULL). NULL when out of memory. */
char *srv_utf8_sanitize(const char *s, size_t n, size_t *out_len);

/* Constant-time comparison of a presented secret with the expected one:
 * the running time depends only on expected_len. */
bool srv_ct_equal(const char *given, size_t given_len, const char *expected, size_t expected_len);

/* Extracts the token of an "Authorization: Bearer TOKEN" header value.
 * Returns a pointer into value and the length, or NULL when the header is not
 * a Bearer credential. */
const char *srv_bearer_token(const char *value, size_t *len);

#endif
