/* CPU matmul kernels: every weight type x every ISA this CPU runs, against
 * the scalar references of quant.h on random data of awkward sizes.
 *
 * Quantized types: the activation is quantized (Q8_0 or Q8_K) exactly as
 * ig_quantize_row / ig_quantize_row_q8_K do (checked byte for byte), and the
 * result is compared with ig_vec_dot_*_q8_* on those activations. Both sides
 * form the same exact integer block sums; they may differ only in the order
 * of the float operations that scale and add the blocks. With u = 2^-24 and
 * S = sum over elements of |w_j| |x_j| (w dequantized, split into its scale
 * and min parts for Q4_K/Q5_K so that no cancellation hides in S, x the
 * dequantized activation), each side is within (nblocks + 16) u S of the
 * exact value of its terms, so
 *     |y - ref| <= 2 (nblocks + 16) u S.
 * Every kernel uses the reference's operation order, so that a token's
 * result does not depend on the batch it is in: all are held to y == ref.
 *
 * Float types (F32/F16/BF16): f32 activations, reference = the dot of the
 * dequantized row with x in double; bound k u S (any summation order). */
#include "test.h"

#include "backend/cpu/matmul_impl.h"
#include "core/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

static float frand(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); }

/* Values with a spread of magnitudes per 32-block, occasional outliers,
 * zero blocks and exact ties of the 8-bit grid. */
static void fill(float *x, int64_t n, int flavour) {
    for (int64_t i = 0; i < n; i += 32) {
        const uint32_t kind = rnd() % 16;
        const float scale = kind == 0 ? 0.0f : kind == 1 ? 1e-3f : kind == 2 ? 40.0f : 1.0f;
        for (int64_t j = i; j < i + 32 && j < n; j++) {
            x[j] = frand() * scale;
            if (flavour && rnd() % 64 == 0) x[j] *= 8.0f;
        }
        if (kind == 3) { /* ties: multiples of amax/254 */
            const float step = 1.0f / 254.0f;
            for (int64_t j = i; j < i + 32 && j < n; j++) x[j] = step * (float)((int)(rnd() % 255) - 127);
            x[i] = 127.0f * step;
        }
    }
}

static size_t row_bytes(ig_dtype t, int64_t k) {
    size_t rb = 0;
    ig_dtype_row_bytes(t, k, &rb);
    return rb;
}

/* Sum of |scale part| |x| + |min part| |x| over one row (see the header). */
static double magnitude(ig_dtype t, const uint8_t *row, const float *xd, int64_t k) {
    float *w = malloc((size_t)k * sizeof(float));
    double s = 0;
    if (t == IG_TYPE_Q4_K || t == IG_TYPE_Q5_K) {
        const size_t bb = ig_blk_bytes(t);
        const size_t rb = row_bytes(t, k);
        uint8_t *tmp = malloc(rb);
        for (int part = 0; part < 2; part++) {
            memcpy(tmp, row, rb);
            for (int64_t b = 0; b < k / IG_QK_K; b++)
                memset(tmp + (size_t)b * bb + (part ? 0 : 2), 0, 2); /* drop dmin or d */
            ig_dequantize_row(t, tmp, w, k);
            for (int64_t j = 0; j < k; j++) s += fabs((double)w[j]) * fabs((double)xd[j]);
        }
        free(tmp);
    } else {
        ig_dequantize_row(t, row, w, k);
        for (int64_t j = 0; j < k; j++) s += fabs((double)w[j]) * fabs((double)xd[j]);
    }
    free(w);
    return s;
}

typedef struct case_stats {
    double worst; /* max |y - ref| / tol */
    int inexact;  /* results != ref */
    int fails;
} case_stats;

static bool expect_exact(const ig_mm_isa *isa, ig_dtype t, bool grouped) {
    (void)isa;
    (void)grouped;
    return ig_mm_act_kind(t) != IG_ACT_F32;
}

