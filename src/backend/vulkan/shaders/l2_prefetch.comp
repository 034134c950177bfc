#version 450
// Touches a byte range of a weight so that it sits in the GPU's L2 cache
// when a later mat-vec reads it: recorded next to ops that leave the memory
// bus idle (norms, attention), it moves those bytes while they run. One
// 4-byte load per 32-byte sector (the cache fills whole sectors), LOADS per
// invocation, all in flight before the first is used.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define LOADS 8u
layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
// never written (pc.never is 0): the loads need a use to be kept
layout(set = 0, binding = 4) writeonly buffer Y { uint y[]; };

layout(push_constant) uniform PC {
    uint first;   // first sector, in 32-byte units of the binding
    uint count;   // sectors
    uint never;
} pc;

void main() {
    const uint threads = gl_NumWorkGroups.x * 256u;
    const uint t = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
    uint v[LOADS];
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {
        const uint s = min(t + i * threads, pc.count - 1u);
        v[i] = w[(pc.first + s) * 8u];
    }
    uint acc = 0u;
    [[unroll]] for (uint i = 0u; i < LOADS; i++) acc ^= v[i];
    if (pc.never != 0u && acc == 0x9E3779B9u) y[0] = acc;
}
