/* Vulkan backend: every op against a straightforward C reference, on random
 * inputs of awkward sizes. Runs on any Vulkan device (lavapipe in CI); skips
 * when there is none. Errors are measured as max|gpu - ref| / max|ref| over
 * the whole output. */
#include "test.h"

#ifdef IGNIS_HAVE_VULKAN

#include "backend/vulkan/vk_backend.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- fixtures -------------------------------------------------------------- */

static ig_vk_device *g_dev, *g_dev_split, *g_dev_staging, *g_dev_tiled[6], *g_dev_ext[2][2];
static bool g_tried, g_tried_split, g_tried_staging, g_tried_tiled[6], g_tried_ext[2][2];

static void free_devices(void) {
    ig_vk_device_free(g_dev);
    ig_vk_device_free(g_dev_split);
    ig_vk_device_free(g_dev_staging);
    for (int i = 0; i < 6; i++) ig_vk_device_free(g_dev_tiled[i]), g_dev_tiled[i] = NULL;
    for (int i = 0; i < 4; i++) ig_vk_device_free(g_dev_ext[i / 2][i % 2]), g_dev_ext[i / 2][i % 2] = NULL;
    g_dev = g_dev_split = g_dev_staging = NULL;
}

/* The default device, or NULL (test skipped) when there is no usable one. */
static ig_vk_device *device(void) {
    if (!g_tried) {
        g_tried = true;
        if (ig_vk_device_create(NULL, &g_dev) != IG_OK) {
            fprintf(stderr, "  (no Vulkan device: %s)\n", ig_last_error());
            g_dev = NULL;
        }
        atexit(free_devices);
    }
    if (!g_dev) ig_test_skip("no usable Vulkan device");
    return g_dev;
}

/* The device where it has integer dot products (the int8 mat-vec), else
 * NULL with the test skipped. */
static ig_vk_device *device_int8(void) {
    ig_vk_device *d = device();
    if (d && !ig_vk_device_int8(d)) {
        ig_test_skip("no integer dot product on this device");
        return NULL;
    }
    return d;
}

/* device_split()'s settings on top of p. */
static void split_params(ig_vk_device_params *p) {
    p->weight_part_bytes = 4096;
    p->coopmat_wide_groups = 1;  /* 128-token tiles whenever a batch has 128 */
    p->coopmat_split_groups = 1; /* never split K (device() does on small grids) */
}

/* The same device with weights split into parts of at most 4 KiB. */
static ig_vk_device *device_split(void) {
    if (!device()) return NULL;
    if (!g_tried_split) {
        g_tried_split = true;
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(g_dev)->index;
        split_params(&p);
        if (ig_vk_device_create(&p, &g_dev_split) != IG_OK) g_dev_split = NULL;
    }
    return g_dev_split;
}

/* The same device with one cooperative-matrix extension only (khr: KHR's,
 * else NV's; the H100 has both); split: with device_split()'s settings.
 * NULL when it cannot be made. */
static ig_vk_device *device_ext(bool khr, bool split) {
    if (!device()) return NULL;
    if (!g_tried_ext[khr][split]) {
        g_tried_ext[khr][split] = true;
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(g_dev)->index;
        p.coopmat_ext = khr ? IG_VK_COOPMAT_KHR : IG_VK_COOPMAT_NV;
        if (split) split_params(&p);
        if (ig_vk_device_create(&p, &g_dev_ext[khr][split]) != IG_OK) g_dev_ext[khr][split] = NULL;
    }
    return g_dev_ext[khr][split];
}

/* The same device used as a discrete GPU would be: uploads, reads and
 * fills go through staging copies, weights are split into 4 KiB parts. */
static ig_vk_device *device_staging(void) {
    if (!device()) return NULL;
    if (!g_tried_staging) {
        g_tried_staging = true;
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(g_dev)->index;
        p.weight_part_bytes = 4096;
        p.force_staging = true;
        if (ig_vk_device_create(&p, &g_dev_staging) != IG_OK) g_dev_staging = NULL;
    }
    return g_dev_staging;
}

/* The same device with the tiled prefill attention in every graph,
 * whatever its token count; run_tiled: every step runs it (else none does,
 * and attn.comp in the same graph serves them all); cm: on the tensor cores
 * where the device has them (attn_cm.comp; ATTN_CM_KHR: KHR's only), else
 * attn_tile.comp. */
enum { ATTN_TILE = 0, ATTN_CM = 1, ATTN_CM_KHR = 2 };
static ig_vk_device *device_tiled(bool run_tiled, int cm) {
    if (!device()) return NULL;
    const int i = run_tiled + 2 * cm;
    if (!g_tried_tiled[i]) {
        g_tried_tiled[i] = true;
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(g_dev)->index;
        p.attn_tile_min = 1;
        p.attn_tile_run = run_tiled ? 1 : 1000000;
        p.tuning = "invariant=0"; /* else no graph holds the tiled kernels */
        p.no_attn_coopmat = cm == ATTN_TILE;
        if (cm == ATTN_CM_KHR) p.coopmat_ext = IG_VK_COOPMAT_KHR;
        if (ig_vk_device_create(&p, &g_dev_tiled[i]) != IG_OK) g_dev_tiled[i] = NULL;
    }
    return g_dev_tiled[i];
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd(void) { return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0); }
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rnd() * scale;
}

static double rel_err(const float *got, const float *want, size_t n) {
    double err = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= err)) err = e; /* NaN propagates */
        if (fabs((double)want[i]) > mx) mx = fabs((double)want[i]);
    }
    return err / (mx > 1e-30 ? mx : 1e-30);
}

#define CHECK_REL(got, want, n, tol, ...)                                                          \
    do {                                                                                           \
        double e_ = rel_err((got), (want), (n));                                                   \
        if (getenv("IGNIS_TEST_VERBOSE")) {                                                        \
            fprintf(stderr, "    err %.3g: ", e_);                                                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
        if (!(e_ <= (tol))) {                                                                      \
            ig_test_fail_at(__FILE__, __LINE__, "relative error %.3g > %.3g", e_, (double)(tol));  \
            fprintf(stderr, "    case: " __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static ig_vk_buffer *upload(ig_vk_device *d, const void *data, size_t bytes) {
    ig_vk_buffer *b = NULL;
    if (ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, bytes, &b) != IG_OK) return NULL;
    if (ig_vk_buffer_write(b, 0, data, bytes) != IG_OK) {
        ig_vk_buffer_free(b);
        return NULL;
    }
    return b;
}

static const ig_dtype k_types[] = {IG_TYPE_F32,  IG_TYPE_F16,  IG_TYPE_BF16, IG_TYPE_Q8_0, IG_TYPE_Q4_0,
                                   IG_TYPE_Q5_0, IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};

/* A random weight matrix of rows x n_in in type: host bytes and device copy. */
typedef struct weight {
    ig_dtype type;
    int64_t n_in, rows;
    size_t row_bytes;
    uint8_t *data;
    ig_vk_buffer *buf;
} weight;

static bool weight_make(ig_vk_device *d, ig_dtype type, int64_t n_in, int64_t rows, weight *w) {
    memset(w, 0, sizeof *w);
    w->type = type;
    w->n_in = n_in;
    w->rows = rows;
    if (!ig_dtype_row_bytes(type, n_in, &w->row_bytes)) return false;
    w->data = malloc(w->row_bytes * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    if (!w->data || !tmp) {
        free(tmp);
        return false;
    }
    for (int64_t r = 0; r < rows; r++) {
        fill(tmp, (size_t)n_in, 1.0f);
        ig_quantize_row(type, tmp, w->data + (size_t)r * w->row_bytes, n_in);
    }
    free(tmp);
    if (ig_vk_weight_create(d, type, n_in, rows, &w->buf) != IG_OK) return false;
    return ig_vk_buffer_write(w->buf, 0, w->data, w->row_bytes * (size_t)rows) == IG_OK;
}

static void weight_free(weight *w) {
    ig_vk_buffer_free(w->buf);
    free(w->data);
    memset(w, 0, sizeof *w);
}

/* A step with n tokens: ids below vocab, positions pos0 + t, sequence 0. */
static void step_simple(ig_vk_step *s, int n, int vocab, int pos0, int32_t *tok) {
    int32_t pos[256], seq[256], out[256];
    for (int t = 0; t < n; t++) {
        if (tok) tok[t] = (int32_t)(rnd_u32() % (uint32_t)vocab);
        pos[t] = pos0 + t;
        seq[t] = 0;
        out[t] = t;
    }
    ig_vk_step_set(s, n, tok, pos, seq, n, out);
}

/* ---- device and buffers ---------------------------------------------------- */

IG_TEST(vulkan_list_devices) {
    ig_vk_device_info *infos = NULL;
    int n = 0;
    ig_status st = ig_vk_list_devices(&infos, &n);
    if (st != IG_OK) {
        ig_test_skip("no Vulkan loader");
        return;
    }
    for (int i = 0; i < n; i++) {
        CHECK(infos[i].name[0] != 0);
        CHECK(infos[i].max_storage_buffer_range > 0);
        CHECK(infos[i].n_heaps > 0);
    }
    free(infos);
}

IG_TEST(vulkan_bad_device_index) {
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = 999;
    ig_vk_device *d = NULL;
    ig_status st = ig_vk_device_create(&p, &d);
    CHECK(st != IG_OK);
    CHECK(d == NULL);
    CHECK(strlen(ig_last_error()) > 0);
}

IG_TEST(vulkan_buffer_roundtrip) {
    ig_vk_device *d = device();
    if (!d) return;
    uint8_t src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (uint8_t)rnd_u32();
    ig_vk_buffer *b;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, sizeof src, &b));
    REQUIRE_OK(ig_vk_buffer_write(b, 0, src, sizeof src));
    REQUIRE_OK(ig_vk_buffer_read(b, 0, dst, sizeof dst));
    CHECK(memcmp(src, dst, sizeof src) == 0);
    REQUIRE_OK(ig_vk_buffer_read(b, 17, dst, 100));
    CHECK(memcmp(src + 17, dst, 100) == 0);
    CHECK(ig_vk_buffer_write(b, 990, src, 20) != IG_OK);
    REQUIRE_OK(ig_vk_buffer_zero(b));
    REQUIRE_OK(ig_vk_buffer_read(b, 0, dst, sizeof dst));
    int nz = 0;
    for (int i = 0; i < 1000; i++) nz += dst[i] != 0;
    CHECK_EQ_INT(nz, 0);
    ig_vk_buffer_free(b);

    /* a buffer larger than one binding is refused with a clear error */
    uint64_t too_big = ig_vk_device_get_info(d)->max_storage_buffer_range + 1;
    CHECK_STATUS(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, too_big, &b), IG_ERR_UNSUPPORTED);
}

IG_TEST(vulkan_staging_roundtrip) {
    ig_vk_device *d = device_staging();
    if (!d) return;
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_Q6_K, 512, 30, &w));
    CHECK(ig_vk_buffer_host_ptr(w.buf) == NULL);
    size_t n = w.row_bytes * 30;
    uint8_t *back = malloc(n);
    REQUIRE(back != NULL);
    REQUIRE_OK(ig_vk_buffer_read(w.buf, 0, back, n));
    CHECK(memcmp(back, w.data, n) == 0);
    REQUIRE_OK(ig_vk_buffer_read(w.buf, 1001, back, 3000)); /* crosses parts */
    CHECK(memcmp(back, w.data + 1001, 3000) == 0);
    REQUIRE_OK(ig_vk_buffer_zero(w.buf));
    REQUIRE_OK(ig_vk_buffer_read(w.buf, 0, back, n));
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += back[i] != 0;
    CHECK_EQ_INT(nz, 0);
    free(back);
    weight_free(&w);
}

IG_TEST(vulkan_weight_split_roundtrip) {
    ig_vk_device *d = device_split();
    if (!d) return;
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, 256, 50, &w)); /* 272 B rows, 15 per 4 KiB part */
    CHECK_EQ_INT(ig_vk_buffer_n_parts(w.buf), 4);
    size_t n = w.row_bytes * 50;
    uint8_t *back = malloc(n);
    REQUIRE(back != NULL);
    REQUIRE_OK(ig_vk_buffer_read(w.buf, 0, back, n));
    CHECK(memcmp(back, w.data, n) == 0);
    free(back);
    weight_free(&w);
}

/* ---- embed -------------------------------------------------------------------- */

static void run_embed(ig_vk_device *d, ig_dtype type, int64_t n_in, int rows, int n_tok) {
    weight w;
    REQUIRE(weight_make(d, type, n_in, rows, &w));
    const int stride = (int)n_in + 3;
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    int32_t tok[256];
    step_simple(s, n_tok, rows, 0, tok);
    ig_vk_buffer *y;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)stride * n_tok * 4 + 64, &y));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    const float scale = 33.941f;
    REQUIRE_OK(ig_vk_op_embed(g, w.buf, scale, (ig_vk_view){y, 64, (uint32_t)stride}));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    float *got = malloc((size_t)n_in * 4), *want = malloc((size_t)n_in * 4);
    REQUIRE(got && want);
    for (int t = 0; t < n_tok; t++) {
        REQUIRE_OK(ig_vk_buffer_read(y, 64 + (size_t)t * stride * 4, got, (size_t)n_in * 4));
        ig_dequantize_row(type, w.data + (size_t)tok[t] * w.row_bytes, want, n_in);
        for (int64_t i = 0; i < n_in; i++) want[i] *= scale;
        CHECK_REL(got, want, (size_t)n_in, 1e-6, "embed %s n_in %lld token %d", ig_dtype_name(type),
                  (long long)n_in, tok[t]);
    }
    free(got);
    free(want);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(y);
    ig_vk_step_free(s);
    weight_free(&w);
}

IG_TEST(vulkan_embed) {
    ig_vk_device *d = device();
    if (!d) return;
    for (size_t i = 0; i < IG_ARRAY_LEN(k_types); i++) {
        ig_dtype t = k_types[i];
        int64_t be = (int64_t)ig_dtype_block_elems(t);
        int64_t n_in = be == 1 ? 101 : be * 3;
        run_embed(d, t, n_in, 37, 1);
        run_embed(d, t, n_in, 37, 17);
    }
}

IG_TEST(vulkan_embed_split) {
    ig_vk_device *d = device_split();
    if (!d) return;
    run_embed(d, IG_TYPE_Q6_K, 512, 40, 17);
    run_embed(d, IG_TYPE_F32, 100, 40, 3);
    d = device_staging();
    REQUIRE(d != NULL);
    run_embed(d, IG_TYPE_Q5_0, 96, 40, 17);
}

/* ---- rmsnorm ----------------------------------------------------------------- */

static void ref_rmsnorm(const float *x, float *y, const float *w, int d, float eps) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / d + eps));
    for (int i = 0; i < d; i++) y[i] = x[i] * scale * w[i];
}

static void run_rmsnorm(ig_vk_device *d, int width, int n_heads, int n_tok, bool add, bool in_place) {
    const int hd = width / n_heads, stride = width + 5;
    const float eps = 1e-6f;
    size_t n = (size_t)stride * n_tok;
    float *x = malloc(n * 4), *y0 = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
    float *w = malloc((size_t)hd * 4);
    REQUIRE(x && y0 && want && got && w);
    fill(x, n, 3.0f);
    fill(y0, n, 1.0f);
    fill(w, (size_t)hd, 1.5f);
    memcpy(want, in_place ? x : y0, n * 4);
    for (int t = 0; t < n_tok; t++) {
        for (int h = 0; h < n_heads; h++) {
            const float *xr = x + (size_t)t * stride + (size_t)h * hd;
            float *yr = want + (size_t)t * stride + (size_t)h * hd;
            if (add) {
                float tmp[8192];
                ref_rmsnorm(xr, tmp, w, hd, eps);
                for (int i = 0; i < hd; i++) yr[i] += tmp[i];
            } else {
                ref_rmsnorm(xr, yr, w, hd, eps);
            }
        }
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    step_simple(s, n_tok, 1, 0, NULL);
    ig_vk_buffer *bx = upload(d, x, n * 4), *by = upload(d, y0, n * 4), *bw = upload(d, w, (size_t)hd * 4);
    REQUIRE(bx && by && bw);
    ig_vk_buffer *dst = in_place ? bx : by;
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_view vx = {bx, 0, (uint32_t)stride}, vy = {dst, 0, (uint32_t)stride};
    if (add) REQUIRE_OK(ig_vk_op_add_rmsnorm(g, IG_VK_ROWS_TOKENS, vx, vy, bw, width, eps));
    else REQUIRE_OK(ig_vk_op_rmsnorm(g, IG_VK_ROWS_TOKENS, vx, vy, bw, width, n_heads, eps));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(dst, 0, got, n * 4));
    /* padding between rows must be untouched */
    CHECK_REL(got, want, n, 1e-5, "rmsnorm%s width %d heads %d tokens %d%s", add ? "+add" : "", width, n_heads,
              n_tok, in_place ? " in place" : "");
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(by);
    ig_vk_buffer_free(bw);
    ig_vk_step_free(s);
    free(x);
    free(y0);
    free(want);
    free(got);
    free(w);
}

