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
#include "core/json.h"

#include <stdlib.h>
#include <string.h>

#define U2581 "\xE2\x96\x81"
/* Largest tokenizer.json read (Gemma 3's is 33 MB). */
#define HF_JSON_MAX_BYTES ((size_t)1 << 30)

static bool looks_like_byte(const char *p, size_t n) {
    return n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>';
}

static bool str_is(const ig_json *v, const char *s) {
    return ig_json_is_string(v) && strcmp(ig_json_str(v), s) == 0;
}

/* One normalizer step (or a Sequence of them). */
static ig_status apply_normalizer(ig_tokenizer *t, const ig_json *n, int depth) {
    if (!n || ig_json_is_null(n)) return IG_OK;
    if (!ig_json_is_object(n) || depth > 8)
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: normalizer is not an object");
    const ig_json *type = ig_json_get(n, "type");
    if (str_is(type, "Sequence")) {
        const ig_json *list = ig_json_get(n, "normalizers");
        if (!ig_json_is_array(list))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: Sequence normalizer without a list");
        for (size_t i = 0; i < ig_json_size(list); i++)
            IG_TRY(apply_normalizer(t, ig_json_at(list, i), depth + 1));
        return IG_OK;
    }
    if (str_is(type, "Replace")) {
        const ig_json *pat = ig_json_get(n, "pattern");
        const ig_json *s = ig_json_is_object(pat) ? ig_json_get(pat, "String") : NULL;
        if (str_is(s, " ") && str_is(ig_json_get(n, "content"), U2581)) {
            t->escape_spaces = true;
            return IG_OK;
        }
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: only the Replace(' ' -> U+2581) "
                                           "normalizer is supported");
    }
    if (str_is(type, "Prepend")) {
        if (!str_is(ig_json_get(n, "prepend"), U2581))
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "tokenizer.json: Prepend of something else than U+2581");
        t->add_space_prefix = true;
        return IG_OK;
    }
    return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported",
                   ig_json_is_string(type) ? ig_json_str(type) : "?");
}

/* Only pre-tokenizers that are no-ops after the normalizer are accepted:
 * none, or a Split on ' ' (spaces are already U+2581 by then). */
static ig_status check_pre_tokenizer(const ig_json *p) {
    if (!p || ig_json_is_null(p)) return IG_OK;
    if (!ig_json_is_object(p))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: pre_tokenizer is not an object");
    const ig_json *type = ig_json_get(p, "type");
    const ig_json *pat = ig_json_get(p, "pattern");
    if (str_is(type, "Split") && ig_json_is_object(pat) && str_is(ig_json_get(pat, "String"), " "))
        return IG_OK;
    return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer '%s' is not supported",
                   ig_json_is_string(type) ? ig_json_str(type) : "?");
}

/* BOS from a TemplateProcessing post-processor whose single-sequence
 * template starts with a special token. */
static void find_template_bos(ig_tokenizer *t, const ig_json *pp) {
    if (!ig_json_is_object(pp)) return;
    const ig_json *type = ig_json_get(pp, "type");
    if (str_is(type, "Sequence")) {
        const ig_json *list = ig_json_get(pp, "processors");
        for (size_t i = 0; i < ig_json_size(list); i++) find_template_bos(t, ig_json_at(list, i));
        return;
    }
    if (!str_is(type, "TemplateProcessing")) return;
    const ig_json *single = ig_json_get(pp, "single");
    if (!ig_json_is_array(single) || ig_json_size(single) == 0) return;
    const ig_json *sp = ig_json_get(ig_json_at(single, 0), "SpecialToken");
    const ig_json *id = ig_json_is_object(sp) ? ig_json_get(sp, "id") : NULL;
    if (!ig_json_is_string(id)) return;
    int32_t tok = ig_tok_find(t, ig_json_str(id), ig_json_str_len(id));
    if (tok >= 0) {
        t->bos = tok;
        t->add_bos = true;
    }
}

static ig_status json_id(const ig_json *v, const char *what, int32_t *out) {
    if (!ig_json_is_integer(v))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: %s id is not an integer", what);
    long long i = ig_json_int(v);
    if (i < 0 || i >= IG_TOK_MAX_VOCAB)
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: %s id %lld out of range", what,
                       (long long)i);
    *out = (int32_t)i;
    return IG_OK;
}

