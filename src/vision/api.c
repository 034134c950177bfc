/* The public image API (ignis.h): a model's vision tower, preprocessing,
 * and the image embeddings. */
#include "ignis.h"
#include "engine/context.h"
#include "model/model.h"
#include "tokenizer/tok_internal.h"
#include "vision/image.h"
#include "vision/vision.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token ids from the model's tokenizer when it has the Gemma 3 image
 * tokens (GGUF text models with an mmproj). */
static void ids_from_tokenizer(ig_model *m, ig_vision *v) {
    if (!m->tokenizer) return;
    int32_t id = ig_tok_find(m->tokenizer, "<image_soft_token>", 18);
    if (id >= 0) v->image_id = id;
    id = ig_tok_find(m->tokenizer, "<start_of_image>", 16);
    if (id >= 0) v->boi_id = id;
    id = ig_tok_find(m->tokenizer, "<end_of_image>", 14);
    if (id >= 0) v->eoi_id = id;
}

ig_status ig_model_attach_vision(ig_model *m) {
    if (!m->hf) return IG_OK;
    return ig_vision_from_hf(m->hf, m->path, m->hp.n_embd, &m->vision);
}

ig_status ig_model_load_mmproj(ig_model *m, const char *path) {
    if (!m || !path) return ig_fail(IG_ERR_INVALID_ARG, "ig_model_load_mmproj: NULL argument");
    if (m->device) return ig_fail(IG_ERR_INVALID_ARG, "the mmproj is loaded before the model's first context");
    ig_vision *v = NULL;
    IG_TRY(ig_vision_from_mmproj(path, m->hp.n_embd, &v));
    if (m->vision) { /* the checkpoint's config names them */
        v->image_id = m->vision->image_id;
        v->boi_id = m->vision->boi_id;
        v->eoi_id = m->vision->eoi_id;
    } else {
        ids_from_tokenizer(m, v);
    }
    if (v->image_id >= m->hp.n_vocab || v->boi_id >= m->hp.n_vocab || v->eoi_id >= m->hp.n_vocab) {
        ig_status st = ig_fail(IG_ERR_FORMAT, "%s: the text model's vocabulary (%d) has no image tokens", path,
                               m->hp.n_vocab);
        ig_vision_free(v);
        return st;
    }
    ig_vision_free(m->vision);
    m->vision = v;
    return IG_OK;
}

ig_status ig_mmproj_next_to(const char *model_path, char **out) {
    *out = NULL;
    if (!model_path) return IG_OK;
    const char *slash = strrchr(model_path, '/');
    char *dir = slash ? ig_strndup(model_path, (size_t)(slash - model_path) + (slash == model_path))
                      : ig_strdup(".");
    if (!dir) return IG_ERR_NO_MEMORY;
    DIR *d = opendir(dir);
    ig_status st = IG_OK;
    if (d) {
        char *best = NULL;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n < 11 || strncmp(e->d_name, "mmproj", 6) || strcmp(e->d_name + n - 5, ".gguf")) continue;
            if (best && strcmp(e->d_name, best) >= 0) continue; /* the first by name: deterministic */
            free(best);
            best = ig_strdup(e->d_name);
            if (!best) {
                st = IG_ERR_NO_MEMORY;
                break;
            }
        }
        closedir(d);
        if (best && st == IG_OK) {
            size_t len = strlen(dir) + strlen(best) + 2;
            *out = ig_malloc(len);
            if (!*out) st = IG_ERR_NO_MEMORY;
            else snprintf(*out, len, "%s/%s", dir, best);
        }
        free(best);
    }
    free(dir);
    return st;
}

bool ig_model_has_vision(const ig_model *m) { return m && m->vision; }
int ig_model_image_tokens(const ig_model *m) { return m && m->vision ? m->vision->n_tokens : 0; }
int32_t ig_model_image_token_id(const ig_model *m) { return m && m->vision ? m->vision->image_id : -1; }
int32_t ig_model_image_start_id(const ig_model *m) { return m && m->vision ? m->vision->boi_id : -1; }
int32_t ig_model_image_end_id(const ig_model *m) { return m && m->vision ? m->vision->eoi_id : -1; }

