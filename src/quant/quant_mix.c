/* llama-quantize's per-tensor type choice for the K-quant mixes (see
 * quant_mix.h). Only the branches that apply to these file types and to
 * dense models without experts are kept. */
#include "quant/quant_mix.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* llama-quantize's tensor_allows_quantization, for the names that occur in
 * the architectures ignis reads. */
static bool quantizable(const ig_tensor *t) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "altup",        "laurel",
        "per_layer_model_proj", ".position_embd", ".patch_embd", ".patch_merger",
        ".rel_pos",     "attn_rel_b.weight",   "ssm_conv1d",
    };
    if (t->n_dims < 2 || !ends_with(t->name, "weight")) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(t->name, never[i])) return false;
    return strcmp(t->name, "position_embd.weight") != 0 &&
           strcmp(t->name, "token_types.weight") != 0;
}

typedef enum { CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN } category;

static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    /* attn_qkv and attn_kv_b count as attn_v in llama-quantize. */
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
        strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight") || strstr(name, "attn_q.weight") ||
        strstr(name, "attn_output.weight") || strstr(name, "ffn_up") || strstr(name, "ffn_gate"))
        return CAT_OTHER;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* llama.cpp's tensor order: by the layer number of "blk.N." (-1 for the
 * others), then by name. */
static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
    return l;
}

static int order_cmp(const char *a, const char *b) {
    const int la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Position of tensor k among the tensors of category c, in llama.cpp's
 * order. */
static int rank_in(const ig_tensor_table *tt, const category *cat, size_t k, category c) {
    int r = 0;
    for (size_t j = 0; j < tt->count; j++)
        if (j != k && cat[j] == c && order_cmp(tt->items[j].name, tt->items[k].name) < 0) r++;
    return r;
}

/* The GGUF's block count, or -1 when it has none. */
int64_t ig_quant_gguf_block_count(const gguf_file *g) {
    gguf_str arch;
    if (gguf_get_str(g, "general.architecture", &arch) && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
        uint32_t n;
        if (gguf_get_u32(g, key, &n)) return n;
    }
    return -1;
}

static bool whole_blocks(ig_dtype t, int64_t n) {
    return n % (int64_t)ig_dtype_block_elems(t) == 0;
}

bool ig_quant_mix_types(const gguf_file *g, uint32_t ftype, bool pure, ig_dtype *out, char *err,
                        size_t errlen) {
    return ig_quant_mix_types_tt(&g->tensors, ig_quant_gguf_block_count(g), ftype, pure, out, err, errlen);
}

bool ig_quant_mix_types_tt(const ig_tensor_table *tt, int64_t n_layer, uint32_t ftype, bool pure,
                           ig_dtype *out, char *err, size_t errlen) {
    ig_dtype base;
    switch (ftype) {
    case IG_FTYPE_Q4_K_M: base = IG_TYPE_Q4_K; break;
    case IG_FTYPE_Q5_K_M: base = IG_TYPE_Q5_K; break;
    case IG_FTYPE_Q6_K: base = IG_TYPE_Q6_K; break;
    default: snprintf(err, errlen, "file type %u is not a K-quant mix", ftype); return false;
    }
    category *cat = ig_calloc_array(tt->count ? tt->count : 1, sizeof *cat);
    if (!cat) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    bool tied = true;
    int n_attn_v = 0;
    for (size_t i = 0; i < tt->count; i++) {
        cat[i] = category_of(tt->items[i].name);
        n_attn_v += cat[i] == CAT_ATTN_V;
        if (cat[i] == CAT_OUTPUT) tied = false;
    }
    if (n_layer < 0) { /* no hyperparameter: one ffn_down per layer */
        n_layer = 0;
        for (size_t i = 0; i < tt->count; i++) n_layer += cat[i] == CAT_FFN_DOWN;
    }
    const bool more_bits_mix = ftype == IG_FTYPE_Q4_K_M || ftype == IG_FTYPE_Q5_K_M;
    bool ok = true;
    for (size_t i = 0; i < tt->count && ok; i++) {
        const ig_tensor *t = &tt->items[i];
        if (!quantizable(t)) {
            out[i] = IG_TYPE_F32;
            continue;
        }
        const int64_t nx = t->ne[0];
        ig_dtype ty = base;
        if (!pure) {
            if (cat[i] == CAT_OUTPUT || (tied && cat[i] == CAT_TOKEN_EMBD)) {
                ty = whole_blocks(base, nx) ? IG_TYPE_Q6_K : IG_TYPE_Q8_0;
            } else if (cat[i] == CAT_ATTN_V) {
                if (more_bits_mix && use_more_bits(rank_in(tt, cat, i, CAT_ATTN_V), n_attn_v))
                    ty = IG_TYPE_Q6_K;
            } else if (cat[i] == CAT_FFN_DOWN) {
                const int64_t il = rank_in(tt, cat, i, CAT_FFN_DOWN);
                if (more_bits_mix && il <= INT32_MAX && n_layer <= INT32_MAX &&
                    use_more_bits((int)il, (int)n_layer))
                    ty = IG_TYPE_Q6_K;
            }
        }
        if (!whole_blocks(ty, nx)) {
            switch (ty) {
            case IG_TYPE_Q4_K: ty = IG_TYPE_Q5_0; break;
            case IG_TYPE_Q6_K: ty = IG_TYPE_Q8_0; break;
            case IG_TYPE_Q5_K: ty = IG_TYPE_Q5_1; break;
            default: break;
            }
            if (ok && !whole_blocks(ty, nx)) ty = IG_TYPE_F16;
        }
        out[i] = ty;
    }
    free(cat);
    return ok;
}

bool ig_quant_plan(const ig_tensor_table *tt, int64_t n_layer, ig_dtype want, uint32_t mix_ftype, bool pure,
                   ig_dtype *out, char *err, size_t errlen) {
    for (size_t i = 0; i < tt->count; i++) {
        const ig_tensor *t = &tt->items[i];
        size_t rb;
        out[i] = t->n_dims >= 2 && ig_dtype_row_bytes(want, t->ne[0], &rb) ? want : IG_TYPE_F32;
    }
    return !mix_ftype || ig_quant_mix_types_tt(tt, n_layer, mix_ftype, pure, out, err, errlen);
}
