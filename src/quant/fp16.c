/* IEEE binary16 and bfloat16 <-> binary32 conversions, done on the bit
 * patterns so that they are exact and independent of the FPU. */
#include "quant/quant.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ig_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (mant << 13)); /* inf, NaN */
    if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return f32_from_bits(sign); /* signed zero */
    /* Subnormal: mant * 2^-24. Shift the leading one up to bit 10; each
     * shift lowers the binary32 exponent (113 = that of 2^-14) by one. */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t ig_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { /* NaN: keep the top payload bits, never make it inf */
        uint16_t payload = (uint16_t)((a >> 13) & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (payload ? payload : 1u));
    }
    uint32_t exp = a >> 23;
    uint32_t mant = a & 0x7fffffu;
    if (exp >= 143) return (uint16_t)(sign | 0x7c00u); /* >= 2^16, inf: overflows */
    uint32_t h, rem, half;
    if (exp >= 113) { /* normal binary16 range (>= 2^-14) */
        h = ((exp - 112u) << 10) | (mant >> 13);
        rem = mant & 0x1fffu;
        half = 0x1000u;
    } else {
        /* Subnormal or zero: the value is (mant | 1<<23) * 2^(exp-150), that
         * is (mant | 1<<23) >> (126 - exp) units of 2^-24. Below 2^-25 (a
         * shift over 24) it rounds to zero. */
        if (exp < 102) return sign;
        uint32_t full = mant | 0x800000u;
        uint32_t shift = 126u - exp; /* 14 .. 24 */
        h = full >> shift;
        rem = full & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
    }
    /* Round to nearest, ties to even; a carry into the exponent is right
     * (it reaches the next binade, or inf above 65504). */
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float ig_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t ig_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; overflows to inf */
    return (uint16_t)(u >> 16);
}