IG_TEST(vulkan_rmsnorm) {
    ig_vk_device *d = device();
    if (!d) return;
    const int toks[] = {1, 3, 17, 64};
    for (size_t i = 0; i < IG_ARRAY_LEN(toks); i++) {
        run_rmsnorm(d, 1152, 1, toks[i], false, false);
        run_rmsnorm(d, 4 * 256, 4, toks[i], false, true); /* QK-norm, hd 256 */
        run_rmsnorm(d, 3 * 128, 3, toks[i], false, false);
        run_rmsnorm(d, 5 * 32, 5, toks[i], false, true);
        run_rmsnorm(d, 1000, 1, toks[i], true, false);
    }
    run_rmsnorm(d, 5376, 1, 3, true, false);
}

/* ---- matmul ------------------------------------------------------------------ */

/* x as the int8 mat-vec sees it for weights of type w: quantized as the
 * CPU backend quantizes it (Q8_K for the K-quants, else Q8_0 activation
 * blocks) and dequantized. */
static void x8_round(ig_dtype w, const float *x, float *out, int64_t n) {
    if (w == IG_TYPE_Q4_K || w == IG_TYPE_Q5_K || w == IG_TYPE_Q6_K) {
        ig_block_q8_K *q = malloc((size_t)(n / 256) * sizeof *q);
        REQUIRE(q);
        ig_quantize_row_q8_K(x, q, n);
        ig_dequantize_row_q8_K(q, out, n);
        free(q);
    } else {
        void *q = malloc((size_t)(n / 32) * 34);
        REQUIRE(q);
        ig_quantize_row_q8_0_act(x, q, n);
        ig_dequantize_row(IG_TYPE_Q8_0, q, out, n);
        free(q);
    }
}

/* x next to rounding ties of the int8 quantization: each unit of that
 * many values (run_matmul: 32, for blocks of 32 and 256 alike) starts with
 * its largest magnitude amax, and the others are (k + 1/2) amax / 127
 * moved by up to three ulps, so a scale off by an ulp gives another q now and
 * then. (lavapipe's fma-refined 127 / amax was an ulp off on such values:
 * its fma is not fused.) */
static bool g_near_ties;
static void fill_near_ties(float *x, size_t n, size_t unit) {
    for (size_t b = 0; b + unit <= n; b += unit) {
        const float amax = 0.5f + 0.5f * fabsf(rnd());
        x[b] = (b / unit) % 2 ? -amax : amax;
        for (size_t j = 1; j < unit; j++) {
            const int k = (int)(fabsf(rnd()) * 126.0f);
            float v = ((float)k + 0.5f) * amax / 127.0f;
            const int steps = (int)(rnd_u32() % 7) - 3;
            for (int m = 0; m < (steps < 0 ? -steps : steps); m++) v = nextafterf(v, steps < 0 ? 0.0f : 1.0f);
            x[b + j] = rnd() < 0 ? -v : v;
        }
    }
    for (size_t i = n / unit * unit; i < n; i++) x[i] = 0.0f;
}

/* Whether AUTO takes the int8 tensor cores (vk_ops.c's policy: Q4_K and
 * Q6_K matrices of at least 4M weights, batches from cm_min_tokens, 9; never
 * on a batch-invariant device). */
static bool cmq_auto(ig_vk_device *d, ig_dtype type, int64_t n_in, int rows, int n_tok) {
    return !ig_vk_device_invariant(d) && ig_vk_device_coopmat_int8(d) &&
           (type == IG_TYPE_Q4_K || type == IG_TYPE_Q6_K) && n_in % 256 == 0 &&
           n_in * rows >= (4 << 20) && n_tok >= 9;
}

static void run_matmul(ig_vk_device *d, ig_dtype type, int64_t n_in, int rows, int n_tok, ig_vk_matmul_path path,
                       bool geglu, ig_vk_rows rsel) {
    weight wa, wb;
    memset(&wb, 0, sizeof wb);
    REQUIRE(weight_make(d, type, n_in, rows, &wa));
    if (geglu) REQUIRE(weight_make(d, type, n_in, rows, &wb));
    /* the mat-vec and tensor-core paths read x as vec4; even token counts on
       the tensor-core path get an output stride of whole vec4s, so whole
       fragments are stored directly (odd ones go through staging) */
    const bool cmq = path == IG_VK_MATMUL_COOPMAT_INT8 ||
                     (path == IG_VK_MATMUL_AUTO && cmq_auto(d, type, n_in, rows, n_tok)); /* mmq.comp */
    const bool vec4_x = path == IG_VK_MATMUL_FAST || path == IG_VK_MATMUL_COOPMAT || path == IG_VK_MATMUL_INT8 || cmq;
    const int xs = vec4_x ? (int)n_in + 4 : (int)n_in + 2;
    const int ys = rows + ((path == IG_VK_MATMUL_COOPMAT || cmq) && n_tok % 2 == 0 ? 4 : 3);
    size_t nx = (size_t)xs * n_tok, ny = (size_t)ys * n_tok;
    float *x = malloc(nx * 4), *want = calloc(ny, 4), *got = malloc(ny * 4);
    REQUIRE(x && want && got);
    if (g_near_ties) fill_near_ties(x, nx, 32);
    else fill(x, nx, 1.0f);
    /* OUTPUTS rows: only n_out = max(1, n_tok - 1) rows are computed; HEAD
     * rows: min(n_out, 2) (the step's head cap) */
    int n_rows = rsel != IG_VK_ROWS_TOKENS ? (n_tok > 1 ? n_tok - 1 : 1) : n_tok;
    const int n_out = n_rows;
    if (rsel == IG_VK_ROWS_HEAD && n_rows > 2) n_rows = 2;
    /* the int8 path sees x as quant_x8.comp leaves it: blocks of 32 rounded
       to steps of amax / 127 */
    float *xq = path == IG_VK_MATMUL_INT8 || cmq ? malloc((size_t)n_in * 4) : NULL;
    REQUIRE(!(path == IG_VK_MATMUL_INT8 || cmq) || xq);
    for (int t = 0; t < n_rows; t++) {
        if (xq) x8_round(type, x + (size_t)t * xs, xq, n_in);
        for (int r = 0; r < rows; r++) {
            const float *xr = xq ? xq : x + (size_t)t * xs;
            float a = ig_vec_dot_ref(type, wa.data + (size_t)r * wa.row_bytes, xr, n_in);
            if (geglu) {
                float b = ig_vec_dot_ref(type, wb.data + (size_t)r * wb.row_bytes, xr, n_in);
                a = 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a))) * b;
            }
            want[(size_t)t * ys + r] = a;
        }
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    int32_t pos[256], out[256];
    REQUIRE(n_tok <= 256);
    for (int t = 0; t < n_tok; t++) pos[t] = t, out[t] = t;
    if (rsel == IG_VK_ROWS_HEAD) REQUIRE_OK(ig_vk_step_set_head_cap(s, 2));
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, NULL, rsel != IG_VK_ROWS_TOKENS ? n_out : 0, out));
    ig_vk_buffer *bx = upload(d, x, nx * 4), *by = upload(d, want, ny * 4);
    REQUIRE(bx && by);
    REQUIRE_OK(ig_vk_buffer_zero(by));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_graph_set_matmul_path(g, path);
    ig_vk_view vx = {bx, 0, (uint32_t)xs}, vy = {by, 0, (uint32_t)ys};
    if (geglu) REQUIRE_OK(ig_vk_op_matmul_geglu(g, rsel, wa.buf, wb.buf, vx, vy));
    else REQUIRE_OK(ig_vk_op_matmul(g, rsel, wa.buf, vx, vy));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(by, 0, got, ny * 4));
    if (getenv("IGNIS_TEST_DEBUG")) {
        double mw = 0, mg = 0;
        for (size_t i = 0; i < ny; i++) mw = fmax(mw, fabs(want[i])), mg = fmax(mg, fabs(got[i]));
        fprintf(stderr, "    max |want| %g |got| %g, want[0] %g got[0] %g\n", mw, mg, want[0], got[0]);
    }
    /* the tensor-core path rounds weights and activations to f16 */
    const bool f16_inputs = path == IG_VK_MATMUL_COOPMAT ||
                            (path == IG_VK_MATMUL_AUTO && !cmq && n_tok > 8 && ig_vk_device_coopmat(d) &&
                             !ig_vk_device_invariant(d) &&
                             type != IG_TYPE_F32 && type != IG_TYPE_F16 && type != IG_TYPE_BF16);
    /* int8: the CPU's quantization of x, so the same integer sums; only the
       order of the float sums differs. The int8 tensor cores: the same
       integer sums, and the minima's term in f16 products */
    CHECK_REL(got, want, ny, f16_inputs ? 3e-3 : cmq ? 1e-3 : xq ? 2e-5 : 1e-5,
              "matmul%s %s in %lld rows %d tokens %d path %s parts %d%s", geglu ? "_geglu" : "",
              ig_dtype_name(type), (long long)n_in, rows, n_tok,
              path == IG_VK_MATMUL_VEC     ? "vec"
              : path == IG_VK_MATMUL_FAST  ? "fast"
              : path == IG_VK_MATMUL_TILED ? "tiled"
              : path == IG_VK_MATMUL_COOPMAT ? "coopmat"
              : path == IG_VK_MATMUL_INT8    ? "int8"
              : path == IG_VK_MATMUL_COOPMAT_INT8 ? "coopmat int8"
                                           : cmq ? "auto (coopmat int8)" : "auto",
              ig_vk_buffer_n_parts(wa.buf), rsel == IG_VK_ROWS_OUTPUTS ? " outputs" : rsel == IG_VK_ROWS_HEAD ? " head" : "");
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(by);
    ig_vk_step_free(s);
    free(x);
    free(xq);
    free(want);
    free(got);
    weight_free(&wa);
    if (geglu) weight_free(&wb);
}

static int64_t awkward_in(ig_dtype t) {
    int64_t be = (int64_t)ig_dtype_block_elems(t);
    return be == 1 ? 203 : be == 32 ? 32 * 11 : 256 * 3;
}

IG_TEST_SLOW(vulkan_matmul) {
    ig_vk_device *d = device();
    if (!d) return;
    const int toks[] = {1, 3, 17, 64};
    for (size_t i = 0; i < IG_ARRAY_LEN(k_types); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
            ig_vk_matmul_path path = toks[k] <= 8 ? IG_VK_MATMUL_VEC : IG_VK_MATMUL_TILED;
            run_matmul(d, k_types[i], awkward_in(k_types[i]), 67, toks[k], path, false, IG_VK_ROWS_TOKENS);
        }
        /* the other path on small / large counts */
        run_matmul(d, k_types[i], awkward_in(k_types[i]), 67, 3, IG_VK_MATMUL_TILED, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, k_types[i], awkward_in(k_types[i]), 67, 17, IG_VK_MATMUL_VEC, false, IG_VK_ROWS_TOKENS);
    }
}

IG_TEST(vulkan_matmul_geglu) {
    ig_vk_device *d = device();
    if (!d) return;
    for (size_t i = 0; i < IG_ARRAY_LEN(k_types); i++) {
        run_matmul(d, k_types[i], awkward_in(k_types[i]), 45, 1, IG_VK_MATMUL_VEC, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, k_types[i], awkward_in(k_types[i]), 45, 17, IG_VK_MATMUL_TILED, true, IG_VK_ROWS_TOKENS);
    }
}

IG_TEST(vulkan_matmul_large_rows) {
    ig_vk_device *d = device();
    if (!d) return;
    /* more than 65535 workgroups along x: the grid folds into z */
    run_matmul(d, IG_TYPE_Q8_0, 32, 140000, 1, IG_VK_MATMUL_VEC, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_F16, 1152, 300, 64, IG_VK_MATMUL_TILED, false, IG_VK_ROWS_TOKENS);
}

IG_TEST(vulkan_matmul_outputs) {
    ig_vk_device *d = device();
    if (!d) return;
    run_matmul(d, IG_TYPE_Q6_K, 256, 70, 5, IG_VK_MATMUL_AUTO, false, IG_VK_ROWS_OUTPUTS);
    run_matmul(d, IG_TYPE_Q4_0, 64, 70, 20, IG_VK_MATMUL_AUTO, false, IG_VK_ROWS_OUTPUTS);
}

IG_TEST(vulkan_matmul_split) {
    ig_vk_device *d = device_split();
    if (!d) return;
    run_matmul(d, IG_TYPE_Q4_K, 512, 50, 3, IG_VK_MATMUL_VEC, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q4_K, 512, 50, 17, IG_VK_MATMUL_TILED, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_F32, 100, 33, 3, IG_VK_MATMUL_VEC, true, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q8_0, 256, 40, 64, IG_VK_MATMUL_TILED, true, IG_VK_ROWS_TOKENS);
    d = device_staging();
    REQUIRE(d != NULL);
    run_matmul(d, IG_TYPE_Q5_K, 256, 50, 3, IG_VK_MATMUL_VEC, true, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_BF16, 64, 50, 17, IG_VK_MATMUL_TILED, false, IG_VK_ROWS_TOKENS);
}

/* ---- RoPE and the KV cache ---------------------------------------------------- */

static void ref_rope_row(float *x, int hd, int pos, const float *freq) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * freq[i];
        float c = cosf(ang), s = sinf(ang);
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

static void run_rope(ig_vk_device *d, int n_heads, int hd, int n_tok, float base, float factor, int pos_max) {
    const int width = n_heads * hd, stride = width + 4;
    size_t n = (size_t)stride * n_tok;
    float *x = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4), freq[512];
    REQUIRE(x && want && got);
    fill(x, n, 2.0f);
    memcpy(want, x, n * 4);
    ig_vk_rope_freqs(base, factor, hd, freq);
    int32_t pos[128], seq[128];
    for (int t = 0; t < n_tok; t++) {
        pos[t] = (int32_t)(rnd_u32() % (uint32_t)pos_max);
        seq[t] = 0;
        for (int h = 0; h < n_heads; h++) ref_rope_row(want + (size_t)t * stride + (size_t)h * hd, hd, pos[t], freq);
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, seq, 0, NULL));
    ig_vk_buffer *bx = upload(d, x, n * 4);
    REQUIRE(bx);
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    REQUIRE_OK(ig_vk_op_rope(g, (ig_vk_view){bx, 0, (uint32_t)stride}, n_heads, hd, base, factor));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(bx, 0, got, n * 4));
    CHECK_REL(got, want, n, 1e-5, "rope heads %d hd %d tokens %d base %g factor %g pos < %d", n_heads, hd, n_tok,
              (double)base, (double)factor, pos_max);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bx);
    ig_vk_step_free(s);
    free(x);
    free(want);
    free(got);
}

IG_TEST(vulkan_rope) {
    ig_vk_device *d = device();
    if (!d) return;
    const int hds[] = {32, 128, 256};
    const int toks[] = {1, 3, 17, 64};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
            run_rope(d, 3, hds[i], toks[k], 10000.0f, 1.0f, 600);
            run_rope(d, 2, hds[i], toks[k], 1000000.0f, 8.0f, 131072);
        }
    }
}

