/* JSON Schema -> GBNF.
 *
 * Supported (everything else is IG_ERR_UNSUPPORTED naming the keyword and
 * its place, never silently ignored):
 *  - type (a name or a list; "null" in the list or nullable: true adds
 *    null), enum, const (any JSON values, written compactly), anyOf,
 *    allOf with one member, $ref to "#", "#/$defs/..", "#/definitions/.."
 *    or any JSON pointer into the document (recursion is fine);
 *  - object: properties in their declared order, required, and
 *    additionalProperties (false or absent: no other keys; true or a
 *    schema: other keys, none a declared name, may follow the declared
 *    ones);
 *  - array: items, minItems, maxItems (exact);
 *  - string: minLength, maxLength (exact, in characters; an escape counts
 *    as one), pattern (a regex subset: literals, escapes, classes, \d \w
 *    \s and their negations, ., groups, (?: ), |, * + ? {m} {m,} {m,n};
 *    ^ and $ only at the ends, without them the match may be surrounded by
 *    any text. Characters that JSON must escape are left out of classes
 *    and written escaped when literal), format date, time, date-time,
 *    duration, uuid, email, hostname, ipv4, ipv6 (forms that always
 *    validate: RFC 3339 dates with years 1000-2999 and February up to the
 *    28th, RFC 3339 durations, lower or upper case UUIDs, hostnames of up
 *    to 6 labels of up to 32 characters, dotted-quad IPv4 without leading
 *    zeros, IPv6 in full or with one "::", without an embedded IPv4);
 *  - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum: exact
 *    for any bounds within +-10^17; multipleOf a whole number m: exact,
 *    with bounds that hold at most 256 multiples (each written out), or
 *    for m up to 100 with no bound or one within m of 0 (an automaton
 *    over the remainder mod m); on a number it produces integers;
 *  - number: the same keywords, always sound: an integer bound is exact
 *    (x <= 5 allows 5, 5.0, 4.99 but not 5.5), a non-integer bound is
 *    rounded inwards to an integer (maximum 2.5 allows at most 2 and 2.0);
 *    with a bound no exponent is produced.
 * enum and const next to "type" keep only the values of that type; other
 * keywords next to anyOf are refused (each branch must carry them).
 * Annotations (title, description, default, examples, $schema, $id,
 * $comment, deprecated, readOnly, writeOnly, x-*) are ignored. A keyword of
 * one type (pattern, minimum, minItems, ...) in a schema without "type",
 * "properties" or "items" is refused: it would let other values through.
 * Whitespace between tokens is limited to one space or a newline with up
 * to 16 spaces, integer parts to 16 digits and fractions to 16, so
 * the output cannot grow forever inside a number or between tokens. */
#include "grammar/grammar.h"

#include "core/json.h"
#include "core/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char BASE_GBNF[] =
    "ws ::= | \" \" | \"\\n\" \" \"{0,16}\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "int ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "frac ::= \".\" [0-9]{1,16}\n"
    "zfrac ::= \".\" \"0\"{1,16}\n"
    "exp ::= [eE] [-+]? [0-9]{1,3}\n"
    "number ::= \"-\"? int frac? exp?\n"
    "integer ::= \"-\"? int\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
    "fmt-date ::= [12] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
    "| \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( "
    "\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )\n"
    "fmt-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} "
    ")? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "fmt-date-time ::= fmt-date \"T\" fmt-time\n"
    "fmt-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
    "[0-9a-fA-F]{12}\n"
    "fmt-email ::= [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} ( \".\" [a-zA-Z0-9-]{1,63} "
    "){1,4}\n"
    "fmt-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n"
    "fmt-ipv4 ::= fmt-octet \".\" fmt-octet \".\" fmt-octet \".\" fmt-octet\n"
    "fmt-h16 ::= [0-9a-fA-F]{1,4}\n"
    "fmt-ipv6 ::= fmt-h16 ( \":\" fmt-h16 ){7} | \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,6} )? "
    "| fmt-h16 \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,5} )? "
    "| fmt-h16 ( \":\" fmt-h16 ){1} \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,4} )? "
    "| fmt-h16 ( \":\" fmt-h16 ){2} \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,3} )? "
    "| fmt-h16 ( \":\" fmt-h16 ){3} \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,2} )? "
    "| fmt-h16 ( \":\" fmt-h16 ){4} \"::\" ( fmt-h16 ( \":\" fmt-h16 ){0,1} )? "
    "| fmt-h16 ( \":\" fmt-h16 ){5} \"::\" fmt-h16? "
    "| fmt-h16 ( \":\" fmt-h16 ){6} \"::\"\n"
    "fmt-label ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )?\n"
    "fmt-hostname ::= fmt-label ( \".\" fmt-label ){0,5}\n"
    "fmt-n ::= [0-9]{1,9}\n"
    "fmt-duration ::= \"P\" ( fmt-dur-date fmt-dur-time? | fmt-dur-time | fmt-n \"W\" )\n"
    "fmt-dur-date ::= fmt-n \"D\" | fmt-n \"M\" ( fmt-n \"D\" )? "
    "| fmt-n \"Y\" ( fmt-n \"M\" ( fmt-n \"D\" )? )?\n"
    "fmt-dur-time ::= \"T\" ( fmt-n \"H\" ( fmt-n \"M\" ( fmt-n \"S\" )? )? "
    "| fmt-n \"M\" ( fmt-n \"S\" )? | fmt-n \"S\" )\n";

const char *ig_gbnf_json(void) { return BASE_GBNF; }

ig_status ig_grammar_json_object(ig_grammar **out) {
    size_t n = strlen(BASE_GBNF);
    char *t = ig_malloc(n + 32);
    if (!t) return IG_ERR_NO_MEMORY;
    memcpy(t, "root ::= object\n", 16);
    memcpy(t + 16, BASE_GBNF, n + 1);
    ig_status st = ig_grammar_from_gbnf(t, strlen(t), "root", out);
    free(t);
    return st;
}

/* ---- text buffer ---------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    size_t need;
    if (!ig_size_add(b->n, n, &need) || !ig_size_add(need, 1, &need) || need > (64u << 20)) {
        b->oom = true;
        return;
    }
    if (need > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < need) c *= 2;
        char *q = ig_realloc_array(b->p, c, 1);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) IG_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A GBNF literal for the bytes s[0..n). */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') sb_puts(b, "\\\"");
        else if (c == '\\') sb_puts(b, "\\\\");
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20) sb_printf(b, "\\x%02X", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_puts(b, "\"");
}

