/* Gemma 3 hyper-parameters from GGUF metadata (gemma3.* keys, llama.cpp's
 * conventions) or from a Hugging Face config.json (Gemma3TextConfig with its
 * defaults). */
#include "model/hparams.h"
#include "model/arch.h"

#include "core/json.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Sanity bounds; far above any Gemma 3 size but small enough that products
 * such as n_head * head_dim cannot overflow an int. */
#define HP_MAX_DIM (1 << 20)
#define HP_MAX_HEADS (1 << 12)
#define HP_MAX_VOCAB (1 << 24)
#define HP_MAX_CTX (1 << 26)
#define GEMMA3_REAL_VOCAB 262144

static void hp_defaults(ig_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    snprintf(hp->arch, sizeof hp->arch, "gemma3");
    hp->rms_eps = 1e-6f;
    hp->rope_base_global = 1e6f;
    hp->rope_base_local = 1e4f;
    hp->rope_scale_global = 1.0f;
    hp->rope_scale_local = 1.0f;
    hp->bos_id = hp->eos_id = hp->eot_id = hp->pad_id = -1;
}

/* Layer l is sliding iff l % period < period - 1 (period 6: 5, 11, ... are
 * global). period 0 makes every layer sliding (llama.cpp's convention). */
static void set_swa_period(ig_hparams *hp, uint32_t period) {
    memset(hp->layer_is_swa, 0, sizeof hp->layer_is_swa);
    for (int l = 0; l < hp->n_layer; l++)
        hp->layer_is_swa[l] = period == 0 || (uint32_t)l % period < period - 1;
}

static bool finite_pos(float v) { return isfinite(v) && v > 0.0f; }

ig_status hparams_validate(const ig_hparams *hp) {
    if (!hp) return ig_fail(IG_ERR_INVALID_ARG, "hparams_validate: NULL");
#define POS_INT(field, max)                                                                        \
    if (hp->field <= 0 || hp->field > (max))                                                       \
        return ig_fail(IG_ERR_FORMAT, "hparams: " #field " = %d is out of range (1..%d)", hp->field, \
                       (int)(max));
    POS_INT(n_embd, HP_MAX_DIM)
    POS_INT(n_ff, HP_MAX_DIM)
    POS_INT(n_layer, IG_MAX_LAYERS)
    POS_INT(n_head, HP_MAX_HEADS)
    POS_INT(n_head_kv, HP_MAX_HEADS)
    POS_INT(head_dim, HP_MAX_DIM / 16)
    POS_INT(head_dim_v, HP_MAX_DIM / 16)
    POS_INT(n_ctx_train, HP_MAX_CTX)
#undef POS_INT
    if (hp->n_head % hp->n_head_kv)
        return ig_fail(IG_ERR_FORMAT, "hparams: n_head %d is not a multiple of n_head_kv %d",
                       hp->n_head, hp->n_head_kv);
    if (hp->head_dim % 2)
        return ig_fail(IG_ERR_FORMAT, "hparams: head_dim %d is odd (RoPE needs pairs)",
                       hp->head_dim);
    if (hp->n_vocab < 0 || hp->n_vocab > HP_MAX_VOCAB)
        return ig_fail(IG_ERR_FORMAT, "hparams: n_vocab %d is out of range", hp->n_vocab);
    if (hp->n_vocab_real < 0 || hp->n_vocab_real > hp->n_vocab)
        return ig_fail(IG_ERR_FORMAT, "hparams: n_vocab_real %d is not within n_vocab %d",
                       hp->n_vocab_real, hp->n_vocab);
    if (hp->sliding_window < 0 || hp->sliding_window > HP_MAX_CTX)
        return ig_fail(IG_ERR_FORMAT, "hparams: sliding_window %d is out of range",
                       hp->sliding_window);
    for (int l = 0; l < IG_MAX_LAYERS; l++) {
        if (hp->layer_is_swa[l] > 1 || (hp->layer_is_swa[l] && l >= hp->n_layer))
            return ig_fail(IG_ERR_FORMAT, "hparams: bad sliding-window flag for layer %d", l);
        if (hp->layer_is_swa[l] && hp->sliding_window == 0)
            return ig_fail(IG_ERR_FORMAT,
                           "hparams: layer %d is a sliding-window layer but the window is 0", l);
    }
    if (!finite_pos(hp->rms_eps))
        return ig_fail(IG_ERR_FORMAT, "hparams: rms_eps %g must be positive", (double)hp->rms_eps);
    if (!finite_pos(hp->rope_base_global) || !finite_pos(hp->rope_base_local))
        return ig_fail(IG_ERR_FORMAT, "hparams: RoPE bases %g / %g must be positive",
                       (double)hp->rope_base_global, (double)hp->rope_base_local);
    if (!finite_pos(hp->rope_scale_global) || !finite_pos(hp->rope_scale_local))
        return ig_fail(IG_ERR_FORMAT, "hparams: RoPE scale factors %g / %g must be positive",
                       (double)hp->rope_scale_global, (double)hp->rope_scale_local);
    if (!finite_pos(hp->attn_scale))
        return ig_fail(IG_ERR_FORMAT, "hparams: attention scale %g must be positive",
                       (double)hp->attn_scale);
    if (!isfinite(hp->final_logit_softcap) || hp->final_logit_softcap < 0 ||
        !isfinite(hp->attn_logit_softcap) || hp->attn_logit_softcap < 0)
        return ig_fail(IG_ERR_FORMAT, "hparams: softcaps %g / %g must be >= 0",
                       (double)hp->final_logit_softcap, (double)hp->attn_logit_softcap);
    const int ids[4] = {hp->bos_id, hp->eos_id, hp->eot_id, hp->pad_id};
    const char *id_names[4] = {"bos_id", "eos_id", "eot_id", "pad_id"};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || (hp->n_vocab > 0 && ids[i] >= hp->n_vocab))
            return ig_fail(IG_ERR_FORMAT, "hparams: %s %d is not a token id (n_vocab %d)",
                           id_names[i], ids[i], hp->n_vocab);
    return IG_OK;
}