static float kv_get(ig_kv_type type, const void *base, size_t i) {
    return type == IG_KV_F16 ? ig_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

static void run_kv_store(ig_vk_device *d, ig_kv_type type, bool rotate, int n_kv, int hd, int n_tok) {
    const int kv_dim = n_kv * hd, n_seq = 2, cap = 7, es = type == IG_KV_F16 ? 2 : 4;
    const size_t cache_elems = (size_t)n_seq * cap * kv_dim;
    const float base = 10000.0f, factor = 1.0f;
    size_t nx = (size_t)kv_dim * n_tok;
    float *k = malloc(nx * 4), *v = malloc(nx * 4), freq[512];
    uint8_t *want_k = calloc(cache_elems, (size_t)es), *want_v = calloc(cache_elems, (size_t)es);
    uint8_t *got_k = malloc(cache_elems * (size_t)es), *got_v = malloc(cache_elems * (size_t)es);
    REQUIRE(k && v && want_k && want_v && got_k && got_v);
    fill(k, nx, 1.0f);
    fill(v, nx, 1.0f);
    ig_vk_rope_freqs(base, factor, hd, freq);
    /* tokens of two sequences; each (seq, slot) written at most once */
    int32_t pos[128], seq[128];
    int next[2] = {3, 40};
    for (int t = 0; t < n_tok; t++) {
        seq[t] = t % 2;
        pos[t] = next[seq[t]]++;
    }
    for (int t = 0; t < n_tok; t++) {
        /* a later token of the same sequence overwrites the ring slot, as on the GPU (same order) */
        size_t row = ((size_t)seq[t] * cap + (size_t)(pos[t] % cap)) * kv_dim;
        float kr[2048];
        memcpy(kr, k + (size_t)t * kv_dim, (size_t)kv_dim * 4);
        if (rotate)
            for (int h = 0; h < n_kv; h++) ref_rope_row(kr + h * hd, hd, pos[t], freq);
        for (int i = 0; i < kv_dim; i++) {
            float vv = v[(size_t)t * kv_dim + i];
            if (type == IG_KV_F16) {
                ((uint16_t *)want_k)[row + i] = ig_f32_to_f16(kr[i]);
                ((uint16_t *)want_v)[row + i] = ig_f32_to_f16(vv);
            } else {
                ((float *)want_k)[row + i] = kr[i];
                ((float *)want_v)[row + i] = vv;
            }
        }
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, seq, 0, NULL));
    ig_vk_buffer *bk = upload(d, k, nx * 4), *bv = upload(d, v, nx * 4), *kc, *vc;
    REQUIRE(bk && bv);
    /* both caches in one buffer, V after K, at an unaligned-to-256 offset */
    const size_t kbytes = cache_elems * (size_t)es;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 2 * kbytes + 64, &kc));
    vc = kc;
    REQUIRE_OK(ig_vk_buffer_zero(kc));
    ig_vk_kv kv = {kc, vc, 16, 16 + kbytes, type, n_seq, cap, n_kv, hd, 0};
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_view vk = {bk, 0, 0}, vv = {bv, 0, 0};
    if (rotate) REQUIRE_OK(ig_vk_op_rope_kv_store(g, &kv, vk, vv, base, factor));
    else REQUIRE_OK(ig_vk_op_kv_store(g, &kv, vk, vv));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(kc, 16, got_k, kbytes));
    REQUIRE_OK(ig_vk_buffer_read(kc, 16 + kbytes, got_v, kbytes));
    float *a = malloc(cache_elems * 4), *b = malloc(cache_elems * 4);
    REQUIRE(a && b);
    for (size_t i = 0; i < cache_elems; i++) a[i] = kv_get(type, got_k, i), b[i] = kv_get(type, want_k, i);
    CHECK_REL(a, b, cache_elems, type == IG_KV_F16 ? 1e-3 : 1e-5, "%s K %s kv %d hd %d tokens %d",
              rotate ? "rope_kv_store" : "kv_store", type == IG_KV_F16 ? "f16" : "f32", n_kv, hd, n_tok);
    for (size_t i = 0; i < cache_elems; i++) a[i] = kv_get(type, got_v, i), b[i] = kv_get(type, want_v, i);
    CHECK_REL(a, b, cache_elems, 0.0, "%s V %s", rotate ? "rope_kv_store" : "kv_store",
              type == IG_KV_F16 ? "f16" : "f32");
    free(a);
    free(b);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bk);
    ig_vk_buffer_free(bv);
    ig_vk_buffer_free(kc);
    ig_vk_step_free(s);
    free(k);
    free(v);
    free(want_k);
    free(want_v);
    free(got_k);
    free(got_v);
}

IG_TEST(vulkan_kv_store) {
    ig_vk_device *d = device();
    if (!d) return;
    const int hds[] = {32, 128, 256};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        for (int f16 = 0; f16 < 2; f16++) {
            ig_kv_type t = f16 ? IG_KV_F16 : IG_KV_F32;
            run_kv_store(d, t, false, 2, hds[i], 1);
            run_kv_store(d, t, true, 2, hds[i], 3);
            run_kv_store(d, t, true, 1, hds[i], 6);
        }
    }
    d = device_staging();
    REQUIRE(d != NULL);
    run_kv_store(d, IG_KV_F16, true, 2, 128, 5);
}

/* ---- attention ----------------------------------------------------------------- */

typedef struct attn_case {
    int n_head, n_kv, hd, n_tok, window, n_seq, cap;
    ig_kv_type type;
    float softcap;
    int min_pos; /* sequences continue from min_pos + [0, 300) */
    bool aligned; /* q and output strides multiples of 4 (the tiled kernel's condition) */
} attn_case;

/* f16 caches: 1e-3 of the largest output; the tensor-core kernel also
 * rounds q (scaled) and P to f16 */
static double g_attn_f16_tol = 1e-3;

static void run_attention(ig_vk_device *d, attn_case c) {
    const int kv_dim = c.n_kv * c.hd, width = c.n_head * c.hd, qs = width + (c.aligned ? 4 : 2),
              os = width + (c.aligned ? 8 : 6);
    const size_t cache_elems = (size_t)c.n_seq * c.cap * kv_dim, es = c.type == IG_KV_F16 ? 2 : 4;
    const float scale = 1.0f / sqrtf((float)c.hd);
    uint8_t *kc = malloc(cache_elems * es), *vc = malloc(cache_elems * es);
    float *q = malloc((size_t)qs * c.n_tok * 4), *want = calloc((size_t)os * c.n_tok, 4),
          *got = malloc((size_t)os * c.n_tok * 4);
    double *sc = malloc(sizeof(double) * 200000);
    REQUIRE(kc && vc && q && want && got && sc);
    for (size_t i = 0; i < cache_elems; i++) {
        float a = rnd() * 2.0f, b = rnd();
        if (c.type == IG_KV_F16) {
            ((uint16_t *)kc)[i] = ig_f32_to_f16(a);
            ((uint16_t *)vc)[i] = ig_f32_to_f16(b);
        } else {
            ((float *)kc)[i] = a;
            ((float *)vc)[i] = b;
        }
    }
    fill(q, (size_t)qs * c.n_tok, 2.0f);
    /* each sequence continues from a random length; tokens interleave */
    int32_t pos[128], seq[128];
    int next[4];
    for (int s = 0; s < c.n_seq; s++) next[s] = c.min_pos + (int)(rnd_u32() % 300u);
    for (int t = 0; t < c.n_tok; t++) {
        seq[t] = (int32_t)(rnd_u32() % (uint32_t)c.n_seq);
        pos[t] = next[seq[t]]++;
    }
    const int group = c.n_head / c.n_kv;
    for (int t = 0; t < c.n_tok; t++) {
        int p = pos[t], s = seq[t];
        int lo = c.window ? (p - c.window + 1 > 0 ? p - c.window + 1 : 0) : 0;
        for (int h = 0; h < c.n_head; h++) {
            const float *qr = q + (size_t)t * qs + (size_t)h * c.hd;
            int kvh = h / group;
            double mx = -1e300;
            for (int j = lo; j <= p; j++) {
                size_t row = ((size_t)s * c.cap + (size_t)(j % c.cap)) * kv_dim + (size_t)kvh * c.hd;
                double dot = 0;
                for (int i = 0; i < c.hd; i++) dot += (double)qr[i] * kv_get(c.type, kc, row + i);
                dot *= scale;
                if (c.softcap > 0) dot = c.softcap * tanh(dot / c.softcap);
                sc[j - lo] = dot;
                if (dot > mx) mx = dot;
            }
            double sum = 0;
            for (int j = lo; j <= p; j++) sum += (sc[j - lo] = exp(sc[j - lo] - mx));
            float *o = want + (size_t)t * os + (size_t)h * c.hd;
            for (int i = 0; i < c.hd; i++) {
                double acc = 0;
                for (int j = lo; j <= p; j++) {
                    size_t row = ((size_t)s * c.cap + (size_t)(j % c.cap)) * kv_dim + (size_t)kvh * c.hd;
                    acc += sc[j - lo] * kv_get(c.type, vc, row + i);
                }
                o[i] = (float)(acc / sum);
            }
        }
    }
    ig_vk_step *st;
    REQUIRE_OK(ig_vk_step_create(d, c.n_tok, &st));
    REQUIRE_OK(ig_vk_step_set(st, c.n_tok, NULL, pos, seq, 0, NULL));
    ig_vk_buffer *bq = upload(d, q, (size_t)qs * c.n_tok * 4), *bk = upload(d, kc, cache_elems * es),
                 *bv = upload(d, vc, cache_elems * es), *bo;
    REQUIRE(bq && bk && bv);
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)os * c.n_tok * 4, &bo));
    REQUIRE_OK(ig_vk_buffer_zero(bo));
    ig_vk_kv kv = {bk, bv, 0, 0, c.type, c.n_seq, c.cap, c.n_kv, c.hd, c.window};
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, st, c.n_tok, &g));
    REQUIRE_OK(ig_vk_op_attention(g, &kv, (ig_vk_view){bq, 0, (uint32_t)qs}, (ig_vk_view){bo, 0, (uint32_t)os},
                                  c.n_head, scale, c.softcap));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(bo, 0, got, (size_t)os * c.n_tok * 4));
    CHECK_REL(got, want, (size_t)os * c.n_tok, c.type == IG_KV_F16 ? g_attn_f16_tol : 1e-5,
              "attention heads %d/%d hd %d tokens %d window %d seqs %d cap %d %s softcap %g", c.n_head, c.n_kv, c.hd,
              c.n_tok, c.window, c.n_seq, c.cap, c.type == IG_KV_F16 ? "f16" : "f32", (double)c.softcap);
    /* replayed, the same bytes (the merge's counters are back at zero) */
    REQUIRE_OK(ig_vk_buffer_zero(bo));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(bo, 0, want, (size_t)os * c.n_tok * 4));
    CHECK(memcmp(got, want, (size_t)os * c.n_tok * 4) == 0);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bq);
    ig_vk_buffer_free(bk);
    ig_vk_buffer_free(bv);
    ig_vk_buffer_free(bo);
    ig_vk_step_free(st);
    free(kc);
    free(vc);
    free(q);
    free(want);
    free(got);
    free(sc);
}

IG_TEST_SLOW(vulkan_attention) {
    ig_vk_device *d = device();
    if (!d) return;
    const int hds[] = {32, 128, 256};
    const int toks[] = {1, 3, 17, 64};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
            int T = toks[k];
            /* global layer: the whole context */
            run_attention(d, (attn_case){4, 2, hds[i], T, 0, 2, 512, IG_KV_F32, 0.0f, 0, false});
            /* sliding layer with a ring smaller than the context */
            run_attention(d, (attn_case){4, 1, hds[i], T, 37, 2, 37 + T - 1, IG_KV_F32, 0.0f, 0, false});
            run_attention(d, (attn_case){2, 2, hds[i], T, 100, 3, 100 + T - 1, IG_KV_F16, 0.0f, 0, false});
        }
    }
    run_attention(d, (attn_case){8, 4, 128, 5, 0, 1, 512, IG_KV_F16, 0.0f, 0, false});
    run_attention(d, (attn_case){4, 4, 64, 3, 0, 1, 512, IG_KV_F32, 50.0f, 0, false}); /* softcap */
    /* long contexts: every chunk takes a share of the keys a token attends
       (here 1500-1800: 47-57 keys per chunk, not a multiple of the
       subgroups), whatever the cache's size */
    run_attention(d, (attn_case){4, 2, 128, 1, 0, 2, 4096, IG_KV_F16, 0.0f, 1500, false});
    run_attention(d, (attn_case){4, 1, 256, 3, 1000, 1, 1002, IG_KV_F32, 0.0f, 1500, false});
    d = device_staging();
    REQUIRE(d != NULL);
    run_attention(d, (attn_case){4, 2, 128, 17, 37, 2, 37 + 16, IG_KV_F16, 0.0f, 0, false});
}

/* The tiled prefill attention (f16 caches, head dims 64, 128 and 256): the
 * query heads per kv head of every Gemma 3 size (1, 2, 4), blocks of query
 * rows (attn_tile.comp: 32, 16 for head dim 256; attn_cm.comp: 64, 32) that
 * end mid-batch, tokens of several sequences interleaved in one block,
 * sliding-window rings, softcap, and long contexts over many key tiles. */
static void attention_tiled_cases(int cm) {
    ig_vk_device *d = device_tiled(true, cm);
    REQUIRE(d != NULL);
    const int hds[] = {64, 128, 256};
    const int toks[] = {1, 7, 64, 100};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
            const int T = toks[k];
            run_attention(d, (attn_case){4, 1, hds[i], T, 0, 1, 512, IG_KV_F16, 0.0f, 0, true});      /* G 4 (270M, 1B) */
            run_attention(d, (attn_case){4, 2, hds[i], T, 0, 3, 512, IG_KV_F16, 0.0f, 0, true});      /* G 2, 3 sequences */
            run_attention(d, (attn_case){2, 2, hds[i], T, 37, 2, 37 + T - 1, IG_KV_F16, 0.0f, 0, true}); /* ring */
        }
    }
    run_attention(d, (attn_case){8, 1, 128, 33, 0, 1, 512, IG_KV_F16, 0.0f, 0, true});   /* G 8: 2 tokens per block */
    run_attention(d, (attn_case){16, 1, 64, 20, 0, 2, 512, IG_KV_F16, 0.0f, 0, true});   /* G 16: 2 tokens per block */
    run_attention(d, (attn_case){16, 1, 256, 9, 0, 2, 512, IG_KV_F16, 0.0f, 0, true});   /* 1 token per block */
    run_attention(d, (attn_case){4, 4, 64, 50, 0, 1, 512, IG_KV_F16, 50.0f, 0, true});  /* softcap */
    run_attention(d, (attn_case){4, 2, 128, 128, 0, 1, 4096, IG_KV_F16, 0.0f, 1500, true});
    run_attention(d, (attn_case){4, 1, 256, 64, 1000, 2, 1000 + 63, IG_KV_F16, 0.0f, 1500, true});
    /* graphs holding both kernels, steps choosing attn.comp: the tiled one
       must leave the output to it */
    d = device_tiled(false, cm);
    REQUIRE(d != NULL);
    run_attention(d, (attn_case){4, 2, 128, 64, 0, 3, 512, IG_KV_F16, 0.0f, 0, true});
    run_attention(d, (attn_case){4, 1, 256, 7, 37, 2, 37 + 6, IG_KV_F16, 0.0f, 0, true});
    run_attention(d, (attn_case){4, 2, 128, 1, 0, 2, 4096, IG_KV_F16, 0.0f, 1500, true});
}

IG_TEST_SLOW(vulkan_attention_tiled) {
    if (!device()) return;
    attention_tiled_cases(ATTN_TILE);
}

/* The same cases on the tensor cores (attn_cm.comp), where q and P are
 * rounded to f16 as well */
