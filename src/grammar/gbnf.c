/* GBNF text -> compiled grammar (grammar_internal.h).
 *
 * Repetitions become rules: x* is R ::= x R | (empty), x+ is R ::= x R | x,
 * x? is R ::= x | (empty), x{m,n} is m copies of x then a chain of n-m
 * optional ones. A character class becomes one byte-set element when all
 * its characters are ASCII, else a rule whose alternatives are the UTF-8
 * byte sequences of its code-point ranges (surrogates excluded). */
#include "grammar/grammar_internal.h"

#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct evec {
    ig_gelem *v;
    size_t n, cap;
} evec;

typedef struct brule {
    char *name;
    evec *alts;
    size_t n_alts, cap_alts;
    bool defined;
    size_t first_ref; /* text offset of the first reference */
} brule;

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

typedef struct parser {
    const char *s;
    size_t len, pos;
    brule *rules;
    size_t n_rules, cap_rules;
    ig_byteset *sets;
    size_t n_sets, cap_sets;
    int32_t *set_hash; /* open addressing over sets, -1 empty */
    size_t set_hash_cap;
    size_t n_elems;
    int depth;
    int n_anon;
    bool failed;
    ig_status st;
} parser;

static void line_col(const parser *p, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->s[i] == '\n') {
            l++;
            c = 1;
        } else c++;
    }
    *line = l;
    *col = c;
}

static bool perr(parser *p, const char *fmt, const char *arg) {
    if (p->failed) return false;
    int line, col;
    line_col(p, p->pos, &line, &col);
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    p->st = ig_fail(IG_ERR_FORMAT, "grammar: line %d column %d: %s", line, col, msg);
    p->failed = true;
    return false;
}

static bool poom(parser *p) {
    if (!p->failed) p->st = ig_fail(IG_ERR_NO_MEMORY, "grammar: out of memory");
    p->failed = true;
    return false;
}

/* ---- building blocks ------------------------------------------------------ */

static bool evec_push(parser *p, evec *e, int32_t type, int32_t val) {
    if (p->n_elems >= IG_GRAMMAR_MAX_ELEMS)
        return perr(p, "the grammar is too large (more than %s elements)", "1048576");
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        ig_gelem *v = ig_realloc_array(e->v, cap, sizeof *v);
        if (!v) return poom(p);
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (ig_gelem){type, val};
    p->n_elems++;
    return true;
}

