#version 450
// Causal attention over a layer's KV cache, flash-decoding style. One
// workgroup per (G query heads, token, chunk of keys): the G heads share a
// kv head (all of its query heads, or with a merge too large for one
// workgroup part of them: the host's choice). Token t (sequence s, position p) attends keys j in
// [lo, p], lo = max(0, p - W + 1) (W = window, 0 = unlimited), slot j % cap;
// chunk c covers keys lo + c*C .. lo + (c+1)*C - 1, C = attn_chunk_keys of
// the token's p - lo + 1 keys (common.glsl).
// NSG subgroups of SG invocations: each subgroup takes every NSG-th key of
// the chunk; its lanes hold head_dim / SG dims of q and of the output and
// the q.k dot is a subgroupAdd, so the K and V rows are read coalesced and
// the inner loop has no barrier. Each subgroup keeps its own running max and
// sum (online softmax, fp32); the NSG states are merged at the end.
//   SPLIT: the chunk's state (unnormalized o, m, l) goes to the scratch
//          buffer, attn_reduce.comp merges the chunks; else o / l is the
//          output.
//   REDUCE (with SPLIT): no attn_reduce.comp stage. Every workgroup counts
//          itself in on its unit's counter once its state is written, and
//          the last one of a unit (the R = pc.hpw query heads of a token
//          that one merge serves) merges the unit's chunks as
//          attn_reduce.comp does, the same sums in the same order; the
//          counter goes back to zero for the next replay. X8: it also writes
//          the int8 copy of the unit's output (R x head_dim holds whole
//          blocks; x8_quant_values).
// Requires head_dim a multiple of SG, head_dim <= 256, and SG equal to the
// device's subgroup size.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in; // NSG * SG
layout(constant_id = 1) const uint SG = 32;
layout(constant_id = 2) const uint G = 1; // query heads per workgroup (of one kv head)
#define NSG 4u
#define MAXD (256u / SG)

layout(set = 0, binding = 1) readonly buffer QB { float qs[]; };
#if defined(KV_F16)
layout(set = 0, binding = 2) readonly buffer KC { uint16_t kc[]; };
layout(set = 0, binding = 3) readonly buffer VC { uint16_t vc[]; };
layout(set = 0, binding = 2) readonly buffer KC2 { uint kc2[]; }; // pairs of halves
layout(set = 0, binding = 3) readonly buffer VC2 { uint vc2[]; };
#define KV_GET(buf, i) h2f(uint(buf[i]))
#else
layout(set = 0, binding = 2) readonly buffer KC { float kc[]; };
layout(set = 0, binding = 3) readonly buffer VC { float vc[]; };
#define KV_GET(buf, i) buf[i]
#endif
layout(set = 0, binding = 4) writeonly buffer OB { float os[]; };
#ifdef REDUCE
// written here, read by the unit's last workgroup: coherent, so that its
// loads see the other workgroups' stores rather than a stale cache line
layout(set = 0, binding = 5) coherent buffer PB { float ps[]; }; // [t][h][chunk][hd + 2]
layout(set = 0, binding = 7) coherent buffer CB { uint cnt[]; };  // [t][unit], zero between dispatches
#ifdef X8
layout(set = 0, binding = 6) writeonly buffer QU { uint q1[]; };
layout(set = 0, binding = 6) writeonly buffer QM { vec4 qm4[]; };
#endif
#else
layout(set = 0, binding = 5) writeonly buffer PB { float ps[]; }; // SPLIT: [t][h][chunk][hd + 2]
#endif

layout(push_constant) uniform PC {
    uint n_head, n_head_kv, hd;
    uint q_off, q_stride, o_off, o_stride;
    uint kc_off, vc_off, cap, n_seq, kv_dim;
    uint window;
    float scale, softcap;
    uint chunk, n_chunks; // the fewest keys per chunk, chunks per token (1: no split)
    uint x8_stride, kind, hpw; // attn_reduce.comp's; REDUCE: hpw = R, the heads of a unit
    uint tiled, tile_run; // the graph also holds attn_tile.comp: attn_tiled_step
} pc;

shared float s_m[NSG * G], s_l[NSG * G];
shared float s_o[NSG * G * 256]; // REDUCE: then the unit's output (R x hd <= NSG G 256, the host's condition)

#ifdef REDUCE
// R <= 8 (G <= 8, hpw x hd <= 256 with hd >= 32) and chunks <= 32: the host's conditions
shared bool s_last;
shared float e_sh[8 * 32], l_sh[8 * 32]; // per (head, chunk): m_c, then exp(m_c - M); l_c
shared float inv_sh[8];                  // per head: 1 / sum_c l_c exp(m_c - M)
#ifdef X8
#define X8_NO_VEC4
#define X8_VALUE(i) s_o[i]
#define X8_VALUES_MAX (G * 256u) // R x hd <= 256 G
#include "x8.glsl"
#endif