/* Compact JSON text of a value. */
static void sb_json(sbuf *b, const ig_json *v, int depth) {
    if (depth > IG_GRAMMAR_MAX_NESTING) {
        b->oom = true;
        return;
    }
    switch (v->type) {
    case IG_JSON_NULL: sb_puts(b, "null"); break;
    case IG_JSON_TRUE: sb_puts(b, "true"); break;
    case IG_JSON_FALSE: sb_puts(b, "false"); break;
    case IG_JSON_INTEGER: sb_printf(b, "%lld", v->u.i); break;
    case IG_JSON_REAL: sb_printf(b, "%.17g", v->u.d); break;
    case IG_JSON_STRING:
    case IG_JSON_OBJECT:
    case IG_JSON_ARRAY: break;
    }
    if (v->type == IG_JSON_STRING) {
        sb_puts(b, "\"");
        for (size_t i = 0; i < v->n; i++) {
            unsigned char c = (unsigned char)v->u.s[i];
            if (c == '"') sb_puts(b, "\\\"");
            else if (c == '\\') sb_puts(b, "\\\\");
            else if (c == '\n') sb_puts(b, "\\n");
            else if (c == '\r') sb_puts(b, "\\r");
            else if (c == '\t') sb_puts(b, "\\t");
            else if (c < 0x20) sb_printf(b, "\\u%04x", c);
            else sb_put(b, (const char *)&c, 1);
        }
        sb_puts(b, "\"");
    } else if (v->type == IG_JSON_ARRAY) {
        sb_puts(b, "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i) sb_puts(b, ",");
            sb_json(b, &v->u.items[i], depth + 1);
        }
        sb_puts(b, "]");
    } else if (v->type == IG_JSON_OBJECT) {
        sb_puts(b, "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i) sb_puts(b, ",");
            ig_json key = {.type = IG_JSON_STRING, .n = v->u.items[i].key_len};
            key.u.s = v->u.items[i].key;
            sb_json(b, &key, depth + 1);
            sb_puts(b, ":");
            sb_json(b, &v->u.items[i], depth + 1);
        }
        sb_puts(b, "}");
    }
}

/* ---- generator ------------------------------------------------------------------ */

typedef struct refname {
    const ig_json *node;
    char name[24];
} refname;

typedef struct gen {
    const ig_json *root;
    const char *prefix; /* of every generated rule name */
    sbuf rules;
    refname *refs;
    size_t n_refs, cap_refs;
    int n_rules;
    int depth;
    bool failed;
    ig_status st;
} gen;

static bool gfail(gen *g, ig_status st, const char *path, const char *fmt, ...) IG_PRINTF(4, 5);
static bool gfail(gen *g, ig_status st, const char *path, const char *fmt, ...) {
    if (g->failed) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->st = ig_fail(st, "JSON schema at %s: %s", path, msg);
    g->failed = true;
    return false;
}

static void new_name(gen *g, char out[24]) { snprintf(out, 24, "%ss%d", g->prefix, g->n_rules++); }

static void add_rule(gen *g, const char *name, const sbuf *body) {
    if (body->oom) g->rules.oom = true; /* a body cut short must not become a rule */
    sb_puts(&g->rules, name);
    sb_puts(&g->rules, " ::= ");
    if (body->n) sb_put(&g->rules, body->p, body->n);
    else sb_puts(&g->rules, "\"\"");
    sb_puts(&g->rules, "\n");
}

static bool gen_schema(gen *g, const ig_json *s, const char *path, char name[24]);

/* Whether JSON value v has one of the types that "type" (NULL: any) names;
 * -1 when "type" is malformed. */
static int type_matches(const ig_json *type, bool nullable, const ig_json *v) {
    if (!type) return 1;
    if (nullable && ig_json_is_null(v)) return 1;
    size_t nt = ig_json_is_array(type) ? type->n : 1;
    for (size_t i = 0; i < nt; i++) {
        const ig_json *t = ig_json_is_array(type) ? &type->u.items[i] : type;
        if (!ig_json_is_string(t)) return -1;
        const char *n = t->u.s;
        bool integral = ig_json_is_integer(v) ||
                        (ig_json_is_real(v) && v->u.d == floor(v->u.d) && fabs(v->u.d) < 1e300);
        if ((!strcmp(n, "string") && ig_json_is_string(v)) ||
            (!strcmp(n, "number") && ig_json_is_number(v)) ||
            (!strcmp(n, "integer") && integral) ||
            (!strcmp(n, "boolean") && (ig_json_is(v, IG_JSON_TRUE) || ig_json_is(v, IG_JSON_FALSE))) ||
            (!strcmp(n, "null") && ig_json_is_null(v)) ||
            (!strcmp(n, "object") && ig_json_is_object(v)) ||
            (!strcmp(n, "array") && ig_json_is_array(v)))
            return 1;
    }
    return 0;
}

static void path_join(char *out, size_t cap, const char *path, const char *a, const char *b,
                      size_t blen) {
    snprintf(out, cap, "%s/%s%s%.*s", path, a, b ? "/" : "", b ? (int)IG_MIN(blen, 64) : 0,
             b ? b : "");
}

static const char *const KNOWN[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "pattern", "format", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "allOf", "$ref", "$defs", "definitions",
    "nullable", "title", "description", "$schema", "$id", "default", "examples", "$comment",
    "deprecated", "readOnly", "writeOnly", "strict",
};

static bool check_keywords(gen *g, const ig_json *s, const char *path) {
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->u.items[i].key;
        bool ok = !strncmp(k, "x-", 2);
        for (size_t j = 0; !ok && j < IG_ARRAY_LEN(KNOWN); j++) ok = !strcmp(k, KNOWN[j]);
        if (!ok)
            return gfail(g, IG_ERR_UNSUPPORTED, path, "the keyword '%.64s' is not supported", k);
    }
    return true;
}

/* Rule for a literal JSON value. */
static bool gen_literals(gen *g, const ig_json *vals, size_t n, const char *path, char name[24]) {
    sbuf body = {0};
    for (size_t i = 0; i < n; i++) {
        sbuf t = {0};
        sb_json(&t, &vals[i], 0);
        if (i) sb_puts(&body, " | ");
        sb_literal(&body, t.p ? t.p : "", t.n);
        if (t.oom) body.oom = true;
        free(t.p);
    }
    if (body.oom) {
        free(body.p);
        return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory or nested too deep");
    }
    new_name(g, name);
    add_rule(g, name, &body);
    free(body.p);
    return true;
}

static const ig_json *resolve_ref(gen *g, const char *ref, const char *path) {
    if (ref[0] != '#') {
        gfail(g, IG_ERR_UNSUPPORTED, path, "$ref '%.64s': only references inside the document "
              "(starting with '#') are supported", ref);
        return NULL;
    }
    const ig_json *cur = g->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') {
            gfail(g, IG_ERR_FORMAT, path, "$ref '%.64s' is not a JSON pointer", ref);
            return NULL;
        }
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char c = *p++;
            if (c == '~' && (*p == '0' || *p == '1')) c = *p++ == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = c;
        }
        tok[n] = '\0';
        if (ig_json_is_object(cur)) cur = ig_json_get(cur, tok);
        else if (ig_json_is_array(cur)) {
            char *end;
            unsigned long idx = strtoul(tok, &end, 10);
            cur = *end || !n ? NULL : ig_json_at(cur, idx);
        } else cur = NULL;
        if (!cur) {
            gfail(g, IG_ERR_FORMAT, path, "$ref '%.64s' does not resolve", ref);
            return NULL;
        }
    }
    return cur;
}

/* ---- numbers ---------------------------------------------------------------------- */

#define NUM_LIMIT 100000000000000000LL /* 10^17 */

