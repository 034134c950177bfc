/* AVX2 (+FMA, F16C) matmul kernels: the same structure as the AVX-512
 * ones (see matmul_avx512.c) with 256-bit registers and vpmaddubsw +
 * vpmaddwd instead of VNNI.
 *
 * vpmaddubsw adds two u8 x s8 products into a saturating int16, so every
 * pairing is chosen to stay below 32767: weights 0..31 (Q4_0/Q5_0, Q4_K,
 * Q5_K) or |q - 32| <= 32 (Q6_K) against activations of at most 255;
 * Q8_0 weights (|w| <= 127) against signed activations with the
 * abs/sign trick (|w| * sign(x, w), at most 2 * 127 * 127). */
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/ops_simd.h"
#include "backend/cpu/simd_avx2.h"
#include "core/util.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float f16_to_f32(const uint8_t *p) { return _cvtsh_ss(ig_ld16(p)); }

static ALWAYS_INLINE int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static ALWAYS_INLINE __m256 abs256(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* ---- Activation quantization ---------------------------------------------- */

/* 32 int32 lanes (4 vectors) -> 32 int8 in order. */
static ALWAYS_INLINE __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quant_row_avx2(ig_act_kind kind, const float *x, int64_t k, uint8_t *dst) {
    if (kind == IG_ACT_Q8_0) {
        const int64_t nb = k / IG_QK;
        float *d = (float *)(void *)(dst + k);
        int32_t *s = (int32_t *)(void *)(dst + k + 4 * nb);
        for (int64_t b = 0; b < nb; b++) {
            __m256 v[4];
            for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            const float amax = ig_hmax256(_mm256_max_ps(_mm256_max_ps(abs256(v[0]), abs256(v[1])),
                                                     _mm256_max_ps(abs256(v[2]), abs256(v[3]))));
            /* as ig_quantize_row_q8_0_act: 127/amax, nearest even */
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m256i q[4];
            for (int i = 0; i < 4; i++) {
                /* max(NaN, lo) gives lo */
                __m256 p = _mm256_max_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)), _mm256_set1_ps(-127.0f));
                p = _mm256_min_ps(p, _mm256_set1_ps(127.0f));
                q[i] = _mm256_cvtps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
            _mm256_storeu_si256((__m256i *)(void *)(dst + 32 * b), pack32(q[0], q[1], q[2], q[3]));
            s[b] = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        }
    } else if (kind == IG_ACT_Q8_K) {
        const int64_t nb = k / IG_QK_K;
        float *d = (float *)(void *)(dst + k);
        int16_t *bs = (int16_t *)(void *)(dst + k + 4 * nb);
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + IG_QK_K * b;
            __m256 vmax = _mm256_setzero_ps();
            for (int j = 0; j < 32; j++) vmax = _mm256_max_ps(vmax, abs256(_mm256_loadu_ps(xb + 8 * j)));
            const float amax = ig_hmax256(vmax);
            int8_t *q = (int8_t *)dst + IG_QK_K * b;
            if (!(amax > 0.0f) || !isfinite(amax)) {
                d[b] = 0.0f;
                memset(q, 0, IG_QK_K);
                memset(bs + 16 * b, 0, 32);
                memset(dst + k + 4 * nb + 2 * (k / 16) + 8 * b, 1, 8);
                continue;
            }
            float max = amax;
            for (int j = 0; j < IG_QK_K; j++)
                if (fabsf(xb[j]) == amax) {
                    max = xb[j];
                    break;
                }
            const float iscale = -127.0f / max;
            uint8_t *tr = dst + k + 4 * nb + 2 * (k / 16) + 8 * b;
            for (int j = 0; j < 8; j++) { /* runs of 32: t, then q with iscale * 8/t */
                __m256 v[4];
                for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(xb + 32 * j + 8 * i);
                const float a = ig_hmax256(_mm256_max_ps(_mm256_max_ps(abs256(v[0]), abs256(v[1])),
                                                         _mm256_max_ps(abs256(v[2]), abs256(v[3]))));
                const int t = ig_q8k_run_t(a, amax);
                const __m256 vs = _mm256_set1_ps(iscale * ig_q8k_mul[t]);
                __m256i qi[4];
                for (int i = 0; i < 4; i++) {
                    __m256 w = _mm256_mul_ps(vs, v[i]);
                    w = _mm256_max_ps(_mm256_set1_ps(-128.0f), _mm256_min_ps(_mm256_set1_ps(127.0f), w));
                    qi[i] = _mm256_cvtps_epi32(w); /* nearest, ties to even */
                }
                _mm256_storeu_si256((__m256i *)(void *)(q + 32 * j), pack32(qi[0], qi[1], qi[2], qi[3]));
                bs[16 * b + 2 * j] = (int16_t)(t * hsum_epi32(_mm256_add_epi32(qi[0], qi[1])));
                bs[16 * b + 2 * j + 1] = (int16_t)(t * hsum_epi32(_mm256_add_epi32(qi[2], qi[3])));
                tr[j] = (uint8_t)t;
            }
            d[b] = (1.0f / iscale) * 0.125f;
        }
    }
}

/* ---- Float weights ---------------------------------------------------------- */

/* 8 weights from element i (n - i >= 8), or the tail zero-padded. */
static ALWAYS_INLINE __m256 load_w8(ig_dtype t, const uint8_t *row, int64_t i, int64_t n) {
    if (n - i >= 8) {
        if (t == IG_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 4 * i));
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i));
        if (t == IG_TYPE_F16) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    float tmp[8] = {0};
    const size_t es = t == IG_TYPE_F32 ? 4 : 2;
    uint8_t raw[32] = {0};
    memcpy(raw, row + es * (size_t)i, es * (size_t)(n - i));
    if (t == IG_TYPE_F32) memcpy(tmp, raw, 32);
    else {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)raw);
        _mm256_storeu_ps(tmp, t == IG_TYPE_F16 ? _mm256_cvtph_ps(h)
                                               : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    return _mm256_loadu_ps(tmp);
}

static ALWAYS_INLINE __m256 load_x8(const float *x, int64_t i, int64_t n) {
    if (n - i >= 8) return _mm256_loadu_ps(x + i);
    float tmp[8] = {0};
    memcpy(tmp, x + i, sizeof(float) * (size_t)(n - i));
    return _mm256_loadu_ps(tmp);
}

/* Rows r .. r + vr - 1 (vr <= 4, read straight from the weights) with
 * T <= 3 tokens: for each (row, token) one 8-lane accumulator over the
 * elements in steps of 8 (the tail zero-padded), then ig_hsum256, exactly as
 * float_micro does for batches (lane by lane); 4 rows' chains side by
 * side hide the FMA latency. The next four rows are prefetched meanwhile (up
 * to pf_end), the bytes of one step of theirs per step. */
