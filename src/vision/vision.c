/* Loading the vision tower (see vision.h). */
#include "vision/vision.h"

#include "backend/cpu/matmul.h"
#include "core/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VISION_LAYERS 256

void ig_vision_free(ig_vision *v) {
    if (!v) return;
    for (int i = 0; i < v->n_allocs; i++) free(v->allocs[i]);
    free(v->allocs);
    free(v->layers);
    if (v->gguf) gguf_close(v->gguf);
    free(v);
}

static float *vec_alloc(ig_vision *v, size_t n) {
    if (v->n_allocs == v->cap_allocs) {
        int cap = v->cap_allocs ? 2 * v->cap_allocs : 64;
        float **a = ig_realloc_array(v->allocs, (size_t)cap, sizeof *a);
        if (!a) return NULL;
        v->allocs = a;
        v->cap_allocs = cap;
    }
    float *p = ig_calloc_array(n ? n : 1, sizeof(float));
    if (p) v->allocs[v->n_allocs++] = p;
    return p;
}

typedef const ig_tensor *(*find_fn)(const void *src, const char *name);

/* Types the CPU matmul kernels take (and so ig_dequantize_row for the
 * vectors). */
static bool known_type(ig_dtype t) { return ig_mm_type_supported(t); }

/* A tensor of exactly n elements, as f32 (plus `add`). */
static ig_status get_vec(ig_vision *v, find_fn find, const void *src, const char *name, int64_t n, float add,
                         float **out) {
    const ig_tensor *t = find(src, name);
    if (!t) return ig_fail(IG_ERR_FORMAT, "vision tower: missing tensor %s", name);
    if (!known_type(t->type))
        return ig_fail(IG_ERR_UNSUPPORTED, "vision tower: %s has type %s (f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, "
                       "q4_k, q5_k, q6_k supported)", name, ig_dtype_name(t->type));
    if (ig_tensor_nelements(t) != n)
        return ig_fail(IG_ERR_FORMAT, "vision tower: %s has %lld elements, expected %lld", name,
                       (long long)ig_tensor_nelements(t), (long long)n);
    float *p = vec_alloc(v, (size_t)n);
    if (!p) return IG_ERR_NO_MEMORY;
    ig_dequantize_row(t->type, t->data, p, n);
    if (add != 0.0f)
        for (int64_t i = 0; i < n; i++) p[i] += add;
    *out = p;
    return IG_OK;
}

static ig_status get_mat(find_fn find, const void *src, const char *name, int64_t in, int64_t out_rows,
                         const ig_tensor **out) {
    const ig_tensor *t = find(src, name);
    if (!t) return ig_fail(IG_ERR_FORMAT, "vision tower: missing tensor %s", name);
    if (!known_type(t->type))
        return ig_fail(IG_ERR_UNSUPPORTED, "vision tower: %s has type %s (f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, "
                       "q4_k, q5_k, q6_k supported)", name, ig_dtype_name(t->type));
    if (t->n_dims != 2 || t->ne[0] != in || t->ne[1] != out_rows)
        return ig_fail(IG_ERR_FORMAT, "vision tower: %s has shape {%lld, %lld}, expected {%lld, %lld}", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)in, (long long)out_rows);
    *out = t;
    return IG_OK;
}

/* Tensor names of the two layouts. */
typedef struct names {
    const char *patch_w, *patch_b, *pos, *post_w, *post_b, *mm_norm, *mm_proj;
    const char *layer_fmt; /* printf format with %d and %s */
    const char *q, *k, *v, *o, *fc1, *fc2, *ln1, *ln2, *w, *b;
} names;

static const names hf_names = {
    .patch_w = "vision_tower.vision_model.embeddings.patch_embedding.weight",
    .patch_b = "vision_tower.vision_model.embeddings.patch_embedding.bias",
    .pos = "vision_tower.vision_model.embeddings.position_embedding.weight",
    .post_w = "vision_tower.vision_model.post_layernorm.weight",
    .post_b = "vision_tower.vision_model.post_layernorm.bias",
    .mm_norm = "multi_modal_projector.mm_soft_emb_norm.weight",
    .mm_proj = "multi_modal_projector.mm_input_projection_weight",
    .layer_fmt = "vision_tower.vision_model.encoder.layers.%d.%s",
    .q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj", .o = "self_attn.out_proj",
    .fc1 = "mlp.fc1", .fc2 = "mlp.fc2", .ln1 = "layer_norm1", .ln2 = "layer_norm2", .w = "weight", .b = "bias",
};

