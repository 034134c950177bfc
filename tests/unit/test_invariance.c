/* Batch invariance of the CPU backend: a token's result must not depend on
 * the other tokens that share its step, bit for bit.
 *
 *  - matmuls: every weight type x every ISA this CPU runs, token t's output
 *    row computed alone (one token, the mat-vec kernels) and inside batches
 *    of 2..40 tokens (both kernel families), memcmp-equal; the row range is
 *    split at an awkward point, as threads split it; float weights also
 *    with k = 1601, 77 rows and batches up to 70 tokens;
 *  - attention blocks: each query row alone and in blocks with other rows
 *    whose key ranges start elsewhere (sliding windows);
 *  - the engine: the logits of every position with all tokens in one step,
 *    one per step, in chunks of 3 and 7, and sharing steps with another
 *    sequence, on the tiny HF fixture (F32 weights, a 16-token sliding
 *    window) and on a 2-layer synthetic 270M GGUF of the Q4_K_M recipe
 *    (Q8_0, Q5_0, Q4_K and Q6_K matrices), on every ISA, 1 and 2 threads. */
#include "test.h"

#include "backend/cpu/matmul_impl.h"
#include "core/util.h"
#include "ignis.h"
#include "model/synth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_rng = 0x853c49e6748fea9bull;

static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 4503599627370496.0 - 1.0);
}

/* ---- matmuls ---------------------------------------------------------------- */

#define MM_MAX_N 40

/* y[t * ldy + r] for tokens 0..n-1 of x, rows [0, rows) in two ranges. */
static void mm(const ig_mm_isa *isa, ig_dtype t, const uint8_t *w, int64_t k, int rows, const float *x,
               int n, float *y, int ldy) {
    const ig_act_kind kind = ig_mm_act_kind(t);
    const bool grouped = ig_mm_use_groups(isa, t, n);
    const size_t act_bytes = kind == IG_ACT_F32 ? 64 : ig_mm_act_bytes(kind, k, n, grouped);
    uint8_t *act = ig_aligned_alloc(64, ig_mm_align64(act_bytes));
    void *scratch = ig_aligned_alloc(64, ig_mm_align64(isa->scratch_bytes(k)));
    uint8_t *tmp = malloc(ig_mm_row_stride(IG_ACT_Q8_K, k) + ig_mm_row_stride(IG_ACT_Q8_0, k) + 64);
    if (act && scratch && tmp) {
        const int split = 13; /* not a multiple of any tile */
        ig_mm_run(isa, t, w, k, 0, split, x, n, y, ldy, act, scratch, tmp);
        ig_mm_run(isa, t, w, k, split, rows, x, n, y, ldy, act, scratch, tmp);
    } else {
        CHECK(!"out of memory");
    }
    free(tmp);
    ig_aligned_free(scratch);
    ig_aligned_free(act);
}

