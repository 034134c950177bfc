/* AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels.
 *
 * Few tokens (rows layout): matrix-vector kernels straight from the GGUF
 * blocks. 32-element blocks: 16 rows side by side, each row's exact block
 * sums folded into one lane; K-quants: one row at a time. Either way every
 * result is formed with the scalar reference's operations in its order, as
 * the grouped kernels below do, so that a token's result does not depend on
 * how many tokens share the matmul.
 *
 * Many tokens (groups layout): a tile of 8 weight rows is unpacked once into
 * signed bytes (the reference's centred integers) plus per-block integer
 * corrections and scales; the micro-kernel then broadcasts 4 weight bytes
 * and multiplies them with 16 tokens per vpdpbusd, so one block of one row
 * costs 8 instructions for 16 tokens. The activations are stored as x + 128
 * (unsigned), and the tile carries -128 * (sum of the block's weights) as
 * the initial value of the accumulator, so the sums stay exact (K-quants:
 * per sub-block, whose sum is then scaled by the weight's sub-block scale
 * and each token's Q8_K multiplier t). The float scaling follows the
 * reference's order exactly: these kernels are bit-identical to the scalar
 * references.
 *
 * Float weights (F32/F16/BF16): each result is one 16-lane f32 accumulator
 * over the elements, then a fixed horizontal sum, for one token (float_row4)
 * as for many (float_micro: 32 rows x 12 tokens, by stripe of lanes). */
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/ops_simd.h"
#include "core/util.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float f16_to_f32(const uint8_t *p) {
    return _cvtsh_ss(ig_ld16(p));
}

static ALWAYS_INLINE int32_t hsum_epi32_256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static ALWAYS_INLINE int32_t hsum_epi32_512(__m512i v) {
    return hsum_epi32_256(
        _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* ---- Activation quantization ---------------------------------------------- */

static void quant_row_avx512(ig_act_kind kind, const float *x, int64_t k, uint8_t *dst) {
    if (kind == IG_ACT_Q8_0) {
        const int64_t nb = k / IG_QK;
        float *d = (float *)(void *)(dst + k);
        int32_t *s = (int32_t *)(void *)(dst + k + 4 * nb);
        for (int64_t b = 0; b < nb; b++) {
            const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            /* as ig_quantize_row_q8_0_act: 127/amax, nearest even */
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
            const __m512 ivd = _mm512_set1_ps(id);
            /* NaN and <= -127 give -127 (max returns its second operand for
             * NaN), >= 127 gives 127. */
            __m512 p0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, ivd), lo), hi);
            __m512 p1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, ivd), lo), hi);
            const __m512i q0 = _mm512_cvt_roundps_epi32(p0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m512i q1 = _mm512_cvt_roundps_epi32(p1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_storeu_si128((__m128i *)(void *)(dst + 32 * b), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(void *)(dst + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
            s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        }
    } else if (kind == IG_ACT_Q8_K) {
        /* ig_quantize_row_q8_K's operations, lane by lane: the same bytes. */
        const int64_t nb = k / IG_QK_K;
        float *d = (float *)(void *)(dst + k);
        int16_t *bs = (int16_t *)(void *)(dst + k + 4 * nb);
        uint8_t *tq = dst + k + 4 * nb + 2 * (k / 16);
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + IG_QK_K * b;
            __m512 ax[16];
            __m512 vmax = _mm512_setzero_ps();
            #pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                ax[j] = _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j));
                vmax = _mm512_max_ps(vmax, ax[j]);
            }
            const float amax = _mm512_reduce_max_ps(vmax);
            int8_t *q = (int8_t *)dst + IG_QK_K * b;
            if (!(amax > 0.0f) || !isfinite(amax)) {
                d[b] = 0.0f;
                memset(q, 0, IG_QK_K);
                memset(bs + 16 * b, 0, 32);
                memset(tq + 8 * b, 1, 8);
                continue;
            }
            /* The first element of largest magnitude gives the sign. */
            float max = amax;
            for (int j = 0; j < 16; j++) {
                const __mmask16 e = _mm512_cmp_ps_mask(ax[j], _mm512_set1_ps(amax), _CMP_EQ_OQ);
                if (e) {
                    max = xb[16 * j + __builtin_ctz(e)];
                    break;
                }
            }
            const float iscale = -127.0f / max;
            for (int r = 0; r < IG_QK_K / 32; r++) {
                const float a = _mm512_reduce_max_ps(_mm512_max_ps(ax[2 * r], ax[2 * r + 1]));
                const int t = ig_q8k_run_t(a, amax);
                const __m512 vs = _mm512_set1_ps(iscale * ig_q8k_mul[t]);
                tq[8 * b + r] = (uint8_t)t;
                #pragma GCC unroll 2
                for (int j = 2 * r; j < 2 * r + 2; j++) {
                    __m512 v = _mm512_mul_ps(vs, _mm512_loadu_ps(xb + 16 * j));
                    v = _mm512_max_ps(_mm512_set1_ps(-128.0f), _mm512_min_ps(_mm512_set1_ps(127.0f), v));
                    const __m512i qi = _mm512_cvtps_epi32(v); /* nearest, ties to even */
                    _mm_storeu_si128((__m128i *)(void *)(q + 16 * j), _mm512_cvtepi32_epi8(qi));
                    /* |sum| <= 16 * 128: t * sum fits int16 */
                    bs[16 * b + j] = (int16_t)(t * _mm512_reduce_add_epi32(qi));
                }
            }
            d[b] = (1.0f / iscale) * 0.125f;
        }
    }
}

/* ---- Float weights ---------------------------------------------------------- */

