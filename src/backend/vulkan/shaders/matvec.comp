#version 450
// Y[t, r] = sum_i W[r, i] X[t, i] for a few tokens (NCOLS per workgroup):
// matrix-vector products, bandwidth-bound. A workgroup takes NROWS rows; its
// invocations stride over groups of 8 weights, dequantize them once and use
// them for every token; partial sums are reduced with subgroupAdd and then
// across subgroups through shared memory.
// GEGLU: Y[t, r] = gelu_tanh(A[r]·X[t]) * (B[r]·X[t]) (fused gate and up).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint NCOLS = 1;
#define NROWS 2u

#include "weights.glsl"
layout(set = 0, binding = 3) readonly buffer XB { float xs[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel; // 0: step tokens, 1: step outputs
    uint n_in;     // row length
    uint n_rows;   // rows of this weight part
    uint row_u16;  // row stride in 16-bit words
    uint x_off, x_stride;
    uint y_off, y_stride;
    uint y_row0;   // output column of the part's first row
} pc;

#ifdef GEGLU
#define NACC 2u
#else
#define NACC 1u
#endif
shared float red[32 * NROWS * 8 * NACC];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = wg_linear() * NROWS;
    const uint n = step_rows(pc.rows_sel);
    const uint c0 = gl_WorkGroupID.y * NCOLS;
    if (r0 >= pc.n_rows || c0 >= n) return;
    const uint nc = min(NCOLS, n - c0);
    const uint ng = (pc.n_in + 7u) / 8u;

    float acc[NROWS * NCOLS];
#ifdef GEGLU
    float accb[NROWS * NCOLS];
#endif
    [[unroll]] for (uint k = 0u; k < NROWS * NCOLS; k++) {
        acc[k] = 0.0;
#ifdef GEGLU
        accb[k] = 0.0;
#endif
    }

    for (uint g = tid; g < ng; g += gl_WorkGroupSize.x) {
        vec4 wl[NROWS], wh[NROWS];
#ifdef GEGLU
        vec4 bl[NROWS], bh[NROWS];
#endif
        [[unroll]] for (uint r = 0u; r < NROWS; r++) {
            if (r0 + r < pc.n_rows) {
                dq8_a((r0 + r) * pc.row_u16, g, pc.n_in, wl[r], wh[r]);
#ifdef GEGLU
                dq8_b((r0 + r) * pc.row_u16, g, pc.n_in, bl[r], bh[r]);
#endif
            } else {
                wl[r] = vec4(0.0);
                wh[r] = vec4(0.0);
#ifdef GEGLU
                bl[r] = vec4(0.0);
                bh[r] = vec4(0.0);
#endif
            }
        }
        [[unroll]] for (uint c = 0u; c < NCOLS; c++) {
            if (c < nc) {
                uint xb = pc.x_off + (c0 + c) * pc.x_stride + g * 8u;
                vec4 xl, xh;
#ifdef ROW_TAIL
                if (g * 8u + 8u > pc.n_in) {
                    float v[8];
                    [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = g * 8u + k < pc.n_in ? xs[xb + k] : 0.0;
                    xl = vec4(v[0], v[1], v[2], v[3]);
                    xh = vec4(v[4], v[5], v[6], v[7]);
                } else
#endif
                {
                    xl = vec4(xs[xb], xs[xb + 1u], xs[xb + 2u], xs[xb + 3u]);
                    xh = vec4(xs[xb + 4u], xs[xb + 5u], xs[xb + 6u], xs[xb + 7u]);
                }
                [[unroll]] for (uint r = 0u; r < NROWS; r++) {
                    acc[r * NCOLS + c] += dot(wl[r], xl) + dot(wh[r], xh);
#ifdef GEGLU
                    accb[r * NCOLS + c] += dot(bl[r], xl) + dot(bh[r], xh);
#endif
                }
            }
        }
    }

    // Reduce: subgroups first, then across subgroups through shared memory.
    const uint K = NROWS * NCOLS;
    [[unroll]] for (uint k = 0u; k < K; k++) {
        float s = subgroupAdd(acc[k]);
#ifdef GEGLU
        float sb = subgroupAdd(accb[k]);
#endif
        if (subgroupElect()) {
            red[gl_SubgroupID * K * NACC + k] = s;
#ifdef GEGLU
            red[gl_SubgroupID * K * NACC + K + k] = sb;
#endif
        }
    }
    barrier();
    if (tid < K) {
        uint r = tid / NCOLS, c = tid % NCOLS;
        float s = 0.0;
#ifdef GEGLU
        float sb = 0.0;
#endif
        for (uint i = 0u; i < gl_NumSubgroups; i++) {
            s += red[i * K * NACC + tid];
#ifdef GEGLU
            sb += red[i * K * NACC + K + tid];
#endif
        }
        if (r0 + r < pc.n_rows && c < nc) {
#ifdef GEGLU
            s = gelu_tanh(s) * sb;
#endif
            ys[pc.y_off + (c0 + c) * pc.y_stride + pc.y_row0 + r0 + r] = s;
        }
    }
}