static void run_case(const ig_mm_isa *isa, ig_dtype t, int64_t k, int rows, int n, case_stats *st) {
    const size_t rb = row_bytes(t, k);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc((size_t)k * sizeof(float));
    for (int r = 0; r < rows; r++) {
        fill(wf, k, 1);
        ig_quantize_row(t, wf, w + (size_t)r * rb, k);
    }
    float *x = malloc((size_t)n * (size_t)k * sizeof(float));
    fill(x, (int64_t)n * k, 0);
    const int ldy = rows + 3;
    float *y = malloc((size_t)n * (size_t)ldy * sizeof(float));
    for (int i = 0; i < n * ldy; i++) y[i] = NAN;

    const ig_act_kind kind = ig_mm_act_kind(t);
    const bool grouped = ig_mm_use_groups(isa, t, n);
    size_t act_bytes = kind == IG_ACT_F32 ? 1 : ig_mm_act_bytes(kind, k, n, grouped);
    /* act and scratch are 64-byte aligned, as the backend allocates them */
    uint8_t *act = ig_aligned_alloc(64, ig_mm_align64(act_bytes));
    void *scratch = ig_aligned_alloc(64, ig_mm_align64(ig_mm_scratch_bytes(isa, t, k)));
    uint8_t *tmp = malloc(ig_mm_row_stride(IG_ACT_Q8_K, k) + ig_mm_row_stride(IG_ACT_Q8_0, k) + 64);
    /* Two ranges with awkward bounds. */
    const int split = rows > 2 ? rows / 2 + 1 : rows;
    ig_mm_run(isa, t, w, k, 0, split, x, n, y, ldy, act, scratch, tmp);
    if (split < rows) ig_mm_run(isa, t, w, k, split, rows, x, n, y, ldy, act, scratch, tmp);

    /* References. */
    const int64_t nb = k / (kind == IG_ACT_Q8_K ? IG_QK_K : IG_QK);
    void *xq = malloc((size_t)nb * sizeof(ig_block_q8_K));
    float *xd = malloc((size_t)k * sizeof(float));
    for (int tok = 0; tok < n; tok++) {
        const float *xt = x + (size_t)tok * (size_t)k;
        if (kind == IG_ACT_Q8_0) {
            ig_quantize_row_q8_0_act(xt, xq, k);
            ig_dequantize_row(IG_TYPE_Q8_0, xq, xd, k);
        } else if (kind == IG_ACT_Q8_K) {
            ig_quantize_row_q8_K(xt, xq, k);
            ig_dequantize_row_q8_K(xq, xd, k);
        } else {
            memcpy(xd, xt, (size_t)k * sizeof(float));
        }
        for (int r = 0; r < rows; r++) {
            const uint8_t *row = w + (size_t)r * rb;
            double ref, tol;
            const double S = magnitude(t, row, xd, k);
            switch (t) {
            case IG_TYPE_Q8_0: ref = ig_vec_dot_q8_0_q8_0(row, xq, k); break;
            case IG_TYPE_Q4_0: ref = ig_vec_dot_q4_0_q8_0(row, xq, k); break;
            case IG_TYPE_Q5_0: ref = ig_vec_dot_q5_0_q8_0(row, xq, k); break;
            case IG_TYPE_Q5_1: ref = ig_vec_dot_q5_1_q8_0(row, xq, k); break;
            case IG_TYPE_Q4_K: ref = ig_vec_dot_q4_K_q8_K(row, xq, k); break;
            case IG_TYPE_Q5_K: ref = ig_vec_dot_q5_K_q8_K(row, xq, k); break;
            case IG_TYPE_Q6_K: ref = ig_vec_dot_q6_K_q8_K(row, xq, k); break;
            default: {
                ig_dequantize_row(t, row, wf, k);
                double s = 0;
                for (int64_t j = 0; j < k; j++) s += (double)wf[j] * xt[j];
                ref = s;
            }
            }
            if (kind == IG_ACT_F32) tol = (double)k * 0x1p-24 * S;
            else tol = 2.0 * (double)(nb + 16) * 0x1p-24 * S;
            tol += 1e-37;
            const float got = y[(size_t)tok * ldy + r];
            const double err = fabs((double)got - ref);
            if (!(err <= tol)) {
                if (st->fails++ < 5)
                    ig_test_fail_at(__FILE__, __LINE__,
                                    "%s %s k=%lld rows=%d n=%d: y[%d,%d] = %.9g, ref %.9g (tol %.3g)",
                                    isa->name, ig_dtype_name(t), (long long)k, rows, n, tok, r,
                                    (double)got, ref, tol);
            }
            if (err / tol > st->worst) st->worst = err / tol;
            if ((float)ref != got) {
                st->inexact++;
                if (expect_exact(isa, t, grouped) && st->fails++ < 5)
                    ig_test_fail_at(__FILE__, __LINE__,
                                    "%s %s k=%lld rows=%d n=%d: y[%d,%d] = %.9g, want exactly %.9g",
                                    isa->name, ig_dtype_name(t), (long long)k, rows, n, tok, r,
                                    (double)got, ref);
            }
        }
        /* Columns outside the computed range stay untouched. */
        for (int r = rows; r < ldy; r++) CHECK(isnan(y[(size_t)tok * ldy + r]));
    }
    free(xq);
    free(xd);
    free(tmp);
    ig_aligned_free(scratch);
    ig_aligned_free(act);
    free(y);
    free(x);
    free(wf);
    free(w);
}

