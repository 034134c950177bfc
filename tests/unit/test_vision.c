/* Vision-language models: the tiny Gemma 3 VLM fixture (vision/tiny-vlm)
 * against the transformers reference: preprocessing, the vision tower,
 * the projected embeddings, and the text model's logits with the images
 * injected (bidirectional attention inside each image); the mmproj GGUF
 * against the safetensors; hostile images. */
#include "ignis.h"
#include "model/model.h"
#include "test.h"
#include "vision/image.h"
#include "vision/vision.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void vlm_path(char *buf, size_t cap, const char *file) {
    snprintf(buf, cap, "%s/vision/tiny-vlm%s%s", ig_test_fixtures(), file ? "/" : "", file ? file : "");
}

static json_t *load_reference(void) {
    char p[1024];
    vlm_path(p, sizeof p, "reference.json");
    json_error_t e;
    return json_load_file(p, 0, &e);
}

/* Flattens a nested array of numbers into a malloc'ed vector. */
static void flatten(const json_t *j, float *out, size_t *n) {
    if (json_is_array(j)) {
        size_t i;
        const json_t *x;
        json_array_foreach(j, i, x) flatten(x, out, n);
    } else {
        if (out) out[*n] = (float)json_number_value(j);
        (*n)++;
    }
}

static float *json_floats(const json_t *j, size_t *n) {
    size_t cnt = 0;
    flatten(j, NULL, &cnt);
    float *v = calloc(cnt ? cnt : 1, sizeof *v);
    size_t k = 0;
    if (v) flatten(j, v, &k);
    *n = cnt;
    return v;
}

/* max |a - b| / max |b|: the relative error of a tensor. */
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static const json_t *find_case(const json_t *ref, const char *name) {
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(ref, "cases"), i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    return NULL;
}

static ig_model *load_vlm(void) {
    char p[1024];
    vlm_path(p, sizeof p, NULL);
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    ig_model *m = NULL;
    if (ig_model_load(p, &mp, &m) != IG_OK) return NULL;
    return m;
}

IG_TEST(vision_load_hf) {
    ig_model *m = load_vlm();
    REQUIRE(m);
    REQUIRE(ig_model_has_vision(m));
    CHECK_EQ_INT(ig_model_image_tokens(m), 4);
    CHECK_EQ_INT(ig_model_image_token_id(m), 502);
    CHECK_EQ_INT(ig_model_image_start_id(m), 500);
    CHECK_EQ_INT(ig_model_image_end_id(m), 501);
    const ig_vision *v = m->vision;
    CHECK_EQ_INT(v->image_size, 56);
    CHECK_EQ_INT(v->patch, 14);
    CHECK_EQ_INT(v->width, 48);
    CHECK_EQ_INT(v->n_ff, 96);
    CHECK_EQ_INT(v->n_layer, 3);
    CHECK_EQ_INT(v->n_head, 3);
    CHECK_EQ_INT(v->pool, 2);
    CHECK_EQ_INT(v->n_embd, 64);
    ig_model_free(m);
}

IG_TEST(vision_pixels) {
    json_t *ref = load_reference();
    REQUIRE(ref);
    ig_model *m = load_vlm();
    REQUIRE(m);
    const char *cases[] = {"one-exact", "one-resized"};
    for (int c = 0; c < 2; c++) {
        const json_t *cs = find_case(ref, cases[c]);
        REQUIRE(cs);
        char p[1024];
        vlm_path(p, sizeof p, json_string_value(json_array_get(json_object_get(cs, "images"), 0)));
        ig_image *img = NULL;
        REQUIRE_OK(ig_image_load(p, &img));
        float *px = NULL;
        int S = 0;
        REQUIRE_OK(ig_image_preprocess(m, img, &px, &S));
        CHECK_EQ_INT(S, 56);
        size_t n = 0;
        float *want = json_floats(json_object_get(cs, "pixel_values"), &n);
        REQUIRE(want && n == 3 * 56 * 56);
        size_t diff = 0;
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            diff += px[i] != want[i];
            worst = fmax(worst, fabs((double)px[i] - want[i]));
        }
        printf("  %s: %zu of %zu pixel values differ (max %.3g)\n", cases[c], diff, n, worst);
        /* exact.png needs no resize: bit-identical. resize.png is resampled
         * as this Pillow does (tests/e2e/test_vision_pixels.py checks that
         * exactly); the reference's Pillow rounds 21 values one 8-bit level
         * away. */
        if (c == 0) CHECK_EQ_INT(diff, 0);
        else {
            CHECK(diff <= 32);
            CHECK(worst <= 2.0 / 255.0 + 1e-6);
        }
        free(want);
        free(px);
        ig_image_free(img);
    }
    ig_model_free(m);
    json_decref(ref);
}

