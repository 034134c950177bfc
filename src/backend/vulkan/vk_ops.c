/* The ops: argument checks, byte ranges for barrier tracking, push
 * constants and grids. Shaders are in shaders/; every dispatch covers
 * max_tokens rows of the graph and the shaders skip rows beyond the step's
 * actual count. */
#include "backend/vulkan/vk_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MATVEC_MAX_COLS 8
#define MATVEC_ROWS 2 /* NROWS in matvec.comp */
#define MATMUL_TILE 64
#define ELT_WG 256
#define X8_WG 64 /* quant_x8.comp: units of 256 are 64 invocations */

static ig_status bad(ig_vk_graph *g, const char *fmt, const char *what) {
    return ig_vk_graph_set_error(g, ig_fail(IG_ERR_INVALID_ARG, fmt, what));
}

static const char *type_suffix(ig_dtype t) {
    switch (t) {
    case IG_TYPE_F32: return "f32";
    case IG_TYPE_F16: return "f16";
    case IG_TYPE_BF16: return "bf16";
    case IG_TYPE_Q8_0: return "q8_0";
    case IG_TYPE_Q4_0: return "q4_0";
    case IG_TYPE_Q5_0: return "q5_0";
    case IG_TYPE_Q4_K: return "q4_k";
    case IG_TYPE_Q5_K: return "q5_k";
    case IG_TYPE_Q6_K: return "q6_k";
    case IG_TYPE_Q5_1: return NULL; /* no shader: refused when uploaded (vk_memory.c) */
    }
    return NULL;
}

/* Checks that a view of rows x width elements of esize bytes (rows stride
 * apart) lies inside one binding; fills the access and the element offset. */
static ig_status view_bind(ig_vk_graph *g, const char *what, const ig_vk_buffer *buf, uint64_t offset,
                           uint64_t stride, uint64_t rows, uint64_t width, uint32_t esize, bool write,
                           ig_vk_bind *bind, uint32_t *elem_off) {
    if (!buf) return bad(g, "vulkan: %s: no buffer", what);
    if (buf->n_parts != 1) return bad(g, "vulkan: %s: a split weight cannot be used as a view", what);
    if (offset % esize) return bad(g, "vulkan: %s: offset not aligned to the element size", what);
    if (rows > 1 && stride < width) return bad(g, "vulkan: %s: row stride smaller than the row", what);
    const ig_vk_part *p = &buf->parts[0];
    uint64_t extent = rows ? ((rows - 1) * stride + width) * esize : 0;
    if (offset > p->size || extent > p->size - offset)
        return ig_vk_graph_set_error(
            g, ig_fail(IG_ERR_INVALID_ARG, "vulkan: %s: %llu rows of %llu elements at offset %llu exceed the buffer (%llu bytes)",
                       what, (unsigned long long)rows, (unsigned long long)width, (unsigned long long)offset,
                       (unsigned long long)p->size));
    if (offset / esize > UINT32_MAX || stride > UINT32_MAX)
        return bad(g, "vulkan: %s: offset or stride too large", what);
    *bind = (ig_vk_bind){p, offset, offset + (extent ? extent : 1), write};
    *elem_off = (uint32_t)(offset / esize);
    return IG_OK;
}

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* Items of a weight row in mv.comp (MV_ITEMS in mvq.glsl). */
static uint64_t mv_items(ig_dtype t, int64_t n_in) {
    switch (t) {
    case IG_TYPE_Q6_K: return (uint64_t)n_in / 64;
    case IG_TYPE_F32:
    case IG_TYPE_F16:
    case IG_TYPE_BF16: return (uint64_t)n_in / 8;
    default: return (uint64_t)n_in / 32;
    }
}

/* mv.comp's items per lane per pass: as few passes as max_unroll allows,
 * then as few items per pass as those passes need (the last pass is
 * predicated, so a slot past the row's end costs issue slots, not bytes). */
static uint32_t mv_unroll(uint64_t items, uint32_t tpr, uint32_t max_unroll) {
    uint64_t passes = (items + (uint64_t)tpr * max_unroll - 1) / ((uint64_t)tpr * max_unroll);
    if (passes == 0) passes = 1;
    const uint32_t u = ceil_div(items, (uint64_t)tpr * passes);
    return u ? u : 1;
}

/* A 1-D count of workgroups folded into x (<= 65535) and z. */
static void fold(uint32_t n, uint32_t *x, uint32_t *z) {
    if (n <= 65535) {
        *x = n;
        *z = 1;
    } else {
        *z = (n + 65534) / 65535;
        *x = (n + *z - 1) / *z;
    }
}

static uint32_t stride_or(uint32_t stride, uint64_t width) { return stride ? stride : (uint32_t)width; }

/* ---- embed ---- */

ig_status ig_vk_op_embed(ig_vk_graph *g, const ig_vk_buffer *w, float scale, ig_vk_view dst) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (!w || !w->is_weight) return bad(g, "vulkan: %s: not a weight", "embed");
    const uint64_t T = (uint64_t)ig_vk_graph_max_tokens(g), ne0 = (uint64_t)w->ne0;
    uint32_t ys = stride_or(dst.stride, ne0), yoff;
    ig_vk_bind bind; /* weights are read-only: never a hazard */
    IG_TRY(view_bind(g, "embed dst", dst.buf, dst.offset, ys, T, ne0, 4, true, &bind, &yoff));
    IG_TRY(ig_vk_rec_hazards(g, &bind, 1));
    char name[32];
    snprintf(name, sizeof name, "embed_%s", type_suffix(w->type));
    VkPipeline pipe;
    ig_vk_device *d = ig_vk_graph_device(g);
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, name, d->wg_size, 0, &pipe)));
    for (int i = 0; i < w->n_parts; i++) {
        const ig_vk_part *p = &w->parts[i];
        struct {
            uint32_t n_in, row_u16, row0, n_rows, y_off, y_stride;
            float scale;
        } pc = {(uint32_t)ne0, (uint32_t)(w->row_stride / 2), (uint32_t)p->row0, (uint32_t)p->n_rows, yoff, ys, scale};
        const ig_vk_part *parts[4] = {p, NULL, NULL, dst.buf->parts};
        IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, 4, &pc, sizeof pc, ceil_div(ceil_div(ne0, 8), d->wg_size),
                                  (uint32_t)T, 1));
    }
    return IG_OK;
}

/* ---- int8 copies of activations (the int8 mat-vec's input) ---- */

static bool int8_type(ig_dtype t) {
    return t == IG_TYPE_Q4_0 || t == IG_TYPE_Q5_0 || t == IG_TYPE_Q8_0 || t == IG_TYPE_Q4_K || t == IG_TYPE_Q5_K ||
           t == IG_TYPE_Q6_K;
}

/* The activation blocks of the CPU backend for these weights (x8.glsl):
 * 0 = Q8_0 (32), 1 = Q8_K (256, the K-quants). */
static uint32_t x8_kind(ig_dtype t) { return t == IG_TYPE_Q4_K || t == IG_TYPE_Q5_K || t == IG_TYPE_Q6_K; }
static uint32_t x8_unit(uint32_t kind) { return kind ? 256 : 32; }

/* Whether an op producing an f32 view of n_in columns should also write its
 * int8 copy (the graph's batches go to the int8 mat-vec or the int8 tensor
 * cores, and one of them took rows of that length before: none on float
 * models), and of which kind: the one it asked for. */
static bool x8_wanted(ig_vk_graph *g, uint64_t n_in, uint32_t off, uint32_t stride, uint32_t *kind) {
    const ig_vk_device *d = ig_vk_graph_device(g);
    const ig_vk_x8_cache *c = ig_vk_graph_x8(g);
    const uint32_t T = (uint32_t)ig_vk_graph_max_tokens(g);
    bool seen = false;
    for (int i = 0; i < 4; i++)
        if (c->seen_n_in[i] == n_in) *kind = c->seen_kind[i], seen = true;
    return seen && d->int8_mv && d->tune.x8_producers && ig_vk_graph_matmul_path(g) == IG_VK_MATMUL_AUTO &&
           (d->tune.invariant ||
            (T <= d->tune.mv_max_tokens && (T < d->cm_min_tokens || !d->cm.f16 || d->cm.i8))) &&
           n_in % x8_unit(*kind) == 0 &&
           off % 4 == 0 && stride % 4 == 0;
}

static void x8_seen(ig_vk_graph *g, uint64_t n_in, uint32_t kind) {
    ig_vk_x8_cache *c = ig_vk_graph_x8(g);
    int i = 0;
    while (i < 3 && c->seen_n_in[i] != n_in && c->seen_n_in[i] != 0) i++;
    c->seen_n_in[i] = (uint32_t)n_in;
    c->seen_kind[i] = kind;
}

/* The graph's int8 scratch, large enough for T rows of n_in columns (a new
 * one when it is not: the old one stays with the graph, still bound by the
 * dispatches recorded with it); *q_stride: uvec4 per row. */
static ig_status x8_scratch(ig_vk_graph *g, uint64_t n_in, uint64_t T, uint32_t *q_stride) {
    ig_vk_device *d = ig_vk_graph_device(g);
    ig_vk_x8_cache *c = ig_vk_graph_x8(g);
    const uint64_t qs = n_in / 32 * 3, need = T * qs * 16;
    if (n_in % 32 || qs > UINT32_MAX || need > d->max_binding)
        return bad(g, "vulkan: %s: activations too large for the int8 copy", "matmul");
    *q_stride = (uint32_t)qs;
    if (!c->buf || ig_vk_buffer_size(c->buf) < need) {
        c->valid = false;
        IG_TRY(ig_vk_graph_scratch(g, need, &c->buf));
    }
    return IG_OK;
}

/* Records that the scratch now holds the int8 copy of the view read
 * through src (call after the op's hazards: its write of src clears it). */