static const names gguf_names = {
    .patch_w = "v.patch_embd.weight",
    .patch_b = "v.patch_embd.bias",
    .pos = "v.position_embd.weight",
    .post_w = "v.post_ln.weight",
    .post_b = "v.post_ln.bias",
    .mm_norm = "mm.soft_emb_norm.weight",
    .mm_proj = "mm.input_projection.weight",
    .layer_fmt = "v.blk.%d.%s",
    .q = "attn_q", .k = "attn_k", .v = "attn_v", .o = "attn_out",
    .fc1 = "ffn_up", .fc2 = "ffn_down", .ln1 = "ln1", .ln2 = "ln2", .w = "weight", .b = "bias",
};

static const char *lname(char *buf, size_t cap, const names *nm, int l, const char *part, const char *wb) {
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%s.%s", part, wb);
    snprintf(buf, cap, nm->layer_fmt, l, tmp);
    return buf;
}

/* Binds every tensor once the sizes are known. mm_norm_add: 1 for the HF
 * convention (w applied as 1 + w), 0 when the file stores 1 + w. */
static ig_status bind(ig_vision *v, find_fn find, const void *src, const names *nm, float mm_norm_add) {
    const int D = v->width, P = v->patch, F = v->n_ff;
    IG_TRY(get_vec(v, find, src, nm->patch_w, (int64_t)D * 3 * P * P, 0, &v->patch_w));
    IG_TRY(get_vec(v, find, src, nm->patch_b, D, 0, &v->patch_b));
    IG_TRY(get_vec(v, find, src, nm->pos, (int64_t)v->side * v->side * D, 0, &v->pos));
    IG_TRY(get_vec(v, find, src, nm->post_w, D, 0, &v->post_w));
    IG_TRY(get_vec(v, find, src, nm->post_b, D, 0, &v->post_b));
    IG_TRY(get_vec(v, find, src, nm->mm_norm, D, mm_norm_add, &v->mm_norm));
    const ig_tensor *pj = find(src, nm->mm_proj);
    if (!pj) return ig_fail(IG_ERR_FORMAT, "vision tower: missing tensor %s", nm->mm_proj);
    if (pj->n_dims != 2 || pj->ne[1] != D)
        return ig_fail(IG_ERR_FORMAT, "vision tower: %s has shape {%lld, %lld}, expected {n_embd, %d}", nm->mm_proj,
                       (long long)pj->ne[0], (long long)pj->ne[1], D);
    if (pj->ne[0] != v->n_embd)
        return ig_fail(IG_ERR_FORMAT,
                       "the vision projector outputs %lld values per token but the text model's width is %d: "
                       "this vision tower belongs to another model",
                       (long long)pj->ne[0], v->n_embd);
    /* [D][n_embd] as stored; kept transposed, one row per output, for the
     * matmul kernels */
    IG_TRY(get_vec(v, find, src, nm->mm_proj, (int64_t)D * v->n_embd, 0, &v->mm_proj_t));
    float *tr = ig_calloc_array((size_t)D * (size_t)v->n_embd, sizeof(float));
    if (!tr) return IG_ERR_NO_MEMORY;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < v->n_embd; j++) tr[(size_t)j * D + i] = v->mm_proj_t[(size_t)i * v->n_embd + j];
    memcpy(v->mm_proj_t, tr, (size_t)D * (size_t)v->n_embd * sizeof(float));
    free(tr);
    v->layers = ig_calloc_array((size_t)v->n_layer, sizeof *v->layers);
    if (!v->layers) return IG_ERR_NO_MEMORY;
    char n[160];
    for (int l = 0; l < v->n_layer; l++) {
        ig_vision_layer *L = &v->layers[l];
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->q, nm->w), D, D, &L->wq));
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->k, nm->w), D, D, &L->wk));
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->v, nm->w), D, D, &L->wv));
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->o, nm->w), D, D, &L->wo));
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->fc1, nm->w), D, F, &L->fc1));
        IG_TRY(get_mat(find, src, lname(n, sizeof n, nm, l, nm->fc2, nm->w), F, D, &L->fc2));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->q, nm->b), D, 0, &L->bq));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->k, nm->b), D, 0, &L->bk));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->v, nm->b), D, 0, &L->bv));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->o, nm->b), D, 0, &L->bo));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->fc1, nm->b), F, 0, &L->b1));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->fc2, nm->b), D, 0, &L->b2));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->ln1, nm->w), D, 0, &L->ln1_w));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->ln1, nm->b), D, 0, &L->ln1_b));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->ln2, nm->w), D, 0, &L->ln2_w));
        IG_TRY(get_vec(v, find, src, lname(n, sizeof n, nm, l, nm->ln2, nm->b), D, 0, &L->ln2_b));
    }
    return IG_OK;
}