/* Digits strings a <= b of equal length n: alternation for [a, b]. */
static void rng_digits(sbuf *o, const char *a, const char *b, int n) {
    if (n == 1) {
        sb_printf(o, "[%c-%c]", a[0], b[0]);
        return;
    }
    if (a[0] == b[0]) {
        sb_printf(o, "\"%c\" ( ", a[0]);
        rng_digits(o, a + 1, b + 1, n - 1);
        sb_puts(o, " )");
        return;
    }
    bool lo_full = true, hi_full = true;
    for (int i = 1; i < n; i++) {
        lo_full = lo_full && a[i] == '0';
        hi_full = hi_full && b[i] == '9';
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    bool first = true;
    sb_puts(o, "( ");
    if (!lo_full) {
        sb_printf(o, "\"%c\" ( ", a[0]);
        rng_digits(o, a + 1, nines, n - 1);
        sb_puts(o, " )");
        first = false;
    }
    char ml = (char)(a[0] + (lo_full ? 0 : 1)), mh = (char)(b[0] - (hi_full ? 0 : 1));
    if (ml <= mh) {
        if (!first) sb_puts(o, " | ");
        sb_printf(o, "[%c-%c] [0-9]{%d}", ml, mh, n - 1);
        first = false;
    }
    if (!hi_full) {
        if (!first) sb_puts(o, " | ");
        sb_printf(o, "\"%c\" ( ", b[0]);
        rng_digits(o, zeros, b + 1, n - 1);
        sb_puts(o, " )");
    }
    sb_puts(o, " )");
}

static int ndigits(long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

static long long pow10ll(int d) {
    long long p = 1;
    while (d-- > 0) p *= 10;
    return p;
}

/* Decimal integers without sign in [lo, hi] (hi < 0: no upper bound),
 * 0 <= lo, as one parenthesised alternation. */
static void int_range(sbuf *o, long long lo, long long hi) {
    bool inf = hi < 0;
    int dl = ndigits(lo), dh = inf ? dl : ndigits(hi);
    sb_puts(o, "( ");
    bool first = true;
    for (int d = dl; d <= dh; d++) {
        long long a = d == 1 ? 0 : pow10ll(d - 1), b = pow10ll(d) - 1;
        if (a < lo) a = lo;
        if (!inf && b > hi) b = hi;
        if (a > b) continue;
        char sa[24], sbb[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sbb, sizeof sbb, "%lld", b);
        if (!first) sb_puts(o, " | ");
        rng_digits(o, sa, sbb, d);
        first = false;
    }
    if (inf) {
        if (!first) sb_puts(o, " | ");
        sb_printf(o, "[1-9] [0-9]{%d,17}", dh);
    }
    sb_puts(o, " )");
}

/* Bounds of a number schema on the integer grid. */
static bool bounds(gen *g, const ig_json *s, const char *path, bool *has_lo, long long *lo,
                   bool *has_hi, long long *hi) {
    *has_lo = *has_hi = false;
    const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        const ig_json *v = ig_json_get(s, keys[k]);
        if (!v) continue;
        if (!ig_json_is_number(v))
            return gfail(g, IG_ERR_FORMAT, path, "'%s' must be a number", keys[k]);
        double d = ig_json_number(v);
        if (!(fabs(d) <= (double)NUM_LIMIT))
            return gfail(g, IG_ERR_UNSUPPORTED, path, "'%s' beyond 1e17 is not supported", keys[k]);
        long long b;
        if (k == 0) b = (long long)ceil(d);
        else if (k == 1) b = (long long)floor(d) + 1;
        else if (k == 2) b = (long long)floor(d);
        else b = (long long)ceil(d) - 1;
        if (k < 2) {
            if (!*has_lo || b > *lo) *lo = b;
            *has_lo = true;
        } else {
            if (!*has_hi || b < *hi) *hi = b;
            *has_hi = true;
        }
    }
    if (*has_lo && *has_hi && *lo > *hi)
        return gfail(g, IG_ERR_UNSUPPORTED, path,
                     "no integer lies between the bounds (%lld > %lld)", *lo, *hi);
    return true;
}

/* Magnitudes in [a, b] (b < 0: unbounded) with a fraction, for numbers:
 * integer part in [a, b-1] with any fraction, or b with a zero fraction. */
static void mag_range(sbuf *o, long long a, long long b, bool integer) {
    if (integer) {
        int_range(o, a, b);
        return;
    }
    sb_puts(o, "( ");
    if (b < 0) {
        int_range(o, a, -1);
        sb_puts(o, " frac?");
    } else {
        bool any = false;
        if (a <= b - 1) {
            int_range(o, a, b - 1);
            sb_puts(o, " frac?");
            any = true;
        }
        if (any) sb_puts(o, " | ");
        sb_printf(o, "\"%lld\" zfrac?", b);
    }
    sb_puts(o, " )");
}

/* Floor division (b > 0). */
static long long floordiv(long long a, long long b) { return a / b - (a % b != 0 && a < 0); }

/* Integers that are multiples of m within the bounds: the multiples
 * themselves when the bounds hold at most MULT_ENUM of them; else, for m up
 * to MULT_DFA and bounds that leave either sign whole, decimal numbers read
 * by the automaton of their remainder mod m (at most 16 digits, like int). */
#define MULT_ENUM 256
#define MULT_DFA 100
static bool gen_multiple(gen *g, const char *path, long long m, bool has_lo, long long lo,
                         bool has_hi, long long hi, sbuf *body) {
    if (has_lo && has_hi) {
        long long a = floordiv(lo + m - 1, m), b = floordiv(hi, m);
        if (a > b)
            return gfail(g, IG_ERR_UNSUPPORTED, path, "no multiple of %lld lies between the bounds", m);
        if (b - a < MULT_ENUM) {
            sb_puts(body, "( ");
            for (long long k = a; k <= b; k++) sb_printf(body, "%s\"%lld\"", k > a ? " | " : "", k * m);
            sb_puts(body, " )");
            return true;
        }
    }
    /* which signs: a bound must leave its side whole (within one multiple of 0) */
    bool pos = !has_hi || hi >= m, neg = !has_lo || lo <= -m;
    bool zero = (!has_lo || lo <= 0) && (!has_hi || hi >= 0);
    bool pos_ok = !has_lo || lo <= m, neg_ok = !has_hi || hi >= -m;
    if ((has_lo && has_hi) || !pos_ok || !neg_ok)
        return gfail(g, IG_ERR_UNSUPPORTED, path, "multipleOf %lld: these bounds are not supported "
                     "(either at most %d multiples between them, or one bound within one multiple "
                     "of 0)", m, MULT_ENUM);
    if (m > MULT_DFA)
        return gfail(g, IG_ERR_UNSUPPORTED, path, "multipleOf above %d is only supported with both "
                     "bounds (at most %d multiples between them)", MULT_DFA, MULT_ENUM);
    /* R(d, r): at most d more digits, remainder r so far; its name is
     * prefix "s" (base + d m + r) */
    enum { D = 16 };
    int base = g->n_rules;
    g->n_rules += D * (int)m + 1;
    bool *live = ig_calloc_array((size_t)D * (size_t)m, sizeof *live);
    if (!live) return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
    for (int d = 0; d < D; d++)
        for (long long r = 0; r < m; r++) {
            bool l = r == 0;
            for (int x = 0; x < 10 && !l && d > 0; x++) l = live[(d - 1) * m + (10 * r + x) % m];
            live[d * m + r] = l;
        }
    for (int d = 0; d < D; d++)
        for (long long r = 0; r < m; r++) {
            if (!live[d * m + r]) continue;
            sbuf b = {0};
            bool first = true;
            if (r == 0) {
                sb_puts(&b, "\"\"");
                first = false;
            }
            for (long long t = 0; t < m && d > 0; t++) {
                if (!live[(d - 1) * m + t]) continue;
                char cls[16];
                int n = 0;
                for (int x = 0; x < 10; x++)
                    if ((10 * r + x) % m == t) cls[n++] = (char)('0' + x);
                if (!n) continue;
                cls[n] = '\0';
                sb_printf(&b, "%s[%s] %ss%lld", first ? "" : " | ", cls, g->prefix,
                          (long long)base + (long long)(d - 1) * m + t);
                first = false;
            }
            char nm[24];
            snprintf(nm, sizeof nm, "%ss%lld", g->prefix, (long long)base + (long long)d * m + r);
            add_rule(g, nm, &b);
            free(b.p);
        }
    /* a nonzero multiple: a first digit 1-9, then up to 15 more */
    sbuf b = {0};
    bool first = true;
    for (int x = 1; x < 10; x++) {
        if (!live[(D - 2) * m + x % m]) continue;
        sb_printf(&b, "%s\"%d\" %ss%lld", first ? "" : " | ", x, g->prefix,
                  (long long)base + (long long)(D - 2) * m + x % m);
        first = false;
    }
    free(live);
    char nz[24];
    snprintf(nz, sizeof nz, "%ss%d", g->prefix, base + D * (int)m);
    add_rule(g, nz, &b);
    free(b.p);
    sb_puts(body, "( ");
    first = true;
    if (zero) {
        sb_puts(body, "\"0\"");
        first = false;
    }
    if (pos) {
        sb_printf(body, "%s%s", first ? "" : " | ", nz);
        first = false;
    }
    if (neg) sb_printf(body, "%s\"-\" %s", first ? "" : " | ", nz);
    sb_puts(body, " )");
    return true;
}

static bool gen_number(gen *g, const ig_json *s, const char *path, bool integer, sbuf *body) {
    bool has_lo, has_hi;
    long long lo = 0, hi = 0;
    if (!bounds(g, s, path, &has_lo, &lo, &has_hi, &hi)) return false;
    const ig_json *mult = ig_json_get(s, "multipleOf");
    if (mult) {
        double m = ig_json_is_number(mult) ? ig_json_number(mult) : 0;
        if (!(m > 0))
            return gfail(g, IG_ERR_FORMAT, path, "'multipleOf' must be a number above 0");
        if (m != floor(m) || m > (double)NUM_LIMIT)
            return gfail(g, IG_ERR_UNSUPPORTED, path, "multipleOf: only whole numbers up to 1e17 "
                         "are supported");
        if (m > 1) return gen_multiple(g, path, (long long)m, has_lo, lo, has_hi, hi, body);
        integer = true; /* multipleOf 1: any integer */
    }
    if (!has_lo && !has_hi) {
        sb_puts(body, integer ? "integer" : "number");
        return true;
    }
    bool first = true;
    sb_puts(body, "( ");
    if (!has_lo || lo < 0) { /* negative values */
        long long c = has_hi ? (hi < 0 ? -hi : 0) : 0, d = has_lo ? -lo : -1;
        if (integer && c == 0) c = 1;
        if (d < 0 || c <= d) {
            sb_puts(body, "\"-\" ");
            mag_range(body, c, d, integer);
            first = false;
        }
    }
    if (!has_hi || hi >= 0) {
        long long a = has_lo && lo > 0 ? lo : 0, b = has_hi ? hi : -1;
        if (!first) sb_puts(body, " | ");
        mag_range(body, a, b, integer);
    }
    sb_puts(body, " )");
    return true;
}

/* ---- regular expressions ------------------------------------------------------------ */

typedef struct rx {
    const char *s;
    size_t n, i;
    int depth;
} rx;

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

#define RX_MAX_RANGES 256

static uint32_t rx_utf8(rx *r) {
    unsigned char c = (unsigned char)r->s[r->i];
    int n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (r->i + (size_t)n > r->n) n = 1;
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; k++) v = (v << 6) | ((unsigned char)r->s[r->i + (size_t)k] & 0x3F);
    r->i += (size_t)n;
    return v;
}

