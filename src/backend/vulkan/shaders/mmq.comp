#version 450
// Y[t, r] = sum_i W[r, i] X[t, i] on int8 tensor cores (NV cooperative
// matrix, s8 x s8 -> s32 in products of 16 x 8 x 32): Q4_K weights (Q6_K
// with -DQ6K, below) against the int8 activations of the int8 mat-vec
// (x8.glsl, kind 1: one scale dx per 256 elements of a row and a multiplier
// t_j per 32). Twice the tensor-core rate of f16 products, half
// the shared-memory bytes, and no dequantization: a weight's 4-bit value is
// its byte. For a Q4_K super-block (256 elements, sub-blocks j of 32, 6-bit
// integer scales sc_j and minima m_j, f16 d and dmin) and x = dx t_j q:
//   W·X = d dx sum_j sc_j t_j (Q_j · q_j)  -  dmin sum_j m_j (dx t_j sum q_j)
// - the integer products Q_j · q_j come from the tensor cores; times sc_j
//   t_j they are summed in int32 over the super-block (exact), then scaled
//   by d dx once per super-block;
// - the minima's term is a product of two small matrices, -dmin m_j (rows
//   x sub-blocks) by dx t_j sum q_j (sub-blocks x tokens, the blocks' half
//   sums): f16 tensor-core products of 16 sub-blocks (two super-blocks)
//   each.
// Which (row, token) an element of an accumulator holds is the driver's
// business (v1 does not say): each invocation learns it once by loading a
// fragment of indices of the same type.
// A workgroup of 8 subgroups computes BM rows x BN tokens (64; 32 with
// NARROW; 128 with WIDE, 16 subgroups), a super-block per step in two halves
// of 128 elements (shared memory under 48 KiB); each subgroup a 32 x WN
// block as fragments of 16 x 8. The next half's weight loads are issued
// before this half's products (register prefetch); the activations come
// from L2 when they are stored to shared memory.
// Q6K: Q6_K weights (vk_memory.c's repacked rows: ql, qh, scales, d), 16
// sub-blocks of 16 with signed 8-bit scales and no minima; a weight's byte
// is its signed value q6 - 32. A product of 32 elements spans two scales,
// so each takes two: the activations are staged as [q0..q15, 16 zeros,
// q16..q31] per 32 and read at offsets 0 and 16. No wide tiles (their
// activations would not fit).
// The multipliers t_j of a half step's 4 sub-blocks of a token sit in the
// last 4 words of its row of sx (the bank skew, which the fragment loads
// never read).
// GEGLU: Y = gelu_tanh(A·X) * (B·X). Split K: as mmcm.comp (steps are
// super-blocks). Needs (host): n_in a multiple of 256, x offset and stride
// in uvec4 (x8 blocks of 48 bytes per 32 elements).
#extension GL_GOOGLE_include_directive : require
#ifdef KHR
#extension GL_KHR_cooperative_matrix : require
#else
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#endif
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#include "common.glsl"

#ifdef WIDE
#define NT 512u               // invocations: 16 subgroups, which caps registers at 128
#else
#define NT 256u
#endif
layout(local_size_x = NT) in;

layout(set = 0, binding = 1) readonly buffer WA4 { uvec4 wa4[]; };
#ifdef GEGLU
layout(set = 0, binding = 2) readonly buffer WB4 { uvec4 wb4[]; };
#endif
layout(set = 0, binding = 3) readonly buffer XQ { uvec4 xq4[]; };
layout(set = 0, binding = 3) readonly buffer XM { vec4 xm4[]; };
layout(set = 0, binding = 4) writeonly buffer YB { float ys[]; };

layout(push_constant) uniform PC {
    uint rows_sel, n_in, n_rows, row_u16;
    uint x_off, x_stride, y_off, y_stride, y_row0;
    uint n_split, split_steps, split_stride, geglu_off;
} pc;