static uint64_t set_hash(const ig_byteset *s) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 8; i++) {
        h ^= s->w[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Index of an interned byte set, -1 on failure. */
static int32_t set_intern(parser *p, const ig_byteset *s) {
    if ((p->n_sets + 1) * 2 > p->set_hash_cap) {
        size_t cap = p->set_hash_cap ? p->set_hash_cap * 2 : 64;
        int32_t *h = ig_calloc_array(cap, sizeof *h);
        if (!h) return poom(p), -1;
        for (size_t i = 0; i < cap; i++) h[i] = -1;
        for (size_t i = 0; i < p->n_sets; i++) {
            size_t k = set_hash(&p->sets[i]) & (cap - 1);
            while (h[k] >= 0) k = (k + 1) & (cap - 1);
            h[k] = (int32_t)i;
        }
        free(p->set_hash);
        p->set_hash = h;
        p->set_hash_cap = cap;
    }
    size_t k = set_hash(s) & (p->set_hash_cap - 1);
    while (p->set_hash[k] >= 0) {
        if (!memcmp(&p->sets[p->set_hash[k]], s, sizeof *s)) return p->set_hash[k];
        k = (k + 1) & (p->set_hash_cap - 1);
    }
    if (p->n_sets == p->cap_sets) {
        size_t cap = p->cap_sets ? p->cap_sets * 2 : 32;
        ig_byteset *v = ig_realloc_array(p->sets, cap, sizeof *v);
        if (!v) return poom(p), -1;
        p->sets = v;
        p->cap_sets = cap;
    }
    p->sets[p->n_sets] = *s;
    p->set_hash[k] = (int32_t)p->n_sets;
    return (int32_t)p->n_sets++;
}

static bool push_byte_range(parser *p, evec *e, unsigned lo, unsigned hi) {
    ig_byteset s = {{0}};
    for (unsigned b = lo; b <= hi; b++) s.w[b >> 5] |= 1u << (b & 31);
    int32_t id = set_intern(p, &s);
    return id >= 0 && evec_push(p, e, GE_BYTES, id);
}

static int32_t rule_find(const parser *p, const char *name, size_t n) {
    for (size_t i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == n && !memcmp(p->rules[i].name, name, n)) return (int32_t)i;
    return -1;
}

static int32_t rule_new(parser *p, const char *name, size_t n) {
    if (p->n_rules >= (size_t)INT32_MAX / 2) return perr(p, "too many rules%s", ""), -1;
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? p->cap_rules * 2 : 32;
        brule *v = ig_realloc_array(p->rules, cap, sizeof *v);
        if (!v) return poom(p), -1;
        p->rules = v;
        p->cap_rules = cap;
    }
    brule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = ig_strndup(name, n);
    if (!r->name) return poom(p), -1;
    r->first_ref = p->pos;
    return (int32_t)p->n_rules++;
}

static int32_t rule_get(parser *p, const char *name, size_t n) {
    int32_t id = rule_find(p, name, n);
    return id >= 0 ? id : rule_new(p, name, n);
}

static int32_t rule_anon(parser *p) {
    char name[32];
    int n = snprintf(name, sizeof name, "_%d", p->n_anon++);
    int32_t id = rule_new(p, name, (size_t)n);
    if (id >= 0) p->rules[id].defined = true;
    return id;
}

/* Appends alternative e to rule id (takes e's memory). */
static bool rule_add_alt(parser *p, int32_t id, evec *e) {
    brule *r = &p->rules[id];
    if (r->n_alts == r->cap_alts) {
        size_t cap = r->cap_alts ? r->cap_alts * 2 : 4;
        evec *v = ig_realloc_array(r->alts, cap, sizeof *v);
        if (!v) {
            free(e->v);
            *e = (evec){0};
            return poom(p);
        }
        r->alts = v;
        r->cap_alts = cap;
    }
    r->alts[r->n_alts++] = *e;
    *e = (evec){0};
    return true;
}

/* ---- UTF-8 and character classes ------------------------------------------ */

static int utf8_encode(uint32_t cp, uint8_t *b) {
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | (cp >> 6));
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | (cp >> 12));
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | (cp >> 18));
    b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Adds to rule id the byte sequences of code points [lo, hi] (>= 0x80). */
static bool add_utf8_range(parser *p, int32_t id, uint32_t lo, uint32_t hi) {
    if (lo > hi) return true;
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (size_t i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return add_utf8_range(p, id, lo, bounds[i]) && add_utf8_range(p, id, bounds[i] + 1, hi);
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return add_utf8_range(p, id, lo, lo | m) && add_utf8_range(p, id, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return add_utf8_range(p, id, lo, (hi & ~m) - 1) && add_utf8_range(p, id, hi & ~m, hi);
        }
    }
    utf8_encode(hi, b);
    evec e = {0};
    for (int i = 0; i < n; i++)
        if (!push_byte_range(p, &e, a[i], b[i])) {
            free(e.v);
            return false;
        }
    return rule_add_alt(p, id, &e);
}