static void x8_holds(ig_vk_graph *g, const ig_vk_bind *src, uint32_t xoff, uint32_t xs, uint64_t n_in,
                     ig_vk_rows rows, uint32_t kind) {
    ig_vk_x8_cache *c = ig_vk_graph_x8(g);
    c->valid = true;
    c->src = src->part;
    c->lo = src->lo;
    c->hi = src->hi;
    c->x_off = xoff;
    c->x_stride = xs;
    c->n_in = (uint32_t)n_in;
    c->rows = rows;
    c->kind = kind;
}

/* The int8 copy of the f32 view read through src (T rows of n_in elements at
 * element offset xoff, stride xs): quant_x8.comp into the scratch, unless
 * the scratch holds this view already. Returns the scratch part and its row
 * stride in uvec4. */
static ig_status quant_x8(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_bind *src, uint32_t xoff, uint32_t xs,
                          uint64_t n_in, uint64_t T, uint32_t kind, const ig_vk_part **out, uint32_t *q_stride) {
    ig_vk_device *d = ig_vk_graph_device(g);
    ig_vk_x8_cache *c = ig_vk_graph_x8(g);
    IG_TRY(x8_scratch(g, n_in, T, q_stride));
    *out = c->buf->parts;
    x8_seen(g, n_in, kind);
    if (c->valid && c->src == src->part && c->lo == src->lo && c->hi == src->hi && c->x_off == xoff &&
        c->x_stride == xs && c->n_in == n_in && c->rows == rows && c->kind == kind)
        return IG_OK;
    ig_vk_bind b[2] = {*src, {c->buf->parts, 0, T * *q_stride * 16, true}};
    IG_TRY(ig_vk_rec_hazards(g, b, 2));
    VkPipeline pipe;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, d->x8_shuffle ? "quant_x8s" : "quant_x8", X8_WG, 0, &pipe)));
    struct {
        uint32_t rows_sel, n_in, x_off, x_stride, q_stride, kind;
    } pc = {(uint32_t)rows, (uint32_t)n_in, xoff, xs, *q_stride, kind};
    const ig_vk_part *parts[2] = {src->part, c->buf->parts};
    /* an invocation per vec4 */
    IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, 2, &pc, sizeof pc, ceil_div(n_in / 4, X8_WG), (uint32_t)T, 1));
    x8_holds(g, src, xoff, xs, n_in, rows, kind);
    return IG_OK;
}

/* ---- norms ---- */

static ig_status norm_common(ig_vk_graph *g, const char *shader, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst,
                             const ig_vk_buffer *norm, int width, int n_heads, float eps) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (width <= 0 || n_heads <= 0 || width % n_heads || n_heads > 65535)
        return bad(g, "vulkan: %s: bad width / heads", shader);
    if (!(eps >= 0.0f)) return bad(g, "vulkan: %s: bad eps", shader);
    const uint64_t T = (uint64_t)ig_vk_graph_max_rows(g, rows), d = (uint64_t)(width / n_heads);
    uint32_t xs = stride_or(src.stride, (uint64_t)width), ys = stride_or(dst.stride, (uint64_t)width);
    uint32_t xoff, yoff, woff;
    ig_vk_bind b[3];
    IG_TRY(view_bind(g, "norm src", src.buf, src.offset, xs, T, (uint64_t)width, 4, false, &b[0], &xoff));
    IG_TRY(view_bind(g, "norm weight", norm, 0, d, 1, d, 4, false, &b[1], &woff));
    IG_TRY(view_bind(g, "norm dst", dst.buf, dst.offset, ys, T, (uint64_t)width, 4, true, &b[2], &yoff));
    IG_TRY(ig_vk_rec_hazards(g, b, 3));
    VkPipeline pipe;
    ig_vk_device *dv = ig_vk_graph_device(g);
    const uint32_t wg = d >= 1024 ? dv->tune.norm_wg : (dv->tune.norm_wg < 256 ? dv->tune.norm_wg : 256);
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(dv, shader, wg, 0, &pipe)));
    struct {
        uint32_t rows_sel, d, x_off, x_stride, y_off, y_stride, w_off;
        float eps;
    } pc = {(uint32_t)rows, (uint32_t)d, xoff, xs, yoff, ys, woff, eps};
    const ig_vk_part *parts[3] = {src.buf->parts, norm->parts, dst.buf->parts};
    return ig_vk_rec_dispatch(g, pipe, parts, 3, &pc, sizeof pc, (uint32_t)n_heads, (uint32_t)T, 1);
}

ig_status ig_vk_op_rmsnorm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst,
                           const ig_vk_buffer *norm, int width, int n_heads, float eps) {
    return norm_common(g, "rmsnorm", rows, src, dst, norm, width, n_heads, eps);
}

ig_status ig_vk_op_add_rmsnorm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst,
                               const ig_vk_buffer *norm, int width, float eps) {
    return norm_common(g, "add_rmsnorm", rows, src, dst, norm, width, 1, eps);
}

ig_status ig_vk_op_add_rmsnorm_norm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view x,
                                    const ig_vk_buffer *norm, ig_vk_view xn, const ig_vk_buffer *norm2,
                                    int width, float eps) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (width <= 0) return bad(g, "vulkan: %s: bad width", "add_rmsnorm_norm");
    if (!(eps >= 0.0f)) return bad(g, "vulkan: %s: bad eps", "add_rmsnorm_norm");
    const uint64_t T = (uint64_t)ig_vk_graph_max_rows(g, rows), w = (uint64_t)width;
    uint32_t ss = stride_or(src.stride, w), xs = stride_or(x.stride, w), zs = stride_or(xn.stride, w);
    uint32_t soff, xoff, zoff, woff, w2off;
    ig_vk_bind b[6];
    IG_TRY(view_bind(g, "norm src", src.buf, src.offset, ss, T, w, 4, false, &b[0], &soff));
    IG_TRY(view_bind(g, "norm weight", norm, 0, w, 1, w, 4, false, &b[1], &woff));
    IG_TRY(view_bind(g, "norm residual", x.buf, x.offset, xs, T, w, 4, true, &b[2], &xoff));
    IG_TRY(view_bind(g, "norm weight 2", norm2, 0, w, 1, w, 4, false, &b[3], &w2off));
    IG_TRY(view_bind(g, "norm dst", xn.buf, xn.offset, zs, T, w, 4, true, &b[4], &zoff));
    ig_vk_device *d = ig_vk_graph_device(g);
    /* add_norm2.comp holds a row in registers: whole vec4s, at most 16 per
       invocation; else rmsnorm.comp */
    const uint32_t rv = ceil_div(w / 4, d->tune.norm_wg);
    const bool regs = w % 4 == 0 && soff % 4 == 0 && ss % 4 == 0 && xoff % 4 == 0 && xs % 4 == 0 && woff % 4 == 0 &&
                      w2off % 4 == 0 && zoff % 4 == 0 && zs % 4 == 0 && rv <= 16;
    /* the next matmuls' int8 input, written here rather than by quant_x8 */
    uint32_t qs = 0, kind = 0;
    const bool x8 = regs && x8_wanted(g, w, zoff, zs, &kind);
    if (x8) {
        IG_TRY(x8_scratch(g, w, T, &qs));
        b[5] = (ig_vk_bind){ig_vk_graph_x8(g)->buf->parts, 0, T * qs * 16, true};
    }
    IG_TRY(ig_vk_rec_hazards(g, b, x8 ? 6 : 5));
    VkPipeline pipe;
    /* in registers: the fewest invocations (a multiple of 64) that hold the
       row in rv vec4s each; idle ones would still run every barrier and
       quantization step (measured: docs/benchmarks/2026-11-27-h100-vulkan.md) */
    const uint32_t nt = regs ? (uint32_t)ceil_div(ceil_div(w / 4, rv), 64) * 64 : d->tune.norm_wg;
    IG_TRY(ig_vk_graph_set_error(
        g, ig_vk_pipeline(d, x8 ? (d->x8_shuffle ? "add_norm2_x8s" : "add_norm2_x8") : regs ? "add_norm2" : "add_rmsnorm_norm",
                          nt, regs ? rv : 0,
                          &pipe)));
    struct {
        uint32_t rows_sel, d, x_off, x_stride, y_off, y_stride, w_off;
        float eps;
        uint32_t w2_off, z_off, z_stride, q_stride, kind;
    } pc = {(uint32_t)rows, (uint32_t)w, soff, ss, xoff, xs, woff, eps, w2off, zoff, zs, qs, kind};
    const ig_vk_part *parts[6] = {src.buf->parts, norm->parts, x.buf->parts, norm2->parts, xn.buf->parts,
                                  x8 ? b[5].part : NULL};
    IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, x8 ? 6 : 5, &pc, sizeof pc, 1, (uint32_t)T, 1));
    if (x8) x8_holds(g, &b[4], zoff, zs, w, rows, kind);
    return IG_OK;
}

/* ---- matmul ---- */

#define CM_MIN_WEIGHTS (4u << 20)
#define CM_MAX_SPLIT 16

/* The shape of a tensor-core matmul (mmcm.comp): 8192 weights per step (4096
 * per matrix for GEGLU), in steps of 128 row elements for Q6_K and 64 for
 * the others; tiles of 64 tokens, 128 (WIDE) for large batches, 32 (NARROW)
 * for batches of up to 32; K split into n_split ranges (their sums added by
 * cm_reduce.comp) when rows x tokens alone give too few workgroups. */
typedef struct cm_plan {
    uint32_t rows_per_group, gy;
    bool wide, narrow; /* tiles of 128 or 32 tokens, else 64 */
    uint32_t n_split, split_steps;                    /* n_split 1: no split */
    uint32_t p_stride, split_stride, geglu_off;       /* the partial sums, in floats */
    uint64_t bytes;
} cm_plan;

