/* A small JSON reader for the files a model comes with (config.json,
 * safetensors headers and index, tokenizer.json, tokenizer_config.json), so
 * that the library needs no JSON dependency. A parsed document is read-only
 * and lives in one arena, freed at once. Strings are valid UTF-8 without NUL
 * bytes (a "\u0000" escape is refused), integers are those without fraction
 * or exponent that fit a long long; object members keep their file order. */
#ifndef IG_JSON_H
#define IG_JSON_H

#include "ignis.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    IG_JSON_NULL,
    IG_JSON_FALSE,
    IG_JSON_TRUE,
    IG_JSON_INTEGER,
    IG_JSON_REAL,
    IG_JSON_STRING,
    IG_JSON_ARRAY,
    IG_JSON_OBJECT,
} ig_json_type;

typedef struct ig_json ig_json;
struct ig_json {
    ig_json_type type;
    const char *key; /* the member's name inside an object, else NULL */
    size_t key_len;
    size_t n; /* string bytes, array items, object members */
    union {
        long long i;
        double d;
        const char *s;        /* NUL-terminated */
        const ig_json *items; /* n items or members */
    } u;
};

typedef struct ig_json_doc ig_json_doc;

typedef struct {
    int line, column; /* 1-based, where parsing stopped */
    char text[160];
    bool no_memory; /* an allocation failed: the text may be well formed */
} ig_json_error;

/* The status a failed parse stands for: IG_ERR_NO_MEMORY or IG_ERR_FORMAT. */
static inline ig_status ig_json_error_status(const ig_json_error *e) {
    return e->no_memory ? IG_ERR_NO_MEMORY : IG_ERR_FORMAT;
}

/* Refuse objects that name a member twice. */
#define IG_JSON_REJECT_DUPLICATES 1u

/* Parses text[0..len) (any top-level value; nothing may follow it but white
 * space). NULL on malformed input (err says why) or on allocation failure. */
ig_json_doc *ig_json_parse(const char *text, size_t len, unsigned flags, ig_json_error *err);
const ig_json *ig_json_root(const ig_json_doc *doc);
void ig_json_free(ig_json_doc *doc);

/* Accessors accept NULL and values of any type, answering NULL/0/false. */
static inline bool ig_json_is(const ig_json *v, ig_json_type t) { return v && v->type == t; }
static inline bool ig_json_is_null(const ig_json *v) { return ig_json_is(v, IG_JSON_NULL); }
static inline bool ig_json_is_true(const ig_json *v) { return ig_json_is(v, IG_JSON_TRUE); }
static inline bool ig_json_is_integer(const ig_json *v) { return ig_json_is(v, IG_JSON_INTEGER); }
static inline bool ig_json_is_real(const ig_json *v) { return ig_json_is(v, IG_JSON_REAL); }
static inline bool ig_json_is_number(const ig_json *v) {
    return ig_json_is_integer(v) || ig_json_is_real(v);
}
static inline bool ig_json_is_string(const ig_json *v) { return ig_json_is(v, IG_JSON_STRING); }
static inline bool ig_json_is_array(const ig_json *v) { return ig_json_is(v, IG_JSON_ARRAY); }
static inline bool ig_json_is_object(const ig_json *v) { return ig_json_is(v, IG_JSON_OBJECT); }

static inline const char *ig_json_str(const ig_json *v) {
    return ig_json_is_string(v) ? v->u.s : NULL;
}
static inline size_t ig_json_str_len(const ig_json *v) { return ig_json_is_string(v) ? v->n : 0; }
static inline long long ig_json_int(const ig_json *v) { return ig_json_is_integer(v) ? v->u.i : 0; }
static inline double ig_json_real(const ig_json *v) { return ig_json_is_real(v) ? v->u.d : 0.0; }
static inline double ig_json_number(const ig_json *v) {
    return ig_json_is_integer(v) ? (double)v->u.i : ig_json_real(v);
}
/* Items of an array or members of an object (0 for anything else). */
static inline size_t ig_json_size(const ig_json *v) {
    return ig_json_is_array(v) || ig_json_is_object(v) ? v->n : 0;
}
/* The i-th item or member (a member's name is its ->key), or NULL. */
static inline const ig_json *ig_json_at(const ig_json *v, size_t i) {
    return i < ig_json_size(v) ? &v->u.items[i] : NULL;
}
/* The object's member named key (the last one, should it repeat), or NULL. */
const ig_json *ig_json_get(const ig_json *obj, const char *key);

#endif