static void check_mm_type(ig_dtype t) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    const int64_t k = ig_mm_act_kind(t) == IG_ACT_Q8_K ? 768 : 608; /* 608: 19 blocks of 32 */
    const int rows = 53;
    size_t rb = 0;
    REQUIRE(ig_dtype_row_bytes(t, k, &rb));
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc(sizeof(float) * (size_t)k);
    float *x = malloc(sizeof(float) * (size_t)k * MM_MAX_N);
    float *alone = malloc(sizeof(float) * (size_t)rows * MM_MAX_N);
    float *batch = malloc(sizeof(float) * (size_t)rows * MM_MAX_N);
    REQUIRE(w && wf && x && alone && batch);
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) wf[i] = frand() * (r % 7 == 0 ? 30.0f : 1.0f);
        ig_quantize_row(t, wf, w + (size_t)r * rb, k);
    }
    for (int64_t i = 0; i < k * MM_MAX_N; i++) x[i] = frand() * (i % 97 == 0 ? 20.0f : 1.0f);
    for (int a = 0; a < n_isa; a++) {
        const ig_mm_isa *isa = isas[a];
        for (int tok = 0; tok < MM_MAX_N; tok++) mm(isa, t, w, k, rows, x + tok * k, 1, alone + tok * rows, rows);
        int bad = 0, checked = 0;
        for (int n = 2; n <= MM_MAX_N; n++) {
            /* tokens n-1 .. 2n-2 (mod 40): not always from token 0 */
            const int t0 = (n * 7) % (MM_MAX_N - n + 1);
            for (size_t i = 0; i < (size_t)rows * MM_MAX_N; i++) batch[i] = NAN;
            mm(isa, t, w, k, rows, x + t0 * k, n, batch, rows);
            for (int j = 0; j < n; j++) {
                checked++;
                if (memcmp(batch + j * rows, alone + (t0 + j) * rows, sizeof(float) * (size_t)rows) != 0 &&
                    bad++ < 3) {
                    int r = 0;
                    while (r < rows && batch[j * rows + r] == alone[(t0 + j) * rows + r]) r++;
                    ig_test_fail_at(__FILE__, __LINE__, "%s %s: token %d in a batch of %d, row %d: %.9g alone %.9g",
                                    isa->name, ig_dtype_name(t), t0 + j, n, r, (double)batch[j * rows + r],
                                    (double)alone[(t0 + j) * rows + r]);
                }
            }
        }
        CHECK_EQ_INT(checked, 819);
        CHECK_EQ_INT(bad, 0);
    }
    free(w);
    free(wf);
    free(x);
    free(alone);
    free(batch);
}

/* Float weights with k not a multiple of any vector width, rows spanning
 * several panels and batches up to 70 tokens (several token blocks): every
 * token of every batch equals the token alone, bit for bit. K above 1024
 * spans the panels' element blocks; ROWS (split at 13) chooses which panel
 * widths the ranges end with. */
static void check_mm_float_wide(ig_dtype t, const int K, const int ROWS) {
    enum { NMAX = 70 };
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    size_t rb = 0;
    REQUIRE(ig_dtype_row_bytes(t, K, &rb));
    uint8_t *w = malloc(rb * (size_t)ROWS);
    float *wf = malloc(sizeof(float) * (size_t)K);
    float *x = malloc(sizeof(float) * (size_t)K * NMAX);
    float *alone = malloc(sizeof(float) * (size_t)ROWS * NMAX);
    float *batch = malloc(sizeof(float) * (size_t)ROWS * NMAX);
    REQUIRE(w && wf && x && alone && batch);
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < K; i++) wf[i] = frand() * (r % 5 == 0 ? 50.0f : 1.0f);
        ig_quantize_row(t, wf, w + (size_t)r * rb, K);
    }
    for (int i = 0; i < K * NMAX; i++) x[i] = frand() * (i % 89 == 0 ? 40.0f : 1.0f);
    static const int ns[] = {2, 3, 4, 5, 11, 12, 13, 16, 25, 31, 64, 65, 70};
    for (int a = 0; a < n_isa; a++) {
        const ig_mm_isa *isa = isas[a];
        for (int tok = 0; tok < NMAX; tok++) mm(isa, t, w, K, ROWS, x + tok * K, 1, alone + tok * ROWS, ROWS);
        int bad = 0, checked = 0;
        for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
            const int n = ns[c];
            for (int i = 0; i < ROWS * NMAX; i++) batch[i] = NAN;
            mm(isa, t, w, K, ROWS, x, n, batch, ROWS);
            for (int j = 0; j < n; j++) {
                checked++;
                for (int r = 0; r < ROWS; r++) {
                    if (memcmp(&batch[j * ROWS + r], &alone[j * ROWS + r], sizeof(float)) != 0) {
                        if (bad++ < 3)
                            ig_test_fail_at(__FILE__, __LINE__,
                                            "%s %s: token %d in a batch of %d, row %d: %.9g alone %.9g", isa->name, ig_dtype_name(t), j, n, r, (double)batch[j * ROWS + r],
                                            (double)alone[j * ROWS + r]);
                        break;
                    }
                }
            }
        }
        CHECK_EQ_INT(checked, 321);
        CHECK_EQ_INT(bad, 0);
    }
    free(w);
    free(wf);
    free(x);
    free(alone);
    free(batch);
}

