#version 450
// Element-wise ops over [rows, width] f32 rows (one dispatch row per token):
//   op 0 add:     y = a + b
//   op 1 geglu:   y = gelu_tanh(a) * b
//   op 2 softcap: y = cap * tanh(a / cap)
//   op 3 gather:  y[j] = a[out[j]] for the step's outputs j
//   op 4 copy:    y = a
// y may alias a or b (in place).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 1) readonly buffer AB { float as_[]; };
layout(set = 0, binding = 2) readonly buffer BB { float bs[]; };
layout(set = 0, binding = 3) buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint op, rows_sel, width;
    uint a_off, a_stride, b_off, b_stride, y_off, y_stride;
    float cap;
} pc;

void main() {
    const uint t = gl_WorkGroupID.y;
    const uint i = gl_GlobalInvocationID.x;
    if (t >= step_rows(pc.rows_sel) || i >= pc.width) return;
    const uint y = pc.y_off + t * pc.y_stride + i;
    if (pc.op == 3u) {
        ys[y] = as_[pc.a_off + uint(step_out(t)) * pc.a_stride + i];
        return;
    }
    const float a = as_[pc.a_off + t * pc.a_stride + i];
    if (pc.op == 4u) ys[y] = a;
    else if (pc.op == 0u) ys[y] = a + bs[pc.b_off + t * pc.b_stride + i];
    else if (pc.op == 1u) ys[y] = gelu_tanh(a) * bs[pc.b_off + t * pc.b_stride + i];
    else ys[y] = pc.cap * tanh_acc(a / pc.cap);
}
