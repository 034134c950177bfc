#version 450
// Probes of a device's limits for `ignis bench` (vk_probe.c).
// READ: every invocation reads uvec4s of binding 1 in a grid-stride loop,
//   four loads in flight, and writes their xor (so nothing is elided):
//   the memory read bandwidth.
// MMA: every subgroup runs four independent chains of 16x8x16 f16 products
//   with f32 accumulation in registers (GL_NV_cooperative_matrix; with KHR,
//   16x16x16 of GL_KHR_cooperative_matrix): the tensor-core rate the
//   prefill matmul (mmcm.comp) is made of.
// SEG, PERSIST: the stages of a decode step as separate dispatches, or in
//   one persistent dispatch with grid barriers (bench/vk_stage_probe.c).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

#ifdef READ
layout(set = 0, binding = 1) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 4) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform PC { uint n_vec4; } pc;

void main() {
    const uint gid = wg_linear() * 256u + gl_LocalInvocationID.x;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.z * 256u;
    uvec4 a = uvec4(0u), b = uvec4(0u), c = uvec4(0u), d = uvec4(0u);
    uint i = gid;
    for (; i + 3u * stride < pc.n_vec4; i += 4u * stride) {
        a ^= src[i];
        b ^= src[i + stride];
        c ^= src[i + 2u * stride];
        d ^= src[i + 3u * stride];
    }
    for (; i < pc.n_vec4; i += stride) a ^= src[i];
    uvec4 x = a ^ b ^ c ^ d;
    dst[gid] = x.x ^ x.y ^ x.z ^ x.w;
}
#endif

#ifdef MMA
#ifdef KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "cm_frag.glsl"
layout(set = 0, binding = 4) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform PC { uint iters; } pc;

void main() {
    CM_A a = CM_A(float16_t(0.001));
    CM_B b = CM_B(float16_t(0.002));
    CM_C c0 = CM_C(0.0);
    CM_C c1 = CM_C(0.0);
    CM_C c2 = CM_C(0.0);
    CM_C c3 = CM_C(0.0);
    for (uint i = 0u; i < pc.iters; i++) {
        c0 = CM_MULADD(a, b, c0);
        c1 = CM_MULADD(a, b, c1);
        c2 = CM_MULADD(a, b, c2);
        c3 = CM_MULADD(a, b, c3);
    }
    for (int e = 0; e < c0.length(); e++) c0[e] += c1[e] + c2[e] + c3[e];
    CM_STORE(c0, dst, (wg_linear() * gl_NumSubgroups + gl_SubgroupID) * 16u * CM_N, 16u, CM_ROW_MAJOR);
}
#endif

#ifdef SEG
// bench/vk_stage_probe.c: one stage, reading vec4s [off, off + n) of
// binding 1 with LPT loads in flight per invocation (nothing is written
// unless the xor hits a constant: the loads must not be elided).
layout(set = 0, binding = 1) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 4) buffer Dst { uint dst[]; };
layout(constant_id = 1) const uint LPT = 4;
layout(push_constant) uniform PC { uint n_vec4, off; } pc;

void main() {
    const uint gid = wg_linear() * 256u + gl_LocalInvocationID.x;
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.z * 256u;
    uvec4 a = uvec4(0u);
    for (uint i = gid; i < pc.n_vec4; i += LPT * stride) {
        uvec4 v[LPT];
        [[unroll]] for (uint u = 0u; u < LPT; u++) v[u] = src[pc.off + min(i + u * stride, pc.n_vec4 - 1u)];
        [[unroll]] for (uint u = 0u; u < LPT; u++) a ^= v[u];
    }
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345678u) dst[1u + (gid & 1023u)] = a.x;
}
#endif

#ifdef PERSIST
// bench/vk_stage_probe.c: the stages of SEG in one persistent dispatch
// (grid.glsl), a grid barrier after each. Binding 2: (offset, count) in
// vec4s per range (bit 31 of the count: no barrier after it, the stage goes
// on). dst[0]: the workgroups that joined. With pc.check, every workgroup
// checks after each barrier that all had arrived (dst[1025] = 1 if not).
layout(set = 0, binding = 1) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 2) readonly buffer Seg { uvec2 seg[]; };
layout(set = 0, binding = 4) buffer Dst { uint dst[]; };
#define GRID_BINDING 3
#include "grid.glsl"
layout(constant_id = 1) const uint LPT = 4;
layout(push_constant) uniform PC { uint n_seg, join_wait, check; } pc;

void main() {
    if (grid_join(pc.join_wait)) {
        const uint gid = grid_rank * 256u + gl_LocalInvocationID.x, stride = grid_n * 256u;
        uvec4 a = uvec4(0u);
        for (uint s = 0u; s < pc.n_seg; s++) {
            const uvec2 sg = seg[s];
            const uint n4 = sg.y & 0x7FFFFFFFu; // bit 31: part of a stage, no barrier after it
            for (uint i = gid; i < n4; i += LPT * stride) {
                uvec4 v[LPT];
                [[unroll]] for (uint u = 0u; u < LPT; u++) v[u] = src[sg.x + min(i + u * stride, n4 - 1u)];
                [[unroll]] for (uint u = 0u; u < LPT; u++) a ^= v[u];
            }
            if (sg.y < 0x80000000u) {
                grid_sync();
                if (pc.check != 0u && gl_LocalInvocationIndex == 0u && grid_load(2u) < grid_epoch * grid_n)
                    atomicOr(dst[1025], 1u);
            }
        }
        if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345678u) dst[1u + (gid & 1023u)] = a.x;
        if (gid == 0u) dst[0] = grid_n;
    }
    grid_finish();
}
#endif