/* Adds the ranges of a class escape (\d \w \s); false when c is not one. */
static bool class_escape(char c, cprange *rg, int *n, bool *neg) {
    *neg = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
    case 'd': case 'D': rg[(*n)++] = (cprange){'0', '9'}; return true;
    case 'w': case 'W':
        rg[(*n)++] = (cprange){'0', '9'};
        rg[(*n)++] = (cprange){'A', 'Z'};
        rg[(*n)++] = (cprange){'a', 'z'};
        rg[(*n)++] = (cprange){'_', '_'};
        return true;
    case 's': case 'S': rg[(*n)++] = (cprange){' ', ' '}; return true;
    default: return false;
    }
}

static int cmp_cp(const void *x, const void *y) {
    const cprange *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Writes a GBNF class for the ranges (negated if neg), minus the
 * characters a JSON string must escape. false when nothing is left. */
static bool emit_class(sbuf *o, cprange *rg, int n, bool neg) {
    qsort(rg, (size_t)n, sizeof *rg, cmp_cp);
    cprange fin[RX_MAX_RANGES * 2 + 4];
    int nf = 0;
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < n; i++) {
            if (rg[i].lo > next) fin[nf++] = (cprange){next, rg[i].lo - 1};
            if (rg[i].hi + 1 > next) next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF) fin[nf++] = (cprange){next, 0x10FFFF};
    } else {
        memcpy(fin, rg, (size_t)n * sizeof *rg);
        nf = n;
    }
    /* remove 0x00-0x1F, '"' and '\\' */
    static const cprange ban[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (size_t b = 0; b < IG_ARRAY_LEN(ban); b++) {
        cprange tmp[RX_MAX_RANGES * 2 + 8];
        int nt = 0;
        for (int i = 0; i < nf; i++) {
            if (fin[i].hi < ban[b].lo || fin[i].lo > ban[b].hi) tmp[nt++] = fin[i];
            else {
                if (fin[i].lo < ban[b].lo) tmp[nt++] = (cprange){fin[i].lo, ban[b].lo - 1};
                if (fin[i].hi > ban[b].hi) tmp[nt++] = (cprange){ban[b].hi + 1, fin[i].hi};
            }
        }
        memcpy(fin, tmp, (size_t)nt * sizeof *tmp);
        nf = nt;
    }
    if (nf == 0) return false;
    sb_puts(o, "[");
    for (int i = 0; i < nf; i++) {
        sb_printf(o, "\\U%08X", fin[i].lo);
        if (fin[i].hi != fin[i].lo) sb_printf(o, "-\\U%08X", fin[i].hi);
    }
    sb_puts(o, "]");
    return true;
}

static bool rx_alt(gen *g, rx *r, sbuf *o, const char *path);

/* A literal character as it appears inside a JSON string. */
static void rx_literal(sbuf *o, uint32_t c) {
    char buf[16];
    if (c == '"') sb_puts(o, "\"\\\\\\\"\"");
    else if (c == '\\') sb_puts(o, "\"\\\\\\\\\"");
    else if (c == '\n') sb_puts(o, "\"\\\\n\"");
    else if (c == '\t') sb_puts(o, "\"\\\\t\"");
    else if (c == '\r') sb_puts(o, "\"\\\\r\"");
    else if (c < 0x20) sb_printf(o, "\"\\\\u%04x\"", c);
    else {
        snprintf(buf, sizeof buf, "\\U%08X", c);
        sb_puts(o, "\"");
        sb_puts(o, buf);
        sb_puts(o, "\"");
    }
}