static ALWAYS_INLINE void float_row4(const ig_mm *m, ig_dtype t, int64_t r, int vr, const int T,
                                     const uint8_t *pf_end) {
    const uint8_t *row[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) row[i] = m->w + (size_t)(r + IG_MIN(i, vr - 1)) * m->row_bytes;
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[i][j] = _mm256_setzero_ps();
    const int64_t k = m->k;
    const uint8_t *pf = row[0] + 4 * m->row_bytes;
    const size_t pf_bytes = pf < pf_end ? IG_MIN(4 * m->row_bytes, (size_t)(pf_end - pf)) : 0;
    const size_t pf_step = 4 * 8 * (t == IG_TYPE_F32 ? 4 : 2); /* 4 rows x 8 elements: 64 or 128 */
    for (int64_t e = 0; e < k; e += 8) {
        const size_t pfo = (size_t)(e / 8) * pf_step;
        if (pfo < pf_bytes) {
            _mm_prefetch((const char *)(pf + pfo), _MM_HINT_T0);
            if (pf_step > 64) _mm_prefetch((const char *)(pf + pfo + 64), _MM_HINT_T0);
        }
        __m256 xv[3];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) xv[j] = load_x8(m->x + (int64_t)j * m->ldx, e, k);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256 wv = load_w8(t, row[i], e, k);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    float out[4][3]; /* constant indices only, so that acc stays in registers */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) out[i][j] = ig_hsum256(acc[i][j]);
    for (int i = 0; i < vr; i++)
        for (int j = 0; j < T; j++) m->y[(int64_t)j * m->ldy + r + i] = out[i][j];
}

/* In-register transpose: o[c] lane i = r[i] lane c. */
static ALWAYS_INLINE void transpose8(const __m256 r[8], __m256 o[8]) {
    __m256 a[8], b[8];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        a[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
        a[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
    }
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) {
        b[4 * q] = _mm256_shuffle_ps(a[4 * q], a[4 * q + 2], _MM_SHUFFLE(1, 0, 1, 0));
        b[4 * q + 1] = _mm256_shuffle_ps(a[4 * q], a[4 * q + 2], _MM_SHUFFLE(3, 2, 3, 2));
        b[4 * q + 2] = _mm256_shuffle_ps(a[4 * q + 1], a[4 * q + 3], _MM_SHUFFLE(1, 0, 1, 0));
        b[4 * q + 3] = _mm256_shuffle_ps(a[4 * q + 1], a[4 * q + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        o[c] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x20);
        o[c + 4] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x31);
    }
}

/* Many tokens: a panel of FP_R rows is converted to f32 once and stored
 * transposed and by stripe: element e = 8 j + l of the panel's rows side by
 * side at wp + (l J + j) FP_R (J = kp / 8; rows past the range and elements
 * past k zero). For each stripe l the micro-kernel keeps y[t][r .. r+FP_R)
 * of FP_T tokens in FP_RV x FP_T registers and walks j with one FMA per
 * (row vector, token), x[t][8 j + l] broadcast from memory: lane l of
 * float_row4's accumulator, FMA for FMA. The 8 stripes' sums are then added
 * with ig_hsum256's tree, so that every result is the mat-vec's, bit for bit,
 * whatever the batch. */
#define FP_RV 3 /* row vectors: 3 x 4 accumulators, 3 loads and 4 broadcasts per 12 FMAs */
#define FP_T 4
#define FP_KC 1024
#define FP_R (8 * FP_RV)

/* Rows [r, r + vr) -> wp; st: 8 rows of kp, staging (each row converted in
 * order, then transposed in 8 x 8 blocks in registers). */
static ALWAYS_INLINE void float_pack(const ig_mm *m, ig_dtype t, int64_t r, int vr, int64_t kp, float *wp,
                                     float *st) {
    const int64_t nj = kp / 8;
    for (int h = 0; h * 8 < vr; h++) {
        const int live = IG_MIN(8, vr - 8 * h);
        for (int i = 0; i < live; i++) {
            const uint8_t *row = m->w + (size_t)(r + 8 * h + i) * m->row_bytes;
            for (int64_t e = 0; e < kp; e += 8) _mm256_store_ps(st + i * kp + e, load_w8(t, row, e, m->k));
        }
        for (int64_t e = 0; e < kp; e += 8) {
            __m256 v[8], o[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) v[i] = i < live ? _mm256_load_ps(st + i * kp + e) : _mm256_setzero_ps();
            transpose8(v, o);
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) _mm256_store_ps(wp + ((int64_t)c * nj + e / 8) * FP_R + 8 * h, o[c]);
        }
    }
}

/* y[tok + t][r .. r + vr) = panel x token t, t < T, R vectors of rows;
 * sb: the stripes' sums, 8 x FP_T x FP_RV vectors. The elements are taken
 * in blocks of FP_KC, each block's 8 stripes before the next block (each
 * stripe's chain carried over in sb, FMA for FMA the same): the T tokens'
 * x of one block stay in L1 for its 8 stripes, where whole rows of 2048
 * elements (8 KiB apart, one cache set) would not. */
static ALWAYS_INLINE void float_micro(const ig_mm *m, const float *wp, int64_t nj, int64_t r,
                                      int vr, int tok, float *sb, const int R, const int T) {
    const int64_t ldx = m->ldx;
    for (int64_t j0 = 0; j0 < nj; j0 += FP_KC / 8) {
        const int64_t j1 = IG_MIN(nj, j0 + FP_KC / 8);
        for (int l = 0; l < 8; l++) {
            float *sl = sb + l * FP_T * FP_RV * 8;
            __m256 acc[FP_T][FP_RV];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
#pragma GCC unroll 4
                for (int h = 0; h < R; h++)
                    acc[t][h] = j0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(sl + (t * FP_RV + h) * 8);
            const float *w = wp + (int64_t)l * nj * FP_R, *x = m->x + (int64_t)tok * ldx + l;
            const int64_t ne = (m->k - l + 7) / 8; /* elements 8 j + l < k */
            const int64_t je = IG_MIN(j1, ne);
#pragma GCC unroll 2
            for (int64_t j = j0; j < je; j++) {
                __m256 wv[FP_RV];
#pragma GCC unroll 4
                for (int h = 0; h < R; h++) wv[h] = _mm256_load_ps(w + j * FP_R + 8 * h);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m256 xb = _mm256_broadcast_ss(x + t * ldx + j * 8);
#pragma GCC unroll 4
                    for (int h = 0; h < R; h++) acc[t][h] = _mm256_fmadd_ps(wv[h], xb, acc[t][h]);
                }
            }
            if (j1 == nj && ne < nj) /* the mat-vec's zero-padded tail: an FMA of zeros, + 0 */
#pragma GCC unroll 8
                for (int t = 0; t < T; t++)
#pragma GCC unroll 4
                    for (int h = 0; h < R; h++) acc[t][h] = _mm256_add_ps(acc[t][h], _mm256_setzero_ps());
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
#pragma GCC unroll 4
                for (int h = 0; h < R; h++) _mm256_store_ps(sl + (t * FP_RV + h) * 8, acc[t][h]);
        }
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < R; h++) {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(vr - 8 * h), lane);
        for (int t = 0; t < T; t++) {
            __m256 s[8];
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) s[l] = _mm256_load_ps(sb + ((l * FP_T + t) * FP_RV + h) * 8);
            /* ig_hsum256: lanes l and l + 4, then 0 and 2, 1 and 3, then 0 and 1 */
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) s[l] = _mm256_add_ps(s[l], s[l + 4]);
            s[0] = _mm256_add_ps(s[0], s[2]);
            s[1] = _mm256_add_ps(s[1], s[3]);
            s[0] = _mm256_add_ps(s[0], s[1]);
            float *y = m->y + (int64_t)(tok + t) * m->ldy + r + 8 * h;
            if (vr - 8 * h >= 8) _mm256_storeu_ps(y, s[0]);
            else _mm256_maskstore_ps(y, mask, s[0]);
        }
    }
}