/* ---- GGUF ------------------------------------------------------------- */

/* Optional integer key: absent → *out unchanged, *present false. Present
 * but not an integer in [lo, hi] → IG_ERR_FORMAT naming the key. */
static ig_status gg_int(const gguf_file *f, const char *key, int64_t lo, int64_t hi, int *out,
                        bool *present) {
    const gguf_kv *kv = gguf_find(f, key);
    if (present) *present = kv != NULL;
    if (!kv) return IG_OK;
    int64_t v;
    if (!gguf_get_i64(f, key, &v))
        return ig_fail(IG_ERR_FORMAT, "gguf: %s has type %s, expected an integer", key,
                       gguf_type_name(kv->type));
    if (v < lo || v > hi)
        return ig_fail(IG_ERR_FORMAT, "gguf: %s = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return IG_OK;
}

static ig_status gg_req_int(const gguf_file *f, const char *key, int *out) {
    bool present;
    IG_TRY(gg_int(f, key, 1, INT_MAX, out, &present));
    if (!present) return ig_fail(IG_ERR_FORMAT, "gguf: required key %s is missing", key);
    return IG_OK;
}

static ig_status gg_float(const gguf_file *f, const char *key, float *out, bool *present) {
    const gguf_kv *kv = gguf_find(f, key);
    if (present) *present = kv != NULL;
    if (!kv) return IG_OK;
    float v;
    if (!gguf_get_f32(f, key, &v))
        return ig_fail(IG_ERR_FORMAT, "gguf: %s has type %s, expected a float", key,
                       gguf_type_name(kv->type));
    if (!isfinite(v)) return ig_fail(IG_ERR_FORMAT, "gguf: %s is not finite", key);
    *out = v;
    return IG_OK;
}

static ig_status gg_token_id(const gguf_file *f, const char *key, int *out) {
    *out = -1;
    return gg_int(f, key, 0, INT_MAX, out, NULL);
}

static bool gstr_eq(gguf_str s, const char *lit) {
    return s.len == strlen(lit) && !memcmp(s.ptr, lit, s.len);
}

ig_status hparams_from_gguf(const gguf_file *f, ig_hparams *hp) {
    if (!f || !hp) return ig_fail(IG_ERR_INVALID_ARG, "hparams_from_gguf: NULL argument");
    hp_defaults(hp);
    gguf_str s;
    const gguf_kv *kv = gguf_find(f, "general.architecture");
    if (!kv) return ig_fail(IG_ERR_FORMAT, "gguf: general.architecture is missing");
    if (!gguf_get_str(f, "general.architecture", &s))
        return ig_fail(IG_ERR_FORMAT, "gguf: general.architecture is not a string");
    const ig_arch *arch = ig_arch_find(s.ptr, s.len);
    if (!arch)
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: architecture '%.*s' is not supported",
                       (int)IG_MIN(s.len, 64), s.ptr);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch->name);
    if (gguf_get_str(f, "general.name", &s)) {
        size_t n = IG_MIN(s.len, sizeof hp->name - 1);
        memcpy(hp->name, s.ptr, n);
        hp->name[n] = '\0'; /* an embedded NUL just shortens the name */
    }

    IG_TRY(gg_req_int(f, "gemma3.embedding_length", &hp->n_embd));
    IG_TRY(gg_req_int(f, "gemma3.block_count", &hp->n_layer));
    IG_TRY(gg_req_int(f, "gemma3.feed_forward_length", &hp->n_ff));
    IG_TRY(gg_req_int(f, "gemma3.attention.head_count", &hp->n_head));
    IG_TRY(gg_req_int(f, "gemma3.context_length", &hp->n_ctx_train));
    if (hp->n_layer > IG_MAX_LAYERS)
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: gemma3.block_count %d exceeds %d layers",
                       hp->n_layer, IG_MAX_LAYERS);
    hp->n_head_kv = hp->n_head;
    IG_TRY(gg_int(f, "gemma3.attention.head_count_kv", 1, INT_MAX, &hp->n_head_kv, NULL));
    hp->head_dim = hp->n_embd / hp->n_head;
    IG_TRY(gg_int(f, "gemma3.attention.key_length", 1, INT_MAX, &hp->head_dim, NULL));
    hp->head_dim_v = hp->head_dim;
    IG_TRY(gg_int(f, "gemma3.attention.value_length", 1, INT_MAX, &hp->head_dim_v, NULL));
    IG_TRY(gg_float(f, "gemma3.attention.layer_norm_rms_epsilon", &hp->rms_eps, NULL));
    IG_TRY(gg_float(f, "gemma3.rope.freq_base", &hp->rope_base_global, NULL));
    IG_TRY(gg_float(f, "gemma3.rope.freq_base_swa", &hp->rope_base_local, NULL));
    IG_TRY(gg_float(f, "gemma3.final_logit_softcapping", &hp->final_logit_softcap, NULL));
    IG_TRY(gg_float(f, "gemma3.attn_logit_softcapping", &hp->attn_logit_softcap, NULL));

    /* RoPE scaling (global layers only; local layers are never scaled). The
     * type defaults to linear as in llama.cpp; factor 0 / absent means 1. */
    bool linear = true;
    if (gguf_find(f, "gemma3.rope.scaling.type")) {
        if (!gguf_get_str(f, "gemma3.rope.scaling.type", &s))
            return ig_fail(IG_ERR_FORMAT, "gguf: gemma3.rope.scaling.type is not a string");
        if (gstr_eq(s, "none")) linear = false;
        else if (!gstr_eq(s, "linear"))
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "gguf: RoPE scaling type '%.*s' is not supported (only linear)",
                           (int)IG_MIN(s.len, 64), s.ptr);
    }
    float factor = 0.0f;
    bool have_factor;
    IG_TRY(gg_float(f, "gemma3.rope.scale_linear", &factor, &have_factor));
    if (!have_factor) IG_TRY(gg_float(f, "gemma3.rope.scaling.factor", &factor, NULL));
    if (factor < 0.0f)
        return ig_fail(IG_ERR_FORMAT, "gguf: RoPE scaling factor %g is negative", (double)factor);
    hp->rope_scale_global = linear && factor > 0.0f ? factor : 1.0f;
    hp->rope_scale_local = 1.0f;

    /* Sliding window: missing or zero ⇒ every layer global. */
    IG_TRY(gg_int(f, "gemma3.attention.sliding_window", 0, INT_MAX, &hp->sliding_window, NULL));
    if (hp->sliding_window > 0) {
        const char *pk = "gemma3.attention.sliding_window_pattern";
        kv = gguf_find(f, pk);
        if (!kv) {
            set_swa_period(hp, 6);
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            if (kv->arr_type != GGUF_TYPE_BOOL)
                return ig_fail(IG_ERR_FORMAT, "gguf: %s is an array of %s, expected bool", pk,
                               gguf_type_name(kv->arr_type));
            if (kv->arr_count != (uint64_t)hp->n_layer)
                return ig_fail(IG_ERR_FORMAT, "gguf: %s has %llu entries for %d layers", pk,
                               (unsigned long long)kv->arr_count, hp->n_layer);
            for (int l = 0; l < hp->n_layer; l++)
                hp->layer_is_swa[l] = ((const uint8_t *)kv->arr_data)[l] != 0;
        } else {
            int period = 0;
            IG_TRY(gg_int(f, pk, 0, INT_MAX, &period, NULL));
            set_swa_period(hp, (uint32_t)period);
        }
    }

    /* llama.cpp: 1/sqrt(n_embd/n_head) for the 62-layer (27B) model. */
    if (hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    else
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    /* An explicit scale (written by converters of models whose
     * query_pre_attn_scalar is not what llama.cpp derives) wins. */
    if (gguf_find(f, "gemma3.attention.scale")) {
        float scale;
        if (!gguf_get_f32(f, "gemma3.attention.scale", &scale) || !(scale > 0) || !isfinite(scale))
            return ig_fail(IG_ERR_FORMAT, "gemma3.attention.scale must be a positive float");
        hp->attn_scale = scale;
    }

    const void *arr;
    uint64_t n_tok;
    kv = gguf_find(f, "tokenizer.ggml.tokens");
    if (kv) {
        if (!gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &arr, &n_tok))
            return ig_fail(IG_ERR_FORMAT, "gguf: tokenizer.ggml.tokens is not a string array");
        if (n_tok > HP_MAX_VOCAB)
            return ig_fail(IG_ERR_FORMAT, "gguf: tokenizer.ggml.tokens has %llu entries",
                           (unsigned long long)n_tok);
        hp->n_vocab = hp->n_vocab_real = (int)n_tok;
    }
    IG_TRY(gg_token_id(f, "tokenizer.ggml.bos_token_id", &hp->bos_id));
    IG_TRY(gg_token_id(f, "tokenizer.ggml.eos_token_id", &hp->eos_id));
    IG_TRY(gg_token_id(f, "tokenizer.ggml.padding_token_id", &hp->pad_id));
    hp->eot_id = -1; /* the tokenizer finds <end_of_turn> by its text */
    return hparams_validate(hp);
}