static bool rx_atom(gen *g, rx *r, sbuf *o, const char *path) {
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
            else return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: lookaround and named groups "
                              "are not supported");
        }
        if (++r->depth > IG_GRAMMAR_MAX_NESTING)
            return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: groups nested too deep");
        sb_puts(o, "( ");
        if (!rx_alt(g, r, o, path)) return false;
        r->depth--;
        if (r->i >= r->n || r->s[r->i] != ')')
            return gfail(g, IG_ERR_FORMAT, path, "pattern: missing ')'");
        r->i++;
        sb_puts(o, " )");
        return true;
    }
    if (c == '[') {
        r->i++;
        bool neg = false;
        if (r->i < r->n && r->s[r->i] == '^') {
            neg = true;
            r->i++;
        }
        cprange rg[RX_MAX_RANGES + 8];
        int n = 0;
        bool first = true;
        for (;;) {
            if (r->i >= r->n) return gfail(g, IG_ERR_FORMAT, path, "pattern: missing ']'");
            if (r->s[r->i] == ']' && !first) {
                r->i++;
                break;
            }
            first = false;
            if (n >= RX_MAX_RANGES)
                return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: character class too large");
            uint32_t lo;
            if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
                char e = r->s[r->i + 1];
                bool eneg;
                int before = n;
                if (class_escape(e, rg, &n, &eneg)) {
                    r->i += 2;
                    if (eneg) return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: \\%c inside a "
                                           "class is not supported", e);
                    (void)before;
                    continue;
                }
                r->i += 2;
                lo = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (uint32_t)(unsigned char)e;
            } else lo = rx_utf8(r);
            uint32_t hi = lo;
            if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
                r->i++;
                if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
                    hi = (unsigned char)r->s[r->i + 1];
                    r->i += 2;
                } else hi = rx_utf8(r);
                if (hi < lo) return gfail(g, IG_ERR_FORMAT, path, "pattern: backwards range");
            }
            rg[n++] = (cprange){lo, hi};
        }
        if (!emit_class(o, rg, n, neg))
            return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: a class matches no character "
                         "allowed in a JSON string");
        return true;
    }
    if (c == '.') {
        r->i++;
        cprange nl = {'\n', '\n'};
        emit_class(o, &nl, 1, true);
        return true;
    }
    if (c == '\\') {
        if (r->i + 1 >= r->n) return gfail(g, IG_ERR_FORMAT, path, "pattern ends with '\\'");
        char e = r->s[r->i + 1];
        r->i += 2;
        cprange rg[8];
        int n = 0;
        bool neg;
        if (class_escape(e, rg, &n, &neg)) {
            emit_class(o, rg, n, neg);
            return true;
        }
        if ((e >= '0' && e <= '9') || e == 'b' || e == 'B' || e == 'k' || e == 'p' || e == 'P')
            return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: '\\%c' is not supported", e);
        rx_literal(o, e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (uint32_t)(unsigned char)e);
        return true;
    }
    if (c == '^' || c == '$')
        return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: '%c' is only supported at the very "
                     "start / end of the pattern", c);
    if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')' || c == '|')
        return gfail(g, IG_ERR_FORMAT, path, "pattern: unexpected '%c'", c);
    rx_literal(o, rx_utf8(r));
    return true;
}

static bool rx_seq(gen *g, rx *r, sbuf *o, const char *path, size_t end) {
    bool any = false;
    while (r->i < end && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (any) sb_puts(o, " ");
        sb_puts(o, "( ");
        if (!rx_atom(g, r, o, path)) return false;
        sb_puts(o, " )");
        any = true;
        if (r->i < end) {
            char q = r->s[r->i];
            if (q == '*' || q == '+' || q == '?') {
                sb_put(o, &q, 1);
                r->i++;
            } else if (q == '{') {
                size_t j = r->i + 1;
                while (j < end && r->s[j] != '}') j++;
                if (j >= end) return gfail(g, IG_ERR_FORMAT, path, "pattern: missing '}'");
                for (size_t k = r->i + 1; k < j; k++)
                    if (!(r->s[k] >= '0' && r->s[k] <= '9') && r->s[k] != ',')
                        return gfail(g, IG_ERR_FORMAT, path, "pattern: bad {m,n}");
                sb_put(o, r->s + r->i, j + 1 - r->i);
                r->i = j + 1;
            }
            if (r->i < end && r->s[r->i] == '?') r->i++; /* lazy: same language */
            if (r->i < end && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '{'))
                return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern: stacked quantifiers");
        }
    }
    if (!any) sb_puts(o, "\"\"");
    return true;
}

static bool rx_alt(gen *g, rx *r, sbuf *o, const char *path) {
    if (!rx_seq(g, r, o, path, r->n)) return false;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        sb_puts(o, " | ");
        if (!rx_seq(g, r, o, path, r->n)) return false;
    }
    return true;
}

static bool gen_pattern(gen *g, const char *pat, size_t len, const char *path, sbuf *body) {
    if (len > 4096) return gfail(g, IG_ERR_UNSUPPORTED, path, "pattern longer than 4096 bytes");
    bool a0 = len && pat[0] == '^';
    bool a1 = len > (size_t)a0 && pat[len - 1] == '$' && (len < 2 || pat[len - 2] != '\\');
    rx r = {.s = pat, .n = len - (a1 ? 1 : 0), .i = a0 ? 1 : 0};
    sb_puts(body, "\"\\\"\" ");
    if (!a0) sb_puts(body, "char* ");
    sb_puts(body, "( ");
    if (!rx_alt(g, &r, body, path)) return false;
    if (r.i != r.n) return gfail(g, IG_ERR_FORMAT, path, "pattern: unbalanced ')'");
    sb_puts(body, " )");
    if (!a1) sb_puts(body, " char*");
    sb_puts(body, " \"\\\"\"");
    return true;
}

/* ---- types ---------------------------------------------------------------------------- */

static bool get_count(gen *g, const ig_json *s, const char *key, const char *path, long *out) {
    const ig_json *v = ig_json_get(s, key);
    *out = -1;
    if (!v) return true;
    if (!ig_json_is_integer(v) || v->u.i < 0)
        return gfail(g, IG_ERR_FORMAT, path, "'%s' must be a non-negative integer", key);
    if (v->u.i > IG_GRAMMAR_MAX_REPEAT)
        return gfail(g, IG_ERR_UNSUPPORTED, path, "'%s' above %d is not supported", key,
                     IG_GRAMMAR_MAX_REPEAT);
    *out = (long)v->u.i;
    return true;
}