static ALWAYS_INLINE void float_micro_r(const ig_mm *m, const float *wp, int64_t nj, int64_t r,
                                        int vr, int tok, float *sb, const int T) {
    if (vr > 16) float_micro(m, wp, nj, r, vr, tok, sb, 3, T);
    else if (vr > 8) float_micro(m, wp, nj, r, vr, tok, sb, 2, T);
    else float_micro(m, wp, nj, r, vr, tok, sb, 1, T);
}

/* T tokens from tok, 1 <= T <= FP_T. */
static void float_micro_n(const ig_mm *m, const float *wp, int64_t nj, int64_t r, int vr, int tok,
                          float *sb, int T) {
    switch (T) {
    case 1: float_micro_r(m, wp, nj, r, vr, tok, sb, 1); break;
    case 2: float_micro_r(m, wp, nj, r, vr, tok, sb, 2); break;
    case 3: float_micro_r(m, wp, nj, r, vr, tok, sb, 3); break;
    default: float_micro_r(m, wp, nj, r, vr, tok, sb, FP_T); break;
    }
}

/* Scratch of float_panels: the panel, staging, the stripes' sums. */
static size_t float_scratch(int64_t k) {
    const int64_t kp = (k + 7) & ~(int64_t)7;
    return sizeof(float) * (size_t)((FP_R + 8) * kp + 8 * FP_T * FP_RV * 8) + 64;
}

static ALWAYS_INLINE void float_panels(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1, float *wp) {
    const int64_t kp = (m->k + 7) & ~(int64_t)7, nj = kp / 8;
    float *st = wp + FP_R * kp, *sb = st + 8 * kp;
    for (int64_t r = r0; r < r1; r += FP_R) {
        const int vr = (int)IG_MIN(FP_R, r1 - r);
        float_pack(m, t, r, vr, kp, wp, st);
        /* Blocks of at most FP_T tokens, as even as can be. */
        const int nblk = (m->n + FP_T - 1) / FP_T;
        for (int b = 0, tok = 0; b < nblk; b++) {
            const int T = m->n / nblk + (b < m->n % nblk);
            float_micro_n(m, wp, nj, r, vr, tok, sb, T);
            tok += T;
        }
    }
}

/* 2 rows x 4 tokens from rows converted to f32 (wf: 2 rows of k floats);
 * pf (unless NULL): bytes to fetch meanwhile, pstep of them per 8 elements
 * (the next tile's rows, so that reading them overlaps this arithmetic). */
static ALWAYS_INLINE void float_tile(const ig_mm *m, const float *wf, int vr, int64_t r, int tok,
                                     const uint8_t *pf, size_t pstep, const int T) {
    __m256 acc[2][4];
#pragma GCC unroll 4
    for (int i = 0; i < 2; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[i][j] = _mm256_setzero_ps();
    const int64_t k = m->k;
    for (int64_t e = 0; e < k; e += 8) {
        if (pf) _mm_prefetch((const char *)pf + (size_t)(e / 8) * pstep, _MM_HINT_T1);
        __m256 xv[4];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) xv[j] = load_x8(m->x + (int64_t)(tok + j) * m->ldx, e, k);
#pragma GCC unroll 4
        for (int i = 0; i < 2; i++) {
            const __m256 wv = _mm256_loadu_ps(wf + i * ((k + 7) & ~7) + e);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    float out[2][4]; /* constant indices only, so that acc stays in registers */
#pragma GCC unroll 4
    for (int i = 0; i < 2; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) out[i][j] = ig_hsum256(acc[i][j]);
    for (int i = 0; i < vr; i++)
        for (int j = 0; j < T; j++) m->y[(int64_t)(tok + j) * m->ldy + r + i] = out[i][j];
}

/* 4 to 15 tokens: rows converted to f32 one tile at a time, dot products
 * (the panels' packing costs more than it saves for so few). */
static ALWAYS_INLINE void float_rows_few(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1, float *wf) {
    const int64_t kp = (m->k + 7) & ~(int64_t)7;
    for (int64_t r = r0; r < r1; r += 2) {
        const int vr = (int)IG_MIN(2, r1 - r);
        for (int i = 0; i < 2; i++) {
            float *dst = wf + i * kp;
            if (i < vr) {
                const uint8_t *row = m->w + (size_t)(r + i) * m->row_bytes;
                for (int64_t e = 0; e < kp; e += 8) _mm256_storeu_ps(dst + e, load_w8(t, row, e, m->k));
            } else {
                memset(dst, 0, (size_t)kp * sizeof(float));
            }
        }
        /* rows r + 2, r + 3: 2 k es bytes over k / 8 steps */
        const uint8_t *pf = r + 2 < r1 ? m->w + (size_t)(r + 2) * m->row_bytes : NULL;
        const size_t pstep = 16 * (t == IG_TYPE_F32 ? 4 : 2);
        int tok = 0;
        for (; tok + 4 <= m->n; tok += 4, pf = NULL) float_tile(m, wf, vr, r, tok, pf, pstep, 4);
        for (; tok < m->n; tok++, pf = NULL) float_tile(m, wf, vr, r, tok, pf, pstep, 1);
    }
}

/* Out of line, so that its loops are register-allocated on their own. */
static __attribute__((noinline)) void float_rows_few_any(const ig_mm *m, int64_t r0, int64_t r1, float *wf) {
    if (m->n < 16) {
        if (m->type == IG_TYPE_F32) float_rows_few(m, IG_TYPE_F32, r0, r1, wf);
        else if (m->type == IG_TYPE_F16) float_rows_few(m, IG_TYPE_F16, r0, r1, wf);
        else float_rows_few(m, IG_TYPE_BF16, r0, r1, wf);
        return;
    }
    if (m->type == IG_TYPE_F32) float_panels(m, IG_TYPE_F32, r0, r1, wf);
    else if (m->type == IG_TYPE_F16) float_panels(m, IG_TYPE_F16, r0, r1, wf);
    else float_panels(m, IG_TYPE_BF16, r0, r1, wf);
}

/* Every batch size forms each result the same way (see float_row4), so that
 * a token's result does not depend on the batch. */
static ALWAYS_INLINE void float_rows_t(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1, float *wf) {
    if (m->n < 4) {
        const uint8_t *end = m->w + (size_t)r1 * m->row_bytes;
        for (int64_t r = r0; r < r1; r += 4) {
            const int vr = (int)IG_MIN(4, r1 - r);
            if (m->n == 1) float_row4(m, t, r, vr, 1, end);
            else if (m->n == 2) float_row4(m, t, r, vr, 2, end);
            else float_row4(m, t, r, vr, 3, end);
        }
        return;
    }
    float_rows_few_any(m, r0, r1, wf);
}

static void float_rows(const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    if (m->type == IG_TYPE_F32) float_rows_t(m, IG_TYPE_F32, r0, r1, scratch);
    else if (m->type == IG_TYPE_F16) float_rows_t(m, IG_TYPE_F16, r0, r1, scratch);
    else float_rows_t(m, IG_TYPE_BF16, r0, r1, scratch);
}

/* ---- Block decoding ------------------------------------------------------- */

static ALWAYS_INLINE __m256i nibbles32(const uint8_t *qs) {
    /* the 16 bytes in both halves (a load), the high half shifted by 4 */
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

/* 0xff in byte i where bit i of the 32-bit value is set. */
static ALWAYS_INLINE __m256i bits_to_bytes(uint32_t bits) {
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                          _mm256_setr_epi64x(0x0000000000000000ll, 0x0101010101010101ll,
                                                             0x0202020202020202ll, 0x0303030303030303ll));
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

/* Unsigned values of a 32-element block (q for Q4_0/Q5_0). */
static ALWAYS_INLINE __m256i dec_u32(ig_dtype t, const uint8_t *blk) {
    if (t == IG_TYPE_Q4_0) return nibbles32(blk + 2);
    const __m256i q = nibbles32(blk + 6);
    return _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(ig_ld32(blk + 2)), _mm256_set1_epi8(16)));
}

static ALWAYS_INLINE int off_u32(ig_dtype t) { return t == IG_TYPE_Q4_0 ? 8 : 16; }

/* 32 values 0..15 of half `hi` of chunk c of a Q4_K block. */
static ALWAYS_INLINE __m256i q4k_half(const uint8_t *qs32, int hi) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)qs32);
    return _mm256_and_si256(hi ? _mm256_srli_epi16(b, 4) : b, _mm256_set1_epi8(0x0f));
}