// Counts this workgroup in on its unit; the last one merges the unit's
// chunks into the output (and its int8 copy), every head of the unit at
// once. Uniform control flow.
void count_in_and_merge(uint h0, uint t, bool valid, int p, uint lo) {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint R = pc.hpw, unit = h0 / R;
    memoryBarrierBuffer(); // this workgroup's chunk state before its count
    barrier();
    if (tid == 0u) {
        const uint slot = t * (pc.n_head / R) + unit;
        s_last = atomicAdd(cnt[slot], 1u) + 1u == R / G * pc.n_chunks;
        if (s_last) atomicExchange(cnt[slot], 0u);
    }
    barrier();
    if (!s_last) return;
    memoryBarrierBuffer();
    const uint nc = valid ? min(pc.n_chunks, (uint(p) - lo) / attn_chunk_keys(uint(p) - lo + 1u, pc.n_chunks, pc.chunk) + 1u) : 0u;
    const uint cs = pc.hd + 2u, pb0 = (t * pc.n_head + unit * R) * pc.n_chunks * cs, hs = pc.n_chunks * cs;
    // the chunks' maxima and sums, side by side
    for (uint i = tid; i < R * nc; i += WG) {
        const uint hh = i / nc, c = i % nc, at = pb0 + hh * hs + c * cs + pc.hd;
        e_sh[hh * 32u + c] = ps[at];
        l_sh[hh * 32u + c] = ps[at + 1u];
    }
    barrier();
    if (tid < R && nc > 0u) { // per head, in chunk order (attn_reduce.comp's order)
        float M = -1.0e30;
        for (uint c = 0u; c < nc; c++) M = max(M, e_sh[tid * 32u + c]);
        precise float L = 0.0;
        for (uint c = 0u; c < nc; c++) {
            precise float e = exp(e_sh[tid * 32u + c] - M); // as attn_reduce.comp rounds it
            e_sh[tid * 32u + c] = e;
            L += l_sh[tid * 32u + c] * e;
        }
        inv_sh[tid] = 1.0 / L;
    }
    barrier();
    for (uint j = tid; j < R * pc.hd; j += WG) {
        const uint hh = j / pc.hd, d = j % pc.hd, pb = pb0 + hh * hs;
        float o = 0.0; // an invalid row: zeros
        if (valid) {
            // attn_reduce.comp's order and roundings: even and odd chunks apart
            precise float a = 0.0, b = 0.0;
            uint c = 0u;
            for (; c + 1u < nc; c += 2u) {
                a += ps[pb + c * cs + d] * e_sh[hh * 32u + c];
                b += ps[pb + (c + 1u) * cs + d] * e_sh[hh * 32u + c + 1u];
            }
            if (c < nc) a += ps[pb + c * cs + d] * e_sh[hh * 32u + c];
            o = (a + b) * inv_sh[hh];
        }
        os[pc.o_off + t * pc.o_stride + (unit * R + hh) * pc.hd + d] = o;
        s_o[j] = o;
    }
#ifdef X8
    barrier(); // s_o holds the unit's output
    x8_quant_values(R * pc.hd, t * pc.x8_stride + unit * R * pc.hd / 32u * 3u, pc.kind);
#endif
}
#endif

