#version 450
// Y[t, r] = sum_i W[r, i] X[t, i] for a few tokens (NCOLS per workgroup):
// the bandwidth-bound mat-vec of decoding. TPR invocations (32, 64 or 128)
// share a group of NR rows: they stride over the row's items (mvq.glsl:
// 128-bit loads of quantized bytes), reuse each x load for the NR rows, and
// reduce with subgroupAdd (plus shared memory when a subgroup is narrower
// than TPR). A workgroup holds local_size / TPR row groups.
// Requires: rows 16-byte aligned (vk_internal.h), x offset and stride
// multiples of 4 elements, n_in a multiple of the item width.
// GEGLU: Y[t, r] = gelu_tanh(A[r]·X[t]) * (B[r]·X[t]) (fused gate and up).
// X8: X is int8 in blocks of 32 (quant_x8.comp; x offset and stride in
// uvec4), dotted with packed 4 x 8-bit integer dot products: a quarter of
// the activation bytes and of the arithmetic per weight of the f32 form.
// Single-token q/k/v of attention (the host: one token, one weight part,
// head_dim a multiple of the rows of a workgroup), no stage of their own for
// what follows them:
//   TAIL: the last workgroup of each head (a counter per head, zero between
//         dispatches) RMS-normalizes and rotates the head's outputs (QK-norm
//         + RoPE, rope.comp -DNORM's arithmetic): in place (q), or with
//         KV_F16 / KV_F32 into the K cache at the token's slot (k; Y keeps
//         the raw outputs).
//   V_CACHE (with KV_F16 / KV_F32): the outputs go straight into the V
//         cache at each token's slot, not to Y.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifdef X8
#extension GL_EXT_spirv_intrinsics : require
// OpSDot (SPV_KHR_integer_dot_product), format 0 = PackedVectorFormat4x8Bit:
// the sum of the four products of the signed bytes of a and b
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);
#define DOT4(a, b) sdot4x8(a, b, 0)
#define MV_X8
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint NCOLS = 1;
layout(constant_id = 2) const uint NR = 2;
// invocations per row group (a multiple of 32): they split the row's items
layout(constant_id = 3) const uint TPR = 32;
// items per lane per pass of the main loop (the host fits it to the row)
layout(constant_id = 4) const uint UNROLL = 2;

layout(set = 0, binding = 1) readonly buffer WA4 { uvec4 wa4[]; };
layout(set = 0, binding = 1) readonly buffer WA16 { uint16_t wa16[]; };
#ifdef GEGLU
layout(set = 0, binding = 2) readonly buffer WB4 { uvec4 wb4[]; };
layout(set = 0, binding = 2) readonly buffer WB16 { uint16_t wb16[]; };
#endif
#ifdef X8
layout(set = 0, binding = 3) readonly buffer XQ { uvec4 xq4[]; };
layout(set = 0, binding = 3) readonly buffer XM { vec4 xm4[]; };
#define X_INDEX(e) (e)
#else
layout(set = 0, binding = 3) readonly buffer XB { vec4 xs4[]; };
#define X_INDEX(e) ((e) >> 2)
#endif
#if defined(TAIL) && (defined(GEGLU) || defined(V_CACHE))
#error "TAIL is for plain q and k mat-vecs"
#endif
#ifdef TAIL
// written by every workgroup of a head, read back by its last one: coherent
layout(set = 0, binding = 4) coherent buffer YB { float ys[]; };
layout(set = 0, binding = 2) coherent buffer CB { uint cnt[]; }; // per head
layout(set = 0, binding = 5) readonly buffer FB { float freq[]; };
layout(set = 0, binding = 6) readonly buffer NB { float nw[]; };
#else
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };
#endif
#if defined(KV_F16)
layout(set = 0, binding = 7) writeonly buffer KVC { uint16_t kvc[]; };
#define KV_PUT(i, v) kvc[i] = uint16_t(f2h_rne(v))
#elif defined(KV_F32)
layout(set = 0, binding = 7) writeonly buffer KVC { float kvc[]; };
#define KV_PUT(i, v) kvc[i] = (v)
#endif

layout(push_constant) uniform PC {
    uint rows_sel; // 0: step tokens, 1: step outputs, 2: head rows
    uint n_in;     // row length
    uint n_rows;   // rows of this weight part
    uint row_u16;  // row stride in 16-bit words (a multiple of 8)
    uint x_off, x_stride;
    uint y_off, y_stride;
    uint y_row0;   // output column of the part's first row
    // TAIL and V_CACHE
    uint hd, freq_off, norm_off, cnt_off;
    float eps;
    uint kv_off, cap, n_seq, kv_dim; // the cache: element offset, slots per sequence, sequences, row width
} pc;