static bool gen_string(gen *g, const ig_json *s, const char *path, sbuf *body) {
    const ig_json *fmt = ig_json_get(s, "format"), *pat = ig_json_get(s, "pattern");
    long mn, mx;
    if (!get_count(g, s, "minLength", path, &mn) || !get_count(g, s, "maxLength", path, &mx))
        return false;
    int n_kinds = (fmt != NULL) + (pat != NULL) + (mn >= 0 || mx >= 0);
    if (n_kinds > 1)
        return gfail(g, IG_ERR_UNSUPPORTED, path, "format, pattern and minLength/maxLength "
                     "cannot be combined");
    if (fmt) {
        const char *f = ig_json_str(fmt);
        static const char *const fmts[] = {"date-time", "date", "time", "duration", "uuid",
                                           "email", "hostname", "ipv4", "ipv6"};
        for (size_t i = 0; f && i < IG_ARRAY_LEN(fmts); i++)
            if (!strcmp(f, fmts[i])) {
                sb_printf(body, "\"\\\"\" fmt-%s \"\\\"\"", f);
                return true;
            }
        return gfail(g, IG_ERR_UNSUPPORTED, path, "format '%.64s' is not supported (date, "
                     "time, date-time, duration, uuid, email, hostname, ipv4, ipv6 are)",
                     f ? f : "?");
    }
    if (pat) {
        if (!ig_json_is_string(pat)) return gfail(g, IG_ERR_FORMAT, path, "'pattern' must be a string");
        return gen_pattern(g, pat->u.s, pat->n, path, body);
    }
    if (mn >= 0 || mx >= 0) {
        if (mn < 0) mn = 0;
        if (mx >= 0 && mx < mn)
            return gfail(g, IG_ERR_FORMAT, path, "maxLength is below minLength");
        if (mx >= 0) sb_printf(body, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
        else sb_printf(body, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
        return true;
    }
    sb_puts(body, "string");
    return true;
}

static bool gen_array(gen *g, const ig_json *s, const char *path, sbuf *body) {
    const ig_json *items = ig_json_get(s, "items");
    char item[24] = "value", sub[300];
    if (items) {
        path_join(sub, sizeof sub, path, "items", NULL, 0);
        if (!gen_schema(g, items, sub, item)) return false;
    }
    long mn, mx;
    if (!get_count(g, s, "minItems", path, &mn) || !get_count(g, s, "maxItems", path, &mx))
        return false;
    if (mn < 0) mn = 0;
    if (mx >= 0 && mx < mn) return gfail(g, IG_ERR_FORMAT, path, "maxItems is below minItems");
    if (mx == 0) {
        sb_puts(body, "\"[\" ws \"]\"");
        return true;
    }
    char rep[64];
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) snprintf(rep, sizeof rep, "{%ld,}", lo);
    else snprintf(rep, sizeof rep, "{%ld,%ld}", lo, mx - 1);
    if (mn == 0)
        sb_printf(body, "\"[\" ws ( %s ( ws \",\" ws %s )%s ws )? \"]\"", item, item, rep);
    else sb_printf(body, "\"[\" ws %s ( ws \",\" ws %s )%s ws \"]\"", item, item, rep);
    return true;
}

/* ---- keys other than the declared ones ------------------------------------------ */

/* A trie over the declared property names, in code points. */
typedef struct key_node {
    uint32_t cp;          /* the code point leading here */
    int first, next;      /* first child, next sibling (-1: none) */
    bool terminal;        /* a declared name ends here */
    char rule[24];
} key_node;

static int utf8_next(const char *s, size_t n, size_t *i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n) return 0;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((u[*i + k] & 0xC0) != 0x80) return 0;
        v = v << 6 | (u[*i + k] & 0x3F);
    }
    *i += (size_t)len;
    *cp = v;
    return len;
}

/* The character a simple JSON escape letter stands for. */
static const char ESC_LETTERS[] = "\"\\/bfnrt";
static const char ESC_CHARS[] = "\"\\/\b\f\n\r\t";

static bool has_child(const key_node *t, int v, uint32_t cp) {
    for (int c = t[v].first; c >= 0; c = t[c].next)
        if (t[c].cp == cp) return true;
    return false;
}

/* A rule `name` for a JSON string (with its quotes) that is none of the
 * declared property names, so that an extra key cannot repeat one (a
 * validator would see a duplicate key, and keep only the last value). It
 * walks a trie of the names: at each node the string may end unless a name
 * ends there, continue into a child (written plainly or as its one-letter
 * escape), or leave the trie with any other character, after which anything
 * goes. A \u escape is not allowed before the string has left the trie (it
 * could spell a name's character). */
static bool gen_other_key(gen *g, const ig_json *props, const char *path, char name[24]) {
    size_t total = 1;
    for (size_t i = 0; i < ig_json_size(props); i++) total += props->u.items[i].key_len;
    key_node *t = ig_calloc_array(total, sizeof *t);
    if (!t) return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
    int n = 1;
    t[0] = (key_node){.first = -1, .next = -1};
    for (size_t i = 0; i < ig_json_size(props); i++) {
        const char *k = props->u.items[i].key;
        size_t len = props->u.items[i].key_len, j = 0;
        int v = 0;
        while (j < len) {
            uint32_t cp;
            if (!utf8_next(k, len, &j, &cp)) {
                free(t);
                return gfail(g, IG_ERR_FORMAT, path, "a property name is not valid UTF-8");
            }
            int c = t[v].first;
            while (c >= 0 && t[c].cp != cp) c = t[c].next;
            if (c < 0) {
                c = n++;
                t[c] = (key_node){.cp = cp, .first = -1, .next = t[v].first};
                t[v].first = c;
            }
            v = c;
        }
        t[v].terminal = true;
    }
    for (int v = 0; v < n; v++) new_name(g, t[v].rule);
    const char *rest = "char* \"\\\"\"";
    for (int v = 0; v < n; v++) {
        sbuf b = {0};
        const char *sep = "";
        if (!t[v].terminal) {
            sb_puts(&b, "\"\\\"\"");
            sep = " | ";
        }
        for (int c = t[v].first; c >= 0; c = t[c].next) {
            const uint32_t cp = t[c].cp;
            const char *e = cp < 0x80 && cp ? strchr(ESC_CHARS, (int)cp) : NULL;
            if (!e && cp < 0x20) continue; /* only a \u escape could spell it: not allowed here */
            sb_puts(&b, sep);
            sep = " | ";
            if (e) /* the escaped spelling, and '/' also plain */
                sb_printf(&b, "( \"\\\\%c\"%s ) %s", ESC_LETTERS[e - ESC_CHARS], cp == '/' ? " | \"/\"" : "",
                          t[c].rule);
            else sb_printf(&b, "[\\U%08X] %s", (unsigned)cp, t[c].rule);
        }
        /* leaving the trie: a plain character that no child starts with */
        sb_printf(&b, "%s[^\"\\\\\\x00-\\x1f", sep);
        for (int c = t[v].first; c >= 0; c = t[c].next)
            if (t[c].cp >= 0x20 && t[c].cp != '"' && t[c].cp != '\\') sb_printf(&b, "\\U%08X", (unsigned)t[c].cp);
        sb_printf(&b, "] %s", rest);
        /* ... or a one-letter escape that no child stands for */
        sbuf letters = {0};
        for (int k = 0; ESC_LETTERS[k]; k++)
            if (!has_child(t, v, (unsigned char)ESC_CHARS[k])) sb_printf(&letters, "%s%c", ESC_LETTERS[k] == '"' || ESC_LETTERS[k] == '\\' ? "\\" : "", ESC_LETTERS[k]);
        if (letters.n) sb_printf(&b, " | \"\\\\\" [%s] %s", letters.p, rest);
        if (letters.oom) b.oom = true;
        free(letters.p);
        if (b.oom) {
            free(b.p);
            free(t);
            return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
        }
        add_rule(g, t[v].rule, &b);
        free(b.p);
    }
    sbuf b = {0};
    sb_printf(&b, "\"\\\"\" %s", t[0].rule);
    new_name(g, name);
    add_rule(g, name, &b);
    free(b.p);
    free(t);
    return true;
}