static int cmp_range(const void *x, const void *y) {
    const cprange *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Appends to seq the element(s) matching one character of the ranges
 * (negated: of any character outside them). */
static bool push_class(parser *p, evec *seq, cprange *r, size_t n, bool negate) {
    qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else r[m++] = r[i];
    }
    n = m;
    /* the final ranges, without surrogates; at most n + 2 */
    cprange *f = ig_calloc_array(n + 3, sizeof *f);
    if (!f) return poom(p);
    size_t nf = 0;
    if (negate) {
        uint32_t next = 0;
        for (size_t i = 0; i < n; i++) {
            if (r[i].lo > next) f[nf++] = (cprange){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) f[nf++] = (cprange){next, 0x10FFFF};
    } else {
        memcpy(f, r, n * sizeof *f);
        nf = n;
    }
    ig_byteset ascii = {{0}};
    bool has_ascii = false, has_multi = false;
    for (size_t i = 0; i < nf; i++) {
        for (uint32_t c = f[i].lo; c <= f[i].hi && c < 0x80; c++) {
            ascii.w[c >> 5] |= 1u << (c & 31);
            has_ascii = true;
        }
        if (f[i].hi >= 0x80) has_multi = true;
    }
    bool ok = true;
    if (!has_ascii && !has_multi) {
        ok = perr(p, "empty character class%s", "");
    } else if (!has_multi) {
        int32_t id = set_intern(p, &ascii);
        ok = id >= 0 && evec_push(p, seq, GE_BYTES, id);
    } else {
        int32_t id = rule_anon(p);
        ok = id >= 0;
        if (ok && has_ascii) {
            evec e = {0};
            int32_t sid = set_intern(p, &ascii);
            ok = sid >= 0 && evec_push(p, &e, GE_BYTES, sid) && rule_add_alt(p, id, &e);
            free(e.v);
        }
        for (size_t i = 0; ok && i < nf; i++) {
            uint32_t lo = f[i].lo < 0x80 ? 0x80 : f[i].lo, hi = f[i].hi;
            if (lo > hi) continue;
            /* leave out the surrogates D800-DFFF */
            if (lo <= 0xDFFF && hi >= 0xD800)
                ok = add_utf8_range(p, id, lo, IG_MIN(hi, 0xD7FFu)) &&
                     add_utf8_range(p, id, IG_MAX(lo, 0xE000u), hi);
            else ok = add_utf8_range(p, id, lo, hi);
        }
        ok = ok && evec_push(p, seq, GE_REF, id);
    }
    free(f);
    return ok;
}

/* ---- lexing ---------------------------------------------------------------- */

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static void skip_space(parser *p, bool newlines) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\r') p->pos++;
        else if (c == '\n' && newlines) p->pos++;
        else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n') p->pos++;
        } else break;
    }
}

static bool is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one (possibly escaped) character of a literal or class as a code
 * point. Raw UTF-8 is decoded; *raw_byte gets a byte that is not UTF-8
 * (-1 otherwise), which a literal keeps as is. */
static bool read_char(parser *p, uint32_t *cp, int *raw_byte) {
    *raw_byte = -1;
    if (p->pos >= p->len) return perr(p, "unexpected end of text%s", "");
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '\\') {
        p->pos++;
        int e = peek(p);
        if (e < 0) return perr(p, "unexpected end of text after '\\'%s", "");
        p->pos++;
        int digits = 0;
        switch (e) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case '0': *cp = 0; return true;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/':
        case '.': case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
            *cp = (uint32_t)e;
            return true;
        default: {
            char b[2] = {(char)e, 0};
            return perr(p, "unknown escape '\\%s'", b);
        }
        }
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = hexval(peek(p));
            if (h < 0) return perr(p, "bad hexadecimal escape%s", "");
            v = v * 16 + (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return perr(p, "escape is not a Unicode scalar value%s", "");
        *cp = v;
        return true;
    }
    if (c < 0x80) {
        *cp = c;
        p->pos++;
        return true;
    }
    int n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n && p->pos + (size_t)n <= p->len) {
        uint32_t v = c & (0x7F >> n);
        bool ok = true;
        for (int i = 1; i < n; i++) {
            unsigned char d = (unsigned char)p->s[p->pos + (size_t)i];
            if ((d & 0xC0) != 0x80) ok = false;
            v = (v << 6) | (d & 0x3F);
        }
        if (ok) {
            *cp = v;
            p->pos += (size_t)n;
            return true;
        }
    }
    *raw_byte = c;
    *cp = c;
    p->pos++;
    return true;
}

