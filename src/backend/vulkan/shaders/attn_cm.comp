#version 450
// Causal attention for many tokens at once (prefill) on tensor cores (NV
// cooperative matrix v1, or KHR's with -DKHR: cm_frag.glsl; f16 products
// summed in f32): attn_tile.comp's flash attention, its rows, sequences,
// windows and masks the same, with S = Q K^T and O += P V as 16 x CM_N x 16
// products (CM_N = 8 or 16).
// A workgroup (8 subgroups) takes kv head x and R query rows (64; 32 for
// head dim 256): the G heads sharing the kv head for BT = R / G consecutive
// step rows. Subgroup w takes the rows 16 (w % NRB) .. + 16 in both products
// (NRB = R / 16 row blocks), and a share of the keys of S and of the dims of
// O (WPR = 8 / NRB subgroups per row block; for S only SWP of them where a
// share would be narrower than a fragment: KHR's with head dim 256). Per
// tile of BK keys:
//   S = Q K^T: q (scaled, f16) stays in registers as fragments for the whole
//       kernel; K and V tiles (f16 from the cache) in shared memory; S to
//       shared memory (f32), masked, soft-capped;
//   online softmax per row (XT = 256 / R invocations per row, f32, reduced
//       by subgroup shuffles): the new max, P = exp(S - max) as f16, the
//       running sum and the factor alpha for O;
//   O = O * alpha + P V, O in accumulator fragments; each invocation learns
//       which row an element holds from a fragment of indices (v1 does not
//       say), as mmq.comp does.
// Requires (host): as attn_tile.comp, and G dividing R.
#extension GL_GOOGLE_include_directive : require
#ifdef KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "cm_frag.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint G = 1; // query heads per kv head

#ifndef HD
#error "HD (64, 128 or 256) must be defined"
#endif
#if HD == 256
#define R 32u
#else
#define R 64u
#endif
#define BK 32u                 // keys per tile
#define NRB (R / 16u)          // row blocks of 16
#define WPR (8u / NRB)         // subgroups per row block
// subgroups per row block in S: each takes at least a fragment of keys
const uint SWP = WPR * CM_N <= BK ? WPR : BK / CM_N;
const uint SF = BK / SWP / CM_N;       // S fragments (16 x CM_N) per subgroup
const uint OF = HD / WPR / CM_N;       // O fragments (16 x CM_N) per subgroup
#define QF (HD / 16u)          // q fragments (16 x 16) per subgroup
#define BT (R / G)             // step rows per workgroup
#define XT (256u / R)          // softmax: invocations per row
#define KPT (BK / XT)          // softmax: keys per invocation (8 or 4)
#define LD8 (HD / 8u + 1u)     // uvec4 per K, V or q row in shared memory (8 halves of skew)
#define LP8 (BK / 8u + 1u)     // uvec4 per P row
#define LDS (BK + 4u)          // floats per S row

layout(set = 0, binding = 1) readonly buffer QB { vec4 qs4[]; };
layout(set = 0, binding = 2) readonly buffer KC { uvec4 kc4[]; };
layout(set = 0, binding = 3) readonly buffer VC { uvec4 vc4[]; };
layout(set = 0, binding = 4) writeonly buffer OB { float os[]; };

layout(push_constant) uniform PC {
    uint n_head, n_head_kv, hd;
    uint q_off, q_stride, o_off, o_stride;
    uint kc_off, vc_off, cap, n_seq, kv_dim;
    uint window;
    float scale, softcap;
    uint chunk_, n_chunks_, x8_stride_, kind_, hpw_; // attn.comp's, attn_reduce.comp's
    uint tiled, tile_run; // the graph also holds attn.comp: attn_tiled_step
} pc;

// K tile at 0, V tile at BK * LD8; before the first tile, q (R rows of LD8)
shared uvec4 kv_sh[2u * BK * LD8];
// S; at the end, each subgroup's 16 x CM_N floats of staging
shared float s_sh[R * LDS > 128u * CM_N ? R * LDS : 128u * CM_N];
shared uvec4 p_sh[R * LP8];   // P (f16)
shared float m_sh[R], l_sh[R], a_sh[R];
shared int seq_sh[R], pos_sh[R], lo_sh[R]; // seq -1: no keys (dead or invalid row)
shared uint done_sh[R];
shared float sidx[16u * CM_N];

#define MASKED (-1.0e30)
#define F16_A CM_A
#define F16_B CM_B
#define F32_C CM_C

