/* Tokenizer from a Hugging Face tokenizer.json holding a BPE model with
 * byte fallback (the SentencePiece conversion used by Gemma).
 *
 *  - model.vocab gives pieces and ids; "<0xXX>" pieces are byte tokens when
 *    model.byte_fallback is set;
 *  - added_tokens override pieces: special ones become CONTROL (matched only
 *    with parse_special), the others USER_DEFINED (always matched in the raw
 *    text, like HF's added vocabulary);
 *  - model.merges: kept as a (left, right) -> result table with ranks; BPE
 *    applies them lowest rank first, leftmost first on ties, as HF does.
 *    The piece produced by the merge of rank r also gets score -r (its first
 *    merge), for callers that look at scores;
 *  - normalizer Replace(' ' -> U+2581) escapes spaces, Prepend(U+2581) adds a
 *    space prefix; post_processor TemplateProcessing starting with a special
 *    token gives BOS and add_bos.
 * The 'normalized', 'lstrip', 'rstrip' and 'single_word' flags of added
 * tokens are not applied (all false in Gemma 3's file). */
#include "tokenizer/tok_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define U2581 "\xE2\x96\x81"
/* Largest tokenizer.json read (Gemma 3's is 33 MB). */
#define HF_JSON_MAX_BYTES ((size_t)1 << 30)

static bool looks_like_byte(const char *p, size_t n) {
    return n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>';
}

static bool str_is(const json_t *v, const char *s) {
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* One normalizer step (or a Sequence of them). */
static ig_status apply_normalizer(ig_tokenizer *t, const json_t *n, int depth) {
    if (!n || json_is_null(n)) return IG_OK;
    if (!json_is_object(n) || depth > 8)
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: normalizer is not an object");
    const json_t *type = json_object_get(n, "type");
    if (str_is(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: Sequence normalizer without a list");
        size_t i;
        const json_t *v;
        json_array_foreach(list, i, v) IG_TRY(apply_normalizer(t, v, depth + 1));
        return IG_OK;
    }
    if (str_is(type, "Replace")) {
        const json_t *pat = json_object_get(n, "pattern");
        const json_t *s = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        if (str_is(s, " ") && str_is(json_object_get(n, "content"), U2581)) {
            t->escape_spaces = true;
            return IG_OK;
        }
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: only the Replace(' ' -> U+2581) "
                                           "normalizer is supported");
    }
    if (str_is(type, "Prepend")) {
        if (!str_is(json_object_get(n, "prepend"), U2581))
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "tokenizer.json: Prepend of something else than U+2581");
        t->add_space_prefix = true;
        return IG_OK;
    }
    return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported",
                   json_is_string(type) ? json_string_value(type) : "?");
}

/* Only pre-tokenizers that are no-ops after the normalizer are accepted:
 * none, or a Split on ' ' (spaces are already U+2581 by then). */
static ig_status check_pre_tokenizer(const json_t *p) {
    if (!p || json_is_null(p)) return IG_OK;
    if (!json_is_object(p))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: pre_tokenizer is not an object");
    const json_t *type = json_object_get(p, "type");
    const json_t *pat = json_object_get(p, "pattern");
    if (str_is(type, "Split") && json_is_object(pat) && str_is(json_object_get(pat, "String"), " "))
        return IG_OK;
    return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' is not supported",
                   json_is_string(type) ? json_string_value(type) : "?");
}

/* BOS from a TemplateProcessing post-processor whose single-sequence
 * template starts with a special token. */
static void find_template_bos(ig_tokenizer *t, const json_t *pp) {
    if (!json_is_object(pp)) return;
    const json_t *type = json_object_get(pp, "type");
    if (str_is(type, "Sequence")) {
        const json_t *list = json_object_get(pp, "processors");
        size_t i;
        const json_t *v;
        if (json_is_array(list)) json_array_foreach(list, i, v) find_template_bos(t, v);
        return;
    }
    if (!str_is(type, "TemplateProcessing")) return;
    const json_t *single = json_object_get(pp, "single");
    if (!json_is_array(single) || json_array_size(single) == 0) return;
    const json_t *sp = json_object_get(json_array_get(single, 0), "SpecialToken");
    const json_t *id = json_is_object(sp) ? json_object_get(sp, "id") : NULL;
    if (!json_is_string(id)) return;
    int32_t tok = ig_tok_find(t, json_string_value(id), json_string_length(id));
    if (tok >= 0) {
        t->bos = tok;
        t->add_bos = true;
    }
}