/* ---- syntax ---------------------------------------------------------------- */

static bool parse_alternates(parser *p, int32_t rule, bool nested);

static bool parse_literal(parser *p, evec *seq) {
    p->pos++; /* the opening quote */
    for (;;) {
        if (p->pos >= p->len || p->s[p->pos] == '\n') return perr(p, "unterminated string%s", "");
        if (p->s[p->pos] == '"') {
            p->pos++;
            return true;
        }
        uint32_t cp;
        int raw;
        if (!read_char(p, &cp, &raw)) return false;
        uint8_t b[4];
        int n = raw >= 0 ? (b[0] = (uint8_t)raw, 1) : utf8_encode(cp, b);
        for (int i = 0; i < n; i++)
            if (!push_byte_range(p, seq, b[i], b[i])) return false;
    }
}

static bool parse_class(parser *p, evec *seq) {
    p->pos++; /* [ */
    bool negate = false;
    if (peek(p) == '^') {
        negate = true;
        p->pos++;
    }
    cprange *r = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    while (ok) {
        int c = peek(p);
        if (c < 0 || c == '\n') {
            ok = perr(p, "unterminated character class%s", "");
            break;
        }
        if (c == ']') {
            p->pos++;
            break;
        }
        uint32_t lo, hi;
        int raw;
        if (!(ok = read_char(p, &lo, &raw))) break;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (!(ok = read_char(p, &hi, &raw))) break;
            if (hi < lo) {
                ok = perr(p, "character range is backwards%s", "");
                break;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            if (cap > 65536) {
                ok = perr(p, "character class too large%s", "");
                break;
            }
            cprange *v = ig_realloc_array(r, cap, sizeof *v);
            if (!v) {
                ok = poom(p);
                break;
            }
            r = v;
        }
        r[n++] = (cprange){lo, hi};
    }
    if (ok) {
        if (n == 0 && !negate) ok = perr(p, "empty character class%s", "");
        else ok = push_class(p, seq, r ? r : &(cprange){0, 0}, n, negate);
    }
    free(r);
    return ok;
}

/* Replaces seq[start..n) by its repetition min..max times (max < 0: no
 * upper bound). */
static bool apply_repeat(parser *p, evec *seq, size_t start, long min, long max) {
    int32_t sym;
    if (seq->n - start == 1 && seq->v[start].type == GE_REF) {
        sym = seq->v[start].val;
    } else {
        sym = rule_anon(p);
        if (sym < 0) return false;
        evec e = {0};
        for (size_t i = start; i < seq->n; i++)
            if (!evec_push(p, &e, seq->v[i].type, seq->v[i].val)) {
                free(e.v);
                return false;
            }
        if (!rule_add_alt(p, sym, &e)) return false;
    }
    p->n_elems -= seq->n - start;
    seq->n = start;
    for (long i = 0; i < min; i++)
        if (!evec_push(p, seq, GE_REF, sym)) return false;
    if (max < 0) {
        int32_t r = rule_anon(p);
        if (r < 0) return false;
        evec a = {0}, b = {0};
        if (!evec_push(p, &a, GE_REF, sym) || !evec_push(p, &a, GE_REF, r) ||
            !rule_add_alt(p, r, &a) || !rule_add_alt(p, r, &b)) {
            free(a.v);
            return false;
        }
        return evec_push(p, seq, GE_REF, r);
    }
    int32_t prev = -1;
    for (long k = 0; k < max - min; k++) {
        int32_t r = rule_anon(p);
        if (r < 0) return false;
        evec a = {0}, b = {0};
        bool ok = evec_push(p, &a, GE_REF, sym) && (prev < 0 || evec_push(p, &a, GE_REF, prev)) &&
                  rule_add_alt(p, r, &a) && rule_add_alt(p, r, &b);
        if (!ok) {
            free(a.v);
            return false;
        }
        prev = r;
    }
    return prev < 0 || evec_push(p, seq, GE_REF, prev);
}