void main() {
    const uint kvh = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BT, tid = gl_LocalInvocationID.x;
    const uint n = step_rows(0u);
    if (t0 >= n || !attn_tiled_step(pc.tiled, pc.tile_run)) return; // uniform
    const uint w = gl_SubgroupID, rb = w % NRB, wq = w / NRB;
    const uint row0 = rb * 16u, dim0 = wq * OF * CM_N;

    // rows: r = (token t0 + r / G, head kvh * G + r % G); q, scaled, as f16
    if (tid < R) {
        const uint t = t0 + tid / G;
        int s = -1, p = 0, lo = 0;
        if (tid < BT * G && t < n) {
            p = step_pos(t);
            s = step_seq(t);
            if (p < 0 || s < 0 || uint(s) >= pc.n_seq) s = -1;
            lo = pc.window > 0u ? max(0, p - int(pc.window) + 1) : 0;
        }
        seq_sh[tid] = s;
        pos_sh[tid] = p;
        lo_sh[tid] = lo;
        done_sh[tid] = s < 0 ? 1u : 0u;
        m_sh[tid] = MASKED;
        l_sh[tid] = 0.0;
    }
    if (tid < 16u * CM_N) sidx[tid] = float(tid);
    for (uint i = tid; i < R * (HD / 8u); i += 256u) {
        const uint r = i / (HD / 8u), c = i % (HD / 8u), t = t0 + r / G;
        vec4 a = vec4(0.0), b = vec4(0.0);
        if (r < BT * G && t < n) {
            const uint q4 = (pc.q_off + t * pc.q_stride + (kvh * G + r % G) * HD) / 4u + 2u * c;
            a = qs4[q4] * pc.scale;
            b = qs4[q4 + 1u] * pc.scale;
        }
        kv_sh[r * LD8 + c] = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
    }
    barrier();
    F16_A qf[QF];
    [[unroll]] for (uint d = 0u; d < QF; d++) CM_LOAD(qf[d], kv_sh, row0 * LD8 + 2u * d, LD8, CM_ROW_MAJOR);
    F32_C idx;
    CM_LOAD(idx, sidx, 0u, CM_N, CM_ROW_MAJOR);
    uint ri[8]; // the row (within 16) of each element this invocation holds
    for (int e = 0; e < idx.length(); e++) ri[e] = uint(idx[e]) / CM_N;
    F32_C o[OF];
    [[unroll]] for (uint f = 0u; f < OF; f++) o[f] = F32_C(0.0);

    const uint xr = tid / XT, xsub = tid % XT; // softmax: row xr, keys xsub * KPT ..
    for (;;) {
        // the next sequence with rows left, and the keys its rows attend
        int cur = -1, jlo = 0x7FFFFFFF, jhi = -1;
        for (uint r = 0u; r < R; r++) {
            if (done_sh[r] == 0u && cur < 0) cur = seq_sh[r];
            if (done_sh[r] == 0u && seq_sh[r] == cur) {
                jlo = min(jlo, lo_sh[r]);
                jhi = max(jhi, pos_sh[r]);
            }
        }
        if (cur < 0) break; // uniform: every invocation read the same shared state
        const uint kbase = uint(cur) * pc.cap * pc.kv_dim + kvh * HD;

        for (int j0 = jlo; j0 <= jhi; j0 += int(BK)) {
            // K and V tiles (keys past jhi load slot jhi and are masked)
            barrier(); // kv_sh (q, at first), s_sh and p_sh are free
            for (uint i = tid; i < BK * (HD / 8u); i += 256u) {
                const uint k = i / (HD / 8u), c = i % (HD / 8u), j = uint(min(j0 + int(k), jhi));
                const uint slot = (kbase + (j % pc.cap) * pc.kv_dim) / 8u + c;
                kv_sh[k * LD8 + c] = kc4[pc.kc_off / 8u + slot];
                kv_sh[(BK + k) * LD8 + c] = vc4[pc.vc_off / 8u + slot];
            }
            barrier();
            // S = Q K^T (K^T: column n of a fragment is key n's row)
            if (wq < SWP) {
                const uint skey0 = wq * SF * CM_N;
                F32_C s[SF];
                [[unroll]] for (uint f = 0u; f < SF; f++) s[f] = F32_C(0.0);
                [[unroll]] for (uint d = 0u; d < QF; d++)
                    [[unroll]] for (uint f = 0u; f < SF; f++) {
                        F16_B kb;
                        CM_LOAD(kb, kv_sh, (skey0 + CM_N * f) * LD8 + 2u * d, LD8, CM_COL_MAJOR);
                        s[f] = CM_MULADD(qf[d], kb, s[f]);
                    }
                [[unroll]] for (uint f = 0u; f < SF; f++)
                    CM_STORE(s[f], s_sh, row0 * LDS + skey0 + CM_N * f, LDS, CM_ROW_MAJOR);
            }
            barrier();
            // online softmax: KPT keys of row xr per invocation, XT per row
            {
                const bool live_row = done_sh[xr] == 0u && seq_sh[xr] == cur;
                const int lo = lo_sh[xr], hi = pos_sh[xr];
                float sv[KPT];
                float mx = MASKED;
                [[unroll]] for (uint k = 0u; k < KPT; k++) {
                    const int key = j0 + int(xsub * KPT + k);
                    float sc = s_sh[xr * LDS + xsub * KPT + k];
                    if (pc.softcap > 0.0) sc = pc.softcap * tanh_acc(sc / pc.softcap);
                    sv[k] = live_row && key >= lo && key <= hi ? sc : MASKED;
                    mx = max(mx, sv[k]);
                }
                [[unroll]] for (uint sh = 1u; sh < XT; sh <<= 1) mx = max(mx, subgroupShuffleXor(mx, sh));
                const float m_old = m_sh[xr], m_new = max(m_old, mx);
                float sum = 0.0;
                [[unroll]] for (uint k = 0u; k < KPT; k++) {
                    sv[k] = sv[k] > 0.5 * MASKED ? exp(sv[k] - m_new) : 0.0;
                    sum += sv[k];
                }
#if HD != 256 // 8 keys per invocation
                p_sh[xr * LP8 + xsub] = uvec4(packHalf2x16(vec2(sv[0], sv[1])), packHalf2x16(vec2(sv[2], sv[3])),
                                              packHalf2x16(vec2(sv[4], sv[5])), packHalf2x16(vec2(sv[6], sv[7])));
#else // 4
                const uvec2 ph = uvec2(packHalf2x16(vec2(sv[0], sv[1])), packHalf2x16(vec2(sv[2], sv[3])));
                if ((xsub & 1u) == 0u) p_sh[xr * LP8 + xsub / 2u].xy = ph;
                else p_sh[xr * LP8 + xsub / 2u].zw = ph;
#endif
                [[unroll]] for (uint sh = 1u; sh < XT; sh <<= 1) sum += subgroupShuffleXor(sum, sh);
                subgroupBarrier(); // the row's invocations have read m_sh before it changes
                if (xsub == 0u) {
                    const float alpha = exp(m_old - m_new); // 1 while the row has no key yet (both MASKED)
                    l_sh[xr] = l_sh[xr] * alpha + sum;
                    a_sh[xr] = alpha;
                    m_sh[xr] = m_new;
                }
            }
            barrier();
            // O = O * alpha + P V
            [[unroll]] for (uint f = 0u; f < OF; f++)
                for (int e = 0; e < o[f].length(); e++) o[f][e] *= a_sh[row0 + ri[e]];
            [[unroll]] for (uint kk = 0u; kk < BK / 16u; kk++) {
                F16_A pa;
                CM_LOAD(pa, p_sh, row0 * LP8 + 2u * kk, LP8, CM_ROW_MAJOR);
                [[unroll]] for (uint f = 0u; f < OF; f++) {
                    F16_B vb;
                    CM_LOAD(vb, kv_sh, (BK + 16u * kk) * LD8 + (dim0 + CM_N * f) / 8u, LD8, CM_ROW_MAJOR);
                    o[f] = CM_MULADD(pa, vb, o[f]);
                }
            }
        }
        barrier(); // every invocation chose `cur` before its rows are marked
        if (tid < R && seq_sh[tid] == cur) done_sh[tid] = 1u;
        barrier();
    }

    // O / l through each subgroup's 16 x CM_N floats of s_sh; rows of
    // tokens without keys (invalid) are zero
    const uint sb = w * 16u * CM_N, lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint f = 0u; f < OF; f++) {
        CM_STORE(o[f], s_sh, sb, CM_N, CM_ROW_MAJOR); // (m, n) at m * CM_N + n
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = lane; e < 16u * CM_N; e += gl_SubgroupSize) {
            const uint r = row0 + e / CM_N, t = t0 + r / G;
            if (r < BT * G && t < n) {
                const float l = l_sh[r];
                os[pc.o_off + t * pc.o_stride + (kvh * G + r % G) * HD + dim0 + CM_N * f + e % CM_N] =
                    seq_sh[r] >= 0 && l > 0.0 ? s_sh[sb + e] / l : 0.0;
            }
        }
        subgroupBarrier();
    }
}