static ig_status cm_prepare(ig_vk_graph *g, const ig_vk_buffer *wa, bool geglu, bool int8, uint64_t T,
                            uint64_t n_out, cm_plan *p) {
    ig_vk_device *d = ig_vk_graph_device(g);
    /* int8 (mmq.comp): a super-block per step, 128 rows (64 per matrix for
       GEGLU) x 64 tokens, 32 (NARROW) or 128 (WIDE, 512 invocations) */
    const uint32_t kspan = int8 ? 256u : wa->type == IG_TYPE_Q6_K ? 128u : 64u;
    *p = (cm_plan){0};
    p->rows_per_group = int8 ? (geglu ? 64u : 128u) : (geglu ? 4096u : 8192u) / kspan;
    /* wide tiles only while they still give every compute unit of a large
       GPU several workgroups: small matrices (270M's) are short of
       workgroups, not of tensor-core work */
    p->wide = wa->type != IG_TYPE_Q6_K && T >= 128 &&
              (uint64_t)ceil_div(n_out, p->rows_per_group) * ceil_div(T, 128) >= d->tune.cm_wide_groups;
    p->narrow = !p->wide && T <= 32 && !(geglu && wa->type == IG_TYPE_Q6_K && !int8);
    p->gy = ceil_div(T, p->wide ? 128 : p->narrow ? 32 : 64);
    const uint32_t n_steps = ceil_div((uint64_t)wa->ne0, kspan);
    p->n_split = 1;
    p->split_steps = n_steps;
    uint64_t groups = 0;
    for (int i = 0; i < wa->n_parts; i++) groups += ceil_div((uint64_t)wa->parts[i].n_rows, p->rows_per_group);
    groups *= p->gy;
    /* the target counts workgroups of 64-token work: a 32-token tile does
       half, so it gets twice as many */
    const uint64_t target = p->narrow && d->tune.cm_split_groups > 1 ? 2 * (uint64_t)d->tune.cm_split_groups
                                                                : d->tune.cm_split_groups;
    uint64_t want = groups < target ? ceil_div(target, groups) : 1;
    /* each split keeps at least 4 steps: its loads and stores stay small
       against its products */
    if (want > n_steps / 4) want = n_steps / 4;
    if (want > CM_MAX_SPLIT) want = CM_MAX_SPLIT;
    if (want < 2) return IG_OK;
    const uint32_t split_steps = ceil_div(n_steps, want), n_split = ceil_div(n_steps, split_steps);
    const uint64_t ps = (n_out + 3) & ~(uint64_t)3, stride = T * ps, total = stride * n_split * (geglu ? 2 : 1);
    if (n_split < 2 || total > UINT32_MAX || total * 4 > d->max_binding) return IG_OK; /* one pass */
    p->n_split = n_split;
    p->split_steps = split_steps;
    p->p_stride = (uint32_t)ps;
    p->split_stride = (uint32_t)stride;
    p->geglu_off = geglu ? (uint32_t)(stride * p->n_split) : 0;
    p->bytes = total * 4;
    const ig_vk_buffer **sums = ig_vk_graph_split_sums(g);
    if (!*sums || ig_vk_buffer_size(*sums) < p->bytes) IG_TRY(ig_vk_graph_scratch(g, p->bytes, sums));
    return IG_OK;
}

static ig_status rope_table(ig_vk_graph *g, int hd, float base, float factor, const ig_vk_buffer **out);
static ig_status kv_check(ig_vk_graph *g, const ig_vk_kv *kv, bool write, ig_vk_bind *bk, ig_vk_bind *bv,
                          uint32_t *koff, uint32_t *voff);

/* Which matmul paths weight w can take on device d (fast_ok: the x view
 * allows the fast mat-vec and the tensor cores). */
typedef struct matmul_caps {
    bool fast, int8, cm, cmq; /* the fast and int8 mat-vecs, f16 and int8 tensor cores */
} matmul_caps;

static matmul_caps matmul_caps_of(const ig_vk_device *d, const ig_vk_buffer *w, bool fast_ok) {
    return (matmul_caps){
        .fast = fast_ok,
        .int8 = d->int8_mv && fast_ok && int8_type(w->type),
        .cm = d->cm.f16 && fast_ok && w->type != IG_TYPE_F32 && w->type != IG_TYPE_BF16,
        .cmq = d->cm.i8 && fast_ok && (w->type == IG_TYPE_Q4_K || w->type == IG_TYPE_Q6_K) && w->ne0 % 256 == 0,
    };
}

/* The path AUTO takes for T tokens through weight w. */
static ig_vk_matmul_path auto_path(const ig_vk_device *d, const ig_vk_buffer *w, uint64_t T, matmul_caps c) {
    const uint64_t n_in = (uint64_t)w->ne0, n_out = (uint64_t)w->ne1;
    /* AUTO takes the tensor cores for quantized matrices of at least
       CM_MIN_WEIGHTS (f16 rounding of x only where weights are coarser); on
       smaller ones (270M's 640-wide rows) the f32 tiled kernel is faster:
       their tiles are too few to fill the tensor cores */
    const bool cm_auto = c.cm && w->type != IG_TYPE_F16 && n_in * n_out >= CM_MIN_WEIGHTS;
    /* the int8 mat-vec also takes larger batches (in workgroups of 8
       columns): of matrices too small for the tensor cores up to
       mv_max_tokens, of larger ones below cm_min_tokens */
    const uint64_t mv_cols = c.int8 ? d->tune.mv_max_tokens : MATVEC_MAX_COLS;
    const uint32_t cm_from = c.cmq ? d->cm_min_tokens : d->cm_min_tokens_f16;
    /* batch invariance: the mat-vec for every batch, whose sums are the
       same whatever the token count (mv.comp) */
    if (d->tune.invariant || (T <= mv_cols && !(cm_auto && T >= cm_from)))
        return !c.fast ? IG_VK_MATMUL_VEC : c.int8 ? IG_VK_MATMUL_INT8 : IG_VK_MATMUL_FAST;
    if (!cm_auto) return IG_VK_MATMUL_TILED;
    /* int8 tensor cores for Q4_K and Q6_K (rows of whole super-blocks)
       wherever AUTO takes the tensor cores: faster than the f16 ones at
       every batch size measured (docs/benchmarks/2026-11-25-h100-vulkan.md) */
    return c.cmq ? IG_VK_MATMUL_COOPMAT_INT8 : IG_VK_MATMUL_COOPMAT;
}

/* Whether an n_out x n_in matrix has long rows for mv.comp: a row per
 * workgroup of mv_long_tpr invocations (12B and 27B's down projection). */
static bool mv_long(const ig_vk_device *d, uint64_t n_in, uint64_t n_out) {
    return d->tune.mv_long_tpr && n_in * 100 >= (uint64_t)d->tune.mv_long_pct * n_out &&
           n_out >= d->tune.mv_long_rows;
}

/* mv.comp's invocations per row group: a property of the matrix, never of
 * the token count, since it is the shape of each output's sum (lane l adds
 * items l, l + TPR, ... in order, then the lanes are added): one token and
 * a batch must round alike (batch invariance). Rows of at most 32 items
 * take groups of 32 where subgroups are no wider (270M's rows of 640 are
 * 20 items, and a group of 64 left 44 lanes idle). */
static uint32_t mv_group_tpr(const ig_vk_device *d, uint64_t n_in, uint64_t n_out, uint64_t items) {
    if (mv_long(d, n_in, n_out)) return d->tune.mv_long_tpr;
    return items <= 32 && d->tune.mv_tpr > 32 && d->info.subgroup_size <= 32 ? 32 : d->tune.mv_tpr;
}
static uint32_t mv_group_unroll(const ig_vk_device *d, uint32_t nc) { return nc == 1 ? d->tune.mv_unroll : d->tune.mv_unrolln; }

/* mv.comp's rows per workgroup for column tiles of nc tokens of an n_out x
 * n_in matrix of rows of that many items, and its row group (spec constant 2). */
static uint32_t mv_rows_per_group(const ig_vk_device *d, uint32_t nc, uint64_t n_in, uint64_t n_out, uint64_t items,
                                  uint32_t *nr) {
    uint32_t n = nc == 1 ? d->tune.mv_nr1 : n_in >= d->tune.mv_nrn_min && n_out >= d->tune.mv_nrn_min ? d->tune.mv_nrn : 1;
    if (d->info.subgroup_size < 32)
        while (n > 1 && n * nc > 32) n--; /* mv.comp's scratch */
    *nr = n;
    return d->tune.mv_wg / mv_group_tpr(d, n_in, n_out, items) * n;
}

/* The rows per workgroup of the q and k mat-vecs with a tail (and their
 * row group) for an n_out x n_in matrix of rows of that many items: fewer
 * workgroups count in per head when it is larger. */
static uint32_t tail_rows_per_group(const ig_vk_device *d, uint64_t n_in, uint64_t n_out, uint64_t items,
                                    uint32_t *nr) {
    *nr = d->tune.head_tail_nr;
    return d->tune.mv_wg / mv_group_tpr(d, n_in, n_out, items) * d->tune.head_tail_nr;
}

/* What follows a one-token q, k or v projection, done by the mat-vec
 * itself (mv.comp -DTAIL, -DV_CACHE). */
typedef enum { TAIL_NONE, TAIL_Q, TAIL_K, TAIL_V } tail_kind;
typedef struct mv_tail {
    tail_kind kind;
    const ig_vk_buffer *norm; /* TAIL_Q, TAIL_K: head_dim floats */
    const ig_vk_kv *kv;       /* TAIL_K, TAIL_V */
    uint32_t head_dim, cnt_off; /* cnt_off: the op's first counter */
    float eps, base, factor;
} mv_tail;

