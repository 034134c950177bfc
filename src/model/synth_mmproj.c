/* Synthetic mmproj GGUFs (synth_mmproj.h). */
#include "model/synth_mmproj.h"

#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ig_synth_mmproj_params ig_synth_mmproj_released(int n_embd) {
    return (ig_synth_mmproj_params){.image_size = 896,
                                    .patch = 14,
                                    .width = 1152,
                                    .n_ff = 4304,
                                    .n_layer = 27,
                                    .n_head = 16,
                                    .pool = 4,
                                    .n_embd = n_embd,
                                    .type = IG_TYPE_F16,
                                    .seed = 0};
}

typedef enum dist { D_MATRIX, D_SMALL, D_ONE } dist;

typedef struct mm_tensor {
    char name[GGUF_WRITER_MAX_NAME + 1];
    int n_dims;
    int64_t ne[4];
    ig_dtype type;
    dist d;
    float sd;
} mm_tensor;

typedef struct plan {
    mm_tensor *t;
    size_t n;
    gguf_writer *w;
} plan;

static ig_status add(plan *p, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                     ig_dtype type, dist d, float sd) {
    mm_tensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = ne3;
    t->type = type;
    t->d = d;
    t->sd = sd;
    return gguf_writer_add_tensor(p->w, t->name, n_dims, t->ne, type);
}

static ig_status check(const ig_synth_mmproj_params *p) {
    if (p->patch < 1 || p->patch > 64 || p->pool < 1 || p->image_size < p->patch * p->pool ||
        p->image_size > 8192 || p->image_size % (p->patch * p->pool))
        return ig_fail(IG_ERR_INVALID_ARG,
                       "synth mmproj: the image size %d is not a multiple of patch %d x pool %d", p->image_size,
                       p->patch, p->pool);
    if (p->width < 1 || p->width > 65536 || p->n_ff < 1 || p->n_ff > 262144 || p->n_layer < 1 ||
        p->n_layer > 256 || p->n_head < 1 || p->width % p->n_head || p->n_embd < 1 || p->n_embd > 65536)
        return ig_fail(IG_ERR_INVALID_ARG, "synth mmproj: bad sizes");
    if (p->type != IG_TYPE_F16 && p->type != IG_TYPE_Q8_0)
        return ig_fail(IG_ERR_INVALID_ARG, "synth mmproj: matrices are f16 or q8_0");
    if (p->type == IG_TYPE_Q8_0 && p->width % 32)
        return ig_fail(IG_ERR_INVALID_ARG, "synth mmproj: q8_0 needs a width that is a multiple of 32");
    return IG_OK;
}

/* A matrix of rows of `in`: Q8_0 when asked and the rows are whole blocks. */
static ig_dtype mat_type(const ig_synth_mmproj_params *p, int64_t in) {
    return p->type == IG_TYPE_Q8_0 && in % 32 == 0 ? IG_TYPE_Q8_0 : IG_TYPE_F16;
}

