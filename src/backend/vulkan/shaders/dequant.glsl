// Dequantization of 8 consecutive weights of a row, for one weight type.
// Include once per weight binding after defining
//   W16   the uint16_t array of the binding
//   W32   a float array aliasing the same binding (read by TYPE_F32)
//   FN(x) the name of the function to define, e.g. x##_a
// Defines: void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi)
//   base  index (in 16-bit units) of the row's first byte in the binding
//   g     group: the row elements 8g .. 8g+7
//   n_in  row length; float types return 0 for elements >= n_in
// Block layouts are ggml's (see src/quant/quant.h); every block size is even,
// so blocks are reached through 16-bit loads. The arithmetic is the
// reference's: (d * scale) * q - (dmin * m).

#if defined(TYPE_F32)
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
    uint e = g * 8u;
    uint b = (base >> 1) + e;
    if (e + 8u <= n_in) {
        lo = vec4(W32[b], W32[b + 1u], W32[b + 2u], W32[b + 3u]);
        hi = vec4(W32[b + 4u], W32[b + 5u], W32[b + 6u], W32[b + 7u]);
    } else {
        float v[8];
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = e + k < n_in ? W32[b + k] : 0.0;
        lo = vec4(v[0], v[1], v[2], v[3]);
        hi = vec4(v[4], v[5], v[6], v[7]);
    }
}
#elif defined(TYPE_F16) || defined(TYPE_BF16)
float FN(cvt)(uint h) {
#if defined(TYPE_F16)
    return unpackHalf2x16(h).x;
#else
    return uintBitsToFloat(h << 16);
#endif
}
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
    uint e = g * 8u;
    uint b = base + e;
    float v[8];
    if (e + 8u <= n_in) {
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = FN(cvt)(uint(W16[b + k]));
    } else {
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = e + k < n_in ? FN(cvt)(uint(W16[b + k])) : 0.0;
    }
    lo = vec4(v[0], v[1], v[2], v[3]);
    hi = vec4(v[4], v[5], v[6], v[7]);
}
#elif defined(TYPE_Q8_0)
// Repacked row (vk_internal.h): [qs: n_in int8][d: n_in/32 f16]
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
    float d = h2f(uint(W16[base + (n_in >> 1) + (g >> 2)]));
    uint q = base + g * 4u;
    int a = int(uint(W16[q])), b = int(uint(W16[q + 1u]));
    int c = int(uint(W16[q + 2u])), e = int(uint(W16[q + 3u]));
    lo = vec4(float(bitfieldExtract(a, 0, 8)), float(bitfieldExtract(a, 8, 8)),
              float(bitfieldExtract(b, 0, 8)), float(bitfieldExtract(b, 8, 8))) * d;
    hi = vec4(float(bitfieldExtract(c, 0, 8)), float(bitfieldExtract(c, 8, 8)),
              float(bitfieldExtract(e, 0, 8)), float(bitfieldExtract(e, 8, 8))) * d;
}
#elif defined(TYPE_Q4_0) || defined(TYPE_Q5_0)
// Repacked rows (vk_internal.h), nb = n_in / 32 blocks:
//   Q4_0: [qs: 16 nb][d: nb f16]              q = nibble - 8
//   Q5_0: [qs: 16 nb][qh: 4 nb][d: nb f16]    q = (nibble | bit e of qh << 4) - 16
// Element j < 16 of a block is the low nibble of qs[j], element j + 16 the high nibble.
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
    uint nb = n_in >> 5, b = g >> 2, sub = g & 3u;
    uint q = base + b * 8u + (sub & 1u) * 4u;
#if defined(TYPE_Q4_0)
    float d = h2f(uint(W16[base + nb * 8u + b]));
#else
    float d = h2f(uint(W16[base + nb * 10u + b]));
    uint qhi = base + nb * 8u + b * 2u;
    uint qh = (uint(W16[qhi]) | (uint(W16[qhi + 1u]) << 16)) >> (sub * 8u);
#endif
    uint sh = (sub >> 1) * 4u;
    float v[8];
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint w = uint(W16[q + k]);
        uint n0 = (w >> sh) & 0xFu, n1 = (w >> (8u + sh)) & 0xFu;
#if defined(TYPE_Q4_0)
        v[2u * k] = float(int(n0) - 8) * d;
        v[2u * k + 1u] = float(int(n1) - 8) * d;
#else
        v[2u * k] = float(int(n0 | (((qh >> (2u * k)) & 1u) << 4)) - 16) * d;
        v[2u * k + 1u] = float(int(n1 | (((qh >> (2u * k + 1u)) & 1u) << 4)) - 16) * d;