/* ---- config.json ------------------------------------------------------ */

/* Integer key of obj: absent or null → *out unchanged. */
static ig_status js_int(const ig_json *obj, const char *key, int *out) {
    const ig_json *v = ig_json_get(obj, key);
    if (!v || ig_json_is_null(v)) return IG_OK;
    if (ig_json_is_integer(v)) {
        long long i = ig_json_int(v);
        if (i < INT_MIN || i > INT_MAX)
            return ig_fail(IG_ERR_FORMAT, "config.json: \"%s\" = %lld is out of range", key,
                           (long long)i);
        *out = (int)i;
        return IG_OK;
    }
    if (ig_json_is_real(v)) {
        double d = ig_json_real(v);
        if (d == floor(d) && d >= INT_MIN && d <= INT_MAX) {
            *out = (int)d;
            return IG_OK;
        }
    }
    return ig_fail(IG_ERR_FORMAT, "config.json: \"%s\" must be an integer", key);
}

/* Number key of obj: absent or null → *out unchanged, *present false. */
static ig_status js_float(const ig_json *obj, const char *key, const char *ctx, float *out,
                          bool *present) {
    const ig_json *v = ig_json_get(obj, key);
    if (present) *present = false;
    if (!v || ig_json_is_null(v)) return IG_OK;
    if (!ig_json_is_number(v))
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%s%s\" must be a number", ctx, key);
    double d = ig_json_number(v);
    if (!isfinite(d) || fabs(d) > 3.0e38)
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%s%s\" = %g is out of range", ctx, key, d);
    *out = (float)d;
    if (present) *present = true;
    return IG_OK;
}