#ifdef GEGLU
#define NM 2u                 // matrices
#define BM 64u
#else
#define NM 1u
#define BM 128u
#endif
#ifdef NARROW
#define BN 32u                // batches of up to 32 (many streams): no half-empty tiles
#elif defined(WIDE)
#define BN 128u
#else
#define BN 64u
#endif
#include "cm_frag.glsl"
// rows per subgroup: 32, or 16 where 32 would leave a subgroup fewer tokens
// than a fragment has (KHR's 16-token fragments in narrow GEGLU tiles)
const uint SR = BN * BM / (NT / 32u) / 32u >= CM_N ? 32u : 16u;
const uint WGM = BM / SR;           // subgroups along the rows
const uint WGN = NT / 32u / WGM;    // subgroups along the tokens
const uint WN = BN / WGN;           // tokens per subgroup
const uint FRM = SR / 16u;          // fragments per subgroup along the rows
const uint FRN = WN / CM_N;         // ... along the tokens
#define LDA 36u               // uints per shared row: 128 bytes + 16 (skewed banks)
#ifdef Q6K
#define LDX 52u               // activations: 32 elements per 48 bytes (the zeros between) + 16
#else
#define LDX LDA
#endif
#define TX (LDX - 4u)         // the word of sub-block 4h's t_j in a token's row of sx

shared uint sa[NM * BM * LDA];     // weights of the half step, one byte each
shared uint sx[BN * LDX];          // activations of the half step
#ifdef Q6K
shared int ssc[NM * BM * 16u];     // the super-block's 16 scales
#define SCALE(row, j) ssc[(row) * 16u + (j)]
#elif defined(WIDE)
shared uint ssc[NM * BM * 2u];     // the super-block's 8 scales sc_j, as bytes (to fit 48 KiB)
#define SCALE(row, j) int(bitfieldExtract(ssc[(row) * 2u + (j) / 4u], int(8u * ((j) % 4u)), 8))
#else
shared int ssc[NM * BM * 8u];      // the super-block's 8 scales sc_j
#define SCALE(row, j) ssc[(row) * 8u + (j)]
#endif
shared float sdw[NM * BM];         // its d
shared float sdx[BN];              // the activations' scale dx (the unit's)
#ifndef Q6K
// -64 dmin m_j and dx sum q_j / 64 (the scaling keeps sums of 32 large
// activations within f16's range): 16 sub-blocks of two super-blocks
shared float16_t smin[NM * BM * 16u];
shared float16_t ssum[BN * 16u];
#endif
shared int sidx_i[16u * CM_N];
shared float sidx_f[16u * CM_N];
#if defined(WIDE) || defined(Q6K)
#define CM_STAGE_IN_SA        // the epilogue's staging area is sa (8 or 16 KiB of its 18)
#else
shared float stage[8u * 256u];
#endif
#include "cm_store.glsl"

#define ICM_A CM_IA
#define ICM_B CM_IB
#define ICM_C CM_IC
#define FCM_C CM_C

// the loads of one half step (h) of super-block s, in registers
struct xload { uvec4 q0, q1; vec4 m; };
xload xr;
#ifdef Q6K
#ifdef WIDE
#error "no wide tiles for Q6_K"
#endif
uvec4 wload4(uint m, uint i) { // of matrix m
#ifdef GEGLU
    if (m == 1u) return wb4[i];
#endif
    return wa4[i];
}

// per thread and half: 16 elements l of each of the 4 groups q of 32 (ql
// bytes l and l + 32, qh bytes l); at h = 0 the header (scales, d)
struct wload { uvec4 qa, qb, qh, sc; uint d; };
#define W_PT (NM * BM * 2u / NT)
#else
struct wload { uvec4 hdr, q; };
#define W_PT (NM * BM * 4u / NT) // 16-byte loads of quants per thread and half
#endif
wload wr[W_PT];