IG_TEST(invariance_matmul_f16_wide) { check_mm_float_wide(IG_TYPE_F16, 1601, 77); }
IG_TEST(invariance_matmul_bf16_wide) { check_mm_float_wide(IG_TYPE_BF16, 1601, 77); }
IG_TEST(invariance_matmul_f32_wide) { check_mm_float_wide(IG_TYPE_F32, 1601, 77); }
/* Three element blocks (the last of 7 steps, a 4-element tail) and ranges
 * of 13 and 31 rows: AVX2 panels of 2, 3 and 1 row vectors. */
IG_TEST(invariance_matmul_f16_blocks) { check_mm_float_wide(IG_TYPE_F16, 2100, 44); }

IG_TEST(invariance_matmul_q8_0) { check_mm_type(IG_TYPE_Q8_0); }
IG_TEST(invariance_matmul_q4_0) { check_mm_type(IG_TYPE_Q4_0); }
IG_TEST(invariance_matmul_q5_0) { check_mm_type(IG_TYPE_Q5_0); }
IG_TEST(invariance_matmul_q4_K) { check_mm_type(IG_TYPE_Q4_K); }
IG_TEST(invariance_matmul_q5_K) { check_mm_type(IG_TYPE_Q5_K); }
IG_TEST(invariance_matmul_q6_K) { check_mm_type(IG_TYPE_Q6_K); }
IG_TEST(invariance_matmul_f16) { check_mm_type(IG_TYPE_F16); }
IG_TEST(invariance_matmul_bf16) { check_mm_type(IG_TYPE_BF16); }
IG_TEST(invariance_matmul_f32) { check_mm_type(IG_TYPE_F32); }

/* ---- attention blocks --------------------------------------------------------- */

/* Query rows at positions 70..85 with a 21-key window (ranges starting at
 * 50..65, seldom on a tile boundary) or none, each alone and in blocks of
 * 2..16 consecutive rows. */
