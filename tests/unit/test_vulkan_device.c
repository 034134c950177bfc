/* Vulkan backend: what only the Vulkan device has, below the backend
 * interface (every op's results through the interface, on this device and
 * its variants, are tests/unit/test_backend_ops.c's): device listing and
 * choice, buffers (staging copies, weights split into parts), a graph
 * recorded once and replayed with new step values (its dispatches and
 * barriers), the L2 prefetch, recording errors and what forced paths
 * refuse, where the fused q/k/v tails apply, what the tensor-core kernels
 * run on, and the ops the engine's graphs do not use (add; copy of the
 * head rows). Runs on any Vulkan device (lavapipe in CI); skips when there
 * is none. Errors are measured as max|gpu - ref| / max|ref|. */
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

static ig_vk_device *g_dev, *g_dev_split, *g_dev_staging;
static bool g_tried, g_tried_split, g_tried_staging;

static void free_devices(void) {
    ig_vk_device_free(g_dev);
    ig_vk_device_free(g_dev_split);
    ig_vk_device_free(g_dev_staging);
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


/* The same device with weights split into parts of at most 4 KiB. */
static ig_vk_device *device_split(void) {
    if (!device()) return NULL;
    if (!g_tried_split) {
        g_tried_split = true;
        ig_vk_device_params p = ig_vk_device_default_params();
        p.index = ig_vk_device_get_info(g_dev)->index;
        p.weight_part_bytes = 4096;
        if (ig_vk_device_create(&p, &g_dev_split) != IG_OK) g_dev_split = NULL;
    }
    return g_dev_split;
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

/* ---- rmsnorm ----------------------------------------------------------------- */

static void ref_rmsnorm(const float *x, float *y, const float *w, int d, float eps) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / d + eps));
    for (int i = 0; i < d; i++) y[i] = x[i] * scale * w[i];
}
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

/* Forced paths refuse what they cannot take. */
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
    /* the int8 tensor cores: Q4_K and Q6_K only */
    if (ig_vk_device_coopmat_int8(d)) {
        REQUIRE(weight_make(d, IG_TYPE_Q5_K, 256, 8, &w));
        REQUIRE_OK(ig_vk_graph_begin(d, s, 1, &g));
        ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_COOPMAT_INT8);
        CHECK(ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){b, 0, 256}, (ig_vk_view){b, 2048, 8}) != IG_OK);
        ig_vk_graph_free(g);
        weight_free(&w);
    }
    ig_vk_buffer_free(b);
    ig_vk_step_free(s);
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

/* The one-token q/k/v tails apply to graphs of one token on the automatic
 * path (the int8 mat-vec), with the tails on and single-part weights; the
 * op itself refuses a graph of two tokens. (Their results:
 * test_backend_ops.c's q/k/v cases.) */
IG_TEST(vulkan_qkv_tail_applies) {
    ig_vk_device *d = device();
    if (!d) return;
    if (!ig_vk_device_int8(d)) {
        ig_test_skip("no integer dot product on this device");
        return;
    }
    check_qkv_tail_applies(d, 1, IG_VK_MATMUL_AUTO, true, false);
    check_qkv_tail_applies(d, 1, IG_VK_MATMUL_FAST, false, false);
    check_qkv_tail_applies(d, 2, IG_VK_MATMUL_AUTO, false, true);
    ig_vk_device_params dp = ig_vk_device_default_params();
    dp.index = ig_vk_device_get_info(d)->index;
    dp.no_head_tails = true;
    ig_vk_device *d0;
    REQUIRE_OK(ig_vk_device_create(&dp, &d0));
    check_qkv_tail_applies(d0, 1, IG_VK_MATMUL_AUTO, false, false);
    ig_vk_device_free(d0);
    ig_vk_device *ds = device_split(); /* 128 rows of 68 bytes: parts of 4 KiB */
    REQUIRE(ds != NULL);
    check_qkv_tail_applies(ds, 1, IG_VK_MATMUL_AUTO, false, false);
}

/* ---- what fused producers save --------------------------------------------------- */

/* The dispatches of a graph holding a quantized mat-vec of q (so producers
 * know which int8 blocks a matmul of that width reads), the attention over
 * a long cache (split over chunks) and the same mat-vec of its output, on
 * a device with these tuning overrides. Recorded only: the results are
 * test_backend_ops.c's (its split-attention cases on these devices). */