static ig_status json_id(const json_t *v, const char *what, int32_t *out) {
    if (!json_is_integer(v))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: %s id is not an integer", what);
    json_int_t i = json_integer_value(v);
    if (i < 0 || i >= IG_TOK_MAX_VOCAB)
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: %s id %lld out of range", what,
                       (long long)i);
    *out = (int32_t)i;
    return IG_OK;
}

/* Splits one merge entry into its two pieces: ["a", "b"] or "a b". */
static ig_status merge_parts(const json_t *m, size_t rank, const char **a, size_t *na,
                             const char **b, size_t *nb) {
    if (json_is_array(m)) {
        const json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
        if (json_array_size(m) != 2 || !json_is_string(x) || !json_is_string(y))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: merge %zu is not a pair of strings",
                           rank);
        *a = json_string_value(x);
        *na = json_string_length(x);
        *b = json_string_value(y);
        *nb = json_string_length(y);
        return IG_OK;
    }
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: merge %zu is not 'a b'", rank);
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = n - *na - 1;
        return IG_OK;
    }
    return ig_fail(IG_ERR_FORMAT, "tokenizer.json: merge %zu has the wrong type", rank);
}

static ig_status apply_merges(ig_tokenizer *t, const json_t *merges) {
    enum { SEEN = 1u << 7 }; /* scratch bit in attr while ranking */
    size_t n_merges = json_array_size(merges);
    if (n_merges > ((size_t)1 << 24)) /* ranks must stay exact as float scores */
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: %zu merges is too many", n_merges);
    IG_TRY(ig_tok_merges_alloc(t, n_merges));
    size_t cap = (size_t)t->max_piece_len * 2 + 1;
    char *cat = ig_malloc(cap);
    if (!cat) return IG_ERR_NO_MEMORY;
    ig_status st = IG_OK;
    size_t rank;
    const json_t *m;
    json_array_foreach(merges, rank, m) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        st = merge_parts(m, rank, &a, &na, &b, &nb);
        if (st != IG_OK) break;
        int32_t ia = ig_tok_find(t, a, na), ib = ig_tok_find(t, b, nb);
        if (ia < 0 || ib < 0) {
            st = ig_fail(IG_ERR_FORMAT,
                         "tokenizer.json: merge %zu uses a piece not in the vocabulary", rank);
            break;
        }
        /* both are pieces, so na, nb <= max_piece_len and cat is large enough */
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        int32_t id = ig_tok_find(t, cat, na + nb);
        if (id < 0) {
            st = ig_fail(IG_ERR_FORMAT,
                         "tokenizer.json: merge %zu gives a piece not in the vocabulary", rank);
            break;
        }
        st = ig_tok_merge_add(t, ia, ib, (int32_t)rank, id);
        if (st != IG_OK) break;
        if (t->attr[id] & SEEN) continue;
        t->attr[id] |= SEEN;
        t->score[id] = -(float)rank;
        int ty = t->type[id];
        if (ty == IG_TOKEN_NORMAL || ty == IG_TOKEN_USER_DEFINED) t->attr[id] |= IG_TOKA_MERGEABLE;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) t->attr[i] &= (uint8_t)~SEEN;
    free(cat);
    return st;
}