/* Token id key: an integer, or a list whose first entry is used (IT
 * configs list eos as [1, 106]). Looked up in primary, then in fallback. */
static ig_status js_token_id(const ig_json *primary, const ig_json *fallback, const char *key,
                             int *out) {
    const ig_json *v = ig_json_get(primary, key);
    if ((!v || ig_json_is_null(v)) && fallback) v = ig_json_get(fallback, key);
    if (!v || ig_json_is_null(v)) return IG_OK;
    if (ig_json_is_array(v)) {
        if (ig_json_size(v) == 0) return IG_OK;
        v = ig_json_at(v, 0);
    }
    if (!ig_json_is_integer(v) || ig_json_int(v) < 0 || ig_json_int(v) > INT_MAX)
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%s\" must be a token id", key);
    *out = (int)ig_json_int(v);
    return IG_OK;
}

/* {rope_type|type, factor, rope_theta}: theta into *base when given, linear
 * factor into *scale (1 for "default"). ctx names the object in errors. */
static ig_status js_rope(const ig_json *obj, const char *ctx, float *base, float *scale) {
    *scale = 1.0f;
    if (!obj || ig_json_is_null(obj)) return IG_OK;
    if (!ig_json_is_object(obj))
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%s\" must be an object", ctx);
    char pfx[96];
    snprintf(pfx, sizeof pfx, "%s.", ctx);
    if (base) IG_TRY(js_float(obj, "rope_theta", pfx, base, NULL));
    const ig_json *t = ig_json_get(obj, "rope_type");
    if (!t || ig_json_is_null(t)) t = ig_json_get(obj, "type");
    const char *type = "default";
    if (t && !ig_json_is_null(t)) {
        if (!ig_json_is_string(t))
            return ig_fail(IG_ERR_FORMAT, "config.json: \"%s.rope_type\" must be a string", ctx);
        type = ig_json_str(t);
    }
    if (!strcmp(type, "default")) return IG_OK;
    if (strcmp(type, "linear"))
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "config.json: %s: RoPE type \"%s\" is not supported (default or linear)",
                       ctx, type);
    bool have;
    IG_TRY(js_float(obj, "factor", pfx, scale, &have));
    if (!have) return ig_fail(IG_ERR_FORMAT, "config.json: \"%s\" is linear but has no factor", ctx);
    if (!(*scale > 0.0f))
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%s.factor\" %g must be positive", ctx,
                       (double)*scale);
    return IG_OK;
}

