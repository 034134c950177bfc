/* AVX2 attention block: the AVX-512 kernel's structure with 8 lanes: scores
 * of 2 query rows x 4 keys per register tile, online softmax with a
 * vectorized exp, P·V with each V chunk converted once per 4 rows. */
#include "backend/cpu/attention.h"
#include "backend/cpu/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Lane i = sum of the lanes of v[i]. */
static ALWAYS_INLINE __m256 hsum8x(const __m256 v[8]) {
    const __m256 s0 = _mm256_hadd_ps(v[0], v[1]), s1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s2 = _mm256_hadd_ps(v[4], v[5]), s3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 t0 = _mm256_hadd_ps(s0, s1), t1 = _mm256_hadd_ps(s2, s3);
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* 8 elements from element i of a row (n - i < 8: zero-padded). */
static ALWAYS_INLINE __m256 load8(const void *base, bool f16, size_t off, int n, int i) {
    if (n - i >= 8) {
        if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)base + off)));
        return _mm256_loadu_ps((const float *)base + off);
    }
    float t[8] = {0};
    if (f16) {
        uint16_t h[8] = {0};
        memcpy(h, (const uint16_t *)base + off, 2 * (size_t)(n - i));
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
    }
    memcpy(t, (const float *)base + off, 4 * (size_t)(n - i));
    return _mm256_loadu_ps(t);
}

static ALWAYS_INLINE void store8(float *p, __m256 v, int n, int i) {
    if (n - i >= 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, 4 * (size_t)(n - i));
}

void ig_attn_block_avx2(const ig_attn_block *a) {
    const int R = a->n_rows, RP = (R + 3) & ~3, hd = a->hd, hdv = a->hdv;
    float *s = a->scratch;
    float *m = s + 2 * IG_ATTN_MAX_ROWS * IG_ATTN_TILE;
    float *l = m + IG_ATTN_MAX_ROWS;
    float *dummy = l + 3 * IG_ATTN_MAX_ROWS;
    const float *q[IG_ATTN_MAX_ROWS];
    float *o[IG_ATTN_MAX_ROWS];
    int lo[IG_ATTN_MAX_ROWS], hi[IG_ATTN_MAX_ROWS];
    for (int r = 0; r < RP; r++) {
        const bool real = r < R;
        q[r] = a->q[real ? r : 0];
        o[r] = real ? a->o[r] : dummy;
        lo[r] = real ? a->lo[r] : 1;
        hi[r] = real ? a->hi[r] : 0;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(o[r], 0, (size_t)hdv * sizeof(float));
    }
    const size_t kst = a->kstride, vst = a->vstride;
    /* Tiles at multiples of IG_ATTN_TILE, so that a row meets the same tiles
     * (and so the same rounding) whichever rows share its block. */
    for (int j0 = a->jlo - a->jlo % IG_ATTN_TILE; j0 <= a->jhi; j0 += IG_ATTN_TILE) {
        const int nk = a->jhi - j0 + 1 < IG_ATTN_TILE ? a->jhi - j0 + 1 : IG_ATTN_TILE;
        const int jb = j0 < a->jlo ? a->jlo - j0 : 0; /* keys before jlo: no row sees them */
        /* Scores: pairs of rows x quads of keys. */
        for (int rg = 0; rg < RP; rg += 2) {
            for (int kq = 0; kq < nk; kq += 4) {
                size_t koff[4];
#pragma GCC unroll 4
                for (int kk = 0; kk < 4; kk++) {
                    const int j = j0 + (kq + kk < nk ? kq + kk : nk - 1);
                    koff[kk] = (size_t)(j % a->cap) * kst;
                }
                __m256 acc[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
                for (int c = 0; c < hd; c += 8) {
                    __m256 kv[4];
#pragma GCC unroll 4
                    for (int kk = 0; kk < 4; kk++) kv[kk] = load8(a->k, a->f16, koff[kk] + (size_t)c, hd, c);
#pragma GCC unroll 2
                    for (int r = 0; r < 2; r++) {
                        const __m256 qv = load8(q[rg + r], false, (size_t)c, hd, c);
#pragma GCC unroll 4
                        for (int kk = 0; kk < 4; kk++) acc[4 * r + kk] = _mm256_fmadd_ps(qv, kv[kk], acc[4 * r + kk]);
                    }
                }
                float sums[8];
                _mm256_storeu_ps(sums, hsum8x(acc));
                for (int r = 0; r < 2; r++) memcpy(s + (rg + r) * IG_ATTN_TILE + kq, sums + 4 * r, 16);
            }
        }
        /* Online softmax, row by row (16 lanes as two halves). */
        for (int r = 0; r < RP; r++) {
            float *sr = s + r * IG_ATTN_TILE;
            float mx = m[r];
            bool any = false;
            for (int jj = 0; jj < nk; jj++) {
                float v = sr[jj] * a->scale;
                if (a->softcap > 0) v = a->softcap * tanhf(v / a->softcap);
                const int j = j0 + jj;
                if (j < lo[r] || j > hi[r]) v = -INFINITY;
                else any = true;
                sr[jj] = v;
                if (v > mx) mx = v;
            }
            for (int jj = nk; jj < IG_ATTN_TILE; jj++) sr[jj] = -INFINITY;
            if (!any) {
                memset(sr, 0, sizeof(float) * IG_ATTN_TILE);
                continue;
            }
            float sum = 0.0f;
            for (int h = 0; h < 2; h++) {
                const __m256 v = _mm256_loadu_ps(sr + 8 * h);
                const __m256 vis = _mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
                const __m256 p = _mm256_and_ps(vis, ig_exp8(_mm256_sub_ps(v, _mm256_set1_ps(mx))));
                _mm256_storeu_ps(sr + 8 * h, p);
                float t[8];
                _mm256_storeu_ps(t, p);
                for (int i = 0; i < 8; i++) sum += t[i];
            }
            const float corr = expf(m[r] - mx);
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            if (corr != 1.0f) {
                const __m256 cv = _mm256_set1_ps(corr);
                for (int c = 0; c < hdv; c += 8)
                    store8(o[r] + c, _mm256_mul_ps(load8(o[r], false, (size_t)c, hdv, c), cv), hdv, c);
            }
        }
        /* O += P V, 4 rows per pass over the V tile. */
        for (int rg = 0; rg < RP; rg += 4) {
            for (int c = 0; c < hdv; c += 8) {
                __m256 acc[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) acc[r] = load8(o[rg + r], false, (size_t)c, hdv, c);
                for (int jj = jb; jj < nk; jj++) {
                    const __m256 v = load8(a->v, a->f16, (size_t)((j0 + jj) % a->cap) * vst + (size_t)c, hdv, c);
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(s[(rg + r) * IG_ATTN_TILE + jj]), v, acc[r]);
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) store8(o[rg + r] + c, acc[r], hdv, c);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
        for (int c = 0; c < hdv; c += 8) store8(o[r] + c, _mm256_mul_ps(load8(o[r], false, (size_t)c, hdv, c), inv), hdv, c);
    }
}