void main() {
    const uint h0 = gl_WorkGroupID.x * G, t = gl_WorkGroupID.y, c = gl_WorkGroupID.z; // h0: the first query head
    const uint kvh = h0 / (pc.n_head / pc.n_head_kv);
    if (t >= step_rows(0u) || attn_tiled_step(pc.tiled, pc.tile_run)) return;
    const uint tid = gl_LocalInvocationID.x, sgi = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const int p = step_pos(t), s = step_seq(t);
    const bool valid = p >= 0 && s >= 0 && uint(s) < pc.n_seq;
    const uint lo = valid && pc.window > 0u ? uint(max(0, p - int(pc.window) + 1)) : 0u;
    const uint hi = valid ? uint(p) : 0u;
    const uint C = attn_chunk_keys(hi - lo + 1u, pc.n_chunks, pc.chunk);
    const uint j0 = lo + c * C;
    if (!valid || j0 > hi) {
        // no keys: zero output (an invalid row), nothing for a skipped chunk
#ifndef SPLIT
        if (!valid && c == 0u)
            for (uint i = tid; i < G * pc.hd; i += gl_WorkGroupSize.x)
                os[pc.o_off + t * pc.o_stride + (h0 + i / pc.hd) * pc.hd + i % pc.hd] = 0.0;
#endif
#ifdef REDUCE
        count_in_and_merge(h0, t, valid, p, lo);
#endif
        return;
    }
    const uint j1 = min(hi, j0 + C - 1u);
    const uint dpl = pc.hd / SG;
    const bool pairs = (dpl & 1u) == 0u && ((pc.kc_off | pc.vc_off | pc.kv_dim) & 1u) == 0u;
    const uint base = uint(s) * pc.cap * pc.kv_dim + kvh * pc.hd;

    float q[G * MAXD], o[G * MAXD], m[G], l[G];
    [[unroll]] for (uint g = 0u; g < G; g++) {
        const uint qb = pc.q_off + t * pc.q_stride + (h0 + g) * pc.hd;
        [[unroll]] for (uint k = 0u; k < MAXD; k++) {
            q[g * MAXD + k] = k < dpl ? qs[qb + lane * dpl + k] : 0.0;
            o[g * MAXD + k] = 0.0;
        }
        m[g] = -1.0e30;
        l[g] = 0.0;
    }

    for (uint j = j0 + sgi; j <= j1; j += NSG) {
        const uint slot = j % pc.cap;
        // lane owns dims lane * dpl .. + dpl - 1 (contiguous: wide loads)
        const uint kb = pc.kc_off + base + slot * pc.kv_dim + lane * dpl;
        const uint vb = pc.vc_off + base + slot * pc.kv_dim + lane * dpl;
        float kv[MAXD], vv[MAXD];
#if defined(KV_F16)
        if (pairs) {
            [[unroll]] for (uint k = 0u; k < MAXD; k += 2u) {
                vec2 a = k < dpl ? unpackHalf2x16(kc2[(kb + k) >> 1]) : vec2(0.0);
                vec2 b = k < dpl ? unpackHalf2x16(vc2[(vb + k) >> 1]) : vec2(0.0);
                kv[k] = a.x; kv[k + 1u] = a.y;
                vv[k] = b.x; vv[k + 1u] = b.y;
            }
        } else
#endif
        {
            [[unroll]] for (uint k = 0u; k < MAXD; k++) {
                kv[k] = k < dpl ? KV_GET(kc, kb + k) : 0.0;
                vv[k] = k < dpl ? KV_GET(vc, vb + k) : 0.0;
            }
        }
        [[unroll]] for (uint g = 0u; g < G; g++) {
            float d = 0.0;
            [[unroll]] for (uint k = 0u; k < MAXD; k++) d += q[g * MAXD + k] * kv[k];
            float sc = subgroupAdd(d) * pc.scale;
            if (pc.softcap > 0.0) sc = pc.softcap * tanh_acc(sc / pc.softcap);
            const float mn = max(m[g], sc);
            const float alpha = exp(m[g] - mn), pj = exp(sc - mn);
            l[g] = l[g] * alpha + pj;
            [[unroll]] for (uint k = 0u; k < MAXD; k++) o[g * MAXD + k] = o[g * MAXD + k] * alpha + pj * vv[k];
            m[g] = mn;
        }
    }

    // merge the subgroups
    [[unroll]] for (uint g = 0u; g < G; g++) {
        if (lane == 0u) {
            s_m[sgi * G + g] = m[g];
            s_l[sgi * G + g] = l[g];
        }
        [[unroll]] for (uint k = 0u; k < MAXD; k++)
            if (k < dpl) s_o[(sgi * G + g) * 256u + lane * dpl + k] = o[g * MAXD + k];
    }
    barrier();
    for (uint i = tid; i < G * pc.hd; i += gl_WorkGroupSize.x) {
        const uint g = i / pc.hd, d = i % pc.hd;
        float M = -1.0e30;
        [[unroll]] for (uint w = 0u; w < NSG; w++) M = max(M, s_m[w * G + g]);
        float L = 0.0, O = 0.0;
        [[unroll]] for (uint w = 0u; w < NSG; w++) {
            const float f = exp(s_m[w * G + g] - M);
            L += s_l[w * G + g] * f;
            O += s_o[(w * G + g) * 256u + d] * f;
        }
        const uint h = h0 + g;
#ifdef SPLIT
        const uint pb = ((t * pc.n_head + h) * pc.n_chunks + c) * (pc.hd + 2u);
        ps[pb + d] = O;
        if (d == 0u) {
            ps[pb + pc.hd] = M;
            ps[pb + pc.hd + 1u] = L;
        }
#else
        os[pc.o_off + t * pc.o_stride + h * pc.hd + d] = O / L;
#endif
    }
#ifdef REDUCE
    count_in_and_merge(h0, t, valid, p, lo);
#endif
}