IG_TEST(vulkan_attention_coopmat) {
    if (!device()) return;
    ig_vk_device *d = device_tiled(true, ATTN_CM);
    REQUIRE(d != NULL);
    if (!ig_vk_device_attn_coopmat(d)) {
        ig_test_skip("no cooperative-matrix attention on this device");
        return;
    }
    g_attn_f16_tol = 3e-3;
    attention_tiled_cases(ATTN_CM);
    g_attn_f16_tol = 1e-3;
}

/* The same on KHR cooperative matrices (16 x 16 x 16; with head dim 256
 * half the subgroups compute S), on a device with KHR's only. */
IG_TEST(vulkan_attention_coopmat_khr) {
    if (!device()) return;
    ig_vk_device *d = device_tiled(true, ATTN_CM_KHR);
    REQUIRE(d != NULL);
    if (!ig_vk_device_attn_coopmat(d) || !ig_vk_device_coopmat_khr(d)) {
        ig_test_skip("no KHR cooperative-matrix attention on this device");
        return;
    }
    g_attn_f16_tol = 3e-3;
    attention_tiled_cases(ATTN_CM_KHR);
    g_attn_f16_tol = 1e-3;
}

/* Attention (split over chunks: a few tokens of long contexts) then an
 * int8 mat-vec reading its output, after a mat-vec of that width (so the
 * producers know which int8 blocks it reads); the graph replayed three
 * times must give the same bytes. */
typedef struct merge_case {
    int n_head, n_kv, hd, n_tok, pos0;
    ig_dtype wt; /* the mat-vec's weights: which int8 blocks */
    ig_kv_type kv;
} merge_case;

static void attn_merge_run(ig_vk_device *d, merge_case c, float *att, float *mv, int rows, int *n_dispatch) {
    const int width = c.n_head * c.hd, kv_dim = c.n_kv * c.hd, T = c.n_tok, cap = c.pos0 + 64;
    const size_t cache = (size_t)cap * kv_dim, es = c.kv == IG_KV_F16 ? 2 : 4;
    float *q = malloc((size_t)width * T * 4), *tmp = malloc(cache * 4);
    uint8_t *kc = malloc(cache * es), *vc = malloc(cache * es);
    REQUIRE(q && tmp && kc && vc);
    g_rng = 0xC0FFEEull + (uint64_t)c.hd * 7 + (uint64_t)c.n_head; /* the same inputs on both devices */
    fill(q, (size_t)width * T, 2.0f);
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *dst = pass ? vc : kc;
        fill(tmp, cache, pass ? 1.0f : 2.0f);
        for (size_t i = 0; i < cache; i++) {
            if (c.kv == IG_KV_F16) ((uint16_t *)dst)[i] = ig_f32_to_f16(tmp[i]);
            else ((float *)dst)[i] = tmp[i];
        }
    }
    weight w;
    REQUIRE(weight_make(d, c.wt, width, rows, &w));
    int32_t pos[8], seq[8];
    for (int t = 0; t < T; t++) {
        pos[t] = c.pos0 + t;
        seq[t] = 0;
    }
    if (T > 1) pos[1] = -1; /* a row with no valid position */
    ig_vk_step *st;
    REQUIRE_OK(ig_vk_step_create(d, T, &st));
    REQUIRE_OK(ig_vk_step_set(st, T, NULL, pos, seq, 0, NULL));
    ig_vk_buffer *bq = upload(d, q, (size_t)width * T * 4), *bk = upload(d, kc, cache * es),
                 *bv = upload(d, vc, cache * es), *bo, *by;
    REQUIRE(bq && bk && bv);
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)width * T * 4, &bo));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)rows * T * 4, &by));
    ig_vk_kv kv = {bk, bv, 0, 0, c.kv, 1, cap, c.n_kv, c.hd, 0};
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, st, T, &g));
    /* a mat-vec of this width first: the producers learn its kind */
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){bq, 0, 0}, (ig_vk_view){by, 0, 0}));
    REQUIRE_OK(ig_vk_op_attention(g, &kv, (ig_vk_view){bq, 0, 0}, (ig_vk_view){bo, 0, 0}, c.n_head,
                                  1.0f / sqrtf((float)c.hd), 0.0f));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){bo, 0, 0}, (ig_vk_view){by, 0, 0}));
    REQUIRE_OK(ig_vk_graph_end(g));
    *n_dispatch = ig_vk_graph_get_stats(g).n_dispatch;
    float *again = malloc((size_t)width * T * 4);
    REQUIRE(again);
    for (int run = 0; run < 3; run++) {
        REQUIRE_OK(ig_vk_graph_run(g));
        REQUIRE_OK(ig_vk_buffer_read(bo, 0, run ? again : att, (size_t)width * T * 4));
        if (run) CHECK(memcmp(again, att, (size_t)width * T * 4) == 0);
    }
    REQUIRE_OK(ig_vk_buffer_read(by, 0, mv, (size_t)rows * T * 4));
    free(again);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bq);
    ig_vk_buffer_free(bk);
    ig_vk_buffer_free(bv);
    ig_vk_buffer_free(bo);
    ig_vk_buffer_free(by);
    ig_vk_step_free(st);
    weight_free(&w);
    free(q);
    free(tmp);
    free(kc);
    free(vc);
}

/* The attention output's int8 copy, written by the attention's merge for
 * the int8 mat-vec that reads it: one dispatch fewer than quant_x8 doing
 * it, the same bytes (the mat-vec's output is bit for bit the same), with
 * heads of 128 (two per block of 256) and 256. */
IG_TEST(vulkan_attention_int8_copy) {
    ig_vk_device *d = device_int8();
    if (!d) return;
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = ig_vk_device_get_info(d)->index;
    p.tuning = "x8_producers=0";
    ig_vk_device *dq;
    REQUIRE_OK(ig_vk_device_create(&p, &dq));
    const int rows = 24;
    float a[24 * 3], b[24 * 3], *att = malloc((size_t)4 * 256 * 3 * 4);
    REQUIRE(att);
    const merge_case cases[] = {{4, 2, 128, 3, 40, IG_TYPE_Q4_K, IG_KV_F32},
                                {4, 2, 256, 3, 40, IG_TYPE_Q6_K, IG_KV_F32},
                                {4, 2, 128, 3, 40, IG_TYPE_Q8_0, IG_KV_F32}};
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        int nf = 0, nq = 0;
        attn_merge_run(d, cases[i], att, a, rows, &nf);
        attn_merge_run(dq, cases[i], att, b, rows, &nq);
        CHECK_EQ_INT(nf, nq - 1);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    free(att);
    ig_vk_device_free(dq);
}

/* The split attention's chunks merged by the last workgroup of each unit of
 * heads (attn.comp -DREDUCE) against attn_reduce.comp's stage: the same
 * output and int8 copy bit for bit (through the mat-vec reading it), one
 * dispatch fewer, over replays; query heads per kv head 1 to 8, heads that
 * share a block of 256 and heads of several blocks, a row with no valid
 * position (zeros), long contexts of 32 chunks; by default a kv head's
 * query heads split over two workgroups where their unit is too large. */
IG_TEST_SLOW(vulkan_attention_merge) {
    ig_vk_device *d = device();
    if (!d) return;
    /* dm merges units of any size; ds never (attn_reduce.comp); dq merges
       without writing the int8 copy (quant_x8 makes it) */
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = ig_vk_device_get_info(d)->index;
    p.attn_merge_max = 1u << 20;
    ig_vk_device *dm, *ds, *dq;
    REQUIRE_OK(ig_vk_device_create(&p, &dm));
    p.tuning = "x8_producers=0";
    REQUIRE_OK(ig_vk_device_create(&p, &dq));
    p.tuning = "attn_merge_max=0";
    REQUIRE_OK(ig_vk_device_create(&p, &ds));
    const bool i8 = ig_vk_device_int8(d);
    const merge_case cases[] = {
        {32, 16, 128, 1, 100, IG_TYPE_Q4_K, IG_KV_F16}, /* 27B: G 2, two heads a block of 256 */
        {4, 1, 256, 1, 100, IG_TYPE_Q4_K, IG_KV_F16},   /* 270M, 1B: G 4, four blocks of 256 */
        {4, 1, 256, 3, 3000, IG_TYPE_Q6_K, IG_KV_F16},  /* 32 chunks, an invalid row */
        {8, 4, 256, 2, 50, IG_TYPE_Q4_K, IG_KV_F32},    /* 4B, 12B: G 2 */
        {8, 8, 128, 3, 40, IG_TYPE_Q4_K, IG_KV_F32},    /* G 1: a unit of two kv heads */
        {8, 2, 128, 2, 40, IG_TYPE_Q4_K, IG_KV_F16},    /* G 4, hd 128: two blocks of 256 */
        {4, 2, 64, 3, 300, IG_TYPE_Q8_0, IG_KV_F32},    /* blocks of 32 */
        {8, 1, 64, 1, 70, IG_TYPE_Q8_0, IG_KV_F16},     /* G 8 */
        {4, 4, 64, 2, 90, IG_TYPE_Q4_K, IG_KV_F32},     /* G 1, hd 64: a unit of four kv heads */
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        const merge_case c = cases[i];
        const int rows = 24, n = c.n_head * c.hd * c.n_tok;
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *e = malloc((size_t)n * 4), ya[24 * 8],
              yb[24 * 8], ye[24 * 8], yd[24 * 8];
        REQUIRE(a && b && e);
        int nm = 0, ns = 0, nq = 0, nd = 0;
        attn_merge_run(dm, c, a, ya, rows, &nm);
        attn_merge_run(ds, c, b, yb, rows, &ns);
        attn_merge_run(dq, c, e, ye, rows, &nq);
        attn_merge_run(d, c, e, yd, rows, &nd);
        if (getenv("IGNIS_TEST_VERBOSE"))
            fprintf(stderr, "    merge heads %d/%d hd %d tokens %d: dispatches %d / %d, default %d\n", c.n_head,
                    c.n_kv, c.hd, c.n_tok, nm, ns, nd);
        /* one dispatch fewer (G 8 takes attention.comp, no split, where
           shared memory is 32 KiB); by default units of up to 512 outputs */
        const bool split = !(c.n_head / c.n_kv == 8 && nm == ns);
        CHECK(nm == ns - (split ? 1 : 0));
        /* heads a merge serves: a workgroup's query heads (G, halved while
           the unit is too large: the 270M and 1B cases), or the heads of
           an int8 block */
        const int block = c.wt == IG_TYPE_Q8_0 ? 32 : 256, hpb = i8 && c.hd < block ? block / c.hd : 1;
        int Gw = c.n_head / c.n_kv, R = Gw > hpb ? Gw : hpb;
        while (R * c.hd > 512 && Gw % 2 == 0 && Gw > hpb) {
            Gw /= 2;
            R = Gw > hpb ? Gw : hpb;
        }
        CHECK_EQ_INT(nd, split && R * c.hd <= 512 ? ns - 1 : ns);
        /* the same sums in the same order; exactly where the driver
           compiles both kernels alike (lavapipe, the H100) */
        CHECK_REL(a, b, (size_t)n, 1e-6, "merge heads %d/%d hd %d tokens %d", c.n_head, c.n_kv, c.hd, c.n_tok);
        CHECK_REL(e, b, (size_t)n, 1e-6, "default merge heads %d/%d hd %d tokens %d", c.n_head, c.n_kv, c.hd,
                  c.n_tok);
        /* the int8 copy written by the merge is quant_x8's of its output */
        if (i8) CHECK(memcmp(ya, ye, (size_t)rows * c.n_tok * 4) == 0);
        if (i8) CHECK(memcmp(yd, ye, (size_t)rows * c.n_tok * 4) == 0);
        if (c.n_tok > 1) /* the invalid row: zeros */
            for (int k = 0; k < c.n_head * c.hd; k++) CHECK(a[c.n_head * c.hd + k] == 0.0f);
        free(a);
        free(b);
        free(e);
    }
    ig_vk_device_free(dm);
    ig_vk_device_free(ds);
    ig_vk_device_free(dq);
}

/* ---- element-wise ---------------------------------------------------------------- */

IG_TEST(vulkan_eltwise) {
    ig_vk_device *d = device();
    if (!d) return;
    const int toks[] = {1, 3, 17, 64};
    for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
        const int T = toks[k], width = 1000, st = 1003;
        size_t n = (size_t)st * T;
        float *a = malloc(n * 4), *b = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
        REQUIRE(a && b && want && got);
        fill(a, n, 6.0f);
        fill(b, n, 2.0f);
        ig_vk_step *s;
        REQUIRE_OK(ig_vk_step_create(d, T, &s));
        int32_t out[64];
        int n_out = (T + 1) / 2;
        for (int j = 0; j < n_out; j++) out[j] = T - 1 - 2 * j; /* any order */
        REQUIRE_OK(ig_vk_step_set(s, T, NULL, NULL, NULL, n_out, out));
        for (int op = 0; op < 4; op++) {
            ig_vk_buffer *ba = upload(d, a, n * 4), *bb = upload(d, b, n * 4), *by = upload(d, a, n * 4);
            REQUIRE(ba && bb && by);
            memcpy(want, a, n * 4);
            size_t rows = op == 3 ? (size_t)n_out : (size_t)T;
            for (size_t t = 0; t < rows; t++) {
                for (int i = 0; i < width; i++) {
                    size_t j = t * st + (size_t)i;
                    float x = a[j];
                    if (op == 0) want[j] = x + b[j];
                    else if (op == 1) want[j] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * b[j];
                    else if (op == 2) want[j] = 30.0f * tanhf(x / 30.0f);
                    else want[j] = a[(size_t)out[t] * st + (size_t)i];
                }
            }
            ig_vk_graph *g;
            REQUIRE_OK(ig_vk_graph_begin(d, s, T, &g));
            ig_vk_view va = {ba, 0, (uint32_t)st}, vb = {bb, 0, (uint32_t)st}, vy = {by, 0, (uint32_t)st};
            if (op == 0) REQUIRE_OK(ig_vk_op_add(g, IG_VK_ROWS_TOKENS, va, vb, vy, width));
            else if (op == 1) REQUIRE_OK(ig_vk_op_geglu(g, IG_VK_ROWS_TOKENS, vy, vb, vy, width)); /* in place */
            else if (op == 2) REQUIRE_OK(ig_vk_op_softcap(g, IG_VK_ROWS_TOKENS, vy, width, 30.0f));
            else REQUIRE_OK(ig_vk_op_gather(g, va, vy, width));
            REQUIRE_OK(ig_vk_graph_end(g));
            REQUIRE_OK(ig_vk_graph_run(g));
            REQUIRE_OK(ig_vk_buffer_read(by, 0, got, n * 4));
            CHECK_REL(got, want, n, op == 3 ? 0.0 : 1e-5, "eltwise op %d tokens %d", op, T);
            ig_vk_graph_free(g);
            ig_vk_buffer_free(ba);
            ig_vk_buffer_free(bb);
            ig_vk_buffer_free(by);
        }
        ig_vk_step_free(s);
        free(a);
        free(b);
        free(want);
        free(got);
    }
}

/* ---- recording once, replaying with new step values ------------------------------ */