static ALWAYS_INLINE __m512 load_w16(ig_dtype t, const uint8_t *row, int64_t i, __mmask16 m) {
    if (t == IG_TYPE_F32) return _mm512_maskz_loadu_ps(m, row + 4 * i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * i);
    if (t == IG_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows r .. r + vr - 1 (vr <= 4, read straight from the weights) with
 * T <= 3 tokens: for each (row, token) one 16-lane accumulator over the
 * elements in steps of 16 (the tail masked), then _mm512_reduce_add_ps,
 * exactly as float_micro does for batches (lane by lane); 4 rows'
 * chains side by side hide the FMA latency. */
static ALWAYS_INLINE void float_row4(const ig_mm *m, ig_dtype t, int64_t r, int vr, const int T) {
    const uint8_t *row[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) row[i] = m->w + (size_t)(r + IG_MIN(i, vr - 1)) * m->row_bytes;
    __m512 acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t e = 0; e < m->k; e += 16) {
        const __mmask16 mk = m->k - e >= 16 ? 0xffff : (__mmask16)((1u << (m->k - e)) - 1);
        __m512 xv[3];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) xv[j] = _mm512_maskz_loadu_ps(mk, m->x + (int64_t)j * m->ldx + e);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m512 wv = load_w16(t, row[i], e, mk);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    float out[4][3]; /* constant indices only, so that acc stays in registers */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
    for (int i = 0; i < vr; i++)
        for (int j = 0; j < T; j++) m->y[(int64_t)j * m->ldy + r + i] = out[i][j];
}

/* In-register transpose: o[c] lane i = r[i] lane c. */
static ALWAYS_INLINE void transpose16(const __m512 r[16], __m512 o[16]) {
    __m512 a[8], b[8], c[4][4];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        a[p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
        b[p] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        c[p][0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a[2 * p]), _mm512_castps_pd(a[2 * p + 1])));
        c[p][1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a[2 * p]), _mm512_castps_pd(a[2 * p + 1])));
        c[p][2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[2 * p]), _mm512_castps_pd(b[2 * p + 1])));
        c[p][3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[2 * p]), _mm512_castps_pd(b[2 * p + 1])));
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        const __m512 d0 = _mm512_shuffle_f32x4(c[0][e], c[1][e], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 d1 = _mm512_shuffle_f32x4(c[0][e], c[1][e], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512 d2 = _mm512_shuffle_f32x4(c[2][e], c[3][e], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 d3 = _mm512_shuffle_f32x4(c[2][e], c[3][e], _MM_SHUFFLE(3, 1, 3, 1));
        o[e] = _mm512_shuffle_f32x4(d0, d2, _MM_SHUFFLE(2, 0, 2, 0));
        o[4 + e] = _mm512_shuffle_f32x4(d1, d3, _MM_SHUFFLE(2, 0, 2, 0));
        o[8 + e] = _mm512_shuffle_f32x4(d0, d2, _MM_SHUFFLE(3, 1, 3, 1));
        o[12 + e] = _mm512_shuffle_f32x4(d1, d3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* Many tokens: a panel of FP_R rows is converted to f32 once and stored
 * transposed and by stripe: element e = 16 j + l of the panel's rows side
 * by side at wp + (l J + j) FP_R (J = kp / 16; rows past the range and
 * elements past k zero). For each stripe l the micro-kernel keeps
 * y[t][r .. r+31] of FP_T tokens in 24 registers and walks j with one FMA
 * per (row vector, token), x[t][16 j + l] broadcast from memory: lane l of
 * float_row4's accumulator, FMA for FMA. The 16 stripes' sums are then
 * added with _mm512_reduce_add_ps's tree, so that every result is the
 * mat-vec's, bit for bit, whatever the batch. */
#define FP_R 32
#define FP_T 12
#define FP_JB 48

static ALWAYS_INLINE __mmask16 tail_mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Rows [r, r + vr) -> wp; st: 16 rows of kp, staging (each row converted
 * in order, then transposed in 16 x 16 blocks in registers). */
static ALWAYS_INLINE void float_pack(const ig_mm *m, ig_dtype t, int64_t r, int vr, int64_t kp, float *wp,
                                     float *st) {
    const int64_t nj = kp / 16;
    for (int h = 0; h * 16 < vr; h++) {
        const int live = IG_MIN(16, vr - 16 * h);
        for (int i = 0; i < live; i++) {
            const uint8_t *row = m->w + (size_t)(r + 16 * h + i) * m->row_bytes;
            for (int64_t e = 0; e < kp; e += 16)
                _mm512_store_ps(st + i * kp + e, load_w16(t, row, e, tail_mask(m->k - e)));
        }
        for (int64_t e = 0; e < kp; e += 16) {
            __m512 v[16], o[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) v[i] = i < live ? _mm512_load_ps(st + i * kp + e) : _mm512_setzero_ps();
            transpose16(v, o);
#pragma GCC unroll 16
            for (int c = 0; c < 16; c++) _mm512_store_ps(wp + ((int64_t)c * nj + e / 16) * FP_R + 16 * h, o[c]);
        }
    }
}

/* y[tok + t][r .. r + vr) = panel x token t, t < T, R vectors of rows;
 * sb: the stripes' sums, 16 x FP_T x 2 vectors. */
static ALWAYS_INLINE void float_micro(const ig_mm *m, const float *wp, int64_t nj, int64_t r,
                                      int vr, int tok, float *sb, const int R, const int T) {
    /* elements in blocks of at most FP_JB per stripe, so that the tokens'
     * rows stay in L1 across the 16 stripes; each stripe's sum goes through
     * sb between blocks (exact: the same FMA chain) */
    const int64_t nb = (nj + FP_JB - 1) / FP_JB, jb = (nj + nb - 1) / nb; /* even blocks */
    for (int64_t j0 = 0; j0 < nj; j0 += jb) {
        for (int l = 0; l < 16; l++) {
            __m512 acc[FP_T][2];
            float *sl = sb + (l * FP_T) * 2 * 16;
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) {
                acc[t][0] = j0 ? _mm512_load_ps(sl + t * 32) : _mm512_setzero_ps();
                acc[t][1] = j0 && R > 1 ? _mm512_load_ps(sl + t * 32 + 16) : _mm512_setzero_ps();
            }
            const float *w = wp + (int64_t)l * nj * FP_R, *x = m->x + (int64_t)tok * m->ldx + l;
            const int64_t ldx = m->ldx, ne = (m->k - l + 15) / 16; /* elements 16 j + l < k */
            const int64_t j1 = IG_MIN(ne, j0 + jb);
#pragma GCC unroll 2
            for (int64_t j = j0; j < j1; j++) {
                const __m512 w0 = _mm512_load_ps(w + j * FP_R);
                const __m512 w1 = R > 1 ? _mm512_load_ps(w + j * FP_R + 16) : w0;
#pragma GCC unroll 12
                for (int t = 0; t < T; t++) {
                    const __m512 xb = _mm512_set1_ps(x[t * ldx + j * 16]);
                    acc[t][0] = _mm512_fmadd_ps(w0, xb, acc[t][0]);
                    if (R > 1) acc[t][1] = _mm512_fmadd_ps(w1, xb, acc[t][1]);
                }
            }
            if (ne < nj && j0 + jb >= nj) /* the mat-vec's masked tail: an FMA of zeros, + 0 */
#pragma GCC unroll 12
                for (int t = 0; t < T; t++) {
                    acc[t][0] = _mm512_add_ps(acc[t][0], _mm512_setzero_ps());
                    if (R > 1) acc[t][1] = _mm512_add_ps(acc[t][1], _mm512_setzero_ps());
                }
#pragma GCC unroll 12
            for (int t = 0; t < T; t++) {
                _mm512_store_ps(sl + t * 32, acc[t][0]);
                if (R > 1) _mm512_store_ps(sl + t * 32 + 16, acc[t][1]);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < R; h++) {
            __m512 s[16];
#pragma GCC unroll 16
            for (int l = 0; l < 16; l++) s[l] = _mm512_load_ps(sb + ((l * FP_T + t) * 2 + h) * 16);
            /* _mm512_reduce_add_ps: lanes l + 8 and l, then l + 4 and l,
             * then 2 and 0, 3 and 1, then 0 and 1 */
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) s[l] = _mm512_add_ps(s[l + 8], s[l]);
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) s[l] = _mm512_add_ps(s[l + 4], s[l]);
            s[0] = _mm512_add_ps(s[0], s[2]);
            s[1] = _mm512_add_ps(s[1], s[3]);
            s[0] = _mm512_add_ps(s[0], s[1]);
            _mm512_mask_storeu_ps(m->y + (int64_t)(tok + t) * m->ldy + r + 16 * h, tail_mask(vr - 16 * h), s[0]);
        }
    }
}

static ALWAYS_INLINE void float_micro_r(const ig_mm *m, const float *wp, int64_t nj, int64_t r,
                                        int vr, int tok, float *sb, const int T) {
    if (vr > 16) float_micro(m, wp, nj, r, vr, tok, sb, 2, T);
    else float_micro(m, wp, nj, r, vr, tok, sb, 1, T);
}

/* T tokens from tok, 1 <= T <= FP_T. */
static void float_micro_n(const ig_mm *m, const float *wp, int64_t nj, int64_t r, int vr, int tok,
                          float *sb, int T) {
    switch (T) {
    case 1: float_micro_r(m, wp, nj, r, vr, tok, sb, 1); break;
    case 2: float_micro_r(m, wp, nj, r, vr, tok, sb, 2); break;
    case 3: float_micro_r(m, wp, nj, r, vr, tok, sb, 3); break;
    case 4: float_micro_r(m, wp, nj, r, vr, tok, sb, 4); break;
    case 5: float_micro_r(m, wp, nj, r, vr, tok, sb, 5); break;
    case 6: float_micro_r(m, wp, nj, r, vr, tok, sb, 6); break;
    case 7: float_micro_r(m, wp, nj, r, vr, tok, sb, 7); break;
    case 8: float_micro_r(m, wp, nj, r, vr, tok, sb, 8); break;
    case 9: float_micro_r(m, wp, nj, r, vr, tok, sb, 9); break;
    case 10: float_micro_r(m, wp, nj, r, vr, tok, sb, 10); break;
    case 11: float_micro_r(m, wp, nj, r, vr, tok, sb, 11); break;
    default: float_micro_r(m, wp, nj, r, vr, tok, sb, FP_T); break;
    }
}

/* Scratch of float_panels: the panel, staging, the stripes' sums. */
static size_t float_scratch(int64_t k) {
    const int64_t kp = (k + 15) & ~(int64_t)15;
    return sizeof(float) * (size_t)((FP_R + 16) * kp + 16 * FP_T * 2 * 16);
}

static ALWAYS_INLINE void float_panels(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1, float *wp) {
    const int64_t kp = (m->k + 15) & ~(int64_t)15, nj = kp / 16;
    float *st = wp + FP_R * kp, *sb = st + 16 * kp;
    for (int64_t r = r0; r < r1; r += FP_R) {
        const int vr = (int)IG_MIN(FP_R, r1 - r);
        float_pack(m, t, r, vr, kp, wp, st);
        /* Blocks of at most FP_T tokens, as even as can be (8 = 4 + 4 rather
         * than 6 + 2: a short block costs nearly as much as a full one). */
        const int nblk = (m->n + FP_T - 1) / FP_T;
        for (int b = 0, tok = 0; b < nblk; b++) {
            const int T = m->n / nblk + (b < m->n % nblk);
            float_micro_n(m, wp, nj, r, vr, tok, sb, T);
            tok += T;
        }
    }
}

/* 4 rows (converted to f32 in wf, row stride kp) x T tokens. */
static ALWAYS_INLINE void float_tile(const ig_mm *m, const float *wf, int64_t kp, int vr, int64_t r, int tok,
                                     const int T) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t e = 0; e < m->k; e += 16) {
        const __mmask16 mk = m->k - e >= 16 ? 0xffff : (__mmask16)((1u << (m->k - e)) - 1);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) xv[j] = _mm512_maskz_loadu_ps(mk, m->x + (int64_t)(tok + j) * m->ldx + e);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m512 wv = _mm512_load_ps(wf + i * kp + e);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    float out[4][4]; /* constant indices only, so that acc stays in registers */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
    for (int i = 0; i < vr; i++)
        for (int j = 0; j < T; j++) m->y[(int64_t)(tok + j) * m->ldy + r + i] = out[i][j];
}

