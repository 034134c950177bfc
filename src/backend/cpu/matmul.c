/* Matmul dispatch, activation quantization driver, and the scalar kernels:
 * the same integer arithmetic as the references of quant.h (bit-exact with
 * them for the quantized types), for any CPU.
 *
 * Environment: $IGNIS_CPU (scalar, avx2, avx512, neon) picks the kernels
 * when this CPU can run them (ig_mm_isa_select). */
#include "backend/cpu/matmul_impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

ig_act_kind ig_mm_act_kind(ig_dtype type) {
    switch (type) {
    case IG_TYPE_Q8_0:
    case IG_TYPE_Q4_0:
    case IG_TYPE_Q5_0:
    case IG_TYPE_Q5_1: return IG_ACT_Q8_0;
    case IG_TYPE_Q4_K:
    case IG_TYPE_Q5_K:
    case IG_TYPE_Q6_K: return IG_ACT_Q8_K;
    default: return IG_ACT_F32;
    }
}

bool ig_mm_type_supported(ig_dtype type) {
    switch (type) {
    case IG_TYPE_F32:
    case IG_TYPE_F16:
    case IG_TYPE_BF16:
    case IG_TYPE_Q8_0:
    case IG_TYPE_Q4_0:
    case IG_TYPE_Q5_0:
    case IG_TYPE_Q5_1:
    case IG_TYPE_Q4_K:
    case IG_TYPE_Q5_K:
    case IG_TYPE_Q6_K: return true;
    default: return false;
    }
}

/* ---- Activation quantization (scalar reference of the layouts) ------------ */

void ig_mm_quant_row_scalar(ig_act_kind kind, const float *x, int64_t k, uint8_t *dst) {
    if (kind == IG_ACT_Q8_0) {
        const int64_t nb = k / IG_QK;
        float *d = (float *)(void *)(dst + k);
        int32_t *s = (int32_t *)(void *)(dst + k + 4 * nb);
        for (int64_t b = 0; b < nb; b++) {
            ig_block_q8_0 blk;
            ig_quantize_row_q8_0_act(x + b * IG_QK, &blk, IG_QK);
            memcpy(dst + b * IG_QK, blk.qs, IG_QK);
            d[b] = ig_f16_to_f32(blk.d);
            int32_t sum = 0;
            for (int j = 0; j < IG_QK; j++) sum += blk.qs[j];
            s[b] = sum;
        }
    } else if (kind == IG_ACT_Q8_K) {
        const int64_t nb = k / IG_QK_K;
        float *d = (float *)(void *)(dst + k);
        int16_t *bs = (int16_t *)(void *)(dst + k + 4 * nb);
        for (int64_t b = 0; b < nb; b++) {
            ig_block_q8_K blk;
            ig_quantize_row_q8_K(x + b * IG_QK_K, &blk, IG_QK_K);
            memcpy(dst + b * IG_QK_K, blk.qs, IG_QK_K);
            d[b] = blk.d;
            memcpy(bs + 16 * b, blk.bsums, sizeof blk.bsums);
            memcpy(dst + k + 4 * nb + 2 * (k / 16) + 8 * b, blk.t, sizeof blk.t);
        }
    }
}

void ig_mm_scatter_group(ig_act_kind kind, int64_t k, const uint8_t *row, int lane, uint8_t *grp) {
    const int8_t *q = ig_act_q(row);
    for (int64_t i = 0; i < k; i += 4) {
        uint8_t u[4];
        for (int j = 0; j < 4; j++) u[j] = (uint8_t)(q[i + j] ^ 0x80);
        memcpy(grp + (i / 4) * 64 + 4 * lane, u, 4);
    }
    float *gd = (float *)(void *)(grp + 16 * k);
    const float *d = ig_act_d(row, k);
    const int64_t nb = k / (kind == IG_ACT_Q8_0 ? IG_QK : IG_QK_K);
    for (int64_t b = 0; b < nb; b++) gd[16 * b + lane] = d[b];
    if (kind == IG_ACT_Q8_K) {
        const int16_t *bs = ig_act_bsums(row, k);
        int32_t *gbs = (int32_t *)(void *)(grp + 16 * k + 64 * nb);
        for (int64_t b = 0; b < nb; b++)
            for (int p = 0; p < 4; p++) {
                const int16_t *s = bs + 16 * b + 4 * p;
                const uint16_t lo = (uint16_t)(int16_t)(s[0] + s[1]);
                const uint16_t hi = (uint16_t)(int16_t)(s[2] + s[3]);
                gbs[64 * b + 16 * p + lane] = (int32_t)((uint32_t)lo | ((uint32_t)hi << 16));
            }
        const uint8_t *t = ig_act_t(row, k);
        int32_t *gt = (int32_t *)(void *)(grp + 16 * k + 320 * nb);
        for (int64_t j = 0; j < k / 32; j++) gt[16 * j + lane] = (int32_t)((uint32_t)t[j] | ((uint32_t)t[j] << 16));
    }
}