static void check_type(ig_dtype t) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    const bool kq = ig_mm_act_kind(t) == IG_ACT_Q8_K;
    const bool fl = ig_mm_act_kind(t) == IG_ACT_F32;
    /* 32-element types: 1, 3, 6 and 20 blocks (the one-token kernel takes
     * four at a time: every remainder) */
    const int64_t ks32[] = {32, 96, 192, 640};
    const int64_t ksK[] = {256, 768};
    /* Float types also: rows with a tail of under 8 / 16 elements, and rows
     * longer than the AVX2 panels' 1024-element blocks; token counts on both
     * sides of where the panels start (16) and of the micro-kernels' 4 / 12
     * tokens; panels of 24 / 32 rows and a part (1, 2 or 3 AVX2 row vectors). */
    const int64_t ksF[] = {32, 37, 96, 640, 1100};
    const int64_t *ks = kq ? ksK : fl ? ksF : ks32;
    const int n_k = kq ? 2 : fl ? 5 : 4;
    const int rows_list[] = {1, 5, 13, 37, 70};
    const int n_list[] = {1, 3, 17, 64, 4, 8, 12, 15, 16, 31, 32};
    const int n_rows = fl ? 5 : 4, n_n = fl ? 11 : 4;
    for (int i = 0; i < n_isa; i++) {
        case_stats st = {0};
        for (int a = 0; a < n_k; a++)
            for (int b = 0; b < n_rows; b++)
                for (int c = 0; c < n_n; c++) run_case(isas[i], t, ks[a], rows_list[b], n_list[c], &st);
        printf("    %-6s %-5s worst %.3f of bound, %d results not bit-equal to the reference\n",
               isas[i]->name, ig_dtype_name(t), st.worst, st.inexact);
    }
}

IG_TEST(matmul_f32) { check_type(IG_TYPE_F32); }
IG_TEST(matmul_f16) { check_type(IG_TYPE_F16); }
IG_TEST(matmul_bf16) { check_type(IG_TYPE_BF16); }
IG_TEST(matmul_q8_0) { check_type(IG_TYPE_Q8_0); }
IG_TEST(matmul_q4_0) { check_type(IG_TYPE_Q4_0); }
IG_TEST(matmul_q5_0) { check_type(IG_TYPE_Q5_0); }
IG_TEST(matmul_q5_1) { check_type(IG_TYPE_Q5_1); }
IG_TEST(matmul_q4_K) { check_type(IG_TYPE_Q4_K); }
IG_TEST(matmul_q5_K) { check_type(IG_TYPE_Q5_K); }
IG_TEST(matmul_q6_K) { check_type(IG_TYPE_Q6_K); }