static ig_status check_model_type(const ig_json *obj, const char *ctx, ig_hparams *hp) {
    const ig_json *mt = ig_json_get(obj, "model_type");
    if (!mt || ig_json_is_null(mt)) return IG_OK;
    if (!ig_json_is_string(mt))
        return ig_fail(IG_ERR_FORMAT, "config.json: \"%smodel_type\" must be a string", ctx);
    const char *s = ig_json_str(mt);
    const ig_arch *arch = ig_arch_find_hf(s);
    if (!arch) return ig_fail(IG_ERR_UNSUPPORTED, "config.json: model_type \"%s\" is not supported", s);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch->name);
    return IG_OK;
}

static ig_status from_config(const ig_json *root, ig_hparams *hp) {
    if (!ig_json_is_object(root))
        return ig_fail(IG_ERR_FORMAT, "config.json: top level is not an object");
    IG_TRY(check_model_type(root, "", hp));
    const ig_json *cfg = root;
    const ig_json *tc = ig_json_get(root, "text_config");
    if (tc && !ig_json_is_null(tc)) {
        if (!ig_json_is_object(tc))
            return ig_fail(IG_ERR_FORMAT, "config.json: \"text_config\" must be an object");
        IG_TRY(check_model_type(tc, "text_config.", hp));
        cfg = tc;
    }
    const ig_json *np = ig_json_get(root, "_name_or_path");
    if (ig_json_is_string(np)) snprintf(hp->name, sizeof hp->name, "%s", ig_json_str(np));

    /* Gemma3TextConfig defaults: a sparse text_config relies on them. */
    hp->n_vocab = 262208;
    hp->n_embd = 2304;
    hp->n_ff = 9216;
    hp->n_layer = 26;
    hp->n_head = 8;
    hp->n_head_kv = 4;
    hp->head_dim = 256;
    hp->n_ctx_train = 131072;
    hp->sliding_window = 4096;
    float qpas = 256.0f;
    IG_TRY(js_int(cfg, "vocab_size", &hp->n_vocab));
    IG_TRY(js_int(cfg, "hidden_size", &hp->n_embd));
    IG_TRY(js_int(cfg, "intermediate_size", &hp->n_ff));
    IG_TRY(js_int(cfg, "num_hidden_layers", &hp->n_layer));
    IG_TRY(js_int(cfg, "num_attention_heads", &hp->n_head));
    IG_TRY(js_int(cfg, "num_key_value_heads", &hp->n_head_kv));
    IG_TRY(js_int(cfg, "head_dim", &hp->head_dim));
    IG_TRY(js_int(cfg, "max_position_embeddings", &hp->n_ctx_train));
    IG_TRY(js_float(cfg, "rms_norm_eps", "", &hp->rms_eps, NULL));
    IG_TRY(js_float(cfg, "query_pre_attn_scalar", "", &qpas, NULL));
    IG_TRY(js_float(cfg, "final_logit_softcapping", "", &hp->final_logit_softcap, NULL));
    IG_TRY(js_float(cfg, "attn_logit_softcapping", "", &hp->attn_logit_softcap, NULL));
    hp->head_dim_v = hp->head_dim;
    if (hp->n_layer <= 0 || hp->n_layer > IG_MAX_LAYERS)
        return ig_fail(IG_ERR_FORMAT, "config.json: num_hidden_layers %d is out of range (1..%d)",
                       hp->n_layer, IG_MAX_LAYERS);
    if (hp->n_vocab <= 0 || hp->n_vocab > HP_MAX_VOCAB)
        return ig_fail(IG_ERR_FORMAT, "config.json: vocab_size %d is out of range", hp->n_vocab);
    hp->n_vocab_real = IG_MIN(hp->n_vocab, GEMMA3_REAL_VOCAB);
    if (!(qpas > 0.0f))
        return ig_fail(IG_ERR_FORMAT, "config.json: query_pre_attn_scalar %g must be positive",
                       (double)qpas);
    hp->attn_scale = (float)(1.0 / sqrt((double)qpas));

    /* RoPE: transformers 5 per-layer-type rope_parameters, else hub keys. */
    IG_TRY(js_float(cfg, "rope_theta", "", &hp->rope_base_global, NULL));
    IG_TRY(js_float(cfg, "rope_local_base_freq", "", &hp->rope_base_local, NULL));
    const ig_json *rp = ig_json_get(cfg, "rope_parameters");
    if (rp && !ig_json_is_null(rp)) {
        if (!ig_json_is_object(rp))
            return ig_fail(IG_ERR_FORMAT, "config.json: \"rope_parameters\" must be an object");
        const ig_json *full = ig_json_get(rp, "full_attention");
        const ig_json *slide = ig_json_get(rp, "sliding_attention");
        if (full || slide) {
            IG_TRY(js_rope(full, "rope_parameters.full_attention", &hp->rope_base_global,
                           &hp->rope_scale_global));
            IG_TRY(js_rope(slide, "rope_parameters.sliding_attention", &hp->rope_base_local,
                           &hp->rope_scale_local));
        } else {
            IG_TRY(js_rope(rp, "rope_parameters", &hp->rope_base_global, &hp->rope_scale_global));
        }
    } else {
        IG_TRY(js_rope(ig_json_get(cfg, "rope_scaling"), "rope_scaling", NULL,
                       &hp->rope_scale_global));
    }

    /* Sliding-window layers. */
    const ig_json *sw = ig_json_get(cfg, "sliding_window");
    if (sw && ig_json_is_null(sw)) hp->sliding_window = 0;
    else IG_TRY(js_int(cfg, "sliding_window", &hp->sliding_window));
    if (hp->sliding_window < 0)
        return ig_fail(IG_ERR_FORMAT, "config.json: sliding_window %d is negative",
                       hp->sliding_window);
    const ig_json *lt = ig_json_get(cfg, "layer_types");
    if (lt && !ig_json_is_null(lt)) {
        if (!ig_json_is_array(lt) || ig_json_size(lt) != (size_t)hp->n_layer)
            return ig_fail(IG_ERR_FORMAT,
                           "config.json: \"layer_types\" must be a list of %d layer types",
                           hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++) {
            const char *s = ig_json_str(ig_json_at(lt, (size_t)l));
            if (s && !strcmp(s, "sliding_attention")) hp->layer_is_swa[l] = 1;
            else if (s && !strcmp(s, "full_attention")) hp->layer_is_swa[l] = 0;
            else
                return ig_fail(IG_ERR_FORMAT,
                               "config.json: layer_types[%d] is not \"sliding_attention\" or "
                               "\"full_attention\"",
                               l);
        }
    } else {
        int period = 6;
        IG_TRY(js_int(cfg, "sliding_window_pattern", &period));
        if (!ig_json_get(cfg, "sliding_window_pattern"))
            IG_TRY(js_int(cfg, "_sliding_window_pattern", &period));
        if (period < 1)
            return ig_fail(IG_ERR_FORMAT, "config.json: sliding_window_pattern %d must be >= 1",
                           period);
        set_swa_period(hp, (uint32_t)period);
    }
    if (hp->sliding_window == 0) memset(hp->layer_is_swa, 0, sizeof hp->layer_is_swa);

    hp->bos_id = 2;
    hp->eos_id = 1;
    hp->pad_id = 0;
    IG_TRY(js_token_id(cfg, root, "bos_token_id", &hp->bos_id));
    IG_TRY(js_token_id(cfg, root, "eos_token_id", &hp->eos_id));
    IG_TRY(js_token_id(cfg, root, "pad_token_id", &hp->pad_id));
    hp->eot_id = -1;
    return IG_OK;
}

ig_status hparams_from_hf_config(const char *json, ig_hparams *hp) {
    if (!json || !hp) return ig_fail(IG_ERR_INVALID_ARG, "hparams_from_hf_config: NULL argument");
    hp_defaults(hp);
    ig_json_error err;
    ig_json_doc *doc = ig_json_parse(json, strlen(json), IG_JSON_REJECT_DUPLICATES, &err);
    if (!doc)
        return ig_fail(ig_json_error_status(&err), "config.json: bad JSON (line %d col %d): %s", err.line,
                       err.column, err.text);
    ig_status st = from_config(ig_json_root(doc), hp);
    ig_json_free(doc);
    if (st != IG_OK) return st;
    return hparams_validate(hp);
}