/* The tail's accesses (counters, RoPE table, norm, cache: parts of
 * bindings 2, 5, 6 and 7) and push constants; for TAIL_V the cache takes
 * the place of dst's access in *dst_bind. */
typedef struct tail_plan {
    const ig_vk_part *cnt, *table, *norm, *cache;
    uint32_t hd, freq_off, norm_off, cnt_off;
    float eps;
    uint32_t kv_off, cap, n_seq, kv_dim;
} tail_plan;

static ig_status tail_prepare(ig_vk_graph *g, const mv_tail *t, const ig_vk_buffer *w, uint64_t T,
                              ig_vk_matmul_path path, ig_vk_bind *dst_bind, ig_vk_bind *b, int *nb, tail_plan *tp) {
    ig_vk_device *d = ig_vk_graph_device(g);
    const uint64_t hd = t->head_dim, n_out = (uint64_t)w->ne1;
    uint32_t nr;
    if (path != IG_VK_MATMUL_INT8 || T != 1 || w->n_parts != 1 || hd == 0 || hd % 2 || hd > 1024 ||
        n_out % hd || d->tune.head_tail_nr == 0 || mv_long(d, (uint64_t)w->ne0, n_out) ||
        (t->kind != TAIL_V && hd % tail_rows_per_group(d, (uint64_t)w->ne0, n_out, mv_items(w->type, w->ne0), &nr)))
        return bad(g, "vulkan: %s: needs one token on the int8 mat-vec, one weight part and whole heads per "
                      "workgroup", "matmul tail");
    *tp = (tail_plan){.hd = (uint32_t)hd, .eps = t->eps};
    if (t->kind != TAIL_V) {
        if (!t->norm || !(t->eps >= 0.0f)) return bad(g, "vulkan: %s: no norm or bad eps", "matmul tail");
        const ig_vk_buffer *table, *cnt;
        IG_TRY(rope_table(g, (int)hd, t->base, t->factor, &table));
        IG_TRY(view_bind(g, "rope table", table, 0, 0, 1, hd / 2, 4, false, &b[(*nb)++], &tp->freq_off));
        IG_TRY(view_bind(g, "q/k norm", t->norm, 0, 0, 1, hd, 4, false, &b[(*nb)++], &tp->norm_off));
        const uint64_t n_heads = n_out / hd;
        IG_TRY(ig_vk_graph_counters(g, t->cnt_off + n_heads, &cnt));
        b[(*nb)++] = (ig_vk_bind){cnt->parts, t->cnt_off * 4ull, (t->cnt_off + n_heads) * 4, true};
        tp->cnt = cnt->parts;
        tp->table = table->parts;
        tp->norm = t->norm->parts;
        tp->cnt_off = t->cnt_off;
    }
    if (t->kind != TAIL_Q) {
        const ig_vk_kv *kv = t->kv;
        ig_vk_bind bk, bv;
        uint32_t koff, voff;
        IG_TRY(kv_check(g, kv, true, &bk, &bv, &koff, &voff));
        if ((uint64_t)kv->n_head_kv * (uint64_t)kv->head_dim != n_out || (uint64_t)kv->head_dim != hd)
            return bad(g, "vulkan: %s: the cache's rows differ from the projection's", "matmul tail");
        if (t->kind == TAIL_K) b[(*nb)++] = bk;
        else *dst_bind = bv; /* V goes to the cache, not to dst */
        tp->cache = t->kind == TAIL_K ? kv->k->parts : kv->v->parts;
        tp->kv_off = t->kind == TAIL_K ? koff : voff;
        tp->cap = (uint32_t)kv->cap;
        tp->n_seq = (uint32_t)kv->n_seq;
        tp->kv_dim = (uint32_t)n_out;
    }
    return IG_OK;
}

static ig_status matmul_common(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_buffer *wa, const ig_vk_buffer *wb,
                               ig_vk_view src, ig_vk_view dst, const mv_tail *tail) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (!wa || !wa->is_weight) return bad(g, "vulkan: %s: not a weight", "matmul");
    if (wb && (!wb->is_weight || wb->type != wa->type || wb->ne0 != wa->ne0 || wb->ne1 != wa->ne1 ||
               wb->n_parts != wa->n_parts))
        return bad(g, "vulkan: %s: gate and up differ in type or shape", "matmul");
    if (wa->ne1 > UINT32_MAX / 2) return bad(g, "vulkan: %s: too many rows", "matmul");
    ig_vk_device *d = ig_vk_graph_device(g);
    const uint64_t T = (uint64_t)ig_vk_graph_max_rows(g, rows), n_in = (uint64_t)wa->ne0, n_out = (uint64_t)wa->ne1;
    uint32_t xs = stride_or(src.stride, n_in), ys = stride_or(dst.stride, n_out), xoff, yoff;
    ig_vk_bind b[2 + 2 * IG_VK_N_BINDINGS];
    int nb = 0;
    IG_TRY(view_bind(g, "matmul src", src.buf, src.offset, xs, T, n_in, 4, false, &b[nb++], &xoff));
    IG_TRY(view_bind(g, "matmul dst", dst.buf, dst.offset, ys, T, n_out, 4, true, &b[nb++], &yoff));

    const matmul_caps caps = matmul_caps_of(d, wa, ig_vk_matmul_fast_ok(wa->type, (int64_t)n_in, xoff, xs));
    ig_vk_matmul_path path = ig_vk_graph_matmul_path(g);
    if (path == IG_VK_MATMUL_AUTO) path = auto_path(d, wa, T, caps);
    if (path == IG_VK_MATMUL_COOPMAT_INT8 && !caps.cmq)
        return bad(g, "vulkan: %s: no int8 cooperative-matrix matmul for this device, type or x view", "matmul");
    if (path == IG_VK_MATMUL_FAST && !caps.fast)
        return bad(g, "vulkan: %s: the fast mat-vec does not apply (type, row length or x alignment)", "matmul");
    if (path == IG_VK_MATMUL_INT8 && !caps.int8)
        return bad(g, "vulkan: %s: no int8 mat-vec for this device, type or x view", "matmul");
    const bool has_tail = tail && tail->kind != TAIL_NONE;
    tail_plan tp = {0};
    if (has_tail) {
        if (wb || rows != IG_VK_ROWS_TOKENS) return bad(g, "vulkan: %s: a tail on GEGLU or output rows", "matmul");
        IG_TRY(tail_prepare(g, tail, wa, T, path, &b[1], b, &nb, &tp));
    }
    const ig_vk_part *xpart = src.buf->parts;
    if (path == IG_VK_MATMUL_INT8 || path == IG_VK_MATMUL_COOPMAT_INT8) {
        /* x is read as its int8 copy, from the scratch */
        IG_TRY(quant_x8(g, rows, &b[0], xoff, xs, n_in, T, x8_kind(wa->type), &xpart, &xs));
        xoff = 0;
        b[0] = (ig_vk_bind){xpart, 0, T * xs * 16, false};
    }
    if (path == IG_VK_MATMUL_COOPMAT && !caps.cm)
        return bad(g, "vulkan: %s: no cooperative-matrix matmul for this device or type", "matmul");
    cm_plan cp = {0};
    const ig_vk_bind dst_bind = b[1];
    if (path == IG_VK_MATMUL_COOPMAT || path == IG_VK_MATMUL_COOPMAT_INT8) {
        IG_TRY(cm_prepare(g, wa, wb != NULL, path == IG_VK_MATMUL_COOPMAT_INT8, T, n_out, &cp));
        if (cp.n_split > 1) b[1] = (ig_vk_bind){(*ig_vk_graph_split_sums(g))->parts, 0, cp.bytes, true};
    }
    IG_TRY(ig_vk_rec_hazards(g, b, nb)); /* weights are read-only: never a hazard */
    char name[40];
    uint32_t spec0 = 0, spec1 = 0, spec2 = 0, gy, rows_per_group = MATMUL_TILE;
    const uint64_t items = mv_items(wa->type, n_in); /* of a row, in mv.comp */
    bool long_rows = false; /* mv.comp: a row per workgroup of d->tune.mv_long_tpr */
    if (path == IG_VK_MATMUL_VEC || path == IG_VK_MATMUL_FAST || path == IG_VK_MATMUL_INT8) {
        uint32_t nc = 1;
        while (nc < T && nc < MATVEC_MAX_COLS) nc *= 2;
        long_rows = path != IG_VK_MATMUL_VEC && mv_long(d, n_in, n_out);
        spec1 = nc;
        gy = ceil_div(T, nc);
        if (path == IG_VK_MATMUL_VEC) {
            spec0 = d->wg_size;
            rows_per_group = MATVEC_ROWS;
            snprintf(name, sizeof name, "matvec%s_%s", wb ? "_geglu" : "", type_suffix(wa->type));
        } else {
            spec0 = long_rows ? d->tune.mv_long_tpr : d->tune.mv_wg;
            if (long_rows) spec2 = rows_per_group = 1;
            else
                rows_per_group = has_tail && tail->kind != TAIL_V
                                     ? tail_rows_per_group(d, n_in, n_out, items, &spec2)
                                     : mv_rows_per_group(d, nc, n_in, n_out, items, &spec2);
            if (has_tail) {
                const char *kv = tail->kv && tail->kv->type == IG_KV_F16 ? "f16" : "f32";
                if (tail->kind == TAIL_Q) snprintf(name, sizeof name, "mv8_tail_q_%s", type_suffix(wa->type));
                else
                    snprintf(name, sizeof name, "mv8_%s_%s_%s", tail->kind == TAIL_K ? "tail_k" : "v_cache", kv,
                             type_suffix(wa->type));
            } else {
                snprintf(name, sizeof name, "mv%s%s_%s", path == IG_VK_MATMUL_INT8 ? "8" : "", wb ? "_geglu" : "",
                         type_suffix(wa->type));
            }
        }
    } else if (path == IG_VK_MATMUL_COOPMAT || path == IG_VK_MATMUL_COOPMAT_INT8) {
        const bool f16 = path == IG_VK_MATMUL_COOPMAT; /* mmcm.comp; else mmq.comp */
        spec1 = f16 ? d->tune.cm_pf & 1 : 0;
        spec2 = f16 ? d->tune.cm_pf >> 1 : 0;
        rows_per_group = cp.rows_per_group;
        gy = cp.gy * cp.n_split;
        /* where the device has both: KHR's 16-token fragments for batches
           of up to 32 (narrow tiles), NV's 8-token ones for the rest, each
           where it was the faster (docs/benchmarks/2026-11-27-h100-vulkan.md) */
        const bool khr = f16 ? d->cm.khr && (!d->cm.nv || cp.narrow) : d->cm.i8_khr && (!d->cm.i8_nv || cp.narrow);
        snprintf(name, sizeof name, "%s%s%s%s_%s", f16 ? "mmcm" : "mmq", khr ? "k" : "",
                 cp.wide ? "_wide" : cp.narrow ? "_narrow" : "",
                 wb ? "_geglu" : "", type_suffix(wa->type));
    } else {
        gy = ceil_div(T, MATMUL_TILE);
        snprintf(name, sizeof name, "matmul%s_%s", wb ? "_geglu" : "", type_suffix(wa->type));
    }
    VkPipeline pipe;
    const bool mv = path == IG_VK_MATMUL_FAST || path == IG_VK_MATMUL_INT8;
    /* spec1: the mat-vec's column tile */
    const uint32_t tpr = !mv ? 0 : mv_group_tpr(d, n_in, n_out, items);
    const uint32_t max_unroll = long_rows ? d->tune.mv_long_unroll : mv ? mv_group_unroll(d, spec1) : 0;
    const uint32_t spec[5] = {spec0, spec1, spec2, tpr, mv ? mv_unroll(items, tpr, max_unroll) : 0};
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline_spec(d, name, spec, 5, &pipe)));
    for (int i = 0; i < wa->n_parts; i++) {
        const ig_vk_part *pa = &wa->parts[i], *pb = wb ? &wb->parts[i] : NULL;
        if (pb && (pb->row0 != pa->row0 || pb->n_rows != pa->n_rows))
            return bad(g, "vulkan: %s: gate and up are split differently", "matmul");
        const bool split = cp.n_split > 1; /* partial sums to the scratch */
        struct {
            uint32_t rows_sel, n_in, n_rows, row_u16, x_off, x_stride, y_off, y_stride, y_row0;
            union {
                struct {
                    uint32_t n_split, split_steps, split_stride, geglu_off;
                } cm; /* mmcm.comp, mmq.comp */
                struct {
                    uint32_t hd, freq_off, norm_off, cnt_off;
                    float eps;
                    uint32_t kv_off, cap, n_seq, kv_dim;
                } tail; /* mv.comp -DTAIL, -DV_CACHE */
            } u;
        } pc = {(uint32_t)rows, (uint32_t)n_in, (uint32_t)pa->n_rows, (uint32_t)(wa->row_stride / 2), xoff, xs,
                split ? 0 : yoff, split ? cp.p_stride : ys, (uint32_t)pa->row0, {{0, 0, 0, 0}}};
        if (has_tail) {
            pc.u.tail.hd = tp.hd;
            pc.u.tail.freq_off = tp.freq_off;
            pc.u.tail.norm_off = tp.norm_off;
            pc.u.tail.cnt_off = tp.cnt_off;
            pc.u.tail.eps = tp.eps;
            pc.u.tail.kv_off = tp.kv_off;
            pc.u.tail.cap = tp.cap;
            pc.u.tail.n_seq = tp.n_seq;
            pc.u.tail.kv_dim = tp.kv_dim;
        } else {
            pc.u.cm.n_split = cp.n_split ? cp.n_split : 1;
            pc.u.cm.split_steps = cp.split_steps;
            pc.u.cm.split_stride = cp.split_stride;
            pc.u.cm.geglu_off = cp.geglu_off;
        }
        uint32_t groups = ceil_div((uint64_t)pa->n_rows, rows_per_group);
        uint32_t gx, gz;
        fold(groups, &gx, &gz);
        /* bindings 1 .. 7 */
        const ig_vk_part *parts[7] = {pa,        has_tail ? tp.cnt : pb, xpart, split ? b[1].part : dst.buf->parts,
                                      tp.table,  tp.norm,                tp.cache};
        if (has_tail && tail->kind == TAIL_V) parts[3] = NULL;
        const int np = has_tail ? 7 : 4;
        if (path == IG_VK_MATMUL_COOPMAT_INT8) /* token tiles along x (mmq.comp) */
            IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, np, &pc, sizeof pc, gy, groups, 1));
        else
            IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, np, &pc, sizeof pc, gx, gy, gz));
    }
    if (cp.n_split > 1) {
        /* the splits' sums (and GEGLU) into dst, in split order */
        ig_vk_bind rb[2] = {b[1], dst_bind};
        rb[0].write = false;
        IG_TRY(ig_vk_rec_hazards(g, rb, 2));
        IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, "cm_reduce", 0, 0, &pipe)));
        struct {
            uint32_t rows_sel, n_rows, n_split, split_stride, p_stride, geglu_off, y_off, y_stride;
        } rpc = {(uint32_t)rows, (uint32_t)n_out, cp.n_split, cp.split_stride, cp.p_stride, cp.geglu_off, yoff, ys};
        const ig_vk_part *rparts[4] = {b[1].part, NULL, NULL, dst.buf->parts};
        IG_TRY(ig_vk_rec_dispatch(g, pipe, rparts, 4, &rpc, sizeof rpc, ceil_div(n_out, 256), (uint32_t)T, 1));
    }
    return IG_OK;
}

