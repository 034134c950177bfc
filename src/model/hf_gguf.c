/* GGUF metadata of a Hugging Face Gemma 3 checkpoint (see hf_gguf.h). */
#include "model/hf_gguf.h"

#include "core/json.h"
#include "tokenizer/sp_model.h"
#include "tokenizer/tok_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_TOKCFG ((size_t)64 << 20)

bool hf_gguf_is_norm(const char *name) {
    static const char suffix[] = "norm.weight";
    const size_t n = strlen(name), s = sizeof suffix - 1;
    return n >= s && !strcmp(name + n - s, suffix);
}

static ig_status add_u32(gguf_writer *w, const char *key, int v) {
    if (v < 0) return ig_fail(IG_ERR_INVALID_ARG, "%s: negative value %d", key, v);
    return gguf_writer_add_u32(w, key, (uint32_t)v);
}

/* llama.cpp's gemma3 loader derives the attention scale from the shapes
 * (src/llama-model.cpp): 1/sqrt(n_embd/n_head) for the 62-layer model,
 * 1/sqrt(head_dim) otherwise. */
static double derived_attn_scale(const ig_hparams *hp) {
    if (hp->n_layer == 62) return 1.0 / sqrt((double)hp->n_embd / (double)hp->n_head);
    return 1.0 / sqrt((double)hp->head_dim);
}

/* gguf-py's size_label for n parameters (model_weight_count_rounded_notation
 * with 2 digits): "268M", "1.0B", "27B". */
static void size_label(uint64_t n, char *out, size_t cap) {
    double v = (double)n;
    const char *suffix = "K";
    if (v > 1e12) v *= 1e-12, suffix = "T";
    else if (v > 1e9) v *= 1e-9, suffix = "B";
    else if (v > 1e6) v *= 1e-6, suffix = "M";
    else v *= 1e-3;
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(v)); /* Python's round(): ties to even */
    size_t nd = strlen(digits), lead = 0;
    while (lead < nd && digits[lead] == '0') lead++;
    const int fix = nd - lead >= 2 ? 0 : (int)(2 - (nd - lead));
    snprintf(out, cap, "%.*f%s", fix, v, suffix);
}


/* ---- the vocabulary (tokenizer.model), as _create_vocab_sentencepiece ------ */

typedef struct vocab {
    int32_t n;
    gguf_str *tokens;
    float *scores;
    int32_t *types;
    char *pad_text; /* "[PAD<i>]" of every slot, 16 bytes each */
} vocab;

static void vocab_free(vocab *v) {
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->pad_text);
}

/* llama.cpp's does_token_look_special: added tokens that should be
 * control tokens although not marked special. */
static bool looks_special(const char *t, size_t n) {
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>")) return true;
    return n >= 8 && !strncmp(t, "<unused", 7) && t[n - 1] == '>';
}

/* A JSON string member, or the "content" of an object member (the two forms
 * of tokenizer_config.json's special tokens). */
static const char *token_text(const ig_json *v) {
    if (ig_json_is_object(v)) v = ig_json_get(v, "content");
    return ig_json_is_string(v) ? ig_json_str(v) : NULL;
}

static int32_t find_token(const vocab *v, const char *text) {
    const size_t n = strlen(text);
    for (int32_t i = 0; i < v->n; i++)
        if (v->tokens[i].len == n && !memcmp(v->tokens[i].ptr, text, n)) return i;
    return -1;
}

/* Overrides from tokenizer_config.json's added_tokens_decoder (special ones
 * and those that look special become CONTROL, others USER_DEFINED with
 * U+2581 turned back into spaces; score -1000). The strings live in doc. */
static ig_status apply_added_tokens(vocab *v, const ig_json *root, char **owned, size_t *n_owned) {
    const ig_json *dec = ig_json_get(root, "added_tokens_decoder");
    for (size_t i = 0; i < ig_json_size(dec); i++) {
        const ig_json *e = ig_json_at(dec, i);
        char *end = NULL;
        const long id = strtol(e->key, &end, 10);
        const char *content = token_text(e);
        if (!content || end == e->key || *end || id < 0 || id >= v->n) continue;
        const size_t len = strlen(content);
        if (ig_json_is_true(ig_json_get(e, "special")) || looks_special(content, len)) {
            v->types[id] = IG_SP_CONTROL;
            v->tokens[id] = (gguf_str){content, len};
        } else {
            char *t = malloc(len + 1), *q = t;
            if (!t) return IG_ERR_NO_MEMORY;
            for (size_t k = 0; k < len;)
                if (k + 3 <= len && !memcmp(content + k, "\xe2\x96\x81", 3)) *q++ = ' ', k += 3;
                else *q++ = content[k++];
            *q = '\0';
            owned[(*n_owned)++] = t;
            v->types[id] = IG_SP_USER_DEFINED;
            v->tokens[id] = (gguf_str){t, (size_t)(q - t)};
        }
        v->scores[id] = -1000.0f;
    }
    return IG_OK;
}