/* 4 to 15 tokens: rows converted to f32 one tile at a time, dot products
 * (the panels' packing costs more than it saves for so few). */
static ALWAYS_INLINE void float_rows_few(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1, float *wf) {
    const int64_t kp = (m->k + 15) & ~(int64_t)15;
    for (int64_t r = r0; r < r1; r += 4) {
        const int vr = (int)IG_MIN(4, r1 - r);
        for (int i = 0; i < 4; i++) {
            float *dst = wf + i * kp;
            const uint8_t *row = m->w + (size_t)(r + IG_MIN(i, vr - 1)) * m->row_bytes;
            for (int64_t e = 0; e < kp; e += 16) {
                const __mmask16 mk = m->k - e >= 16 ? 0xffff : (__mmask16)((1u << (m->k - e)) - 1);
                _mm512_store_ps(dst + e, load_w16(t, row, e, mk));
            }
        }
        int tok = 0;
        for (; tok + 4 <= m->n; tok += 4) float_tile(m, wf, kp, vr, r, tok, 4);
        for (; tok < m->n; tok++) float_tile(m, wf, kp, vr, r, tok, 1);
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
        for (int64_t r = r0; r < r1; r += 4) {
            const int vr = (int)IG_MIN(4, r1 - r);
            if (m->n == 1) float_row4(m, t, r, vr, 1);
            else if (m->n == 2) float_row4(m, t, r, vr, 2);
            else float_row4(m, t, r, vr, 3);
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

/* 32 unsigned values of a Q4_0 / Q5_0 block (q, not centred) or Q8_0 + 128. */
static ALWAYS_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs));
    const __m256i sh = _mm256_setr_epi64x(0, 0, 0x0004000400040004ll, 0x0004000400040004ll);
    return _mm256_and_si256(_mm256_srlv_epi16(b, sh), _mm256_set1_epi8(0x0f));
}

