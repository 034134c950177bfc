/* Portable attention block (any CPU): the same tiling and online softmax
 * as the SIMD versions, in plain C. */
#include "backend/cpu/attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Exact binary16 -> binary32 (subnormals, inf and NaN included) without
 * branches on the value's class other than inf/NaN. */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t bits = (uint32_t)(h & 0x7fffu) << 13;
    float f;
    if ((h & 0x7c00u) == 0x7c00u) {
        bits |= 0x7f800000u;
        memcpy(&f, &bits, sizeof f);
    } else {
        memcpy(&f, &bits, sizeof f);
        f *= 0x1p112f; /* exact: rebias the exponent (subnormals become normal) */
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u |= sign;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void load_row(const ig_attn_block *a, const void *base, size_t stride, int j, int n,
                     float *dst) {
    const size_t row = (size_t)(j % a->cap) * stride;
    if (a->f16) {
        const uint16_t *s = (const uint16_t *)base + row;
        for (int i = 0; i < n; i++) dst[i] = half_to_float(s[i]);
    } else {
        memcpy(dst, (const float *)base + row, (size_t)n * sizeof(float));
    }
}

void ig_attn_block_scalar(const ig_attn_block *a) {
    const int R = a->n_rows, hd = a->hd, hdv = a->hdv;
    float *s = a->scratch;                         /* [R][TILE] scores, then weights */
    float *m = s + IG_ATTN_MAX_ROWS * IG_ATTN_TILE; /* running max per row */
    float *l = m + IG_ATTN_MAX_ROWS;               /* running sum per row */
    float *kv = l + IG_ATTN_MAX_ROWS;              /* one converted K or V row */
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(a->o[r], 0, (size_t)hdv * sizeof(float));
    }
    /* Tiles at multiples of IG_ATTN_TILE, so that a row meets the same tiles
     * (and so the same rounding) whichever rows share its block. */
    for (int j0 = a->jlo - a->jlo % IG_ATTN_TILE; j0 <= a->jhi; j0 += IG_ATTN_TILE) {
        const int nk = a->jhi - j0 + 1 < IG_ATTN_TILE ? a->jhi - j0 + 1 : IG_ATTN_TILE;
        const int jb = j0 < a->jlo ? a->jlo - j0 : 0; /* keys before jlo: no row sees them */
        for (int jj = 0; jj < nk; jj++) {
            const int j = j0 + jj;
            load_row(a, a->k, a->kstride, j, hd, kv);
            for (int r = 0; r < R; r++) {
                float *sr = s + r * IG_ATTN_TILE;
                if (j < a->lo[r] || j > a->hi[r]) {
                    sr[jj] = -INFINITY;
                    continue;
                }
                float dot = 0.0f;
                for (int i = 0; i < hd; i++) dot += a->q[r][i] * kv[i];
                dot *= a->scale;
                if (a->softcap > 0) dot = a->softcap * tanhf(dot / a->softcap);
                sr[jj] = dot;
            }
        }
        for (int r = 0; r < R; r++) {
            float *sr = s + r * IG_ATTN_TILE;
            float mx = m[r];
            for (int jj = 0; jj < nk; jj++) mx = fmaxf(mx, sr[jj]);
            if (mx == -INFINITY) { /* nothing visible yet */
                for (int jj = 0; jj < nk; jj++) sr[jj] = 0.0f;
                continue;
            }
            const float corr = expf(m[r] - mx);
            float sum = 0.0f;
            for (int jj = 0; jj < nk; jj++) {
                sr[jj] = expf(sr[jj] - mx);
                sum += sr[jj];
            }
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            if (corr != 1.0f)
                for (int i = 0; i < hdv; i++) a->o[r][i] *= corr;
        }
        for (int jj = jb; jj < nk; jj++) {
            load_row(a, a->v, a->vstride, j0 + jj, hdv, kv);
            for (int r = 0; r < R; r++) {
                const float p = s[r * IG_ATTN_TILE + jj];
                if (p == 0.0f) continue;
                for (int i = 0; i < hdv; i++) a->o[r][i] += p * kv[i];
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const float inv = 1.0f / l[r];
        for (int i = 0; i < hdv; i++) a->o[r][i] *= inv;
    }
}
