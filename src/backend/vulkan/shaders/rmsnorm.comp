#version 450
// Row-wise RMSNorm over rows of width d (one workgroup per row; a token row
// of n_heads * d elements holds n_heads rows, for per-head QK-norm):
//   plain: y = x / sqrt(mean(x^2) + eps) * w
//   ADD:   y += x / sqrt(mean(x^2) + eps) * w   (post-norm + residual)
// x and y may be the same buffer (in place).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 1) readonly buffer XB { float xs[]; };
layout(set = 0, binding = 2) readonly buffer WB { float ws[]; };
layout(set = 0, binding = 3) buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, d;
    uint x_off, x_stride, y_off, y_stride, w_off;
    float eps;
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
    for (uint i = tid; i < pc.d; i += nt) {
        float v = xs[xb + i] * scale * ws[pc.w_off + i];
#ifdef ADD
        ys[yb + i] += v;
#else
        ys[yb + i] = v;
#endif
    }
}