void ig_mm_pad_group(ig_act_kind kind, int64_t k, int lane0, uint8_t *grp) {
    if (lane0 >= IG_MM_GROUP) return;
    const size_t w = 4 * (size_t)(IG_MM_GROUP - lane0);
    for (int64_t i = 0; i < k; i += 4) memset(grp + (i / 4) * 64 + 4 * lane0, 0, w);
    const int64_t nb = k / (kind == IG_ACT_Q8_0 ? IG_QK : IG_QK_K);
    for (int64_t b = 0; b < nb; b++) memset(grp + 16 * k + 64 * b + 4 * lane0, 0, w);
    if (kind == IG_ACT_Q8_K) {
        for (int64_t b = 0; b < 4 * nb; b++)
            memset(grp + 16 * k + 64 * nb + 64 * b + 4 * lane0, 0, w);
        int32_t *gt = (int32_t *)(void *)(grp + 16 * k + 320 * nb);
        for (int64_t j = 0; j < k / 32; j++)
            for (int l = lane0; l < IG_MM_GROUP; l++) gt[16 * j + l] = 0x10001;
    }
}

void ig_mm_quantize(const ig_mm_isa *isa, ig_act_kind kind, const float *x, int64_t ldx,
                    int64_t k, int n, int t0, int t1, uint8_t *act, size_t stride, bool grouped,
                    uint8_t *tmp) {
    for (int t = t0; t < t1; t++) {
        if (!grouped) {
            isa->quant_row(kind, x + (int64_t)t * ldx, k, act + (size_t)t * stride);
            continue;
        }
        isa->quant_row(kind, x + (int64_t)t * ldx, k, tmp);
        uint8_t *grp = act + (size_t)(t / IG_MM_GROUP) * stride;
        ig_mm_scatter_group(kind, k, tmp, t % IG_MM_GROUP, grp);
        if (t == n - 1) ig_mm_pad_group(kind, k, t % IG_MM_GROUP + 1, grp);
    }
}

/* Q5_1 (a fallback of Q5_K mixes, a few matrices at most) has only the
 * portable rows-layout kernel. */
static bool portable_only(ig_dtype type) { return type == IG_TYPE_Q5_1; }

bool ig_mm_use_groups(const ig_mm_isa *isa, ig_dtype type, int n) {
    return ig_mm_act_kind(type) != IG_ACT_F32 && !portable_only(type) && n >= isa->gemm_min;
}

void ig_mm_run(const ig_mm_isa *isa, ig_dtype type, const void *w, int64_t k, int64_t r0,
               int64_t r1, const float *x, int n, float *y, int64_t ldy, uint8_t *act,
               void *scratch, uint8_t *tmp) {
    size_t row_bytes = 0;
    ig_dtype_row_bytes(type, k, &row_bytes);
    ig_mm m = {.type = type,
               .w = w,
               .row_bytes = row_bytes,
               .k = k,
               .n = n,
               .x = x,
               .ldx = k,
               .act = act,
               .y = y,
               .ldy = ldy};
    const ig_act_kind kind = ig_mm_act_kind(type);
    if (kind != IG_ACT_F32) {
        m.grouped = ig_mm_use_groups(isa, type, n);
        m.act_stride = m.grouped ? ig_mm_group_stride(kind, k) : ig_mm_row_stride(kind, k);
        ig_mm_quantize(isa, kind, x, k, k, n, 0, n, act, m.act_stride, m.grouped, tmp);
    }
    ig_mm_matmul(isa, &m, r0, r1, scratch);
}

/* ---- Scalar kernels ------------------------------------------------------- */

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
        s4 += a[i + 4] * b[i + 4];
        s5 += a[i + 5] * b[i + 5];
        s6 += a[i + 6] * b[i + 6];
        s7 += a[i + 7] * b[i + 7];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

typedef struct kblk_info {
    float d, dmin;
    int32_t sc[16];
    int32_t m[8];
} kblk_info;

static void scalar_float(const ig_mm *m, int64_t r0, int64_t r1, float *wf) {
    for (int64_t r = r0; r < r1; r++) {
        ig_dequantize_row(m->type, m->w + (size_t)r * m->row_bytes, wf, m->k);
        for (int t = 0; t < m->n; t++) m->y[t * m->ldy + r] = dot_f32(wf, m->x + t * m->ldx, m->k);
    }
}