static bool parse_count(parser *p, long *out) {
    long v = 0;
    int d = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (peek(p) - '0');
        if (v > IG_GRAMMAR_MAX_REPEAT) return perr(p, "repetition count above %s", "10000");
        p->pos++;
        d++;
    }
    if (!d) return perr(p, "expected a number in {m,n}%s", "");
    *out = v;
    return true;
}

static bool parse_sequence(parser *p, evec *seq, bool nested) {
    long last = -1;
    for (;;) {
        skip_space(p, nested);
        int c = peek(p);
        if (c == '"') {
            last = (long)seq->n;
            if (!parse_literal(p, seq)) return false;
        } else if (c == '[') {
            last = (long)seq->n;
            if (!parse_class(p, seq)) return false;
        } else if (c == '.') {
            p->pos++;
            last = (long)seq->n;
            cprange none = {0, 0};
            if (!push_class(p, seq, &none, 0, true)) return false;
        } else if (c >= 0 && is_name_char(c)) {
            size_t s = p->pos;
            while (is_name_char(peek(p))) p->pos++;
            last = (long)seq->n;
            int32_t id = rule_get(p, p->s + s, p->pos - s);
            if (id < 0 || !evec_push(p, seq, GE_REF, id)) return false;
        } else if (c == '(') {
            if (p->depth >= IG_GRAMMAR_MAX_NESTING) return perr(p, "parentheses nested too deep%s", "");
            p->pos++;
            int32_t id = rule_anon(p);
            if (id < 0) return false;
            p->depth++;
            skip_space(p, true);
            if (!parse_alternates(p, id, true)) return false;
            p->depth--;
            skip_space(p, true);
            if (peek(p) != ')') return perr(p, "expected ')'%s", "");
            p->pos++;
            last = (long)seq->n;
            if (!evec_push(p, seq, GE_REF, id)) return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return perr(p, "'%s' must follow something to repeat",
                                      c == '*' ? "*" : c == '+' ? "+" : c == '?' ? "?" : "{");
            p->pos++;
            long mn = 0, mx = -1;
            if (c == '+') mn = 1;
            else if (c == '?') mx = 1;
            else if (c == '{') {
                skip_space(p, true);
                if (!parse_count(p, &mn)) return false;
                skip_space(p, true);
                mx = mn;
                if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, true);
                    mx = -1;
                    if (peek(p) != '}' && !parse_count(p, &mx)) return false;
                    skip_space(p, true);
                }
                if (peek(p) != '}') return perr(p, "expected '}'%s", "");
                p->pos++;
                if (mx >= 0 && mx < mn) return perr(p, "{m,n} with n < m%s", "");
            }
            if (!apply_repeat(p, seq, (size_t)last, mn, mx)) return false;
            last = -1; /* x** is an error, as in llama.cpp */
        } else {
            return true;
        }
    }
}

static bool parse_alternates(parser *p, int32_t rule, bool nested) {
    for (;;) {
        evec seq = {0};
        if (!parse_sequence(p, &seq, nested)) {
            free(seq.v);
            return false;
        }
        if (!rule_add_alt(p, rule, &seq)) return false;
        skip_space(p, nested);
        if (peek(p) == '|') {
            p->pos++;
            skip_space(p, true);
            continue;
        }
        if (!nested && peek(p) == '\n') {
            /* a following line that starts with '|' continues the rule */
            size_t save = p->pos;
            skip_space(p, true);
            if (peek(p) == '|') {
                p->pos++;
                skip_space(p, true);
                continue;
            }
            p->pos = save;
        }
        return true;
    }
}