static ALWAYS_INLINE __m256i dec_u32(ig_dtype t, const uint8_t *blk) {
    if (t == IG_TYPE_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)),
                                _mm256_set1_epi8((char)0x80));
    if (t == IG_TYPE_Q4_0) return nibbles32(blk + 2);
    const __m256i q = nibbles32(blk + 6);
    return _mm256_mask_add_epi8(q, (__mmask32)ig_ld32(blk + 2), q, _mm256_set1_epi8(16));
}

static ALWAYS_INLINE int off_u32(ig_dtype t) {
    return t == IG_TYPE_Q8_0 ? 128 : t == IG_TYPE_Q4_0 ? 8 : 16;
}

/* 64 values (0..15) of chunk c of a Q4_K block: qs[32c + l] low nibble is
 * element 64c + l, high nibble element 64c + 32 + l. */
static ALWAYS_INLINE __m512i q4k_chunk(const uint8_t *qs32) {
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)qs32));
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll,
                                         0x0004000400040004ll, 0x0004000400040004ll);
    return _mm512_and_si512(_mm512_srlv_epi16(b, sh), _mm512_set1_epi8(0x0f));
}

/* Chunk c of a Q5_K block: q4k_chunk plus bit 2c / 2c+1 of qh[l]. */
static ALWAYS_INLINE __m512i q5k_chunk(const uint8_t *blk, int c) {
    const __m512i q = q4k_chunk(blk + 48 + 32 * c);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 16)));
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                           _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
    const __mmask64 mk = _mm512_test_epi8_mask(h, sel);
    return _mm512_mask_add_epi8(q, mk, q, _mm512_set1_epi8(16));
}

/* Elements 64z .. 64z+63 (0..63) of a Q6_K block, z = 0..3. */
static ALWAYS_INLINE __m512i q6k_part(const uint8_t *blk, int z) {
    const int h = z >> 1;
    const __m512i l = _mm512_loadu_si512((const void *)(blk + 64 * h));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h)));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    if ((z & 1) == 0) {
        const __m512i sh = _mm512_setr_epi64(0x0004000400040004ll, 0x0004000400040004ll,
                                             0x0004000400040004ll, 0x0004000400040004ll,
                                             0x0002000200020002ll, 0x0002000200020002ll,
                                             0x0002000200020002ll, 0x0002000200020002ll);
        return _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh), m30));
    }
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002ll, 0x0002000200020002ll,
                                         0x0002000200020002ll, 0x0002000200020002ll);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_and_si512(_mm512_srlv_epi16(qh, sh), m30));
}

/* The 6-bit scales and mins of a Q4_K/Q5_K block as 8 bytes each. */
static ALWAYS_INLINE void k_scales(const uint8_t *blk, uint64_t *sc, uint64_t *mn) {
    const uint32_t u0 = ig_ld32(blk + 4), u1 = ig_ld32(blk + 8), u2 = ig_ld32(blk + 12);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *mn = (uint64_t)m_lo | ((uint64_t)m_hi << 32);
}

/* ---- Matrix-vector kernels (rows layout) ---------------------------------- */

/* 32-element blocks, 16 rows side by side (so that a token's result is
 * computed with the same operations as in the grouped kernels and the
 * scalar reference, whatever the batch): per block, each row's exact integer
 * sum, then acc += (float)isum * (dw * dx) lane by lane, blocks in order.
 *
 * Two rows' blocks share a register (row 2p in the low half, 2p + 1 in the
 * high half); vpdpbusd leaves 8 partial sums per row, which a transposing
 * reduction folds into one vector: lane 4c + q holds row 4q + c (ROWPERM,
 * its own inverse). */
