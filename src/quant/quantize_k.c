/* The K-quant quantizers of llama.cpp's reference path (ggml's
 * quantize_row_{q4,q5,q6}_K_ref, used by llama-quantize without an
 * importance matrix), reproduced bit for bit; and the quantizers
 * llama-quantize uses with an importance matrix (ggml's
 * quantize_row_*_impl with quant_weights, for Q4_0, Q5_0, Q5_1, Q4_K, Q5_K
 * and Q6_K), also bit for bit.
 *
 * Every quantity is a float computed by the same operations, in the same
 * order, as there: the sums accumulate left to right, a*b*c is (a*b)*c, and
 * int values enter a product as floats. The file is compiled with
 * -ffp-contract=off (CMakeLists.txt): a fused multiply-add rounds once where
 * the reference rounds twice (nearest_int's x*s + 1.5*2^23, the search's
 * sum_w*sum_l2 - sum_l*sum_l), which changes levels and scales at ties.
 * ggml's reference is built without FMA on x86-64 (SSE2 baseline), so
 * plain float operations are its arithmetic. */
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define EPS_ZERO_GROUP 1e-15f /* below this a group's amax counts as zero */

/* Round to nearest (ties to even) by adding 1.5*2^23 and reading the low
 * mantissa bits, as ggml does; exact for |v| <= 2^22 - 1, and defined (if
 * meaningless) for anything else, NaN included. */
static int nearest(float v) {
    const float t = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Asymmetric levels 0..nmax for 32 weighted values: x ~ scale*L - the_min.
 * Starts from the min..max grid, then tries nstep+1 other grid densities
 * (nmax + rmin + rdelta*is levels over the range), fits scale and min by
 * weighted least squares for each, and keeps the one of least weighted
 * squared error. Returns the scale; *the_min gets the (non-negative)
 * offset. */
static float fit_asym(int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                      float rmin, float rdelta, int nstep) {
    const int n = 32;
    uint8_t aux[32];
    float lo = x[0], hi = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *the_min = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * (float)L[i] + lo - x[i];
        diff = diff * diff;
        best += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
            aux[i] = (uint8_t)l;
            const float fl = (float)l;
            sum_l += w[i] * fl;
            sum_l2 += w[i] * fl * fl;
            sum_xl += w[i] * fl * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D;
            float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) {
                m = 0;
                s = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = s * (float)aux[i] + m - x[i];
                diff = diff * diff;
                err += w[i] * diff;
            }
            if (err < best) {
                memcpy(L, aux, (size_t)n);
                best = err;
                scale = s;
                lo = m;
            }
        }
    }
    *the_min = -lo;
    return scale;
}

/* One Q4_K (nmax 15) or Q5_K (nmax 31) super-block: the header (d, dmin,
 * packed 6-bit scales and mins) into hdr, the levels 0..nmax into L. */