static ig_status load_json(const json_t *root, ig_tokenizer **out) {
    if (!json_is_object(root)) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: not a JSON object");
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: no 'model' object");
    const json_t *mtype = json_object_get(model, "type");
    if (mtype && !str_is(mtype, "BPE"))
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "tokenizer.json: model type '%s' is not supported (BPE only)",
                       json_is_string(mtype) ? json_string_value(mtype) : "?");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    if (!json_is_array(merges))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: model.merges is not an array");
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: added_tokens is not an array");
    const json_t *bf = json_object_get(model, "byte_fallback");
    bool byte_fallback = json_is_true(bf);

    /* vocabulary size: largest id + 1 */
    int32_t max_id = -1, id;
    const char *key;
    size_t key_len;
    json_t *val;
    json_object_keylen_foreach((json_t *)vocab, key, key_len, val) {
        IG_TRY(json_id(val, "vocab", &id));
        if (id > max_id) max_id = id;
    }
    size_t i;
    const json_t *a;
    if (json_is_array(added)) {
        json_array_foreach(added, i, a) {
            if (!json_is_object(a))
                return ig_fail(IG_ERR_FORMAT, "tokenizer.json: added token %zu is not an object",
                               i);
            IG_TRY(json_id(json_object_get(a, "id"), "added token", &id));
            if (id > max_id) max_id = id;
        }
    }
    if (max_id < 0) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: empty vocabulary");

    ig_tokenizer *t;
    IG_TRY(ig_tok_alloc(max_id + 1, &t));
    t->escape_spaces = false;
    t->add_space_prefix = false;
    t->add_bos = false;
    ig_status st = IG_OK;
    json_object_keylen_foreach((json_t *)vocab, key, key_len, val) {
        id = (int32_t)json_integer_value(val);
        if (t->piece[id]) {
            st = ig_fail(IG_ERR_FORMAT, "tokenizer.json: id %d is used twice in model.vocab",
                         (int)id);
            break;
        }
        st = ig_tok_set_piece(t, id, key, key_len);
        if (st != IG_OK) break;
        t->type[id] = IG_TOKEN_NORMAL;
        if (byte_fallback && looks_like_byte(key, key_len)) t->type[id] = IG_TOKEN_BYTE;
    }
    if (st == IG_OK && json_is_array(added)) {
        json_array_foreach(added, i, a) {
            const json_t *content = json_object_get(a, "content");
            if (!json_is_string(content)) {
                st = ig_fail(IG_ERR_FORMAT, "tokenizer.json: added token %zu has no content string",
                             i);
                break;
            }
            id = (int32_t)json_integer_value(json_object_get(a, "id"));
            st = ig_tok_set_piece(t, id, json_string_value(content), json_string_length(content));
            if (st != IG_OK) break;
            t->type[id] = json_is_true(json_object_get(a, "special")) ? IG_TOKEN_CONTROL
                                                                      : IG_TOKEN_USER_DEFINED;
        }
    }
    if (st == IG_OK) st = apply_normalizer(t, json_object_get(root, "normalizer"), 0);
    if (st == IG_OK) st = check_pre_tokenizer(json_object_get(root, "pre_tokenizer"));
    if (st == IG_OK) st = ig_tok_finalize(t);
    if (st == IG_OK) st = apply_merges(t, merges);
    if (st == IG_OK) {
        const json_t *unk = json_object_get(model, "unk_token");
        if (json_is_string(unk))
            t->unk = ig_tok_find(t, json_string_value(unk), json_string_length(unk));
        find_template_bos(t, json_object_get(root, "post_processor"));
        if (t->bos < 0) t->bos = ig_token_lookup(t, "<bos>");
        t->eos = ig_token_lookup(t, "<eos>");
        t->pad = ig_token_lookup(t, "<pad>");
    }
    if (st != IG_OK) {
        ig_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}

ig_status ig_tokenizer_from_hf_json_buf(const char *text, size_t len, ig_tokenizer **out) {
    if (out) *out = NULL;
    if (!out || (!text && len))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_tokenizer_from_hf_json_buf: NULL argument");
    json_error_t err;
    json_t *root = json_loadb(text ? text : "", len, 0, &err);
    if (!root)
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: line %d column %d: %s", err.line, err.column,
                       err.text);
    ig_status st = load_json(root, out);
    json_decref(root);
    return st;
}

ig_status ig_tokenizer_from_hf_json(const char *path, ig_tokenizer **out) {
    if (out) *out = NULL;
    if (!path || !out)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_tokenizer_from_hf_json: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    ig_status st = ig_file_read_all(path, HF_JSON_MAX_BYTES, &buf, &len);
    if (st == IG_OK) st = ig_tokenizer_from_hf_json_buf(buf, len, out);
    free(buf);
    if (st != IG_OK) ig_fail_wrap(st, "%s", path);
    return st;
}