bool ig_vk_matmul_fast_ok(ig_dtype type, int64_t n_in, uint32_t x_off, uint32_t x_stride) {
    if (x_off % 4 || x_stride % 4) return false;
    switch (type) {
    case IG_TYPE_F32:
    case IG_TYPE_F16:
    case IG_TYPE_BF16: return n_in % 8 == 0;
    case IG_TYPE_Q4_0:
    case IG_TYPE_Q5_0:
    case IG_TYPE_Q8_0:
    case IG_TYPE_Q4_K:
    case IG_TYPE_Q5_K:
    case IG_TYPE_Q6_K: return true; /* whole blocks */
    default: return false;
    }
}

ig_status ig_vk_op_matmul(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_buffer *w, ig_vk_view src, ig_vk_view dst) {
    return matmul_common(g, rows, w, NULL, src, dst, NULL);
}

ig_status ig_vk_op_matmul_geglu(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_buffer *gate, const ig_vk_buffer *up,
                                ig_vk_view src, ig_vk_view dst) {
    if (!up) return g ? bad(g, "vulkan: %s: no up weight", "matmul_geglu") : IG_ERR_INVALID_ARG;
    return matmul_common(g, rows, gate, up, src, dst, NULL);
}

bool ig_vk_qkv_tail_ok(ig_vk_graph *g, const ig_vk_qkv *p, const ig_vk_kv *kv, ig_vk_view src) {
    if (!g || !p || !kv || ig_vk_graph_error(g) != IG_OK) return false;
    const ig_vk_device *d = ig_vk_graph_device(g);
    if (!d->tune.head_tail_nr || ig_vk_graph_matmul_path(g) != IG_VK_MATMUL_AUTO || ig_vk_graph_max_tokens(g) != 1 ||
        !p->qnorm || !p->knorm || (kv->type != IG_KV_F16 && kv->type != IG_KV_F32))
        return false;
    const int64_t hd = kv->head_dim;
    uint32_t nr;
    if (hd <= 0 || hd % 2 || hd > 1024 || p->n_head <= 0) return false;
    const ig_vk_buffer *w[3] = {p->wq, p->wk, p->wv};
    const int64_t rows[3] = {(int64_t)p->n_head * hd, (int64_t)kv->n_head_kv * hd, (int64_t)kv->n_head_kv * hd};
    for (int i = 0; i < 3; i++) {
        if (!w[i] || !w[i]->is_weight || w[i]->n_parts != 1 || w[i]->ne1 != rows[i] || w[i]->ne0 != p->wq->ne0)
            return false;
        if (mv_long(d, (uint64_t)w[i]->ne0, (uint64_t)w[i]->ne1)) return false;
        if (i < 2 && hd % tail_rows_per_group(d, (uint64_t)w[i]->ne0, (uint64_t)w[i]->ne1,
                                              mv_items(w[i]->type, w[i]->ne0), &nr))
            return false; /* q, k */
        const bool fast_ok = src.offset % 16 == 0 &&
                             ig_vk_matmul_fast_ok(w[i]->type, w[i]->ne0, 0, stride_or(src.stride, (uint64_t)w[i]->ne0));
        if (auto_path(d, w[i], 1, matmul_caps_of(d, w[i], fast_ok)) != IG_VK_MATMUL_INT8) return false;
    }
    return true;
}

