// The int8 activations of the int8 mat-vec (mv.comp with X8), quantized as
// the CPU backend quantizes them for the same weights, so both compute the
// same integer sums:
//   kind 0 (Q4_0, Q5_0, Q8_0 weights): blocks of 32, d = f16(amax / 127),
//          q = nearest_even(x * (127 / amax)) (ig_quantize_row_q8_0_act);
//   kind 1 (K-quants): units of 256, iscale = -127 / (the first value of
//          largest magnitude amax), d = (1 / iscale) / 8; per run of 32
//          with largest magnitude a, a multiplier t = 1 + #{k in 1..7 :
//          a > amax * k/8} and q = nearest_even(clamp(x * (iscale * 8/t),
//          -128, 127)), so x = d t q (ig_quantize_row_q8_K: the same
//          IEEE products, so the same bytes).
// Stored per 32 elements as 48 bytes (3 uvec4): [0], [1] the 32 q as bytes,
// [2] vec4(d t, d * (t (q0 + .. + q15)), d * (t (q16 + .. + q31)), d) (kind
// 0: t = 1); the half sums (the CPU's d * bsums) serve weights with an
// offset or a minimum (x . (s w - m) needs sum x); the unit's d and t =
// round(d t / d) serve the int8 tensor-core matmul (mmq.comp).
//
// The including shader defines the writeonly arrays q1 (uint) and qm4 (vec4)
// on the output binding. X8_NO_VEC4 leaves out x8_quant_vec4 and its 12 KiB
// of shared memory. X8_VALUE(i) (with X8_VALUES_MAX, the most values at
// once) brings x8_quant_values, for values that are not one per invocation.

// a / b correctly rounded, as the CPU divides. GPU division may be off by an
// ulp or two (which would move a q across a rounding tie now and then), and
// an fma refinement is not exact where fma is not fused (lavapipe). With
// a = A 2^(ea-150), b = B 2^(eb-150) and the hardware quotient q = Q
// 2^(eq-150) (A, B, Q the 24-bit significands), a - q b is R = A 2^s - Q B
// in units of 2^(eq+eb-300), s = ea - eb - eq + 150, and a / b - q is R / B
// ulps of q. Q is within a few ulps, so |R| < 2^26 and R is exact in 32-bit
// wrapping arithmetic (only the low words of A 2^s and Q B): q is right
// when |2R| < B (|4R| < B under a power of two, where the float below is
// half an ulp away), a tie at equality (to even), else it moves an ulp
// towards a / b and is checked again. Integer operations only, one pass as a rule
// (the earlier form compared 64-bit products with both midpoints).
float x8_div(float a, float b) {
    const float q = a / b;
    const uint ab = floatBitsToUint(abs(a)), bb = floatBitsToUint(abs(b));
    uint qb = floatBitsToUint(abs(q));
    const uint ea = ab >> 23, eb = bb >> 23;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) return q; // zeros, subnormals, inf, NaN
    const uint A = (ab & 0x7FFFFFu) | 0x800000u, B = (bb & 0x7FFFFFu) | 0x800000u;
    for (int k = 0; k < 4; k++) {
        const uint eq = qb >> 23;
        if (eq <= 1u || eq >= 254u) break;
        const int s = int(ea) - int(eb) - int(eq) + 150;
        if (s < 0 || s > 31) break; // cannot happen for a quotient within a few ulps
        const int R = int((A << uint(s)) - ((qb & 0x7FFFFFu) | 0x800000u) * B);
        if (abs(R) >= 0x10000000) break; // not within a few ulps: keep the hardware's
        // |R| against the half ulp on R's side: B / 2, or B / 4 below a
        // power of two (the float under it is half an ulp of q away)
        const int m = R < 0 && (qb & 0x7FFFFFu) == 0u ? 4 : 2, r = m * abs(R), Bi = int(B);
        if (r < Bi) break;                                              // q is the nearest
        if (r == Bi && (qb & 1u) == 0u) break;                          // a tie, q even
        qb = R > 0 ? qb + 1u : qb - 1u;                                 // (a tie with q odd too)
        if (r == Bi) break;
    }
    return (a < 0.0) != (b < 0.0) ? -uintBitsToFloat(qb) : uintBitsToFloat(qb);
}

uint x8_pack4(ivec4 v) {
    return (uint(v.x) & 0xFFu) | ((uint(v.y) & 0xFFu) << 8) | ((uint(v.z) & 0xFFu) << 16) | (uint(v.w) << 24);
}