#ifdef Q6K
// the repacked row in uvec4s: ql 8 per super-block, then qh 4, scales 1, d
// (2 bytes each, 8 per uvec4)
void load_w(uint s, uint h, uint row0) {
    const uint tid = gl_LocalInvocationID.x, r4s = pc.row_u16 >> 3, nb = pc.n_in / 256u;
    [[unroll]] for (uint u = 0u; u < W_PT; u++) {
        const uint idx = tid + u * NT, m = idx / (BM * 2u), rl = (idx / 2u) % BM, lq = idx % 2u;
        const uint base = min(row0 + rl, pc.n_rows - 1u) * r4s; // rows past the end: never stored
        wr[u].qa = wload4(m, base + s * 8u + 4u * h + lq);
        wr[u].qb = wload4(m, base + s * 8u + 4u * h + 2u + lq);
        wr[u].qh = wload4(m, base + nb * 8u + s * 4u + 2u * h + lq);
        if (h == 0u && lq == 0u) {
            wr[u].sc = wload4(m, base + nb * 12u + s);
            wr[u].d = wload4(m, base + nb * 13u + s / 8u)[(s % 8u) / 2u] >> (16u * (s % 2u));
        }
    }
}
#else
void load_w(uint s, uint h, uint row0) {
    const uint tid = gl_LocalInvocationID.x, r4s = pc.row_u16 >> 3;
    [[unroll]] for (uint u = 0u; u < W_PT; u++) {
        const uint idx = tid + u * NT, m = idx / (BM * 4u), rl = (idx / 4u) % BM, l = 4u * h + idx % 4u;
        const uint base = min(row0 + rl, pc.n_rows - 1u) * r4s + s * 9u; // rows past the end: never stored
        const bool hdr = h == 0u && idx % 4u == 0u; // the header, by one thread per row
#ifdef GEGLU
        if (m == 1u) {
            if (hdr) wr[u].hdr = wb4[base];
            wr[u].q = wb4[base + 1u + l];
            continue;
        }
#endif
        if (hdr) wr[u].hdr = wa4[base];
        wr[u].q = wa4[base + 1u + l];
    }
}
#endif

// A block's multiplier t from its meta vector (x8.glsl: d t, .., .., d);
// 0 for a zero unit (and the zero blocks past the tokens).
uint x8_t(vec4 m) { return m.w != 0.0 ? uint(round(m.x / m.w)) : 0u; }

// one 32-element block per thread: token tid / 4, sub-block 4h + tid % 4
void load_x(uint s, uint h, uint col0, uint n) {
    const uint tid = gl_LocalInvocationID.x, t = tid / 4u;
    if (t < BN && col0 + t < n) {
        const uint xb = pc.x_off + (col0 + t) * pc.x_stride + (s * 8u + 4u * h + tid % 4u) * 3u;
        xr.q0 = xq4[xb];
        xr.q1 = xq4[xb + 1u];
        xr.m = xm4[xb + 2u];
    } else {
        xr.q0 = uvec4(0u);
        xr.q1 = uvec4(0u);
        xr.m = vec4(0.0);
    }
}

#ifdef Q6K
// 4 bytes of 6-bit values v -> v - 32 as signed bytes: bit 5 flipped, then
// copied into bits 6 and 7 (0x20 * 6 = 0xC0: no carry between bytes)
uint q6_signed(uint v) {
    const uint w = v ^ 0x20202020u;
    return w | ((w & 0x20202020u) * 6u);
}