ig_status ig_vk_op_qkv_tail(ig_vk_graph *g, const ig_vk_qkv *p, const ig_vk_kv *kv, ig_vk_view src, ig_vk_view q,
                            ig_vk_view k, ig_vk_view v) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (!p || !kv) return bad(g, "vulkan: %s: no projections or cache", "qkv_tail");
    if (p->n_head <= 0 || kv->n_head_kv <= 0 || kv->head_dim <= 0)
        return bad(g, "vulkan: %s: bad heads", "qkv_tail");
    /* counters: q's heads first, then k's */
    const uint32_t hd = (uint32_t)kv->head_dim;
    const mv_tail tq = {TAIL_Q, p->qnorm, NULL, hd, 0, p->eps, p->base, p->factor};
    const mv_tail tk = {TAIL_K, p->knorm, kv, hd, (uint32_t)p->n_head, p->eps, p->base, p->factor};
    const mv_tail tv = {TAIL_V, NULL, kv, hd, 0, p->eps, p->base, p->factor};
    IG_TRY(matmul_common(g, IG_VK_ROWS_TOKENS, p->wq, NULL, src, q, &tq));
    IG_TRY(matmul_common(g, IG_VK_ROWS_TOKENS, p->wk, NULL, src, k, &tk));
    return matmul_common(g, IG_VK_ROWS_TOKENS, p->wv, NULL, src, v, &tv);
}

/* ---- RoPE and the KV cache ---- */

void ig_vk_rope_freqs(float base, float factor, int head_dim, float *freq) {
    /* the CPU backend's formula, operation for operation */
    for (int i = 0; i < head_dim / 2; i++) {
        float inv_freq = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
        freq[i] = inv_freq / factor;
    }
}

static ig_status rope_table(ig_vk_graph *g, int hd, float base, float factor, const ig_vk_buffer **out) {
    if (!(base > 0.0f) || !(factor > 0.0f)) return bad(g, "vulkan: %s: bad base or factor", "rope");
    float freq[512];
    ig_vk_rope_freqs(base, factor, hd, freq);
    return ig_vk_graph_const(g, freq, (uint64_t)(hd / 2) * 4, out);
}

typedef struct rope_pc {
    uint32_t n_heads, hd, x_off, x_stride, freq_off, v_off, v_stride, kc_off, vc_off, cap, n_seq, kv_dim;
    uint32_t norm_off;
    float eps;
} rope_pc;

static ig_status rope_common(ig_vk_graph *g, ig_vk_view x, const ig_vk_buffer *norm, int n_heads, int head_dim,
                             float eps, float base, float factor) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (n_heads <= 0 || n_heads > 65535 || head_dim <= 0 || head_dim % 2 || head_dim > 1024)
        return bad(g, "vulkan: %s: bad heads / head_dim", "rope");
    if (norm && !(eps >= 0.0f)) return bad(g, "vulkan: %s: bad eps", "rmsnorm_rope");
    const uint64_t T = (uint64_t)ig_vk_graph_max_tokens(g), width = (uint64_t)n_heads * (uint64_t)head_dim;
    uint32_t xs = stride_or(x.stride, width), xoff, foff, noff = 0;
    const ig_vk_buffer *table;
    IG_TRY(rope_table(g, head_dim, base, factor, &table));
    ig_vk_bind b[3];
    int nb = 0;
    IG_TRY(view_bind(g, "rope x", x.buf, x.offset, xs, T, width, 4, true, &b[nb++], &xoff));
    IG_TRY(view_bind(g, "rope table", table, 0, 0, 1, (uint64_t)head_dim / 2, 4, false, &b[nb++], &foff));
    if (norm)
        IG_TRY(view_bind(g, "rope norm", norm, 0, 0, 1, (uint64_t)head_dim, 4, false, &b[nb++], &noff));
    IG_TRY(ig_vk_rec_hazards(g, b, nb));
    ig_vk_device *d = ig_vk_graph_device(g);
    VkPipeline pipe;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, norm ? "rmsnorm_rope" : "rope", d->wg_size, 0, &pipe)));
    rope_pc pc = {(uint32_t)n_heads, (uint32_t)head_dim, xoff, xs, foff, 0, 0, 0, 0, 1, 1, 0, noff, eps};
    const ig_vk_part *parts[6] = {x.buf->parts, table->parts, NULL, NULL, NULL, norm ? norm->parts : NULL};
    return ig_vk_rec_dispatch(g, pipe, parts, 6, &pc, sizeof pc, (uint32_t)n_heads, (uint32_t)T, 1);
}

ig_status ig_vk_op_rope(ig_vk_graph *g, ig_vk_view x, int n_heads, int head_dim, float base, float factor) {
    return rope_common(g, x, NULL, n_heads, head_dim, 0.0f, base, factor);
}

ig_status ig_vk_op_rmsnorm_rope(ig_vk_graph *g, ig_vk_view x, const ig_vk_buffer *norm, int n_heads,
                                int head_dim, float eps, float base, float factor) {
    if (g && !norm) return bad(g, "vulkan: %s: no norm weight", "rmsnorm_rope");
    return rope_common(g, x, norm, n_heads, head_dim, eps, base, factor);
}

/* Validates a KV description; fills the cache accesses and element offsets. */
static ig_status kv_check(ig_vk_graph *g, const ig_vk_kv *kv, bool write, ig_vk_bind *bk, ig_vk_bind *bv,
                          uint32_t *koff, uint32_t *voff) {
    if (!kv || !kv->k || !kv->v) return bad(g, "vulkan: %s: no KV cache", "kv");
    if ((kv->type != IG_KV_F16 && kv->type != IG_KV_F32) || kv->n_seq <= 0 || kv->cap <= 0 || kv->n_head_kv <= 0 ||
        kv->head_dim <= 0 || kv->head_dim % 2 || kv->window < 0)
        return bad(g, "vulkan: %s: bad KV cache description", "kv");
    const uint32_t es = kv->type == IG_KV_F16 ? 2 : 4;
    const uint64_t kv_dim = (uint64_t)kv->n_head_kv * (uint64_t)kv->head_dim;
    const uint64_t rows = (uint64_t)kv->n_seq * (uint64_t)kv->cap;
    if (rows * kv_dim > UINT32_MAX) return bad(g, "vulkan: %s: KV cache too large for 32-bit indexing", "kv");
    IG_TRY(view_bind(g, "K cache", kv->k, kv->k_offset, kv_dim, rows, kv_dim, es, write, bk, koff));
    IG_TRY(view_bind(g, "V cache", kv->v, kv->v_offset, kv_dim, rows, kv_dim, es, write, bv, voff));
    return IG_OK;
}

static ig_status kv_store_common(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k, const ig_vk_buffer *norm,
                                 ig_vk_view v, bool rotate, float eps, float base, float factor) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    ig_vk_bind b[6];
    uint32_t kcoff, vcoff, koff, voff, foff = 0, noff = 0;
    IG_TRY(kv_check(g, kv, true, &b[0], &b[1], &kcoff, &vcoff));
    if (kv->head_dim > 1024) return bad(g, "vulkan: %s: head_dim too large", "kv_store");
    if (norm && !(eps >= 0.0f)) return bad(g, "vulkan: %s: bad eps", "kv_store");
    const uint64_t T = (uint64_t)ig_vk_graph_max_tokens(g), kv_dim = (uint64_t)kv->n_head_kv * (uint64_t)kv->head_dim;
    uint32_t ks = stride_or(k.stride, kv_dim), vs = stride_or(v.stride, kv_dim);
    IG_TRY(view_bind(g, "K rows", k.buf, k.offset, ks, T, kv_dim, 4, false, &b[2], &koff));
    IG_TRY(view_bind(g, "V rows", v.buf, v.offset, vs, T, kv_dim, 4, false, &b[3], &voff));
    int nb = 4;
    const ig_vk_buffer *table = NULL;
    if (rotate) {
        IG_TRY(rope_table(g, kv->head_dim, base, factor, &table));
        IG_TRY(view_bind(g, "rope table", table, 0, 0, 1, (uint64_t)kv->head_dim / 2, 4, false, &b[nb++], &foff));
    }
    if (norm)
        IG_TRY(view_bind(g, "K norm", norm, 0, 0, 1, (uint64_t)kv->head_dim, 4, false, &b[nb++], &noff));
    IG_TRY(ig_vk_rec_hazards(g, b, nb));
    ig_vk_device *d = ig_vk_graph_device(g);
    char name[32];
    snprintf(name, sizeof name, "%s_%s", norm ? "rope_kv_norm" : rotate ? "rope_kv" : "kv_store",
             kv->type == IG_KV_F16 ? "f16" : "f32");
    VkPipeline pipe;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, name, d->wg_size, 0, &pipe)));
    rope_pc pc = {(uint32_t)kv->n_head_kv, (uint32_t)kv->head_dim, koff, ks, foff, voff, vs, kcoff, vcoff,
                  (uint32_t)kv->cap, (uint32_t)kv->n_seq, (uint32_t)kv_dim, noff, eps};
    const ig_vk_part *parts[6] = {k.buf->parts, table ? table->parts : NULL, v.buf->parts, kv->k->parts,
                                  kv->v->parts, norm ? norm->parts : NULL};
    return ig_vk_rec_dispatch(g, pipe, parts, 6, &pc, sizeof pc, (uint32_t)kv->n_head_kv, (uint32_t)T, 1);
}

ig_status ig_vk_op_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k, ig_vk_view v) {
    return kv_store_common(g, kv, k, NULL, v, false, 0.0f, 1.0f, 1.0f);
}

ig_status ig_vk_op_rope_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k, ig_vk_view v, float base,
                                 float factor) {
    return kv_store_common(g, kv, k, NULL, v, true, 0.0f, base, factor);
}

ig_status ig_vk_op_rmsnorm_rope_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k,
                                         const ig_vk_buffer *knorm, ig_vk_view v, float eps, float base,
                                         float factor) {
    if (g && !knorm) return bad(g, "vulkan: %s: no norm weight", "rmsnorm_rope_kv_store");
    return kv_store_common(g, kv, k, knorm, v, true, eps, base, factor);
}

/* attn_tile.comp's query rows per workgroup (R: 32 keeps q within 16 KiB
 * up to head dim 128) and its shared memory for head dim hd: q (f32), one
 * K/V tile (f16, rows padded by 16 bytes), the scores, the reduction
 * scratch and the row states. */