static void scalar_q32(const ig_mm *m, int64_t r0, int64_t r1, uint8_t *scratch) {
    const int64_t k = m->k, nb = k / IG_QK;
    int8_t *q = (int8_t *)scratch;
    float *dw = (float *)(void *)(scratch + ig_mm_align64((size_t)k));
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = m->w + (size_t)r * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * ig_blk_bytes(m->type);
            ig_unpack32(m->type, blk, q + b * IG_QK);
            dw[b] = ig_f16_to_f32(ig_ld16(blk));
        }
        for (int t = 0; t < m->n; t++) {
            const uint8_t *a = m->act + (size_t)t * m->act_stride;
            const int8_t *xq = ig_act_q(a);
            const float *xd = ig_act_d(a, k);
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t isum = 0;
                for (int j = 0; j < IG_QK; j++) isum += q[b * IG_QK + j] * xq[b * IG_QK + j];
                const float dd = dw[b] * xd[b];
                sum += (float)isum * dd;
            }
            m->y[t * m->ldy + r] = sum;
        }
    }
}

static void scalar_qk(const ig_mm *m, int64_t r0, int64_t r1, uint8_t *scratch) {
    const int64_t k = m->k, nb = k / IG_QK_K;
    int8_t *q = (int8_t *)scratch; /* Q4_K/Q5_K values are < 32: fit int8 */
    kblk_info *info = (kblk_info *)(void *)(scratch + ig_mm_align64((size_t)k));
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = m->w + (size_t)r * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * ig_blk_bytes(m->type);
            kblk_info *in = &info[b];
            if (m->type == IG_TYPE_Q6_K) {
                ig_unpack_q6_K(blk, q + b * IG_QK_K);
                for (int j = 0; j < 16; j++) in->sc[j] = (int8_t)blk[192 + j];
                in->d = ig_f16_to_f32(ig_ld16(blk + 208));
                in->dmin = 0.0f;
            } else {
                uint8_t u[IG_QK_K], sc[8], mn[8];
                if (m->type == IG_TYPE_Q4_K) ig_unpack_q4_K(blk, u);
                else ig_unpack_q5_K(blk, u);
                for (int j = 0; j < IG_QK_K; j++) q[b * IG_QK_K + j] = (int8_t)u[j];
                ig_unpack_k_scales(blk, sc, mn);
                for (int j = 0; j < 8; j++) in->sc[j] = sc[j], in->m[j] = mn[j];
                in->d = ig_f16_to_f32(ig_ld16(blk));
                in->dmin = ig_f16_to_f32(ig_ld16(blk + 2));
            }
        }
        for (int t = 0; t < m->n; t++) {
            const uint8_t *a = m->act + (size_t)t * m->act_stride;
            const int8_t *xq = ig_act_q(a);
            const float *xd = ig_act_d(a, k);
            const int16_t *bs = ig_act_bsums(a, k);
            const uint8_t *xt = ig_act_t(a, k);
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const kblk_info *in = &info[b];
                const int8_t *qb = q + b * IG_QK_K, *xb = xq + b * IG_QK_K;
                if (m->type == IG_TYPE_Q6_K) {
                    int32_t isum = 0;
                    for (int j = 0; j < 16; j++) {
                        int32_t s = 0;
                        for (int l = 0; l < 16; l++) s += qb[16 * j + l] * xb[16 * j + l];
                        isum += in->sc[j] * xt[8 * b + j / 2] * s;
                    }
                    const float d = in->d * xd[b];
                    sum += d * (float)isum;
                } else {
                    int32_t isum = 0, imin = 0;
                    for (int j = 0; j < 8; j++) {
                        int32_t s = 0;
                        for (int l = 0; l < 32; l++) s += qb[32 * j + l] * xb[32 * j + l];
                        isum += in->sc[j] * xt[8 * b + j] * s;
                        imin += in->m[j] * (bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
                    }
                    const float d = in->d * xd[b];
                    const float dmin = in->dmin * xd[b];
                    const float hi = d * (float)isum;
                    const float lo = dmin * (float)imin;
                    sum += hi - lo;
                }
            }
            m->y[t * m->ldy + r] = sum;
        }
    }
}

typedef void (*q5_1_isums_fn)(const uint8_t *q, const int8_t *xq, int64_t nb, int32_t *isum);

static void q5_1_isums_scalar(const uint8_t *q, const int8_t *xq, int64_t nb, int32_t *isum) {
    for (int64_t b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int j = 0; j < IG_QK; j++) s += q[b * IG_QK + j] * xq[b * IG_QK + j];
        isum[b] = s;
    }
}

/* Q5_1 x Q8_0 rows: the formula of ig_vec_dot_q5_1_q8_0, with the
 * activation's block sums of the rows layout; the blocks' integer sums by
 * isums (exact on every ISA). */
