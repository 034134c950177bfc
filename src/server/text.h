/* Small pure text helpers of the server: UTF-8 repair, stop-string
 * hold-back, constant-time comparison, token piece bytes, a growable byte
 * buffer. No engine or HTTP dependencies (unit-tested under sanitizers). */
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

/* Stop strings. Given text not yet sent to the client, decides how much of
 * it may be sent now: if some stop string occurs, *matched is set and the
 * result is the offset of the earliest occurrence (send up to it, then
 * stop); otherwise the result is len minus the longest suffix of text that
 * is a proper prefix of some stop string (that suffix must be held back).
 * Empty stop strings are ignored. */
size_t srv_stop_scan(const char *text, size_t len, char *const *stops, size_t n_stops,
                     bool *matched);

/* Constant-time comparison of a presented secret with the expected one:
 * the running time depends only on expected_len. */
bool srv_ct_equal(const char *given, size_t given_len, const char *expected, size_t expected_len);

/* Extracts the token of an "Authorization: Bearer TOKEN" header value.
 * Returns a pointer into value and the length, or NULL when the header is not
 * a Bearer credential. */
const char *srv_bearer_token(const char *value, size_t *len);

/* Raw bytes of a SentencePiece piece: "<0xAB>" is byte 0xAB, U+2581 is a
 * space, anything else is copied. Writes at most cap bytes; returns the
 * number of bytes the full result needs. */
size_t srv_piece_bytes(const char *piece, char *out, size_t cap);

#endif