// The multiplier s and the stored scale d of a block (kind 0) or unit
// (kind 1: iscale and (1 / iscale) / 8) from its largest magnitude amax and
// the first value mx of it.
void x8_scale(uint kind, float amax, float mx, out float s, out float d) {
    if (kind == 0u) {
        s = amax != 0.0 ? x8_div(127.0, amax) : 0.0;
        d = unpackHalf2x16(f2h_rne(x8_div(amax, 127.0))).x;
    } else {
        const bool zero = !(amax > 0.0) || isinf(amax);
        s = zero ? 0.0 : x8_div(-127.0, mx);
        d = zero ? 0.0 : x8_div(1.0, s) * 0.125;
    }
}

// Kind 1: the multiplier t of a run of 32 with largest magnitude a in a
// unit with amax, and s (the unit's iscale) made the run's: iscale * 8/t,
// 8/t as the nearest float (ig_q8k_mul's values, bit for bit). Kind 0:
// t = 1, s as it is.
uint x8_run(uint kind, float a, float amax, inout float s) {
    if (kind == 0u) return 1u;
    uint t = 1u;
    [[unroll]] for (uint k = 1u; k < 8u; k++) t += a > amax * (0.125 * float(k)) ? 1u : 0u;
    const uint m = t == 1u ? 0x41000000u : t == 2u ? 0x40800000u : t == 3u ? 0x402AAAABu : t == 4u ? 0x40000000u
                 : t == 5u ? 0x3FCCCCCDu : t == 6u ? 0x3FAAAAABu : t == 7u ? 0x3F924925u : 0x3F800000u;
    s = s * uintBitsToFloat(m);
    return t;
}

// The meta vector of a block of 32 (the unit's scale d, the run's t, the
// sums of its two halves' q).
vec4 x8_meta(float d, uint t, int lo, int hi) {
    return vec4(d * float(t), d * float(int(t) * lo), d * float(int(t) * hi), d);
}

// Four values quantized with multiplier s.
ivec4 x8_round4(vec4 v, float s, uint kind) {
    const vec4 w = v * s;
    if (kind == 0u)
        return ivec4(mix(mix(roundEven(w), vec4(127.0), greaterThanEqual(w, vec4(127.0))), vec4(-127.0),
                         not(greaterThan(w, vec4(-127.0)))));
    return ivec4(roundEven(clamp(w, -128.0, 127.0)));
}

#ifndef X8_NO_VEC4

// per invocation: the first value of largest magnitude of its 4 and its
// magnitude; per block of 32: the same; per invocation: the sum of its q
shared float x8_sh_abs[1024], x8_sh_val[1024];
shared float x8_sh_a8[128], x8_sh_m8[128];
shared int x8_sh_sum[1024];

// The first of largest magnitude among 8 shared entries, in order: the
// invocations' (first .. first + 7 of x8_sh_abs / x8_sh_val) or, with
// blocks, the blocks of 32's (x8_sh_a8 / x8_sh_m8).
void x8_first_max8(bool blocks, uint first, out float amax, out float mx) {
    amax = 0.0;
    mx = 0.0;
    for (uint l = 0u; l < 8u; l++) {
        const float a = blocks ? x8_sh_a8[first + l] : x8_sh_abs[first + l];
        if (a > amax) {
            amax = a;
            mx = blocks ? x8_sh_m8[first + l] : x8_sh_val[first + l];
        }
    }
}

// The blocks of a row held in registers, one vec4 per invocation: vec4 i of
// the row (live: inside it) is held by invocation i mod the local size, so
// a block of 32 is 8 consecutive invocations and a unit of 256 is 64 (the
// local size a multiple of 64, units aligned to it). Every invocation of
// the workgroup calls it (barriers). The largest magnitudes go through
// shared memory in two steps of 8, scanned in element order as the CPU
// scans them (the first value of largest magnitude wins), and each
// invocation quantizes and stores its own 4 values.
void x8_quant_vec4(vec4 v, uint i, bool live, uint kind, uint qrow) {
    const uint tid = gl_LocalInvocationID.x;
    // the first value of largest magnitude of the 4 (NaN never compares >)
    float amax = 0.0, mx = 0.0;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        if (live && abs(v[c]) > amax) {
            amax = abs(v[c]);
            mx = v[c];
        }
    }
    x8_sh_abs[tid] = amax;
    x8_sh_val[tid] = mx;
    barrier();
    x8_first_max8(false, tid & ~7u, amax, mx); // ... of the 8 invocations of its block of 32
    const float a32 = amax;
    if (kind != 0u) { // ... and of the 8 blocks of its unit of 256
        if ((tid & 7u) == 0u) {
            x8_sh_a8[tid >> 3] = amax;
            x8_sh_m8[tid >> 3] = mx;
        }
        barrier();
        x8_first_max8(true, (tid & ~63u) >> 3, amax, mx);
    }
    float s, d;
    x8_scale(kind, amax, mx, s, d);
    const uint t = x8_run(kind, a32, amax, s);
    const ivec4 q = x8_round4(v, s, kind);
    const uint qb = qrow + 3u * (i >> 3); // the block's three uvec4
    if (live) q1[4u * qb + (i & 7u)] = x8_pack4(q);
    x8_sh_sum[tid] = (q.x + q.y) + (q.z + q.w);
    barrier();
    if (live && (tid & 7u) == 0u) {
        const int lo = (x8_sh_sum[tid] + x8_sh_sum[tid + 1u]) + (x8_sh_sum[tid + 2u] + x8_sh_sum[tid + 3u]);
        const int hi = (x8_sh_sum[tid + 4u] + x8_sh_sum[tid + 5u]) + (x8_sh_sum[tid + 6u] + x8_sh_sum[tid + 7u]);
        qm4[qb + 2u] = x8_meta(d, t, lo, hi);
    }
    barrier(); // the shared arrays are free for the next call
}
#endif // X8_NO_VEC4