static void q5_1_rows(const ig_mm *m, int64_t r0, int64_t r1, uint8_t *scratch, q5_1_isums_fn isums) {
    const int64_t k = m->k, nb = k / IG_QK;
    uint8_t *q = scratch;
    float *dw = (float *)(void *)(scratch + ig_mm_align64((size_t)k)), *mw = dw + nb;
    int32_t *is = (int32_t *)(void *)(mw + nb);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = m->w + (size_t)r * m->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * 24;
            const uint32_t qh = ig_ld32(blk + 4);
            for (int j = 0; j < IG_QK / 2; j++) {
                q[b * IG_QK + j] = (uint8_t)((blk[8 + j] & 0xfu) | (((qh >> j) & 1u) << 4));
                q[b * IG_QK + j + 16] = (uint8_t)((blk[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            }
            dw[b] = ig_f16_to_f32(ig_ld16(blk));
            mw[b] = ig_f16_to_f32(ig_ld16(blk + 2));
        }
        for (int t = 0; t < m->n; t++) {
            const uint8_t *a = m->act + (size_t)t * m->act_stride;
            const int8_t *xq = ig_act_q(a);
            const float *xd = ig_act_d(a, k);
            const int32_t *xs = ig_act_s(a, k);
            isums(q, xq, nb, is);
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const float dd = dw[b] * xd[b];
                const float hi = (float)is[b] * dd;
                const float lo = mw[b] * (xd[b] * (float)xs[b]);
                sum += hi + lo;
            }
            m->y[t * m->ldy + r] = sum;
        }
    }
}

void ig_mm_matmul(const ig_mm_isa *isa, const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    if (!portable_only(m->type)) {
        isa->matmul(m, r0, r1, scratch);
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    if (isa == &ig_mm_isa_avx2 || isa == &ig_mm_isa_avx512) {
        q5_1_rows(m, r0, r1, scratch, ig_q5_1_isums_avx2);
        return;
    }
#endif
    ig_mm_matmul_scalar(m, r0, r1, scratch);
}

size_t ig_mm_scratch_bytes(const ig_mm_isa *isa, ig_dtype type, int64_t k) {
    const size_t a = isa->scratch_bytes(k);
    if (!portable_only(type)) return a;
    const size_t b = ig_mm_scratch_scalar(k);
    return a > b ? a : b;
}

void ig_mm_matmul_scalar(const ig_mm *m, int64_t r0, int64_t r1, void *scratch) {
    switch (ig_mm_act_kind(m->type)) {
    case IG_ACT_F32: scalar_float(m, r0, r1, scratch); break;
    case IG_ACT_Q8_0:
        if (m->type == IG_TYPE_Q5_1) q5_1_rows(m, r0, r1, scratch, q5_1_isums_scalar);
        else scalar_q32(m, r0, r1, scratch);
        break;
    case IG_ACT_Q8_K: scalar_qk(m, r0, r1, scratch); break;
    }
}

size_t ig_mm_scratch_scalar(int64_t k) {
    size_t a = 4 * (size_t)k;
    size_t b = ig_mm_align64((size_t)k) + sizeof(kblk_info) * (size_t)(k / IG_QK + 1);
    return a > b ? a : b;
}

const ig_mm_isa ig_mm_isa_scalar = {
    .name = "scalar",
    .gemm_min = INT_MAX,
    .quant_row = ig_mm_quant_row_scalar,
    .matmul = ig_mm_matmul_scalar,
    .scratch_bytes = ig_mm_scratch_scalar,
    .attn = ig_attn_block_scalar,
    .geglu = ig_geglu_scalar,
    .rmsnorm = ig_rmsnorm_scalar,
    .to_f16 = ig_to_f16_scalar,
};

/* ---- Selection ------------------------------------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
/* F16C through CPUID: older clang's __builtin_cpu_supports does not know it. */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int ig_mm_isa_available(const ig_mm_isa **out, int cap) {
    int n = 0;
    if (n < cap) out[n++] = &ig_mm_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      cpu_has_f16c();
    if (avx2 && n < cap) out[n++] = &ig_mm_isa_avx2;
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") && n < cap)
        out[n++] = &ig_mm_isa_avx512;
#endif
#if defined(__aarch64__)
    if (n < cap) out[n++] = &ig_mm_isa_neon;
#endif
    return n;
}

const ig_mm_isa *ig_mm_isa_select(void) {
    const ig_mm_isa *isas[8];
    int n = ig_mm_isa_available(isas, 8);
    const char *want = getenv("IGNIS_CPU");
    if (want && *want) {
        for (int i = 0; i < n; i++)
            if (strcmp(isas[i]->name, want) == 0) return isas[i];
    }
#if defined(__aarch64__)
    /* The NEON kernels have not run on hardware yet: the matmul tests check
     * them against the references there, but they are used only on request. */
    return &ig_mm_isa_scalar;
#else
    return isas[n - 1];
#endif
}
