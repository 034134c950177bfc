// The int8 activations of the int8 mat-vec (mv.comp with X8), quantized as
// the CPU backend quantizes them for the same weights, so both compute the
// same integer sums:
//   kind 0 (Q4_0, Q5_0, Q8_0 weights): blocks of 32, d = f16(amax / 127),
//          q = nearest_even(x * (127 / amax)) (ig_quantize_row_q8_0_act);
//   kind 1 (K-quants): blocks of 256, iscale = -127 / (the signed value of
//          largest magnitude), q = nearest_even(x * iscale), d = 1 / iscale
//          (ig_quantize_row_q8_K).
// Stored per 32 elements as 48 bytes (3 uvec4): [0], [1] the 32 q as bytes,
// [2] vec4(d, d * (q0 + .. + q15), d * (q16 + .. + q31), 0); the half sums
// serve weights with an offset or a minimum (x . (s w - m) needs sum x).
//
// The including shader defines the writeonly arrays q1 (uint) and qm4 (vec4)
// on the output binding. X8_NO_VEC4 leaves out x8_quant_vec4 and its 12 KiB
// of shared memory. X8_VALUE(i) (with X8_VALUES_MAX, the most values at
// once) brings x8_quant_values, for values that are not one per invocation.

// Sign of a - m * b, m the midpoint between the positive float of bits qb
// and the next float up, a and b positive normal floats: exact, from
// integer products (m's mantissa has 25 bits, m * b up to 50); 2 where the
// exponents are too far apart to compare (q is then far from a / b).
int x8_cmp_mid(uint ab, uint bb, uint qb) {
    const uint A = (ab & 0x7FFFFFu) | 0x800000u, B = (bb & 0x7FFFFFu) | 0x800000u;
    const uint M = 2u * ((qb & 0x7FFFFFu) | 0x800000u) + 1u;
    // a = A 2^(ea-150), b = B 2^(eb-150), m = M 2^(eq-151): compare A 2^s with M B
    const int s = int(ab >> 23) - int(bb >> 23) - int(qb >> 23) + 151;
    if (s < 1 || s > 39) return 2; // cannot happen for a quotient within a few ulps
    uint hi, lo;
    umulExtended(M, B, hi, lo);
    const uint ahi = s >= 32 ? A << (s - 32) : A >> (32 - s), alo = s >= 32 ? 0u : A << s;
    if (ahi != hi) return ahi > hi ? 1 : -1;
    return alo == lo ? 0 : (alo > lo ? 1 : -1);
}

// a / b correctly rounded, as the CPU divides. GPU division may be off by an
// ulp or two (which would move a q across a rounding tie now and then), and
// an fma refinement is not exact where fma is not fused (lavapipe): the
// hardware quotient is moved to the float whose rounding interval holds
// a / b, decided by exact integer arithmetic (x8_cmp_mid).
float x8_div(float a, float b) {
    const float q = a / b;
    const uint ab = floatBitsToUint(abs(a)), bb = floatBitsToUint(abs(b));
    uint qb = floatBitsToUint(abs(q));
    const uint ea = ab >> 23, eb = bb >> 23, eq = qb >> 23;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u || eq <= 1u || eq >= 254u) return q; // zeros, subnormals, inf, NaN
    for (int k = 0; k < 4; k++) {
        const int up = x8_cmp_mid(ab, bb, qb), dn = x8_cmp_mid(ab, bb, qb - 1u);
        if (up == 2 || dn == 2) break;
        if (up > 0 || (up == 0 && (qb & 1u) != 0u)) qb++;      // past the upper midpoint (ties to even)
        else if (dn < 0 || (dn == 0 && (qb & 1u) != 0u)) qb--; // below the lower one
        else break;
    }
    return (a < 0.0) != (b < 0.0) ? -uintBitsToFloat(qb) : uintBitsToFloat(qb);
}

uint x8_pack4(ivec4 v) {
    return (uint(v.x) & 0xFFu) | ((uint(v.y) & 0xFFu) << 8) | ((uint(v.z) & 0xFFu) << 16) | (uint(v.w) << 24);
}

// The multiplier s and the stored scale d of a block (kind 0) or unit
// (kind 1) from its largest magnitude amax and the first value mx of it.
void x8_scale(uint kind, float amax, float mx, out float s, out float d) {
    if (kind == 0u) {
        s = amax != 0.0 ? x8_div(127.0, amax) : 0.0;
        d = unpackHalf2x16(f2h_rne(x8_div(amax, 127.0))).x;
    } else {
        const bool zero = !(amax > 0.0) || isinf(amax);
        s = zero ? 0.0 : x8_div(-127.0, mx);
        d = zero ? 0.0 : x8_div(1.0, s);
    }
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
    const ivec4 q = x8_round4(v, s, kind);
    const uint qb = qrow + 3u * (i >> 3); // the block's three uvec4
    if (live) q1[4u * qb + (i & 7u)] = x8_pack4(q);
    x8_sh_sum[tid] = (q.x + q.y) + (q.z + q.w);
    barrier();
    if (live && (tid & 7u) == 0u) {
        const int lo = (x8_sh_sum[tid] + x8_sh_sum[tid + 1u]) + (x8_sh_sum[tid + 2u] + x8_sh_sum[tid + 3u]);
        const int hi = (x8_sh_sum[tid + 4u] + x8_sh_sum[tid + 5u]) + (x8_sh_sum[tid + 6u] + x8_sh_sum[tid + 7u]);
        qm4[qb + 2u] = vec4(d, d * float(lo), d * float(hi), 0.0);
    }
    barrier(); // the shared arrays are free for the next call
}
#endif // X8_NO_VEC4

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
        const ivec4 q = x8_round4(vec4(X8_VALUE(4u * v), X8_VALUE(4u * v + 1u), X8_VALUE(4u * v + 2u),
                                       X8_VALUE(4u * v + 3u)), s, kind);
        q1[4u * (qrow + 3u * b) + v % 8u] = x8_pack4(q);
        x8_s4[v] = (q.x + q.y) + (q.z + q.w);
        if (v % 8u == 0u) x8_db[b] = d;
    }
    barrier();
    for (uint b = tid; b < nb; b += WG) {
        const int lo = (x8_s4[8u * b] + x8_s4[8u * b + 1u]) + (x8_s4[8u * b + 2u] + x8_s4[8u * b + 3u]);
        const int hi = (x8_s4[8u * b + 4u] + x8_s4[8u * b + 5u]) + (x8_s4[8u * b + 6u] + x8_s4[8u * b + 7u]);
        qm4[qrow + 3u * b + 2u] = vec4(x8_db[b], x8_db[b] * float(lo), x8_db[b] * float(hi), 0.0);
    }
    barrier(); // the shared arrays are free for the next call
}
#endif // X8_VALUE