static ALWAYS_INLINE __m512i dec_u32x2(ig_dtype t, const uint8_t *b0, const uint8_t *b1) {
    if (t == IG_TYPE_Q8_0) {
        const __m512i v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(b0 + 2))),
            _mm256_loadu_si256((const __m256i *)(const void *)(b1 + 2)), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const int o = t == IG_TYPE_Q4_0 ? 2 : 6;
    const __m512i b = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(b0 + o)))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(b1 + o))), 1);
    const __m512i sh = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                         0x0004000400040004ll, 0x0004000400040004ll);
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(b, sh), _mm512_set1_epi8(0x0f));
    if (t == IG_TYPE_Q4_0) return q;
    const __mmask64 hb = (__mmask64)ig_ld32(b0 + 2) | ((__mmask64)ig_ld32(b1 + 2) << 32);
    return _mm512_mask_add_epi8(q, hb, q, _mm512_set1_epi8(16));
}

/* v[p]: rows 2p (lanes 0..7), 2p + 1 (lanes 8..15) -> one sum per row. */
static ALWAYS_INLINE __m512i fold16(const __m512i v[8]) {
    __m512i u[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        u[q] = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2 * q], v[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_i32x4(v[2 * q], v[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* u[q] 128-bit chunk c: the 4 partial sums of row 4q + c */
    const __m512i p0 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[0], u[1]), _mm512_unpackhi_epi32(u[0], u[1]));
    const __m512i p1 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[2], u[3]), _mm512_unpackhi_epi32(u[2], u[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(p0, p1), _mm512_unpackhi_epi64(p0, p1));
}

#define ROWPERM _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)

/* Rows [r, r + vr), vr <= 16, tokens tok .. tok + T - 1. */
static ALWAYS_INLINE void q32_tile(const ig_mm *m, ig_dtype t, int64_t r, int vr, int tok, const int T) {
    const int64_t k = m->k, nb = k / IG_QK;
    const size_t bb = ig_blk_bytes(t);
    const int off = off_u32(t);
    const uint8_t *row[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) row[i] = m->w + (size_t)(r + IG_MIN(i, vr - 1)) * m->row_bytes;
    /* lane L reads the scale of row ROWPERM[L] */
    const __m512i perm = ROWPERM;
    const __m512i goff = _mm512_mullo_epi32(_mm512_min_epi32(perm, _mm512_set1_epi32(vr - 1)),
                                            _mm512_set1_epi32((int)m->row_bytes));
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
    __m512 acc[3];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t bo = (size_t)b * bb;
        __m512i w[8];
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) w[p] = dec_u32x2(t, row[2 * p] + bo, row[2 * p + 1] + bo);
        const __m512i dh = _mm512_i32gather_epi32(goff, (const void *)(row[0] + bo), 1);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const __m512i xv = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(const void *)(xq[j] + 32 * b)));
            __m512i d[8];
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) d[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[p], xv);
            const __m512i isum = _mm512_sub_epi32(fold16(d), _mm512_set1_epi32(off * xs[j][b]));
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][b]));
            acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), dd));
        }
    }
    const __mmask16 mk = (__mmask16)((1u << vr) - 1);
#pragma GCC unroll 4
    for (int j = 0; j < T; j++)
        _mm512_mask_storeu_ps(m->y + (int64_t)(tok + j) * m->ldy + r, mk, _mm512_permutexvar_ps(perm, acc[j]));
}

static ALWAYS_INLINE void q32_rows_t(const ig_mm *m, ig_dtype t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r += 16) {
        const int vr = (int)IG_MIN(16, r1 - r);
        int tok = 0;
        for (; tok + 3 <= m->n; tok += 3) q32_tile(m, t, r, vr, tok, 3);
        if (m->n - tok == 2) q32_tile(m, t, r, vr, tok, 2);
        else if (m->n - tok == 1) q32_tile(m, t, r, vr, tok, 1);
    }
}

/* Exact integer sums of one K-quant block with one token, then the
 * reference's float steps. The weight's sub-block scales are multiplied by
 * the token's run multipliers xt (one per 32 elements, at most 8: the
 * products fit int16); bs already carry them. */
static ALWAYS_INLINE float qk_block(ig_dtype t, const uint8_t *blk, const int8_t *xq, float xd,
                                   const int16_t *bs, const uint8_t *xt) {
    const __m128i tv = _mm_loadl_epi64((const __m128i *)(const void *)xt);
    if (t == IG_TYPE_Q6_K) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(const void *)(blk + 192));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        /* lane j (a 16-element sub-block): sc[j] * t[j / 2] */
        const __m256i t16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(tv, tv));
        const __m512i sc512 = _mm512_castsi256_si512(_mm256_mullo_epi16(sc16, t16));
        __m512i acc = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int z = 0; z < 4; z++) {
            const __m512i q = q6k_part(blk, z);
            const __m512i x = _mm512_load_si512((const void *)(xq + 64 * z));
            const __m512i idx = _mm512_add_epi16(
                _mm512_set1_epi16((short)(4 * z)),
                _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                                   16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                  3));
            const __m512i scv = _mm512_permutexvar_epi16(idx, sc512);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q, x), scv));
        }
        /* sum_j sc[j] * 32 * bsums[j] (bsums include t): q - 32 */
        const __m256i b16 = _mm256_loadu_si256((const __m256i *)(const void *)bs);
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(b16, sc16), 5);
        /* subtracted lane by lane: the sums of q * x alone may pass INT32_MAX
         * (wrapping in the lanes), the final value does not */
        acc = _mm512_sub_epi32(acc, _mm512_inserti64x4(_mm512_setzero_si512(), corr, 0));
        const int32_t isum = hsum_epi32_512(acc);
        const float d = f16_to_f32(blk + 208) * xd;
        return d * (float)isum;
    }
    uint64_t sc, mn;
    k_scales(blk, &sc, &mn);
    const __m128i sc16 = _mm_mullo_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)),
                                         _mm_cvtepu8_epi16(tv));
    const __m512i sc512 = _mm512_castsi128_si512(sc16);
    __m512i acc = _mm512_setzero_si512();
    #pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        const __m512i q = t == IG_TYPE_Q4_K ? q4k_chunk(blk + 16 + 32 * c) : q5k_chunk(blk, c);
        const __m512i x = _mm512_load_si512((const void *)(xq + 64 * c));
        const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
                                               _mm256_set1_epi16((short)(2 * c + 1)), 1);
        const __m512i scv = _mm512_permutexvar_epi16(idx, sc512);
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q, x), scv));
    }
    const __m128i mv = _mm_cvtsi64_si128((long long)mn);
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
    const __m256i b16 = _mm256_loadu_si256((const __m256i *)(const void *)bs);
    const int32_t isum = hsum_epi32_512(acc);
    const int32_t imin = hsum_epi32_256(_mm256_madd_epi16(b16, m16));
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