static bool parse_grammar(parser *p) {
    skip_space(p, true);
    while (p->pos < p->len) {
        size_t s = p->pos;
        while (is_name_char(peek(p))) p->pos++;
        if (p->pos == s) return perr(p, "expected a rule name%s", "");
        size_t ne = p->pos;
        skip_space(p, false);
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
            return perr(p, "expected '::=' after the rule name%s", "");
        p->pos += 3;
        int32_t id = rule_get(p, p->s + s, ne - s);
        if (id < 0) return false;
        if (p->rules[id].defined) {
            p->pos = s;
            return perr(p, "rule '%s' is defined twice", p->rules[id].name);
        }
        p->rules[id].defined = true;
        skip_space(p, false);
        bool empty = false;
        if (peek(p) == '\n') {
            /* the body may start on the next line, unless a rule starts there */
            size_t save = p->pos;
            skip_space(p, true);
            size_t q = p->pos;
            while (q < p->len && is_name_char((unsigned char)p->s[q])) q++;
            while (q < p->len && (p->s[q] == ' ' || p->s[q] == '\t')) q++;
            if (q > p->pos && q + 3 <= p->len && !memcmp(p->s + q, "::=", 3)) {
                p->pos = save;
                empty = true;
            }
        }
        if (empty) {
            evec e = {0};
            if (!rule_add_alt(p, id, &e)) return false;
        } else if (!parse_alternates(p, id, false)) return false;
        skip_space(p, false);
        if (p->pos < p->len && p->s[p->pos] != '\n')
            return perr(p, "expected the end of the line%s", "");
        skip_space(p, true);
    }
    return true;
}

/* ---- checks and flattening -------------------------------------------------- */

/* Refuses rules that can reach themselves without reading a byte. */
static bool check_left_recursion(parser *p) {
    size_t n = p->n_rules;
    bool *nullable = ig_calloc_array(n, sizeof *nullable);
    uint8_t *mark = ig_calloc_array(n, 1);
    int32_t *stack = ig_calloc_array(n + 1, sizeof *stack);
    size_t *iter = ig_calloc_array(n + 1, sizeof *iter);
    if (!nullable || !mark || !stack || !iter) {
        free(nullable);
        free(mark);
        free(stack);
        free(iter);
        return poom(p);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (size_t a = 0; a < p->rules[r].n_alts && !nullable[r]; a++) {
                const evec *e = &p->rules[r].alts[a];
                bool all = true;
                for (size_t i = 0; i < e->n && all; i++)
                    all = e->v[i].type == GE_REF && nullable[e->v[i].val];
                if (all) nullable[r] = changed = true;
            }
        }
    }
    /* DFS over "A starts with B" edges; mark 1 = on the path, 2 = done. The
     * edges of a rule are enumerated by a flat counter over (alt, index). */
    bool ok = true;
    for (size_t root = 0; root < n && ok; root++) {
        if (mark[root]) continue;
        size_t sp = 0;
        stack[sp] = (int32_t)root;
        iter[sp] = 0;
        mark[root] = 1;
        while (ok) {
            int32_t r = stack[sp];
            /* find the next left edge of r from iter[sp] */
            size_t k = iter[sp], idx = 0;
            int32_t next = -1;
            for (size_t a = 0; a < p->rules[r].n_alts && next < 0; a++) {
                const evec *e = &p->rules[r].alts[a];
                for (size_t i = 0; i < e->n; i++) {
                    if (e->v[i].type != GE_REF) break;
                    if (idx++ == k) {
                        next = e->v[i].val;
                        break;
                    }
                    if (!nullable[e->v[i].val]) break;
                }
            }
            if (next < 0) {
                mark[r] = 2;
                if (sp == 0) break;
                sp--;
                continue;
            }
            iter[sp]++;
            if (mark[next] == 1) {
                p->pos = p->rules[next].first_ref;
                ok = perr(p, "rule '%s' is left-recursive", p->rules[next].name);
            } else if (!mark[next]) {
                mark[next] = 1;
                sp++;
                stack[sp] = next;
                iter[sp] = 0;
            }
        }
    }
    free(nullable);
    free(mark);
    free(stack);
    free(iter);
    return ok;
}

static void parser_free(parser *p) {
    for (size_t i = 0; i < p->n_rules; i++) {
        for (size_t a = 0; a < p->rules[i].n_alts; a++) free(p->rules[i].alts[a].v);
        free(p->rules[i].alts);
        free(p->rules[i].name);
    }
    free(p->rules);
    free(p->sets);
    free(p->set_hash);
}