/* Sub-block g (32 elements) of a Q5_K block. */
static ALWAYS_INLINE __m256i q5k_sub(const uint8_t *blk, int g) {
    const __m256i q = q4k_half(blk + 48 + 32 * (g / 2), g & 1);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 16));
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(h, g), _mm256_set1_epi8(1));
    return _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
}

/* Elements 32k .. 32k+31 (0..63) of half h of a Q6_K block. */
static ALWAYS_INLINE __m256i q6k_sub(const uint8_t *blk, int h, int k) {
    const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 64 * h + 32 * (k & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h));
    const __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

static ALWAYS_INLINE void k_scales(const uint8_t *blk, uint64_t *sc, uint64_t *mn) {
    const uint32_t u0 = ig_ld32(blk + 4), u1 = ig_ld32(blk + 8), u2 = ig_ld32(blk + 12);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *mn = (uint64_t)m_lo | ((uint64_t)m_hi << 32);
}

/* ---- Matrix-vector kernels (rows layout) ---------------------------------- */

static ALWAYS_INLINE __m256i dot32(ig_dtype t, __m256i q, __m256i x) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == IG_TYPE_Q8_0)
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), ones);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones);
}

/* 32-element blocks, 8 rows side by side (so that a token's result is
 * computed with the same operations as in the grouped kernels and the
 * scalar reference, whatever the batch): per block, each row's exact integer
 * sum, folded into one lane, then acc += (float)isum * (dw * dx) lane by
 * lane, blocks in order. */

/* d[i]: 8 partial sums -> lane i = their sum. Unpacks and adds rather than
 * vphaddd, which costs twice the shuffle-port time of an unpack on Zen. */
static ALWAYS_INLINE __m256i fold2(__m256i a, __m256i b) { /* per half: a0+a2, b0+b2, a1+a3, b1+b3 */
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
static ALWAYS_INLINE __m256i fold8(const __m256i d[8]) {
    const __m256i e01 = fold2(d[0], d[1]), e23 = fold2(d[2], d[3]);
    const __m256i e45 = fold2(d[4], d[5]), e67 = fold2(d[6], d[7]);
    /* per half: the four vectors' sums of that half, in order */
    const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi64(e01, e23), _mm256_unpackhi_epi64(e01, e23));
    const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi64(e45, e67), _mm256_unpackhi_epi64(e45, e67));
    /* (a.lo + a.hi, b.hi + b.lo): a blend is cheaper than a second lane swap */
    return _mm256_add_epi32(_mm256_blend_epi32(a, b, 0xf0), _mm256_permute2x128_si256(a, b, 0x21));
}

/* Rows [r, r + vr), vr <= 8, tokens tok .. tok + T - 1. */
static ALWAYS_INLINE void q32_tile(const ig_mm *m, ig_dtype t, int64_t r, int vr, int tok, const int T) {
    const int64_t k = m->k, nb = k / IG_QK;
    const size_t bb = ig_blk_bytes(t);
    const int off = t == IG_TYPE_Q8_0 ? 0 : off_u32(t);
    const uint8_t *row[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) row[i] = m->w + (size_t)(r + IG_MIN(i, vr - 1)) * m->row_bytes;
    const int8_t *xq[3];
    const float *xd[3];
    const int32_t *xs[3];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) {
        const uint8_t *a = m->act + (size_t)(tok + j) * m->act_stride;
        xq[j] = ig_act_q(a);
        xd[j] = ig_act_d(a, k);
        xs[j] = ig_act_s(a, k);
    }
    __m256 acc[3];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t bo = (size_t)b * bb;
        __m256i w[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            w[i] = t == IG_TYPE_Q8_0 ? _mm256_loadu_si256((const __m256i *)(const void *)(row[i] + bo + 2))
                                     : dec_u32(t, row[i] + bo);
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(
            (short)ig_ld16(row[0] + bo), (short)ig_ld16(row[1] + bo), (short)ig_ld16(row[2] + bo),
            (short)ig_ld16(row[3] + bo), (short)ig_ld16(row[4] + bo), (short)ig_ld16(row[5] + bo),
            (short)ig_ld16(row[6] + bo), (short)ig_ld16(row[7] + bo)));
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const __m256i xv = _mm256_load_si256((const __m256i *)(const void *)(xq[j] + 32 * b));
            __m256i d[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) d[i] = dot32(t, w[i], xv);
            const __m256i isum = _mm256_sub_epi32(fold8(d), _mm256_set1_epi32(off * xs[j][b]));
            const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xd[j][b]));
            acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dd));
        }
    }
    const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(vr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) {
        float *y = m->y + (int64_t)(tok + j) * m->ldy + r;
        if (vr == 8) _mm256_storeu_ps(y, acc[j]);
        else _mm256_maskstore_ps(y, mk, acc[j]);
    }
}