static int attn_dispatches(const char *tuning, int n_head, int n_kv, int hd, ig_dtype wt, int n_tok) {
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = ig_vk_device_get_info(g_dev)->index;
    p.tuning = tuning;
    ig_vk_device *d;
    if (ig_vk_device_create(&p, &d) != IG_OK) return -1;
    const int width = n_head * hd, cap = 512;
    weight w;
    ig_vk_buffer *bq = NULL, *bc = NULL, *bo = NULL, *by = NULL;
    ig_vk_step *st = NULL;
    ig_vk_graph *g = NULL;
    int n = -1;
    if (weight_make(d, wt, width, 24, &w) && ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (uint64_t)width * n_tok * 4, &bq) == IG_OK &&
        ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (uint64_t)cap * n_kv * hd * 4, &bc) == IG_OK &&
        ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (uint64_t)width * n_tok * 4, &bo) == IG_OK &&
        ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, (uint64_t)24 * n_tok * 4, &by) == IG_OK &&
        ig_vk_step_create(d, n_tok, &st) == IG_OK && ig_vk_graph_begin(d, st, n_tok, &g) == IG_OK) {
        const ig_vk_kv kv = {bc, bc, 0, 0, IG_KV_F32, 1, cap, n_kv, hd, 0};
        if (ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){bq, 0, 0}, (ig_vk_view){by, 0, 0}) == IG_OK &&
            ig_vk_op_attention(g, &kv, (ig_vk_view){bq, 0, 0}, (ig_vk_view){bo, 0, 0}, n_head, 0.1f, 0.0f) == IG_OK &&
            ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, w.buf, (ig_vk_view){bo, 0, 0}, (ig_vk_view){by, 0, 0}) == IG_OK &&
            ig_vk_graph_end(g) == IG_OK)
            n = ig_vk_graph_get_stats(g).n_dispatch;
    }
    ig_vk_graph_free(g);
    ig_vk_step_free(st);
    ig_vk_buffer_free(bq);
    ig_vk_buffer_free(bc);
    ig_vk_buffer_free(bo);
    ig_vk_buffer_free(by);
    weight_free(&w);
    ig_vk_device_free(d);
    return n;
}

/* The split attention's chunks merged by its last workgroup: one dispatch
 * fewer than a merge stage of its own (attn_reduce.comp); where the
 * mat-vec reads int8 activations, the merge writes the int8 copy of the
 * output: one quant_x8 dispatch fewer. Heads of 128 (two per block of 256)
 * and of 256. */
IG_TEST(vulkan_attention_dispatches) {
    ig_vk_device *d = device();
    if (!d) return;
    const bool i8 = ig_vk_device_int8(d);
    const struct {
        int nh, nkv, hd;
        ig_dtype wt;
    } cases[] = {{4, 2, 128, IG_TYPE_Q4_K}, {4, 2, 256, IG_TYPE_Q6_K}};
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        const int nf = attn_dispatches(NULL, cases[i].nh, cases[i].nkv, cases[i].hd, cases[i].wt, 1);
        const int ns = attn_dispatches("attn_merge_max=0", cases[i].nh, cases[i].nkv, cases[i].hd, cases[i].wt, 1);
        const int nq = attn_dispatches("x8_producers=0", cases[i].nh, cases[i].nkv, cases[i].hd, cases[i].wt, 1);
        REQUIRE(nf > 0 && ns > 0 && nq > 0);
        /* the mat-vecs, the attention (+ a quant_x8 of q where int8) */
        CHECK_EQ_INT(nf, 3 + i8);
        CHECK_EQ_INT(ns, nf + 1);
        CHECK_EQ_INT(nq, nf + i8);
    }
}

/* ---- int8 activations (x8.glsl) ---------------------------------------------- */

/* A row of n activations in units of 256 that makes ig_quantize_row_q8_K
 * take every multiplier t: per unit a largest magnitude A held twice with
 * both signs (the first wins), runs whose largest magnitude is A k/8
 * exactly (a tie: t = k), an ulp above it (t = k + 1), far below (t = 1)
 * or zero, and values a few ulps from the rounding ties of their run's
 * multiplier; the last unit of a row is all zero. */
static void x8_probe_row(float *x, int n, bool neg_first) {
    for (int u = 0; u < n / 256; u++) {
        float *xu = x + 256 * u;
        memset(xu, 0, 256 * sizeof *xu);
        if (u == n / 256 - 1) continue;
        const float A = 0.75f + 0.5f * fabsf(rnd());
        const int rmax = (int)(rnd_u32() % 8u);
        const float first = neg_first ? -A : A;
        const float iscale = -127.0f / first;
        for (int r = 0; r < 8; r++) {
            float *xr = xu + 32 * r;
            const int k = (int)((rnd_u32() + (uint32_t)r) % 8u), how = (int)(rnd_u32() % 4u);
            float a = A * (0.125f * (float)k); /* how 0: the tie */
            if (r == rmax || k == 0) a = r == rmax ? A : how < 2 ? A * 0.01f : 0.0f;
            else if (how == 1) a = nextafterf(a, 1.0f);
            else if (how == 2) a = A * (0.125f * (float)k - 0.01f);
            if (a == 0.0f) continue;
            int t = 1;
            for (int j = 1; j < IG_Q8K_T; j++) t += a > A * (0.125f * (float)j);
            const float s = fabsf(iscale * ig_q8k_mul[t]);
            for (int j = 0; j < 32; j++) {
                const int lim = (int)(a * s) - 1, q = lim > 0 ? (int)(rnd_u32() % (uint32_t)lim) : 0;
                float v = ((float)q + 0.5f) / s;
                const int steps = (int)(rnd_u32() % 7u) - 3;
                for (int m = 0; m < abs(steps); m++) v = nextafterf(v, steps < 0 ? 0.0f : 1.0f);
                if (!(v < a)) v = 0.5f * a;
                xr[j] = rnd_u32() & 1u ? -v : v;
            }
            if (r != rmax) xr[rnd_u32() % 32u] = rnd_u32() & 1u ? -a : a;
        }
        /* A twice in the run of max, the first with the chosen sign */
        const int p = 32 * rmax + (int)(rnd_u32() % 16u);
        xu[p] = first;
        xu[p + 16] = -first;
    }
}