/* gguf-py's SpecialVocab, the parts Gemma's files use: the ids of the
 * special tokens named in tokenizer_config.json, and its add_bos_token /
 * add_eos_token. */
/* The SentencePiece model's keys: its kind and V pieces, scores and types. */
static ig_status add_vocab_arrays(gguf_writer *w, const vocab *v, int V) {
    ig_status st;
    if ((st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama")) != IG_OK ||
        (st = gguf_writer_add_str(w, "tokenizer.ggml.pre", "default")) != IG_OK ||
        (st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", v->tokens, (uint64_t)V)) != IG_OK ||
        (st = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, (uint64_t)V)) != IG_OK)
        return st;
    return gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, (uint64_t)V);
}

static ig_status add_special(gguf_writer *w, const vocab *v, const ig_json *root) {
    static const char *const kinds[][2] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},     {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"sep_token", "tokenizer.ggml.seperator_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"}, {"cls_token", "tokenizer.ggml.cls_token_id"},
        {"mask_token", "tokenizer.ggml.mask_token_id"},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(kinds); i++) {
        const char *t = token_text(ig_json_get(root, kinds[i][0]));
        const int32_t id = t ? find_token(v, t) : -1;
        if (id >= 0) IG_TRY(gguf_writer_add_u32(w, kinds[i][1], (uint32_t)id));
    }
    static const char *const adds[][2] = {
        {"add_bos_token", "tokenizer.ggml.add_bos_token"},
        {"add_eos_token", "tokenizer.ggml.add_eos_token"},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(adds); i++) {
        const ig_json *b = ig_json_get(root, adds[i][0]);
        if (ig_json_is(b, IG_JSON_TRUE) || ig_json_is(b, IG_JSON_FALSE))
            IG_TRY(gguf_writer_add_bool(w, adds[i][1], ig_json_is_true(b)));
    }
    return IG_OK;
}

static ig_status add_vocab(const hf_model *m, const char *dir, const char *sp_path, gguf_writer *w) {
    const int32_t V = m->hparams.n_vocab;
    if (V <= 0) return ig_fail(IG_ERR_FORMAT, "no vocab_size");
    ig_sp_model sp;
    IG_TRY(ig_sp_model_read(sp_path, &sp));
    vocab v = {.n = V};
    v.tokens = ig_calloc_array((size_t)V, sizeof *v.tokens);
    v.scores = ig_calloc_array((size_t)V, sizeof *v.scores);
    v.types = ig_calloc_array((size_t)V, sizeof *v.types);
    v.pad_text = ig_calloc_array((size_t)V, 16);
    char *cfg_text = NULL, *cfg_path = ig_path_join(dir, "tokenizer_config.json");
    ig_json_doc *doc = NULL;
    char **owned = NULL;
    size_t n_owned = 0;
    ig_status st = IG_OK;
    if (!v.tokens || !v.scores || !v.types || !v.pad_text || !cfg_path) {
        st = IG_ERR_NO_MEMORY;
        goto out;
    }
    for (int32_t i = 0; i < V; i++) {
        char *p = v.pad_text + 16 * (size_t)i;
        const int n = snprintf(p, 16, "[PAD%d]", (int)i);
        v.tokens[i] = (gguf_str){p, (size_t)n};
        v.scores[i] = -10000.0f;
        v.types[i] = IG_SP_UNUSED;
    }
    for (size_t i = 0; i < sp.n_pieces && i < (size_t)V; i++) {
        const ig_sp_piece *pc = &sp.pieces[i];
        v.tokens[i] = (gguf_str){pc->text, pc->len};
        v.scores[i] = pc->score;
        /* SentencePieceProcessor's IsUnknown / IsControl / IsUnused / IsByte */
        v.types[i] = pc->type == IG_SP_UNKNOWN || pc->type == IG_SP_CONTROL || pc->type == IG_SP_UNUSED ||
                             pc->type == IG_SP_BYTE
                         ? pc->type
                         : IG_SP_NORMAL;
    }
    const ig_json *root = NULL;
    if (ig_path_is_file(cfg_path)) {
        size_t len = 0;
        if ((st = ig_file_read_all(cfg_path, HF_MAX_TOKCFG, &cfg_text, &len)) != IG_OK) goto out;
        ig_json_error err;
        doc = ig_json_parse(cfg_text, len, 0, &err);
        if (!doc) {
            st = ig_fail(IG_ERR_FORMAT, "%s:%d: %s", cfg_path, err.line, err.text);
            goto out;
        }
        root = ig_json_root(doc);
        owned = ig_calloc_array(ig_json_size(ig_json_get(root, "added_tokens_decoder")) + 1, sizeof *owned);
        if (!owned) {
            st = IG_ERR_NO_MEMORY;
            goto out;
        }
        if ((st = apply_added_tokens(&v, root, owned, &n_owned)) != IG_OK) goto out;
    }
    if ((st = add_vocab_arrays(w, &v, V)) != IG_OK) goto out;
    if (root && (st = add_special(w, &v, root)) != IG_OK) goto out;
    st = gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false); /* Gemma3Model.set_vocab */
