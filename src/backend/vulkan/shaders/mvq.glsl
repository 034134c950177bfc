// Items of a weight row for mv.comp: 128-bit loads of the quantized bytes,
// decoded in registers and dotted with f32 activations (vec4 loads).
// Include once per weight binding after defining
//   W4    the uvec4 array of the binding, W16 the uint16_t array of the same
//   FN(x) the name of the function to define, e.g. x##_a
// Defines
//   FN(load)(uint r4, uint r16, uint it, uint n_in) -> ITEM   item it of the row
//       whose first byte is uvec4 r4 (= 16-bit word r16)
//   FN(dot)(ITEM w, uint it, uint xb) -> float    item . x, x starting at
//       vec4 xb of the activations (element 0 of the row); with MV_X8, x is
//       int8 blocks (quant_x8.comp) starting at uvec4 xb of xq4 / xm4, and
//       DOT4(a, b) is the packed signed 4 x 8-bit dot product
// and, once, MV_ITEMS(n_in): items per row. Layouts: vk_internal.h (Q8_0 and
// Q6_K rows repacked, every row 16-byte aligned).

#ifndef MV_U2F_DEFINED
#define MV_U2F_DEFINED
// Small unsigned integers (< 2^23) to float without a conversion instruction
// (quarter rate or slower on GPUs): 2^23 + u as float bits, minus 2^23, exact.
vec4 u2f(uvec4 u) { return uintBitsToFloat(u | 0x4B000000u) - 8388608.0; }
// Bytes as int8 (two's complement) the same way: (u ^ 0x80) - 128.
vec4 s8f(uvec4 u) { return uintBitsToFloat((u ^ 0x80u) | 0x4B000000u) - 8388736.0; }
#ifdef MV_X8
// Bit i of v (i < 4) to bit 0 of byte i: the products v * 2^(7i) land on
// distinct bits, so nothing carries.
uint spread4(uint v) { return (v * 0x00204081u) & 0x01010101u; }
// Sum of x over 16 elements of an int8 block: half h of its meta vector.
float x8_half_sum(vec4 m, uint h) { return h == 0u ? m.y : m.z; }
#endif
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
// Q4_K / Q5_K block headers: the 6-bit scale and min of sub-block s (byte
// u = s & 3 of each scale word): scales[0..3] = h.y, [4..7] = h.z,
// [8..11] = h.w. No dynamic vector indexing (it would put the header in
// local memory on some compilers).
uvec2 q4k_scale_min(uvec4 h, uint s) {
    const uint sh = (s & 3u) * 8u;
    const uint a = (h.y >> sh) & 0xFFu, b = (h.z >> sh) & 0xFFu, c = (h.w >> sh) & 0xFFu;
    return s < 4u ? uvec2(a & 63u, b & 63u) : uvec2((c & 0xFu) | ((a >> 6) << 4), (c >> 4) | ((b >> 6) << 4));
}
#endif
#endif