ig_status ig_image_preprocess(const ig_model *m, const ig_image *img, float **pixels, int *size) {
    if (!m || !img || !pixels) return ig_fail(IG_ERR_INVALID_ARG, "ig_image_preprocess: NULL argument");
    *pixels = NULL;
    if (!m->vision) return ig_fail(IG_ERR_UNSUPPORTED, "this model has no vision tower");
    const int S = m->vision->image_size;
    const size_t n = (size_t)S * (size_t)S;
    uint8_t *rgb = ig_calloc_array(n, 3);
    float *px = ig_calloc_array(n * 3, sizeof(float));
    ig_status st = rgb && px ? ig_image_resize_bilinear(img->rgb, img->w, img->h, rgb, S, S) : IG_ERR_NO_MEMORY;
    if (st == IG_OK) {
        /* As the image processor: (x * (1/255) - 0.5) / 0.5 in double,
         * rounded once to f32; channels first. */
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < 3; c++)
                px[(size_t)c * n + i] = (float)(((double)rgb[i * 3 + c] * (1.0 / 255.0) - 0.5) / 0.5);
        *pixels = px;
        px = NULL;
        if (size) *size = S;
    }
    free(rgb);
    free(px);
    return st;
}

ig_status ig_image_embed(ig_model *m, const ig_image *img, int n_threads, float **out, float **vision_out) {
    if (!m || !img || !out) return ig_fail(IG_ERR_INVALID_ARG, "ig_image_embed: NULL argument");
    *out = NULL;
    if (vision_out) *vision_out = NULL;
    if (!m->vision) return ig_fail(IG_ERR_UNSUPPORTED, "this model has no vision tower");
    if (m->params.backend != IG_BACKEND_CPU)
        return ig_fail(IG_ERR_UNSUPPORTED, "images are computed on the CPU backend only (not %s)", "Vulkan");
    const ig_vision *v = m->vision;
    float *px = NULL;
    IG_TRY(ig_image_preprocess(m, img, &px, NULL));
    float *e = ig_calloc_array((size_t)v->n_tokens * (size_t)v->n_embd, sizeof(float));
    float *vo = vision_out ? ig_calloc_array((size_t)v->side * v->side * (size_t)v->width, sizeof(float)) : NULL;
    ig_status st = e && (vo || !vision_out) ? IG_OK : IG_ERR_NO_MEMORY;
    if (n_threads <= 0) n_threads = m->params.n_threads;
    if (st == IG_OK) st = ig_vision_encode(v, px, n_threads, vo, e);
    free(px);
    if (st != IG_OK) {
        free(e);
        free(vo);
        return st;
    }
    *out = e;
    if (vision_out) *vision_out = vo;
    return IG_OK;
}

ig_status ig_image_expand_prompt(const ig_model *m, const int32_t *ids, int n, int32_t **out, int *n_out,
                                 int *n_images) {
    if (!m || !out || !n_out || (!ids && n > 0) || n < 0)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_image_expand_prompt: bad argument");
    *out = NULL;
    *n_out = 0;
    if (n_images) *n_images = 0;
    if (!m->vision) return ig_fail(IG_ERR_UNSUPPORTED, "this model has no vision tower");
    const ig_vision *v = m->vision;
    int32_t *nl = NULL;
    size_t n_nl = 0;
    if (m->tokenizer) IG_TRY(ig_tokenize(m->tokenizer, "\n\n", 2, false, false, &nl, &n_nl));
    int count = 0;
    for (int i = 0; i < n; i++) count += ids[i] == v->boi_id;
    size_t total = (size_t)n, per = 2 * n_nl + (size_t)v->n_tokens + 1;
    if (!ig_size_add(total, (size_t)count * per, &total) || total > (size_t)1 << 28) {
        free(nl);
        return ig_fail(IG_ERR_INVALID_ARG, "too many images in the prompt");
    }
    int32_t *o = ig_calloc_array(total ? total : 1, sizeof *o);
    if (!o) {
        free(nl);
        return IG_ERR_NO_MEMORY;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] != v->boi_id) {
            o[k++] = ids[i];
            continue;
        }
        for (size_t j = 0; j < n_nl; j++) o[k++] = nl[j];
        o[k++] = v->boi_id;
        for (int j = 0; j < v->n_tokens; j++) o[k++] = v->image_id;
        o[k++] = v->eoi_id;
        for (size_t j = 0; j < n_nl; j++) o[k++] = nl[j];
    }
    free(nl);
    *out = o;
    *n_out = (int)k;
    if (n_images) *n_images = count;
    return IG_OK;
}