#endif
    }
    lo = vec4(v[0], v[1], v[2], v[3]);
    hi = vec4(v[4], v[5], v[6], v[7]);
}
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]               (144 bytes)
// Q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]    (176 bytes)
// 8 sub-blocks of 32 with 6-bit scale and min; sub-block sb uses the low
// (sb even) or high nibbles of qs[32*(sb/2) ..], and bit sb of qh[l].
uint FN(byte)(uint bb, uint i) { return (uint(W16[bb + (i >> 1)]) >> ((i & 1u) * 8u)) & 0xFFu; }
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
#if defined(TYPE_Q4_K)
    uint bb = base + (g >> 5) * 72u;
#else
    uint bb = base + (g >> 5) * 88u;
#endif
    uint gi = g & 31u;
    uint sb = gi >> 2;
    uint l0 = (gi & 3u) * 8u;
    float d = h2f(uint(W16[bb])), dmin = h2f(uint(W16[bb + 1u]));
    // scales start at byte 4
    uint sc, m;
    if (sb < 4u) {
        sc = FN(byte)(bb, 4u + sb) & 63u;
        m = FN(byte)(bb, 8u + sb) & 63u;
    } else {
        uint a = FN(byte)(bb, 8u + sb), b0 = FN(byte)(bb, sb), b1 = FN(byte)(bb, 4u + sb);
        sc = (a & 0xFu) | ((b0 >> 6) << 4);
        m = (a >> 4) | ((b1 >> 6) << 4);
    }
    float d1 = d * float(sc), m1 = dmin * float(m);
    uint sh = (sb & 1u) * 4u;
#if defined(TYPE_Q4_K)
    uint q = bb + 8u + (sb >> 1) * 16u + (l0 >> 1);
#else
    uint q = bb + 24u + (sb >> 1) * 16u + (l0 >> 1);
    uint qh = bb + 8u + (l0 >> 1);
#endif
    float v[8];
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint w = uint(W16[q + k]);
        uint n0 = (w >> sh) & 0xFu, n1 = (w >> (8u + sh)) & 0xFu;
#if defined(TYPE_Q5_K)
        uint h = uint(W16[qh + k]);
        n0 += ((h >> sb) & 1u) * 16u;
        n1 += ((h >> (8u + sb)) & 1u) * 16u;
#endif
        v[2u * k] = d1 * float(n0) - m1;
        v[2u * k + 1u] = d1 * float(n1) - m1;
    }
    lo = vec4(v[0], v[1], v[2], v[3]);
    hi = vec4(v[4], v[5], v[6], v[7]);
}
#elif defined(TYPE_Q6_K)
// Repacked row (vk_internal.h): [ql: 128 nb][qh: 64 nb][scales: 16 nb][d: nb f16].
// Element 128n + 32q + l of block b: ql[b][64n + l + 32(q&1)] nibble (q>>1),
// bits 2q of qh[b][32n + l], scale[b][8n + 2q + l/16]; value d * scale * (q6 - 32).
void FN(dq8)(uint base, uint g, uint n_in, out vec4 lo, out vec4 hi) {
    uint nb = n_in >> 8;
    uint b = g >> 5;
    uint e0 = (g & 31u) * 8u;
    uint n = e0 >> 7, qq = (e0 >> 5) & 3u, l0 = e0 & 31u;
    float d = h2f(uint(W16[base + nb * 104u + b]));
    uint si = nb * 192u + b * 16u + n * 8u + qq * 2u + (l0 >> 4);
    int sc = bitfieldExtract(int(uint(W16[base + (si >> 1)])), int((si & 1u) * 8u), 8);
    float ds = d * float(sc);
    uint ql = base + ((b * 128u + n * 64u + l0 + (qq & 1u) * 32u) >> 1);
    uint qh = base + ((nb * 128u + b * 64u + n * 32u + l0) >> 1);
    uint sh4 = (qq >> 1) * 4u, sh2 = qq * 2u;
    float v[8];
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint w = uint(W16[ql + k]), h = uint(W16[qh + k]);
        int q0 = int(((w >> sh4) & 0xFu) | (((h >> sh2) & 3u) << 4)) - 32;
        int q1 = int(((w >> (8u + sh4)) & 0xFu) | (((h >> (8u + sh2)) & 3u) << 4)) - 32;
        v[2u * k] = ds * float(q0);
        v[2u * k + 1u] = ds * float(q1);
    }
    lo = vec4(v[0], v[1], v[2], v[3]);
    hi = vec4(v[4], v[5], v[6], v[7]);
}
#else
#error "no TYPE_* defined"
#endif