#if defined(TYPE_Q4_K)
// item = 1/8 of a block: 16 bytes of qs = 32 weights, two runs of 16
// (sub-blocks 2j and 2j+1 of the block, j = l / 2, offset 16 (l & 1)).
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 5)
struct ITEM { uvec4 q; vec4 dm; }; // dm = (d*sc0, dmin*m0, d*sc1, dmin*m1)
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    uint b = it >> 3, l = it & 7u, j = l >> 1;
    uvec4 h = W4[r4 + b * 9u];
    ITEM w;
    w.q = W4[r4 + b * 9u + 1u + l];
    vec2 dd = unpackHalf2x16(h.x);
    uvec2 a = q4k_scale_min(h, 2u * j), c = q4k_scale_min(h, 2u * j + 1u);
    w.dm = vec4(dd.x * float(a.x), dd.y * float(a.y), dd.x * float(c.x), dd.y * float(c.y));
    return w;
}
#ifdef MV_X8
// low run: half l & 1 of x block 8b + 2j, high run: the same half of 8b + 2j + 1
float FN(dot)(ITEM w, uint it, uint xb) {
    uint b = it >> 3, l = it & 7u, h = l & 1u;
    uint xl = xb + 3u * (b * 8u + (l >> 1) * 2u), xh = xl + 3u;
    uvec4 ql = xq4[xl + h], qh = xq4[xh + h];
    vec4 ml = xm4[xl + 2u], mh = xm4[xh + 2u];
    int il = 0, ih = 0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        il += DOT4(w.q[k] & 0x0F0F0F0Fu, ql[k]);
        ih += DOT4((w.q[k] >> 4) & 0x0F0F0F0Fu, qh[k]);
    }
    return (w.dm.x * ml.x * float(il) - w.dm.y * x8_half_sum(ml, h)) +
           (w.dm.z * mh.x * float(ih) - w.dm.w * x8_half_sum(mh, h));
}
#else
float FN(dot)(ITEM w, uint it, uint xb) {
    uint b = it >> 3, l = it & 7u;
    uint e = b * 64u + (l >> 1) * 16u + (l & 1u) * 4u; // in vec4 units
    float slo = 0.0, shi = 0.0, xlo = 0.0, xhi = 0.0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        vec4 xl = xs4[xb + e + k], xh = xs4[xb + e + 8u + k];
        uint v = w.q[k];
        slo += dot(u2f((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 0xFu), xl);
        shi += dot(u2f((uvec4(v) >> uvec4(4u, 12u, 20u, 28u)) & 0xFu), xh);
        xlo += (xl.x + xl.y) + (xl.z + xl.w);
        xhi += (xh.x + xh.y) + (xh.z + xh.w);
    }
    return (w.dm.x * slo - w.dm.y * xlo) + (w.dm.z * shi - w.dm.w * xhi);
}
#endif

#elif defined(TYPE_Q5_K)
// Block of 176 bytes (11 uvec4): header as Q4_K, qh[32], qs[128]. Item as
// Q4_K (16 bytes of qs, sub-blocks 2j and 2j+1), plus the 16 qh bytes of its
// elements: bit 2j (low run) and 2j+1 (high run) are the fifth bits.
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 5)
struct ITEM { uvec4 q; uvec4 qh; vec4 dm; };
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    uint b = it >> 3, l = it & 7u, j = l >> 1;
    uvec4 h = W4[r4 + b * 11u];
    ITEM w;
    w.qh = W4[r4 + b * 11u + 1u + (l & 1u)];
    w.q = W4[r4 + b * 11u + 3u + l];
    vec2 dd = unpackHalf2x16(h.x);
    uvec2 a = q4k_scale_min(h, 2u * j), c = q4k_scale_min(h, 2u * j + 1u);
    w.dm = vec4(dd.x * float(a.x), dd.y * float(a.y), dd.x * float(c.x), dd.y * float(c.y));
    return w;
}
#ifdef MV_X8
float FN(dot)(ITEM w, uint it, uint xb) {
    uint b = it >> 3, l = it & 7u, j = l >> 1, h = l & 1u;
    uint xl = xb + 3u * (b * 8u + j * 2u), xh = xl + 3u;
    uvec4 ql = xq4[xl + h], qh = xq4[xh + h];
    vec4 ml = xm4[xl + 2u], mh = xm4[xh + 2u];
    int il = 0, ih = 0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint lo = (w.q[k] & 0x0F0F0F0Fu) | (((w.qh[k] >> (2u * j)) & 0x01010101u) << 4);
        uint hi = ((w.q[k] >> 4) & 0x0F0F0F0Fu) | (((w.qh[k] >> (2u * j + 1u)) & 0x01010101u) << 4);
        il += DOT4(lo, ql[k]);
        ih += DOT4(hi, qh[k]);
    }
    return (w.dm.x * ml.x * float(il) - w.dm.y * x8_half_sum(ml, h)) +
           (w.dm.z * mh.x * float(ih) - w.dm.w * x8_half_sum(mh, h));
}
#else
float FN(dot)(ITEM w, uint it, uint xb) {
    uint b = it >> 3, l = it & 7u, j = l >> 1;
    uint e = b * 64u + j * 16u + (l & 1u) * 4u; // in vec4 units
    float slo = 0.0, shi = 0.0, xlo = 0.0, xhi = 0.0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        vec4 xl = xs4[xb + e + k], xh = xs4[xb + e + 8u + k];
        uvec4 v = uvec4(w.q[k]) >> uvec4(0u, 8u, 16u, 24u);
        uvec4 hb = uvec4(w.qh[k]) >> uvec4(0u, 8u, 16u, 24u);
        slo += dot(u2f((v & 0xFu) | (((hb >> (2u * j)) & 1u) << 4)), xl);
        shi += dot(u2f(((v >> 4) & 0xFu) | (((hb >> (2u * j + 1u)) & 1u) << 4)), xh);
        xlo += (xl.x + xl.y) + (xl.z + xl.w);
        xhi += (xh.x + xh.y) + (xh.z + xh.w);
    }
    return (w.dm.x * slo - w.dm.y * xlo) + (w.dm.z * shi - w.dm.w * xhi);
}
#endif

