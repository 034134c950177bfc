/* Tokenizer from GGUF metadata (tokenizer.ggml.*), as written by llama.cpp's
 * convert_hf_to_gguf.py for SentencePiece ("llama") vocabularies. */
#include "tokenizer/tok_internal.h"

#include <string.h>

/* Reads an optional token id key into *id (left alone when absent). */
static ig_status gguf_token_id(const gguf_file *f, const char *key, int32_t *id) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return IG_OK;
    int64_t v;
    if (!gguf_get_i64(f, key, &v)) return ig_fail(IG_ERR_FORMAT, "gguf: %s is not an integer", key);
    if (v < -1 || v > INT32_MAX)
        return ig_fail(IG_ERR_FORMAT, "gguf: %s = %lld is out of range", key, (long long)v);
    *id = (int32_t)v;
    return IG_OK;
}

static ig_status gguf_flag(const gguf_file *f, const char *key, bool *flag) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return IG_OK;
    if (!gguf_get_bool(f, key, flag)) return ig_fail(IG_ERR_FORMAT, "gguf: %s is not a bool", key);
    return IG_OK;
}

static int looks_like_byte_piece(const char *p, size_t n) {
    return n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>';
}

static ig_status load(const gguf_file *f, ig_tokenizer **out) {
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return ig_fail(IG_ERR_FORMAT, "gguf: tokenizer.ggml.model is missing or not a string");
    if (model.len != 5 || memcmp(model.ptr, "llama", 5) != 0)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "gguf: tokenizer model '%.*s' is not supported (only SentencePiece 'llama')",
                       (int)IG_MIN(model.len, 64), model.ptr);

    const gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING ||
        !tokens->arr_strs)
        return ig_fail(IG_ERR_FORMAT,
                       "gguf: tokenizer.ggml.tokens is missing or not a string array");
    uint64_t n = tokens->arr_count;
    if (n == 0 || n > IG_TOK_MAX_VOCAB)
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: tokenizer.ggml.tokens has %llu entries (1..%d)",
                       (unsigned long long)n, IG_TOK_MAX_VOCAB);

    const gguf_kv *scores = gguf_find(f, "tokenizer.ggml.scores");
    if (scores && (scores->type != GGUF_TYPE_ARRAY || scores->arr_type != GGUF_TYPE_FLOAT32 ||
                   scores->arr_count != n || !scores->arr_data))
        return ig_fail(IG_ERR_FORMAT, "gguf: tokenizer.ggml.scores is not an f32 array of %llu",
                       (unsigned long long)n);
    const gguf_kv *types = gguf_find(f, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_TYPE_ARRAY || types->arr_type != GGUF_TYPE_INT32 ||
                  types->arr_count != n || !types->arr_data))
        return ig_fail(IG_ERR_FORMAT, "gguf: tokenizer.ggml.token_type is not an i32 array of %llu",
                       (unsigned long long)n);

    ig_tokenizer *t;
    IG_TRY(ig_tok_alloc((int32_t)n, &t));
    ig_status st = IG_OK;
    for (int32_t i = 0; i < (int32_t)n && st == IG_OK; i++) {
        const gguf_str *s = &tokens->arr_strs[i];
        st = ig_tok_set_piece(t, i, s->ptr, s->len);
        if (st != IG_OK) break;
        if (scores) {
            /* little-endian f32 inside the mapping, maybe unaligned */
            const uint8_t *p = (const uint8_t *)scores->arr_data + (size_t)i * 4;
            uint32_t bits =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&t->score[i], &bits, 4);
        }
        int ty = IG_TOKEN_NORMAL;
        if (types) {
            const uint8_t *p = (const uint8_t *)types->arr_data + (size_t)i * 4;
            uint32_t u =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            int32_t v;
            memcpy(&v, &u, 4);
            if (v < IG_TOKEN_NORMAL || v > IG_TOKEN_BYTE) {
                st = ig_fail(IG_ERR_FORMAT, "gguf: token %d has type %d (expected 1..6)", (int)i,
                             (int)v);
                break;
            }
            ty = v;
        } else if (looks_like_byte_piece(s->ptr, s->len)) {
            ty = IG_TOKEN_BYTE;
        }
        t->type[i] = (uint8_t)ty;
        if (ty == IG_TOKEN_NORMAL || ty == IG_TOKEN_USER_DEFINED) t->attr[i] |= IG_TOKA_MERGEABLE;
    }
    /* SentencePiece defaults as in llama.cpp: BOS and a space prefix. */
    t->add_bos = true;
    t->add_space_prefix = true;
    t->escape_spaces = true;
    if (st == IG_OK) st = gguf_token_id(f, "tokenizer.ggml.bos_token_id", &t->bos);
    if (st == IG_OK) st = gguf_token_id(f, "tokenizer.ggml.eos_token_id", &t->eos);
    if (st == IG_OK) st = gguf_token_id(f, "tokenizer.ggml.unknown_token_id", &t->unk);
    if (st == IG_OK) st = gguf_token_id(f, "tokenizer.ggml.padding_token_id", &t->pad);
    if (st == IG_OK) st = gguf_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos);
    if (st == IG_OK) st = gguf_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (st == IG_OK) st = ig_tok_finalize(t);
    if (st != IG_OK) {
        ig_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}

ig_status ig_tokenizer_from_gguf(const gguf_file *f, ig_tokenizer **out) {
    if (out) *out = NULL;
    if (!f || !out) return ig_fail(IG_ERR_INVALID_ARG, "ig_tokenizer_from_gguf: NULL argument");
    ig_status st = load(f, out);
    if (st != IG_OK) ig_fail_wrap(st, "tokenizer");
    return st;
}