IG_TEST(vulkan_graph_replay) {
    ig_vk_device *d = device();
    if (!d) return;
    const int vocab = 50, H = 64, F = 96, T = 8;
    weight e, wq, wk;
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, H, vocab, &e));
    REQUIRE(weight_make(d, IG_TYPE_F16, H, F, &wq));
    REQUIRE(weight_make(d, IG_TYPE_Q4_0, H, F, &wk));
    float norm[64];
    for (int i = 0; i < H; i++) norm[i] = 1.0f + 0.01f * (float)i;
    ig_vk_buffer *bn = upload(d, norm, sizeof norm), *x, *y;
    REQUIRE(bn);
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)T * H * 4, &x));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_READBACK, (size_t)T * 2 * F * 4, &y));
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, T, &s));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, T, &g));
    ig_vk_view vx = {x, 0, 0};
    REQUIRE_OK(ig_vk_op_embed(g, e.buf, 2.0f, vx));
    REQUIRE_OK(ig_vk_op_rmsnorm(g, IG_VK_ROWS_TOKENS, vx, vx, bn, H, 1, 1e-6f));
    /* two independent products into one buffer: no barrier between them */
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, wq.buf, vx, (ig_vk_view){y, 0, 2 * F}));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, wk.buf, vx, (ig_vk_view){y, (uint64_t)F * 4, 2 * F}));
    REQUIRE_OK(ig_vk_graph_end(g));
    ig_vk_graph_stats stats = ig_vk_graph_get_stats(g);
    /* with int8 activations the Q4_0 product reads an int8 copy of x made by
     * one more dispatch, behind one more barrier */
    const bool int8 = ig_vk_device_int8(d);
    CHECK_EQ_INT(stats.n_dispatch, int8 ? 5 : 4);
    /* embed -> norm (in place) -> matmuls: one barrier before the norm, one
     * after it; the strided outputs overlap in range, so a conservative
     * tracker may add one between the two products */
    CHECK(stats.n_barrier >= 2 + int8 && stats.n_barrier <= 3 + int8);
    const float *host = ig_vk_buffer_host_ptr(y);
    REQUIRE(host != NULL);
    for (int round = 0; round < 3; round++) {
        int n = round == 0 ? 1 : round == 1 ? 5 : 8;
        int32_t tok[8];
        step_simple(s, n, vocab, 0, tok);
        REQUIRE_OK(ig_vk_graph_run(g));
        for (int t = 0; t < n; t++) {
            float xr[64], want[2 * 96];
            ig_dequantize_row(IG_TYPE_Q8_0, e.data + (size_t)tok[t] * e.row_bytes, xr, H);
            for (int i = 0; i < H; i++) xr[i] *= 2.0f;
            ref_rmsnorm(xr, xr, norm, H, 1e-6f);
            float x8[64];
            if (int8) x8_round(IG_TYPE_Q4_0, xr, x8, H);
            for (int r = 0; r < F; r++) {
                want[r] = ig_vec_dot_ref(IG_TYPE_F16, wq.data + (size_t)r * wq.row_bytes, xr, H);
                want[F + r] = ig_vec_dot_ref(IG_TYPE_Q4_0, wk.data + (size_t)r * wk.row_bytes, int8 ? x8 : xr, H);
            }
            CHECK_REL(host + (size_t)t * 2 * F, want, 2 * (size_t)F, int8 ? 2e-3 : 1e-5, "replay round %d token %d",
                      round, t);
        }
    }
    ig_vk_graph_free(g);
    ig_vk_step_free(s);
    ig_vk_buffer_free(bn);
    ig_vk_buffer_free(x);
    ig_vk_buffer_free(y);
    weight_free(&e);
    weight_free(&wq);
    weight_free(&wk);
}

/* An L2 prefetch next to an op: one dispatch per weight part it touches,
 * no barrier (it writes nothing), and the product after it unchanged. */
static void prefetch_graph(ig_vk_device *d, ig_vk_step *s, const weight *w, ig_vk_buffer *x, ig_vk_buffer *y,
                           const ig_vk_buffer *bn, int H, int F, const uint64_t *range, ig_vk_graph_stats *stats,
                           float *out) {
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g));
    ig_vk_view vx = {x, 0, 0};
    REQUIRE_OK(ig_vk_op_rmsnorm(g, IG_VK_ROWS_TOKENS, vx, vx, bn, H, 1, 1e-6f));
    if (range) REQUIRE_OK(ig_vk_op_prefetch(g, w->buf, range[0], range[1]));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w->buf, vx, (ig_vk_view){y, 0, 0}));
    REQUIRE_OK(ig_vk_graph_end(g));
    *stats = ig_vk_graph_get_stats(g);
    float xr[256];
    for (int i = 0; i < H; i++) xr[i] = 0.5f + 0.01f * (float)(i % 37);
    REQUIRE_OK(ig_vk_buffer_write(x, 0, xr, (size_t)H * 4));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(y, 0, out, (size_t)F * 4));
    ig_vk_graph_free(g);
}

IG_TEST(vulkan_prefetch) {
    ig_vk_device *d = device_split(); /* weights in parts of 4 KiB */
    if (!d) return;
    const int H = 256, F = 100;
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, H, F, &w));
    const int parts = ig_vk_buffer_n_parts(w.buf);
    const uint64_t size = ig_vk_buffer_size(w.buf);
    REQUIRE(parts >= 3);
    float norm[256], base[100], got[100];
    for (int i = 0; i < H; i++) norm[i] = 1.0f + 0.01f * (float)i;
    ig_vk_buffer *bn = upload(d, norm, (size_t)H * 4), *x, *y;
    REQUIRE(bn);
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)H * 4, &x));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)F * 4, &y));
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, 1, &s));
    step_simple(s, 1, 1, 0, NULL);
    ig_vk_graph_stats st0, st;
    prefetch_graph(d, s, &w, x, y, bn, H, F, NULL, &st0, base);
    /* whole weight: every part; one byte: one part; past the end: none */
    const uint64_t ranges[4][2] = {{0, size}, {size / 2, size / 2 + 1}, {size, size + 100}, {10, 9}};
    const int want[4] = {parts, 1, 0, 0};
    for (int k = 0; k < 4; k++) {
        prefetch_graph(d, s, &w, x, y, bn, H, F, ranges[k], &st, got);
        CHECK_EQ_INT(st.n_dispatch, st0.n_dispatch + want[k]);
        CHECK_EQ_INT(st.n_barrier, st0.n_barrier);
        CHECK(memcmp(got, base, sizeof got) == 0);
    }
    /* the product itself, against the reference */
    float xr[256], x8[256], ref[100];
    for (int i = 0; i < H; i++) xr[i] = 0.5f + 0.01f * (float)(i % 37);
    ref_rmsnorm(xr, xr, norm, H, 1e-6f);
    const bool int8 = ig_vk_device_int8(d);
    if (int8) x8_round(IG_TYPE_Q8_0, xr, x8, H);
    for (int r = 0; r < F; r++) ref[r] = ig_vec_dot_ref(IG_TYPE_Q8_0, w.data + (size_t)r * w.row_bytes, int8 ? x8 : xr, H);
    CHECK_REL(base, ref, (size_t)F, 2e-5, "matmul after a prefetch");
    /* not a weight */
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g));
    CHECK(ig_vk_op_prefetch(g, x, 0, 16) != IG_OK);
    ig_vk_graph_free(g);
    ig_vk_step_free(s);
    ig_vk_buffer_free(bn);
    ig_vk_buffer_free(x);
    ig_vk_buffer_free(y);
    weight_free(&w);
}

/* The prefetch's default: NVIDIA GPUs of 64 GiB and more only. */
IG_TEST(vulkan_prefetch_default) {
    ig_vk_device_info i;
    memset(&i, 0, sizeof i);
    i.vendor_id = 0x10DE;
    i.type = "discrete";
    i.n_heaps = 2;
    i.heaps[0].size = 79ull << 30; /* an H100 80GB reports 79.6 GiB */
    i.heaps[0].device_local = true;
    i.heaps[1].size = 256ull << 30; /* host memory does not count */
    CHECK(ig_vk_prefetch_default(&i));
    i.heaps[0].size = 48ull << 30; /* RTX A6000: 6 MiB of L2 */
    CHECK(!ig_vk_prefetch_default(&i));
    i.heaps[0].size = 192ull << 30;
    i.vendor_id = 0x1002; /* not measured */
    CHECK(!ig_vk_prefetch_default(&i));
    i.vendor_id = 0x10DE;
    i.type = "integrated";
    CHECK(!ig_vk_prefetch_default(&i));
}

IG_TEST(vulkan_op_errors) {
    ig_vk_device *d = device();
    if (!d) return;
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, 4, &s));
    ig_vk_graph *g;
    CHECK(ig_vk_graph_begin(d, s, 5, &g) != IG_OK); /* more rows than the step holds */
    REQUIRE_OK(ig_vk_graph_begin(d, s, 4, &g));
    ig_vk_buffer *small;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 64, &small));
    /* 4 rows of 100 floats do not fit in 64 bytes: refused, and sticky */
    CHECK_STATUS(ig_vk_op_add(g, IG_VK_ROWS_TOKENS, (ig_vk_view){small, 0, 0}, (ig_vk_view){small, 0, 0},
                              (ig_vk_view){small, 0, 0}, 100),
                 IG_ERR_INVALID_ARG);
    CHECK(ig_vk_graph_end(g) != IG_OK);
    CHECK(ig_vk_graph_submit(g) != IG_OK);
    ig_vk_graph_free(g);
    CHECK(ig_vk_step_set(s, 5, NULL, NULL, NULL, 0, NULL) != IG_OK);
    /* step values cannot change under a running graph */
    REQUIRE_OK(ig_vk_graph_begin(d, s, 4, &g));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_step_set(s, 2, NULL, NULL, NULL, 0, NULL));
    REQUIRE_OK(ig_vk_graph_submit(g));
    CHECK(ig_vk_step_set(s, 3, NULL, NULL, NULL, 0, NULL) != IG_OK);
    CHECK(ig_vk_graph_submit(g) != IG_OK);
    REQUIRE_OK(ig_vk_graph_wait(g));
    CHECK_STATUS(ig_vk_step_set(s, 3, NULL, NULL, NULL, 0, NULL), IG_OK);
    ig_vk_graph_free(g);
    int32_t bad_out[1] = {3};
    CHECK(ig_vk_step_set(s, 2, NULL, NULL, NULL, 1, bad_out) != IG_OK);
    ig_vk_buffer_free(small);
    ig_vk_step_free(s);
}

/* ---- the fast mat-vec (mv.comp) ------------------------------------------------ */

static const ig_dtype k_fast_types[] = {IG_TYPE_F32,  IG_TYPE_F16,  IG_TYPE_BF16, IG_TYPE_Q4_0, IG_TYPE_Q5_0,
                                        IG_TYPE_Q8_0, IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};

static int64_t fast_in(ig_dtype t) {
    int64_t be = (int64_t)ig_dtype_block_elems(t);
    return be == 1 ? 200 : be == 32 ? 32 * 11 : 256 * 3;
}