/* One token (decode): rows read in order, two at a time, so that the
 * hardware prefetcher sees two streams per thread rather than q32_tile's
 * eight. fold8 takes the two rows' next four blocks, so that each lane pair
 * holds the two rows' exact integer sums of one block; the products isum *
 * (dw * dx) are then added to the rows' sums (lanes 0 and 1 of one register)
 * block by block, in order: q32_tile's operations, bit for bit. The scales
 * are put together in general registers (off the vector ports), and the
 * pair after next is prefetched meanwhile (up to pf_end): without it, the
 * hardware prefetcher alone left a 2-vCPU EPYC at half its bandwidth. */
static ALWAYS_INLINE void q32_rows1(const ig_mm *m, ig_dtype t, int64_t r, const int R, const uint8_t *pf_end) {
    const int64_t k = m->k, nb = k / IG_QK;
    const size_t bb = ig_blk_bytes(t);
    const int off = t == IG_TYPE_Q8_0 ? 0 : off_u32(t);
    const uint8_t *a = m->act;
    const int8_t *xq = ig_act_q(a);
    const float *xd = ig_act_d(a, k);
    const int32_t *xs = ig_act_s(a, k);
    const uint8_t *row[2] = {m->w + (size_t)r * m->row_bytes, m->w + (size_t)(r + R - 1) * m->row_bytes};
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    /* a pair's bytes, a share per group of four blocks */
    const uint8_t *pf = row[0] + 4 * m->row_bytes; /* two pairs ahead */
    const int64_t ng = (nb + 3) / 4;
    const size_t pf_bytes = pf < pf_end ? IG_MIN(2 * m->row_bytes, (size_t)(pf_end - pf)) : 0;
    const size_t pf_step = (pf_bytes + (size_t)ng - 1) / (size_t)ng;
    size_t pfo = 0;
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b += 4) {
        const int nv = (int)IG_MIN(4, nb - b);
        for (const size_t lim = IG_MIN(pfo + pf_step, pf_bytes); pfo < lim; pfo += 64)
            _mm_prefetch((const char *)(pf + pfo), _MM_HINT_T0);
        __m256i d[8];
        uint64_t sc[2] = {0, 0};
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const int64_t bi = IG_MIN(b + i, nb - 1); /* past the end: a valid block, lanes unused */
            const __m256i x = _mm256_load_si256((const __m256i *)(const void *)(xq + 32 * bi));
#pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                const uint8_t *blk = row[j] + (size_t)bi * bb;
                const __m256i w = t == IG_TYPE_Q8_0 ? _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2))
                                                    : dec_u32(t, blk);
                d[2 * i + j] = dot32(t, w, x);
                sc[i / 2] |= (uint64_t)ig_ld16(blk) << (16 * (2 * (i & 1) + j));
            }
        }
        __m128i xs4, xd4;
        if (nv == 4) {
            xs4 = _mm_loadu_si128((const __m128i *)(const void *)(xs + b));
            xd4 = _mm_castps_si128(_mm_loadu_ps(xd + b));
        } else {
            int32_t ts[4] = {0, 0, 0, 0};
            float td[4] = {0, 0, 0, 0};
            for (int i = 0; i < nv; i++) ts[i] = xs[b + i], td[i] = xd[b + i];
            xs4 = _mm_loadu_si128((const __m128i *)(const void *)ts);
            xd4 = _mm_castps_si128(_mm_loadu_ps(td));
        }
        const __m256i offs = _mm256_mullo_epi32(_mm256_set1_epi32(off),
                                                _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(xs4), dup));
        const __m256 xdv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castsi128_ps(xd4)), dup);
        const __m256 dw = _mm256_cvtph_ps(_mm_set_epi64x((long long)sc[1], (long long)sc[0]));
        const __m256i isum = _mm256_sub_epi32(fold8(d), offs);
        const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, xdv));
        const __m128 lo = _mm256_castps256_ps128(p), hi = _mm256_extractf128_ps(p, 1);
        acc = _mm_add_ps(acc, lo);
        if (nv > 1) acc = _mm_add_ps(acc, _mm_movehl_ps(lo, lo));
        if (nv > 2) acc = _mm_add_ps(acc, hi);
        if (nv > 3) acc = _mm_add_ps(acc, _mm_movehl_ps(hi, hi));
    }
    m->y[r] = _mm_cvtss_f32(acc);
    if (R == 2) m->y[r + 1] = _mm_cvtss_f32(_mm_movehdup_ps(acc));
}

static ALWAYS_INLINE void q32_rows_t(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1) {
    if (m->n == 1) {
        int64_t r = r0;
        const uint8_t *end = m->w + (size_t)r1 * m->row_bytes;
        for (; r + 2 <= r1; r += 2) q32_rows1(m, t, r, 2, end);
        if (r < r1) q32_rows1(m, t, r, 1, end);
        return;
    }
    for (int64_t r = r0; r < r1; r += 8) {
        const int vr = (int)IG_MIN(8, r1 - r);
        int tok = 0;
        for (; tok + 3 <= m->n; tok += 3) q32_tile(m, t, r, vr, tok, 3);
        if (m->n - tok == 2) q32_tile(m, t, r, vr, tok, 2);
        else if (m->n - tok == 1) q32_tile(m, t, r, vr, tok, 1);
    }
}

/* Exact integer sums of one K-quant block with one token, then the
 * reference's float steps. */
