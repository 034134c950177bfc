/* AVX-512 attention block: scores of 4 query rows x 4 keys per register
 * tile (K converted from f16 with vcvtph2ps), a vectorized exp for the
 * online softmax, and P·V with each V chunk converted once per 4 rows. */
#include "backend/cpu/attention.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* e^x for x <= 88 (lanes below -87.3 give ~1e-38, callers mask them). */
static ALWAYS_INLINE __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Lane i = sum of the lanes of v[i]. */
static ALWAYS_INLINE __m512 hsum16x(const __m512 v[16]) {
    __m512 s1[8], s2[4], s3[2];
    #pragma GCC unroll 16
    for (int p = 0; p < 8; p++)
        s1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    #pragma GCC unroll 16
    for (int p = 0; p < 4; p++)
        s2[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * p], s1[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s1[2 * p], s1[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int p = 0; p < 2; p++)
        s3[p] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * p], s2[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(s2[2 * p], s2[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4q + i holds sum(v[4i + q]) */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, s);
}

static ALWAYS_INLINE __m512 load_kv(const void *base, bool f16, size_t off, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + off));
    return _mm512_maskz_loadu_ps(m, (const float *)base + off);
}

static ALWAYS_INLINE __mmask16 tail_mask(int n, int i) {
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

void ig_attn_block_avx512(const ig_attn_block *a) {
    const int R = a->n_rows, RP = (R + 3) & ~3, hd = a->hd, hdv = a->hdv;
    float *s = a->scratch;                               /* [16][16] scores, then weights */
    float *m = s + 2 * IG_ATTN_MAX_ROWS * IG_ATTN_TILE;  /* [16] */
    float *l = m + IG_ATTN_MAX_ROWS;                     /* [16] */
    float *dummy = l + 3 * IG_ATTN_MAX_ROWS;             /* padding rows' output */
    const float *q[IG_ATTN_MAX_ROWS];
    float *o[IG_ATTN_MAX_ROWS];
    int lo[IG_ATTN_MAX_ROWS], hi[IG_ATTN_MAX_ROWS];
    for (int r = 0; r < RP; r++) {
        const bool real = r < R;
        q[r] = a->q[real ? r : 0];
        o[r] = real ? a->o[r] : dummy;
        lo[r] = real ? a->lo[r] : 1;
        hi[r] = real ? a->hi[r] : 0; /* empty */
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(o[r], 0, (size_t)hdv * sizeof(float));
    }
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const size_t kst = a->kstride, vst = a->vstride;
    /* Tiles at multiples of IG_ATTN_TILE, so that a row meets the same tiles
     * (and so the same rounding) whichever rows share its block. */
    for (int j0 = a->jlo - a->jlo % IG_ATTN_TILE; j0 <= a->jhi; j0 += IG_ATTN_TILE) {
        const int nk = a->jhi - j0 + 1 < IG_ATTN_TILE ? a->jhi - j0 + 1 : IG_ATTN_TILE;
        const int jb = j0 < a->jlo ? a->jlo - j0 : 0; /* keys before jlo: no row sees them */
        /* Scores: row groups of 4 x key quads of 4. */
        for (int rg = 0; rg < RP; rg += 4) {
            for (int kq = 0; kq < nk; kq += 4) {
                size_t koff[4];
                #pragma GCC unroll 16
                for (int kk = 0; kk < 4; kk++) {
                    const int j = j0 + (kq + kk < nk ? kq + kk : nk - 1);
                    koff[kk] = (size_t)(j % a->cap) * kst;
                }
                __m512 acc[16];
                #pragma GCC unroll 16
                for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
                for (int c = 0; c < hd; c += 16) {
                    const __mmask16 mk = tail_mask(hd, c);
                    __m512 kv[4], qv[4];
                    #pragma GCC unroll 16
                    for (int kk = 0; kk < 4; kk++) kv[kk] = load_kv(a->k, a->f16, koff[kk] + (size_t)c, mk);
                    #pragma GCC unroll 16
                    for (int r = 0; r < 4; r++) qv[r] = _mm512_maskz_loadu_ps(mk, q[rg + r] + c);
                    #pragma GCC unroll 16
                    for (int r = 0; r < 4; r++)
                        #pragma GCC unroll 16
                        for (int kk = 0; kk < 4; kk++)
                            acc[4 * r + kk] = _mm512_fmadd_ps(qv[r], kv[kk], acc[4 * r + kk]);
                }
                float sums[16];
                _mm512_storeu_ps(sums, hsum16x(acc));
                #pragma GCC unroll 16
                for (int r = 0; r < 4; r++) memcpy(s + (rg + r) * IG_ATTN_TILE + kq, sums + 4 * r, 16);
            }
        }
        /* Online softmax, row by row. */
        const __m512i jv = _mm512_add_epi32(iota, _mm512_set1_epi32(j0));
        for (int r = 0; r < RP; r++) {
            float *sr = s + r * IG_ATTN_TILE;
            __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(sr), _mm512_set1_ps(a->scale));
            if (a->softcap > 0) {
                _mm512_storeu_ps(sr, sv);
                #pragma GCC unroll 16
                for (int jj = 0; jj < IG_ATTN_TILE; jj++) sr[jj] = a->softcap * tanhf(sr[jj] / a->softcap);
                sv = _mm512_loadu_ps(sr);
            }
            const __mmask16 vis = _mm512_cmplt_epi32_mask(iota, _mm512_set1_epi32(nk)) &
                                  _mm512_cmpge_epi32_mask(jv, _mm512_set1_epi32(lo[r])) &
                                  _mm512_cmple_epi32_mask(jv, _mm512_set1_epi32(hi[r]));
            if (!vis) {
                _mm512_storeu_ps(sr, _mm512_setzero_ps());
                continue;
            }
            const float bmax = _mm512_mask_reduce_max_ps(vis, sv);
            const float mx = bmax > m[r] ? bmax : m[r];
            const __m512 p = _mm512_maskz_mov_ps(vis, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(mx))));
            _mm512_storeu_ps(sr, p);
            const float corr = expf(m[r] - mx);
            l[r] = l[r] * corr + _mm512_reduce_add_ps(p);
            m[r] = mx;
            if (corr != 1.0f) {
                const __m512 cv = _mm512_set1_ps(corr);
                for (int c = 0; c < hdv; c += 16) {
                    const __mmask16 mk = tail_mask(hdv, c);
                    _mm512_mask_storeu_ps(o[r] + c, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o[r] + c), cv));
                }
            }
        }
        /* O += P V, 4 rows per pass over the V tile. */
        for (int rg = 0; rg < RP; rg += 4) {
            for (int c = 0; c < hdv; c += 16) {
                const __mmask16 mk = tail_mask(hdv, c);
                __m512 acc[4];
                #pragma GCC unroll 16
                for (int r = 0; r < 4; r++) acc[r] = _mm512_maskz_loadu_ps(mk, o[rg + r] + c);
                #pragma GCC unroll 16
                for (int jj = jb; jj < nk; jj++) {
                    const __m512 v = load_kv(a->v, a->f16, (size_t)((j0 + jj) % a->cap) * vst + (size_t)c, mk);
                    #pragma GCC unroll 16
                    for (int r = 0; r < 4; r++)
                        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(s[(rg + r) * IG_ATTN_TILE + jj]), v, acc[r]);
                }
                #pragma GCC unroll 16
                for (int r = 0; r < 4; r++) _mm512_mask_storeu_ps(o[rg + r] + c, mk, acc[r]);
            }
        }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        for (int c = 0; c < hdv; c += 16) {
            const __mmask16 mk = tail_mask(hdv, c);
            _mm512_mask_storeu_ps(o[r] + c, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o[r] + c), inv));
        }
    }
}