#elif defined(TYPE_Q6_K)
// item = 1/4 of a block: half n, lanes l = 16h .. 16h+15 of each of the 4
// quarter rows q: 64 weights at 128n + 32q + 16h + k.
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 6)
struct ITEM { uvec4 a, b, h; vec4 s; }; // s[q] = d * scale[8n + 2q + h]
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    uint nb = n_in >> 8;
    uint bl = it >> 2, n = (it >> 1) & 1u, hh = it & 1u;
    ITEM w;
    w.a = W4[r4 + bl * 8u + n * 4u + hh];
    w.b = W4[r4 + bl * 8u + n * 4u + 2u + hh];
    w.h = W4[r4 + nb * 8u + bl * 4u + n * 2u + hh];
    uvec4 sc = W4[r4 + nb * 12u + bl];
    float d = unpackHalf2x16(uint(W16[r16 + nb * 104u + bl])).x;
    // scale index 8n + 2q + hh: word 2n + (q >> 1), byte 2(q & 1) + hh
    uint w0 = n == 0u ? sc.x : sc.z, w1 = n == 0u ? sc.y : sc.w;
    w.s = d * vec4(float(bitfieldExtract(int(w0), int(8u * hh), 8)),
                   float(bitfieldExtract(int(w0), int(8u * (2u + hh)), 8)),
                   float(bitfieldExtract(int(w1), int(8u * hh), 8)),
                   float(bitfieldExtract(int(w1), int(8u * (2u + hh)), 8)));
    return w;
}
#ifdef MV_X8
// quarter q: half hh of x block 8bl + 4n + q
float FN(dot)(ITEM w, uint it, uint xb) {
    uint bl = it >> 2, n = (it >> 1) & 1u, hh = it & 1u;
    uint x0 = xb + 3u * (bl * 8u + n * 4u);
    uvec4 q0 = xq4[x0 + hh], q1 = xq4[x0 + 3u + hh], q2 = xq4[x0 + 6u + hh], q3 = xq4[x0 + 9u + hh];
    vec4 m0 = xm4[x0 + 2u], m1 = xm4[x0 + 5u], m2 = xm4[x0 + 8u], m3 = xm4[x0 + 11u];
    ivec4 s = ivec4(0);
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        s.x += DOT4((w.a[k] & 0x0F0F0F0Fu) | ((w.h[k] & 0x03030303u) << 4), q0[k]);
        s.y += DOT4((w.b[k] & 0x0F0F0F0Fu) | (((w.h[k] >> 2) & 0x03030303u) << 4), q1[k]);
        s.z += DOT4(((w.a[k] >> 4) & 0x0F0F0F0Fu) | (((w.h[k] >> 4) & 0x03030303u) << 4), q2[k]);
        s.w += DOT4(((w.b[k] >> 4) & 0x0F0F0F0Fu) | (((w.h[k] >> 6) & 0x03030303u) << 4), q3[k]);
    }
    vec4 d = vec4(m0.x, m1.x, m2.x, m3.x);
    vec4 sx = vec4(x8_half_sum(m0, hh), x8_half_sum(m1, hh), x8_half_sum(m2, hh), x8_half_sum(m3, hh));
    return dot(w.s, d * vec4(s) - 32.0 * sx);
}
#else
float FN(dot)(ITEM w, uint it, uint xb) {
    uint bl = it >> 2, n = (it >> 1) & 1u, hh = it & 1u;
    uint e = bl * 64u + n * 32u + hh * 4u; // vec4 units; quarter q adds 8q
    vec4 s = vec4(0.0), sx = vec4(0.0);
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        vec4 x0 = xs4[xb + e + k], x1 = xs4[xb + e + 8u + k];
        vec4 x2 = xs4[xb + e + 16u + k], x3 = xs4[xb + e + 24u + k];
        uvec4 qa = uvec4(w.a[k]) >> uvec4(0u, 8u, 16u, 24u);
        uvec4 qb = uvec4(w.b[k]) >> uvec4(0u, 8u, 16u, 24u);
        uvec4 qh = uvec4(w.h[k]) >> uvec4(0u, 8u, 16u, 24u);
        s.x += dot(u2f((qa & 0xFu) | ((qh & 3u) << 4)), x0);
        s.y += dot(u2f((qb & 0xFu) | (((qh >> 2) & 3u) << 4)), x1);
        s.z += dot(u2f(((qa >> 4) & 0xFu) | (((qh >> 4) & 3u) << 4)), x2);
        s.w += dot(u2f(((qb >> 4) & 0xFu) | (((qh >> 6) & 3u) << 4)), x3);
        sx += vec4(dot(x0, vec4(1.0)), dot(x1, vec4(1.0)), dot(x2, vec4(1.0)), dot(x3, vec4(1.0)));
    }
    return dot(w.s, s - 32.0 * sx);
}
#endif

