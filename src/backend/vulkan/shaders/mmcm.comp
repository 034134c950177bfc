#version 450
// Y[t, r] = sum_i W[r, i] X[t, i] on tensor cores (GL_NV_cooperative_matrix,
// f16 inputs, f32 accumulation), for prefill and large batches of quantized
// weights. A workgroup of 8 subgroups (of 32) computes 128 rows x 64 tokens,
// stepping through the row 32 weights at a time: the weights are dequantized
// (dequant.glsl) and the activations converted to f16 into shared memory,
// then each subgroup multiplies its 32 x 32 block as 2 x 4 fragments of
// 16 x 8 (k = 16 per product). Results go through a per-subgroup staging
// area so that partial tiles are stored element by element.
// GEGLU: Y = gelu_tanh(A·X) * (B·X).
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x = 256) in;

#include "weights.glsl"
layout(set = 0, binding = 3) readonly buffer XB { float xs[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, n_in, n_rows, row_u16;
    uint x_off, x_stride, y_off, y_stride, y_row0;
} pc;

#define BM 128u
#define BN 64u
#define BK 32u
#define LD (BK + 8u) // halves per row in shared memory (80 bytes: 16-byte aligned)

shared float16_t sa[BM * LD];
#ifdef GEGLU
shared float16_t sa2[BM * LD];
#endif
shared float16_t sb[BN * LD];
shared float stage[8u * 128u * 2u];

void main() {
    const uint tid = gl_LocalInvocationID.x, warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint row0 = wg_linear() * BM;
    const uint n = step_rows(pc.rows_sel);
    const uint col0 = gl_WorkGroupID.y * BN;
    if (row0 >= pc.n_rows || col0 >= n) return;
    const uint ng = (pc.n_in + 7u) / 8u;
    const uint wm = warp % 4u, wn = warp / 4u;

    fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> acc[2][4];
#ifdef GEGLU
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> acc2[2][4];
#endif
    [[unroll]] for (uint i = 0u; i < 2u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);
#ifdef GEGLU
            acc2[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);
#endif
        }

    for (uint k0 = 0u; k0 < pc.n_in; k0 += BK) {
        // weights: 128 rows x 4 groups of 8
        [[unroll]] for (uint h = 0u; h < 2u; h++) {
            const uint idx = tid + h * 256u, r = idx / 4u, gq = idx % 4u, g = k0 / 8u + gq;
            vec4 lo = vec4(0.0), hi = vec4(0.0);
#ifdef GEGLU
            vec4 lo2 = vec4(0.0), hi2 = vec4(0.0);
#endif
            if (row0 + r < pc.n_rows && g < ng) {
                dq8_a((row0 + r) * pc.row_u16, g, pc.n_in, lo, hi);
#ifdef GEGLU
                dq8_b((row0 + r) * pc.row_u16, g, pc.n_in, lo2, hi2);
#endif
            }
            const uint o = r * LD + gq * 8u;
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                sa[o + k] = float16_t(lo[k]);
                sa[o + 4u + k] = float16_t(hi[k]);
#ifdef GEGLU
                sa2[o + k] = float16_t(lo2[k]);
                sa2[o + 4u + k] = float16_t(hi2[k]);
#endif
            }
        }
        // activations: 64 tokens x 4 groups of 8
        {
            const uint t = tid / 4u, kk = (tid % 4u) * 8u;
            const uint xb = pc.x_off + (col0 + t) * pc.x_stride + k0 + kk;
            [[unroll]] for (uint k = 0u; k < 8u; k++) {
                float v = 0.0;
                if (col0 + t < n && k0 + kk + k < pc.n_in) v = xs[xb + k];
                sb[t * LD + kk + k] = float16_t(v);
            }
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2];
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> b[4];
            [[unroll]] for (uint j = 0u; j < 4u; j++) coopMatLoadNV(b[j], sb, (wn * 32u + j * 8u) * LD + kk, LD, true);
            [[unroll]] for (uint i = 0u; i < 2u; i++) {
                coopMatLoadNV(a[i], sa, (wm * 32u + i * 16u) * LD + kk, LD, false);
                [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
            }
#ifdef GEGLU
            [[unroll]] for (uint i = 0u; i < 2u; i++) {
                coopMatLoadNV(a[i], sa2, (wm * 32u + i * 16u) * LD + kk, LD, false);
                [[unroll]] for (uint j = 0u; j < 4u; j++) acc2[i][j] = coopMatMulAddNV(a[i], b[j], acc2[i][j]);
            }
#endif
        }
        barrier();
    }

    // epilogue: fragment by fragment through this subgroup's staging area
    const uint sbase = warp * 256u;
    [[unroll]] for (uint i = 0u; i < 2u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            coopMatStoreNV(acc[i][j], stage, sbase, 16u, true); // (m, n) at n * 16 + m
#ifdef GEGLU
            coopMatStoreNV(acc2[i][j], stage, sbase + 128u, 16u, true);
#endif
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < 128u; e += gl_SubgroupSize) {
                const uint m = e % 16u, nn = e / 16u;
                const uint r = row0 + wm * 32u + i * 16u + m, t = col0 + wn * 32u + j * 8u + nn;
                float v = stage[sbase + e];
#ifdef GEGLU
                v = gelu_tanh(v) * stage[sbase + 128u + e];
#endif
                if (r < pc.n_rows && t < n) ys[pc.y_off + t * pc.y_stride + pc.y_row0 + r] = v;
            }
            subgroupBarrier();
        }
}
