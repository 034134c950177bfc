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
layout(set = 0, binding = 6) writeonly buffer QB { uvec4 q4[]; };
layout(set = 0, binding = 6) writeonly buffer QM { vec4 qm4[]; };
shared vec4 o_sh4[64]; // the outputs of the workgroup's heads
#define X8_SRC(i) o_sh4[i]
#endif

layout(local_size_x = 64) in;

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
} pc;
#ifdef X8
#include "x8.glsl"
#endif

void main() {
    const uint t = gl_WorkGroupID.y;
    if (t >= step_rows(0u)) return;
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
        const uint pb = (t * pc.n_head + h) * pc.n_chunks * (pc.hd + 2u);
        float M = -1.0e30;
        for (uint c = 0u; c < nc; c++) M = max(M, ps[pb + c * (pc.hd + 2u) + pc.hd]);
        float L = 0.0;
        for (uint c = 0u; c < nc; c++)
            L += ps[pb + c * (pc.hd + 2u) + pc.hd + 1u] * exp(ps[pb + c * (pc.hd + 2u) + pc.hd] - M);
        const float inv = 1.0 / L;
        for (uint d = tid; d < pc.hd; d += 64u) {
            float O = 0.0;
            for (uint c = 0u; c < nc; c++)
                O += ps[pb + c * (pc.hd + 2u) + d] * exp(ps[pb + c * (pc.hd + 2u) + pc.hd] - M);
            os[ob + d] = O * inv;
#ifdef X8
            o_sh4[(hh * pc.hd + d) / 4u][d % 4u] = O * inv;
#endif
        }
    }
#ifdef X8
    barrier();
    // the workgroup's heads hold whole units (the host's condition)
    x8_quant_row(pc.hpw * pc.hd, pc.kind, t * pc.x8_stride + h0 * pc.hd / 32u * 3u);
#endif
}