#if defined(KV_F16) || defined(KV_F32)
// Element index of the cache row of token t's slot; false for a token with
// no slot (padding rows), which stores nothing, as rope.comp.
bool cache_row(uint t, out uint row) {
    const int p = step_pos(t), sq = step_seq(t);
    row = 0u;
    if (p < 0 || sq < 0 || uint(sq) >= pc.n_seq) return false;
    row = pc.kv_off + (uint(sq) * pc.cap + uint(p) % pc.cap) * pc.kv_dim;
    return true;
}
#endif
#ifdef TAIL
#include "rope.glsl"
#endif

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
#define NACC 2u
#else
#define NACC 1u
#endif

// reduction scratch: per (accumulator, subgroup) when subgroups are narrower
// than 32 (the host keeps NR * NCOLS <= 32 and 128 invocations there), per
// invocation when they are wider
shared float red[1024];

float acc[NR * NCOLS];
#ifdef GEGLU
float accb[NR * NCOLS];
#endif

// Output (column c, row r of the part) of the workgroup's column tile c0.
void put(uint c0, uint c, uint r, float s) {
#ifdef V_CACHE
    uint row;
    if (cache_row(c0 + c, row)) KV_PUT(row + pc.y_row0 + r, s);
#else
    ys[pc.y_off + (c0 + c) * pc.y_stride + pc.y_row0 + r] = s;
#endif
}

#ifdef TAIL
shared bool s_last;

// Counts this workgroup in on its head (token 0: one-token graphs); the
// last one normalizes and rotates the head. Uniform control flow.
void head_tail() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint wrows = WG / TPR * NR, head = (pc.y_row0 + wg_linear() * wrows) / pc.hd;
    memoryBarrierBuffer(); // this workgroup's outputs before its count
    barrier();
    if (tid == 0u) {
        s_last = atomicAdd(cnt[pc.cnt_off + head], 1u) + 1u == pc.hd / wrows;
        if (s_last) atomicExchange(cnt[pc.cnt_off + head], 0u);
    }
    barrier();
    if (!s_last) return;
    memoryBarrierBuffer();
    const uint xb = pc.y_off + head * pc.hd, half_ = pc.hd / 2u;
    // rope.comp -DNORM's order (graphs of several tokens): 32 strided partial sums
    for (uint l = tid; l < 32u; l += WG) {
        precise float part = 0.0;
        for (uint i = l; i < pc.hd; i += 32u) part += ys[xb + i] * ys[xb + i];
        ig_red[l] = part;
    }
    const float ss = sum32_red(); // its barriers also order the reads before the writes below
    const float nscale = 1.0 / sqrt(ss / float(pc.hd) + pc.eps);
    const float pf = float(step_pos(0u));
#if defined(KV_F16) || defined(KV_F32)
    uint row;
    const bool store = cache_row(0u, row);
    row += head * pc.hd;
