#version 450
// Y[t, :] = dequant(E[tok[t], :]) * scale, for the rows [row0, row0 + n_rows)
// of E held by this binding (a large table is split over several bindings;
// one dispatch per part, each writing the tokens that fall inside it).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

#include "weights.glsl"
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint n_in, row_u16, row0, n_rows;
    uint y_off, y_stride;
    float scale;
} pc;

void main() {
    const uint t = gl_WorkGroupID.y;
    if (t >= step_rows(0u)) return;
    const int tok = step_tok(t);
    if (tok < int(pc.row0) || tok >= int(pc.row0 + pc.n_rows)) return;
    const uint g = gl_GlobalInvocationID.x;
    if (g * 8u >= pc.n_in) return;
    vec4 lo, hi;
    dq8_a((uint(tok) - pc.row0) * pc.row_u16, g, pc.n_in, lo, hi);
    const uint yb = pc.y_off + t * pc.y_stride + g * 8u;
    for (uint k = 0u; k < 4u; k++) {
        if (g * 8u + k < pc.n_in) ys[yb + k] = lo[k] * pc.scale;
        if (g * 8u + 4u + k < pc.n_in) ys[yb + 4u + k] = hi[k] * pc.scale;
    }
}