IG_TEST_SLOW(vulkan_matmul_fast) {
    ig_vk_device *d = device();
    if (!d) return;
    const int toks[] = {1, 3, 8};
    for (size_t i = 0; i < IG_ARRAY_LEN(k_fast_types); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++)
            run_matmul(d, k_fast_types[i], fast_in(k_fast_types[i]), 67, toks[k], IG_VK_MATMUL_FAST, false,
                       IG_VK_ROWS_TOKENS);
        run_matmul(d, k_fast_types[i], fast_in(k_fast_types[i]), 45, 1, IG_VK_MATMUL_FAST, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, k_fast_types[i], fast_in(k_fast_types[i]), 45, 5, IG_VK_MATMUL_FAST, true, IG_VK_ROWS_OUTPUTS);
        run_matmul(d, k_fast_types[i], fast_in(k_fast_types[i]), 33, 6, IG_VK_MATMUL_AUTO, false, IG_VK_ROWS_HEAD);
    }
    /* one row of several blocks, rows of one block; many rows (grid folded) */
    run_matmul(d, IG_TYPE_Q4_K, 256 * 21, 3, 1, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q6_K, 256, 300, 2, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q8_0, 32, 140000, 1, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
    /* split weights and staging copies */
    ig_vk_device *ds = device_split();
    REQUIRE(ds != NULL);
    run_matmul(ds, IG_TYPE_Q6_K, 512, 50, 3, IG_VK_MATMUL_FAST, true, IG_VK_ROWS_TOKENS);
    run_matmul(ds, IG_TYPE_Q8_0, 256, 50, 1, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
    run_matmul(ds, IG_TYPE_Q5_0, 256, 50, 4, IG_VK_MATMUL_FAST, true, IG_VK_ROWS_TOKENS);
    ds = device_staging();
    REQUIRE(ds != NULL);
    run_matmul(ds, IG_TYPE_Q4_K, 512, 40, 2, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
    run_matmul(ds, IG_TYPE_F16, 64, 40, 1, IG_VK_MATMUL_FAST, true, IG_VK_ROWS_TOKENS);
}

/* The int8 mat-vec: every quantized type, 1-8 tokens, GEGLU, output rows,
 * split weights and staging copies; and the int8 copy shared by matmuls of
 * one input but made again once the input is rewritten. */
IG_TEST_SLOW(vulkan_matmul_int8) {
    ig_vk_device *d = device_int8();
    if (!d) return;
    const int toks[] = {1, 2, 5, 8};
    for (size_t i = 0; i < IG_ARRAY_LEN(k_fast_types); i++) {
        const ig_dtype t = k_fast_types[i];
        if (ig_dtype_block_elems(t) == 1) continue;
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++)
            run_matmul(d, t, fast_in(t), 67, toks[k], IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, fast_in(t), 45, 1, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, fast_in(t), 45, 3, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, fast_in(t), 45, 5, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_OUTPUTS);
        run_matmul(d, t, 256 * 7, 9, 1, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
    }
    /* x next to rounding ties: the GPU's scales must be the CPU's exactly */
    g_near_ties = true;
    for (size_t i = 0; i < IG_ARRAY_LEN(k_fast_types); i++)
        if (ig_dtype_block_elems(k_fast_types[i]) > 1)
            run_matmul(d, k_fast_types[i], 1024, 16, 8, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
    g_near_ties = false;
    /* batches past 8 columns (small matrices take the int8 mat-vec up to 32) */
    run_matmul(d, IG_TYPE_Q4_K, 512, 37, 20, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q5_0, 320, 37, 32, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
    ig_vk_device *ds = device_split();
    REQUIRE(ds != NULL);
    run_matmul(ds, IG_TYPE_Q6_K, 512, 50, 3, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
    run_matmul(ds, IG_TYPE_Q4_K, 512, 50, 1, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
    ds = device_staging();
    REQUIRE(ds != NULL);
    run_matmul(ds, IG_TYPE_Q5_0, 256, 40, 2, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
    /* the GPU shape (64 invocations per row of 128-wide workgroups, one
       item per lane per pass; several tokens: two rows per group; 32 here
       on CPU devices) with two rows on matrices of any size,
       the older one (two items per pass), and a group of two subgroups'
       width */
    const char *shapes[] = {
        "mv_wg=128,mv_nr1=1,mv_nrn=2,mv_tpr=64,mv_unroll=1,mv_unrolln=1,mv_nrn_min=0",
        "mv_wg=128,mv_nr1=1,mv_nrn=1,mv_tpr=64,mv_unroll=2,mv_unrolln=2,mv_nrn_min=0",
        "mv_wg=128,mv_nr1=2,mv_nrn=2,mv_tpr=128,mv_unroll=2,mv_unrolln=2,mv_nrn_min=0"};
    for (size_t k = 0; k < IG_ARRAY_LEN(shapes); k++) {
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(d)->index;
        p.tuning = shapes[k];
        ig_vk_device *dm;
        REQUIRE_OK(ig_vk_device_create(&p, &dm));
        run_matmul(dm, IG_TYPE_Q4_K, 256 * 5, 37, 1, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q6_K, 256 * 3, 37, 3, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q8_0, 32 * 9, 37, 8, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_F16, 200, 37, 2, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
        /* one token, rows of at most 32 items: groups of 32 where the
           shape has more */
        run_matmul(dm, IG_TYPE_Q6_K, 256 * 3, 37, 1, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q8_0, 32 * 9, 37, 1, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_F16, 200, 37, 1, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
        ig_vk_device_free(dm);
    }
    /* one-token mat-vecs of long rows in workgroups of one row (the GPU's
       FFN down projections; here from 8 rows), with several items per lane
       per pass and rows of part of a pass */
    const char *longs[] = {"mv_long_tpr=128,mv_long_pct=200,mv_long_unroll=4,mv_long_rows=8",
                           "mv_long_tpr=64,mv_long_pct=200,mv_long_unroll=1,mv_long_rows=8"};
    for (size_t k = 0; k < IG_ARRAY_LEN(longs); k++) {
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(d)->index;
        p.tuning = longs[k];
        ig_vk_device *dm;
        REQUIRE_OK(ig_vk_device_create(&p, &dm));
        run_matmul(dm, IG_TYPE_Q6_K, 256 * 7, 9, 1, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q4_K, 256 * 9, 37, 1, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q8_0, 32 * 21, 10, 1, IG_VK_MATMUL_INT8, true, IG_VK_ROWS_OUTPUTS);
        run_matmul(dm, IG_TYPE_F16, 520, 12, 1, IG_VK_MATMUL_FAST, false, IG_VK_ROWS_TOKENS);
        run_matmul(dm, IG_TYPE_Q4_K, 256 * 9, 37, 3, IG_VK_MATMUL_INT8, false, IG_VK_ROWS_TOKENS); /* not one token */
        ig_vk_device_free(dm);
    }
}

/* The int8 copy of the activations element by element: a mat-vec of
 * one-hot rows (row r holds one nonzero weight, at element r) gives each
 * element's dequantized int8 value times that weight's, so a q one step
 * off (1/127 of the block's largest magnitude) or a scale off shows in its
 * own output, not diluted in a sum (Q4_0's weights, d (q - 8), bring in
 * the block's half sums of q as well). x next to rounding ties
 * (fill_near_ties, per unit: blocks of 32, or 256 for the K-quants), so a
 * multiplier an ulp off moves q: the GPU's scales come from its division
 * (x8_div in x8.glsl corrects the hardware quotient; lavapipe divides
 * exactly, the H100 does not). */
static void run_int8_copy_exact(ig_vk_device *d, ig_dtype type, int n_in, int n_tok) {
    const size_t unit = ig_dtype_block_elems(type) == 256 ? 256 : 32;
    weight w;
    memset(&w, 0, sizeof w);
    w.type = type;
    w.n_in = n_in;
    w.rows = n_in;
    REQUIRE(ig_dtype_row_bytes(type, n_in, &w.row_bytes));
    w.data = malloc(w.row_bytes * (size_t)n_in);
    float *row = calloc((size_t)n_in, 4), *x = malloc((size_t)n_in * n_tok * 4), *xq = malloc((size_t)n_in * 4);
    float *want = malloc((size_t)n_in * n_tok * 4), *got = malloc((size_t)n_in * n_tok * 4);
    REQUIRE(w.data && row && x && xq && want && got);
    for (int r = 0; r < n_in; r++) {
        row[r] = 1.0f;
        ig_quantize_row(type, row, w.data + (size_t)r * w.row_bytes, n_in);
        row[r] = 0.0f;
    }
    REQUIRE_OK(ig_vk_weight_create(d, type, n_in, n_in, &w.buf));
    REQUIRE_OK(ig_vk_buffer_write(w.buf, 0, w.data, w.row_bytes * (size_t)n_in));
    fill_near_ties(x, (size_t)n_in * n_tok, unit);
    for (int t = 0; t < n_tok; t++) {
        x8_round(type, x + (size_t)t * n_in, xq, n_in);
        for (int r = 0; r < n_in; r++)
            want[(size_t)t * n_in + r] = ig_vec_dot_ref(type, w.data + (size_t)r * w.row_bytes, xq, n_in);
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    int32_t pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    REQUIRE(n_tok <= 8);
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, NULL, 0, NULL));
    ig_vk_buffer *bx = upload(d, x, (size_t)n_in * n_tok * 4), *by = upload(d, want, (size_t)n_in * n_tok * 4);
    REQUIRE(bx && by);
    REQUIRE_OK(ig_vk_buffer_zero(by));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_INT8);
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){bx, 0, (uint32_t)n_in},
                               (ig_vk_view){by, 0, (uint32_t)n_in}));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(by, 0, got, (size_t)n_in * n_tok * 4));
    /* only the roundings of the float sums may differ: with weights of an
       offset (Q4_0: d (q - 8)) the block's half sums of q enter each output
       too; a q one step off moves an output by at least 1/127 of its
       block's largest magnitude, 1/640 of the row's */
    int bad = 0, first = -1;
    for (int t = 0; t < n_tok; t++) {
        float mx = 0.0f;
        for (int r = 0; r < n_in; r++) mx = fmaxf(mx, fabsf(want[(size_t)t * n_in + r]));
        for (int r = 0; r < n_in; r++) {
            const int i = t * n_in + r;
            if (!(fabsf(got[i] - want[i]) <= 2e-6f * mx)) bad++, first = first < 0 ? i : first;
        }
    }
    if (bad)
        ig_test_fail_at(__FILE__, __LINE__, "%s: %d of %d int8 values off, first %d: %.9g against %.9g",
                        ig_dtype_name(type), bad, n_in * n_tok, first, got[first], want[first]);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(by);
    ig_vk_step_free(s);
    free(row);
    free(x);
    free(xq);
    free(want);
    free(got);
    weight_free(&w);
}

IG_TEST(vulkan_int8_copy_exact) {
    ig_vk_device *d = device_int8();
    if (!d) return;
    run_int8_copy_exact(d, IG_TYPE_Q8_0, 1024, 3); /* blocks of 32, f16 scales */
    run_int8_copy_exact(d, IG_TYPE_Q4_0, 1024, 2); /* ... and their half sums */
    run_int8_copy_exact(d, IG_TYPE_Q4_K, 1024, 3); /* units of 256, f32 scales */
}

/* What the tensor-core kernels run on, for devices described by hand (no
 * device needed): the H100 (both extensions), an RDNA3 as RADV reports it
 * (KHR's f16 16x16x16 and s8 16x16x16 only, subgroups of 64 by default,
 * 32 on request), and what each depends on. */
IG_TEST(vulkan_coopmat_choice) {
    ig_vk_device_info h100 = {.subgroup_size = 32, .subgroup_min = 32, .subgroup_max = 32,
                              .subgroup_shuffle = true, .subgroup_size_control = true,
                              .max_shared_memory = 48 * 1024, .fp16 = true, .int8 = true,
                              .vulkan_memory_model = true, .coopmat_khr = true, .coopmat_nv = true,
                              .coopmat_nv_16x8x16 = true, .coopmat_nv_s8_16x8x32 = true,
                              .coopmat_khr_16x16x16 = true, .coopmat_khr_s8_16x16x32 = true};
    const ig_vk_coopmat_wants all = {.any = true, .ext = IG_VK_COOPMAT_AUTO, .int8 = true, .attn = true};
    ig_vk_coopmat_choice c = ig_vk_coopmat_choose(&h100, true, true, all);
    CHECK(c.f16 && c.nv && c.khr && c.i8 && c.i8_nv && c.i8_khr && c.attn && c.attn_nv && c.attn_khr && !c.sg32);
    ig_vk_coopmat_wants w = all;
    w.ext = IG_VK_COOPMAT_NV;
    c = ig_vk_coopmat_choose(&h100, true, true, w);
    CHECK(c.nv && !c.khr && c.i8_nv && !c.i8_khr && c.attn && c.attn_nv && !c.attn_khr);
    w.ext = IG_VK_COOPMAT_KHR;
    c = ig_vk_coopmat_choose(&h100, true, true, w);
    CHECK(!c.nv && c.khr && !c.i8_nv && c.i8_khr && c.attn && !c.attn_nv && c.attn_khr);
    w = all;
    w.int8 = false;
    w.attn = false;
    c = ig_vk_coopmat_choose(&h100, true, true, w);
    CHECK(c.nv && c.khr && !c.i8_nv && !c.i8_khr && !c.attn && !c.attn_nv && !c.attn_khr);
    /* a compiler without KHR (Debian 12's glslc alone), or without NV */
    c = ig_vk_coopmat_choose(&h100, true, false, all);
    CHECK(c.nv && !c.khr && c.i8_nv && !c.i8_khr);
    c = ig_vk_coopmat_choose(&h100, false, true, all);
    CHECK(!c.nv && c.khr && c.i8_khr && !c.attn_nv && c.attn_khr);
    /* RDNA3: the f16 matmul on KHR's, subgroups of 32 required, no int8
       matmul (its s8 shape has K = 16) */
    ig_vk_device_info rdna3 = {.subgroup_size = 64, .subgroup_min = 32, .subgroup_max = 64,
                               .subgroup_shuffle = true, .subgroup_size_control = true,
                               .max_shared_memory = 64 * 1024, .fp16 = true, .int8 = true,
                               .vulkan_memory_model = true, .coopmat_khr = true, .coopmat_khr_16x16x16 = true};
    c = ig_vk_coopmat_choose(&rdna3, true, true, all);
    CHECK(c.f16 && !c.nv && c.khr && c.sg32 && !c.i8 && !c.i8_nv && !c.i8_khr && c.attn && !c.attn_nv && c.attn_khr);
    ig_vk_device_info r = rdna3;
    r.subgroup_shuffle = false; /* the attention's softmax shuffles */
    c = ig_vk_coopmat_choose(&r, true, true, all);
    CHECK(c.khr && !c.attn && !c.attn_khr);
    r = rdna3;
    r.subgroup_size_control = false; /* subgroups of 64 only */
    c = ig_vk_coopmat_choose(&r, true, true, all);
    CHECK(!c.nv && !c.khr);
    r = rdna3;
    r.vulkan_memory_model = false;
    CHECK(!ig_vk_coopmat_choose(&r, true, true, all).khr);
    r = rdna3;
    r.subgroup_size = 32; /* wave32 by default: nothing to require */
    c = ig_vk_coopmat_choose(&r, true, true, all);
    CHECK(c.khr && !c.sg32);
    /* no tensor cores: asked not to, no f16 arithmetic, small shared memory */
    w = all;
    w.any = false;
    c = ig_vk_coopmat_choose(&h100, true, true, w);
    CHECK(!c.f16 && !c.nv && !c.khr && !c.i8 && !c.i8_nv && !c.i8_khr && !c.attn);
    ig_vk_device_info h = h100;
    h.fp16 = false;
    CHECK(!ig_vk_coopmat_choose(&h, true, true, all).khr);
    h = h100;
    h.max_shared_memory = 32 * 1024;
    c = ig_vk_coopmat_choose(&h, true, true, all);
    CHECK(!c.nv && !c.khr);
}

/* Tensor cores (NV cooperative matrix; the H100, not lavapipe). */
/* Split K: a matmul whose rows and tokens give few workgroups runs in K
 * ranges plus cm_reduce on device(), in one pass per weight part on
 * device_split() (splitting off); both agree to the summation order. */
IG_TEST(vulkan_matmul_coopmat_split) {
    ig_vk_device *d = device();
    if (!d) return;
    if (!ig_vk_device_coopmat(d)) {
        ig_test_skip("no cooperative-matrix matmul on this device");
        return;
    }
    ig_vk_device *ds = device_split();
    REQUIRE(ds != NULL);
    const int n_in = 256 * 9, rows = 70, n_tok = 9;
    float *x = malloc((size_t)n_in * n_tok * 4), *y[2];
    y[0] = calloc((size_t)rows * n_tok, 4);
    y[1] = calloc((size_t)rows * n_tok, 4);
    REQUIRE(x && y[0] && y[1]);
    fill(x, (size_t)n_in * n_tok, 1.0f);
    const uint64_t rng0 = g_rng; /* the same weights on both devices */
    for (int k = 0; k < 2; k++) {
        ig_vk_device *dev = k ? ds : d;
        g_rng = rng0;
        weight a, b;
        REQUIRE(weight_make(dev, IG_TYPE_Q4_K, n_in, rows, &a));
        REQUIRE(weight_make(dev, IG_TYPE_Q4_K, n_in, rows, &b));
        ig_vk_buffer *bx = upload(dev, x, (size_t)n_in * n_tok * 4), *by = upload(dev, y[k], (size_t)rows * n_tok * 4);
        REQUIRE(bx && by);
        ig_vk_step *s;
        REQUIRE_OK(ig_vk_step_create(dev, n_tok, &s));
        int32_t pos[16];
        for (int t = 0; t < n_tok; t++) pos[t] = t;
        REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, NULL, 0, NULL));
        ig_vk_graph *g;
        REQUIRE_OK(ig_vk_graph_begin(dev, s, n_tok, &g));
        ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_COOPMAT);
        REQUIRE_OK(ig_vk_op_matmul_geglu(g, IG_VK_ROWS_TOKENS, a.buf, b.buf, (ig_vk_view){bx, 0, (uint32_t)n_in},
                                         (ig_vk_view){by, 0, (uint32_t)rows}));
        REQUIRE_OK(ig_vk_graph_end(g));
        /* a dispatch per weight part (device_split() has many), + cm_reduce */
        CHECK_EQ_INT(ig_vk_graph_get_stats(g).n_dispatch, ig_vk_buffer_n_parts(a.buf) + (k ? 0 : 1));
        REQUIRE_OK(ig_vk_graph_run(g));
        REQUIRE_OK(ig_vk_buffer_read(by, 0, y[k], (size_t)rows * n_tok * 4));
        ig_vk_graph_free(g);
        ig_vk_step_free(s);
        ig_vk_buffer_free(bx);
        ig_vk_buffer_free(by);
        weight_free(&a);
        weight_free(&b);
    }
    /* the same f16 products, summed in another order */
    CHECK_REL(y[0], y[1], (size_t)rows * n_tok, 1e-5, "split against one pass");
    free(x);
    free(y[0]);
    free(y[1]);
}

/* Every tile shape of the f16 tensor-core matmul on d (ds: device_split()'s
 * settings), against the CPU. */
static void coopmat_suite(ig_vk_device *d, ig_vk_device *ds) {
    const ig_dtype types[] = {IG_TYPE_F16, IG_TYPE_Q8_0, IG_TYPE_Q4_0, IG_TYPE_Q5_0,
                              IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};
    /* tiles of 32..128 rows x 64 tokens, steps of 64 or 128 row elements:
       partial tiles, a half step at the row end (11 blocks of 32), and
       whole tiles stored straight from the fragments */
    const int toks[] = {9, 64, 100};
    for (size_t i = 0; i < IG_ARRAY_LEN(types); i++) {
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++)
            run_matmul(d, types[i], fast_in(types[i]), 200, toks[k], IG_VK_MATMUL_COOPMAT, false,
                       IG_VK_ROWS_TOKENS);
        run_matmul(d, types[i], fast_in(types[i]), 67, 17, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, types[i], fast_in(types[i]) * 2, 256, 128, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, types[i], fast_in(types[i]), 160, 200, IG_VK_MATMUL_COOPMAT, false, IG_VK_ROWS_TOKENS);
    }
    run_matmul(d, IG_TYPE_Q4_K, 256 * 21, 300, 40, IG_VK_MATMUL_AUTO, false, IG_VK_ROWS_TOKENS);
    run_matmul(d, IG_TYPE_Q6_K, 512, 40, 30, IG_VK_MATMUL_COOPMAT, false, IG_VK_ROWS_OUTPUTS);
    /* K split into ranges (small grids on device(): see
       vulkan_matmul_coopmat_split), the last range shorter */
    for (size_t i = 0; i < IG_ARRAY_LEN(types); i++) {
        const int64_t n_in = ig_dtype_block_elems(types[i]) == 256 ? 256 * 9 : 64 * 37;
        run_matmul(d, types[i], n_in, 70, 9, IG_VK_MATMUL_COOPMAT, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, types[i], n_in, 70, 66, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, types[i], n_in, 33, 5, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_OUTPUTS);
    }
    run_matmul(ds, IG_TYPE_Q8_0, 256, 50, 20, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_TOKENS);
    /* 128-token tiles (the split device takes them at any size) */
    for (size_t i = 0; i < IG_ARRAY_LEN(types); i++) {
        if (types[i] == IG_TYPE_Q6_K) continue; /* none for Q6_K */
        run_matmul(ds, types[i], fast_in(types[i]), 150, 200, IG_VK_MATMUL_COOPMAT, false, IG_VK_ROWS_TOKENS);
        run_matmul(ds, types[i], fast_in(types[i]), 70, 131, IG_VK_MATMUL_COOPMAT, true, IG_VK_ROWS_TOKENS);
    }
}

/* suite(d, ds) on device_ext(khr, false) and device_ext(khr, true), or a
 * skip ("no <why> on this device") where the first lacks the kernel (has). */