/* Splits one merge entry into its two pieces: ["a", "b"] or "a b". */
static ig_status merge_parts(const ig_json *m, size_t rank, const char **a, size_t *na,
                             const char **b, size_t *nb) {
    if (ig_json_is_array(m)) {
        const ig_json *x = ig_json_at(m, 0), *y = ig_json_at(m, 1);
        if (ig_json_size(m) != 2 || !ig_json_is_string(x) || !ig_json_is_string(y))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: merge %zu is not a pair of strings",
                           rank);
        *a = ig_json_str(x);
        *na = ig_json_str_len(x);
        *b = ig_json_str(y);
        *nb = ig_json_str_len(y);
        return IG_OK;
    }
    if (ig_json_is_string(m)) {
        const char *s = ig_json_str(m);
        size_t n = ig_json_str_len(m);
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

static ig_status apply_merges(ig_tokenizer *t, const ig_json *merges) {
    enum { SEEN = 1u << 7 }; /* scratch bit in attr while ranking */
    size_t n_merges = ig_json_size(merges);
    if (n_merges > ((size_t)1 << 24)) /* ranks must stay exact as float scores */
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer.json: %zu merges is too many", n_merges);
    IG_TRY(ig_tok_merges_alloc(t, n_merges));
    size_t cap = (size_t)t->max_piece_len * 2 + 1;
    char *cat = ig_malloc(cap);
    if (!cat) return IG_ERR_NO_MEMORY;
    ig_status st = IG_OK;
    for (size_t rank = 0; rank < n_merges; rank++) {
        const ig_json *m = ig_json_at(merges, rank);
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

static ig_status load_json(const ig_json *root, ig_tokenizer **out) {
    if (!ig_json_is_object(root)) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: not a JSON object");
    const ig_json *model = ig_json_get(root, "model");
    if (!ig_json_is_object(model)) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: no 'model' object");
    const ig_json *mtype = ig_json_get(model, "type");
    if (mtype && !str_is(mtype, "BPE"))
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "tokenizer.json: model type '%s' is not supported (BPE only)",
                       ig_json_is_string(mtype) ? ig_json_str(mtype) : "?");
    const ig_json *vocab = ig_json_get(model, "vocab");
    const ig_json *merges = ig_json_get(model, "merges");
    if (!ig_json_is_object(vocab))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    if (!ig_json_is_array(merges))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: model.merges is not an array");
    const ig_json *added = ig_json_get(root, "added_tokens");
    if (added && !ig_json_is_null(added) && !ig_json_is_array(added))
        return ig_fail(IG_ERR_FORMAT, "tokenizer.json: added_tokens is not an array");
    const ig_json *bf = ig_json_get(model, "byte_fallback");
    bool byte_fallback = ig_json_is_true(bf);

    /* vocabulary size: largest id + 1 */
    int32_t max_id = -1, id;
    size_t n_vocab = ig_json_size(vocab);
    for (size_t v = 0; v < n_vocab; v++) {
        IG_TRY(json_id(ig_json_at(vocab, v), "vocab", &id));
        if (id > max_id) max_id = id;
    }
    size_t n_added = ig_json_size(added);
    for (size_t i = 0; i < n_added; i++) {
        const ig_json *a = ig_json_at(added, i);
        if (!ig_json_is_object(a))
            return ig_fail(IG_ERR_FORMAT, "tokenizer.json: added token %zu is not an object", i);
        IG_TRY(json_id(ig_json_get(a, "id"), "added token", &id));
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) return ig_fail(IG_ERR_FORMAT, "tokenizer.json: empty vocabulary");

    ig_tokenizer *t;
    IG_TRY(ig_tok_alloc(max_id + 1, &t));
    t->escape_spaces = false;
    t->add_space_prefix = false;
    t->add_bos = false;
    ig_status st = IG_OK;
    for (size_t v = 0; v < n_vocab; v++) {
        const ig_json *val = ig_json_at(vocab, v);
        const char *key = val->key;
        size_t key_len = val->key_len;
        id = (int32_t)ig_json_int(val);
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
    for (size_t i = 0; st == IG_OK && i < n_added; i++) {
        const ig_json *a = ig_json_at(added, i);
        const ig_json *content = ig_json_get(a, "content");
        if (!ig_json_is_string(content)) {
            st = ig_fail(IG_ERR_FORMAT, "tokenizer.json: added token %zu has no content string", i);
            break;
        }
        id = (int32_t)ig_json_int(ig_json_get(a, "id"));
        st = ig_tok_set_piece(t, id, ig_json_str(content), ig_json_str_len(content));
        if (st != IG_OK) break;
        t->type[id] = ig_json_is_true(ig_json_get(a, "special")) ? IG_TOKEN_CONTROL
                                                                  : IG_TOKEN_USER_DEFINED;
    }
    if (st == IG_OK) st = apply_normalizer(t, ig_json_get(root, "normalizer"), 0);
    if (st == IG_OK) st = check_pre_tokenizer(ig_json_get(root, "pre_tokenizer"));
    if (st == IG_OK) st = ig_tok_finalize(t);
    if (st == IG_OK) st = apply_merges(t, merges);
    if (st == IG_OK) {
        const ig_json *unk = ig_json_get(model, "unk_token");
        if (ig_json_is_string(unk))
            t->unk = ig_tok_find(t, ig_json_str(unk), ig_json_str_len(unk));
        find_template_bos(t, ig_json_get(root, "post_processor"));
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
    ig_json_error err;
    ig_json_doc *doc = ig_json_parse(text ? text : "", len, 0, &err);
    if (!doc)
        return ig_fail(ig_json_error_status(&err), "tokenizer.json: line %d column %d: %s", err.line, err.column,
                       err.text);
    ig_status st = load_json(ig_json_root(doc), out);
    ig_json_free(doc);
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
