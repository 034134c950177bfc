#version 450
// Y[t, r] = sum_i W[r, i] X[t, i], tiled for many tokens (prefill): a
// workgroup of 256 computes a 64-row x 64-token tile, stepping through the
// row in slices of 32 that are dequantized into shared memory once and used
// by every token of the tile. Invocation (tx, ty) owns rows tx + 16i and
// tokens ty + 16j (i, j < 4), so stores of a token row are contiguous.
// GEGLU: Y = gelu_tanh(A·X) * (B·X).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

#include "weights.glsl"
layout(set = 0, binding = 3) readonly buffer XB { float xs[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, n_in, n_rows, row_u16;
    uint x_off, x_stride, y_off, y_stride, y_row0;
} pc;

#define BM 64u
#define BN 64u
#define BK 32u
#define PAD 1u
shared float sa[BK * (BM + PAD)];
#ifdef GEGLU
shared float sb[BK * (BM + PAD)];
#endif
shared float sx[BK * (BN + PAD)];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint row0 = wg_linear() * BM;
    const uint n = step_rows(pc.rows_sel);
    const uint col0 = gl_WorkGroupID.y * BN;
    if (row0 >= pc.n_rows || col0 >= n) return;
    const uint ng = (pc.n_in + 7u) / 8u;
    const uint tx = tid % 16u, ty = tid / 16u;
    // loader roles: a row (or token) and one group of 8 along k
    const uint lr = tid / 4u, lg = tid % 4u;

    float acc[16];
#ifdef GEGLU
    float accb[16];
#endif
    [[unroll]] for (uint k = 0u; k < 16u; k++) {
        acc[k] = 0.0;
#ifdef GEGLU
        accb[k] = 0.0;
#endif
    }

    for (uint k0 = 0u; k0 < pc.n_in; k0 += BK) {
        const uint g = k0 / 8u + lg;
        vec4 lo = vec4(0.0), hi = vec4(0.0);
#ifdef GEGLU
        vec4 blo = vec4(0.0), bhi = vec4(0.0);
#endif
        if (row0 + lr < pc.n_rows && g < ng) {
            dq8_a((row0 + lr) * pc.row_u16, g, pc.n_in, lo, hi);
#ifdef GEGLU
            dq8_b((row0 + lr) * pc.row_u16, g, pc.n_in, blo, bhi);
#endif
        }
        const uint kb = lg * 8u;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            sa[(kb + k) * (BM + PAD) + lr] = lo[k];
            sa[(kb + 4u + k) * (BM + PAD) + lr] = hi[k];
#ifdef GEGLU
            sb[(kb + k) * (BM + PAD) + lr] = blo[k];
            sb[(kb + 4u + k) * (BM + PAD) + lr] = bhi[k];
#endif
        }
        // tokens: token lr, elements k0 + kb .. +8
        {
            const uint t = col0 + lr;
            const uint xb = pc.x_off + t * pc.x_stride + k0 + kb;
            [[unroll]] for (uint k = 0u; k < 8u; k++) {
                float v = 0.0;
                if (t < n && k0 + kb + k < pc.n_in) v = xs[xb + k];
                sx[(kb + k) * (BN + PAD) + lr] = v;
            }
        }
        barrier();
        [[unroll]] for (uint k = 0u; k < BK; k++) {
            float a[4], b[4];
#ifdef GEGLU
            float a2[4];
#endif
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                a[i] = sa[k * (BM + PAD) + tx + 16u * i];
#ifdef GEGLU
                a2[i] = sb[k * (BM + PAD) + tx + 16u * i];
#endif
                b[i] = sx[k * (BN + PAD) + ty + 16u * i];
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                [[unroll]] for (uint j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
#ifdef GEGLU
                    accb[i * 4u + j] += a2[i] * b[j];
#endif
                }
        }
        barrier();
    }

    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const uint t = col0 + ty + 16u * j;
        if (t >= n) break;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            const uint r = row0 + tx + 16u * i;
            if (r < pc.n_rows) {
                float v = acc[i * 4u + j];
#ifdef GEGLU
                v = gelu_tanh(v) * accb[i * 4u + j];
#endif
                ys[pc.y_off + t * pc.y_stride + pc.y_row0 + r] = v;
            }
        }
    }
}