// registers -> shared (the element 32q + l of the half from ql byte l + 32
// (q & 1), nibble q >> 1, and bits 2q of qh byte l); scales and d at h = 0
void store_half(uint s, uint slot, uint h, bool last, uint col0, uint n) {
    const uint tid = gl_LocalInvocationID.x;
    load_x(s, h, col0, n);
    [[unroll]] for (uint u = 0u; u < W_PT; u++) {
        const uint idx = tid + u * NT, m = idx / (BM * 2u), rl = (idx / 2u) % BM, lq = idx % 2u;
        const uint mr = m * BM + rl, o = mr * LDA + 4u * lq;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            const uint a = wr[u].qa[c], b = wr[u].qb[c], hb = wr[u].qh[c];
            sa[o + c] = q6_signed((a & 0x0F0F0F0Fu) | ((hb << 4) & 0x30303030u));
            sa[o + 8u + c] = q6_signed((b & 0x0F0F0F0Fu) | ((hb << 2) & 0x30303030u));
            sa[o + 16u + c] = q6_signed(((a >> 4) & 0x0F0F0F0Fu) | (hb & 0x30303030u));
            sa[o + 24u + c] = q6_signed(((b >> 4) & 0x0F0F0F0Fu) | ((hb >> 2) & 0x30303030u));
        }
        if (h == 0u && lq == 0u) {
            [[unroll]] for (uint j = 0u; j < 16u; j++)
                ssc[mr * 16u + j] = bitfieldExtract(int(wr[u].sc[j / 4u]), int(8u * (j % 4u)), 8);
            sdw[mr] = unpackHalf2x16(wr[u].d).x;
        }
    }
    if (tid >= BN * 4u) return;
    const uint t = tid / 4u, lj = tid % 4u, o = t * LDX + lj * 12u;
    sx[o] = xr.q0.x;
    sx[o + 1u] = xr.q0.y;
    sx[o + 2u] = xr.q0.z;
    sx[o + 3u] = xr.q0.w;
    sx[o + 8u] = xr.q1.x;
    sx[o + 9u] = xr.q1.y;
    sx[o + 10u] = xr.q1.z;
    sx[o + 11u] = xr.q1.w;
    sx[t * LDX + TX + lj] = x8_t(xr.m);
    if (h == 0u && lj == 0u) sdx[t] = xr.m.w;
}
#else
// registers -> shared; the per-super-block values at h = 0 (their 16-wide
// tables take slot * 8 + j, slot = the step's parity within the split; the
// second slot is zeroed when the last step has none)
void store_half(uint s, uint slot, uint h, bool last, uint col0, uint n) {
    const uint tid = gl_LocalInvocationID.x;
    load_x(s, h, col0, n);
    [[unroll]] for (uint u = 0u; u < W_PT; u++) {
        const uint idx = tid + u * NT, m = idx / (BM * 4u), rl = (idx / 4u) % BM, l = 4u * h + idx % 4u;
        const uint mr = m * BM + rl;
        // 16 quant bytes l: low nibbles = sub-block 2 (l / 2), high = 2 (l / 2) + 1,
        // elements 16 (l % 2) ..; local to the half: sub-blocks 2 (l / 2) - 4h ..
        const uint k = (2u * (l / 2u) - 4u * h) * 32u + (l % 2u) * 16u;
        const uint o = mr * LDA + k / 4u;
        const uvec4 q = wr[u].q;
        sa[o] = q.x & 0x0F0F0F0Fu;
        sa[o + 1u] = q.y & 0x0F0F0F0Fu;
        sa[o + 2u] = q.z & 0x0F0F0F0Fu;
        sa[o + 3u] = q.w & 0x0F0F0F0Fu;
        sa[o + 8u] = (q.x >> 4) & 0x0F0F0F0Fu;
        sa[o + 9u] = (q.y >> 4) & 0x0F0F0F0Fu;
        sa[o + 10u] = (q.z >> 4) & 0x0F0F0F0Fu;
        sa[o + 11u] = (q.w >> 4) & 0x0F0F0F0Fu;
        if (h == 0u && idx % 4u == 0u) {
            // header: d, dmin (f16), 12 bytes of 6-bit scales and minima
            const uvec4 hd = wr[u].hdr;
            const vec2 dd = unpackHalf2x16(hd.x);
            const uint sc_lo = hd.y & 0x3F3F3F3Fu, mn_lo = hd.z & 0x3F3F3F3Fu;
            const uint sc_hi = (hd.w & 0x0F0F0F0Fu) | (((hd.y >> 6) & 0x03030303u) << 4);
            const uint mn_hi = ((hd.w >> 4) & 0x0F0F0F0Fu) | (((hd.z >> 6) & 0x03030303u) << 4);
#ifdef WIDE
            ssc[mr * 2u] = sc_lo;
            ssc[mr * 2u + 1u] = sc_hi;
#else
            [[unroll]] for (uint j = 0u; j < 4u; j++) {
                ssc[mr * 8u + j] = int((sc_lo >> (8u * j)) & 0xFFu);
                ssc[mr * 8u + 4u + j] = int((sc_hi >> (8u * j)) & 0xFFu);
            }
#endif
            sdw[mr] = dd.x;
            const uint mo = mr * 16u + slot * 8u;
            [[unroll]] for (uint j = 0u; j < 4u; j++) {
                smin[mo + j] = float16_t(-64.0 * dd.y * float((mn_lo >> (8u * j)) & 0xFFu));
                smin[mo + 4u + j] = float16_t(-64.0 * dd.y * float((mn_hi >> (8u * j)) & 0xFFu));
            }
            if (last && slot == 0u)
                [[unroll]] for (uint j = 8u; j < 16u; j++) smin[mr * 16u + j] = float16_t(0.0);
        }
    }
    if (tid >= BN * 4u) return;
    const uint t = tid / 4u, lj = tid % 4u, o = t * LDA + lj * 8u;
    sx[o] = xr.q0.x;
    sx[o + 1u] = xr.q0.y;
    sx[o + 2u] = xr.q0.z;
    sx[o + 3u] = xr.q0.w;
    sx[o + 4u] = xr.q1.x;
    sx[o + 5u] = xr.q1.y;
    sx[o + 6u] = xr.q1.z;
    sx[o + 7u] = xr.q1.w;
    sx[t * LDX + TX + lj] = x8_t(xr.m);
    if (h == 0u && lj == 0u) sdx[t] = xr.m.w;
    ssum[t * 16u + slot * 8u + 4u * h + lj] = float16_t((xr.m.y + xr.m.z) * (1.0 / 64.0));
    if (last && slot == 0u && h == 1u)
        [[unroll]] for (uint j = 0u; j < 2u; j++) ssum[t * 16u + 8u + 2u * lj + j] = float16_t(0.0);
}
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x, warp = gl_SubgroupID;
    // the grid: x the token tile (and split), y the row group, so the
    // workgroups of one row group run side by side and share its weights in
    // L2
    const uint row0 = gl_WorkGroupID.y * BM;
    const uint ty = gl_WorkGroupID.x;
    const uint n = step_rows(pc.rows_sel);
    const uint split = ty % pc.n_split;
    const uint col0 = ty / pc.n_split * BN;
    if (row0 >= pc.n_rows || col0 >= n) return; // uniform
    const uint wm = warp % WGM, wn = warp / WGM;
    const uint s_begin = split * pc.split_steps; // the host gives every split a step
    const uint n_steps = min(pc.n_in / 256u, s_begin + pc.split_steps);

    // which (row, token) of a 16 x 8 fragment each element holds
    if (tid < 16u * CM_N) {
        sidx_i[tid] = int(tid);
        sidx_f[tid] = float(tid);
    }