static void check_attn(const ig_mm_isa *isa, bool f16, int window) {
    enum { HD = 40, CAP = 128, R = 16 };
    float *kf = malloc(sizeof(float) * HD * CAP), *vf = malloc(sizeof(float) * HD * CAP);
    uint16_t *kh = malloc(2 * HD * CAP), *vh = malloc(2 * HD * CAP);
    float *q = malloc(sizeof(float) * HD * R), *alone = malloc(sizeof(float) * HD * R);
    float *o = malloc(sizeof(float) * HD * R);
    float *scratch = ig_aligned_alloc(64, sizeof(float) * ig_attn_scratch_floats(HD, HD));
    REQUIRE(kf && vf && kh && vh && q && alone && o && scratch);
    for (int i = 0; i < HD * CAP; i++) {
        kh[i] = ig_f32_to_f16(frand() * 3.0f);
        vh[i] = ig_f32_to_f16(frand());
        kf[i] = ig_f16_to_f32(kh[i]) + frand() * 1e-3f;
        vf[i] = ig_f16_to_f32(vh[i]) + frand() * 1e-3f;
    }
    for (int i = 0; i < HD * R; i++) q[i] = frand();
    ig_attn_block b;
    memset(&b, 0, sizeof b);
    b.k = f16 ? (const void *)kh : (const void *)kf;
    b.v = f16 ? (const void *)vh : (const void *)vf;
    b.kstride = b.vstride = HD;
    b.cap = CAP;
    b.f16 = f16;
    b.hd = b.hdv = HD;
    b.scale = 0.3f;
    b.softcap = 0;
    b.scratch = scratch;
    int bad = 0;
    for (int len = 1; len <= R; len++) {
        for (int r0 = 0; r0 + len <= R; r0 += len) {
            b.n_rows = len;
            b.jlo = INT32_MAX;
            b.jhi = -1;
            for (int i = 0; i < len; i++) {
                const int r = r0 + i, p = 70 + r;
                b.q[i] = q + r * HD;
                b.o[i] = (len == 1 ? alone : o) + r * HD;
                b.lo[i] = window ? p - window + 1 : 0;
                b.hi[i] = p;
                b.jlo = IG_MIN(b.jlo, b.lo[i]);
                b.jhi = IG_MAX(b.jhi, p);
            }
            isa->attn(&b);
            if (len > 1)
                for (int i = 0; i < len; i++)
                    if (memcmp(o + (r0 + i) * HD, alone + (r0 + i) * HD, sizeof(float) * HD) != 0 && bad++ < 3)
                        ig_test_fail_at(__FILE__, __LINE__, "%s attention (%s, window %d): row %d differs in a block of %d",
                                        isa->name, f16 ? "f16" : "f32", window, r0 + i, len);
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* the rows' outputs are real results, not untouched memory */
    for (int i = 0; i < HD * R; i++) CHECK(isfinite(alone[i]) && fabsf(alone[i]) <= 1.0f);
    free(kf);
    free(vf);
    free(kh);
    free(vh);
    free(q);
    free(alone);
    free(o);
    ig_aligned_free(scratch);
}

IG_TEST(invariance_attention_blocks) {
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    for (int a = 0; a < n_isa; a++)
        for (int f = 0; f < 2; f++) {
            check_attn(isas[a], f, 21);
            check_attn(isas[a], f, 0);
        }
}

/* ---- the engine ----------------------------------------------------------------- */

/* Feeds toks[0..n) to sequence 0 in steps of `chunk`, each step led by up to
 * `chunk` tokens of `other` for sequence 1 when n_other > 0; the logits of
 * position i go to out + i * vocab. */
static ig_status feed(ig_context *ctx, const int32_t *toks, int n, int chunk, const int32_t *other, int n_other,
                      float *out, int vocab) {
    int32_t tk[128], pos[128], seq[128];
    uint8_t want[128];
    if (chunk > 64) return IG_ERR_INVALID_ARG;
    for (int i = 0, j = 0; i < n || j < n_other;) {
        int m = 0;
        for (int c = 0; c < chunk && j < n_other; c++, j++, m++) tk[m] = other[j], pos[m] = j, seq[m] = 1, want[m] = 0;
        const int first = m;
        for (int c = 0; c < chunk && i < n; c++, i++, m++) tk[m] = toks[i], pos[m] = i, seq[m] = 0, want[m] = 1;
        ig_batch b = {m, tk, pos, seq, want};
        IG_TRY(ig_decode(ctx, &b));
        for (int r = 0; r < m - first; r++) {
            const float *l = ig_get_logits(ctx, r);
            if (!l) return IG_ERR_INTERNAL;
            memcpy(out + (size_t)pos[first + r] * (size_t)vocab, l, sizeof(float) * (size_t)vocab);
        }
    }
    return IG_OK;
}

/* Loads path with IGNIS_CPU = isa, threads threads; checks every chunking
 * against the all-at-once logits. */
static void check_engine(const char *path, const char *isa, int threads, int n, ig_kv_type kv) {
    const char *old = getenv("IGNIS_CPU");
    char *saved = old ? strdup(old) : NULL;
    setenv("IGNIS_CPU", isa, 1);
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = threads;
    ig_model *m = NULL;
    const ig_status ls = ig_model_load(path, &mp, &m);
    if (saved) setenv("IGNIS_CPU", saved, 1);
    else unsetenv("IGNIS_CPU");
    free(saved);
    CHECK_STATUS(ls, IG_OK);
    if (!m) return;
    const int vocab = ig_model_hparams(m)->n_vocab;
    int32_t toks[64], other[64];
    for (int i = 0; i < n; i++) {
        toks[i] = i == 0 ? 2 : (int32_t)((i * 7919 + 11) % (vocab - 3)) + 3;
        other[i] = i == 0 ? 2 : (int32_t)((i * 104729 + 5) % (vocab - 3)) + 3;
    }
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n;
    cp.n_seq = 2;
    cp.n_batch = 2 * n;
    cp.kv_type = kv;
    ig_context *ctx = NULL;
    const size_t sz = (size_t)n * (size_t)vocab;
    float *ref = malloc(sizeof(float) * sz), *got = malloc(sizeof(float) * sz);
    if (!ref || !got || ig_context_create(m, &cp, &ctx) != IG_OK) {
        CHECK(!"context");
        goto done;
    }
    const ig_status fs = feed(ctx, toks, n, n, NULL, 0, ref, vocab);
    CHECK_STATUS(fs, IG_OK);
    if (fs != IG_OK) goto done;
    static const struct {
        int chunk, mixed;
    } modes[] = {{1, 0}, {3, 0}, {7, 0}, {4, 1}, {1, 1}};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        ig_seq_clear(ctx, 0);
        ig_seq_clear(ctx, 1);
        for (size_t i = 0; i < sz; i++) got[i] = NAN;
        CHECK_STATUS(feed(ctx, toks, n, modes[k].chunk, modes[k].mixed ? other : NULL, modes[k].mixed ? n : 0, got, vocab),
                     IG_OK);
        for (int p = 0; p < n; p++) {
            const float *a = ref + (size_t)p * vocab, *b = got + (size_t)p * vocab;
            if (memcmp(a, b, sizeof(float) * (size_t)vocab) != 0) {
                int v = 0;
                while (v < vocab && a[v] == b[v]) v++;
                ig_test_fail_at(__FILE__, __LINE__, "%s %s -t %d: chunks of %d%s: position %d, logit %d: %.9g vs %.9g",
                                path, isa, threads, modes[k].chunk, modes[k].mixed ? " with another sequence" : "", p,
                                v, v < vocab ? (double)b[v] : 0.0, v < vocab ? (double)a[v] : 0.0);
                break;
            }
        }
    }
    /* the logits are real: finite and not all equal */
    int finite = 0;
    for (size_t i = 0; i < sz; i++) finite += isfinite(ref[i]) != 0;
    CHECK_EQ_INT(finite, (long long)sz);
    CHECK(ref[0] != ref[1] || ref[1] != ref[2]);
done:
    ig_context_free(ctx);
    ig_model_free(m);
    free(ref);
    free(got);
}

IG_TEST(invariance_engine_tiny_f32) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/tiny-1b-like/f32", ig_test_fixtures());
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    for (int a = 0; a < n_isa; a++)
        for (int t = 1; t <= 2; t++) {
            check_engine(path, isas[a]->name, t, 40, IG_KV_F32);
            check_engine(path, isas[a]->name, t, 40, IG_KV_F16);
        }
}

IG_TEST(invariance_engine_synth_q4_k_m) {
    char path[] = "/tmp/ignis-invariance-XXXXXX";
    ig_synth_params p = {0};
    p.size = "270m";
    p.ftype = IG_SYNTH_Q4_K_M;
    p.n_layer = 2;
    p.seed = 7;
    REQUIRE(ig_test_write_synth(&p, path));
    const ig_mm_isa *isas[8];
    const int n_isa = ig_mm_isa_available(isas, 8);
    for (int a = 0; a < n_isa; a++) {
        const bool scalar = isas[a] == &ig_mm_isa_scalar; /* slow: fewer tokens */
        for (int t = 1; t <= 2; t++) check_engine(path, isas[a]->name, t, scalar ? 4 : 12, IG_KV_F16);
    }
    unlink(path);
}
