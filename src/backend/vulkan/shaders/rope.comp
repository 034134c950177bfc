#version 450
// NeoX RoPE over [t, n_heads, hd] rows: pairs (x[i], x[i + hd/2]) rotate by
// angle pos[t] * freq[i], freq[i] = base^(-2i/hd) / factor (a table the host
// fills with the CPU's f32 formula, so angles are bit-identical). Sine and
// cosine come from an exact Cody-Waite reduction and minimax polynomials,
// not from the driver's sin/cos (whose accuracy Vulkan leaves loose).
//   default      rotate x in place
//   KV_STORE     write the token's K row (rotated when ROTATE_K) and V row
//                into the layer's cache at slot pos % cap of its sequence;
//                x is left unchanged. KV_F16 / KV_F32 select the cache type.
//   NORM         per-head RMSNorm (weight binding 6, eps) before rotating
//                (QK-norm fused; with KV_STORE only the stored K is normed)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 1) buffer XB { float xs[]; };
layout(set = 0, binding = 2) readonly buffer FB { float freq[]; };
layout(set = 0, binding = 3) readonly buffer VB { float vs[]; };
#if defined(KV_F16)
layout(set = 0, binding = 4) writeonly buffer KC { uint16_t kc[]; };
layout(set = 0, binding = 5) writeonly buffer VC { uint16_t vc[]; };
#define KV_PUT(buf, i, v) buf[i] = uint16_t(f2h_rne(v))
#else
layout(set = 0, binding = 4) writeonly buffer KC { float kc[]; };
layout(set = 0, binding = 5) writeonly buffer VC { float vc[]; };
#define KV_PUT(buf, i, v) buf[i] = (v)
#endif

#ifdef NORM
layout(set = 0, binding = 6) readonly buffer NB { float nw[]; };
#endif

layout(push_constant) uniform PC {
    uint n_heads, hd;
    uint x_off, x_stride;
    uint freq_off;
    uint v_off, v_stride;
    uint kc_off, vc_off; // element offsets of this layer's K and V caches
    uint cap, n_seq;     // ring slots per sequence, sequences
    uint kv_dim;         // elements per cache row (n_heads * hd)
    uint norm_off;
    float eps;
} pc;

#include "rope.glsl"

void main() {
    const uint t = gl_WorkGroupID.y, h = gl_WorkGroupID.x;
    if (t >= step_rows(0u)) return;
    const uint tid = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
    const uint half_ = pc.hd / 2u;
    const uint xb = pc.x_off + t * pc.x_stride + h * pc.hd;
    const int p = step_pos(t);
#ifdef KV_STORE
    const int s = step_seq(t);
    if (p < 0 || s < 0 || uint(s) >= pc.n_seq) return;
    const uint row = (uint(s) * pc.cap + uint(p) % pc.cap) * pc.kv_dim + h * pc.hd;
    const uint vb = pc.v_off + t * pc.v_stride + h * pc.hd;
    for (uint i = tid; i < pc.hd; i += nt) KV_PUT(vc, pc.vc_off + row + i, vs[vb + i]);
#endif
#if !defined(KV_STORE) || defined(ROTATE_K)
#ifdef NORM
    // in mv.comp -DTAIL's order (one-token graphs): 32 strided partial sums
    for (uint l = tid; l < 32u; l += nt) {
        precise float part = 0.0;
        for (uint i = l; i < pc.hd; i += 32u) part += xs[xb + i] * xs[xb + i];
        ig_red[l] = part;
    }
    const float ss = sum32_red(); // its barriers also order the reads before the writes below
    const float nscale = 1.0 / sqrt(ss / float(pc.hd) + pc.eps);
#endif
    const float pf = float(p);
    for (uint i = tid; i < half_; i += nt) {
        float a = xs[xb + i], b = xs[xb + i + half_];
#ifdef NORM
        a = a * nscale * nw[pc.norm_off + i];
        b = b * nscale * nw[pc.norm_off + i + half_];
#endif
        float ra, rb;
        rope_rotate(pf, freq[pc.freq_off + i], a, b, ra, rb);
#ifdef KV_STORE
        KV_PUT(kc, pc.kc_off + row + i, ra);
        KV_PUT(kc, pc.kc_off + row + i + half_, rb);
#else
        xs[xb + i] = ra;
        xs[xb + i + half_] = rb;
#endif
    }
#elif defined(KV_STORE)
    for (uint i = tid; i < pc.hd; i += nt) KV_PUT(kc, pc.kc_off + row + i, xs[xb + i]);
#endif
}