static void on_ext(bool khr, bool (*has)(const ig_vk_device *), void (*suite)(ig_vk_device *, ig_vk_device *),
                   const char *why) {
    ig_vk_device *d = device_ext(khr, false);
    if (!d || !has(d)) {
        char msg[128];
        snprintf(msg, sizeof msg, "no %s on this device", why);
        ig_test_skip(msg);
        return;
    }
    ig_vk_device *ds = device_ext(khr, true);
    REQUIRE(ds != NULL && has(ds));
    suite(d, ds);
}

static bool has_nv_matmul(const ig_vk_device *d) { return ig_vk_device_coopmat(d) && !ig_vk_device_coopmat_khr(d); }

/* On NV cooperative matrices (16 x 8 x 16 fragments). */
IG_TEST(vulkan_matmul_coopmat) { on_ext(false, has_nv_matmul, coopmat_suite, "NV cooperative-matrix matmul"); }

/* On KHR cooperative matrices (16 x 16 x 16 fragments; subgroups take 16
 * rows where 32 would leave them fewer tokens than a fragment). */
IG_TEST(vulkan_matmul_coopmat_khr) {
    on_ext(true, ig_vk_device_coopmat_khr, coopmat_suite, "KHR cooperative-matrix matmul");
}

/* int8 tensor cores (mmq.comp; s8 cooperative-matrix products):
 * Q4_K and Q6_K against the CPU's sums on x as the CPU quantizes it. */
static void coopmat_int8_suite(ig_vk_device *d, ig_vk_device *ds) {
    const ig_vk_matmul_path P = IG_VK_MATMUL_COOPMAT_INT8;
    const ig_dtype types[] = {IG_TYPE_Q4_K, IG_TYPE_Q6_K};
    for (size_t ti = 0; ti < IG_ARRAY_LEN(types); ti++) {
        const ig_dtype t = types[ti];
        /* tiles of 128 rows (64 per matrix for GEGLU) x 64 tokens (32 up to
           32), a super-block per step, Q4_K's minima in pairs of
           super-blocks: partial tiles, whole ones stored straight from the
           fragments, odd and even step counts (one step alone too) */
        const int toks[] = {1, 17, 32, 33, 64, 100};
        for (size_t k = 0; k < IG_ARRAY_LEN(toks); k++) {
            run_matmul(d, t, 256 * 3, 200, toks[k], P, false, IG_VK_ROWS_TOKENS);
            run_matmul(d, t, 256 * 2, 67, toks[k], P, true, IG_VK_ROWS_TOKENS);
        }
        run_matmul(d, t, 256, 70, 40, P, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, 256, 70, 40, P, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, 256 * 4, 256, 128, P, true, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, 256 * 3, 40, 30, P, false, IG_VK_ROWS_OUTPUTS);
        /* K split into ranges (small grids on device()), the last one shorter */
        run_matmul(d, t, 256 * 21, 300, 128, P, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, 256 * 9, 70, 66, P, true, IG_VK_ROWS_TOKENS);
        /* weights in parts of a few rows, no split; Q4_K's 128-token tiles
           from 128 (the split device takes them at any size) */
        run_matmul(ds, t, 256 * 5, 150, 70, P, false, IG_VK_ROWS_TOKENS);
        run_matmul(ds, t, 256 * 5, 70, 131, P, true, IG_VK_ROWS_TOKENS);
        run_matmul(ds, t, 256 * 3, 150, 200, P, false, IG_VK_ROWS_TOKENS);
        run_matmul(ds, t, 256 * 2, 130, 128, P, false, IG_VK_ROWS_TOKENS);
        /* AUTO takes it for large matrices and batches */
        run_matmul(d, t, 4096, 1024, 40, IG_VK_MATMUL_AUTO, false, IG_VK_ROWS_TOKENS);
        run_matmul(d, t, 4096, 1024, 12, IG_VK_MATMUL_AUTO, true, IG_VK_ROWS_TOKENS);
    }
    /* not for other types */
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, 40, &s));
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_Q5_K, 256, 8, &w));
    ig_vk_buffer *b;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 256 * 40 * 4, &b));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, 40, &g));
    ig_vk_graph_set_matmul_path(g, P);
    CHECK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){b, 0, 256}, (ig_vk_view){b, 0, 8}) != IG_OK);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(b);
    weight_free(&w);
    ig_vk_step_free(s);
}

/* On NV cooperative matrices (s8 16 x 8 x 32). */
IG_TEST(vulkan_matmul_coopmat_int8) {
    on_ext(false, ig_vk_device_coopmat_int8, coopmat_int8_suite, "NV int8 cooperative-matrix matmul");
}

/* On KHR cooperative matrices (s8 16 x 16 x 32; narrow GEGLU tiles give
 * each subgroup 16 rows). */
IG_TEST(vulkan_matmul_coopmat_int8_khr) {
    on_ext(true, ig_vk_device_coopmat_int8, coopmat_int8_suite, "KHR int8 cooperative-matrix matmul");
}

IG_TEST(vulkan_matmul_fast_rejects) {
    ig_vk_device *d = device();
    if (!d) return;
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_F16, 203, 8, &w)); /* rows of whole 8-element items only */
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, 1, &s));
    ig_vk_buffer *b;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 4096, &b));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g));
    ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_FAST);
    CHECK_STATUS(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){b, 0, 0}, (ig_vk_view){b, 2048, 0}),
                 IG_ERR_INVALID_ARG);
    ig_vk_graph_free(g);
    weight_free(&w);
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, 64, 8, &w));
    REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g));
    ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_FAST); /* x offset not a multiple of 4 elements */
    CHECK_STATUS(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){b, 4, 0}, (ig_vk_view){b, 2048, 0}),
                 IG_ERR_INVALID_ARG);
    ig_vk_graph_free(g);
    weight_free(&w);
    ig_vk_buffer_free(b);
    ig_vk_step_free(s);
}

/* ---- fused ops ------------------------------------------------------------------ */

/* x += rmsnorm(src) * w1; xn = rmsnorm(x) * w2 */
static void run_add_norm(ig_vk_device *d, int width, int n_tok, ig_vk_rows rsel) {
    const int stride = width + 4;
    const size_t n = (size_t)stride * n_tok;
    const float eps = 1e-6f;
    float *src = malloc(n * 4), *x = malloc(n * 4), *want_x = malloc(n * 4), *want_n = calloc(n, 4);
    float *got = malloc(n * 4), *w1 = malloc((size_t)width * 4), *w2 = malloc((size_t)width * 4);
    REQUIRE(src && x && want_x && want_n && got && w1 && w2);
    fill(src, n, 3.0f);
    fill(x, n, 1.0f);
    fill(w1, (size_t)width, 1.5f);
    fill(w2, (size_t)width, 1.5f);
    memcpy(want_x, x, n * 4);
    const int rows = rsel == IG_VK_ROWS_OUTPUTS ? (n_tok > 1 ? n_tok - 1 : 1) : n_tok;
    float *tmp = malloc((size_t)width * 4);
    REQUIRE(tmp);
    for (int t = 0; t < rows; t++) {
        ref_rmsnorm(src + (size_t)t * stride, tmp, w1, width, eps);
        for (int i = 0; i < width; i++) want_x[(size_t)t * stride + i] += tmp[i];
        ref_rmsnorm(want_x + (size_t)t * stride, want_n + (size_t)t * stride, w2, width, eps);
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    int32_t pos[64] = {0}, out[64];
    for (int t = 0; t < n_tok; t++) out[t] = t;
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, NULL, rsel == IG_VK_ROWS_OUTPUTS ? rows : 0, out));
    ig_vk_buffer *bs = upload(d, src, n * 4), *bx = upload(d, x, n * 4), *bn = upload(d, want_n, n * 4);
    ig_vk_buffer *b1 = upload(d, w1, (size_t)width * 4), *b2 = upload(d, w2, (size_t)width * 4);
    REQUIRE(bs && bx && bn && b1 && b2);
    REQUIRE_OK(ig_vk_buffer_zero(bn));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    REQUIRE_OK(ig_vk_op_add_rmsnorm_norm(g, rsel, (ig_vk_view){bs, 0, (uint32_t)stride}, (ig_vk_view){bx, 0, (uint32_t)stride},
                                         b1, (ig_vk_view){bn, 0, (uint32_t)stride}, b2, width, eps));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(bx, 0, got, n * 4));
    CHECK_REL(got, want_x, n, 1e-5, "add_rmsnorm_norm residual width %d tokens %d", width, n_tok);
    REQUIRE_OK(ig_vk_buffer_read(bn, 0, got, n * 4));
    CHECK_REL(got, want_n, n, 1e-5, "add_rmsnorm_norm normed width %d tokens %d", width, n_tok);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bs);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(bn);
    ig_vk_buffer_free(b1);
    ig_vk_buffer_free(b2);
    ig_vk_step_free(s);
    free(src);
    free(x);
    free(want_x);
    free(want_n);
    free(got);
    free(w1);
    free(w2);
    free(tmp);
}

IG_TEST(vulkan_add_rmsnorm_norm) {
    ig_vk_device *d = device();
    if (!d) return;
    run_add_norm(d, 1152, 1, IG_VK_ROWS_TOKENS);
    run_add_norm(d, 640, 17, IG_VK_ROWS_TOKENS);
    run_add_norm(d, 5376, 3, IG_VK_ROWS_OUTPUTS);
    run_add_norm(d, 100, 5, IG_VK_ROWS_TOKENS);
    run_add_norm(d, 99, 2, IG_VK_ROWS_TOKENS); /* not whole vec4s: rmsnorm.comp */
}

/* The int8 copy of a matmul input: written by add_rmsnorm_norm itself, read
 * by two int8 mat-vecs without a quant_x8 dispatch, made again by quant_x8
 * once an op rewrites the input. */
IG_TEST(vulkan_int8_copy_reuse) {
    ig_vk_device *d = device_int8();
    if (!d) return;
    const int width = 1280, stride = width + 4, n_tok = 3, rows = 40;
    const size_t n = (size_t)stride * n_tok;
    const float eps = 1e-6f;
    float *src = malloc(n * 4), *x = malloc(n * 4), *xn = calloc(n, 4), *w1 = malloc((size_t)width * 4);
    float *w2 = malloc((size_t)width * 4), *tmp = malloc((size_t)width * 4), *xq = malloc((size_t)width * 4);
    float *xq0 = malloc((size_t)width * 4);
    float *want = calloc((size_t)3 * rows * n_tok, 4), *got = malloc((size_t)3 * rows * n_tok * 4);
    REQUIRE(src && x && xn && w1 && w2 && tmp && xq && xq0 && want && got);
    fill(src, n, 3.0f);
    fill(x, n, 1.0f);
    fill(w1, (size_t)width, 1.5f);
    fill(w2, (size_t)width, 1.5f);
    weight a, b;
    REQUIRE(weight_make(d, IG_TYPE_Q4_K, width, rows, &a));
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, width, rows, &b));
    ig_vk_buffer *bs = upload(d, src, n * 4), *bx = upload(d, x, n * 4), *bn = upload(d, xn, n * 4);
    ig_vk_buffer *b1 = upload(d, w1, (size_t)width * 4), *b2 = upload(d, w2, (size_t)width * 4);
    ig_vk_buffer *by = upload(d, got, (size_t)3 * rows * n_tok * 4);
    REQUIRE(bs && bx && bn && b1 && b2 && by);
    for (int t = 0; t < n_tok; t++) {
        float *xr = x + (size_t)t * stride, *zr = xn + (size_t)t * stride;
        ref_rmsnorm(src + (size_t)t * stride, tmp, w1, width, eps);
        for (int i = 0; i < width; i++) xr[i] += tmp[i];
        ref_rmsnorm(xr, zr, w2, width, eps);
        x8_round(IG_TYPE_Q4_K, zr, xq, width);
        x8_round(IG_TYPE_Q8_0, zr, xq0, width);
        for (int r = 0; r < rows; r++) {
            want[(size_t)t * 3 * rows + r] = ig_vec_dot_ref(IG_TYPE_Q4_K, a.data + (size_t)r * a.row_bytes, xq, width);
            want[(size_t)t * 3 * rows + rows + r] =
                ig_vec_dot_ref(IG_TYPE_Q8_0, b.data + (size_t)r * b.row_bytes, xq0, width);
        }
        ref_rmsnorm(zr, zr, w1, width, eps);
        x8_round(IG_TYPE_Q4_K, zr, xq, width);
        for (int r = 0; r < rows; r++)
            want[(size_t)t * 3 * rows + 2 * rows + r] =
                ig_vec_dot_ref(IG_TYPE_Q4_K, a.data + (size_t)r * a.row_bytes, xq, width);
    }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    int32_t pos[3] = {0, 1, 2};
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, NULL, 0, NULL));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    const ig_vk_view vn = {bn, 0, (uint32_t)stride};
    /* an earlier Q4_K mat-vec of this width: producers of the width write
       its kind of blocks from then on (its output is overwritten below) */
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, a.buf, (ig_vk_view){bs, 0, (uint32_t)stride},
                               (ig_vk_view){by, 0, 3 * rows}));
    REQUIRE_OK(ig_vk_op_add_rmsnorm_norm(g, IG_VK_ROWS_TOKENS, (ig_vk_view){bs, 0, (uint32_t)stride},
                                         (ig_vk_view){bx, 0, (uint32_t)stride}, b1, vn, b2, width, eps));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, a.buf, vn, (ig_vk_view){by, 0, 3 * rows}));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, b.buf, vn, (ig_vk_view){by, (uint64_t)rows * 4, 3 * rows}));
    REQUIRE_OK(ig_vk_op_rmsnorm(g, IG_VK_ROWS_TOKENS, vn, vn, b1, width, 1, eps));
    REQUIRE_OK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, a.buf, vn, (ig_vk_view){by, (uint64_t)rows * 8, 3 * rows}));
    REQUIRE_OK(ig_vk_graph_end(g));
    /* quant_x8 + Q4_K mat-vec (the earlier one), norm (+ int8 blocks of
       256), Q4_K mat-vec, quant_x8 (blocks of 32), Q8_0 mat-vec, norm,
       quant_x8 (its input changed), Q4_K mat-vec */
    CHECK_EQ_INT(ig_vk_graph_get_stats(g).n_dispatch, 9);
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(by, 0, got, (size_t)3 * rows * n_tok * 4));
    /* x comes from GPU norms: an ulp there may move a value across a rounding
       tie of the quantization (one step of one element, ~1e-3) */
    CHECK_REL(got, want, (size_t)3 * rows * n_tok, 2e-3, "int8 copies of a norm's output");
    ig_vk_graph_free(g);
    ig_vk_step_free(s);
    ig_vk_buffer_free(bs);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(bn);
    ig_vk_buffer_free(b1);
    ig_vk_buffer_free(b2);
    ig_vk_buffer_free(by);
    weight_free(&a);
    weight_free(&b);
    free(src);
    free(x);
    free(xn);
    free(w1);
    free(w2);
    free(tmp);
    free(xq);
    free(xq0);
    free(want);
    free(got);
}