#ifdef X8_RV
// The blocks of a row held in registers, X8_RV vec4s per invocation (vec4
// i = i0 + tid + k * local size of the row in v[k]; i0 and the local size
// multiples of 64, n4 the row's vec4s, whole blocks), as x8_quant_vec4
// makes them, with subgroup shuffles rather than shared memory: the first
// value of largest magnitude of a block of 32 (8 invocations) in three
// exchanges, of a unit of 256 on through the subgroup and, where a
// subgroup holds less than a unit, two barriers for every k at once; the
// half sums likewise. No barrier at all for blocks of 32. Needs subgroups
// of at least 8 with shuffles (the host).
// (a, m, i) takes the lane's partner's entry where it is larger, or as
// large and first: the order of the scan in x8_quant_vec4.
void x8_first_max_xor(inout float a, inout float m, inout uint i, uint mask) {
    const float oa = subgroupShuffleXor(a, mask), om = subgroupShuffleXor(m, mask);
    const uint oi = subgroupShuffleXor(i, mask);
    if (oa > a || (oa == a && oi < i)) {
        a = oa;
        m = om;
        i = oi;
    }
}

shared float x8_sg_a[X8_RV * 128u], x8_sg_m[X8_RV * 128u]; // per (k, subgroup): local size / 8 subgroups at most
shared float x8_sg_s[X8_RV * 16u], x8_sg_d[X8_RV * 16u];   // per (k, unit): its multiplier and scale
shared float x8_sg_u[X8_RV * 16u];                          // ... and its largest magnitude

void x8_quant_vecs(vec4 v[X8_RV], uint i0, uint n4, uint kind, uint qrow) {
    const uint tid = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x, sg = gl_SubgroupSize;
    const uint span = kind != 0u ? min(64u, sg) : 8u; // lanes of one block or unit within a subgroup
    float amax[X8_RV], mx[X8_RV], a32[X8_RV]; // a32: of the block of 32 (kind 1: its run's t)
    [[unroll]] for (uint k = 0u; k < X8_RV; k++) {
        const bool live = i0 + tid + k * nt < n4;
        float a = 0.0, m = 0.0;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            if (live && abs(v[k][c]) > a) {
                a = abs(v[k][c]);
                m = v[k][c];
            }
        }
        uint at = tid;
        for (uint mask = 1u; mask < 8u; mask <<= 1) x8_first_max_xor(a, m, at, mask);
        a32[k] = a;
        for (uint mask = 8u; mask < span; mask <<= 1) x8_first_max_xor(a, m, at, mask);
        amax[k] = a;
        mx[k] = m;
    }
    // kind 1 where a unit spans 64 / sg subgroups: their results through
    // shared memory, and each unit's scale made once, by one lane of the
    // first subgroup (every lane making its own, the divisions cost 1.8 %
    // of 27B's decode on the H100)
    const bool shared_units = kind != 0u && sg < 64u;
    if (shared_units) {
        const uint nsg = gl_NumSubgroups, per = 64u / sg, upk = nt / 64u; // units per k
        if (subgroupElect())
            [[unroll]] for (uint k = 0u; k < X8_RV; k++) {
                x8_sg_a[k * nsg + gl_SubgroupID] = amax[k];
                x8_sg_m[k * nsg + gl_SubgroupID] = mx[k];
            }
        barrier();
        if (gl_SubgroupID == 0u)
            for (uint u = gl_SubgroupInvocationID; u < X8_RV * upk; u += sg) {
                const uint first = (u / upk) * nsg + (u % upk) * per;
                float a = 0.0, m = 0.0;
                for (uint j = 0u; j < per; j++) {
                    if (x8_sg_a[first + j] > a) {
                        a = x8_sg_a[first + j];
                        m = x8_sg_m[first + j];
                    }
                }
                float us, ud;
                x8_scale(kind, a, m, us, ud);
                x8_sg_s[u] = us;
                x8_sg_d[u] = ud;
                x8_sg_u[u] = a;
            }
        barrier();
    }
    [[unroll]] for (uint k = 0u; k < X8_RV; k++) {
        const uint i = i0 + tid + k * nt;
        float s, d, ua = amax[k];
        if (shared_units) {
            s = x8_sg_s[k * (nt / 64u) + tid / 64u];
            d = x8_sg_d[k * (nt / 64u) + tid / 64u];
            ua = x8_sg_u[k * (nt / 64u) + tid / 64u];
        } else {
            x8_scale(kind, amax[k], mx[k], s, d);
        }
        const uint t = x8_run(kind, a32[k], ua, s);
        const ivec4 q = x8_round4(v[k], s, kind);
        const uint qb = qrow + 3u * (i >> 3); // the block's three uvec4
        if (i < n4) q1[4u * qb + (i & 7u)] = x8_pack4(q);
        int lo = (q.x + q.y) + (q.z + q.w); // then the sum of the 4 invocations of its half block
        lo += subgroupShuffleXor(lo, 1u);
        lo += subgroupShuffleXor(lo, 2u);
        const int hi = subgroupShuffleXor(lo, 4u);
        if (i < n4 && (tid & 7u) == 0u) qm4[qb + 2u] = x8_meta(d, t, lo, hi);
    }
}
#endif // X8_RV