static void quant_k_asym_block(const float *x, int nmax, float rmin, int nstep, ig_block_q4_K *hdr,
                               uint8_t L[IG_QK_K]) {
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = fit_asym(nmax, xj, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t *s = hdr->scales;
    for (int j = 0; j < 8; j++) {
        /* Like ggml, the int is narrowed to a byte before the clamp. */
        uint8_t ls = (uint8_t)nearest(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    hdr->d = ig_f32_to_f16(max_scale / 63.f);
    hdr->dmin = ig_f32_to_f16(max_min / 63.f);
    const float d_all = ig_f16_to_f32(hdr->d), dmin_all = ig_f16_to_f32(hdr->dmin);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ig_q4_K_scale_min(s, j, &sc, &m);
        const float d = d_all * (float)sc;
        if (d == 0) continue; /* keeps the search's levels */
        const float dm = dmin_all * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

/* A Q4_K block's nibbles from its levels (L[256], 0..15): element l of
 * each 64 in the low nibble, l + 32 in the high one. */
static void pack_q4_K(ig_block_q4_K *b, const uint8_t *L) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

/* A Q5_K block from the scales of hdr and its levels (L[256], 0..31): low
 * nibbles as Q4_K's, the fifth bits in qh. */
static void pack_q5_K(const ig_block_q4_K *hdr, const uint8_t *L, ig_block_q5_K *b) {
    b->d = hdr->d;
    b->dmin = hdr->dmin;
    memcpy(b->scales, hdr->scales, sizeof b->scales);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            const int e0 = 64 * c + l, e1 = e0 + 32;
            b->qs[32 * c + l] = (uint8_t)((L[e0] & 0xf) | ((L[e1] & 0xf) << 4));
            b->qh[l] |= (uint8_t)(((L[e0] >> 4) << (2 * c)) | ((L[e1] >> 4) << (2 * c + 1)));
        }
}

static void quant_q4_K_ggml(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += IG_QK_K) {
        ig_block_q4_K b;
        uint8_t L[IG_QK_K];
        quant_k_asym_block(x, 15, -1.f, 20, &b, L);
        pack_q4_K(&b, L);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void quant_q5_K_ggml(const float *x, uint8_t *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += IG_QK_K) {
        ig_block_q4_K hdr;
        ig_block_q5_K b;
        uint8_t L[IG_QK_K];
        quant_k_asym_block(x, 31, -0.5f, 15, &hdr, L);
        pack_q5_K(&hdr, L, &b);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* Symmetric levels -nmax..nmax-1 (stored + nmax) for n values, weighted by
 * qw (NULL: by x^2): starts from the grid through the largest |x| and tries
 * 18 nearby grid densities, keeping the one whose least-squares scale
 * explains the most. Returns the scale (signed: the grid is set by the
 * signed extreme). ggml's make_qx_quants with rmse_type 1. */
static float fit_sym(int n, int nmax, const float *x, const float *qw, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < EPS_ZERO_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i], fl = (float)l;
        sumlx += w * x[i] * fl;
        suml2 += w * fl * fl;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i], fl = (float)l;
            sumlx += w * x[i] * fl;
            suml2 += w * fl * fl;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* qw: the row's importance (NULL: none, ggml's reference) */
static void quant_q6_K_ggml(const float *x, uint8_t *dst, int64_t nb, const float *qw) {
    for (int64_t i = 0; i < nb; i++, x += IG_QK_K, qw = qw ? qw + IG_QK_K : NULL) {
        ig_block_q6_K b;
        int8_t L[IG_QK_K];
        float scales[16];
        float max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_sym(16, 32, x + 16 * ib, qw ? qw + 16 * ib : NULL, L + 16 * ib);
            const float a = fabsf(scales[ib]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[ib];
            }
        }
        memset(&b, 0, sizeof b);
        if (max_abs < EPS_ZERO_GROUP) {
            b.d = ig_f32_to_f16(0.f);
            memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
            continue;
        }
        const float iscale = -128.f / max_scale;
        b.d = ig_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            const int v = nearest(iscale * scales[ib]);
            b.scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        const float d_all = ig_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            const float d = d_all * (float)b.scales[j];
            if (d == 0) continue; /* keeps the search's levels */
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest(x[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                b.ql[64 * h + l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
                b.ql[64 * h + l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
                b.qh[32 * h + l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

void ig_quantize_row_ggml(ig_dtype type, const float *src, void *dst, int64_t n) {
    const int64_t nb = n / IG_QK_K;
    switch (type) {
    case IG_TYPE_Q4_K: quant_q4_K_ggml(src, dst, nb); break;
    case IG_TYPE_Q5_K: quant_q5_K_ggml(src, dst, nb); break;
    case IG_TYPE_Q6_K: quant_q6_K_ggml(src, dst, nb, NULL); break;
    default: ig_quantize_row(type, src, dst, n); break;
    }
}

/* ---- With an importance matrix ---------------------------------------------
 * qw holds one weight per column of the row: the imatrix's mean square of
 * the matmul input in that column. The error each search minimises is
 * sum qw[i] * sqrt(sigma2 + x[i]^2) * (x[i] - q[i])^2 (Q6_K: qw[i] alone). */

/* Asymmetric levels 0..nmax for 32 weighted values, x ~ scale*L - the_min:
 * ggml's make_qkx3_quants with rmin -0.9, rdelta 0.05, 36 steps, squared
 * error, which is fit_asym's search with those grids. */
static float fit_asym_w(int nmax, const float *x, const float *w, uint8_t *L, float *the_min) {
    return fit_asym(nmax, x, w, L, the_min, -0.9f, 0.05f, 36);
}

/* 6-bit levels (0..63) for the 8 sub-block scales or mins of a super-block,
 * weighted by the sub-blocks' total weights sw: ggml's make_qp_quants. A
 * grid search over 9 densities, then up to 5 rounds of moving single
 * levels while that improves the least-squares fit. Levels are kept in
 * bytes as there (a negative input would wrap). */
static float fit_pos6(const float *x, uint8_t *L, const float *sw) {
    const int n = 8, nmax = 63;
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < EPS_ZERO_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest(iscale * x[i]);
    const float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best += sw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest(iscale_is * x[i]);
            if (l > nmax) l = nmax;
            const float diff = x[i] - scale_is * (float)l;
            mse += sw[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest(iscale * x[i]);
        if (l > nmax) l = nmax;
        L[i] = (uint8_t)l;
        sumlx += sw[i] * x[i] * (float)l;
        suml2 += sw[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = sw[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest(x[i] * sl2 / slx);
                if (new_l > nmax) new_l = nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* sigma2 + x^2 under a square root, times the importance: each column's
 * weight in the error of the 32-blocks and K sub-blocks. */
static void block_weights(const float *x, const float *qw, float sigma2, int n, float *w) {
    for (int l = 0; l < n; l++) w[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
}

/* One Q4_K (nmax 15) or Q5_K (nmax 31) super-block with importance qw
 * (its 256 columns): ggml's quantize_row_q{4,5}_K_impl. */
static void quant_k_asym_block_w(const float *x, const float *qw, int nmax, ig_block_q4_K *hdr,
                                 uint8_t L[IG_QK_K]) {
    float scales[8], mins[8], sw[8], w[32];
    uint8_t Ls[8], Lm[8];
    float sum_x2 = 0;
    for (int l = 0; l < IG_QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / IG_QK_K;
    for (int j = 0; j < 8; j++) {
        block_weights(x + 32 * j, qw + 32 * j, sigma2, 32, w);
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += w[l];
        sw[j] = sumw;
        scales[j] = fit_asym_w(nmax, x + 32 * j, w, L + 32 * j, &mins[j]);
    }
    const float d_block = fit_pos6(scales, Ls, sw);
    const float m_block = fit_pos6(mins, Lm, sw);
    uint8_t *s = hdr->scales;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = Ls[j], lm = Lm[j];
        if (nmax == 31) { /* only ggml's Q5_K clamps here */
            if (ls > 63) ls = 63;
            if (lm > 63) lm = 63;
        }
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    hdr->d = ig_f32_to_f16(d_block);
    hdr->dmin = ig_f32_to_f16(m_block);
    const float d_all = ig_f16_to_f32(hdr->d), dmin_all = ig_f16_to_f32(hdr->dmin);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ig_q4_K_scale_min(s, j, &sc, &m);
        const float d = d_all * (float)sc;
        if (d == 0) continue; /* keeps the search's levels */
        const float dm = dmin_all * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

static void quant_q4_K_w(const float *x, uint8_t *dst, int64_t nb, const float *qw) {
    for (int64_t i = 0; i < nb; i++, x += IG_QK_K, qw += IG_QK_K) {
        ig_block_q4_K b;
        uint8_t L[IG_QK_K];
        quant_k_asym_block_w(x, qw, 15, &b, L);
        pack_q4_K(&b, L);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

static void quant_q5_K_w(const float *x, uint8_t *dst, int64_t nb, const float *qw) {
    for (int64_t i = 0; i < nb; i++, x += IG_QK_K, qw += IG_QK_K) {
        ig_block_q4_K hdr;
        ig_block_q5_K b;
        uint8_t L[IG_QK_K];
        quant_k_asym_block_w(x, qw, 31, &hdr, L);
        pack_q5_K(&hdr, L, &b);
        memcpy(dst + i * (int64_t)sizeof b, &b, sizeof b);
    }
}

/* The mean square of the whole row: the sigma2 of the 32-block formats. */
static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / (float)n;
}

/* Q4_0 (nmax 8) and Q5_0 (nmax 16): ggml's quantize_row_q{4,5}_0_impl. */
static void quant_sym32_w(const float *x, uint8_t *dst, int64_t n, const float *qw, int nmax) {
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / IG_QK; ib++) {
        const float *xb = x + IG_QK * ib;
        float w[IG_QK];
        int8_t L[IG_QK];
        block_weights(xb, qw + IG_QK * ib, sigma2, IG_QK, w);
        const uint16_t d = ig_f32_to_f16(fit_sym(IG_QK, nmax, xb, w, L));
        if (nmax == 8) {
            ig_block_q4_0 b = {.d = d};
            for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
            memcpy(dst + ib * (int64_t)sizeof b, &b, sizeof b);
        } else {
            ig_block_q5_0 b = {.d = d};
            uint32_t qh = 0;
            for (int j = 0; j < 16; j++) {
                const uint8_t q0 = (uint8_t)L[j], q1 = (uint8_t)L[j + 16];
                b.qs[j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
                qh |= (uint32_t)((q0 & 0x10u) >> 4) << j;
                qh |= (uint32_t)((q1 & 0x10u) >> 4) << (j + 16);
            }
            for (int k = 0; k < 4; k++) b.qh[k] = (uint8_t)(qh >> (8 * k));
            memcpy(dst + ib * (int64_t)sizeof b, &b, sizeof b);
        }
    }
}

/* Q5_1: ggml's quantize_row_q5_1_impl. */
static void quant_q5_1_w(const float *x, uint8_t *dst, int64_t n, const float *qw) {
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / IG_QK; ib++) {
        const float *xb = x + IG_QK * ib;
        float w[IG_QK], min;
        uint8_t L[IG_QK];
        block_weights(xb, qw + IG_QK * ib, sigma2, IG_QK, w);
        const float d = fit_asym_w(31, xb, w, L, &min);
        ig_block_q5_1 b = {.d = ig_f32_to_f16(d), .m = ig_f32_to_f16(-min)};
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (uint8_t)((L[j] & 0xf) | ((L[j + 16] & 0xf) << 4));
            qh |= (uint32_t)((L[j] & 0x10u) >> 4) << j;
            qh |= (uint32_t)((L[j + 16] & 0x10u) >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b.qh[k] = (uint8_t)(qh >> (8 * k));
        memcpy(dst + ib * (int64_t)sizeof b, &b, sizeof b);
    }
}

void ig_quantize_row_imatrix(ig_dtype type, const float *src, void *dst, int64_t n, const float *qw) {
    if (!qw) {
        ig_quantize_row_ggml(type, src, dst, n);
        return;
    }
    switch (type) {
    case IG_TYPE_Q4_0: quant_sym32_w(src, dst, n, qw, 8); break;
    case IG_TYPE_Q5_0: quant_sym32_w(src, dst, n, qw, 16); break;
    case IG_TYPE_Q5_1: quant_q5_1_w(src, dst, n, qw); break;
    case IG_TYPE_Q4_K: quant_q4_K_w(src, dst, n / IG_QK_K, qw); break;
    case IG_TYPE_Q5_K: quant_q5_K_w(src, dst, n / IG_QK_K, qw); break;
    case IG_TYPE_Q6_K: quant_q6_K_ggml(src, dst, n / IG_QK_K, qw); break;
    default: ig_quantize_row_ggml(type, src, dst, n); break; /* Q8_0 and the float types ignore it */
    }
}