void ig_grammar_free(ig_grammar *g) {
    if (!g) return;
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (int i = 0; i < IG_GRAMMAR_SHARED_MASKS; i++) free(g->masks[i].mask);
    pthread_mutex_destroy(&g->mu);
    free(g->rule_alt);
    free(g->alts);
    free(g->elems);
    free(g->sets);
    free(g);
}

ig_grammar *ig_grammar_ref(ig_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

ig_status ig_grammar_from_gbnf(const char *text, size_t len, const char *root, ig_grammar **out) {
    if (out) *out = NULL;
    if (!out || (!text && len)) return ig_fail(IG_ERR_INVALID_ARG, "grammar: NULL argument");
    if (len > IG_GRAMMAR_MAX_TEXT)
        return ig_fail(IG_ERR_INVALID_ARG, "grammar: text of %zu bytes is too long (at most %u)",
                       len, IG_GRAMMAR_MAX_TEXT);
    if (!root) root = "root";
    parser p = {.s = text ? text : "", .len = len};
    bool ok = parse_grammar(&p);
    int32_t root_id = -1;
    if (ok) {
        for (size_t i = 0; i < p.n_rules && ok; i++)
            if (!p.rules[i].defined) {
                p.pos = p.rules[i].first_ref;
                ok = perr(&p, "rule '%s' is used but not defined", p.rules[i].name);
            }
    }
    if (ok) {
        root_id = rule_find(&p, root, strlen(root));
        if (root_id < 0) {
            p.pos = 0;
            ok = perr(&p, "the grammar has no rule '%s'", root);
        }
    }
    if (ok) ok = check_left_recursion(&p);
    ig_grammar *g = NULL;
    if (ok) {
        size_t n_alts = 0, n_el = 0;
        for (size_t i = 0; i < p.n_rules; i++) {
            n_alts += p.rules[i].n_alts;
            for (size_t a = 0; a < p.rules[i].n_alts; a++) n_el += p.rules[i].alts[a].n + 1;
        }
        g = ig_calloc_array(1, sizeof *g);
        if (g) {
            g->rule_alt = ig_calloc_array(p.n_rules + 1, sizeof *g->rule_alt);
            g->alts = ig_calloc_array(n_alts + 1, sizeof *g->alts);
            g->elems = ig_calloc_array(n_el + 1, sizeof *g->elems);
            g->sets = ig_calloc_array(p.n_sets + 1, sizeof *g->sets);
        }
        if (!g || !g->rule_alt || !g->alts || !g->elems || !g->sets) {
            ok = poom(&p);
        } else {
            atomic_init(&g->refs, 1);
            pthread_mutex_init(&g->mu, NULL);
            g->n_rules = (int32_t)p.n_rules;
            g->root = root_id;
            size_t ai = 0, ei = 0;
            for (size_t i = 0; i < p.n_rules; i++) {
                g->rule_alt[i] = (int32_t)ai;
                for (size_t a = 0; a < p.rules[i].n_alts; a++) {
                    g->alts[ai++] = (int32_t)ei;
                    const evec *e = &p.rules[i].alts[a];
                    if (e->n) memcpy(g->elems + ei, e->v, e->n * sizeof *e->v);
                    ei += e->n;
                    g->elems[ei++] = (ig_gelem){GE_END, 0};
                }
            }
            g->rule_alt[p.n_rules] = (int32_t)ai;
            g->n_elems = ei;
            if (p.n_sets) memcpy(g->sets, p.sets, p.n_sets * sizeof *p.sets);
            g->n_sets = (int32_t)p.n_sets;
        }
    }
    ig_status st = ok ? IG_OK : p.st;
    parser_free(&p);
    if (!ok) {
        if (g) {
            atomic_init(&g->refs, 1);
            pthread_mutex_init(&g->mu, NULL);
            ig_grammar_free(g);
        }
        return st;
    }
    *out = g;
    return IG_OK;
}