static ALWAYS_INLINE float qk_block(ig_dtype t, const uint8_t *blk, const int8_t *xq, float xd,
                                   const int16_t *bs, const uint8_t *xt) {
    __m256i acc = _mm256_setzero_si256();
    if (t == IG_TYPE_Q6_K) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(const void *)(blk + 192));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const int e = 128 * h + 32 * k; /* sub-blocks e/16, e/16 + 1 */
                const __m256i q = q6k_sub(blk, h, k);
                const __m256i x = _mm256_load_si256((const __m256i *)(const void *)(xq + e));
                const __m256i p = _mm256_maddubs_epi16(q, x);
                const int tx = xt[e / 32];
                const __m256i s = _mm256_inserti128_si256(_mm256_set1_epi16((short)((int8_t)blk[192 + e / 16] * tx)),
                                                          _mm_set1_epi16((short)((int8_t)blk[192 + e / 16 + 1] * tx)), 1);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
            }
        const __m256i b16 = _mm256_loadu_si256((const __m256i *)(const void *)bs);
        const int32_t isum = hsum_epi32(acc) - 32 * hsum_epi32(_mm256_madd_epi16(b16, sc16));
        const float d = f16_to_f32(blk + 208) * xd;
        return d * (float)isum;
    }
    uint64_t sc, mn;
    k_scales(blk, &sc, &mn);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m256i q = t == IG_TYPE_Q4_K ? q4k_half(blk + 16 + 32 * (g / 2), g & 1) : q5k_sub(blk, g);
        const __m256i x = _mm256_load_si256((const __m256i *)(const void *)(xq + 32 * g));
        const __m256i s = _mm256_set1_epi16((short)(((sc >> (8 * g)) & 0xff) * xt[g]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), s));
    }
    const __m128i mv = _mm_cvtsi64_si128((long long)mn);
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
    const __m256i b16 = _mm256_loadu_si256((const __m256i *)(const void *)bs);
    const int32_t isum = hsum_epi32(acc);
    const int32_t imin = hsum_epi32(_mm256_madd_epi16(b16, m16));
    const float d = f16_to_f32(blk) * xd;
    const float dmin = f16_to_f32(blk + 2) * xd;
    const float hi = d * (float)isum;
    const float lo = dmin * (float)imin;
    return hi - lo;
}

static ALWAYS_INLINE void qk_rows_t(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1) {
    const int64_t k = m->k, nb = k / IG_QK_K;
    const size_t bb = ig_blk_bytes(t);
    for (int tok = 0; tok < m->n; tok++) {
        const uint8_t *a = m->act + (size_t)tok * m->act_stride;
        const int8_t *xq = ig_act_q(a);
        const float *xd = ig_act_d(a, k);
        const int16_t *bs = ig_act_bsums(a, k);
        const uint8_t *xt = ig_act_t(a, k);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = m->w + (size_t)r * m->row_bytes;
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++)
                sum += qk_block(t, row + (size_t)b * bb, xq + IG_QK_K * b, xd[b], bs + 16 * b, xt + 8 * b);
            m->y[(int64_t)tok * m->ldy + r] = sum;
        }
    }
}

/* One function per type, out of line: each is register-allocated on its
 * own, and profiles tell the types apart. */
#define ROWS_FN(name, body)                                                                        \
    static __attribute__((noinline)) void name(const ig_mm *m, int64_t r0, int64_t r1) { body; }
ROWS_FN(rows_q8_0, q32_rows_t(m, IG_TYPE_Q8_0, r0, r1))
ROWS_FN(rows_q4_0, q32_rows_t(m, IG_TYPE_Q4_0, r0, r1))
ROWS_FN(rows_q5_0, q32_rows_t(m, IG_TYPE_Q5_0, r0, r1))
ROWS_FN(rows_q4_K, qk_rows_t(m, IG_TYPE_Q4_K, r0, r1))
ROWS_FN(rows_q5_K, qk_rows_t(m, IG_TYPE_Q5_K, r0, r1))
ROWS_FN(rows_q6_K, qk_rows_t(m, IG_TYPE_Q6_K, r0, r1))

static void quant_rows(const ig_mm *m, int64_t r0, int64_t r1) {
    switch (m->type) {
    case IG_TYPE_Q8_0: rows_q8_0(m, r0, r1); break;
    case IG_TYPE_Q4_0: rows_q4_0(m, r0, r1); break;
    case IG_TYPE_Q5_0: rows_q5_0(m, r0, r1); break;
    case IG_TYPE_Q4_K: rows_q4_K(m, r0, r1); break;
    case IG_TYPE_Q5_K: rows_q5_K(m, r0, r1); break;
    case IG_TYPE_Q6_K: rows_q6_K(m, r0, r1); break;
    default: break;
    }
}

/* ---- Matrix-matrix kernels (groups layout) --------------------------------- */

#define TR 4 /* weight rows per tile */

/* Per block b and row i: w[b][i][32] centred int8, corr[b][i] = -128 * sum(w)
 * (0 for Q8_0, which multiplies signed activations), dw[b][i]. */
typedef struct tile32 {
    int8_t *w;
    int32_t *corr;
    float *dw;
} tile32;

static tile32 tile32_at(uint8_t *s, int64_t nb) {
    tile32 t = {.w = (int8_t *)s};
    t.corr = (int32_t *)(void *)(s + (size_t)nb * TR * 32);
    t.dw = (float *)(void *)(s + (size_t)nb * TR * 36);
    return t;
}

static ALWAYS_INLINE void unpack32_tile(const ig_mm *m, ig_dtype t, int64_t r, int vr, tile32 tl) {
    const int64_t nb = m->k / IG_QK;
    const size_t bb = ig_blk_bytes(t);
    for (int i = 0; i < TR; i++) {
        const uint8_t *row = m->w + (size_t)(r + i) * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            int8_t *dst = tl.w + (b * TR + i) * 32;
            if (i >= vr) {
                memset(dst, 0, 32);
                tl.corr[b * TR + i] = 0;
                tl.dw[b * TR + i] = 0.0f;
                continue;
            }
            const uint8_t *blk = row + (size_t)b * bb;
            __m256i w;
            int32_t corr = 0;
            if (t == IG_TYPE_Q8_0) {
                w = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
            } else {
                w = _mm256_sub_epi8(dec_u32(t, blk), _mm256_set1_epi8((char)off_u32(t)));
                const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)),
                                                    _mm256_setzero_si256());
                const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
                corr = -128 * ((int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128);
            }
            _mm256_storeu_si256((__m256i *)(void *)dst, w);
            tl.corr[b * TR + i] = corr;
            tl.dw[b * TR + i] = f16_to_f32(blk);
        }
    }
}

static ALWAYS_INLINE __m256i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* acc[i] (rows r + i, i < 16) lane j = token 16g + 8h + j: per token, the
 * 16 rows' results (one 64-byte line when r is a multiple of 16). */
static ALWAYS_INLINE void store_half(const ig_mm *m, int64_t r, int vr, int g, int h, const __m256 *acc) {
    const int nt = IG_MIN(8, m->n - g * IG_MM_GROUP - 8 * h);
    if (nt <= 0) return;
    __m256 o[2][8];
    transpose8(acc, o[0]);
    transpose8(acc + 8, o[1]);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mk0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(vr), lane);
    const __m256i mk1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(vr - 8), lane);
    float *y = m->y + ((int64_t)g * IG_MM_GROUP + 8 * h) * m->ldy + r;
    for (int j = 0; j < nt; j++) {
        if (vr == 16) {
            _mm256_storeu_ps(y + j * m->ldy, o[0][j]);
            _mm256_storeu_ps(y + j * m->ldy + 8, o[1][j]);
        } else {
            _mm256_maskstore_ps(y + j * m->ldy, mk0, o[0][j]);
            _mm256_maskstore_ps(y + j * m->ldy + 8, mk1, o[1][j]);
        }
    }
}