/* A Q4_K matrix of n_in + n_in / 32 rows whose products read the int8
 * copy of x one value at a time, with a single rounding: row e < n_in
 * has the weight 1 at element e (d = 1, scale 1, every other scale and
 * minimum 0), so its product is (d t) q of element e; row n_in + r has
 * minimum 1 on run r and no weights: minus the sum of the run's two half
 * sums. */
static uint8_t *x8_probe_weight(int n_in) {
    const int nb = n_in / 256, rows = n_in + n_in / 32;
    ig_block_q4_K *w = calloc((size_t)rows * (size_t)nb, sizeof *w);
    if (!w) return NULL;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) w[(size_t)r * nb + b].d = w[(size_t)r * nb + b].dmin = 0x3C00; /* 1.0 */
    for (int r = 0; r < rows; r++) {
        const int e = r < n_in ? r : 32 * (r - n_in), j = (e % 256) / 32;
        ig_block_q4_K *b = &w[(size_t)r * nb + e / 256];
        /* sub-block j's 6-bit scale (r < n_in) or minimum: ig_q4_K_scale_min's packing */
        if (j < 4) b->scales[r < n_in ? j : j + 4] = 1;
        else b->scales[j + 4] = r < n_in ? 0x01 : 0x10;
        if (r < n_in) b->qs[32 * (j / 2) + e % 32] = (uint8_t)(j % 2 ? 0x10 : 0x01);
    }
    return (uint8_t *)w;
}

/* The int8 copy of x that quant_x8.comp makes for K-quant weights holds
 * the bytes and scales of ig_quantize_row_q8_K, bit for bit: through the
 * products of x8_probe_weight, for one token and for three, with subgroup
 * shuffles where the device has them and through shared memory. */
static void x8_q8k_case(ig_vk_device *d, const char *what) {
    enum { N = 768, ROWS = N + N / 32, T = 3 };
    uint8_t *wq = x8_probe_weight(N);
    float *x = malloc(sizeof(float) * T * N), *y = malloc(sizeof(float) * T * ROWS);
    ig_block_q8_K *q = malloc(sizeof *q * T * (N / 256));
    ig_vk_buffer *wb = NULL, *xb = NULL, *yb = NULL;
    ig_vk_step *s = NULL;
    ig_vk_graph *g = NULL;
    bool ok = wq && x && y && q;
    ok = ok && ig_vk_weight_create(d, IG_TYPE_Q4_K, N, ROWS, &wb) == IG_OK &&
         ig_vk_buffer_write(wb, 0, wq, (size_t)ROWS * (N / 256) * sizeof(ig_block_q4_K)) == IG_OK;
    ok = ok && ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, sizeof(float) * T * N, &xb) == IG_OK &&
         ig_vk_buffer_create(d, IG_VK_MEM_READBACK, sizeof(float) * T * ROWS, &yb) == IG_OK;
    ok = ok && ig_vk_step_create(d, T, &s) == IG_OK && ig_vk_graph_begin(d, s, T, &g) == IG_OK;
    if (ok) {
        ig_vk_graph_set_matmul_path(g, IG_VK_MATMUL_INT8);
        ok = ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, wb, (ig_vk_view){xb, 0, 0}, (ig_vk_view){yb, 0, 0}) == IG_OK &&
             ig_vk_graph_end(g) == IG_OK;
    }
    CHECK(ok);
    int seen[IG_Q8K_T + 1] = {0};
    for (int round = 0; ok && round < 2; round++) {
        const int n = round == 0 ? T : 1;
        for (int t = 0; t < n; t++) {
            x8_probe_row(x + (size_t)t * N, N, (t + round) % 2 == 1);
            ig_quantize_row_q8_K(x + (size_t)t * N, q + (size_t)t * (N / 256), N);
        }
        step_simple(s, n, 1, 0, NULL);
        REQUIRE_OK(ig_vk_buffer_write(xb, 0, x, sizeof(float) * (size_t)n * N));
        REQUIRE_OK(ig_vk_graph_run(g));
        REQUIRE_OK(ig_vk_buffer_read(yb, 0, y, sizeof(float) * (size_t)n * ROWS));
        int bad = 0;
        for (int t = 0; t < n; t++) {
            const float *yt = y + (size_t)t * ROWS;
            for (int e = 0; e < N; e++) {
                const ig_block_q8_K *b = &q[(size_t)t * (N / 256) + e / 256];
                const int r = (e % 256) / 32;
                const float dt = b->d * (float)b->t[r], want = dt * (float)b->qs[e % 256];
                if (e % 32 == 0) {
                    seen[b->t[r]] += b->d != 0.0f;
                    const float hs = -(b->d * (float)b->bsums[2 * r] + b->d * (float)b->bsums[2 * r + 1]);
                    if (yt[N + e / 32] != hs && bad++ < 4)
                        ig_test_fail_at(__FILE__, __LINE__, "%s: token %d run %d: half sums %.9g, want %.9g", what,
                                        t, e / 32, yt[N + e / 32], hs);
                }
                if (yt[e] != want && bad++ < 4)
                    ig_test_fail_at(__FILE__, __LINE__, "%s: token %d element %d: %.9g, want %.9g (d t %.9g, q %d)",
                                    what, t, e, yt[e], want, dt, b->qs[e % 256]);
            }
        }
        CHECK_EQ_INT(bad, 0);
    }
    for (int t = 1; ok && t <= IG_Q8K_T; t++) CHECK(seen[t] > 0); /* every multiplier was taken */
    ig_vk_graph_free(g);
    ig_vk_step_free(s);
    ig_vk_buffer_free(wb);
    ig_vk_buffer_free(xb);
    ig_vk_buffer_free(yb);
    free(wq);
    free(x);
    free(y);
    free(q);
}