/* The tower output and the embeddings of every image of every case. */
static void check_embeddings(ig_model *m, const json_t *ref, double tol_tower, double tol_embd, const char *what,
                             bool from_pixels) {
    size_t i;
    const json_t *cs;
    json_array_foreach(json_object_get(ref, "cases"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        size_t k;
        const json_t *im;
        json_array_foreach(json_object_get(cs, "images"), k, im) {
            char p[1024];
            vlm_path(p, sizeof p, json_string_value(im));
            ig_image *img = NULL;
            REQUIRE_OK(ig_image_load(p, &img));
            float *e = NULL, *vo = NULL;
            REQUIRE_OK(ig_image_embed(m, img, 2, &e, &vo));
            if (from_pixels) { /* the encoder alone, on the reference's own input */
                size_t np = 0;
                float *px = json_floats(json_array_get(json_object_get(cs, "pixel_values"), k), &np);
                REQUIRE(px && np == 3 * 56 * 56);
                REQUIRE_OK(ig_vision_encode(m->vision, px, 2, vo, e));
                free(px);
            }
            size_t nv = 0, ne = 0;
            float *wv = json_floats(json_array_get(json_object_get(cs, "vision_tower_out"), k), &nv);
            float *we = json_floats(json_array_get(json_object_get(cs, "image_embeddings"), k), &ne);
            REQUIRE(wv && we && nv == 16 * 48 && ne == 4 * 64);
            const double rv = rel_err(vo, wv, nv), re = rel_err(e, we, ne);
            printf("  %s %s image %zu: tower rel err %.3g, embeddings rel err %.3g\n", what, name, k, rv, re);
            if (!(rv <= tol_tower)) ig_test_fail_at(__FILE__, __LINE__, "%s %s: tower rel err %g", what, name, rv);
            if (!(re <= tol_embd)) ig_test_fail_at(__FILE__, __LINE__, "%s %s: embeddings rel err %g", what, name, re);
            free(wv);
            free(we);
            free(e);
            free(vo);
            ig_image_free(img);
        }
    }
}

IG_TEST(vision_tower_and_embeddings) {
    json_t *ref = load_reference();
    REQUIRE(ref);
    ig_model *m = load_vlm();
    REQUIRE(m);
    check_embeddings(m, ref, 1e-4, 1e-4, "safetensors (reference pixels)", true);
    /* From the PNG files: exact.png's pixels are bit-identical, so 1e-4
     * holds there too; resize.png goes through this Pillow's resampling,
     * which rounds 21 of its 9408 values one level away from the
     * reference's (made with another Pillow), hence 1e-3. */
    check_embeddings(m, ref, 1e-3, 1e-3, "safetensors (PNG)", false);
    ig_model_free(m);
    json_decref(ref);
}

IG_TEST(vision_mmproj_matches_safetensors) {
    json_t *ref = load_reference();
    REQUIRE(ref);
    ig_model *m = load_vlm();
    REQUIRE(m);
    char p[1024];
    vlm_path(p, sizeof p, "mmproj-f32.gguf");
    REQUIRE_OK(ig_model_load_mmproj(m, p));
    CHECK_EQ_INT(m->vision->n_tokens, 4);
    CHECK(!strcmp(m->vision->format, "mmproj"));
    /* The converter stores the projection in f16: the embeddings carry its
     * rounding (about 2^-11 relative). */
    check_embeddings(m, ref, 1e-4, 2e-3, "mmproj (reference pixels)", true);
    /* Against the safetensors' embeddings directly. */
    ig_model *m2 = load_vlm();
    REQUIRE(m2);
    vlm_path(p, sizeof p, "exact.png");
    ig_image *img = NULL;
    REQUIRE_OK(ig_image_load(p, &img));
    float *a = NULL, *b = NULL;
    REQUIRE_OK(ig_image_embed(m, img, 1, &a, NULL));
    REQUIRE_OK(ig_image_embed(m2, img, 1, &b, NULL));
    const double r = rel_err(a, b, 4 * 64);
    printf("  mmproj vs safetensors embeddings: rel err %.3g\n", r);
    CHECK(r <= 2e-3);
    free(a);
    free(b);
    ig_image_free(img);
    ig_model_free(m2);
    ig_model_free(m);
    json_decref(ref);
}

IG_TEST(vision_mmproj_wrong_model) {
    /* The projector's width must be the text model's. */
    char p[1024];
    vlm_path(p, sizeof p, "mmproj-f32.gguf");
    ig_vision *v = NULL;
    CHECK_STATUS(ig_vision_from_mmproj(p, 640, &v), IG_ERR_FORMAT);
    CHECK(v == NULL);
    CHECK(strstr(ig_last_error(), "another model") != NULL);
}

/* Logits of a case: images embedded, injected at the placeholders, each
 * image's run of placeholders one bidirectional block. */
static void run_case(ig_model *m, const json_t *cs, bool bidirectional, float **logits, size_t *n_logits) {
    const json_t *toks = json_object_get(cs, "tokens");
    const int n = (int)json_array_size(toks), E = m->hp.n_embd;
    int32_t *tok = calloc((size_t)n, sizeof *tok), *pos = calloc((size_t)n, sizeof *pos);
    int32_t *seq = calloc((size_t)n, sizeof *seq), *img_of = calloc((size_t)n, sizeof *img_of);
    const float **embd = calloc((size_t)n, sizeof *embd);
    uint8_t *want = calloc((size_t)n, 1);
    const json_t *images = json_object_get(cs, "images");
    float *emb[8] = {0};
    const size_t n_img = images ? json_array_size(images) : 0;
    for (size_t k = 0; k < n_img && k < 8; k++) {
        size_t np = 0;
        float *px = json_floats(json_array_get(json_object_get(cs, "pixel_values"), k), &np);
        emb[k] = calloc((size_t)m->vision->n_tokens * E, sizeof(float));
        if (px && emb[k] && np == 3 * 56 * 56) ig_vision_encode(m->vision, px, 2, NULL, emb[k]);
        free(px);
    }
    int image = 0, in_run = 0;
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)json_integer_value(json_array_get(toks, i));
        pos[i] = i;
        want[i] = 1;
        if (tok[i] == ig_model_image_token_id(m)) {
            if (!in_run) image++;
            img_of[i] = image;
            embd[i] = emb[image - 1] ? emb[image - 1] + (size_t)in_run * E : NULL;
            in_run++;
        } else {
            in_run = 0;
        }
    }
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 64;
    cp.n_threads = 2;
    cp.kv_type = IG_KV_F32;
    ig_context *ctx = NULL;
    *logits = NULL;
    if (ig_context_create(m, &cp, &ctx) == IG_OK) {
        ig_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .want_logits = want};
        ig_batch_images bi = {.embd = embd, .image = bidirectional ? img_of : NULL};
        if (ig_decode_images(ctx, &b, n_img ? &bi : NULL) == IG_OK) {
            const int V = m->hp.n_vocab;
            *logits = calloc((size_t)n * V, sizeof(float));
            for (int i = 0; i < n && *logits; i++) memcpy(*logits + (size_t)i * V, ig_get_logits(ctx, i), (size_t)V * sizeof(float));
            *n_logits = (size_t)n * V;
        }
        ig_context_free(ctx);
    }
    for (size_t k = 0; k < 8; k++) free(emb[k]);
    free(tok);
    free(pos);
    free(seq);
    free(img_of);
    free(embd);
    free(want);
}