static ALWAYS_INLINE void gemm32_half(const ig_mm *m, ig_dtype t, int g, int h, tile32 tl, __m256 *out) {
    const int64_t k = m->k, nb = k / IG_QK;
    const uint8_t *ga = m->act + (size_t)g * m->act_stride + 32 * h;
    const float *dx = ig_grp_d(m->act + (size_t)g * m->act_stride, k) + 8 * h;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    __m256 acc[TR];
#pragma GCC unroll 4
    for (int i = 0; i < TR; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* one step of 4 elements at a time for the TR rows: 16 live registers */
        __m256i a[TR];
#pragma GCC unroll 4
        for (int i = 0; i < TR; i++) a[i] = _mm256_set1_epi32(tl.corr[b * TR + i]);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m256i u = _mm256_load_si256((const __m256i *)(const void *)(ga + (b * 8 + s) * 64));
            if (t == IG_TYPE_Q8_0) u = _mm256_xor_si256(u, flip); /* signed x */
#pragma GCC unroll 4
            for (int i = 0; i < TR; i++) {
                const __m256i wb = bcast32(tl.w + (b * TR + i) * 32 + 4 * s);
                __m256i p;
                if (t == IG_TYPE_Q8_0) p = _mm256_maddubs_epi16(_mm256_sign_epi8(wb, wb), _mm256_sign_epi8(u, wb));
                else p = _mm256_maddubs_epi16(u, wb);
                a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(p, ones));
            }
        }
        const __m256 dxv = _mm256_load_ps(dx + 16 * b);
#pragma GCC unroll 4
        for (int i = 0; i < TR; i++) {
            const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(tl.dw[b * TR + i]), dxv);
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_cvtepi32_ps(a[i]), dd));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < TR; i++) out[i] = acc[i];
}

/* K-quant tile, per super-block b and row i: w[b][i][256] int8 (q, or q - 32
 * for Q6_K), sc[b][i][16] as int16 pairs (sc, sc), mp[b][i][4] mins pairs,
 * cw[b][i][r] = -128 * sum over the sub-blocks j of 32-element run r of
 * sc[j] * sum(w of sub-block j) (the +128 offset of the activations; each
 * token multiplies it by its t of run r), d, dmin. */
typedef struct tilek {
    int8_t *w;
    int32_t *sc, *mp, *cw;
    float *d, *dmin;
} tilek;

static tilek tilek_at(uint8_t *s, int64_t nb) {
    tilek t = {.w = (int8_t *)s};
    size_t o = (size_t)nb * TR * 256;
    t.sc = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 64;
    t.mp = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 16;
    t.cw = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 32;
    t.d = (float *)(void *)(s + o);
    o += (size_t)nb * TR * 4;
    t.dmin = (float *)(void *)(s + o);
    return t;
}

static size_t tile_bytes(int64_t k) {
    const size_t a = (size_t)(k / IG_QK) * TR * 40;
    const size_t b = (size_t)(k / IG_QK_K) * TR * (256 + 64 + 16 + 32 + 8);
    return a > b ? a : b;
}

static ALWAYS_INLINE void unpackk_tile(const ig_mm *m, ig_dtype t, int64_t r, int vr, tilek tl) {
    const int64_t nb = m->k / IG_QK_K;
    const size_t bb = ig_blk_bytes(t);
    for (int i = 0; i < TR; i++) {
        const uint8_t *row = m->w + (size_t)(r + i) * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t bi = b * TR + i;
            int8_t *dst = tl.w + bi * 256;
            if (i >= vr) {
                memset(dst, 0, 256);
                memset(tl.sc + bi * 16, 0, 64);
                memset(tl.mp + bi * 4, 0, 16);
                memset(tl.cw + bi * 8, 0, 32);
                tl.d[bi] = tl.dmin[bi] = 0.0f;
                continue;
            }
            const uint8_t *blk = row + (size_t)b * bb;
            int32_t *cw = tl.cw + bi * 8;
            const __m256i ones = _mm256_set1_epi8(1);
            if (t == IG_TYPE_Q6_K) {
                for (int h = 0; h < 2; h++)
                    for (int k = 0; k < 4; k++) {
                        const int e = 128 * h + 32 * k;
                        const __m256i w = _mm256_sub_epi8(q6k_sub(blk, h, k), _mm256_set1_epi8(32));
                        _mm256_storeu_si256((__m256i *)(void *)(dst + e), w);
                        const __m256i p = _mm256_maddubs_epi16(ones, w); /* pair sums */
                        const __m256i s = _mm256_inserti128_si256(_mm256_set1_epi16((short)(int8_t)blk[192 + e / 16]),
                                                                  _mm_set1_epi16((short)(int8_t)blk[192 + e / 16 + 1]), 1);
                        cw[e / 32] = -128 * hsum_epi32(_mm256_madd_epi16(p, s));
                    }
                for (int j = 0; j < 16; j++) {
                    const uint16_t s = (uint16_t)(int16_t)(int8_t)blk[192 + j];
                    tl.sc[bi * 16 + j] = (int32_t)((uint32_t)s | ((uint32_t)s << 16));
                }
                tl.d[bi] = f16_to_f32(blk + 208);
                tl.dmin[bi] = 0.0f;
                memset(tl.mp + bi * 4, 0, 16);
            } else {
                uint64_t sc, mn;
                k_scales(blk, &sc, &mn);
                for (int g = 0; g < 8; g++) {
                    const __m256i w = t == IG_TYPE_Q4_K ? q4k_half(blk + 16 + 32 * (g / 2), g & 1) : q5k_sub(blk, g);
                    _mm256_storeu_si256((__m256i *)(void *)(dst + 32 * g), w);
                    const uint32_t s = (uint32_t)((sc >> (8 * g)) & 0xff);
                    cw[g] = -128 * (int32_t)s * hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones, w), _mm256_set1_epi16(1)));
                    tl.sc[bi * 16 + g] = (int32_t)(s | (s << 16));
                }
                for (int p = 0; p < 4; p++)
                    tl.mp[bi * 4 + p] = (int32_t)(((mn >> (16 * p)) & 0xff) | (((mn >> (16 * p + 8)) & 0xff) << 16));
                tl.d[bi] = f16_to_f32(blk);
                tl.dmin[bi] = f16_to_f32(blk + 2);
            }
        }
    }
}

