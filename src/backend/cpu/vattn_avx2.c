/* AVX2 attention with every key visible (attention.h, ig_vattn): scores of
 * 6 query rows x 16 keys in 12 registers over the head dimension, online
 * softmax with a vectorized exp, P·V as 4 rows x 24 values in 12 registers
 * over the tile's keys. The keys and values are packed once per head
 * (ig_vattn_pack_avx2): read in place, rows a head's width apart (4.5 KiB
 * in the released tower) fall into a few L1 sets and stream badly. */
#include "backend/cpu/attention.h"
#include "backend/cpu/simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define BQ IG_VATTN_BQ
#define BK IG_VATTN_BK

static ALWAYS_INLINE void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

void ig_vattn_pack_avx2(const float *k, const float *v, size_t stride, int n, int hd, int tile0, int tile1,
                        float *kt, float *vp) {
    for (int t = tile0; t < tile1; t++) {
        const int j0 = t * BK, nk = n - j0 < BK ? n - j0 : BK;
        float *kd = kt + (size_t)t * BK * hd;
        for (int jb = 0; jb < BK; jb += 8)
            for (int d = 0; d < hd; d += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = jb + i < nk ? _mm256_loadu_ps(k + (size_t)(j0 + jb + i) * stride + d) : _mm256_setzero_ps();
                transpose8(r);
                for (int i = 0; i < 8; i++) _mm256_store_ps(kd + (size_t)(d + i) * BK + jb, r[i]);
            }
        for (int jj = 0; jj < BK; jj++) {
            float *dst = vp + (size_t)(j0 + jj) * hd;
            if (jj < nk) memcpy(dst, v + (size_t)(j0 + jj) * stride, (size_t)hd * sizeof *dst);
            else memset(dst, 0, (size_t)hd * sizeof *dst);
        }
    }
}

/* s[r][jj] for rows r0 .. r0 + 5, keys jj0 .. jj0 + 15. */
static ALWAYS_INLINE void scores6x16(const float *qb, const float *kt, float *s, int hd, int r0, int jj0) {
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const __m256 k0 = _mm256_load_ps(kt + (size_t)d * BK + jj0), k1 = _mm256_load_ps(kt + (size_t)d * BK + jj0 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256 qv = _mm256_broadcast_ss(qb + (size_t)(r0 + i) * hd + d);
            acc[i][0] = _mm256_fmadd_ps(qv, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(qv, k1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_store_ps(s + (size_t)(r0 + i) * BK + jj0, acc[i][0]);
        _mm256_store_ps(s + (size_t)(r0 + i) * BK + jj0 + 8, acc[i][1]);
    }
}

/* ob[r][c .. c + 8 NV) += sum over keys of p[r][jj] vt[jj], rows r0 .. r0 + 3. */
static ALWAYS_INLINE void pv4(const float *vt, int hd, const float *p, float *ob, int nk, int r0, int c,
                              const int NV) {
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 3
        for (int h = 0; h < NV; h++) acc[i][h] = _mm256_load_ps(ob + (size_t)(r0 + i) * hd + c + 8 * h);
    const float *vr = vt + c;
    for (int jj = 0; jj < nk; jj++, vr += hd) {
        __m256 vv[3];
#pragma GCC unroll 3
        for (int h = 0; h < NV; h++) vv[h] = _mm256_load_ps(vr + 8 * h);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256 pb = _mm256_broadcast_ss(p + (size_t)(r0 + i) * BK + jj);
#pragma GCC unroll 3
            for (int h = 0; h < NV; h++) acc[i][h] = _mm256_fmadd_ps(pb, vv[h], acc[i][h]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 3
        for (int h = 0; h < NV; h++) _mm256_store_ps(ob + (size_t)(r0 + i) * hd + c + 8 * h, acc[i][h]);
}

void ig_vattn_rows_avx2(const ig_vattn *a, int t0, int nq, float *scratch) {
    const int hd = a->hd;
    float *qb = scratch, *ob = qb + (size_t)BQ * hd, *s = ob + (size_t)BQ * hd, *m = s + (size_t)BQ * BK;
    float *l = m + BQ;
    /* the block's queries, scaled; rows past nq are zeros (computed, not stored) */
    for (int r = 0; r < BQ; r++) {
        float *qr = qb + (size_t)r * hd;
        if (r < nq) {
            const float *src = a->q + (size_t)(t0 + r) * a->stride;
            for (int d = 0; d < hd; d++) qr[d] = src[d] * a->scale;
        } else {
            memset(qr, 0, (size_t)hd * sizeof *qr);
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(ob, 0, (size_t)BQ * hd * sizeof *ob);
    for (int j0 = 0; j0 < a->n; j0 += BK) {
        const int nk = a->n - j0 < BK ? a->n - j0 : BK;
        const float *kt = a->kt + (size_t)j0 * hd, *vt = a->vp + (size_t)j0 * hd;
        for (int r = 0; r < BQ; r += 6)
            for (int jj = 0; jj < BK; jj += 16) scores6x16(qb, kt, s, hd, r, jj);
        for (int r = 0; r < BQ; r++) {
            float *sr = s + (size_t)r * BK;
            for (int jj = nk; jj < BK; jj++) sr[jj] = -INFINITY;
            __m256 mx = _mm256_load_ps(sr);
            for (int jj = 8; jj < BK; jj += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(sr + jj));
            const float mt = ig_hmax256(mx), mn = mt > m[r] ? mt : m[r];
            const __m256 mv = _mm256_set1_ps(mn);
            __m256 sum = _mm256_setzero_ps();
            for (int jj = 0; jj < BK; jj += 8) {
                __m256 e = ig_exp8(_mm256_sub_ps(_mm256_load_ps(sr + jj), mv));
                if (jj + 8 > nk) /* keys past the end: exactly 0 (exp8 clamps) */
                    e = _mm256_and_ps(e, _mm256_cmp_ps(_mm256_load_ps(sr + jj), _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ));
                _mm256_store_ps(sr + jj, e);
                sum = _mm256_add_ps(sum, e);
            }
            const float corr = expf(m[r] - mn); /* 0 on the first tile */
            l[r] = l[r] * corr + ig_hsum256(sum);
            m[r] = mn;
            if (corr != 1.0f) {
                float *orow = ob + (size_t)r * hd;
                const __m256 cv = _mm256_set1_ps(corr);
                for (int d = 0; d < hd; d += 8) _mm256_store_ps(orow + d, _mm256_mul_ps(_mm256_load_ps(orow + d), cv));
            }
        }
        for (int r = 0; r < BQ; r += 4) {
            int c = 0;
            for (; c + 24 <= hd; c += 24) pv4(vt, hd, s, ob, nk, r, c, 3);
            if (hd - c == 16) pv4(vt, hd, s, ob, nk, r, c, 2);
            else if (hd - c == 8) pv4(vt, hd, s, ob, nk, r, c, 1);
        }
    }
    for (int r = 0; r < nq; r++) {
        const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
        float *dst = a->o + (size_t)(t0 + r) * a->stride;
        for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_load_ps(ob + (size_t)r * hd + d), inv));
    }
}