ig_status ig_decode_prompt_images(ig_context *ctx, int seq, const int32_t *tokens, int n, const float *const *images,
                                  int n_images) {
    if (!ctx || !tokens || n < 1 || n_images < 0 || (n_images > 0 && !images))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_decode_prompt_images: bad argument");
    ig_model *m = ctx->model;
    if (ig_seq_len(ctx, seq) != 0) return ig_fail(IG_ERR_INVALID_ARG, "sequence %d is not empty", seq);
    const int32_t pid = m->vision ? m->vision->image_id : -1;
    const int T = m->vision ? m->vision->n_tokens : 0, E = m->hp.n_embd;
    const float **embd = ig_calloc_array((size_t)n, sizeof *embd);
    int32_t *img = ig_calloc_array((size_t)n, sizeof *img), *pos = ig_calloc_array((size_t)n, sizeof *pos);
    int32_t *sq = ig_calloc_array((size_t)n, sizeof *sq);
    uint8_t *want = ig_calloc_array((size_t)n, 1);
    ig_status st = embd && img && pos && sq && want ? IG_OK : IG_ERR_NO_MEMORY;
    int k = 0;
    for (int i = 0; i < n && st == IG_OK;) {
        pos[i] = i;
        sq[i] = seq;
        if (pid < 0 || tokens[i] != pid) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && tokens[j] == pid) j++;
        if (j - i != T)
            st = ig_fail(IG_ERR_INVALID_ARG, "a run of %d image placeholders at token %d (an image takes %d)", j - i, i,
                         T);
        else if (k >= n_images)
            st = ig_fail(IG_ERR_INVALID_ARG, "the prompt has more images than the %d given", n_images);
        else {
            for (int t = i; t < j; t++) {
                pos[t] = t;
                sq[t] = seq;
                img[t] = k + 1;
                embd[t] = images[k] + (size_t)(t - i) * E;
            }
            k++;
        }
        i = j;
    }
    if (st == IG_OK && k != n_images)
        st = ig_fail(IG_ERR_INVALID_ARG, "%d images given but the prompt has places for %d", n_images, k);
    const int nb = ig_context_params_get(ctx)->n_batch;
    if (st == IG_OK && T > nb)
        st = ig_fail(IG_ERR_INVALID_ARG, "an image (%d tokens) does not fit a batch of %d tokens", T, nb);
    for (int i = 0; i < n && st == IG_OK;) {
        int j = IG_MIN(n, i + nb);
        /* never split an image: end the chunk before it */
        if (j < n && img[j] != 0 && img[j - 1] == img[j]) {
            int s = j;
            while (s > i && img[s - 1] == img[j]) s--;
            if (s > i) j = s;
        }
        want[j - 1] = j == n;
        const ig_batch b = {.n_tokens = j - i, .tokens = tokens + i, .pos = pos + i, .seq = sq + i, .want_logits = want + i};
        const ig_batch_images bi = {.embd = embd + i, .image = img + i};
        st = ig_decode_images(ctx, &b, &bi);
        i = j;
    }
    free(embd);
    free(img);
    free(pos);
    free(sq);
    free(want);
    return st;
}