IG_TEST(vision_logits) {
    json_t *ref = load_reference();
    REQUIRE(ref);
    ig_model *m = load_vlm();
    REQUIRE(m);
    size_t i;
    const json_t *cs;
    json_array_foreach(json_object_get(ref, "cases"), i, cs) {
        float *got = NULL;
        size_t n = 0, nw = 0;
        run_case(m, cs, true, &got, &n);
        REQUIRE(got);
        float *want = json_floats(json_object_get(cs, "logits"), &nw);
        REQUIRE(want && nw == n);
        const double r = rel_err(got, want, n);
        printf("  %s logits: rel err %.3g\n", json_string_value(json_object_get(cs, "name")), r);
        if (!(r <= 1e-4)) ig_test_fail_at(__FILE__, __LINE__, "%s logits rel err %g", json_string_value(json_object_get(cs, "name")), r);
        free(got);
        free(want);
    }
    /* Without the bidirectional image blocks (causal attention throughout)
     * the logits differ: the test can tell. */
    {
        const json_t *c1 = find_case(ref, "one-exact");
        float *got = NULL;
        size_t n = 0, nw = 0;
        run_case(m, c1, false, &got, &n);
        float *want = json_floats(json_object_get(c1, "logits"), &nw);
        REQUIRE(got && want && nw == n);
        const double r = rel_err(got, want, n);
        printf("  one-exact causal-only logits: rel err %.3g (must be large)\n", r);
        CHECK(r > 1e-2);
        free(got);
        free(want);
    }
    const json_t *to = json_object_get(ref, "text_only");
    float *got = NULL;
    size_t n = 0, nw = 0;
    run_case(m, to, true, &got, &n);
    REQUIRE(got);
    float *want = json_floats(json_object_get(to, "logits"), &nw);
    REQUIRE(want && nw == n);
    const double r = rel_err(got, want, n);
    printf("  text_only logits: rel err %.3g\n", r);
    CHECK(r <= 1e-4);
    free(got);
    free(want);
    ig_model_free(m);
    json_decref(ref);
}

