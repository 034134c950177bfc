#version 450
// Merges the per-chunk states of attn.comp -DSPLIT: for token t and query
// head h, out = sum_c o_c exp(m_c - M) / sum_c l_c exp(m_c - M) over the
// chunks holding keys of the token (M = max_c m_c).
// X8: out also as int8 blocks (x8.glsl) for the int8 mat-vec reading it
// (out rows 4-element aligned); a workgroup takes hpw heads (hpw x head_dim
// <= 256) so that its heads hold whole blocks.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifdef X8
layout(set = 0, binding = 6) writeonly buffer QU { uint q1[]; };
layout(set = 0, binding = 6) writeonly buffer QM { vec4 qm4[]; };
shared vec4 o_sh4[64]; // the outputs of the workgroup's heads
#endif

layout(local_size_x = 64) in;
shared float e_sh[64]; // exp(m_c - M) of a tile of chunks
shared float inv_sh;   // 1 / sum_c l_c exp(m_c - M)

layout(set = 0, binding = 4) writeonly buffer OB { float os[]; };
layout(set = 0, binding = 5) readonly buffer PB { float ps[]; };

layout(push_constant) uniform PC {
    uint n_head, n_head_kv, hd;
    uint q_off, q_stride, o_off, o_stride;
    uint kc_off, vc_off, cap, n_seq, kv_dim;
    uint window;
    float scale, softcap;
    uint chunk, n_chunks;
    uint x8_stride, kind; // X8: uvec4 per token row of the int8 copy, its kind (x8.glsl)
    uint hpw;             // heads per workgroup: 1, more with X8 where a block of 256 spans heads
    uint tiled, tile_run; // the graph also holds attn_tile.comp: attn_tiled_step
} pc;
#ifdef X8
#include "x8.glsl"
#endif

void main() {
    const uint t = gl_WorkGroupID.y;
    if (t >= step_rows(0u) || attn_tiled_step(pc.tiled, pc.tile_run)) return;
    const uint tid = gl_LocalInvocationID.x, h0 = gl_WorkGroupID.x * pc.hpw;
    const int p = step_pos(t), s = step_seq(t);
    const bool live = p >= 0 && s >= 0 && uint(s) < pc.n_seq; // uniform: the workgroup's token
    for (uint hh = 0u; hh < pc.hpw; hh++) {
        const uint h = h0 + hh;
        const uint ob = pc.o_off + t * pc.o_stride + h * pc.hd;
        if (!live) {
            for (uint d = tid; d < pc.hd; d += 64u) {
                os[ob + d] = 0.0;
#ifdef X8
                o_sh4[(hh * pc.hd + d) / 4u][d % 4u] = 0.0;
#endif
            }
            continue;
        }
        const uint lo = pc.window > 0u ? uint(max(0, p - int(pc.window) + 1)) : 0u;
        const uint nc = min(pc.n_chunks, (uint(p) - lo) / attn_chunk_keys(uint(p) - lo + 1u, pc.n_chunks, pc.chunk) + 1u);
        const uint pb = (t * pc.n_head + h) * pc.n_chunks * (pc.hd + 2u), cs = pc.hd + 2u;
        // the chunks' maxima and sums read by the invocations side by side,
        // then each output element sums its chunks from shared weights: the
        // loads of a chunk loop no longer wait on one another
        float m = -1.0e30;
        for (uint c = tid; c < nc; c += 64u) m = max(m, ps[pb + c * cs + pc.hd]);
        const float M = wg_max(m);
        // the sum in chunk order by one invocation (nc <= 32), as attn.comp
        // -DREDUCE makes it (the same bits where the driver compiles both
        // alike, as lavapipe does; the H100's driver differs by ~4e-7)
        if (tid == 0u) {
            precise float L = 0.0;
            for (uint c = 0u; c < nc; c++) {
                precise float e = exp(ps[pb + c * cs + pc.hd] - M);
                L += ps[pb + c * cs + pc.hd + 1u] * e;
            }
            inv_sh = 1.0 / L;
        }
        barrier();
        const float inv = inv_sh;
        float O[4] = float[4](0.0, 0.0, 0.0, 0.0); // d = tid + 64 j, hd <= 256
        for (uint c0 = 0u; c0 < nc; c0 += 64u) {
            barrier(); // the previous tile's weights are read
            if (c0 + tid < nc) {
                precise float e = exp(ps[pb + (c0 + tid) * cs + pc.hd] - M);
                e_sh[tid] = e;
            }
            barrier();
            const uint n = min(64u, nc - c0);
            [[unroll]] for (uint j = 0u; j < 4u; j++) {
                const uint d = tid + 64u * j;
                if (d < pc.hd) {
                    precise float a = 0.0, b = 0.0;
                    uint c = 0u;
                    for (; c + 1u < n; c += 2u) {
                        a += ps[pb + (c0 + c) * cs + d] * e_sh[c];
                        b += ps[pb + (c0 + c + 1u) * cs + d] * e_sh[c + 1u];
                    }
                    if (c < n) a += ps[pb + (c0 + c) * cs + d] * e_sh[c];
                    O[j] += a + b;
                }
            }
        }
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            const uint d = tid + 64u * j;
            if (d < pc.hd) {
                os[ob + d] = O[j] * inv;
#ifdef X8
                o_sh4[(hh * pc.hd + d) / 4u][d % 4u] = O[j] * inv;
#endif
            }
        }
    }
#ifdef X8
    barrier();
    // the workgroup's heads hold whole units (the host's condition)
    x8_quant_vec4(o_sh4[tid], tid, tid < pc.hpw * pc.hd / 4u, pc.kind, t * pc.x8_stride + h0 * pc.hd / 32u * 3u);
#endif
}
