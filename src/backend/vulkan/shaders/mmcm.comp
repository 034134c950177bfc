#version 450
// Y[t, r] = sum_i W[r, i] X[t, i] on tensor cores (GL_NV_cooperative_matrix,
// or GL_KHR_cooperative_matrix with KHR: cm_frag.glsl; f16 inputs, f32
// accumulation): prefill and large batches of quantized or f16 weights. A
// workgroup of 8 subgroups (of 32) computes BM rows x BN tokens (64, 128
// with WIDE, 32 with NARROW), CM_KSPAN row elements per step (cmq.glsl):
//   - weights come as mvq.glsl items (128-bit loads), activations as vec4;
//     the next step's weight loads are issued before this step's products,
//     so memory latency hides behind the tensor cores (register prefetch;
//     WPF, XPF: which loads, the host's choice). Prefetching the
//     activations too cost more (registers, so workgroups per compute
//     unit) than it hid: they come from L2, loaded at the store;
//   - both are stored to shared memory as f16, 8 halves per store;
//   - each subgroup multiplies an SR x WN block (SR = 32 rows, or 16 where
//     32 would leave it fewer tokens than a fragment has) as fragments of
//     16 x CM_N (k = 16 per product);
//   - whole fragments are stored straight to Y, partial ones through a
//     per-subgroup staging area (cm_store.glsl).
// BM x CM_KSPAN = 8192 weights per step (4096 per matrix for GEGLU), so
// shared memory stays under 48 KiB. Needs (host): vk_ops.c's fast_ok (x
// offset and stride multiples of 4, n_in whole items).
// GEGLU: Y = gelu_tanh(A·X) * (B·X).
// Split K (n_split > 1, when rows x token tiles alone leave the GPU short of
// workgroups): workgroup row y % n_split takes steps [split * split_steps,
// +split_steps) and stores its raw sums (both matrices' for GEGLU, B's at
// +geglu_off) at y_off + split * split_stride; cm_reduce.comp adds them up.
#extension GL_GOOGLE_include_directive : require
#ifdef KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x = 256) in;
// 1: the next step's activations (XPF) / weights (WPF) prefetched into
// registers during this step's products; 0: loaded when stored to shared
// memory (fewer registers)
layout(constant_id = 1) const uint XPF = 0;
layout(constant_id = 2) const uint WPF = 1;