#elif defined(TYPE_Q8_0)
// item = one block: 32 int8 (two uvec4) and its f16 scale.
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 5)
struct ITEM { uvec4 a, b; float d; };
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    ITEM w;
    w.a = W4[r4 + 2u * it];
    w.b = W4[r4 + 2u * it + 1u];
    w.d = unpackHalf2x16(uint(W16[r16 + (n_in >> 1) + it])).x;
    return w;
}
#ifdef MV_X8
float FN(dot)(ITEM w, uint it, uint xb) {
    uint x0 = xb + 3u * it;
    uvec4 qa = xq4[x0], qb = xq4[x0 + 1u];
    int s = 0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) s += DOT4(w.a[k], qa[k]) + DOT4(w.b[k], qb[k]);
    return w.d * xm4[x0 + 2u].x * float(s);
}
#else
float FN(dot)(ITEM w, uint it, uint xb) {
    uint e = it * 8u;
    float s = 0.0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        s += dot(s8f((uvec4(w.a[k]) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu), xs4[xb + e + k]);
        s += dot(s8f((uvec4(w.b[k]) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu), xs4[xb + e + 4u + k]);
    }
    return w.d * s;
}
#endif

#elif defined(TYPE_Q4_0) || defined(TYPE_Q5_0)
// item = one block: 16 bytes of nibbles (element j: low nibble of byte j,
// element j + 16: high nibble), [32 high bits], f16 scale.
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 5)
struct ITEM { uvec4 q; uint h; float d; };
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    uint nb = n_in >> 5;
    ITEM w;
    w.q = W4[r4 + it];
#if defined(TYPE_Q4_0)
    w.h = 0u;
    w.d = unpackHalf2x16(uint(W16[r16 + nb * 8u + it])).x;
#else
    w.h = uint(W16[r16 + nb * 8u + it * 2u]) | (uint(W16[r16 + nb * 8u + it * 2u + 1u]) << 16);
    w.d = unpackHalf2x16(uint(W16[r16 + nb * 10u + it])).x;