static ig_status build(const ig_synth_mmproj_params *p, plan *pl) {
    IG_TRY(check(p));
    const int64_t D = p->width, F = p->n_ff, P = p->patch, side = p->image_size / p->patch;
    pl->t = ig_calloc_array(16 * (size_t)p->n_layer + 8, sizeof *pl->t);
    if (!pl->t) return IG_ERR_NO_MEMORY;
    IG_TRY(gguf_writer_create(0, &pl->w));
    gguf_writer *w = pl->w;
    IG_TRY(gguf_writer_add_str(w, "general.architecture", "clip"));
    IG_TRY(gguf_writer_add_str(w, "general.type", "mmproj"));
    IG_TRY(gguf_writer_add_str(w, "general.name", "Synthetic Gemma 3 vision tower"));
    IG_TRY(gguf_writer_add_u32(w, "general.file_type", p->type == IG_TYPE_Q8_0 ? 7 : 1));
    IG_TRY(gguf_writer_add_bool(w, "clip.has_vision_encoder", true));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)p->n_embd));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.image_size", (uint32_t)p->image_size));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.patch_size", (uint32_t)p->patch));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.embedding_length", (uint32_t)D));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.feed_forward_length", (uint32_t)F));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)p->n_layer));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.attention.head_count", (uint32_t)p->n_head));
    const float half[3] = {0.5f, 0.5f, 0.5f};
    IG_TRY(gguf_writer_add_arr(w, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half, 3));
    IG_TRY(gguf_writer_add_arr(w, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half, 3));
    IG_TRY(gguf_writer_add_str(w, "clip.projector_type", "gemma3"));
    IG_TRY(gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f));
    IG_TRY(gguf_writer_add_bool(w, "clip.use_gelu", true));
    IG_TRY(gguf_writer_add_u32(w, "clip.vision.projector.scale_factor", (uint32_t)p->pool));
    IG_TRY(gguf_writer_add_u32(w, "general.quantization_version", 2));
    const float sd_d = 1.0f / sqrtf((float)D), sd_f = 1.0f / sqrtf((float)F);
    IG_TRY(add(pl, "mm.input_projection.weight", 2, p->n_embd, D, 1, 1, IG_TYPE_F16, D_MATRIX, sd_d));
    IG_TRY(add(pl, "mm.soft_emb_norm.weight", 1, D, 1, 1, 1, IG_TYPE_F32, D_ONE, 0.1f));
    IG_TRY(add(pl, "v.patch_embd.bias", 1, D, 1, 1, 1, IG_TYPE_F32, D_SMALL, 0.02f));
    IG_TRY(add(pl, "v.patch_embd.weight", 4, P, P, 3, D, IG_TYPE_F16, D_MATRIX, 1.0f / sqrtf((float)(3 * P * P))));
    IG_TRY(add(pl, "v.position_embd.weight", 2, D, side * side, 1, 1, IG_TYPE_F32, D_SMALL, 0.1f));
    char n[GGUF_WRITER_MAX_NAME + 1];
    for (int l = 0; l < p->n_layer; l++) {
#define LT(part, nd, a, b, type, d, sd)                                                                   \
    do {                                                                                                  \
        snprintf(n, sizeof n, "v.blk.%d.%s", l, part);                                                   \
        IG_TRY(add(pl, n, nd, a, b, 1, 1, type, d, sd));                                                  \
    } while (0)
        LT("ln1.bias", 1, D, 1, IG_TYPE_F32, D_SMALL, 0.02f);
        LT("ln1.weight", 1, D, 1, IG_TYPE_F32, D_ONE, 0.1f);
        LT("ln2.bias", 1, D, 1, IG_TYPE_F32, D_SMALL, 0.02f);
        LT("ln2.weight", 1, D, 1, IG_TYPE_F32, D_ONE, 0.1f);
        LT("ffn_up.bias", 1, F, 1, IG_TYPE_F32, D_SMALL, 0.02f);
        LT("ffn_up.weight", 2, D, F, mat_type(p, D), D_MATRIX, sd_d);
        LT("ffn_down.bias", 1, D, 1, IG_TYPE_F32, D_SMALL, 0.02f);
        LT("ffn_down.weight", 2, F, D, mat_type(p, F), D_MATRIX, sd_f);
        static const char *const qkvo[] = {"attn_k", "attn_out", "attn_q", "attn_v"};
        for (int i = 0; i < 4; i++) {
            char part[32];
            snprintf(part, sizeof part, "%s.bias", qkvo[i]);
            LT(part, 1, D, 1, IG_TYPE_F32, D_SMALL, 0.02f);
            snprintf(part, sizeof part, "%s.weight", qkvo[i]);
            LT(part, 2, D, D, mat_type(p, D), D_MATRIX, sd_d);
        }
#undef LT
    }
    IG_TRY(add(pl, "v.post_ln.bias", 1, D, 1, 1, 1, IG_TYPE_F32, D_SMALL, 0.02f));
    IG_TRY(add(pl, "v.post_ln.weight", 1, D, 1, 1, 1, IG_TYPE_F32, D_ONE, 0.1f));
    return IG_OK;
}

static void plan_free(plan *pl) {
    gguf_writer_free(pl->w);
    free(pl->t);
}

ig_status ig_synth_mmproj_check(const ig_synth_mmproj_params *p, uint64_t *size) {
    if (!p) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_mmproj_check: NULL argument");
    plan pl = {0};
    ig_status st = build(p, &pl);
    if (st == IG_OK && size) *size = gguf_writer_file_size(pl.w);
    plan_free(&pl);
    return st;
}

/* splitmix64 seeded from the seed and the tensor's name (FNV-1a): each
 * tensor's values depend only on those. */
static uint64_t next64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t seed_of(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    return seed ^ h;
}

/* Uniform of standard deviation sd around mean (half-width sqrt(3) sd). */
static void fill(uint64_t *st, float *out, int64_t n, float mean, float sd) {
    const float a = 1.7320508f * sd * (2.0f / 16777216.0f);
    for (int64_t i = 0; i < n; i++) out[i] = mean + a * ((float)(next64(st) >> 40) - 8388608.0f);
}

ig_status ig_synth_mmproj_write(const ig_synth_mmproj_params *p, FILE *fp) {
    if (!p || !fp) return ig_fail(IG_ERR_INVALID_ARG, "ig_synth_mmproj_write: NULL argument");
    plan pl = {0};
    ig_status st = build(p, &pl);
    float *row = NULL;
    uint8_t *buf = NULL;
    int64_t max_row = 0;
    for (size_t i = 0; i < pl.n; i++) max_row = IG_MAX(max_row, pl.t[i].ne[0]);
    if (st == IG_OK) {
        row = ig_calloc_array((size_t)max_row, sizeof *row);
        buf = ig_calloc_array((size_t)max_row, sizeof(float));
        if (!row || !buf) st = IG_ERR_NO_MEMORY;
    }
    if (st == IG_OK) st = gguf_writer_begin(pl.w, fp);
    for (size_t i = 0; i < pl.n && st == IG_OK; i++) {
        const mm_tensor *t = &pl.t[i];
        uint64_t s = seed_of(p->seed, t->name);
        const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        size_t rb = 0;
        if (!ig_dtype_row_bytes(t->type, t->ne[0], &rb)) st = ig_fail(IG_ERR_INTERNAL, "synth mmproj: bad row");
        for (int64_t r = 0; r < rows && st == IG_OK; r++) {
            fill(&s, row, t->ne[0], t->d == D_ONE ? 1.0f : 0.0f, t->sd);
            ig_quantize_row(t->type, row, buf, t->ne[0]);
            st = gguf_writer_write(pl.w, buf, rb);
        }
    }
    if (st == IG_OK) st = gguf_writer_finish(pl.w);
    free(row);
    free(buf);
    plan_free(&pl);
    return st;
}
