#version 450
// Probes of a device's limits for `ignis bench` (vk_probe.c).
// READ: every invocation reads uvec4s of binding 1 in a grid-stride loop,
//   four loads in flight, and writes their xor (so nothing is elided):
//   the memory read bandwidth.
// MMA: every subgroup runs four independent chains of 16x8x16 f16 products
//   with f32 accumulation in registers (GL_NV_cooperative_matrix; with KHR,
//   16x16x16 of GL_KHR_cooperative_matrix): the tensor-core rate the
//   prefill matmul (mmcm.comp) is made of.
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