static void quant_rows(const ig_mm *m, int64_t r0, int64_t r1) {
    switch (m->type) {
    case IG_TYPE_Q8_0: q32_rows_t(m, IG_TYPE_Q8_0, r0, r1); break;
    case IG_TYPE_Q4_0: q32_rows_t(m, IG_TYPE_Q4_0, r0, r1); break;
    case IG_TYPE_Q5_0: q32_rows_t(m, IG_TYPE_Q5_0, r0, r1); break;
    case IG_TYPE_Q4_K: qk_rows_t(m, IG_TYPE_Q4_K, r0, r1); break;
    case IG_TYPE_Q5_K: qk_rows_t(m, IG_TYPE_Q5_K, r0, r1); break;
    case IG_TYPE_Q6_K: qk_rows_t(m, IG_TYPE_Q6_K, r0, r1); break;
    default: break;
    }
}

/* ---- Matrix-matrix kernels (groups layout) --------------------------------- */

#define TR 8 /* weight rows per tile */

/* Tile of TR rows of a 32-element-block type, per block b and row i:
 * w[b][i][32] int8 centred values, corr[b][i] = -128 * sum(w), dw[b][i]. */
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
    const __m256i off = _mm256_set1_epi8((char)off_u32(t));
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
            const __m256i u = dec_u32(t, blk);
            const __m256i w = _mm256_sub_epi8(u, off);
            _mm256_storeu_si256((__m256i *)(void *)dst, w);
            /* sum(w) = sum(w + 128) - 32 * 128 */
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)),
                                                _mm256_setzero_si256());
            const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            const int32_t sw = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
            tl.corr[b * TR + i] = -128 * sw;
            tl.dw[b * TR + i] = f16_to_f32(blk);
        }
    }
}

static ALWAYS_INLINE __m512i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* acc[i] (i < 16, rows r + i) lane j = token 16g + j: one (masked) 64-byte
 * store per token. */
static ALWAYS_INLINE void store_tile(const ig_mm *m, int64_t r, int vr, int g, const __m512 *acc) {
    const int nt = IG_MIN(IG_MM_GROUP, m->n - g * IG_MM_GROUP);
    __m512 o[16];
    transpose16(acc, o);
    const __mmask16 mk = (__mmask16)((1u << vr) - 1);
    float *y = m->y + (int64_t)g * IG_MM_GROUP * m->ldy + r;
    for (int j = 0; j < nt; j++) _mm512_mask_storeu_ps(y + j * m->ldy, mk, o[j]);
}

static void gemm32_group(const ig_mm *m, int g, tile32 tl, __m512 *out) {
    const int64_t k = m->k, nb = k / IG_QK;
    const uint8_t *ga = m->act + (size_t)g * m->act_stride;
    const float *dx = ig_grp_d(ga, k);
    __m512 acc[TR];
    #pragma GCC unroll 16
    for (int i = 0; i < TR; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i u[8];
        #pragma GCC unroll 16
        for (int s = 0; s < 8; s++) u[s] = _mm512_load_si512((const void *)(ga + (b * 8 + s) * 64));
        const __m512 dxv = _mm512_load_ps(dx + 16 * b);
        /* 4 rows' chains interleaved, so that the dpbusd latency is hidden */
#pragma GCC unroll 2
        for (int i0 = 0; i0 < TR; i0 += 4) {
            __m512i a[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) a[i] = _mm512_set1_epi32(tl.corr[b * TR + i0 + i]);
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    a[i] = _mm512_dpbusd_epi32(a[i], u[s], bcast32(tl.w + (b * TR + i0 + i) * 32 + 4 * s));
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(tl.dw[b * TR + i0 + i]), dxv);
                acc[i0 + i] = _mm512_add_ps(acc[i0 + i], _mm512_mul_ps(_mm512_cvtepi32_ps(a[i]), dd));
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) out[i] = acc[i];
}

/* Tile of TR rows of a K-quant type, per super-block b and row i:
 * w[b][i][256] int8 (q for Q4_K/Q5_K, q - 32 for Q6_K), sc[b][i][16],
 * mp[b][i][4] mins pairs (m[2p] | m[2p+1] << 16), wc[b][i][16] = -128 *
 * sum(w of sub-block j) (Q4_K/Q5_K: j < 8, the rest 0), d[b][i], dmin[b][i].
 * wc starts sub-block j's vpdpbusd chain, so that the chain ends at the
 * exact sum of w * x, which is then scaled by sc[j] and the token's t. */
typedef struct tilek {
    int8_t *w;
    int32_t *sc, *mp, *wc;
    float *d, *dmin;
} tilek;

static tilek tilek_at(uint8_t *s, int64_t nb) {
    tilek t = {.w = (int8_t *)s};
    size_t o = (size_t)nb * TR * 256;
    t.sc = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 64;
    t.mp = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 16;
    t.wc = (int32_t *)(void *)(s + o);
    o += (size_t)nb * TR * 64;
    t.d = (float *)(void *)(s + o);
    o += (size_t)nb * TR * 4;
    t.dmin = (float *)(void *)(s + o);
    return t;
}

static size_t tile_bytes(int64_t k) {
    const size_t a = (size_t)(k / IG_QK) * TR * 40;
    const size_t b = (size_t)(k / IG_QK_K) * TR * (256 + 64 + 16 + 64 + 8);
    return a > b ? a : b;
}