static ALWAYS_INLINE void gemmk_half(const ig_mm *m, ig_dtype t, int g, int h, tilek tl, __m256 *out) {
    const int64_t k = m->k, nb = k / IG_QK_K;
    const uint8_t *g0 = m->act + (size_t)g * m->act_stride;
    const uint8_t *ga = g0 + 32 * h;
    const float *dx = ig_grp_d(g0, k) + 8 * h;
    const int32_t *gbs = ig_grp_bs(g0, k) + 8 * h;
    const int32_t *gt = ig_grp_t(g0, k) + 8 * h;
    const bool q6 = t == IG_TYPE_Q6_K;
    const int nsub = q6 ? 16 : 8, ks = q6 ? 4 : 8; /* sub-blocks, steps of 4 per sub-block */
    __m256 acc[TR];
#pragma GCC unroll 4
    for (int i = 0; i < TR; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i isum[TR];
#pragma GCC unroll 4
        for (int i = 0; i < TR; i++) isum[i] = _mm256_setzero_si256();
        /* the offset correction: each token's t times the rows' run sums */
        for (int r = 0; r < 8; r++) {
            const __m256i tv = _mm256_and_si256(_mm256_load_si256((const __m256i *)(const void *)(gt + (8 * b + r) * 16)),
                                                _mm256_set1_epi32(0xffff));
#pragma GCC unroll 4
            for (int i = 0; i < TR; i++)
                isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(tv, _mm256_set1_epi32(tl.cw[(b * TR + i) * 8 + r])));
        }
        const uint8_t *ub = ga + b * 64 * 64;
        for (int j = 0; j < nsub; j++) {
            const __m256i tp = _mm256_load_si256((const __m256i *)(const void *)(gt + (8 * b + (q6 ? j / 2 : j)) * 16));
#pragma GCC unroll 4
            for (int i = 0; i < TR; i++) {
                const int8_t *w = tl.w + (b * TR + i) * 256 + 4 * ks * j;
                const __m256i scv = _mm256_mullo_epi16(tp, _mm256_set1_epi32(tl.sc[(b * TR + i) * 16 + j]));
                __m256i a = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int s = 0; s < ks; s++) {
                    const __m256i u = _mm256_load_si256((const __m256i *)(const void *)(ub + (ks * j + s) * 64));
                    a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, bcast32(w + 4 * s)), scv));
                }
                isum[i] = _mm256_add_epi32(isum[i], a);
            }
        }
        const __m256 dxv = _mm256_load_ps(dx + 16 * b);
        if (q6) {
#pragma GCC unroll 4
            for (int i = 0; i < TR; i++) {
                const __m256 d = _mm256_mul_ps(_mm256_set1_ps(tl.d[b * TR + i]), dxv);
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[i])));
            }
        } else {
            __m256i bsp[4];
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) bsp[p] = _mm256_load_si256((const __m256i *)(const void *)(gbs + (b * 4 + p) * 16));
#pragma GCC unroll 4
            for (int i = 0; i < TR; i++) {
                __m256i imin = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++)
                    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(bsp[p], _mm256_set1_epi32(tl.mp[(b * TR + i) * 4 + p])));
                const __m256 d = _mm256_mul_ps(_mm256_set1_ps(tl.d[b * TR + i]), dxv);
                const __m256 dmin = _mm256_mul_ps(_mm256_set1_ps(tl.dmin[b * TR + i]), dxv);
                const __m256 hi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[i]));
                const __m256 lo = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(imin));
                acc[i] = _mm256_add_ps(acc[i], _mm256_sub_ps(hi, lo));
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < TR; i++) out[i] = acc[i];
}

/* 16 rows at a time (four tiles of 4): each token's results fill whole
 * 64-byte lines of y (half lines written twice thrash L1 sets when y's
 * stride is a power of two). */
#define PASS 4 /* tiles per pass */
static void gemm(const ig_mm *m, int64_t r0, int64_t r1, uint8_t *scratch) {
    const int groups = (m->n + IG_MM_GROUP - 1) / IG_MM_GROUP;
    const ig_dtype t = m->type;
    const bool kq = ig_mm_act_kind(t) == IG_ACT_Q8_K;
    const size_t tb = ig_mm_align64(tile_bytes(m->k));
    for (int64_t r = r0; r < r1; r += PASS * TR) {
        const int vr = (int)IG_MIN(PASS * TR, r1 - r);
        const int nt = (vr + TR - 1) / TR;
        __m256 acc[PASS * TR];
        for (int i = 0; i < PASS * TR; i++) acc[i] = _mm256_setzero_ps();
        tilek tk[PASS];
        tile32 t32[PASS];
        for (int h = 0; h < nt; h++) {
            const int hr = IG_MIN(TR, vr - h * TR);
            if (kq) {
                tk[h] = tilek_at(scratch + h * tb, m->k / IG_QK_K);
                switch (t) {
                case IG_TYPE_Q4_K: unpackk_tile(m, IG_TYPE_Q4_K, r + h * TR, hr, tk[h]); break;
                case IG_TYPE_Q5_K: unpackk_tile(m, IG_TYPE_Q5_K, r + h * TR, hr, tk[h]); break;
                default: unpackk_tile(m, IG_TYPE_Q6_K, r + h * TR, hr, tk[h]); break;
                }
            } else {
                t32[h] = tile32_at(scratch + h * tb, m->k / IG_QK);
                switch (t) {
                case IG_TYPE_Q8_0: unpack32_tile(m, IG_TYPE_Q8_0, r + h * TR, hr, t32[h]); break;
                case IG_TYPE_Q4_0: unpack32_tile(m, IG_TYPE_Q4_0, r + h * TR, hr, t32[h]); break;
                default: unpack32_tile(m, IG_TYPE_Q5_0, r + h * TR, hr, t32[h]); break;
                }
            }
        }
        for (int g = 0; g < groups; g++)
            for (int half = 0; half < 2; half++) {
                for (int h = 0; h < nt; h++) {
                    if (t == IG_TYPE_Q6_K) gemmk_half(m, IG_TYPE_Q6_K, g, half, tk[h], acc + h * TR);
                    else if (kq) gemmk_half(m, IG_TYPE_Q4_K, g, half, tk[h], acc + h * TR);
                    else if (t == IG_TYPE_Q8_0) gemm32_half(m, IG_TYPE_Q8_0, g, half, t32[h], acc + h * TR);
                    else gemm32_half(m, IG_TYPE_Q4_0, g, half, t32[h], acc + h * TR);
                }
                store_half(m, r, vr, g, half, acc);
            }
    }
}

static void matmul_avx2(const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    if (r0 >= r1 || m->n <= 0) return;
    if (ig_mm_act_kind(m->type) == IG_ACT_F32) float_rows(m, r0, r1, scratch);
    else if (m->grouped) gemm(m, r0, r1, scratch);
    else quant_rows(m, r0, r1);
}

static size_t scratch_avx2(int64_t k) {
    const size_t fl = float_scratch(k);
    size_t s = PASS * ig_mm_align64(tile_bytes(k));
    if (fl > s) s = fl;
    return s + 64;
}

const ig_mm_isa ig_mm_isa_avx2 = {
    .name = "avx2",
    .gemm_min = 4,
    .quant_row = quant_row_avx2,
    .matmul = matmul_avx2,
    .scratch_bytes = scratch_avx2,
    .attn = ig_attn_block_avx2,
    .geglu = ig_geglu_avx2,
    .rmsnorm = ig_rmsnorm_avx2,
    .to_f16 = ig_to_f16_avx2,
};
