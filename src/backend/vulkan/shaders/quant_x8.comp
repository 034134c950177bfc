#version 450
// Activations to the int8 blocks of the int8 mat-vec (x8.glsl), a vec4 per
// invocation. Ops that produce the mat-vec's input write the same blocks
// themselves where they can (add_norm2.comp and attn_reduce.comp with X8).
// X8S: with subgroup shuffles (x8_quant_vecs; subgroups of 8 or more).
#extension GL_GOOGLE_include_directive : require
#ifdef X8S
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"

layout(local_size_x_id = 0) in; // a multiple of 64 (x8_quant_vec4)

layout(set = 0, binding = 1) readonly buffer XB { vec4 xs4[]; };
layout(set = 0, binding = 2) writeonly buffer QU { uint q1[]; };
layout(set = 0, binding = 2) writeonly buffer QM { vec4 qm4[]; };

layout(push_constant) uniform PC {
    uint rows_sel;
    uint n_in;            // a multiple of the unit
    uint x_off, x_stride; // elements, multiples of 4
    uint q_stride;        // uvec4 per row of the output
    uint kind;
} pc;

#ifdef X8S
#define X8_RV 1u
#define X8_NO_VEC4
#endif
#include "x8.glsl"

// an invocation per vec4 of the row
void main() {
    const uint row = gl_WorkGroupID.y;
    if (row >= step_rows(pc.rows_sel)) return; // uniform: the workgroup's row
    const uint i = gl_GlobalInvocationID.x;
    const bool live = i < pc.n_in / 4u;
    const vec4 v = live ? xs4[(pc.x_off + row * pc.x_stride) / 4u + i] : vec4(0.0);
#ifdef X8S
    const vec4 vs[1] = vec4[1](v);
    x8_quant_vecs(vs, gl_WorkGroupID.x * gl_WorkGroupSize.x, pc.n_in / 4u, pc.kind, row * pc.q_stride);
#else
    x8_quant_vec4(v, i, live, pc.kind, row * pc.q_stride);
#endif
}