size_t ig_vision_weight_bytes(const ig_vision *v) {
    if (!v) return 0;
    const size_t D = (size_t)v->width, F = (size_t)v->n_ff, P = (size_t)v->patch, N = (size_t)v->side * v->side;
    /* f32 copies: patch kernel and bias, positions, post norm, projector
     * norm, the projection, per layer 9 vectors of D and one of F */
    size_t s = 4 * (D * 3 * P * P + D + N * D + 2 * D + D + D * (size_t)v->n_embd);
    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        s += 4 * (9 * D + F);
        const ig_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->fc1, L->fc2};
        for (int i = 0; i < 6; i++) s += ws[i] ? ws[i]->nbytes : 0;
    }
    return s;
}

/* Sizes that follow from the hyper-parameters; checked for sanity. */
static ig_status finish_sizes(ig_vision *v, int mm_tokens) {
    if (v->patch < 1 || v->patch > 64 || v->image_size < v->patch || v->image_size > 8192 ||
        v->image_size % v->patch)
        return ig_fail(IG_ERR_FORMAT, "vision tower: image size %d and patch size %d do not fit", v->image_size,
                       v->patch);
    if (v->width < 1 || v->width > 65536 || v->n_ff < 1 || v->n_ff > 262144 || v->n_layer < 1 ||
        v->n_layer > MAX_VISION_LAYERS || v->n_head < 1 || v->width % v->n_head)
        return ig_fail(IG_ERR_FORMAT, "vision tower: bad sizes (width %d, mlp %d, layers %d, heads %d)", v->width,
                       v->n_ff, v->n_layer, v->n_head);
    if (!(v->eps > 0.0f && v->eps < 1.0f)) return ig_fail(IG_ERR_FORMAT, "vision tower: bad epsilon %g", (double)v->eps);
    v->side = v->image_size / v->patch;
    if (v->side > 256)
        return ig_fail(IG_ERR_UNSUPPORTED, "vision tower: %dx%d patches per image is too many", v->side, v->side);
    int per_side = (int)lround(sqrt((double)mm_tokens));
    if (mm_tokens < 1 || per_side * per_side != mm_tokens || per_side > v->side || v->side % per_side)
        return ig_fail(IG_ERR_FORMAT, "vision tower: %d tokens per image do not pool a %dx%d patch grid", mm_tokens,
                       v->side, v->side);
    v->pool = v->side / per_side;
    v->n_tokens = mm_tokens;
    return IG_OK;
}

/* ---- Hugging Face checkpoint --------------------------------------------- */

static const ig_tensor *hf_find(const void *src, const char *name) {
    const hf_model *hf = src;
    static const char *const prefixes[] = {"", "model."};
    char buf[256];
    for (int p = 0; p < 2; p++) {
        snprintf(buf, sizeof buf, "%s%s", prefixes[p], name);
        for (size_t s = 0; s < hf->n_shards; s++) {
            const ig_tensor *t = ig_tensor_find(&hf->shards[s]->tensors, buf);
            if (t) return t;
        }
    }
    return NULL;
}

static int js_int_or(const ig_json *o, const char *key, int def) {
    const ig_json *x = ig_json_get(o, key);
    if (ig_json_is_integer(x) && ig_json_int(x) >= 0 && ig_json_int(x) <= (1 << 30)) return (int)ig_json_int(x);
    return def;
}

ig_status ig_vision_from_hf(const hf_model *hf, const char *dir, int n_embd, ig_vision **out) {
    *out = NULL;
    const ig_tensor *pw = hf_find(hf, hf_names.patch_w);
    if (!pw) return IG_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return ig_fail(IG_ERR_INVALID_ARG, "path too long");
    char *text = NULL;
    size_t len = 0;
    IG_TRY(ig_file_read_all(path, (size_t)16 << 20, &text, &len));
    ig_json_error jerr;
    ig_json_doc *doc = ig_json_parse(text, len, 0, &jerr);
    free(text);
    const ig_json *root = ig_json_root(doc);
    if (!doc) return ig_fail(ig_json_error_status(&jerr), "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    if (!ig_json_is_object(root)) {
        ig_json_free(doc);
        return ig_fail(IG_ERR_FORMAT, "%s: not a JSON object", path);
    }
    ig_vision *v = ig_calloc_array(1, sizeof *v);
    if (!v) {
        ig_json_free(doc);
        return IG_ERR_NO_MEMORY;
    }
    snprintf(v->format, sizeof v->format, "safetensors");
    const ig_json *vc = ig_json_get(root, "vision_config");
    v->image_size = js_int_or(vc, "image_size", 896);
    v->patch = js_int_or(vc, "patch_size", 14);
    v->width = js_int_or(vc, "hidden_size", 1152);
    v->n_ff = js_int_or(vc, "intermediate_size", 4304);
    v->n_layer = js_int_or(vc, "num_hidden_layers", 27);
    v->n_head = js_int_or(vc, "num_attention_heads", 16);
    const ig_json *e = ig_json_get(vc, "layer_norm_eps");
    v->eps = ig_json_is_number(e) ? (float)ig_json_number(e) : 1e-6f;
    const int mm_tokens = js_int_or(root, "mm_tokens_per_image", 256);
    v->image_id = js_int_or(root, "image_token_index", js_int_or(root, "image_token_id", 262144));
    v->boi_id = js_int_or(root, "boi_token_index", 255999);
    v->eoi_id = js_int_or(root, "eoi_token_index", 256000);
    ig_json_free(doc);
    v->n_embd = n_embd;
    ig_status st = finish_sizes(v, mm_tokens);
    if (st == IG_OK) st = bind(v, hf_find, hf, &hf_names, 1.0f);
    if (st != IG_OK) {
        ig_vision_free(v);
        return st;
    }
    *out = v;
    return IG_OK;
}