static uint32_t attn_tile_rows(uint32_t hd) { return hd <= 128 ? 32 : 16; }
static uint64_t attn_tile_shared(uint32_t hd) {
    const uint64_t bk = hd >= 128 ? 4096 / hd : 32, rows = attn_tile_rows(hd);
    return rows * hd * 4 + bk * (hd / 8 + 1) * 16 + rows * bk * 4 + 256 * 4 + rows * 7 * 4 + 256;
}

/* attn_cm.comp's (tensor cores): 64 query rows (32 for head dim 256); K
 * and V tiles of 32 keys, f16, rows padded by 16 bytes (q staged there
 * first), S (f32; at least 8 subgroups' fragments of 16 x frag_n for the
 * output), P (f16), the row states, its indices (a fragment) and
 * common.glsl's scratch. frag_n: 8 (NV) or 16 (KHR). */
static uint32_t attn_cm_rows(uint32_t hd) { return hd == 256 ? 32 : 64; }
static uint64_t attn_cm_shared(uint32_t hd, uint32_t frag_n) {
    const uint64_t rows = attn_cm_rows(hd), s = rows * 36 > 128 * frag_n ? rows * 36 : 128 * frag_n;
    return 2 * 32 * (hd / 8 + 1) * 16 + s * 4 + rows * 5 * 16 + rows * 7 * 4 + 16 * frag_n * 4 + 256;
}

/* attn.comp's shared memory for NSG subgroups and `heads` query heads per
 * workgroup (before the merge's own arrays). */
static uint64_t attn_shared(uint32_t nsg, uint32_t heads) {
    return (uint64_t)nsg * heads * 256 * 4 + (uint64_t)nsg * heads * 8 + 512;
}

ig_status ig_vk_op_attention(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view q, ig_vk_view dst, int n_head,
                             float scale, float softcap) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    ig_vk_bind b[4];
    uint32_t kcoff, vcoff, qoff, ooff;
    IG_TRY(kv_check(g, kv, false, &b[0], &b[1], &kcoff, &vcoff));
    if (n_head <= 0 || n_head > 65535 || n_head % kv->n_head_kv)
        return bad(g, "vulkan: %s: n_head must be a multiple of n_head_kv", "attention");
    if (kv->head_dim > 256) return bad(g, "vulkan: %s: head_dim above 256", "attention");
    if (!isfinite(scale) || !(softcap >= 0.0f)) return bad(g, "vulkan: %s: bad scale or softcap", "attention");
    const uint64_t T = (uint64_t)ig_vk_graph_max_tokens(g), width = (uint64_t)n_head * (uint64_t)kv->head_dim;
    uint32_t qs = stride_or(q.stride, width), os = stride_or(dst.stride, width);
    IG_TRY(view_bind(g, "attention q", q.buf, q.offset, qs, T, width, 4, false, &b[2], &qoff));
    IG_TRY(view_bind(g, "attention dst", dst.buf, dst.offset, os, T, width, 4, true, &b[3], &ooff));
    ig_vk_device *d = ig_vk_graph_device(g);
    const char *kvs = kv->type == IG_KV_F16 ? "f16" : "f32";
    struct {
        uint32_t n_head, n_head_kv, hd, q_off, q_stride, o_off, o_stride, kc_off, vc_off, cap, n_seq, kv_dim, window;
        float scale, softcap;
        uint32_t chunk, n_chunks, x8_stride, kind, hpw;
        uint32_t tiled, tile_run; /* common.glsl's attn_tiled_step */
    } pc = {(uint32_t)n_head, (uint32_t)kv->n_head_kv, (uint32_t)kv->head_dim, qoff, qs, ooff, os, kcoff, vcoff,
            (uint32_t)kv->cap, (uint32_t)kv->n_seq, (uint32_t)kv->n_head_kv * (uint32_t)kv->head_dim,
            (uint32_t)kv->window, scale, softcap, 0, 1, 0, 0, 1, 0, d->tune.attn_tile_run};
    /* attn.comp: a subgroup per key, G query heads per workgroup, split
     * over chunks of keys when tokens x kv heads leave the GPU idle */
    const uint32_t SG = d->info.subgroup_size, G = (uint32_t)(n_head / kv->n_head_kv), NSG = 4;
    const uint64_t shared = attn_shared(NSG, G);
    const bool flash = SG >= 4 && SG <= 64 && kv->head_dim % (int)SG == 0 && G <= 8 &&
                       shared <= d->info.max_shared_memory && NSG * SG <= d->info.max_wg_invocations;
    /* attn_tile.comp for graphs of many tokens: K and V rows read once per
     * block of query rows rather than once per token. It suits prefill, not
     * a batch of decoding streams (a row per sequence), and a graph serves
     * both: attn.comp is recorded too, and each step runs one of them
     * (attn_tiled_step). Without attn.comp, attn_tile.comp runs alone.
     * Not when the device's tuning asks for batch invariance: a token would
     * round otherwise in a prefill step than alone. */
    /* On tensor cores (attn_cm.comp) where the device has them: faster
       than attn_tile.comp, more so at depth */
    const uint32_t hd = (uint32_t)kv->head_dim;
    /* KHR's 16-token fragments where there are no NV ones, and for head
       dim 256 where there are both (the faster there; the records of
       docs/benchmarks/) */
    const bool khr = d->cm.attn_khr && (!d->cm.attn_nv || hd == 256);
    const bool cm = d->cm.attn && (hd == 64 || hd == 128 || hd == 256) && attn_cm_rows(hd) % G == 0 &&
                    attn_cm_shared(hd, khr ? 16 : 8) <= d->info.max_shared_memory;
    const uint32_t rows = cm ? attn_cm_rows(hd) : attn_tile_rows(hd);
    if (!d->tune.invariant && kv->type == IG_KV_F16 && T >= d->tune.attn_tile_min &&
        (hd == 64 || hd == 128 || hd == 256) && G <= rows &&
        rows % G == 0 && kcoff % 8 == 0 && vcoff % 8 == 0 && qoff % 4 == 0 && qs % 4 == 0 && ooff % 4 == 0 &&
        os % 4 == 0 && (cm || attn_tile_shared(hd) <= d->info.max_shared_memory)) {
        pc.tiled = flash ? 1 : 2;
        IG_TRY(ig_vk_rec_hazards(g, b, 4));
        VkPipeline pipe;
        const uint32_t spec[4] = {0, G, hd, rows};
        char tname[32] = "attn_tile_f16";
        if (cm) snprintf(tname, sizeof tname, "attn_cm%s_hd%u", khr ? "k" : "", (unsigned)hd);
        IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline_spec(d, tname, spec, cm ? 2 : 4, &pipe)));
        const ig_vk_part *parts[4] = {q.buf->parts, kv->k->parts, kv->v->parts, dst.buf->parts};
        IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, 4, &pc, sizeof pc, (uint32_t)kv->n_head_kv, ceil_div(T, rows / G),
                                  1));
        if (!flash) return IG_OK;
    }
    if (!flash) {
        IG_TRY(ig_vk_rec_hazards(g, b, 4));
        VkPipeline pipe;
        char name[32];
        snprintf(name, sizeof name, "attention_%s", kvs);
        IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, name, 0, 0, &pipe)));
        const ig_vk_part *parts[4] = {q.buf->parts, kv->k->parts, kv->v->parts, dst.buf->parts};
        return ig_vk_rec_dispatch(g, pipe, parts, 4, &pc, sizeof pc, (uint32_t)n_head, (uint32_t)T, 1);
    }
    const uint64_t n_keys = kv->window > 0 && kv->window < kv->cap ? (uint64_t)kv->window : (uint64_t)kv->cap;
    /* The chunks of a token: as many as keep the GPU busy for one token,
       whatever the graph's token count, so that a token's keys are split
       at the same places (and merged in the same order) alone, in a batch
       or in a prefill chunk (batch invariance); a batch has more
       workgroups, each as short as a lone token's. */
    uint64_t chunks = (d->tune.attn_wgs + kv->n_head_kv - 1) / (uint64_t)kv->n_head_kv;
    if (chunks > 32) chunks = 32;
    if (chunks < 1) chunks = 1;
    /* chunks of at least min_keys keys (4 per subgroup); how many keys each
       takes is decided per token (attn_chunk_keys), from the keys it attends
       now, not from the cache's size: a long context holding few tokens
       keeps every chunk busy */
    const uint32_t min_keys = 4 * NSG;
    if (chunks > (n_keys + min_keys - 1) / min_keys) chunks = (n_keys + min_keys - 1) / min_keys;
    /* the chunks' states of a large graph must fit one binding (lavapipe's
       is 128 MiB: a 4B's 512-token graph): fewer chunks there, and that
       graph's tokens are split differently from a lone token's */
    while (chunks > 1 && T * (uint64_t)n_head * chunks * ((uint64_t)kv->head_dim + 2) * 4 > d->max_binding)
        chunks = (chunks + 1) / 2;
    pc.chunk = min_keys;
    pc.n_chunks = (uint32_t)chunks;
    const ig_vk_buffer *scratch = NULL;
    if (chunks > 1) {
        const uint64_t bytes = T * (uint64_t)n_head * chunks * ((uint64_t)kv->head_dim + 2) * 4;
        IG_TRY(ig_vk_graph_scratch(g, bytes, &scratch));
        uint32_t soff;
        IG_TRY(view_bind(g, "attention scratch", scratch, 0, 0, 1, bytes / 4, 4, true, &b[3], &soff));
    }
    const ig_vk_bind out_bind = b[3];
    ig_vk_bind dst_bind;
    IG_TRY(view_bind(g, "attention dst", dst.buf, dst.offset, os, T, width, 4, true, &dst_bind, &ooff));
    /* the output projection's int8 input, written here rather than by
       quant_x8 (not when attn_tile.comp may run instead of this): the
       merging workgroup takes hpw heads, whole blocks of the int8 copy */
    bool x8 = chunks > 1 && pc.tiled == 0 && x8_wanted(g, width, ooff, os, &pc.kind);
    const uint32_t unit = x8 ? x8_unit(pc.kind) : 1;
    if (x8 && hd < unit) pc.hpw = unit % hd == 0 ? unit / hd : 0; /* heads sharing a block */
    else if (x8) pc.hpw = hd % unit == 0 ? 1 : 0;
    /* merged by the last workgroup of each unit of R = max(G, hpw) heads
       (attn.comp -DREDUCE; its shared memory beyond attn.comp's: the chunk
       weights and sums of up to 8 heads x 32 chunks, and x8_quant_values'
       arrays for up to G x 256 values), or by attn_reduce.comp */
    /* Gw: the query heads of a workgroup. A unit of all G heads of a kv
       head can be too large for one workgroup to merge (270M and 1B: 4 x
       256 outputs); then each workgroup takes half of them (K and V read
       twice, from L2) and the units halve. */
    uint32_t Gw = G, R = G;
    bool fused = false;
    for (;;) {
        const uint64_t merge_shared =
            attn_shared(NSG, Gw) + 2 * 8 * 32 * 4 + 8 * 4 + 16 + (x8 ? (uint64_t)Gw * (64 * 12 + 8 * 16) : 0);
        R = x8 && pc.hpw > Gw ? pc.hpw : Gw;
        fused = chunks > 1 && chunks <= 32 && R <= 8 && R * hd <= d->tune.attn_merge_max &&
                merge_shared <= d->info.max_shared_memory && n_head % (int)R == 0 &&
                (!x8 || (pc.hpw > 0 && (pc.hpw % Gw == 0 || Gw % pc.hpw == 0)));
        if (fused || Gw % 2 || chunks <= 1 || R * hd <= d->tune.attn_merge_max) break;
        Gw /= 2;
    }
    if (!fused) Gw = G;
    if (!fused)
        x8 = x8 && pc.hpw > 0 && n_head % (int)pc.hpw == 0 &&
             pc.hpw * hd <= 256; /* attn_reduce.comp's o_sh4: a vec4 per invocation */
    if (!x8) pc.hpw = 1;
    if (fused) pc.hpw = R;
    ig_vk_bind x8_bind = {0};
    if (x8) {
        IG_TRY(x8_scratch(g, width, T, &pc.x8_stride));
        x8_bind = (ig_vk_bind){ig_vk_graph_x8(g)->buf->parts, 0, T * pc.x8_stride * 16, true};
    }
    const ig_vk_buffer *counters = NULL;
    ig_vk_bind binds[7] = {b[0], b[1], b[2], out_bind};
    int nb = 4;
    if (fused) {
        IG_TRY(ig_vk_graph_counters(g, T * (uint64_t)(n_head / (int)pc.hpw), &counters));
        binds[nb++] = dst_bind;
        if (x8) binds[nb++] = x8_bind;
        binds[nb++] = (ig_vk_bind){counters->parts, 0, T * (uint64_t)(n_head / (int)pc.hpw) * 4, true};
    }
    IG_TRY(ig_vk_rec_hazards(g, binds, nb));
    char name[40];
    snprintf(name, sizeof name, "%s_%s", chunks == 1 ? "attn" : fused ? (x8 ? "attn_merge_x8" : "attn_merge")
                                                               : "attn_split", kvs);
    VkPipeline pipe;
    const uint32_t spec[3] = {NSG * SG, SG, Gw};
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline_spec(d, name, spec, 3, &pipe)));
    const ig_vk_part *parts[7] = {q.buf->parts, kv->k->parts, kv->v->parts, dst.buf->parts,
                                  scratch ? scratch->parts : NULL, x8 && fused ? x8_bind.part : NULL,
                                  counters ? counters->parts : NULL};
    IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, 7, &pc, sizeof pc, (uint32_t)n_head / Gw, (uint32_t)T,
                              (uint32_t)chunks));
    if (chunks > 1 && !fused) {
        /* attn_reduce.comp: a dispatch of its own after a barrier */
        ig_vk_bind rb[3] = {out_bind, dst_bind, x8_bind};
        rb[0].write = false;
        IG_TRY(ig_vk_rec_hazards(g, rb, x8 ? 3 : 2));
        IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, x8 ? "attn_reduce_x8" : "attn_reduce", 0, 0, &pipe)));
        const ig_vk_part *rparts[6] = {NULL, NULL, NULL, dst.buf->parts, scratch->parts, x8 ? x8_bind.part : NULL};
        IG_TRY(ig_vk_rec_dispatch(g, pipe, rparts, x8 ? 6 : 5, &pc, sizeof pc, (uint32_t)n_head / pc.hpw,
                                  (uint32_t)T, 1));
    }
    if (x8) x8_holds(g, &dst_bind, ooff, os, width, IG_VK_ROWS_TOKENS, pc.kind);
    return IG_OK;
}