#ifdef X8_VALUE
// The int8 blocks of n values X8_VALUE(0 .. n - 1) (n a multiple of the
// unit) into the row of uvec4 from qrow, as x8_quant_vec4 makes them: the
// first value of largest magnitude of each vec4, of each block of 32 (8
// vec4s), of each unit of 256 for the K-quants (8 blocks); then the
// multipliers, the bytes and the half sums. Any local size; every
// invocation calls it (barriers).
shared float x8_a4[X8_VALUES_MAX / 4u], x8_m4[X8_VALUES_MAX / 4u];
shared int x8_s4[X8_VALUES_MAX / 4u];
shared float x8_ab[X8_VALUES_MAX / 32u], x8_mb[X8_VALUES_MAX / 32u], x8_db[X8_VALUES_MAX / 32u];
shared uint x8_tb[X8_VALUES_MAX / 32u];

void x8_quant_values(uint n, uint qrow, uint kind) {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, nv = n / 4u, nb = nv / 8u;
    for (uint v = tid; v < nv; v += WG) {
        float amax = 0.0, mx = 0.0;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            const float x = X8_VALUE(4u * v + k);
            if (abs(x) > amax) {
                amax = abs(x);
                mx = x;
            }
        }
        x8_a4[v] = amax;
        x8_m4[v] = mx;
    }
    barrier();
    for (uint b = tid; b < nb; b += WG) {
        float amax = 0.0, mx = 0.0;
        for (uint k = 8u * b; k < 8u * b + 8u; k++)
            if (x8_a4[k] > amax) {
                amax = x8_a4[k];
                mx = x8_m4[k];
            }
        x8_ab[b] = amax;
        x8_mb[b] = mx;
    }
    barrier();
    for (uint v = tid; v < nv; v += WG) {
        const uint b = v / 8u;
        float amax = x8_ab[b], mx = x8_mb[b];
        if (kind != 0u) {
            amax = 0.0;
            mx = 0.0;
            for (uint k = b & ~7u; k < (b & ~7u) + 8u; k++)
                if (x8_ab[k] > amax) {
                    amax = x8_ab[k];
                    mx = x8_mb[k];
                }
        }
        float s, d;
        x8_scale(kind, amax, mx, s, d);
        const uint t = x8_run(kind, x8_ab[b], amax, s);
        const ivec4 q = x8_round4(vec4(X8_VALUE(4u * v), X8_VALUE(4u * v + 1u), X8_VALUE(4u * v + 2u),
                                       X8_VALUE(4u * v + 3u)), s, kind);
        q1[4u * (qrow + 3u * b) + v % 8u] = x8_pack4(q);
        x8_s4[v] = (q.x + q.y) + (q.z + q.w);
        if (v % 8u == 0u) {
            x8_db[b] = d;
            x8_tb[b] = t;
        }
    }
    barrier();
    for (uint b = tid; b < nb; b += WG) {
        const int lo = (x8_s4[8u * b] + x8_s4[8u * b + 1u]) + (x8_s4[8u * b + 2u] + x8_s4[8u * b + 3u]);
        const int hi = (x8_s4[8u * b + 4u] + x8_s4[8u * b + 5u]) + (x8_s4[8u * b + 6u] + x8_s4[8u * b + 7u]);
        qm4[qrow + 3u * b + 2u] = x8_meta(x8_db[b], x8_tb[b], lo, hi);
    }
    barrier(); // the shared arrays are free for the next call
}
#endif // X8_VALUE
