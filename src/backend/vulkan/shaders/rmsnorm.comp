#version 450
// Row-wise RMSNorm over rows of width d (one workgroup per row; a token row
// of n_heads * d elements holds n_heads rows, for per-head QK-norm):
//   plain: y = x / sqrt(mean(x^2) + eps) * w
//   ADD:   y += x / sqrt(mean(x^2) + eps) * w   (post-norm + residual)
//   ADD + NORM2: then z = y / sqrt(mean(y^2) + eps) * w2 (the next block's
//          pre-norm, fused)
// x and y may be the same buffer (in place).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 1) readonly buffer XB { float xs[]; };
layout(set = 0, binding = 2) readonly buffer WB { float ws[]; };
layout(set = 0, binding = 3) buffer YB { float ys[]; };
#ifdef NORM2
layout(set = 0, binding = 4) readonly buffer W2B { float w2s[]; };
layout(set = 0, binding = 5) writeonly buffer ZB { float zs[]; };
#endif

layout(push_constant) uniform PC {
    uint rows_sel, d;
    uint x_off, x_stride, y_off, y_stride, w_off;
    float eps;
    uint w2_off, z_off, z_stride;
} pc;

void main() {
    const uint t = gl_WorkGroupID.y, h = gl_WorkGroupID.x;
    if (t >= step_rows(pc.rows_sel)) return;
    const uint tid = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
    const uint xb = pc.x_off + t * pc.x_stride + h * pc.d;
    const uint yb = pc.y_off + t * pc.y_stride + h * pc.d;
    float ss = 0.0;
    for (uint i = tid; i < pc.d; i += nt) {
        float v = xs[xb + i];
        ss += v * v;
    }
    ss = wg_sum(ss);
    const float scale = 1.0 / sqrt(ss / float(pc.d) + pc.eps);
#ifdef NORM2
    float ss2 = 0.0;
#endif
    for (uint i = tid; i < pc.d; i += nt) {
        float v = xs[xb + i] * scale * ws[pc.w_off + i];
#ifdef ADD
        v += ys[yb + i];
#endif
        ys[yb + i] = v;
#ifdef NORM2
        ss2 += v * v;
#endif
    }
#ifdef NORM2
    ss2 = wg_sum(ss2);
    const float scale2 = 1.0 / sqrt(ss2 / float(pc.d) + pc.eps);
    const uint zb = pc.z_off + t * pc.z_stride + h * pc.d;
    for (uint i = tid; i < pc.d; i += nt) zs[zb + i] = ys[yb + i] * scale2 * w2s[pc.w2_off + i];
#endif
}
