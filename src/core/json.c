/* A recursive-descent JSON parser (RFC 8259). The input is copied once and
 * strings are unescaped in place in that copy (an escape is never shorter
 * than what it stands for); containers collect their children on a scratch
 * stack and move them into the arena when they close. */
#include "core/json.h"
#include "core/util.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 512
#define ARENA_BLOCK ((size_t)1 << 20)

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
} arena_block;

struct ig_json_doc {
    char *text;          /* the copy of the input, strings unescaped in it */
    arena_block *blocks; /* the containers' items */
    ig_json root;
};

typedef struct {
    ig_json_doc *doc;
    const char *orig; /* the caller's text */
    char *p, *end;
    ig_json *stack; /* children of the open containers */
    size_t top, cap;
    unsigned flags;
    int depth;
    ig_json_error *err;
    bool failed;
} parser;

static void *arena_alloc(ig_json_doc *doc, size_t size) {
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        if (cap > SIZE_MAX - sizeof(arena_block)) return NULL;
        b = ig_malloc(sizeof(arena_block) + cap);
        if (!b) return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->cap = cap;
        doc->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    return p;
}

static bool fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(parser *ps, const char *fmt, ...) {
    if (ps->failed) return false;
    ps->failed = true;
    if (!ps->err) return false;
    /* counted in the caller's text: the copy has unescaped strings */
    int line = 1, col = 1;
    const char *stop = ps->orig + (ps->p - ps->doc->text);
    for (const char *q = ps->orig; q < stop; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    ps->err->line = line;
    ps->err->column = col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err->text, sizeof ps->err->text, fmt, ap);
    va_end(ap);
    return false;
}

/* An allocation failed: reported as such (ig_json_error_status), not as
 * malformed input. */
static bool nomem(parser *ps) {
    if (!ps->failed && ps->err) ps->err->no_memory = true;
    return fail(ps, "out of memory");
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

static bool push(parser *ps, const ig_json *v) {
    if (ps->top == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 256;
        if (cap > SIZE_MAX / sizeof(ig_json)) return nomem(ps);
        ig_json *s = ig_realloc_array(ps->stack, cap, sizeof(ig_json));
        if (!s) return nomem(ps);
        ps->stack = s;
        ps->cap = cap;
    }
    ps->stack[ps->top++] = *v;
    return true;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes of the UTF-8 sequence at p (1..4), or 0 when it is not valid UTF-8. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    int n;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return n;
}

static char *put_utf8(char *w, unsigned cp) {
    if (cp < 0x80) {
        *w++ = (char)cp;
    } else if (cp < 0x800) {
        *w++ = (char)(0xC0 | (cp >> 6));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | (cp >> 12));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (char)(0xF0 | (cp >> 18));
        *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* At the opening quote; unescapes into the same bytes and NUL-terminates. */
static bool parse_string(parser *ps, const char **s, size_t *n) {
    char *start = ++ps->p, *w = start;
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            *n = (size_t)(w - start);
            *w = '\0'; /* w <= p: at most the closing quote is overwritten */
            ps->p++;
            *s = start;
            return true;
        }
        if (c < 0x20) return fail(ps, "control character in a string");
        if (c != '\\') {
            int k = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
            if (!k) return fail(ps, "invalid UTF-8 in a string");
            for (int i = 0; i < k; i++) *w++ = *ps->p++;
            continue;
        }
        if (ps->end - ps->p < 2) break;
        char e = ps->p[1];
        ps->p += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            int u = ps->end - ps->p >= 4 ? hex4(ps->p) : -1;
            if (u < 0) return fail(ps, "bad \\u escape");
            ps->p += 4;
            unsigned cp = (unsigned)u;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, "lone low surrogate \\u%04X", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u'
                             ? hex4(ps->p + 2)
                             : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(ps, "lone high surrogate \\u%04X", cp);
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
            }
            if (cp == 0) return fail(ps, "\\u0000 in a string");
            w = put_utf8(w, cp);
            break;
        }
        default: ps->p--; return fail(ps, "bad escape '\\%c'", e);
        }
    }
    return fail(ps, "unterminated string");
}

static bool is_digit(const parser *ps) {
    return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static bool parse_number(parser *ps, ig_json *out) {
    char *s = ps->p;
    bool real = false;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p < ps->end && *ps->p == '0') {
        ps->p++;
    } else if (is_digit(ps)) {
        while (is_digit(ps)) ps->p++;
    } else {
        return fail(ps, "bad number");
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!is_digit(ps)) return fail(ps, "bad number");
        while (is_digit(ps)) ps->p++;
        real = true;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (!is_digit(ps)) return fail(ps, "bad number");
        while (is_digit(ps)) ps->p++;
        real = true;
    }
    /* strtoll/strtod read a NUL-terminated copy (they would read past the
     * token: "0x1" is hex to them) */
    size_t len = (size_t)(ps->p - s);
    char small[64], *buf = small;
    if (len >= sizeof small && !(buf = ig_malloc(len + 1))) return nomem(ps);
    memcpy(buf, s, len);
    buf[len] = '\0';
    bool ok = true;
    errno = 0;
    if (!real) {
        out->type = IG_JSON_INTEGER;
        out->u.i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) ok = fail(ps, "integer out of range");
    } else {
        /* strtod follows LC_NUMERIC; JSON's decimal point is '.' */
        const char *dp = localeconv()->decimal_point;
        char *dot = strchr(buf, '.');
        if (dot && dp && dp[0] && dp[0] != '.' && !dp[1]) *dot = dp[0];
        out->type = IG_JSON_REAL;
        out->u.d = strtod(buf, NULL);
        if (errno == ERANGE && isinf(out->u.d)) ok = fail(ps, "real number out of range");
    }
    if (buf != small) free(buf);
    return ok;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp((*(const ig_json *const *)a)->key, (*(const ig_json *const *)b)->key);
}