/* per-head rmsnorm + RoPE, in place (Q) or into the cache with V (K) */
static void run_norm_rope(ig_vk_device *d, int n_heads, int hd, int n_tok, bool kv_store, ig_kv_type type) {
    const int width = n_heads * hd, stride = width + 4, cap = 64;
    const size_t n = (size_t)stride * n_tok, cache = (size_t)cap * width;
    const float eps = 1e-6f, base = 10000.0f, factor = 2.0f;
    float *x = malloc(n * 4), *v = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4), freq[512];
    float *nw = malloc((size_t)hd * 4), *want_k = calloc(cache, 4), *want_v = calloc(cache, 4), *gk = malloc(cache * 4);
    REQUIRE(x && v && want && got && nw && want_k && want_v && gk);
    fill(x, n, 3.0f);
    fill(v, n, 1.0f);
    fill(nw, (size_t)hd, 1.5f);
    memcpy(want, x, n * 4);
    ig_vk_rope_freqs(base, factor, hd, freq);
    int32_t pos[64], seq[64] = {0};
    for (int t = 0; t < n_tok; t++) pos[t] = 5 + t * 7;
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_heads; h++) {
            float *r = want + (size_t)t * stride + (size_t)h * hd;
            ref_rmsnorm(r, r, nw, hd, eps);
            ref_rope_row(r, hd, pos[t], freq);
            const size_t row = (size_t)(pos[t] % cap) * width + (size_t)h * hd;
            for (int i = 0; i < hd; i++) {
                want_k[row + i] = r[i];
                want_v[row + i] = v[(size_t)t * stride + (size_t)h * hd + i];
            }
        }
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, pos, seq, 0, NULL));
    ig_vk_buffer *bx = upload(d, x, n * 4), *bv = upload(d, v, n * 4), *bw = upload(d, nw, (size_t)hd * 4), *kc, *vc;
    REQUIRE(bx && bv && bw);
    const size_t es = type == IG_KV_F16 ? 2 : 4;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, cache * es, &kc));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, cache * es, &vc));
    REQUIRE_OK(ig_vk_buffer_zero(kc));
    REQUIRE_OK(ig_vk_buffer_zero(vc));
    ig_vk_kv kv = {kc, vc, 0, 0, type, 1, cap, n_heads, hd, 0};
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_view vx = {bx, 0, (uint32_t)stride}, vv = {bv, 0, (uint32_t)stride};
    if (kv_store) REQUIRE_OK(ig_vk_op_rmsnorm_rope_kv_store(g, &kv, vx, bw, vv, eps, base, factor));
    else REQUIRE_OK(ig_vk_op_rmsnorm_rope(g, vx, bw, n_heads, hd, eps, base, factor));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    if (!kv_store) {
        REQUIRE_OK(ig_vk_buffer_read(bx, 0, got, n * 4));
        CHECK_REL(got, want, n, 1e-5, "rmsnorm_rope heads %d hd %d tokens %d", n_heads, hd, n_tok);
    } else {
        uint8_t *raw = malloc(cache * es);
        REQUIRE(raw);
        REQUIRE_OK(ig_vk_buffer_read(kc, 0, raw, cache * es));
        for (size_t i = 0; i < cache; i++) gk[i] = kv_get(type, raw, i);
        CHECK_REL(gk, want_k, cache, type == IG_KV_F16 ? 1e-3 : 1e-5, "rmsnorm_rope_kv_store K hd %d tokens %d", hd, n_tok);
        REQUIRE_OK(ig_vk_buffer_read(vc, 0, raw, cache * es));
        for (size_t i = 0; i < cache; i++) gk[i] = kv_get(type, raw, i);
        CHECK_REL(gk, want_v, cache, type == IG_KV_F16 ? 1e-3 : 0.0, "rmsnorm_rope_kv_store V hd %d tokens %d", hd, n_tok);
        REQUIRE_OK(ig_vk_buffer_read(bx, 0, got, n * 4)); /* k itself unchanged */
        CHECK(memcmp(got, x, n * 4) == 0);
        free(raw);
    }
    ig_vk_graph_free(g);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(bv);
    ig_vk_buffer_free(bw);
    ig_vk_buffer_free(kc);
    ig_vk_buffer_free(vc);
    ig_vk_step_free(s);
    free(x);
    free(v);
    free(want);
    free(got);
    free(nw);
    free(want_k);
    free(want_v);
    free(gk);
}

IG_TEST(vulkan_rmsnorm_rope) {
    ig_vk_device *d = device();
    if (!d) return;
    const int hds[] = {32, 128, 256};
    for (size_t i = 0; i < IG_ARRAY_LEN(hds); i++) {
        run_norm_rope(d, 4, hds[i], 3, false, IG_KV_F32);
        run_norm_rope(d, 2, hds[i], 5, true, IG_KV_F32);
        run_norm_rope(d, 1, hds[i], 1, true, IG_KV_F16);
    }
}

/* The one-token q/k/v projections with QK-norm, RoPE and the cache store
 * in their tails (ig_vk_op_qkv_tail) against the same ops one by one
 * (matmul x 3, rmsnorm_rope, rmsnorm_rope_kv_store, each tested against the
 * CPU above), replayed at three positions: a tail that did not run (a
 * counter not back at zero) leaves q unnormed and the cache unwritten. */
typedef struct qkv_case {
    int n_head, n_kv, hd, n_in;
    ig_dtype tq, tv;
    ig_kv_type kv;
} qkv_case;

static void read_cache(ig_vk_buffer *b, ig_kv_type type, size_t n, float *out) {
    const size_t es = type == IG_KV_F16 ? 2 : 4;
    uint8_t *raw = malloc(n * es);
    REQUIRE(raw);
    REQUIRE_OK(ig_vk_buffer_read(b, 0, raw, n * es));
    for (size_t i = 0; i < n; i++) out[i] = kv_get(type, raw, i);
    free(raw);
}

static void run_qkv_tail(ig_vk_device *d, qkv_case c) {
    const int cap = 8, wq = c.n_head * c.hd, wkv = c.n_kv * c.hd;
    const size_t cache = (size_t)cap * (size_t)wkv, es = c.kv == IG_KV_F16 ? 2 : 4;
    const float eps = 1e-6f, base = 10000.0f, factor = 1.0f;
    weight w[3];
    REQUIRE(weight_make(d, c.tq, c.n_in, wq, &w[0]));
    REQUIRE(weight_make(d, c.tq, c.n_in, wkv, &w[1]));
    REQUIRE(weight_make(d, c.tv, c.n_in, wkv, &w[2]));
    float *x = malloc((size_t)c.n_in * 4), *nq = malloc((size_t)c.hd * 4), *nk = malloc((size_t)c.hd * 4);
    float *got = malloc(cache * 4), *want = malloc(cache * 4);
    REQUIRE(x && nq && nk && got && want);
    fill(nq, (size_t)c.hd, 1.5f);
    fill(nk, (size_t)c.hd, 1.5f);
    ig_vk_buffer *bx, *bnq = upload(d, nq, (size_t)c.hd * 4), *bnk = upload(d, nk, (size_t)c.hd * 4);
    REQUIRE(bnq && bnk);
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)c.n_in * 4, &bx));
    /* [0]: the ops one by one, [1]: fused */
    ig_vk_buffer *q[2], *k[2], *v[2], *kc[2], *vc[2];
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, 2, &s));
    ig_vk_graph *g[2];
    const ig_vk_view vx = {bx, 0, 0};
    const ig_vk_qkv p = {w[0].buf, w[1].buf, w[2].buf, bnq, bnk, c.n_head, eps, base, factor};
    ig_vk_kv kv[2];
    for (int f = 0; f < 2; f++) {
        REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)wq * 4, &q[f]));
        REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)wkv * 4, &k[f]));
        REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (size_t)wkv * 4, &v[f]));
        REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, cache * es, &kc[f]));
        REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, cache * es, &vc[f]));
        REQUIRE_OK(ig_vk_buffer_zero(kc[f]));
        REQUIRE_OK(ig_vk_buffer_zero(vc[f]));
        kv[f] = (ig_vk_kv){kc[f], vc[f], 0, 0, c.kv, 1, cap, c.n_kv, c.hd, 0};
        const ig_vk_view vq = {q[f], 0, 0}, vk = {k[f], 0, 0}, vv = {v[f], 0, 0};
        REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g[f]));
        if (f == 0) {
            REQUIRE_OK(ig_vk_op_matmul(g[f], IG_VK_ROWS_TOKENS, w[0].buf, vx, vq));
            REQUIRE_OK(ig_vk_op_matmul(g[f], IG_VK_ROWS_TOKENS, w[1].buf, vx, vk));
            REQUIRE_OK(ig_vk_op_matmul(g[f], IG_VK_ROWS_TOKENS, w[2].buf, vx, vv));
            REQUIRE_OK(ig_vk_op_rmsnorm_rope(g[f], vq, bnq, c.n_head, c.hd, eps, base, factor));
            REQUIRE_OK(ig_vk_op_rmsnorm_rope_kv_store(g[f], &kv[f], vk, bnk, vv, eps, base, factor));
        } else {
            CHECK(ig_vk_qkv_tail_ok(g[f], &p, &kv[f], vx));
            REQUIRE_OK(ig_vk_op_qkv_tail(g[f], &p, &kv[f], vx, vq, vk, vv));
        }
        REQUIRE_OK(ig_vk_graph_end(g[f]));
    }
    /* q, k and v side by side and the stage after them gone: two barriers
       fewer (the q/k/v products' and the norm's) */
    CHECK_EQ_INT(ig_vk_graph_get_stats(g[1]).n_barrier, ig_vk_graph_get_stats(g[0]).n_barrier - 1);
    const int positions[] = {3, 12, 5}; /* slots 3, 4, 5 */
    for (size_t r = 0; r < IG_ARRAY_LEN(positions); r++) {
        fill(x, (size_t)c.n_in, 2.0f);
        REQUIRE_OK(ig_vk_buffer_write(bx, 0, x, (size_t)c.n_in * 4));
        int32_t pos = positions[r], seq = 0;
        REQUIRE_OK(ig_vk_step_set(s, 1, NULL, &pos, &seq, 0, NULL));
        REQUIRE_OK(ig_vk_graph_run(g[0]));
        REQUIRE_OK(ig_vk_graph_run(g[1]));
        REQUIRE_OK(ig_vk_buffer_read(q[0], 0, want, (size_t)wq * 4));
        REQUIRE_OK(ig_vk_buffer_read(q[1], 0, got, (size_t)wq * 4));
        CHECK_REL(got, want, (size_t)wq, 1e-6, "qkv_tail q heads %d hd %d pos %d", c.n_head, c.hd, pos);
        read_cache(kc[0], c.kv, cache, want);
        read_cache(kc[1], c.kv, cache, got);
        CHECK_REL(got, want, cache, c.kv == IG_KV_F16 ? 1e-3 : 1e-6, "qkv_tail K cache hd %d pos %d", c.hd, pos);
        read_cache(vc[0], c.kv, cache, want);
        read_cache(vc[1], c.kv, cache, got);
        CHECK_REL(got, want, cache, 0.0, "qkv_tail V cache hd %d pos %d", c.hd, pos);
    }
    for (int f = 0; f < 2; f++) {
        ig_vk_graph_free(g[f]);
        ig_vk_buffer_free(q[f]);
        ig_vk_buffer_free(k[f]);
        ig_vk_buffer_free(v[f]);
        ig_vk_buffer_free(kc[f]);
        ig_vk_buffer_free(vc[f]);
    }
    for (int i = 0; i < 3; i++) weight_free(&w[i]);
    ig_vk_step_free(s);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(bnq);
    ig_vk_buffer_free(bnk);
    free(x);
    free(nq);
    free(nk);
    free(got);
    free(want);
}

/* Checks whether ig_vk_qkv_tail_ok takes a small q/k/v (2 query heads, 2
 * kv heads of 64, Q8_0) in a graph of n_tok tokens on path (want); refused:
 * also that ig_vk_op_qkv_tail fails there. */
static void check_qkv_tail_applies(ig_vk_device *d, int n_tok, ig_vk_matmul_path path, bool want, bool refused) {
    weight w;
    REQUIRE(weight_make(d, IG_TYPE_Q8_0, 64, 128, &w));
    ig_vk_buffer *bx, *bn, *kc;
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 2 * 128 * 4, &bx));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 64 * 4, &bn));
    REQUIRE_OK(ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 8 * 128 * 2, &kc));
    const ig_vk_kv kv = {kc, kc, 0, 0, IG_KV_F16, 1, 8, 2, 64, 0};
    const ig_vk_qkv p = {w.buf, w.buf, w.buf, bn, bn, 2, 1e-6f, 10000.0f, 1.0f};
    const ig_vk_view vx = {bx, 0, 64}, vy = {bx, 0, 128};
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    ig_vk_graph_set_matmul_path(g, path);
    CHECK(ig_vk_qkv_tail_ok(g, &p, &kv, vx) == want);
    if (refused) CHECK(ig_vk_op_qkv_tail(g, &p, &kv, vx, vy, vy, vy) != IG_OK);
    ig_vk_graph_free(g);
    ig_vk_step_free(s);
    ig_vk_buffer_free(bx);
    ig_vk_buffer_free(bn);
    ig_vk_buffer_free(kc);
    weight_free(&w);
}

IG_TEST_SLOW(vulkan_qkv_tail) {
    ig_vk_device *d = device_int8();
    if (!d) return;
    /* 270M-like (640-wide rows, Q5_0 / Q8_0), 27B-like heads of 128 (Q4_K
       with a Q6_K v), small heads on an f32 cache */
    const qkv_case cases[] = {{4, 1, 256, 640, IG_TYPE_Q5_0, IG_TYPE_Q8_0, IG_KV_F16},
                              {8, 4, 128, 512, IG_TYPE_Q4_K, IG_TYPE_Q6_K, IG_KV_F16},
                              {6, 2, 64, 96, IG_TYPE_Q4_0, IG_TYPE_Q8_0, IG_KV_F32}};
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) run_qkv_tail(d, cases[i]);
    /* row groups of two rows in the q and k mat-vecs (half the workgroups
       counting in per head) */
    ig_vk_device_params dp = ig_vk_device_default_params();
    dp.index = ig_vk_device_get_info(d)->index;
    dp.tuning = "head_tail_nr=2";
    ig_vk_device *d2;
    REQUIRE_OK(ig_vk_device_create(&dp, &d2));
    dp.tuning = NULL;
    run_qkv_tail(d2, cases[1]);
    ig_vk_device_free(d2);

    /* where it does not apply: graphs of two tokens, a forced path, the
       tails turned off, split weights (128 rows of 68 bytes: parts of 4
       KiB); the op itself refuses a two-token graph */
    check_qkv_tail_applies(d, 1, IG_VK_MATMUL_AUTO, true, false);
    check_qkv_tail_applies(d, 1, IG_VK_MATMUL_FAST, false, false);
    check_qkv_tail_applies(d, 2, IG_VK_MATMUL_AUTO, false, true);
    dp.no_head_tails = true;
    ig_vk_device *d0;
    REQUIRE_OK(ig_vk_device_create(&dp, &d0));
    check_qkv_tail_applies(d0, 1, IG_VK_MATMUL_AUTO, false, false);
    ig_vk_device_free(d0);
    ig_vk_device *ds = device_split();
    REQUIRE(ds != NULL);
    check_qkv_tail_applies(ds, 1, IG_VK_MATMUL_AUTO, false, false);
}

IG_TEST(vulkan_copy) {
    ig_vk_device *d = device();
    if (!d) return;
    const int n_tok = 5, width = 301, st = 304;
    float a[5 * 304], y[5 * 304], got[5 * 304];
    fill(a, IG_ARRAY_LEN(a), 1.0f);
    memset(y, 0, sizeof y);
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, n_tok, &s));
    REQUIRE_OK(ig_vk_step_set_head_cap(s, 3));
    int32_t out[5] = {0, 1, 2, 3, 4};
    REQUIRE_OK(ig_vk_step_set(s, n_tok, NULL, NULL, NULL, 4, out)); /* head rows: min(4, 3) */
    ig_vk_buffer *ba = upload(d, a, sizeof a), *by = upload(d, y, sizeof y);
    REQUIRE(ba && by);
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, n_tok, &g));
    REQUIRE_OK(ig_vk_op_copy(g, IG_VK_ROWS_HEAD, (ig_vk_view){ba, 0, st}, (ig_vk_view){by, 0, st}, width));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(by, 0, got, sizeof got));
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < st; i++) {
            float want = t < 3 && i < width ? a[t * st + i] : 0.0f;
            if (got[t * st + i] != want) {
                ig_test_fail_at(__FILE__, __LINE__, "copy: row %d col %d", t, i);
                t = n_tok;
                break;
            }
        }
    ig_vk_graph_free(g);
    ig_vk_buffer_free(ba);
    ig_vk_buffer_free(by);
    ig_vk_step_free(s);
}

#else /* !IGNIS_HAVE_VULKAN */

IG_TEST(vulkan_ops) { ig_test_skip("built without the Vulkan backend"); }

#endif