/* ---- element-wise ---- */

enum { ELT_ADD = 0, ELT_GEGLU = 1, ELT_SOFTCAP = 2, ELT_GATHER = 3, ELT_COPY = 4 };

static ig_status eltwise(ig_vk_graph *g, uint32_t op, ig_vk_rows rows, const ig_vk_view *a, const ig_vk_view *b,
                         ig_vk_view y, int width, float cap) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (width <= 0) return bad(g, "vulkan: %s: bad width", "eltwise");
    const uint64_t T = (uint64_t)ig_vk_graph_max_rows(g, rows), w = (uint64_t)width;
    uint32_t as = stride_or(a->stride, w), bs = b ? stride_or(b->stride, w) : 0, ys = stride_or(y.stride, w);
    uint32_t aoff, boff = 0, yoff;
    ig_vk_bind bind[3];
    int nb = 0;
    IG_TRY(view_bind(g, "eltwise a", a->buf, a->offset, as, T, w, 4, false, &bind[nb++], &aoff));
    if (b) IG_TRY(view_bind(g, "eltwise b", b->buf, b->offset, bs, T, w, 4, false, &bind[nb++], &boff));
    IG_TRY(view_bind(g, "eltwise dst", y.buf, y.offset, ys, T, w, 4, true, &bind[nb++], &yoff));
    IG_TRY(ig_vk_rec_hazards(g, bind, nb));
    VkPipeline pipe;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(ig_vk_graph_device(g), "eltwise", ELT_WG, 0, &pipe)));
    struct {
        uint32_t op, rows_sel, width, a_off, a_stride, b_off, b_stride, y_off, y_stride;
        float cap;
    } pc = {op, (uint32_t)rows, (uint32_t)w, aoff, as, boff, bs, yoff, ys, cap};
    const ig_vk_part *parts[3] = {a->buf->parts, b ? b->buf->parts : NULL, y.buf->parts};
    return ig_vk_rec_dispatch(g, pipe, parts, 3, &pc, sizeof pc, ceil_div(w, ELT_WG), (uint32_t)T, 1);
}

ig_status ig_vk_op_geglu(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view gate, ig_vk_view up, ig_vk_view dst, int width) {
    return eltwise(g, ELT_GEGLU, rows, &gate, &up, dst, width, 0.0f);
}

ig_status ig_vk_op_add(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view a, ig_vk_view b, ig_vk_view dst, int width) {
    return eltwise(g, ELT_ADD, rows, &a, &b, dst, width, 0.0f);
}

ig_status ig_vk_op_softcap(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view x, int width, float cap) {
    if (g && !(cap > 0.0f)) return bad(g, "vulkan: %s: cap must be > 0", "softcap");
    return eltwise(g, ELT_SOFTCAP, rows, &x, NULL, x, width, cap);
}

/* ---- L2 prefetch ---- */

ig_status ig_vk_op_prefetch(ig_vk_graph *g, const ig_vk_buffer *w, uint64_t lo, uint64_t hi) {
    if (!g) return IG_ERR_INVALID_ARG;
    IG_TRY(ig_vk_graph_error(g));
    if (!w || !w->is_weight) return bad(g, "vulkan: %s: not a weight", "prefetch");
    ig_vk_device *d = ig_vk_graph_device(g);
    VkPipeline pipe;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_pipeline(d, "l2_prefetch", 0, 0, &pipe)));
    uint64_t base = 0; /* the part's first byte within the weight */
    for (int i = 0; i < w->n_parts; i++) {
        const ig_vk_part *p = &w->parts[i];
        const uint64_t p0 = base;
        base += p->size;
        if (hi <= p0 || lo >= base || lo >= hi) continue;
        const uint64_t a = lo > p0 ? lo - p0 : 0, b = hi < base ? hi - p0 : p->size;
        const uint64_t s0 = a / 32, s1 = (b + 31) / 32; /* sectors, each starting inside the part */
        if (s1 > UINT32_MAX) return bad(g, "vulkan: %s: weight part too large", "prefetch");
        const struct {
            uint32_t first, count, never;
        } pc = {(uint32_t)s0, (uint32_t)(s1 - s0), 0};
        const ig_vk_part *parts[4] = {p, NULL, NULL, &d->dummy->parts[0]};
        IG_TRY(ig_vk_rec_dispatch(g, pipe, parts, 4, &pc, sizeof pc, ceil_div(s1 - s0, 256 * 8), 1, 1));
    }
    return IG_OK;
}

ig_status ig_vk_op_copy(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst, int width) {
    return eltwise(g, ELT_COPY, rows, &src, NULL, dst, width, 0.0f);
}

ig_status ig_vk_op_gather(ig_vk_graph *g, ig_vk_view src, ig_vk_view dst, int width) {
    return eltwise(g, ELT_GATHER, IG_VK_ROWS_OUTPUTS, &src, NULL, dst, width, 0.0f);
}