static bool has_duplicate(const ig_json *items, size_t n, const char **dup) {
    if (n < 2) return false;
    if (n <= 8) { /* the common small object: no sort */
        for (size_t i = 0; i < n; i++) {
            for (size_t j = i + 1; j < n; j++) {
                if (strcmp(items[i].key, items[j].key) == 0) {
                    *dup = items[i].key;
                    return true;
                }
            }
        }
        return false;
    }
    const ig_json **v = ig_calloc_array(n, sizeof *v);
    if (!v) {
        *dup = NULL; /* reported as out of memory */
        return true;
    }
    for (size_t i = 0; i < n; i++) v[i] = &items[i];
    qsort(v, n, sizeof *v, cmp_keys);
    bool found = false;
    for (size_t i = 1; i < n && !found; i++) {
        if (strcmp(v[i - 1]->key, v[i]->key) == 0) {
            found = true;
            *dup = v[i]->key;
        }
    }
    free(v);
    return found;
}

static bool parse_value(parser *ps, ig_json *out);

/* At '[' or '{'. */
static bool parse_container(parser *ps, ig_json *out) {
    bool object = *ps->p == '{';
    char close = object ? '}' : ']';
    if (++ps->depth > MAX_DEPTH) return fail(ps, "nested too deeply");
    ps->p++;
    size_t base = ps->top;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            ig_json v;
            memset(&v, 0, sizeof v);
            const char *key = NULL;
            size_t key_len = 0;
            if (object) {
                if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "member name expected");
                if (!parse_string(ps, &key, &key_len)) return false;
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "':' expected");
                ps->p++;
                skip_ws(ps);
            }
            if (!parse_value(ps, &v)) return false;
            v.key = key;
            v.key_len = key_len;
            if (!push(ps, &v)) return false;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                skip_ws(ps);
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            return fail(ps, object ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    size_t n = ps->top - base;
    ig_json *items = NULL;
    if (n) {
        if (!(items = arena_alloc(ps->doc, n * sizeof *items))) return nomem(ps);
        memcpy(items, ps->stack + base, n * sizeof *items);
    }
    ps->top = base;
    ps->depth--;
    out->type = object ? IG_JSON_OBJECT : IG_JSON_ARRAY;
    out->n = n;
    out->u.items = items;
    const char *dup = NULL;
    if (object && (ps->flags & IG_JSON_REJECT_DUPLICATES) && has_duplicate(items, n, &dup))
        return dup ? fail(ps, "duplicate member \"%.60s\"", dup) : nomem(ps);
    return true;
}

static bool literal(parser *ps, const char *word, ig_json_type t, ig_json *out) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    out->type = t;
    return true;
}

static bool parse_value(parser *ps, ig_json *out) {
    if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
    case '[': return parse_container(ps, out);
    case '"':
        out->type = IG_JSON_STRING;
        return parse_string(ps, &out->u.s, &out->n);
    case 't': return literal(ps, "true", IG_JSON_TRUE, out);
    case 'f': return literal(ps, "false", IG_JSON_FALSE, out);
    case 'n': return literal(ps, "null", IG_JSON_NULL, out);
    default: return parse_number(ps, out);
    }
}

ig_json_doc *ig_json_parse(const char *text, size_t len, unsigned flags, ig_json_error *err) {
    if (err) memset(err, 0, sizeof *err);
    if (!text) {
        text = "";
        len = 0;
    }
    ig_json_doc *doc = ig_calloc_array(1, sizeof *doc);
    if (!doc || len == SIZE_MAX || !(doc->text = ig_malloc(len + 1))) {
        if (err) {
            snprintf(err->text, sizeof err->text, "out of memory");
            err->no_memory = true;
        }
        free(doc);
        return NULL;
    }
    if (len) memcpy(doc->text, text, len);
    doc->text[len] = '\0';
    parser ps = {.doc = doc,
                 .orig = text,
                 .p = doc->text,
                 .end = doc->text + len,
                 .flags = flags,
                 .err = err};
    skip_ws(&ps);
    bool ok = parse_value(&ps, &doc->root);
    if (ok) {
        skip_ws(&ps);
        if (ps.p != ps.end) ok = fail(&ps, "unexpected text after the value");
    }
    free(ps.stack);
    if (!ok) {
        ig_json_free(doc);
        return NULL;
    }
    return doc;
}

const ig_json *ig_json_root(const ig_json_doc *doc) { return doc ? &doc->root : NULL; }

void ig_json_free(ig_json_doc *doc) {
    if (!doc) return;
    for (arena_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc->text);
    free(doc);
}

const ig_json *ig_json_get(const ig_json *obj, const char *key) {
    if (!ig_json_is_object(obj) || !key) return NULL;
    for (size_t i = obj->n; i-- > 0;)
        if (strcmp(obj->u.items[i].key, key) == 0) return &obj->u.items[i];
    return NULL;
}