static bool gen_object(gen *g, const ig_json *s, const char *path, sbuf *body) {
    const ig_json *props = ig_json_get(s, "properties"), *req = ig_json_get(s, "required");
    const ig_json *addl = ig_json_get(s, "additionalProperties");
    if (props && !ig_json_is_object(props))
        return gfail(g, IG_ERR_FORMAT, path, "'properties' must be an object");
    if (req && !ig_json_is_array(req))
        return gfail(g, IG_ERR_FORMAT, path, "'required' must be an array");
    size_t n = ig_json_size(props);
    for (size_t i = 0; i < ig_json_size(req); i++) {
        const ig_json *r = ig_json_at(req, i);
        if (!ig_json_is_string(r)) return gfail(g, IG_ERR_FORMAT, path, "'required' must hold strings");
        if (!ig_json_get(props, r->u.s))
            return gfail(g, IG_ERR_UNSUPPORTED, path, "required property '%.64s' is not among "
                         "the properties", r->u.s);
    }
    char extra[24] = "";
    if (addl && !ig_json_is(addl, IG_JSON_FALSE)) {
        char vname[24] = "value", sub[300];
        if (!ig_json_is_true(addl)) {
            path_join(sub, sizeof sub, path, "additionalProperties", NULL, 0);
            if (!gen_schema(g, addl, sub, vname)) return false;
        }
        char kname[24] = "string";
        if (n > 0 && !gen_other_key(g, props, path, kname)) return false;
        sbuf b = {0};
        sb_printf(&b, "%s ws \":\" ws %s", kname, vname);
        new_name(g, extra);
        add_rule(g, extra, &b);
        free(b.p);
    }
    /* T_k: properties k.. after one was written; H_k: none written yet */
    char (*T)[24] = ig_calloc_array(n + 1, sizeof *T);
    char (*H)[24] = ig_calloc_array(n + 1, sizeof *H);
    char (*KV)[24] = ig_calloc_array(n + 1, sizeof *KV);
    if (!T || !H || !KV) {
        free(T);
        free(H);
        free(KV);
        return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const ig_json *p = &props->u.items[i];
        char sub[300], val[24];
        path_join(sub, sizeof sub, path, "properties", p->key, p->key_len);
        ok = gen_schema(g, p, sub, val);
        if (!ok) break;
        sbuf b = {0}, key = {0};
        ig_json k = {.type = IG_JSON_STRING, .n = p->key_len};
        k.u.s = p->key;
        sb_json(&key, &k, 0);
        if (key.oom) b.oom = true;
        sb_literal(&b, key.p ? key.p : "", key.n);
        sb_printf(&b, " ws \":\" ws %s", val);
        new_name(g, KV[i]);
        add_rule(g, KV[i], &b);
        free(b.p);
        free(key.p);
    }
    for (size_t k = n + 1; ok && k-- > 0;) {
        sbuf t = {0}, h = {0};
        if (k == n) {
            if (extra[0]) {
                sb_printf(&t, "( ws \",\" ws %s )*", extra);
                sb_printf(&h, "( %s ( ws \",\" ws %s )* )?", extra, extra);
            }
        } else {
            bool required = false;
            for (size_t r = 0; r < ig_json_size(req); r++)
                if (!strcmp(req->u.items[r].u.s, props->u.items[k].key)) required = true;
            if (required) {
                sb_printf(&t, "ws \",\" ws %s %s", KV[k], T[k + 1]);
                sb_printf(&h, "%s %s", KV[k], T[k + 1]);
            } else {
                sb_printf(&t, "( ws \",\" ws %s )? %s", KV[k], T[k + 1]);
                sb_printf(&h, "%s %s | %s", KV[k], T[k + 1], H[k + 1]);
            }
        }
        new_name(g, T[k]);
        add_rule(g, T[k], &t);
        new_name(g, H[k]);
        add_rule(g, H[k], &h);
        free(t.p);
        free(h.p);
    }
    if (ok) sb_printf(body, "\"{\" ws %s ws \"}\"", H[0]);
    free(T);
    free(H);
    free(KV);
    return ok;
}

static bool gen_type(gen *g, const ig_json *s, const char *t, const char *path, sbuf *body) {
    if (!strcmp(t, "string")) return gen_string(g, s, path, body);
    if (!strcmp(t, "number")) return gen_number(g, s, path, false, body);
    if (!strcmp(t, "integer")) return gen_number(g, s, path, true, body);
    if (!strcmp(t, "boolean")) return sb_puts(body, "boolean"), true;
    if (!strcmp(t, "null")) return sb_puts(body, "null"), true;
    if (!strcmp(t, "object")) return gen_object(g, s, path, body);
    if (!strcmp(t, "array")) return gen_array(g, s, path, body);
    return gfail(g, IG_ERR_FORMAT, path, "unknown type '%.32s'", t);
}

