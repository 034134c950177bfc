#version 450
// Causal attention over a layer's KV cache, one workgroup per (token, query
// head). Token t (sequence s, position p) attends keys j with
// max(0, p - W + 1) <= j <= p (W = window, 0 = unlimited), stored in slot
// j % cap; query head h reads kv head h / (n_head / n_head_kv).
// Online (flash-style) fp32 softmax over blocks of 64 keys: each invocation
// scores one key of the block, then every invocation accumulates its output
// dims over the block. scores = q.k * scale (then softcap * tanh(./softcap)
// when softcap > 0).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
#define BLK 64u
#define MAX_HD 256u
#define DPT (MAX_HD / BLK)

layout(set = 0, binding = 1) readonly buffer QB { float qs[]; };
#if defined(KV_F16)
layout(set = 0, binding = 2) readonly buffer KC { uint16_t kc[]; };
layout(set = 0, binding = 3) readonly buffer VC { uint16_t vc[]; };
#define KV_GET(buf, i) h2f(uint(buf[i]))
#else
layout(set = 0, binding = 2) readonly buffer KC { float kc[]; };
layout(set = 0, binding = 3) readonly buffer VC { float vc[]; };
#define KV_GET(buf, i) buf[i]
#endif
layout(set = 0, binding = 4) writeonly buffer OB { float os[]; };

layout(push_constant) uniform PC {
    uint n_head, n_head_kv, hd;
    uint q_off, q_stride, o_off, o_stride;
    uint kc_off, vc_off, cap, n_seq, kv_dim;
    uint window;
    float scale, softcap;
} pc;

shared float sq[MAX_HD];
shared float sp[BLK];

void main() {
    const uint t = gl_WorkGroupID.y, h = gl_WorkGroupID.x;
    if (t >= step_rows(0u)) return;
    const uint tid = gl_LocalInvocationID.x;
    const uint ob = pc.o_off + t * pc.o_stride + h * pc.hd;
    const int p = step_pos(t), s = step_seq(t);
    if (p < 0 || s < 0 || uint(s) >= pc.n_seq) {
        for (uint d = tid; d < pc.hd; d += BLK) os[ob + d] = 0.0;
        return;
    }
    const uint kvh = h / (pc.n_head / pc.n_head_kv);
    const uint qb = pc.q_off + t * pc.q_stride + h * pc.hd;
    for (uint d = tid; d < pc.hd; d += BLK) sq[d] = qs[qb + d];
    barrier();

    const uint lo = pc.window > 0u ? uint(max(0, p - int(pc.window) + 1)) : 0u;
    const uint hi = uint(p);
    const uint base = uint(s) * pc.cap * pc.kv_dim + kvh * pc.hd;
    const float NEG = -1.0e30;
    float m = NEG, l = 0.0;
    float o[DPT];
    for (uint k = 0u; k < DPT; k++) o[k] = 0.0;

    for (uint jb = lo; jb <= hi; jb += BLK) {
        const uint j = jb + tid;
        float sc = NEG;
        if (j <= hi) {
            const uint kb = pc.kc_off + base + (j % pc.cap) * pc.kv_dim;
            float dot_ = 0.0;
            for (uint d = 0u; d < pc.hd; d++) dot_ += sq[d] * KV_GET(kc, kb + d);
            sc = dot_ * pc.scale;
            if (pc.softcap > 0.0) sc = pc.softcap * tanh_acc(sc / pc.softcap);
        }
        const float mn = max(m, wg_max(sc));
        const float alpha = exp(m - mn);
        const float pj = j <= hi ? exp(sc - mn) : 0.0;
        sp[tid] = pj;
        l = l * alpha + wg_sum(pj); // its barriers also publish sp
        const uint nb = min(BLK, hi - jb + 1u);
        for (uint k = 0u; k < DPT; k++) {
            const uint d = tid + k * BLK;
            if (d < pc.hd) {
                float acc = o[k] * alpha;
                for (uint jj = 0u; jj < nb; jj++)
                    acc += sp[jj] * KV_GET(vc, pc.vc_off + base + ((jb + jj) % pc.cap) * pc.kv_dim + d);
                o[k] = acc;
            }
        }
        m = mn;
        barrier(); // sp is rewritten by the next block
    }
    const float inv = 1.0 / l;
    for (uint k = 0u; k < DPT; k++) {
        const uint d = tid + k * BLK;
        if (d < pc.hd) os[ob + d] = o[k] * inv;
    }
}
