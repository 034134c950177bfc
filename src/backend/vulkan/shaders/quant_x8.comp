#version 450
// Activations to the int8 blocks of the int8 mat-vec (x8.glsl): per
// invocation a block of 32 (kind 0), per 32 invocations a block of 256
// (kind 1). Ops that
// produce the mat-vec's input write the same blocks themselves where they
// can (rmsnorm.comp and attn_reduce.comp with X8).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 1) readonly buffer XB { vec4 xs4[]; };
layout(set = 0, binding = 2) writeonly buffer QB { uvec4 q4[]; };
layout(set = 0, binding = 2) writeonly buffer QM { vec4 qm4[]; };

layout(push_constant) uniform PC {
    uint rows_sel;
    uint n_in;            // a multiple of the unit
    uint x_off, x_stride; // elements, multiples of 4
    uint q_stride;        // uvec4 per row of the output
    uint kind;
} pc;

uint g_xb;
#define X8_SRC(i) xs4[g_xb + (i)]
#include "x8.glsl"

void main() {
    const uint row = gl_WorkGroupID.y;
    if (row >= step_rows(pc.rows_sel)) return; // uniform: the workgroup's row
    g_xb = (pc.x_off + row * pc.x_stride) / 4u;
    if (pc.kind == 0u) {
        const uint u = gl_GlobalInvocationID.x;
        if (u < pc.n_in / 32u) x8_quant32(u, row * pc.q_stride + 3u * u);
    } else {
        const uint u = gl_WorkGroupID.x * (gl_WorkGroupSize.x / 32u) + gl_LocalInvocationID.x / 32u;
        x8_quant256(u, u < pc.n_in / 256u, row * pc.q_stride + 24u * u);
    }
}