/* A K-quant block at the ends of its ranges: v & 1: q the largest (63 for
 * Q6_K, 15 / 31 for Q4_K / Q5_K), else 0; Q6_K scales -128 (v & 2) or 127,
 * Q4_K/Q5_K scales and mins 63; d = dmin = 1. */
static void extreme_block(ig_dtype t, uint8_t *blk, int v) {
    const size_t bb = ig_blk_bytes(t);
    memset(blk, 0, bb);
    if (t == IG_TYPE_Q6_K) {
        memset(blk, v & 1 ? 0xff : 0x00, 192);
        memset(blk + 192, v & 2 ? 0x80 : 0x7f, 16);
        blk[209] = 0x3c; /* f16 1.0 */
    } else {
        blk[1] = blk[3] = 0x3c;
        memset(blk + 4, 0xff, 12);
        memset(blk + 16, v & 1 ? 0xff : 0x00, bb - 16);
    }
}

/* Extreme K-quant blocks with activations whose Q8_K blocks have |q| = 127
 * and t = 8 everywhere (or every t in turn): the exact integer block sums
 * reach 1.07e9 for Q6_K (int32 holds them, while some partial sums of q *
 * x before the -32 correction pass INT32_MAX), and every ISA equals the
 * reference, for one token as for many. */
static void check_extremes(ig_dtype t) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    const int64_t k = 512;
    const int rows = 9, n = 21;
    size_t rb = 0;
    REQUIRE(ig_dtype_row_bytes(t, k, &rb));
    uint8_t *w = malloc(rb * rows);
    float *x = malloc((size_t)n * (size_t)k * sizeof(float));
    float *y = malloc((size_t)n * rows * sizeof(float));
    REQUIRE(w && x && y);
    for (int r = 0; r < rows; r++)
        for (int64_t b = 0; b < k / IG_QK_K; b++)
            extreme_block(t, w + (size_t)r * rb + (size_t)b * ig_blk_bytes(t), r < 4 ? r : (int)(r + b) & 3);
    for (int tok = 0; tok < n; tok++)
        for (int64_t i = 0; i < k; i++) {
            const int run = (int)(i / 32) % 8;
            float v = tok % 4 == 0 ? 1.0f : tok % 4 == 1 ? -1.0f : tok % 4 == 2 ? (run & 1 ? 1.0f : -1.0f)
                                                                                : (float)(run + 1) * (run & 1 ? 0.5f : -0.5f);
            x[(size_t)tok * k + i] = v * (float)(1 + tok / 4);
        }
    ig_block_q8_K xq[2];
    ig_quantize_row_q8_K(x + 3 * k, xq, k); /* the token of every t */
    for (int j = 0; j < 8; j++) CHECK_EQ_INT(xq[0].t[j], j + 1);
    const int ns[] = {1, 3, 5, 21};
    for (int i = 0; i < n_isa; i++)
        for (int c = 0; c < 4; c++) {
            const int nt = ns[c];
            const ig_act_kind kind = IG_ACT_Q8_K;
            const bool grouped = ig_mm_use_groups(isas[i], t, nt);
            uint8_t *act = ig_aligned_alloc(64, ig_mm_align64(ig_mm_act_bytes(kind, k, nt, grouped)));
            void *scratch = ig_aligned_alloc(64, ig_mm_align64(ig_mm_scratch_bytes(isas[i], t, k)));
            uint8_t *tmp = malloc(ig_mm_row_stride(kind, k));
            REQUIRE(act && scratch && tmp);
            ig_mm_run(isas[i], t, w, k, 0, rows, x, nt, y, rows, act, scratch, tmp);
            for (int tok = 0; tok < nt; tok++) {
                ig_quantize_row_q8_K(x + (size_t)tok * k, xq, k);
                for (int r = 0; r < rows; r++) {
                    const uint8_t *row = w + (size_t)r * rb;
                    const float ref = t == IG_TYPE_Q4_K   ? ig_vec_dot_q4_K_q8_K(row, xq, k)
                                      : t == IG_TYPE_Q5_K ? ig_vec_dot_q5_K_q8_K(row, xq, k)
                                                          : ig_vec_dot_q6_K_q8_K(row, xq, k);
                    if (y[tok * rows + r] != ref)
                        ig_test_fail_at(__FILE__, __LINE__, "%s %s n=%d: y[%d,%d] = %.9g, want exactly %.9g",
                                        isas[i]->name, ig_dtype_name(t), nt, tok, r,
                                        (double)y[tok * rows + r], (double)ref);
                }
            }
            free(tmp);
            ig_aligned_free(scratch);
            ig_aligned_free(act);
        }
    free(y);
    free(x);
    free(w);
}