#endif
    for (uint i = tid; i < half_; i += WG) {
        const float a = ys[xb + i] * nscale * nw[pc.norm_off + i];
        const float b = ys[xb + i + half_] * nscale * nw[pc.norm_off + i + half_];
        float ra, rb;
        rope_rotate(pf, freq[pc.freq_off + i], a, b, ra, rb);
#if defined(KV_F16) || defined(KV_F32)
        if (store) {
            KV_PUT(row + i, ra);
            KV_PUT(row + i + half_, rb);
        }
#else
        ys[xb + i] = ra;
        ys[xb + i + half_] = rb;
#endif
    }
}
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint lane = tid % TPR, grp = tid / TPR;
    const uint n_grp = gl_WorkGroupSize.x / TPR;
    const uint r0 = (wg_linear() * n_grp + grp) * NR;
    const uint n = step_rows(pc.rows_sel);
    const uint c0 = gl_WorkGroupID.y * NCOLS;
    if (wg_linear() * n_grp * NR >= pc.n_rows || c0 >= n) return; // uniform
    const uint nc = min(NCOLS, n - c0);
    const uint ni = MV_ITEMS(pc.n_in);
    const uint r4s = pc.row_u16 >> 3;

    [[unroll]] for (uint k = 0u; k < NR * NCOLS; k++) {
        acc[k] = 0.0;
#ifdef GEGLU
        accb[k] = 0.0;
#endif
    }
    uint xb[NCOLS];
    [[unroll]] for (uint c = 0u; c < NCOLS; c++) xb[c] = X_INDEX(pc.x_off + (c0 + min(c, nc - 1u)) * pc.x_stride);

    // UNROLL items per lane per pass, all their loads in flight before the
    // first is used. The last pass is predicated rather than left to a
    // one-item loop: a row shorter than TPR * UNROLL items (5376 elements
    // are 168 Q4_K items) is then one round trip to memory, not two or more.
    // Items past the row's end reload its last item and add nothing.
    for (uint it = lane; it < ni; it += UNROLL * TPR) {
        ITEM wa[NR * UNROLL];
#ifdef GEGLU
        ITEM wb[NR * UNROLL];
#endif
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            const uint iu = min(it + u * TPR, ni - 1u);
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                const uint row = min(r0 + r, pc.n_rows - 1u); // rows past the end: loaded, never stored
                wa[u * NR + r] = load_a(row * r4s, row * pc.row_u16, iu, pc.n_in);
#ifdef GEGLU
                wb[u * NR + r] = load_b(row * r4s, row * pc.row_u16, iu, pc.n_in);
#endif
            }
        }
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            const uint iu = it + u * TPR;
            if (iu < ni) {
                [[unroll]] for (uint c = 0u; c < NCOLS; c++) {
                    if (c < nc) {
                        [[unroll]] for (uint r = 0u; r < NR; r++) {
                            acc[r * NCOLS + c] += dot_a(wa[u * NR + r], iu, xb[c]);
#ifdef GEGLU
                            accb[r * NCOLS + c] += dot_b(wb[u * NR + r], iu, xb[c]);
#endif
                        }
                    }
                }
            }
        }
    }

    // Reduce the TPR partial sums of each (row, column).
    const uint K = NR * NCOLS;
    const uint sg = gl_SubgroupSize;
    if (sg == TPR) {
        [[unroll]] for (uint k = 0u; k < K; k++) {
            float s = subgroupAdd(acc[k]);
#ifdef GEGLU
            float sb = subgroupAdd(accb[k]);
            s = gelu_tanh(s) * sb;
#endif
            const uint r = k / NCOLS, c = k % NCOLS;
            if (lane == 0u && r0 + r < pc.n_rows && c < nc) put(c0, c, r0 + r, s);
        }
    } else if (sg < TPR) {
        const uint nsub = gl_NumSubgroups, per = TPR / sg;
        [[unroll]] for (uint k = 0u; k < K; k++) {
            float s = subgroupAdd(acc[k]);
#ifdef GEGLU
            float sb = subgroupAdd(accb[k]);
#endif
            if (subgroupElect()) {
                red[(k * NACC) * nsub + gl_SubgroupID] = s;
#ifdef GEGLU
                red[(k * NACC + 1u) * nsub + gl_SubgroupID] = sb;
#endif
            }
        }
        barrier();
        if (lane == 0u) {
            [[unroll]] for (uint k = 0u; k < K; k++) {
                float s = 0.0;
#ifdef GEGLU
                float sb = 0.0;
#endif
                for (uint i = 0u; i < per; i++) {
                    s += red[(k * NACC) * nsub + grp * per + i];
#ifdef GEGLU
                    sb += red[(k * NACC + 1u) * nsub + grp * per + i];
#endif
                }
#ifdef GEGLU
                s = gelu_tanh(s) * sb;
#endif
                const uint r = k / NCOLS, c = k % NCOLS;
                if (r0 + r < pc.n_rows && c < nc) put(c0, c, r0 + r, s);
            }
        }
    } else {
        [[unroll]] for (uint k = 0u; k < K; k++) {
            red[tid] = acc[k];
#ifdef GEGLU
            red[512u + tid] = accb[k];
#endif
            barrier();
            if (lane == 0u) {
                float s = 0.0;
#ifdef GEGLU
                float sb = 0.0;
#endif
                for (uint i = 0u; i < TPR; i++) {
                    s += red[grp * TPR + i];
#ifdef GEGLU
                    sb += red[512u + grp * TPR + i];
#endif
                }
#ifdef GEGLU
                s = gelu_tanh(s) * sb;
#endif
                const uint r = k / NCOLS, c = k % NCOLS;
                if (r0 + r < pc.n_rows && c < nc) put(c0, c, r0 + r, s);
            }
            barrier();
        }
    }
#ifdef TAIL
    head_tail();
#endif
}