out:
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ig_json_free(doc);
    free(cfg_text);
    free(cfg_path);
    vocab_free(&v);
    ig_sp_model_free(&sp);
    return st;
}

/* ---- the vocabulary from tokenizer.json alone ------------------------------
 * llama.cpp's converter would write a GPT-2 style BPE vocabulary here; the
 * GGUF gets a SentencePiece ("llama") one instead, which is what Gemma's
 * tokenizer.json was converted from: the pieces and types of the file (as
 * ignis reads it for inference: src/tokenizer/vocab_hf.c), each piece's
 * score minus the rank of the first merge that produces it (SentencePiece's
 * best-score-first merging then applies the merges in their order),
 * pieces no merge produces scored below every merge, the special ids and
 * add_bos of the file. A tokenizer.json without the U+2581 space escape is
 * not a SentencePiece conversion and is refused. */
static ig_status add_vocab_json(const hf_model *m, gguf_writer *w) {
    const int32_t V = m->hparams.n_vocab;
    if (V <= 0) return ig_fail(IG_ERR_FORMAT, "no vocab_size");
    ig_tokenizer *t = NULL;
    IG_TRY(ig_tokenizer_from_hf_json(m->tokenizer_json_path, &t));
    vocab v = {.n = V};
    ig_status st = IG_OK;
    if (!t->escape_spaces || t->add_space_prefix) {
        st = ig_fail(IG_ERR_UNSUPPORTED, "%s: not a SentencePiece-style tokenizer (no U+2581 space escape, "
                                         "or a space prefix)", m->tokenizer_json_path);
        goto out;
    }
    if (t->n_vocab > V) {
        st = ig_fail(IG_ERR_FORMAT, "%s has %d pieces, more than vocab_size %d", m->tokenizer_json_path,
                     (int)t->n_vocab, (int)V);
        goto out;
    }
    v.tokens = ig_calloc_array((size_t)V, sizeof *v.tokens);
    v.scores = ig_calloc_array((size_t)V, sizeof *v.scores);
    v.types = ig_calloc_array((size_t)V, sizeof *v.types);
    v.pad_text = ig_calloc_array((size_t)V, 16);
    if (!v.tokens || !v.scores || !v.types || !v.pad_text) {
        st = IG_ERR_NO_MEMORY;
        goto out;
    }
    float lowest = 0.0f;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->score[i] < lowest) lowest = t->score[i];
    for (int32_t i = 0; i < V; i++) {
        if (i < t->n_vocab && t->piece[i] && t->piece_len[i] > 0) {
            v.tokens[i] = (gguf_str){t->piece[i], t->piece_len[i]};
            v.types[i] = t->type[i];
            v.scores[i] = t->score[i];
            /* a normal piece of several characters that no merge produces:
             * last in SentencePiece's order */
            if (t->type[i] == IG_TOKEN_NORMAL && !(t->attr[i] & IG_TOKA_MERGEABLE) && t->piece_len[i] > 1)
                v.scores[i] = lowest - 1.0f;
        } else { /* past the file's pieces, or an id it leaves out: as the converter pads */
            char *p = v.pad_text + 16 * (size_t)i;
            const int n = snprintf(p, 16, "[PAD%d]", (int)i);
            v.tokens[i] = (gguf_str){p, (size_t)n};
            v.scores[i] = -10000.0f;
            v.types[i] = IG_SP_UNUSED;
        }
    }
    if ((st = add_vocab_arrays(w, &v, V)) != IG_OK) goto out;
    const struct {
        int32_t id;
        const char *key;
    } ids[] = {{t->bos, "tokenizer.ggml.bos_token_id"},
               {t->eos, "tokenizer.ggml.eos_token_id"},
               {t->unk, "tokenizer.ggml.unknown_token_id"},
               {t->pad, "tokenizer.ggml.padding_token_id"}};
    for (size_t i = 0; i < IG_ARRAY_LEN(ids) && st == IG_OK; i++)
        if (ids[i].id >= 0) st = gguf_writer_add_u32(w, ids[i].key, (uint32_t)ids[i].id);
    if (st == IG_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    if (st == IG_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
out:
    vocab_free(&v);
    ig_tokenizer_free(t);
    return st;
}

/* The last component of a directory path. */
static void dir_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

ig_status hf_gguf_add_metadata(const hf_model *m, const char *dir, gguf_writer *w) {
    char name[256];
    dir_name(dir, name, sizeof name);
    const ig_hparams *hp = &m->hparams;
    if (hp->n_layer <= 0 || hp->n_layer > IG_MAX_LAYERS)
        return ig_fail(IG_ERR_FORMAT, "bad layer count %d", hp->n_layer);
    IG_TRY(gguf_writer_add_str(w, "general.architecture", "gemma3"));
    IG_TRY(gguf_writer_add_str(w, "general.type", "model"));
    IG_TRY(gguf_writer_add_str(w, "general.name", hp->name[0] ? hp->name : name));
    uint64_t n_params = 0;
    for (size_t i = 0; i < m->tensors.count; i++) {
        const int64_t ne = ig_tensor_nelements(&m->tensors.items[i]);
        if (ne > 0) n_params += (uint64_t)ne;
    }
    char label[64];
    size_label(n_params, label, sizeof label);
    IG_TRY(gguf_writer_add_str(w, "general.size_label", label));
    IG_TRY(add_u32(w, "gemma3.block_count", hp->n_layer));
    IG_TRY(add_u32(w, "gemma3.context_length", hp->n_ctx_train));
    IG_TRY(add_u32(w, "gemma3.embedding_length", hp->n_embd));
    IG_TRY(add_u32(w, "gemma3.feed_forward_length", hp->n_ff));
    IG_TRY(add_u32(w, "gemma3.attention.head_count", hp->n_head));
    IG_TRY(add_u32(w, "gemma3.attention.head_count_kv", hp->n_head_kv));
    if (hp->rope_scale_global != 1.0f) {
        IG_TRY(gguf_writer_add_str(w, "gemma3.rope.scaling.type", "linear"));
        IG_TRY(gguf_writer_add_f32(w, "gemma3.rope.scaling.factor", hp->rope_scale_global));
    }
    if (hp->rope_scale_local != 1.0f)
        return ig_fail(IG_ERR_UNSUPPORTED, "GGUF has no key for RoPE scaling of the sliding-window layers");
    IG_TRY(gguf_writer_add_f32(w, "gemma3.rope.freq_base", hp->rope_base_global));
    IG_TRY(gguf_writer_add_f32(w, "gemma3.rope.freq_base_swa", hp->rope_base_local));
    IG_TRY(gguf_writer_add_f32(w, "gemma3.attention.layer_norm_rms_epsilon", hp->rms_eps));
    IG_TRY(add_u32(w, "gemma3.attention.key_length", hp->head_dim));
    IG_TRY(add_u32(w, "gemma3.attention.value_length", hp->head_dim_v));
    bool any_swa = false, default6 = true;
    for (int i = 0; i < hp->n_layer; i++) {
        any_swa |= hp->layer_is_swa[i] != 0;
        default6 &= (hp->layer_is_swa[i] != 0) == (i % 6 < 5);
    }
    if (any_swa) {
        IG_TRY(add_u32(w, "gemma3.attention.sliding_window", hp->sliding_window));
        if (!default6) {
            uint8_t pat[IG_MAX_LAYERS];
            for (int i = 0; i < hp->n_layer; i++) pat[i] = hp->layer_is_swa[i] != 0;
            IG_TRY(gguf_writer_add_arr(w, "gemma3.attention.sliding_window_pattern", GGUF_TYPE_BOOL, pat,
                                       (uint64_t)hp->n_layer));
        }
    }
    if (hp->final_logit_softcap > 0.0f)
        IG_TRY(gguf_writer_add_f32(w, "gemma3.final_logit_softcapping", hp->final_logit_softcap));
    if (hp->attn_logit_softcap > 0.0f)
        return ig_fail(IG_ERR_UNSUPPORTED, "Gemma 3 has no attention logit softcapping");
    const double want = hp->attn_scale, derived = derived_attn_scale(hp);
    if (fabs(want - derived) > 1e-7 * want)
        IG_TRY(gguf_writer_add_f32(w, "gemma3.attention.scale", hp->attn_scale));
    char *sp_path = ig_path_join(dir, "tokenizer.model");
    if (!sp_path) return IG_ERR_NO_MEMORY;
    ig_status st = IG_OK;
    if (ig_path_is_file(sp_path)) {
        st = add_vocab(m, dir, sp_path, w);
    } else if (m->tokenizer_json_path) {
        st = add_vocab_json(m, w);
    } else {
        st = gguf_writer_add_str(w, "tokenizer.ggml.model", "none");
        if (st == IG_OK) st = add_u32(w, "gemma3.vocab_size", hp->n_vocab);
    }
    free(sp_path);
    IG_TRY(st);
    if (m->chat_template) IG_TRY(gguf_writer_add_str(w, "tokenizer.chat_template", m->chat_template));
    return IG_OK;
}