static bool gen_schema(gen *g, const ig_json *s, const char *path, char name[24]) {
    if (g->failed) return false;
    if (ig_json_is_true(s)) {
        strcpy(name, "value");
        return true;
    }
    if (!ig_json_is_object(s))
        return gfail(g, IG_ERR_FORMAT, path, "a schema must be an object or true");
    if (!check_keywords(g, s, path)) return false;
    if (g->depth >= IG_GRAMMAR_MAX_NESTING)
        return gfail(g, IG_ERR_UNSUPPORTED, path, "schemas nested deeper than %d",
                     IG_GRAMMAR_MAX_NESTING);
    const ig_json *ref = ig_json_get(s, "$ref");
    if (ref) {
        if (!ig_json_is_string(ref)) return gfail(g, IG_ERR_FORMAT, path, "'$ref' must be a string");
        const ig_json *target = resolve_ref(g, ref->u.s, path);
        if (!target) return false;
        for (size_t i = 0; i < g->n_refs; i++)
            if (g->refs[i].node == target) {
                strcpy(name, g->refs[i].name);
                return true;
            }
        if (g->n_refs == g->cap_refs) {
            size_t cap = g->cap_refs ? g->cap_refs * 2 : 8;
            refname *v = ig_realloc_array(g->refs, cap, sizeof *v);
            if (!v) return gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
            g->refs = v;
            g->cap_refs = cap;
        }
        refname *rn = &g->refs[g->n_refs++];
        rn->node = target;
        new_name(g, rn->name);
        strcpy(name, rn->name);
        char tname[24];
        char sub[300];
        snprintf(sub, sizeof sub, "%.200s", ref->u.s);
        g->depth++;
        bool ok = gen_schema(g, target, sub, tname);
        g->depth--;
        if (!ok) return false;
        sbuf b = {0};
        sb_puts(&b, tname);
        add_rule(g, name, &b);
        free(b.p);
        return true;
    }
    g->depth++;
    sbuf body = {0};
    bool ok = true;
    const ig_json *en = ig_json_get(s, "enum"), *cst = ig_json_get(s, "const");
    const ig_json *any = ig_json_get(s, "anyOf"), *all = ig_json_get(s, "allOf");
    const ig_json *type = ig_json_get(s, "type");
    bool nullable = ig_json_is_true(ig_json_get(s, "nullable"));
    if (cst || en) {
        /* with "type" too, only the values of that type validate */
        const ig_json *vals = cst ? cst : en ? en->u.items : NULL;
        size_t n = cst ? 1 : en->n;
        if (!cst && (!ig_json_is_array(en) || en->n == 0)) {
            g->depth--;
            return gfail(g, IG_ERR_FORMAT, path, "'enum' must be a non-empty array");
        }
        ig_json *kept = ig_calloc_array(n, sizeof *kept);
        size_t n_kept = 0;
        if (!kept) ok = gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
        for (size_t i = 0; ok && i < n; i++) {
            int m = type_matches(type, nullable, &vals[i]);
            if (m < 0) ok = gfail(g, IG_ERR_FORMAT, path, "'type' must be a string or an array "
                                  "of strings");
            else if (m) kept[n_kept++] = vals[i];
        }
        if (ok && n_kept == 0)
            ok = gfail(g, IG_ERR_UNSUPPORTED, path, "no value of '%s' has the schema's type",
                       cst ? "const" : "enum");
        if (ok) ok = gen_literals(g, kept, n_kept, path, name);
        free(kept);
        g->depth--;
        return ok;
    }
    if (any) {
        /* siblings of anyOf would have to hold too: refused, not ignored */
        static const char *const sib[] = {"type", "properties", "required", "additionalProperties",
                                          "items", "minItems", "maxItems", "pattern", "format",
                                          "minLength", "maxLength", "minimum", "maximum",
                                          "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
        for (size_t i = 0; i < IG_ARRAY_LEN(sib); i++)
            if (ig_json_get(s, sib[i])) {
                g->depth--;
                return gfail(g, IG_ERR_UNSUPPORTED, path, "'%s' next to 'anyOf' is not supported "
                             "(move it into each branch)", sib[i]);
            }
    }
    if (all) {
        if (!ig_json_is_array(all) || all->n != 1 || type || ig_json_get(s, "properties"))
            ok = gfail(g, IG_ERR_UNSUPPORTED, path, "allOf is only supported with a single "
                       "schema and no sibling type keywords");
        else {
            char sub[300];
            path_join(sub, sizeof sub, path, "allOf/0", NULL, 0);
            ok = gen_schema(g, &all->u.items[0], sub, name);
        }
        g->depth--;
        return ok;
    }
    if (any) {
        if (!ig_json_is_array(any) || any->n == 0) {
            g->depth--;
            return gfail(g, IG_ERR_FORMAT, path, "'anyOf' must be a non-empty array");
        }
        for (size_t i = 0; i < any->n && ok; i++) {
            char sub[300], nm[24];
            snprintf(sub, sizeof sub, "%.200s/anyOf/%zu", path, i);
            ok = gen_schema(g, &any->u.items[i], sub, nm);
            if (ok) {
                if (i) sb_puts(&body, " | ");
                sb_puts(&body, nm);
            }
        }
        if (ok && nullable) sb_puts(&body, " | null");
    } else if (type) {
        size_t nt = ig_json_is_array(type) ? type->n : 1;
        for (size_t i = 0; i < nt && ok; i++) {
            const ig_json *t = ig_json_is_array(type) ? &type->u.items[i] : type;
            if (!ig_json_is_string(t)) {
                ok = gfail(g, IG_ERR_FORMAT, path, "'type' must be a string or an array of strings");
                break;
            }
            if (i) sb_puts(&body, " | ");
            sb_puts(&body, "( ");
            ok = gen_type(g, s, t->u.s, path, &body);
            sb_puts(&body, " )");
        }
        if (ok && nullable) sb_puts(&body, " | null");
    } else if (ig_json_get(s, "properties") || ig_json_get(s, "required") ||
               ig_json_get(s, "additionalProperties")) {
        ok = gen_object(g, s, path, &body);
    } else if (ig_json_get(s, "items")) {
        ok = gen_array(g, s, path, &body);
    } else {
        /* a keyword of one type without "type" constrains only values of that
         * type: refused rather than letting any value through unchecked */
        static const char *const typed[] = {"pattern", "format", "minLength", "maxLength",
                                            "minimum", "maximum", "exclusiveMinimum",
                                            "exclusiveMaximum", "multipleOf", "minItems",
                                            "maxItems"};
        for (size_t i = 0; i < IG_ARRAY_LEN(typed) && ok; i++)
            if (ig_json_get(s, typed[i]))
                ok = gfail(g, IG_ERR_UNSUPPORTED, path, "'%s' without 'type' is not supported "
                           "(give the type it applies to)", typed[i]);
        sb_puts(&body, "value");
    }
    g->depth--;
    if (ok && body.oom) ok = gfail(g, IG_ERR_NO_MEMORY, path, "out of memory");
    if (ok) {
        new_name(g, name);
        add_rule(g, name, &body);
    }
    free(body.p);
    return ok;
}

static ig_status schema_rules(const char *json, size_t len, const char *prefix, bool base,
                              char **gbnf) {
    if (gbnf) *gbnf = NULL;
    if (!json || !gbnf) return ig_fail(IG_ERR_INVALID_ARG, "JSON schema: NULL argument");
    if (strlen(prefix) > 8) return ig_fail(IG_ERR_INVALID_ARG, "JSON schema: prefix too long");
    if (len > IG_GRAMMAR_MAX_TEXT)
        return ig_fail(IG_ERR_INVALID_ARG, "JSON schema: %zu bytes is too long", len);
    ig_json_error jerr;
    ig_json_doc *doc = ig_json_parse(json, len, 0, &jerr);
    if (!doc)
        return ig_fail(ig_json_error_status(&jerr), "JSON schema: malformed JSON at line %d column %d: %s",
                       jerr.line, jerr.column, jerr.text);
    gen g = {.root = ig_json_root(doc), .prefix = prefix};
    char root[24];
    bool ok = gen_schema(&g, g.root, "#", root);
    char *out = NULL;
    if (ok) {
        sbuf all = {0};
        sb_printf(&all, "%sroot ::= %s\n", prefix, root);
        sb_put(&all, g.rules.p ? g.rules.p : "", g.rules.n);
        if (base) sb_puts(&all, BASE_GBNF);
        if (all.oom || g.rules.oom) {
            free(all.p);
            ok = false;
            g.st = ig_fail(IG_ERR_NO_MEMORY, "JSON schema: out of memory");
        } else out = all.p;
    }
    free(g.rules.p);
    free(g.refs);
    ig_json_free(doc);
    if (!ok) return g.st ? g.st : IG_ERR_INTERNAL;
    *gbnf = out;
    return IG_OK;
}

ig_status ig_json_schema_to_gbnf(const char *json, size_t len, char **gbnf) {
    return schema_rules(json, len, "", true, gbnf);
}

ig_status ig_json_schema_to_gbnf_rules(const char *json, size_t len, const char *prefix,
                                       char **gbnf) {
    return schema_rules(json, len, prefix ? prefix : "", false, gbnf);
}

ig_status ig_grammar_from_json_schema(const char *json, size_t len, ig_grammar **out) {
    if (out) *out = NULL;
    char *text = NULL;
    IG_TRY(ig_json_schema_to_gbnf(json, len, &text));
    ig_status st = ig_grammar_from_gbnf(text, strlen(text), "root", out);
    if (st != IG_OK) ig_fail_wrap(st, "JSON schema: the generated grammar does not compile");
    free(text);
    return st;
}