static ALWAYS_INLINE void unpackk_tile(const ig_mm *m, ig_dtype t, int64_t r, int vr, tilek tl) {
    const int64_t nb = m->k / IG_QK_K;
    const size_t bb = ig_blk_bytes(t);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int i = 0; i < TR; i++) {
        const uint8_t *row = m->w + (size_t)(r + i) * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t bi = b * TR + i;
            int8_t *dst = tl.w + bi * 256;
            if (i >= vr) {
                memset(dst, 0, 256);
                memset(tl.sc + bi * 16, 0, 64);
                memset(tl.mp + bi * 4, 0, 16);
                memset(tl.wc + bi * 16, 0, 64);
                tl.d[bi] = tl.dmin[bi] = 0.0f;
                continue;
            }
            const uint8_t *blk = row + (size_t)b * bb;
            int32_t s4[64]; /* s4[e / 4]: the sum of weights e .. e + 3 */
            if (t == IG_TYPE_Q6_K) {
                const __m512i sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
                _mm512_storeu_si512((void *)(tl.sc + bi * 16), sc32);
                #pragma GCC unroll 16
                for (int z = 0; z < 4; z++) {
                    const __m512i w = _mm512_sub_epi8(q6k_part(blk, z), _mm512_set1_epi8(32));
                    _mm512_storeu_si512((void *)(dst + 64 * z), w);
                    _mm512_storeu_si512((void *)(s4 + 16 * z), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, w));
                }
                tl.d[bi] = f16_to_f32(blk + 208);
                tl.dmin[bi] = 0.0f;
                memset(tl.mp + bi * 4, 0, 16);
            } else {
                uint64_t sc, mn;
                k_scales(blk, &sc, &mn);
                const __m512i sc32 = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
                _mm512_storeu_si512((void *)(tl.sc + bi * 16), sc32);
                #pragma GCC unroll 16
                for (int p = 0; p < 4; p++)
                    tl.mp[bi * 4 + p] = (int32_t)(((mn >> (16 * p)) & 0xff) | (((mn >> (16 * p + 8)) & 0xff) << 16));
                #pragma GCC unroll 16
                for (int c = 0; c < 4; c++) {
                    const __m512i w = t == IG_TYPE_Q4_K ? q4k_chunk(blk + 16 + 32 * c) : q5k_chunk(blk, c);
                    _mm512_storeu_si512((void *)(dst + 64 * c), w);
                    _mm512_storeu_si512((void *)(s4 + 16 * c), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, w));
                }
                tl.d[bi] = f16_to_f32(blk);
                tl.dmin[bi] = f16_to_f32(blk + 2);
            }
            /* sub-blocks of 16 (Q6_K) or 32 elements: 4 or 8 entries of s4 */
            const int ns = t == IG_TYPE_Q6_K ? 4 : 8;
            for (int j = 0; j < 16; j++) {
                int32_t s = 0;
                if (j < 64 / ns)
                    for (int l = 0; l < ns; l++) s += s4[ns * j + l];
                tl.wc[bi * 16 + j] = -128 * s;
            }
        }
    }
}

/* Q4_K/Q5_K sub-block j (32 elements; u: its 8 steps of the 16 tokens' x +
 * 128; tt: the tokens' t | t << 16): isum[i] += (sc[j] * t) * sum(w * x),
 * 4 rows' vpdpbusd chains interleaved. sc[j] < 64, so the 16-bit multiply
 * leaves sc[j] * t in the low half and 0 in the high half of each lane. */
static ALWAYS_INLINE void ksub32(tilek tl, int64_t b, int j, const __m512i *u, __m512i tt, __m512i *isum) {
#pragma GCC unroll 2
    for (int i0 = 0; i0 < TR; i0 += 4) {
        __m512i a[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) a[i] = _mm512_set1_epi32(tl.wc[(b * TR + i0 + i) * 16 + j]);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                a[i] = _mm512_dpbusd_epi32(a[i], u[s], bcast32(tl.w + (b * TR + i0 + i) * 256 + 32 * j + 4 * s));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m512i st = _mm512_mullo_epi16(tt, _mm512_set1_epi32(tl.sc[(b * TR + i0 + i) * 16 + j]));
            isum[i0 + i] = _mm512_add_epi32(isum[i0 + i], _mm512_mullo_epi32(a[i], st));
        }
    }
}

/* Q6_K sub-blocks 2p and 2p + 1 (16 elements each), which share the
 * tokens' t (tv: t per lane): isum[i] += t * (sc[2p] * sum(w * x) +
 * sc[2p+1] * sum(w * x)), 2 rows' 2 chains interleaved. */
static ALWAYS_INLINE void ksub16x2(tilek tl, int64_t b, int p, const __m512i *u, __m512i tv, __m512i *isum) {
#pragma GCC unroll 4
    for (int i0 = 0; i0 < TR; i0 += 2) {
        __m512i a[2][2];
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) a[i][h] = _mm512_set1_epi32(tl.wc[(b * TR + i0 + i) * 16 + 2 * p + h]);
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++)
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    a[i][h] = _mm512_dpbusd_epi32(a[i][h], u[4 * h + s],
                                                  bcast32(tl.w + (b * TR + i0 + i) * 256 + 32 * p + 16 * h + 4 * s));
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            const int32_t *sc = tl.sc + (b * TR + i0 + i) * 16 + 2 * p;
            const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(a[i][0], _mm512_set1_epi32(sc[0])),
                                               _mm512_mullo_epi32(a[i][1], _mm512_set1_epi32(sc[1])));
            isum[i0 + i] = _mm512_add_epi32(isum[i0 + i], _mm512_mullo_epi32(s, tv));
        }
    }
}

