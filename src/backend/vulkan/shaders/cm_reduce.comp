#version 450
// The split-K sums of the tensor-core matmul (mmcm.comp with n_split > 1):
// Y[t, r] = sum over the splits of P[split][t][r], in split order (the same
// result every run), or for GEGLU gelu_tanh(sum A) * (sum B).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer PB { float ps[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, n_rows;
    uint n_split, split_stride, p_stride, geglu_off; // geglu_off 0: no GEGLU
    uint y_off, y_stride;
} pc;

void main() {
    const uint r = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (r >= pc.n_rows || t >= step_rows(pc.rows_sel)) return;
    const uint p = t * pc.p_stride + r;
    float a = 0.0, b = 0.0;
    for (uint s = 0u; s < pc.n_split; s++) {
        a += ps[p + s * pc.split_stride];
        if (pc.geglu_off != 0u) b += ps[pc.geglu_off + p + s * pc.split_stride];
    }
    ys[pc.y_off + t * pc.y_stride + r] = pc.geglu_off != 0u ? gelu_tanh(a) * b : a;
}