/* ---- llama.cpp mmproj GGUF ------------------------------------------------ */

static const ig_tensor *gguf_find_t(const void *src, const char *name) {
    return ig_tensor_find(&((const gguf_file *)src)->tensors, name);
}

static ig_status gg_u32(const gguf_file *f, const char *key, int *out) {
    uint32_t u;
    if (!gguf_get_u32(f, key, &u)) return ig_fail(IG_ERR_FORMAT, "mmproj: missing %s", key);
    if (u > (1u << 30)) return ig_fail(IG_ERR_FORMAT, "mmproj: %s = %u is out of range", key, u);
    *out = (int)u;
    return IG_OK;
}

static ig_status mmproj_impl(ig_vision *v, const char *path) {
    IG_TRY(gguf_open(path, &v->gguf));
    const gguf_file *f = v->gguf;
    gguf_str s;
    if (!gguf_get_str(f, "general.architecture", &s) || s.len != 4 || memcmp(s.ptr, "clip", 4))
        return ig_fail(IG_ERR_FORMAT, "%s is not a multimodal projector (general.architecture is not clip)", path);
    if (!gguf_get_str(f, "clip.projector_type", &s) || s.len != 6 || memcmp(s.ptr, "gemma3", 6))
        return ig_fail(IG_ERR_UNSUPPORTED, "%s: projector type %.*s is not supported (gemma3 is)", path,
                       gguf_get_str(f, "clip.projector_type", &s) ? (int)s.len : 4,
                       gguf_get_str(f, "clip.projector_type", &s) ? s.ptr : "none");
    IG_TRY(gg_u32(f, "clip.vision.image_size", &v->image_size));
    IG_TRY(gg_u32(f, "clip.vision.patch_size", &v->patch));
    IG_TRY(gg_u32(f, "clip.vision.embedding_length", &v->width));
    IG_TRY(gg_u32(f, "clip.vision.feed_forward_length", &v->n_ff));
    IG_TRY(gg_u32(f, "clip.vision.block_count", &v->n_layer));
    IG_TRY(gg_u32(f, "clip.vision.attention.head_count", &v->n_head));
    int proj = 0;
    if (gg_u32(f, "clip.vision.projection_dim", &proj) == IG_OK && proj != v->n_embd)
        return ig_fail(IG_ERR_FORMAT,
                       "the projector makes %d values per image token but the text model's width is %d: it belongs "
                       "to another model",
                       proj, v->n_embd);
    if (!gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &v->eps)) v->eps = 1e-6f;
    /* Pooling: the kernel is the scale factor when given; else the
     * released models' 256 tokens per image. */
    int side = v->patch > 0 ? v->image_size / v->patch : 0, tokens = 256, k = 0;
    if (gg_u32(f, "clip.vision.projector.scale_factor", &k) == IG_OK && k > 0 && side % k == 0)
        tokens = (side / k) * (side / k);
    ig_clear_error();
    IG_TRY(finish_sizes(v, tokens));
    return bind(v, gguf_find_t, f, &gguf_names, 0.0f);
}

ig_status ig_vision_from_mmproj(const char *path, int n_embd, ig_vision **out) {
    *out = NULL;
    ig_vision *v = ig_calloc_array(1, sizeof *v);
    if (!v) return IG_ERR_NO_MEMORY;
    snprintf(v->format, sizeof v->format, "mmproj");
    v->n_embd = n_embd;
    v->image_id = 262144;
    v->boi_id = 255999;
    v->eoi_id = 256000;
    ig_status st = mmproj_impl(v, path);
    if (st != IG_OK) {
        ig_fail_wrap(st, "%s", path);
        ig_vision_free(v);
        return st;
    }
    *out = v;
    return IG_OK;
}