/* Truncated, corrupted and lying files: errors with a message, never a
 * crash (run under the sanitizers too). */
IG_TEST(vision_hostile_images) {
    char p[1024];
    vlm_path(p, sizeof p, "resize.png");
    FILE *f = fopen(p, "rb");
    REQUIRE(f);
    static uint8_t buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    REQUIRE(n > 1000 && n < sizeof buf);
    ig_image *img = NULL;
    REQUIRE_OK(ig_image_decode(buf, n, &img));
    CHECK_EQ_INT(ig_image_width(img), 97);
    CHECK_EQ_INT(ig_image_height(img), 71);
    ig_image_free(img);
    const size_t cuts[] = {1, 8, 20, 33, 100, n / 2, n - 20};
    for (size_t i = 0; i < IG_ARRAY_LEN(cuts); i++) {
        img = NULL;
        CHECK(ig_image_decode(buf, cuts[i], &img) != IG_OK);
        CHECK(img == NULL);
        CHECK(*ig_last_error());
    }
    static uint8_t bad[1 << 16];
    for (int k = 0; k < 20; k++) {
        memcpy(bad, buf, n);
        for (size_t i = 60 + (size_t)k; i < n; i += 97 + (size_t)k) bad[i] ^= (uint8_t)(0x35 + k);
        img = NULL;
        if (ig_image_decode(bad, n, &img) == IG_OK) { /* a flip that still decodes: a whole image */
            CHECK(img && ig_image_width(img) == 97);
        }
        ig_image_free(img);
    }
    /* JPEG signature and garbage */
    uint8_t jpg[64] = {0xff, 0xd8, 0xff, 0xe0};
    for (int i = 4; i < 64; i++) jpg[i] = (uint8_t)(i * 37);
    img = NULL;
    CHECK(ig_image_decode(jpg, sizeof jpg, &img) != IG_OK && img == NULL);
    /* a PNG header claiming 100000 x 100000 pixels: refused before decoding */
    memcpy(bad, buf, n);
    const uint8_t dims[8] = {0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0};
    memcpy(bad + 16, dims, 8);
    uint32_t crc = 0xffffffffu; /* CRC-32 of "IHDR" + data */
    for (int i = 12; i < 29; i++) {
        crc ^= bad[i];
        for (int b = 0; b < 8; b++) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    crc ^= 0xffffffffu;
    bad[29] = (uint8_t)(crc >> 24), bad[30] = (uint8_t)(crc >> 16), bad[31] = (uint8_t)(crc >> 8), bad[32] = (uint8_t)crc;
    img = NULL;
    CHECK(ig_image_decode(bad, n, &img) != IG_OK && img == NULL);
    CHECK(strstr(ig_last_error(), "too large") != NULL);
    CHECK(ig_image_decode("GIF89a", 6, &img) == IG_ERR_UNSUPPORTED);
}
