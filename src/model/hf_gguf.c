/* GGUF metadata of a Hugging Face Gemma 3 checkpoint (see hf_gguf.h). */
#include "model/hf_gguf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

ig_status hf_gguf_add_metadata(const hf_model *m, const char *name, gguf_writer *w) {
    const ig_hparams *hp = &m->hparams;
    if (hp->n_layer <= 0 || hp->n_layer > IG_MAX_LAYERS)
        return ig_fail(IG_ERR_FORMAT, "bad layer count %d", hp->n_layer);
    IG_TRY(gguf_writer_add_str(w, "general.architecture", "gemma3"));
    IG_TRY(gguf_writer_add_str(w, "general.type", "model"));
    IG_TRY(gguf_writer_add_str(w, "general.name", hp->name[0] ? hp->name : name ? name : ""));
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
    IG_TRY(gguf_writer_add_str(w, "tokenizer.ggml.model", "none"));
    IG_TRY(add_u32(w, "gemma3.vocab_size", hp->n_vocab));
    if (m->chat_template) IG_TRY(gguf_writer_add_str(w, "tokenizer.chat_template", m->chat_template));
    return IG_OK;
}
