#version 450
// The fused norms between two blocks of a layer, for rows whose width and
// offsets are multiples of 4, with the row in registers (RV vec4 per
// invocation, width <= 4 * RV * local size): one load of each input, all
// issued first, no re-reads.
//   y += x / sqrt(mean(x^2) + eps) * w     (post-norm + residual)
//   z = y / sqrt(mean(y^2) + eps) * w2     (the next block's pre-norm)
// The same sums as rmsnorm.comp -DADD -DNORM2, in a different order.
// X8: z also as int8 blocks (x8.glsl), the input of the int8 mat-vecs that
// read z, which then need no quant_x8 dispatch of their own; quantized from
// the registers (x8_quant_vec4), the local size a multiple of 64.
// X8S (with X8): the whole row's blocks at once with subgroup shuffles
// (x8_quant_vecs: no barrier per vec4 of an invocation; subgroups of 8 or
// more with shuffles): no division's correction and no barriers per call,
// which decode pays for on every norm; the work they do is in x8.glsl.
#extension GL_GOOGLE_include_directive : require
#ifdef X8S
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint RV = 1;

layout(set = 0, binding = 1) readonly buffer XB { vec4 xs4[]; };
layout(set = 0, binding = 2) readonly buffer WB { vec4 ws4[]; };
layout(set = 0, binding = 3) buffer YB { vec4 ys4[]; };
layout(set = 0, binding = 4) readonly buffer W2B { vec4 w2s4[]; };
layout(set = 0, binding = 5) writeonly buffer ZB { vec4 zs4[]; };
#ifdef X8
layout(set = 0, binding = 6) writeonly buffer QU { uint q1[]; };
layout(set = 0, binding = 6) writeonly buffer QM { vec4 qm4[]; };
#endif

layout(push_constant) uniform PC {
    uint rows_sel, d;
    uint x_off, x_stride, y_off, y_stride, w_off; // elements, multiples of 4
    float eps;
    uint w2_off, z_off, z_stride;
    uint q_stride, kind; // X8: uvec4 per row of the int8 copy, its kind (x8.glsl)
} pc;

#ifdef X8
#ifdef X8S
#define X8_RV RV
#define X8_NO_VEC4
#endif
#include "x8.glsl"
#endif

void main() {
    const uint t = gl_WorkGroupID.y;
    if (t >= step_rows(pc.rows_sel)) return;
    const uint tid = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x, n4 = pc.d / 4u;
    const uint xb = (pc.x_off + t * pc.x_stride) / 4u, yb = (pc.y_off + t * pc.y_stride) / 4u;
    const uint zb = (pc.z_off + t * pc.z_stride) / 4u, wb = pc.w_off / 4u, w2b = pc.w2_off / 4u;
    // the norm weights too are loaded up front: the phases wait on one
    // memory latency, not three
    vec4 v[RV], y[RV], g1[RV], g2[RV];
    float ss = 0.0;
    [[unroll]] for (uint k = 0u; k < RV; k++) {
        const uint i = tid + k * nt;
        v[k] = i < n4 ? xs4[xb + i] : vec4(0.0);
        y[k] = i < n4 ? ys4[yb + i] : vec4(0.0);
        g1[k] = i < n4 ? ws4[wb + i] : vec4(0.0);
        g2[k] = i < n4 ? w2s4[w2b + i] : vec4(0.0);
        ss += dot(v[k], v[k]);
    }
    ss = wg_sum(ss);
    const float scale = 1.0 / sqrt(ss / float(pc.d) + pc.eps);
    float ss2 = 0.0;
    [[unroll]] for (uint k = 0u; k < RV; k++) {
        const uint i = tid + k * nt;
        if (i < n4) {
            y[k] += v[k] * scale * g1[k];
            ys4[yb + i] = y[k];
            ss2 += dot(y[k], y[k]);
        }
    }
    ss2 = wg_sum(ss2);
    const float scale2 = 1.0 / sqrt(ss2 / float(pc.d) + pc.eps);
#ifdef X8S
    vec4 zq[RV];
#endif
    [[unroll]] for (uint k = 0u; k < RV; k++) {
        const uint i = tid + k * nt;
        const vec4 z = i < n4 ? y[k] * scale2 * g2[k] : vec4(0.0);
        if (i < n4) zs4[zb + i] = z;
#if defined(X8S)
        zq[k] = z;
#elif defined(X8)
        x8_quant_vec4(z, i, i < n4, pc.kind, t * pc.q_stride);
#endif
    }
#ifdef X8S
    x8_quant_vecs(zq, 0u, n4, pc.kind, t * pc.q_stride);
#endif
}