#ifdef Q6K
    for (uint i = tid; i < BN * 4u; i += NT)
        [[unroll]] for (uint k = 4u; k < 8u; k++) sx[(i / 4u) * LDX + (i % 4u) * 12u + k] = 0u;
#endif
    barrier();
    ICM_C idx_i;
    FCM_C idx_f;
    CM_LOAD(idx_i, sidx_i, 0u, CM_N, CM_ROW_MAJOR);
    CM_LOAD(idx_f, sidx_f, 0u, CM_N, CM_ROW_MAJOR);
    uint ri[8], ci[8], rf[8], cf[8]; // (8: a fragment's elements per invocation, at most)
    for (int e = 0; e < idx_i.length(); e++) {
        ri[e] = uint(idx_i[e]) / CM_N;
        ci[e] = uint(idx_i[e]) % CM_N;
    }
    for (int e = 0; e < idx_f.length(); e++) {
        rf[e] = uint(idx_f[e]) / CM_N;
        cf[e] = uint(idx_f[e]) % CM_N;
    }

    FCM_C acc[NM][FRM][FRN];
    ICM_C isb[NM][FRM][FRN];
    [[unroll]] for (uint m = 0u; m < NM; m++)
        [[unroll]] for (uint i = 0u; i < FRM; i++)
            [[unroll]] for (uint j = 0u; j < FRN; j++) {
                acc[m][i][j] = FCM_C(0.0);
                isb[m][i][j] = ICM_C(0);
            }

    load_w(s_begin, 0u, row0);
    for (uint s = s_begin; s < n_steps; s++) {
        const bool last = s + 1u == n_steps;
        for (uint h = 0u; h < 2u; h++) {
            store_half(s, (s - s_begin) & 1u, h, last, col0, n);
            barrier();
            if (h == 0u) load_w(s, 1u, row0);
            else if (!last) load_w(s + 1u, 0u, row0);
#ifdef Q6K
            [[unroll]] for (uint lj = 0u; lj < 4u; lj++) {
                const uint j = 8u * h + 2u * lj; // the scales of elements 0-15 and 16-31
                ICM_B b0[FRN];
                ICM_B b1[FRN]; // (one type per declaration: glslang 13 gives a KHR list's second name another)
                int tx[FRN][8]; // the sub-block's t for this invocation's tokens
                [[unroll]] for (uint f = 0u; f < FRN; f++) {
                    CM_LOAD(b0[f], sx, (wn * WN + f * CM_N) * LDX + lj * 12u, LDX, CM_COL_MAJOR);
                    CM_LOAD(b1[f], sx, (wn * WN + f * CM_N) * LDX + lj * 12u + 4u, LDX, CM_COL_MAJOR);
                    for (int e = 0; e < idx_i.length(); e++)
                        tx[f][e] = int(sx[(wn * WN + f * CM_N + ci[e]) * LDX + TX + lj]);
                }
                [[unroll]] for (uint m = 0u; m < NM; m++)
                    [[unroll]] for (uint i = 0u; i < FRM; i++) {
                        ICM_A a;
                        CM_LOAD(a, sa, (m * BM + wm * SR + i * 16u) * LDA + lj * 8u, LDA, CM_ROW_MAJOR);
                        int sc0[8], sc1[8];
                        for (int e = 0; e < idx_i.length(); e++) {
                            sc0[e] = SCALE(m * BM + wm * SR + i * 16u + ri[e], j);
                            sc1[e] = SCALE(m * BM + wm * SR + i * 16u + ri[e], j + 1u);
                        }
                        [[unroll]] for (uint f = 0u; f < FRN; f++) {
                            ICM_C p0 = CM_MULADD(a, b0[f], ICM_C(0));
                            ICM_C p1 = CM_MULADD(a, b1[f], ICM_C(0));
                            for (int e = 0; e < p0.length(); e++)
                                isb[m][i][f][e] += (sc0[e] * p0[e] + sc1[e] * p1[e]) * tx[f][e];
                        }
                    }
            }
#else
            [[unroll]] for (uint lj = 0u; lj < 4u; lj++) {
                const uint j = 4u * h + lj;
                ICM_B b[FRN];
                int tx[FRN][8]; // the sub-block's t for this invocation's tokens
                [[unroll]] for (uint f = 0u; f < FRN; f++) {
                    CM_LOAD(b[f], sx, (wn * WN + f * CM_N) * LDA + lj * 8u, LDA, CM_COL_MAJOR);
                    for (int e = 0; e < idx_i.length(); e++)
                        tx[f][e] = int(sx[(wn * WN + f * CM_N + ci[e]) * LDA + TX + lj]);
                }
                [[unroll]] for (uint m = 0u; m < NM; m++)
                    [[unroll]] for (uint i = 0u; i < FRM; i++) {
                        ICM_A a;
                        CM_LOAD(a, sa, (m * BM + wm * SR + i * 16u) * LDA + lj * 8u, LDA, CM_ROW_MAJOR);
                        int sc[8]; // the scales of this invocation's rows
                        for (int e = 0; e < idx_i.length(); e++) sc[e] = SCALE(m * BM + wm * SR + i * 16u + ri[e], j);
                        [[unroll]] for (uint f = 0u; f < FRN; f++) {
                            ICM_C p = CM_MULADD(a, b[f], ICM_C(0));
                            for (int e = 0; e < p.length(); e++)
                                isb[m][i][f][e] += sc[e] * p[e] * tx[f][e];
                        }
                    }
            }
#endif
            if (h == 1u) {
                // the super-block's integer sums times d dx
                [[unroll]] for (uint m = 0u; m < NM; m++)
                    [[unroll]] for (uint i = 0u; i < FRM; i++)
                        [[unroll]] for (uint f = 0u; f < FRN; f++) {
                            FCM_C v = FCM_C(isb[m][i][f]);
                            for (int e = 0; e < v.length(); e++)
                                acc[m][i][f][e] += sdw[m * BM + wm * SR + i * 16u + rf[e]] *
                                                   sdx[wn * WN + f * CM_N + cf[e]] * v[e];
                            isb[m][i][f] = ICM_C(0);
                        }
#ifndef Q6K
                // the minima of two super-blocks (or of the last one)
                if (((s - s_begin) & 1u) == 1u || last) {
                    CM_B bs[FRN];
                    [[unroll]] for (uint f = 0u; f < FRN; f++)
                        CM_LOAD(bs[f], ssum, (wn * WN + f * CM_N) * 16u, 16u, CM_COL_MAJOR);
                    [[unroll]] for (uint m = 0u; m < NM; m++)
                        [[unroll]] for (uint i = 0u; i < FRM; i++) {
                            CM_A am;
                            CM_LOAD(am, smin, (m * BM + wm * SR + i * 16u) * 16u, 16u, CM_ROW_MAJOR);
                            [[unroll]] for (uint f = 0u; f < FRN; f++)
                                acc[m][i][f] = CM_MULADD(am, bs[f], acc[m][i][f]);
                        }
                }
#endif
            }
            barrier();
        }
    }

    // epilogue (cm_store.glsl)
    const uint y_base = pc.y_off + split * pc.split_stride;
    const bool direct_ok = ((y_base + pc.y_row0) & 3u) == 0u && (pc.y_stride & 3u) == 0u;
#ifdef GEGLU
    const uint n_out = pc.n_split > 1u ? 2u : 1u; // split: both raw sums
#else
    const uint n_out = 1u;
#endif
    for (uint o = 0u; o < n_out; o++) {
        const uint yb = y_base + o * pc.geglu_off;
        [[unroll]] for (uint i = 0u; i < FRM; i++)
            [[unroll]] for (uint j = 0u; j < FRN; j++) {
                FCM_C r_acc = acc[0][i][j];
#ifdef GEGLU
                if (pc.n_split == 1u)
                    for (int e = 0; e < r_acc.length(); e++) r_acc[e] = gelu_tanh(r_acc[e]) * acc[1][i][j][e];
                else if (o == 1u)
                    r_acc = acc[1][i][j];
#endif
                cm_store(r_acc, row0 + wm * SR + i * 16u, col0 + wn * WN + j * CM_N, yb, n, direct_ok);
            }
    }
}