static ALWAYS_INLINE void gemmk_group_t(const ig_mm *m, ig_dtype t, int g, tilek tl, __m512 *out) {
    const int64_t k = m->k, nb = k / IG_QK_K;
    const uint8_t *ga = m->act + (size_t)g * m->act_stride;
    const float *dx = ig_grp_d(ga, k);
    const int32_t *gbs = ig_grp_bs(ga, k);
    const int32_t *gt = ig_grp_t(ga, k);
    __m512 acc[TR];
    #pragma GCC unroll 16
    for (int i = 0; i < TR; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i isum[TR];
        #pragma GCC unroll 16
        for (int i = 0; i < TR; i++) isum[i] = _mm512_setzero_si512();
        const uint8_t *ub = ga + b * 64 * 64; /* 64 steps of 4 elements */
        /* 32 elements at a time: one multiplier t per token */
        for (int p = 0; p < 8; p++) {
            __m512i u[8];
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) u[s] = _mm512_load_si512((const void *)(ub + (8 * p + s) * 64));
            const __m512i tt = _mm512_load_si512((const void *)(gt + (8 * b + p) * 16));
            if (t == IG_TYPE_Q6_K) ksub16x2(tl, b, p, u, _mm512_and_si512(tt, _mm512_set1_epi32(0xffff)), isum);
            else ksub32(tl, b, p, u, tt, isum);
        }
        const __m512 dxv = _mm512_load_ps(dx + 16 * b);
        if (t == IG_TYPE_Q6_K) {
            #pragma GCC unroll 16
            for (int i = 0; i < TR; i++) {
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(tl.d[b * TR + i]), dxv);
                acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[i])));
            }
        } else {
            __m512i bsp[4];
            #pragma GCC unroll 16
            for (int p = 0; p < 4; p++) bsp[p] = _mm512_load_si512((const void *)(gbs + (b * 4 + p) * 16));
            #pragma GCC unroll 16
            for (int i = 0; i < TR; i++) {
                __m512i imin = _mm512_setzero_si512();
                #pragma GCC unroll 16
                for (int p = 0; p < 4; p++)
                    imin = _mm512_dpwssd_epi32(imin, bsp[p], _mm512_set1_epi32(tl.mp[(b * TR + i) * 4 + p]));
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(tl.d[b * TR + i]), dxv);
                const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(tl.dmin[b * TR + i]), dxv);
                const __m512 hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[i]));
                const __m512 lo = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                acc[i] = _mm512_add_ps(acc[i], _mm512_sub_ps(hi, lo));
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) out[i] = acc[i];
}

/* 16 rows at a time (two tiles of 8), so that each token's results fill
 * whole cache lines of y. */
static void gemm(const ig_mm *m, int64_t r0, int64_t r1, uint8_t *scratch) {
    const int groups = (m->n + IG_MM_GROUP - 1) / IG_MM_GROUP;
    const ig_dtype t = m->type;
    const bool kq = ig_mm_act_kind(t) == IG_ACT_Q8_K;
    const size_t tb = ig_mm_align64(tile_bytes(m->k));
    for (int64_t r = r0; r < r1; r += 2 * TR) {
        const int vr = (int)IG_MIN(2 * TR, r1 - r);
        const int nt = vr > TR ? 2 : 1;
        __m512 acc[2 * TR];
        for (int i = 0; i < 2 * TR; i++) acc[i] = _mm512_setzero_ps();
        if (kq) {
            tilek tl[2];
            for (int h = 0; h < nt; h++) {
                tl[h] = tilek_at(scratch + h * tb, m->k / IG_QK_K);
                const int hr = IG_MIN(TR, vr - h * TR);
                switch (t) {
                case IG_TYPE_Q4_K: unpackk_tile(m, IG_TYPE_Q4_K, r + h * TR, hr, tl[h]); break;
                case IG_TYPE_Q5_K: unpackk_tile(m, IG_TYPE_Q5_K, r + h * TR, hr, tl[h]); break;
                default: unpackk_tile(m, IG_TYPE_Q6_K, r + h * TR, hr, tl[h]); break;
                }
            }
            for (int g = 0; g < groups; g++) {
                for (int h = 0; h < nt; h++) {
                    if (t == IG_TYPE_Q6_K) gemmk_group_t(m, IG_TYPE_Q6_K, g, tl[h], acc + h * TR);
                    else gemmk_group_t(m, IG_TYPE_Q4_K, g, tl[h], acc + h * TR);
                }
                store_tile(m, r, vr, g, acc);
            }
        } else {
            tile32 tl[2];
            for (int h = 0; h < nt; h++) {
                tl[h] = tile32_at(scratch + h * tb, m->k / IG_QK);
                const int hr = IG_MIN(TR, vr - h * TR);
                switch (t) {
                case IG_TYPE_Q8_0: unpack32_tile(m, IG_TYPE_Q8_0, r + h * TR, hr, tl[h]); break;
                case IG_TYPE_Q4_0: unpack32_tile(m, IG_TYPE_Q4_0, r + h * TR, hr, tl[h]); break;
                default: unpack32_tile(m, IG_TYPE_Q5_0, r + h * TR, hr, tl[h]); break;
                }
            }
            for (int g = 0; g < groups; g++) {
                for (int h = 0; h < nt; h++) gemm32_group(m, g, tl[h], acc + h * TR);
                store_tile(m, r, vr, g, acc);
            }
        }
    }
}

static void matmul_avx512(const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    if (r0 >= r1 || m->n <= 0) return;
    if (ig_mm_act_kind(m->type) == IG_ACT_F32) float_rows(m, r0, r1, scratch);
    else if (m->grouped) gemm(m, r0, r1, scratch);
    else quant_rows(m, r0, r1);
}

static size_t scratch_avx512(int64_t k) {
    const size_t fl = float_scratch(k);
    size_t s = 2 * ig_mm_align64(tile_bytes(k));
    if (fl > s) s = fl;
    return s + 64;
}

const ig_mm_isa ig_mm_isa_avx512 = {
    .name = "avx512",
    .gemm_min = 4,
    .quant_row = quant_row_avx512,
    .matmul = matmul_avx512,
    .scratch_bytes = scratch_avx512,
    .attn = ig_attn_block_avx512,
    .geglu = ig_geglu_avx512,
    .rmsnorm = ig_rmsnorm_avx512,
    .to_f16 = ig_to_f16_avx512,
};