IG_TEST(matmul_q4_K_extremes) { check_extremes(IG_TYPE_Q4_K); }
IG_TEST(matmul_q5_K_extremes) { check_extremes(IG_TYPE_Q5_K); }
IG_TEST(matmul_q6_K_extremes) { check_extremes(IG_TYPE_Q6_K); }

/* Every ISA writes the same activation bytes as the scalar quantizer, which
 * wraps the references (ig_quantize_row Q8_0, ig_quantize_row_q8_K). */
IG_TEST(matmul_act_quant_bytes) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    const int64_t k = 1024;
    float *x = malloc((size_t)k * sizeof(float));
    for (int kind = IG_ACT_Q8_0; kind <= IG_ACT_Q8_K; kind++) {
        const size_t rs = ig_mm_row_stride((ig_act_kind)kind, k);
        const size_t used = kind == IG_ACT_Q8_0 ? (size_t)k + 8 * (size_t)(k / 32)
                                                : (size_t)k + 4 * (size_t)(k / 256) + 2 * (size_t)(k / 16) + (size_t)(k / 32);
        uint8_t *want = malloc(rs), *got = malloc(rs);
        for (int rep = 0; rep < 50; rep++) {
            fill(x, k, rep & 1);
            if (rep == 7) x[5] = -x[5] - 1000.0f; /* negative extreme */
            if (rep == 9) memset(x, 0, (size_t)k * sizeof(float));
            if (rep == 11) /* equal magnitudes of both signs: the first wins (Q8_K) */
                for (int64_t j = 0; j < k; j++) x[j] = (j & 1) ? 3.0f : -3.0f;
            if (rep == 13) /* scale exactly 1 (max 127): halves are ties, to even */
                for (int64_t j = 0; j < k; j++) x[j] = (j % 32 == 31) ? 127.0f : (float)(j % 32) - 15.5f;
            ig_mm_isa_scalar.quant_row((ig_act_kind)kind, x, k, want);
            for (int i = 1; i < n_isa; i++) {
                memset(got, 0xcd, rs);
                isas[i]->quant_row((ig_act_kind)kind, x, k, got);
                if (memcmp(want, got, used) != 0) {
                    size_t at = 0;
                    while (want[at] == got[at]) at++;
                    ig_test_fail_at(__FILE__, __LINE__, "%s kind %d rep %d: byte %zu differs (%d vs %d)",
                                    isas[i]->name, kind, rep, at, want[at], got[at]);
                    break;
                }
            }
        }
        free(want);
        free(got);
    }
    free(x);
}

IG_TEST(matmul_isa_selection) {
    const ig_mm_isa *isas[8];
    const int n = ig_mm_isa_available(isas, 8);
    REQUIRE(n >= 1);
    CHECK(isas[0] == &ig_mm_isa_scalar);
    for (int i = 0; i < n; i++) printf("    available: %s\n", isas[i]->name);
    CHECK(ig_mm_isa_select() != NULL);
}