layout(set = 0, binding = 1) readonly buffer WA4 { uvec4 wa4[]; };
layout(set = 0, binding = 1) readonly buffer WA16 { uint16_t wa16[]; };
#ifdef GEGLU
layout(set = 0, binding = 2) readonly buffer WB4 { uvec4 wb4[]; };
layout(set = 0, binding = 2) readonly buffer WB16 { uint16_t wb16[]; };
#endif
layout(set = 0, binding = 3) readonly buffer XB { vec4 xs4[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, n_in, n_rows, row_u16;
    uint x_off, x_stride, y_off, y_stride, y_row0;
    uint n_split, split_steps, split_stride, geglu_off;
} pc;

#define CAT_(a, b) a##b
#define W4 wa4
#define W16 wa16
#define FN(x) CAT_(x, _a)
#include "mvq.glsl"
#undef W4
#undef W16
#undef FN
#ifdef GEGLU
#define W4 wb4
#define W16 wb16
#define FN(x) CAT_(x, _b)
#include "mvq.glsl"
#undef W4
#undef W16
#undef FN
#endif
#include "cmq.glsl"
#include "cm_frag.glsl"

#ifdef GEGLU
#define BM (4096u / CM_KSPAN)
#else
#define BM (8192u / CM_KSPAN)
#endif
#ifdef WIDE
#define BN 128u               // large batches: half the dequantization per product
#elif defined(NARROW)
#define BN 32u                // batches of up to 32 (many streams): no half-empty tiles
#else
#define BN 64u
#endif
// rows per subgroup: 32, or 16 where 32 would leave a subgroup fewer tokens
// than a fragment has (KHR's 16-token fragments in GEGLU and Q6_K tiles)
const uint SR = BN * BM / 256u >= CM_N ? 32u : 16u;
const uint WGM = BM / SR;     // subgroups along the rows
const uint WGN = 8u / WGM;    // subgroups along the tokens
const uint WN = BN / WGN;     // tokens per subgroup
const uint FRM = SR / 16u;    // fragments per subgroup along the rows
const uint FRN = WN / CM_N;   // ... along the tokens
#define LD (CM_KSPAN + 8u)    // halves per shared row: 16-byte aligned, skewed banks
#define LD8 (LD / 8u)

shared uvec4 sa[BM * LD8];
#ifdef GEGLU
shared uvec4 sa2[BM * LD8];
#endif
shared uvec4 sb[BN * LD8];
shared float stage[8u * 256u];
#include "cm_store.glsl"

// per-thread share of a step's loads
#define W_ITEMS (BM * CM_IPS)                      // weight items per step
#define W_PT ((W_ITEMS + 255u) / 256u)             // ... per thread
#define X_OCT (BN * CM_KSPAN / 8u)                 // groups of 8 activations
#define X_PT (X_OCT / 256u)

uvec4 pack8(vec4 lo, vec4 hi) {
    return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

void main() {
    const uint tid = gl_LocalInvocationID.x, warp = gl_SubgroupID;
    const uint row0 = wg_linear() * BM;
    const uint n = step_rows(pc.rows_sel);
    const uint split = gl_WorkGroupID.y % pc.n_split;
    const uint col0 = gl_WorkGroupID.y / pc.n_split * BN;
    if (row0 >= pc.n_rows || col0 >= n) return; // uniform
    const uint wm = warp % WGM, wn = warp / WGM;
    const uint r4s = pc.row_u16 >> 3;
    const uint ni = MV_ITEMS(pc.n_in);
    const uint s_begin = split * pc.split_steps; // the host gives every split a step
    const uint n_steps = min((pc.n_in + CM_KSPAN - 1u) / CM_KSPAN, s_begin + pc.split_steps);

    CM_C acc[FRM][FRN];
#ifdef GEGLU
    CM_C acc2[FRM][FRN];
#endif
    [[unroll]] for (uint i = 0u; i < FRM; i++)
        [[unroll]] for (uint j = 0u; j < FRN; j++) {
            acc[i][j] = CM_C(0.0);
#ifdef GEGLU
            acc2[i][j] = CM_C(0.0);
#endif
        }

    ITEM wr[W_PT];
#ifdef GEGLU
    ITEM wr2[W_PT];
#endif
    vec4 xr[X_PT][2];

    // loads of step s into registers (rows past the end read the last row,
    // items past the row end are skipped, tokens past n read as zero)
#define LOAD_STEP(s)                                                                         \
    if (WPF != 0u) LOAD_W(s)                                                                 \
    if (XPF != 0u) LOAD_X(s)
#define LOAD_W(s)                                                                            \
    [[unroll]] for (uint u = 0u; u < W_PT; u++) {                                            \
        const uint idx = tid + u * 256u;                                                     \
        const uint r = min(row0 + idx / CM_IPS, pc.n_rows - 1u);                             \
        const uint it = (s) * CM_IPS + idx % CM_IPS;                                         \
        if (idx < W_ITEMS && it < ni) {                                                      \
            wr[u] = load_a(r * r4s, r * pc.row_u16, it, pc.n_in);                            \
            LOAD_B(u, r, it)                                                                 \
        }                                                                                    \
    }
#define LOAD_X(s)                                                                            \
    [[unroll]] for (uint u = 0u; u < X_PT; u++) {                                            \
        const uint o = tid + u * 256u, t = o / (CM_KSPAN / 8u), k = (s) * CM_KSPAN + (o % (CM_KSPAN / 8u)) * 8u; \
        if (col0 + t < n && k < pc.n_in) {                                                   \
            const uint xb = (pc.x_off + (col0 + t) * pc.x_stride + k) >> 2;                  \
            xr[u][0] = xs4[xb];                                                              \
            xr[u][1] = xs4[xb + 1u];                                                         \
        } else {                                                                             \
            xr[u][0] = vec4(0.0);                                                            \
            xr[u][1] = vec4(0.0);                                                            \
        }                                                                                    \
    }
#ifdef GEGLU
#define LOAD_B(u, r, it) wr2[u] = load_b(r * r4s, r * pc.row_u16, it, pc.n_in);
#else
#define LOAD_B(u, r, it)
#endif

    LOAD_STEP(s_begin)
    for (uint s = s_begin; s < n_steps; s++) {
        // registers -> shared (f16)
        if (WPF == 0u) LOAD_W(s)
        [[unroll]] for (uint u = 0u; u < W_PT; u++) {
            const uint idx = tid + u * 256u;
            if (idx < W_ITEMS) {
                const uint rl = idx / CM_IPS, it = s * CM_IPS + idx % CM_IPS;
                const bool live = it < ni;
                [[unroll]] for (uint run = 0u; run < CM_RUNS; run++) {
                    const uint kl = cm_run_k(it, run) - s * CM_KSPAN; // also where a dead item's zeros go
                    const uint o = rl * LD8 + kl / 8u;
#if defined(TYPE_F16)
                    sa[o] = live ? wr[u].a : uvec4(0u);
#ifdef GEGLU
                    sa2[o] = live ? wr2[u].a : uvec4(0u);
#endif
#else
                    vec4 v[4];
                    cm_run(wr[u], it, run, v);
                    sa[o] = live ? pack8(v[0], v[1]) : uvec4(0u);
                    sa[o + 1u] = live ? pack8(v[2], v[3]) : uvec4(0u);
#ifdef GEGLU
                    cm_run(wr2[u], it, run, v);
                    sa2[o] = live ? pack8(v[0], v[1]) : uvec4(0u);
                    sa2[o + 1u] = live ? pack8(v[2], v[3]) : uvec4(0u);
#endif
#endif
                }
            }
        }
        if (XPF == 0u) LOAD_X(s)
        [[unroll]] for (uint u = 0u; u < X_PT; u++) {
            const uint o = tid + u * 256u, t = o / (CM_KSPAN / 8u), k8 = o % (CM_KSPAN / 8u);
            sb[t * LD8 + k8] = pack8(xr[u][0], xr[u][1]);
        }
        barrier();
        if (s + 1u < n_steps) {
            LOAD_STEP(s + 1u)
        }
        [[unroll]] for (uint kk = 0u; kk < CM_KSPAN; kk += 16u) {
            CM_A a[FRM];
            CM_B b[FRN];
            [[unroll]] for (uint j = 0u; j < FRN; j++)
                CM_LOAD(b[j], sb, ((wn * WN + j * CM_N) * LD + kk) / 8u, LD8, CM_COL_MAJOR);
            [[unroll]] for (uint i = 0u; i < FRM; i++) {
                CM_LOAD(a[i], sa, ((wm * SR + i * 16u) * LD + kk) / 8u, LD8, CM_ROW_MAJOR);
                [[unroll]] for (uint j = 0u; j < FRN; j++) acc[i][j] = CM_MULADD(a[i], b[j], acc[i][j]);
            }
#ifdef GEGLU
            [[unroll]] for (uint i = 0u; i < FRM; i++) {
                CM_LOAD(a[i], sa2, ((wm * SR + i * 16u) * LD + kk) / 8u, LD8, CM_ROW_MAJOR);
                [[unroll]] for (uint j = 0u; j < FRN; j++) acc2[i][j] = CM_MULADD(a[i], b[j], acc2[i][j]);
            }
#endif
        }
        barrier();
    }

    // epilogue (cm_store.glsl)
    const uint y_base = pc.y_off + split * pc.split_stride;
    const bool direct_ok = ((y_base + pc.y_row0) & 3u) == 0u && (pc.y_stride & 3u) == 0u;
#ifdef GEGLU
    const uint n_out = pc.n_split > 1u ? 2u : 1u; // split: both raw sums
#else
    const uint n_out = 1u;
#endif
    for (uint o = 0u; o < n_out; o++) {
        const uint yb = y_base + o * pc.geglu_off;
        [[unroll]] for (uint i = 0u; i < FRM; i++)
            [[unroll]] for (uint j = 0u; j < FRN; j++) {
#ifdef GEGLU
                if (pc.n_split == 1u)
                    for (int e = 0; e < acc[i][j].length(); e++) acc[i][j][e] = gelu_tanh(acc[i][j][e]) * acc2[i][j][e];
                else if (o == 1u)
                    acc[i][j] = acc2[i][j];
#endif
                cm_store(acc[i][j], row0 + wm * SR + i * 16u, col0 + wn * WN + j * CM_N, yb, n, direct_ok);
            }
    }
}