#endif
    return w;
}
#ifdef MV_X8
// elements 0..15 (low nibbles): half 0 of x block it, 16..31: half 1
float FN(dot)(ITEM w, uint it, uint xb) {
    uint x0 = xb + 3u * it;
    uvec4 ql = xq4[x0], qh = xq4[x0 + 1u];
    vec4 m = xm4[x0 + 2u];
    int s = 0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint lo = w.q[k] & 0x0F0F0F0Fu, hi = (w.q[k] >> 4) & 0x0F0F0F0Fu;
#if defined(TYPE_Q5_0)
        lo |= spread4((w.h >> (4u * k)) & 0xFu) << 4;
        hi |= spread4((w.h >> (16u + 4u * k)) & 0xFu) << 4;
#endif
        s += DOT4(lo, ql[k]) + DOT4(hi, qh[k]);
    }
#if defined(TYPE_Q4_0)
    return w.d * (m.x * float(s) - 8.0 * (m.y + m.z));
#else
    return w.d * (m.x * float(s) - 16.0 * (m.y + m.z));
#endif
}
#else
float FN(dot)(ITEM w, uint it, uint xb) {
    uint e = it * 8u;
    float s = 0.0, sx = 0.0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        vec4 xl = xs4[xb + e + k], xh = xs4[xb + e + 4u + k];
        uvec4 lo = (uvec4(w.q[k]) >> uvec4(0u, 8u, 16u, 24u)) & 0xFu;
        uvec4 hi = (uvec4(w.q[k]) >> uvec4(4u, 12u, 20u, 28u)) & 0xFu;
#if defined(TYPE_Q5_0)
        lo |= ((uvec4(w.h) >> (uvec4(0u, 1u, 2u, 3u) + 4u * k)) & 1u) << 4;
        hi |= ((uvec4(w.h) >> (uvec4(16u, 17u, 18u, 19u) + 4u * k)) & 1u) << 4;
#endif
        s += dot(u2f(lo), xl) + dot(u2f(hi), xh);
        sx += dot(xl + xh, vec4(1.0));
    }
#if defined(TYPE_Q4_0)
    return w.d * (s - 8.0 * sx);
#else
    return w.d * (s - 16.0 * sx);
#endif
}
#endif

#elif defined(TYPE_F16) || defined(TYPE_BF16)
// item = 8 weights (one uvec4)
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 3)
struct ITEM { uvec4 a; };
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    ITEM w;
    w.a = W4[r4 + it];
    return w;
}
float FN(dot)(ITEM w, uint it, uint xb) {
#if defined(TYPE_F16)
    vec4 lo = vec4(unpackHalf2x16(w.a.x), unpackHalf2x16(w.a.y));
    vec4 hi = vec4(unpackHalf2x16(w.a.z), unpackHalf2x16(w.a.w));
#else
    vec4 lo = uintBitsToFloat(uvec4(w.a.x << 16, w.a.x & 0xFFFF0000u, w.a.y << 16, w.a.y & 0xFFFF0000u));
    vec4 hi = uintBitsToFloat(uvec4(w.a.z << 16, w.a.z & 0xFFFF0000u, w.a.w << 16, w.a.w & 0xFFFF0000u));
#endif
    return dot(lo, xs4[xb + 2u * it]) + dot(hi, xs4[xb + 2u * it + 1u]);
}

#elif defined(TYPE_F32)
// item = 8 weights (two uvec4)
#ifndef MV_ITEM_DEFINED
#define MV_ITEM_DEFINED
#define MV_ITEMS(n) ((n) >> 3)
struct ITEM { uvec4 a, b; };
#endif
ITEM FN(load)(uint r4, uint r16, uint it, uint n_in) {
    ITEM w;
    w.a = W4[r4 + 2u * it];
    w.b = W4[r4 + 2u * it + 1u];
    return w;
}
float FN(dot)(ITEM w, uint it, uint xb) {
    return dot(uintBitsToFloat(w.a), xs4[xb + 2u * it]) + dot(uintBitsToFloat(w.b), xs4[xb + 2u * it + 1u]);
}

#else
#error "mv.comp: no fast path for this type"
#endif