IG_TEST(vulkan_x8_q8k_bytes) {
    ig_vk_device *d = device();
    if (!d) return;
    if (!ig_vk_device_int8(d)) {
        ig_test_skip("no int8 mat-vec on this device");
        return;
    }
    x8_q8k_case(d, "default");
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = ig_vk_device_get_info(d)->index;
    p.tuning = "x8_shuffle=0";
    ig_vk_device *ds;
    REQUIRE_OK(ig_vk_device_create(&p, &ds));
    x8_q8k_case(ds, "x8_shuffle=0");
    ig_vk_device_free(ds);
}

/* ---- ops the engine's graphs do not use ------------------------------------------ */

/* dst = a + b over rows with padding (left untouched). */
IG_TEST(vulkan_add) {
    ig_vk_device *d = device();
    if (!d) return;
    const int T = 17, width = 1000, st = 1003;
    const size_t n = (size_t)st * T;
    float *a = malloc(n * 4), *b = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
    REQUIRE(a && b && want && got);
    fill(a, n, 6.0f);
    fill(b, n, 2.0f);
    memcpy(want, a, n * 4);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < width; i++) want[(size_t)t * st + i] = a[(size_t)t * st + i] + b[(size_t)t * st + i];
    ig_vk_step *s;
    REQUIRE_OK(ig_vk_step_create(d, T, &s));
    REQUIRE_OK(ig_vk_step_set(s, T, NULL, NULL, NULL, 0, NULL));
    ig_vk_buffer *ba = upload(d, a, n * 4), *bb = upload(d, b, n * 4), *by = upload(d, a, n * 4);
    REQUIRE(ba && bb && by);
    ig_vk_graph *g;
    REQUIRE_OK(ig_vk_graph_begin(d, s, T, &g));
    REQUIRE_OK(ig_vk_op_add(g, IG_VK_ROWS_TOKENS, (ig_vk_view){ba, 0, (uint32_t)st}, (ig_vk_view){bb, 0, (uint32_t)st},
                            (ig_vk_view){by, 0, (uint32_t)st}, width));
    REQUIRE_OK(ig_vk_graph_end(g));
    REQUIRE_OK(ig_vk_graph_run(g));
    REQUIRE_OK(ig_vk_buffer_read(by, 0, got, n * 4));
    CHECK_REL(got, want, n, 1e-6, "add tokens %d", T);
    ig_vk_graph_free(g);
    ig_vk_buffer_free(ba);
    ig_vk_buffer_free(bb);
    ig_vk_buffer_free(by);
    ig_vk_step_free(s);
    free(a);
    free(b);
    free(want);
    free(got);
}

/* The head rows only: min(n_out, the head cap); the rest untouched. */
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

IG_TEST(vulkan_device) { ig_test_skip("built without the Vulkan backend"); }

#endif
