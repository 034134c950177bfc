/* Weight types: the type table, half-precision conversions, hand-built blocks
 * with known values, quantize -> dequantize error bounds, the f32 reference
 * dot, and the integer dot references. Bit-exactness against gguf-py is in
 * tests/e2e/test_quant.py. */
#include "test.h"

#include "quant/quant.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Helpers ---------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rnd_unit(void) { return (double)(rnd_u64() >> 11) * 0x1p-53; }

static float rnd_range(float lo, float hi) { return lo + (hi - lo) * (float)rnd_unit(); }

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Weight-like data: each 16-value group gets its own magnitude (2^-6 .. 2^2)
 * and offset, so that sub-block scales and mins matter; a few groups are
 * all zero, all positive, all negative or a single spike. */
static void fill_weights(float *x, int64_t n) {
    for (int64_t g = 0; g < n; g += 16) {
        const float mag = (float)ldexp(1.0, (int)(rnd_u64() % 9) - 6) * rnd_range(0.5f, 1.0f);
        const int kind = (int)(rnd_u64() % 16);
        const float off = kind == 1 ? mag : kind == 2 ? -mag : rnd_range(-0.3f, 0.3f) * mag;
        for (int64_t i = g; i < g + 16 && i < n; i++) {
            if (kind == 0) x[i] = 0.0f;
            else if (kind == 3) x[i] = i == g + 5 ? 4.0f * mag : 0.01f * mag * rnd_range(-1, 1);
            else x[i] = off + mag * rnd_range(-1.0f, 1.0f);
        }
    }
}

/* Activation-like data: mostly small, a few large entries. */
static void fill_activations(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd_range(-2.0f, 2.0f);
        if (rnd_u64() % 64 == 0) x[i] *= 20.0f;
    }
}

/* A random finite fp16 of magnitude 2^-12 .. 2^-1, either sign. */
static uint16_t rnd_f16_scale(void) {
    const float v = (float)ldexp(rnd_range(1.0f, 2.0f), (int)(rnd_u64() % 12) - 12);
    return ig_f32_to_f16(rnd_u64() & 1 ? -v : v);
}

static void put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, sizeof v); }

static uint16_t get_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Random bytes for a row of `type`, with every fp16/bf16 value made finite
 * (fp16 scales replaced by random moderate values). */
static void fill_random_row(ig_dtype type, uint8_t *row, int64_t n) {
    size_t bytes = 0;
    (void)ig_dtype_row_bytes(type, n, &bytes);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rnd_u64();
    const size_t bb = ig_dtype_block_bytes(type);
    for (size_t off = 0; off < bytes; off += bb) {
        uint8_t *b = row + off;
        switch (type) {
        case IG_TYPE_F32: {
            const float v = rnd_range(-1.0f, 1.0f);
            memcpy(b, &v, sizeof v);
            break;
        }
        case IG_TYPE_F16: put_u16(b, (uint16_t)(get_u16(b) & 0xbbffu)); break; /* exp < 31 */
        case IG_TYPE_BF16: put_u16(b, (uint16_t)(get_u16(b) & 0xbfffu)); break; /* exp < 255 */
        case IG_TYPE_Q4_0:
        case IG_TYPE_Q5_0:
        case IG_TYPE_Q8_0: put_u16(b, rnd_f16_scale()); break;
        case IG_TYPE_Q5_1:
        case IG_TYPE_Q4_K:
        case IG_TYPE_Q5_K:
            put_u16(b, rnd_f16_scale());
            put_u16(b + 2, rnd_f16_scale());
            break;
        case IG_TYPE_Q6_K: put_u16(b + 208, rnd_f16_scale()); break;
        }
    }
}

static const ig_dtype k_all_types[] = {IG_TYPE_F32,  IG_TYPE_F16,  IG_TYPE_BF16,
                                       IG_TYPE_Q8_0, IG_TYPE_Q4_0, IG_TYPE_Q5_0,
                                       IG_TYPE_Q5_1, IG_TYPE_Q4_K, IG_TYPE_Q5_K,
                                       IG_TYPE_Q6_K};
static const int64_t k_sizes_32[] = {32, 96, 640, 1152};
static const int64_t k_sizes_256[] = {256, 512, 2304, 5376};

static const int64_t *sizes_for(ig_dtype type) {
    return ig_dtype_block_elems(type) == IG_QK_K ? k_sizes_256 : k_sizes_32;
}

/* ---- Type table ------------------------------------------------------------- */

IG_TEST(quant_type_table) {
    static const struct {
        ig_dtype type;
        uint32_t id;
        const char *name;
        size_t elems, bytes;
    } want[] = {
        {IG_TYPE_F32, 0, "F32", 1, 4},         {IG_TYPE_F16, 1, "F16", 1, 2},
        {IG_TYPE_Q4_0, 2, "Q4_0", 32, 18},     {IG_TYPE_Q5_0, 6, "Q5_0", 32, 22},
        {IG_TYPE_Q5_1, 7, "Q5_1", 32, 24},
        {IG_TYPE_Q8_0, 8, "Q8_0", 32, 34},     {IG_TYPE_Q4_K, 12, "Q4_K", 256, 144},
        {IG_TYPE_Q5_K, 13, "Q5_K", 256, 176},  {IG_TYPE_Q6_K, 14, "Q6_K", 256, 210},
        {IG_TYPE_BF16, 30, "BF16", 1, 2},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_INT(want[i].type, want[i].id);
        CHECK(ig_dtype_known(want[i].id));
        CHECK(strcmp(ig_dtype_name(want[i].type), want[i].name) == 0);
        CHECK_EQ_INT(ig_dtype_block_elems(want[i].type), want[i].elems);
        CHECK_EQ_INT(ig_dtype_block_bytes(want[i].type), want[i].bytes);
    }
    static const uint32_t unknown[] = {3, 4, 5, 9, 10, 11, 15, 16, 29, 31, 39, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(!ig_dtype_known(unknown[i]));
        CHECK(strcmp(ig_dtype_name((ig_dtype)unknown[i]), "unknown") == 0);
        CHECK_EQ_INT(ig_dtype_block_elems((ig_dtype)unknown[i]), 0);
        CHECK_EQ_INT(ig_dtype_block_bytes((ig_dtype)unknown[i]), 0);
    }
    CHECK_EQ_INT(sizeof(ig_block_q8_K), 4 + 256 + 32 + 8);
}

IG_TEST(quant_row_bytes) {
    size_t b = 12345;
    CHECK(ig_dtype_row_bytes(IG_TYPE_Q4_K, 2304, &b));
    CHECK_EQ_INT(b, 9 * 144);
    CHECK(ig_dtype_row_bytes(IG_TYPE_Q6_K, 5376, &b));
    CHECK_EQ_INT(b, 21 * 210);
    CHECK(ig_dtype_row_bytes(IG_TYPE_Q8_0, 640, &b));
    CHECK_EQ_INT(b, 20 * 34);
    CHECK(ig_dtype_row_bytes(IG_TYPE_BF16, 7, &b));
    CHECK_EQ_INT(b, 14);
    CHECK(ig_dtype_row_bytes(IG_TYPE_Q5_0, 0, &b));
    CHECK_EQ_INT(b, 0);
    b = 777;
    CHECK(!ig_dtype_row_bytes(IG_TYPE_Q4_K, 640, &b)); /* not whole blocks */
    CHECK(!ig_dtype_row_bytes(IG_TYPE_Q4_0, 33, &b));
    CHECK(!ig_dtype_row_bytes(IG_TYPE_F32, -4, &b));
    CHECK(!ig_dtype_row_bytes((ig_dtype)3, 32, &b));
    CHECK_EQ_INT(b, 777); /* untouched on failure */
    if (sizeof(size_t) == 8) {
        /* F32: 2^62 elements are 2^64 bytes, one too many; 2^62 - 1 fit. */
        CHECK(!ig_dtype_row_bytes(IG_TYPE_F32, INT64_C(1) << 62, &b));
        CHECK(ig_dtype_row_bytes(IG_TYPE_F32, (INT64_C(1) << 62) - 1, &b));
        CHECK(b == SIZE_MAX - 3);
        CHECK(ig_dtype_row_bytes(IG_TYPE_F16, INT64_MAX, &b));
        CHECK(b == SIZE_MAX - 1);
    }
}

/* ---- fp16 / bf16 -------------------------------------------------------------- */

/* Value of binary16 bits h computed with double arithmetic. */
static double f16_value(uint16_t h) {
    const int exp = (h >> 10) & 31, mant = h & 1023;
    const double mag = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    return h & 0x8000 ? -mag : mag;
}

/* Independent round-to-nearest-even narrowing for finite x, in double. */
static uint16_t f16_from_double(double x) {
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs(x);
    if (a >= 65520.0) return sign | 0x7c00;
    if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24));
    int e;
    const double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    const int field = e - 1 + 15;
    const int mant = (int)nearbyint((m * 2.0 - 1.0) * 1024.0); /* may carry to 1024 */
    return (uint16_t)(sign | ((field << 10) + mant));
}

IG_TEST(quant_f16_exhaustive) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ig_f16_to_f32((uint16_t)h);
        const int exp = (h >> 10) & 31;
        if (exp == 31) {
            const uint32_t u = f32_bits(f);
            const uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
            if (u != want) bad++; /* inf, and NaN with its payload */
        } else if ((double)f != f16_value((uint16_t)h) || !!signbit(f) != !!(h & 0x8000)) {
            bad++;
        }
        if (ig_f32_to_f16(f) != h) bad++; /* every pattern round-trips, NaNs too */
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(f32_bits(ig_f16_to_f32(0x0001)), 0x33800000); /* 2^-24 */
    CHECK_EQ_INT(f32_bits(ig_f16_to_f32(0x03ff)), 0x387fc000); /* largest subnormal */
    CHECK_EQ_INT(f32_bits(ig_f16_to_f32(0x7d55)), 0x7faaa000); /* sNaN stays signaling */
}

IG_TEST(quant_f16_rounding) {
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {65504.0f, 0x7bff},
        {65519.996f, 0x7bff},
        {65520.0f, 0x7c00},                    /* tie between 65504 and 2^16 goes up (even) */
        {1.0f + 0x1p-11f, 0x3c00},             /* tie, down to even */
        {1.0f + 3 * 0x1p-11f, 0x3c02},         /* tie, up to even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},  /* just above the tie */
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},                    /* tie with zero */
        {0x1.000002p-25f, 0x0001},
        {3 * 0x1p-25f, 0x0002},                /* 1.5 units, to even */
        {5 * 0x1p-25f, 0x0002},                /* 2.5 units, to even */
        {1023.5f * 0x1p-24f, 0x0400},          /* rounds up into the normals */
        {0x1p-14f, 0x0400},
        {1e-45f, 0x0000},                      /* binary32 subnormal */
        {-0.0f, 0x8000},
        {-2.5f, 0xc100},
        {FLT_MAX, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = ig_f32_to_f16(cases[i].f);
        if (got != cases[i].h)
            ig_test_fail_at(__FILE__, __LINE__, "f16(%a) = 0x%04x, want 0x%04x",
                            (double)cases[i].f, got, cases[i].h);
    }
    CHECK_EQ_INT(ig_f32_to_f16(f32_from_bits(0x7fc00000)), 0x7e00);
    CHECK_EQ_INT(ig_f32_to_f16(f32_from_bits(0x7f800001)), 0x7c01); /* NaN never becomes inf */
    CHECK_EQ_INT(ig_f32_to_f16(f32_from_bits(0xff812345)), 0xfc09);
    /* Random finite binary32 patterns against the double-based rounding. */
    int bad = 0;
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)rnd_u64();
        /* Concentrate on the interesting exponents (2^-26 .. 2^17). */
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(101 + rnd_u64() % 44) << 23);
        const float f = f32_from_bits(u);
        if (!isfinite(f)) continue;
        if (ig_f32_to_f16(f) != f16_from_double((double)f)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

IG_TEST(quant_bf16) {
    CHECK(ig_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(ig_bf16_to_f32(0xc0a0) == -5.0f);
    CHECK_EQ_INT(f32_bits(ig_bf16_to_f32(0x0001)), 0x00010000); /* subnormal kept */
    CHECK_EQ_INT(ig_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(ig_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      /* tie, to even */
    CHECK_EQ_INT(ig_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  /* tie, to even */
    CHECK_EQ_INT(ig_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    CHECK_EQ_INT(ig_f32_to_bf16(FLT_MAX), 0x7f80);              /* overflows to inf */
    CHECK_EQ_INT(ig_f32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ_INT(ig_f32_to_bf16(f32_from_bits(0x7f800001)), 0x7fc0); /* made quiet */
    CHECK_EQ_INT(ig_f32_to_bf16(f32_from_bits(0xffa12345)), 0xffe1);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ig_bf16_to_f32((uint16_t)h);
        if (f32_bits(f) != h << 16) bad++;
        const bool nan = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
        if (ig_f32_to_bf16(f) != (nan ? (h | 0x40u) : h)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- Hand-built blocks ----------------------------------------------------------- */

IG_TEST(quant_known_blocks_32) {
    float y[32];
    uint8_t q8[34] = {0};
    put_u16(q8, 0xb400); /* -0.25 */
    q8[2 + 7] = 0x80;    /* -128 */
    q8[2 + 31] = 5;
    ig_dequantize_row(IG_TYPE_Q8_0, q8, y, 32);
    CHECK(y[7] == 32.0f);
    CHECK(y[31] == -1.25f);
    CHECK(y[0] == 0.0f);

    uint8_t q4[18];
    memset(q4, 0x88, sizeof q4); /* every q = 8, value 0 */
    put_u16(q4, 0x3800);         /* 0.5 */
    q4[2 + 3] = 0x9f;
    ig_dequantize_row(IG_TYPE_Q4_0, q4, y, 32);
    CHECK(y[3] == 3.5f);  /* low nibble 15 */
    CHECK(y[19] == 0.5f); /* high nibble 9 */
    CHECK(y[0] == 0.0f && y[31] == 0.0f);

    uint8_t q5[22] = {0};
    put_u16(q5, 0x4000); /* 2.0 */
    q5[2 + 2] = 0x10;    /* qh bit 20 */
    q5[6 + 4] = 0xf0;
    q5[2 + 0] = 0x01; /* qh bit 0 */
    ig_dequantize_row(IG_TYPE_Q5_0, q5, y, 32);
    CHECK(y[20] == 30.0f);  /* q = 31 */
    CHECK(y[4] == -32.0f);  /* q = 0 */
    CHECK(y[0] == 0.0f);    /* q = 16 */
    CHECK(y[16] == -32.0f); /* bit 16 clear */
}

IG_TEST(quant_known_blocks_K) {
    float y[256];
    /* Q4_K: d = 1, dmin = 0.5; sub-block 1: sc 3, m 2; sub-block 6: sc 37,
     * m 50 (both need the high bits). */
    uint8_t b4[144] = {0};
    put_u16(b4, 0x3c00);
    put_u16(b4 + 2, 0x3800);
    uint8_t *sc = b4 + 4, *qs = b4 + 16;
    sc[1] = 3;
    sc[5] = 2;
    sc[10] = 0x25; /* low nibbles of 37 and 50 */
    sc[2] |= 2u << 6;
    sc[6] |= 3u << 6;
    qs[5] = 0x70;       /* element 37 (sub-block 1, high nibble of chunk 0) = 7 */
    qs[96 + 10] = 0x0b; /* element 202 (sub-block 6, low nibble of chunk 3) = 11 */
    uint8_t s, m;
    ig_q4_K_scale_min(sc, 6, &s, &m);
    CHECK_EQ_INT(s, 37);
    CHECK_EQ_INT(m, 50);
    ig_dequantize_row(IG_TYPE_Q4_K, b4, y, 256);
    CHECK(y[37] == 20.0f);   /* 3*7 - 0.5*2 */
    CHECK(y[32] == -1.0f);
    CHECK(y[202] == 382.0f); /* 37*11 - 0.5*50 */
    CHECK(y[192] == -25.0f);
    CHECK(y[0] == 0.0f);

    /* Q5_K: d = 1, dmin = 0; sub-block 3 scale 1; element 105 = 26. */
    uint8_t b5[176] = {0};
    put_u16(b5, 0x3c00);
    b5[4 + 3] = 1;
    b5[48 + 32 + 9] = 0xa0; /* qs: chunk 1, high nibble, l = 9 */
    b5[16 + 9] = 0x08;      /* qh[9] bit 3 */
    ig_dequantize_row(IG_TYPE_Q5_K, b5, y, 256);
    CHECK(y[105] == 26.0f);
    CHECK(y[104] == 0.0f);

    /* Q6_K: d = 1; scales[5] = -3, scales[14] = 100; element 85 = 45,
     * element 231 = 63, everything else 0 (value -32). */
    uint8_t b6[210] = {0};
    put_u16(b6 + 208, 0x3c00);
    b6[192 + 5] = (uint8_t)-3;
    b6[192 + 14] = 100;
    b6[21] = 0xd0;       /* ql[21] high nibble: element 85 (h 0, k 2) */
    b6[128 + 21] = 0x20; /* qh[21] bits 4-5 */
    b6[103] = 0xf0;      /* ql[64+32+7] high nibble: element 231 (h 1, k 3) */
    b6[128 + 39] = 0xc0; /* qh[32+7] bits 6-7 */
    ig_dequantize_row(IG_TYPE_Q6_K, b6, y, 256);
    CHECK(y[85] == -39.0f);  /* -3 * 13 */
    CHECK(y[80] == 96.0f);   /* -3 * -32 */
    CHECK(y[231] == 3100.0f); /* 100 * 31 */
    CHECK(y[224] == -3200.0f);
    CHECK(y[0] == 0.0f);
}

IG_TEST(quant_unknown_type) {
    float y[32];
    uint8_t row[64] = {1, 2, 3};
    const float x[32] = {1.0f};
    for (int i = 0; i < 32; i++) y[i] = 5.0f;
    ig_dequantize_row((ig_dtype)3, row, y, 32);
    CHECK(y[0] == 0.0f && y[31] == 0.0f);
    CHECK(ig_vec_dot_ref((ig_dtype)3, row, x, 32) == 0.0f);
}

/* ---- Quantize -> dequantize ------------------------------------------------------- */

/* Largest error of the round trip against the bound of each format;
 * returns the number of violations. */
static int check_roundtrip(ig_dtype type, const float *x, const float *y, int64_t n) {
    int bad = 0;
    const int64_t be = (int64_t)ig_dtype_block_elems(type);
    for (int64_t b0 = 0; b0 < n; b0 += be) {
        const float *xb = x + b0, *yb = y + b0;
        float amax = 0.0f, max = 0.0f;
        for (int64_t i = 0; i < be; i++)
            if (fabsf(xb[i]) > amax) {
                amax = fabsf(xb[i]);
                max = xb[i];
            }
        for (int64_t i = 0; i < be; i++) {
            const double err = fabs((double)yb[i] - (double)xb[i]);
            double bound = 0.0;
            switch (type) {
            case IG_TYPE_F32: bound = 0.0; break;
            case IG_TYPE_F16: bound = fabs(xb[i]) * 0x1p-11 + 0x1p-25; break;
            case IG_TYPE_BF16: bound = fabs(xb[i]) * 0x1p-8; break;
            /* The fp16 scales carry a relative error of 2^-11 and, near
             * zero, an absolute one of 2^-25 (half the least subnormal). */
            case IG_TYPE_Q8_0:
                bound = amax * (0.5 / 127 + 1.0 / 2048) * 1.001 + 127 * 0x1p-25;
                break;
            case IG_TYPE_Q4_0:
            case IG_TYPE_Q5_0: {
                /* Half a step, a whole one for values near -max (clipped to
                 * the top level), plus the fp16 rounding of d. */
                const double levels = type == IG_TYPE_Q4_0 ? 8.0 : 16.0;
                const double step = amax / levels;
                const bool clipped = max != 0.0f && -xb[i] / max > 1.0 - 0.5 / levels - 1e-6;
                bound = (clipped ? step : 0.5 * step) + amax / 2048.0 + 1e-7 * amax +
                        levels * 0x1p-25;
                break;
            }
            case IG_TYPE_Q5_1: {
                /* Half a step of (max - min) / 31, plus the fp16 roundings
                 * of d (times q <= 31) and of m. */
                double lo = INFINITY, hi = -INFINITY;
                for (int64_t j = 0; j < be; j++) {
                    lo = fmin(lo, xb[j]);
                    hi = fmax(hi, xb[j]);
                }
                bound = 0.5 * (hi - lo) / 31.0 * 1.0001 + ((hi - lo) + fabs(lo)) / 2048.0 * 1.001 +
                        32 * 0x1p-25;
                break;
            }
            case IG_TYPE_Q4_K:
            case IG_TYPE_Q5_K: {
                /* Half a step; the step of sub-block j is at most
                 * range_j/L + dmin/L + d, where dmin <= M/63 and d <=
                 * (Rr + dmin)/(63 L), both rounded up to fp16 (M: the largest
                 * -min(0, min_j), Rr: the largest range_j). */
                const double L = type == IG_TYPE_Q4_K ? 15.0 : 31.0;
                double M = 0.0, Rr = 0.0, range_i = 0.0;
                for (int64_t s0 = 0; s0 < be; s0 += 32) {
                    double lo = 0.0, hi = -INFINITY;
                    for (int64_t j = s0; j < s0 + 32; j++) {
                        lo = fmin(lo, xb[j]);
                        hi = fmax(hi, xb[j]);
                    }
                    M = fmax(M, -lo);
                    Rr = fmax(Rr, hi - lo);
                    if (i / 32 == s0 / 32) range_i = hi - lo;
                }
                const double dmin = M / 63.0 * 1.001 + 0x1p-24;
                const double d = (Rr + dmin) / (63.0 * L) * 1.001 + 0x1p-24;
                bound = 0.5 * (range_i / L + dmin / L + d) + 1e-6 * (Rr + M);
                break;
            }
            case IG_TYPE_Q6_K: {
                const int64_t s0 = i / 16 * 16;
                double samax = 0.0;
                for (int64_t j = s0; j < s0 + 16; j++) samax = fmax(samax, fabs(xb[j]));
                bound = 0.5 * (samax / 31.0 + amax / (31.0 * 127.0) * 1.001 + 0x1p-24) +
                        1e-6 * amax;
                break;
            }
            }
            if (!(err <= bound)) {
                if (bad < 5)
                    ig_test_fail_at(__FILE__, __LINE__,
                                    "%s: x[%lld] = %.9g -> %.9g, err %.3g > %.3g",
                                    ig_dtype_name(type), (long long)(b0 + i), (double)xb[i],
                                    (double)yb[i], err, bound);
                bad++;
            }
        }
    }
    return bad;
}

IG_TEST(quant_roundtrip_bounds) {
    for (size_t t = 0; t < sizeof k_all_types / sizeof k_all_types[0]; t++) {
        const ig_dtype type = k_all_types[t];
        const int64_t *sizes = sizes_for(type);
        for (int s = 0; s < 4; s++) {
            const int64_t n = sizes[s];
            size_t bytes = 0;
            REQUIRE(ig_dtype_row_bytes(type, n, &bytes));
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            uint8_t *q = malloc(bytes);
            REQUIRE(x && y && q);
            fill_weights(x, n);
            ig_quantize_row(type, x, q, n);
            ig_dequantize_row(type, q, y, n);
            const int bad = check_roundtrip(type, x, y, n);
            if (bad) ig_test_fail_at(__FILE__, __LINE__, "%s n=%lld: %d values out of bounds",
                                     ig_dtype_name(type), (long long)n, bad);
            free(x);
            free(y);
            free(q);
        }
    }
}

IG_TEST(quant_roundtrip_special_blocks) {
    static const ig_dtype types[] = {IG_TYPE_Q8_0, IG_TYPE_Q4_0, IG_TYPE_Q5_0,
                                     IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};
    float x[256], y[256];
    uint8_t q[256 * 4];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const ig_dtype type = types[t];
        const int64_t n = (int64_t)ig_dtype_block_elems(type);
        /* All zero: exactly zero back. */
        memset(x, 0, sizeof x);
        ig_quantize_row(type, x, q, n);
        ig_dequantize_row(type, q, y, n);
        for (int64_t i = 0; i < n; i++) CHECK(y[i] == 0.0f);
        /* Constant positive, constant negative, one spike among zeros, and
         * tiny values in the fp16 subnormal range. */
        for (int kind = 0; kind < 4; kind++) {
            for (int64_t i = 0; i < n; i++) {
                switch (kind) {
                case 0: x[i] = 0.75f; break;
                case 1: x[i] = -3.0f; break;
                case 2: x[i] = i == 7 ? -9.0f : 0.0f; break;
                default: x[i] = rnd_range(-1.0f, 1.0f) * 1e-6f; break;
                }
            }
            ig_quantize_row(type, x, q, n);
            ig_dequantize_row(type, q, y, n);
            /* The symmetric formats put the spike on their extreme level. */
            if (kind == 2 && type != IG_TYPE_Q4_K && type != IG_TYPE_Q5_K)
                CHECK_NEAR(y[7], -9.0f, 9.0 / 1024);
            CHECK_EQ_INT(check_roundtrip(type, x, y, n), 0);
        }
    }
}

IG_TEST(quant_reference_quantizer_values) {
    /* Q8_0 follows ggml's quantize_row_q8_0_ref: d = amax/127 and
     * roundf(x/d), halves away from zero. */
    float x[32] = {0};
    uint8_t q[34];
    x[0] = 127.0f;
    x[1] = -2.5f; /* exactly -2.5 steps: rounds away to -3 */
    x[2] = 0.5f;  /* to 1 */
    x[3] = -127.0f;
    ig_quantize_row(IG_TYPE_Q8_0, x, q, 32);
    CHECK_EQ_INT(get_u16(q), 0x3c00);
    CHECK_EQ_INT((int8_t)q[2], 127);
    CHECK_EQ_INT((int8_t)q[3], -3);
    CHECK_EQ_INT((int8_t)q[4], 1);
    CHECK_EQ_INT((int8_t)q[5], -127);
    /* Activations: llama.cpp's x86 formula, q = nearest-even(x * (127/amax)). */
    ig_quantize_row_q8_0_act(x, q, 32);
    CHECK_EQ_INT(get_u16(q), 0x3c00);
    CHECK_EQ_INT((int8_t)q[2], 127);
    CHECK_EQ_INT((int8_t)q[3], -2); /* the tie goes to even */
    CHECK_EQ_INT((int8_t)q[4], 0);
    CHECK_EQ_INT((int8_t)q[5], -127);
    /* 127/1.3f (97.6923141) is not 1/(1.3f/127) (97.6923065): x * them is
     * 13.500001 and 13.499999, so the two quantizers differ by a step. */
    memset(x, 0, sizeof x);
    x[0] = 1.3f;
    x[1] = 0.13818897306919098f;
    ig_quantize_row_q8_0_act(x, q, 32);
    CHECK_EQ_INT((int8_t)q[3], 14);
    ig_quantize_row(IG_TYPE_Q8_0, x, q, 32);
    CHECK_EQ_INT((int8_t)q[3], 13);
    memset(x, 0, sizeof x);
    ig_quantize_row_q8_0_act(x, q, 32); /* all zero: d = 0, q = 0 */
    CHECK_EQ_INT(get_u16(q), 0);
    CHECK_EQ_INT((int8_t)q[2], 0);
    /* Q4_0 follows quantize_row_q4_0_ref: d = max / -8 (max = the signed
     * value of largest magnitude, the first on ties), q = trunc(x/d + 8.5)
     * clipped to 15. */
    memset(x, 0, sizeof x);
    x[0] = 1.0f;
    x[1] = -8.0f;
    x[2] = 8.0f;
    x[3] = 4.5f; /* 4.5 / -1 + 8.5 = 4 */
    ig_quantize_row(IG_TYPE_Q4_0, x, q, 32);
    CHECK_EQ_INT(get_u16(q), 0x3c00); /* d = -8 / -8 = 1: the first of the tie */
    CHECK_EQ_INT(q[2] & 0xf, 9);       /* 1 -> trunc(1 + 8.5) */
    CHECK_EQ_INT(q[3] & 0xf, 0);       /* -8 -> 0: the extra level */
    CHECK_EQ_INT(q[4] & 0xf, 15);      /* 8 -> 16, clipped */
    CHECK_EQ_INT(q[5] & 0xf, 13);      /* 4.5 -> trunc(13.0) */
    CHECK_EQ_INT(q[2] >> 4, 8);        /* x[16] = 0 */
    x[1] = 8.0f;
    x[2] = -8.0f;
    ig_quantize_row(IG_TYPE_Q4_0, x, q, 32);
    CHECK_EQ_INT(get_u16(q), 0xbc00); /* d = 8 / -8 = -1 */
    CHECK_EQ_INT(q[2] & 0xf, 7);       /* 1 -> trunc(-1 + 8.5) */
    /* Q5_0: d = max / -16, q = trunc(x/d + 16.5) clipped to 31; bit 4 in qh. */
    memset(x, 0, sizeof x);
    x[0] = -16.0f;
    x[17] = 16.0f;
    x[3] = 2.0f;
    uint8_t q5[22];
    ig_quantize_row(IG_TYPE_Q5_0, x, q5, 32);
    CHECK_EQ_INT(get_u16(q5), 0x3c00);
    uint32_t qh;
    memcpy(&qh, q5 + 2, 4);
    CHECK_EQ_INT(q5[6 + 0] & 0xf, 0); /* -16 -> 0.5 -> 0 */
    CHECK_EQ_INT(q5[6 + 1] >> 4, 15); /* 16 -> 32.5 -> 31 = 0x1f */
    CHECK_EQ_INT((qh >> 17) & 1, 1);
    CHECK_EQ_INT(q5[6 + 3] & 0xf, 2); /* 2 -> 18 = 0x12 */
    CHECK_EQ_INT((qh >> 3) & 1, 1);
    CHECK_EQ_INT((qh >> 0) & 1, 0);
}

/* ---- f32 reference dot ------------------------------------------------------------ */

IG_TEST(quant_vec_dot_ref_matches_dequant) {
    for (size_t t = 0; t < sizeof k_all_types / sizeof k_all_types[0]; t++) {
        const ig_dtype type = k_all_types[t];
        const int64_t *sizes = sizes_for(type);
        for (int s = 0; s < 4; s++) {
            for (int src = 0; src < 2; src++) {
                const int64_t n = sizes[s];
                size_t bytes = 0;
                REQUIRE(ig_dtype_row_bytes(type, n, &bytes));
                float *w = malloc((size_t)n * sizeof *w), *x = malloc((size_t)n * sizeof *x);
                uint8_t *row = malloc(bytes);
                REQUIRE(w && x && row);
                if (src == 0) { /* quantized weights */
                    fill_weights(w, n);
                    ig_quantize_row(type, w, row, n);
                } else { /* random bit patterns */
                    fill_random_row(type, row, n);
                }
                ig_dequantize_row(type, row, w, n);
                fill_activations(x, n);
                double want = 0.0, mag = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    want += (double)w[i] * x[i];
                    mag += fabs((double)w[i] * x[i]);
                }
                const float got = ig_vec_dot_ref(type, row, x, n);
                CHECK_NEAR(got, want, 1e-6 * mag + 1e-30);
                CHECK(mag > 0.0);
                free(w);
                free(x);
                free(row);
            }
        }
    }
}

/* ---- Integer dots -------------------------------------------------------------- */

/* The weights' integers, unpacked straight from the byte offsets of ggml's
 * layouts (independently of src/quant), centred for the symmetric types:
 * q[] gets the per-element integer, and for the K types sc[]/m[] the
 * per-sub-block scale and min. */
static void unpack_block(ig_dtype type, const uint8_t *b, int *q, int *sc, int *m) {
    switch (type) {
    case IG_TYPE_Q8_0:
        for (int j = 0; j < 32; j++) q[j] = (int8_t)b[2 + j];
        break;
    case IG_TYPE_Q4_0:
        for (int j = 0; j < 16; j++) {
            q[j] = (b[2 + j] & 15) - 8;
            q[j + 16] = (b[2 + j] >> 4) - 8;
        }
        break;
    case IG_TYPE_Q5_0: {
        const uint32_t qh =
            b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        for (int j = 0; j < 16; j++) {
            q[j] = (int)((b[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16;
            q[j + 16] = (int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
        }
        break;
    }
    case IG_TYPE_Q4_K:
    case IG_TYPE_Q5_K: {
        const uint8_t *s = b + 4;
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                sc[j] = s[j] & 63;
                m[j] = s[j + 4] & 63;
            } else {
                sc[j] = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
                m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
        }
        const bool five = type == IG_TYPE_Q5_K;
        const uint8_t *qh = b + 16, *ql = b + (five ? 48 : 16);
        int u1 = 1, u2 = 2, e = 0;
        for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
            for (int l = 0; l < 32; l++) q[e++] = (ql[l] & 0xf) + (five && (qh[l] & u1) ? 16 : 0);
            for (int l = 0; l < 32; l++) q[e++] = (ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0);
        }
        break;
    }
    case IG_TYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        for (int j = 0; j < 16; j++) sc[j] = (int8_t)b[192 + j];
        for (int h = 0; h < 2; h++, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                q[128 * h + l + 0] = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                q[128 * h + l + 32] = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                q[128 * h + l + 64] = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                q[128 * h + l + 96] = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            }
        }
        break;
    }
    default: break;
    }
}

/* The documented float formula of the integer dot of quant.h, from plain
 * integer sums over the unpacked values. */
static float int_dot_expected(ig_dtype type, const uint8_t *row, const void *xq, int64_t n) {
    const size_t bb = ig_dtype_block_bytes(type);
    const int64_t be = (int64_t)ig_dtype_block_elems(type);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / be; i++) {
        const uint8_t *b = row + (size_t)i * bb;
        int q[256], sc[16], m[8];
        unpack_block(type, b, q, sc, m);
        if (be == 32) {
            const uint8_t *a = (const uint8_t *)xq + i * 34;
            int32_t isum = 0;
            for (int j = 0; j < 32; j++) isum += q[j] * (int8_t)a[2 + j];
            const float dd = ig_f16_to_f32(get_u16(b)) * ig_f16_to_f32(get_u16(a));
            sum += (float)isum * dd;
        } else {
            const ig_block_q8_K *a = (const ig_block_q8_K *)xq + i;
            if (type == IG_TYPE_Q6_K) {
                int32_t isum = 0;
                for (int e = 0; e < 256; e++) isum += sc[e / 16] * a->t[e / 32] * q[e] * a->qs[e];
                const float d = ig_f16_to_f32(get_u16(b + 208)) * a->d;
                sum += d * (float)isum;
            } else {
                int32_t isum = 0, imin = 0;
                for (int e = 0; e < 256; e++) {
                    isum += sc[e / 32] * a->t[e / 32] * q[e] * a->qs[e];
                    imin += m[e / 32] * a->t[e / 32] * a->qs[e];
                }
                const float d = ig_f16_to_f32(get_u16(b)) * a->d;
                const float dmin = ig_f16_to_f32(get_u16(b + 2)) * a->d;
                const float hi = d * (float)isum;
                const float lo = dmin * (float)imin;
                sum += hi - lo;
            }
        }
    }
    return sum;
}

static float int_dot(ig_dtype type, const void *row, const void *xq, int64_t n) {
    switch (type) {
    case IG_TYPE_Q8_0: return ig_vec_dot_q8_0_q8_0(row, xq, n);
    case IG_TYPE_Q4_0: return ig_vec_dot_q4_0_q8_0(row, xq, n);
    case IG_TYPE_Q5_0: return ig_vec_dot_q5_0_q8_0(row, xq, n);
    case IG_TYPE_Q4_K: return ig_vec_dot_q4_K_q8_K(row, xq, n);
    case IG_TYPE_Q5_K: return ig_vec_dot_q5_K_q8_K(row, xq, n);
    case IG_TYPE_Q6_K: return ig_vec_dot_q6_K_q8_K(row, xq, n);
    default: return NAN;
    }
}

IG_TEST(quant_q8_K_activation) {
    enum { N = 512 };
    float x[N], y[N];
    ig_block_q8_K q[N / 256];
    fill_activations(x, N);
    for (int i = 256; i < N; i++) x[i] = fmaxf(-50.0f, fminf(50.0f, x[i]));
    x[300] = -55.0f; /* the largest magnitude of block 1 */
    for (int i = 320; i < 352; i++) x[i] = 0.01f * (float)(i - 336); /* a quiet run: |x| <= 0.16 */
    ig_quantize_row_q8_K(x, q, N);
    CHECK_EQ_INT(q[1].qs[300 - 256], -127); /* iscale = -127/max: max goes to -127 */
    CHECK_EQ_INT(q[1].t[(300 - 256) / 32], IG_Q8K_T);
    CHECK_NEAR(q[1].d, 55.0f / 127.0f / 8.0f, 1e-8);
    CHECK_EQ_INT(q[1].t[(320 - 256) / 32], 1); /* 0.16 <= 55/8 */
    CHECK_EQ_INT(q[1].qs[351 - 256], (int)lrintf(0.15f * 127.0f * 8.0f / 55.0f));
    for (int b = 0; b < N / 256; b++) {
        for (int r = 0; r < 8; r++) { /* t: the smallest with a <= amax * t/8 */
            float a = 0.0f, amax = 0.0f;
            for (int l = 0; l < 32; l++) a = fmaxf(a, fabsf(x[256 * b + 32 * r + l]));
            for (int l = 0; l < 256; l++) amax = fmaxf(amax, fabsf(x[256 * b + l]));
            const int t = q[b].t[r];
            CHECK(t >= 1 && t <= IG_Q8K_T);
            CHECK(a <= amax * (0.125f * (float)t));
            CHECK(t == 1 || a > amax * (0.125f * (float)(t - 1)));
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q[b].qs[16 * g + l];
            CHECK_EQ_INT(q[b].bsums[g], q[b].t[g / 2] * s);
        }
    }
    ig_dequantize_row_q8_K(q, y, N);
    for (int i = 0; i < N; i++)
        CHECK_NEAR(y[i], x[i], fabsf(q[i / 256].d) * q[i / 256].t[i % 256 / 32] * 0.5f * 1.0001f);
    /* Ties go to even (ggml's nearest_int); with max = -127, iscale = 1. */
    float t[256] = {0};
    t[0] = -127.0f;
    t[1] = 2.5f;
    t[2] = 3.5f;
    t[3] = -0.5f;
    ig_quantize_row_q8_K(t, q, 256);
    CHECK(q[0].d == 0.125f);
    CHECK_EQ_INT(q[0].qs[0], -127);
    CHECK_EQ_INT(q[0].qs[1], 2);
    CHECK_EQ_INT(q[0].qs[2], 4);
    CHECK_EQ_INT(q[0].qs[3], 0);
    /* An all-zero block. */
    memset(t, 0, sizeof t);
    ig_quantize_row_q8_K(t, q, 256);
    CHECK(q[0].d == 0.0f);
    CHECK_EQ_INT(q[0].qs[17], 0);
    CHECK_EQ_INT(q[0].bsums[3], 0);
    CHECK_EQ_INT(q[0].t[3], 1);
}

IG_TEST(quant_int_dots) {
    static const ig_dtype types[] = {IG_TYPE_Q8_0, IG_TYPE_Q4_0, IG_TYPE_Q5_0,
                                     IG_TYPE_Q4_K, IG_TYPE_Q5_K, IG_TYPE_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const ig_dtype type = types[t];
        const bool k = ig_dtype_block_elems(type) == IG_QK_K;
        const int64_t *sizes = sizes_for(type);
        for (int s = 0; s < 4; s++) {
            for (int src = 0; src < 2; src++) {
                const int64_t n = sizes[s];
                size_t bytes = 0, xbytes = 0;
                REQUIRE(ig_dtype_row_bytes(type, n, &bytes));
                REQUIRE(ig_dtype_row_bytes(IG_TYPE_Q8_0, n, &xbytes));
                if (k) xbytes = (size_t)(n / 256) * sizeof(ig_block_q8_K);
                float *w = malloc((size_t)n * sizeof *w), *x = malloc((size_t)n * sizeof *x);
                float *xd = malloc((size_t)n * sizeof *xd);
                uint8_t *row = malloc(bytes);
                void *xq = malloc(xbytes);
                REQUIRE(w && x && xd && row && xq);
                if (src == 0) {
                    fill_weights(w, n);
                    ig_quantize_row(type, w, row, n);
                } else {
                    fill_random_row(type, row, n);
                }
                ig_dequantize_row(type, row, w, n);
                fill_activations(x, n);
                if (k) {
                    ig_quantize_row_q8_K(x, xq, n);
                    ig_dequantize_row_q8_K(xq, xd, n);
                } else {
                    ig_quantize_row_q8_0_act(x, xq, n);
                    ig_dequantize_row(IG_TYPE_Q8_0, xq, xd, n);
                }
                const float got = int_dot(type, row, xq, n);
                /* 1. Exactly the documented integer formula. */
                const float want = int_dot_expected(type, row, xq, n);
                if (f32_bits(got) != f32_bits(want))
                    ig_test_fail_at(__FILE__, __LINE__, "%s n=%lld: int dot %.9g, formula %.9g",
                                    ig_dtype_name(type), (long long)n, (double)got, (double)want);
                /* 2. The f32 reference on the dequantized activation, up to
                 * float rounding (sums of up to 2^26 rounded once per block). */
                double mag = 0.0, qerr = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    mag += fabs((double)w[i] * xd[i]);
                    qerr += fabs((double)w[i]) * fabs((double)xd[i] - x[i]);
                }
                const float ref_q = ig_vec_dot_ref(type, row, xd, n);
                CHECK_NEAR(got, ref_q, 2e-6 * mag + 1e-30);
                /* 3. The f32 reference on the real activation, within the
                 * activation's quantization error. */
                const float ref = ig_vec_dot_ref(type, row, x, n);
                CHECK_NEAR(got, ref, qerr * 1.0001 + 2e-6 * mag + 1e-30);
                CHECK(qerr > 0.0 && qerr < 0.2 * mag);
                free(w);
                free(x);
                free(xd);
                free(row);
                free(xq);
            }
        }
    }
}

/* ---- Q5_1 ------------------------------------------------------------------------ */

/* A ramp from -1 to 1 in 31 steps: q[j] = j, d = 2/31, m = -1; the bytes
 * follow ggml's layout (d, m, qh, qs). */
IG_TEST(quant_q5_1_block) {
    float x[32], y[32];
    uint8_t b[24];
    for (int j = 0; j < 32; j++) x[j] = j < 31 ? -1.0f + (float)j * (2.0f / 31.0f) : 1.0f;
    ig_quantize_row(IG_TYPE_Q5_1, x, b, 32);
    CHECK_EQ_INT(b[0] | b[1] << 8, ig_f32_to_f16(2.0f / 31.0f));
    CHECK_EQ_INT(b[2] | b[3] << 8, 0xbc00); /* -1 */
    CHECK_EQ_INT(b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24, 0xffff0000u);
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b[8 + j], j | j << 4);
    ig_dequantize_row(IG_TYPE_Q5_1, b, y, 32);
    const float d = ig_f16_to_f32(ig_f32_to_f16(2.0f / 31.0f));
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)j * d + -1.0f);
    /* A constant block: d = 0, every value comes back as m. */
    for (int j = 0; j < 32; j++) x[j] = 0.375f;
    ig_quantize_row(IG_TYPE_Q5_1, x, b, 32);
    ig_dequantize_row(IG_TYPE_Q5_1, b, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.375f);
}

/* The integer dot against Q8_0 activations equals the double dot of the
 * dequantized operands up to float rounding of the per-block terms. */
IG_TEST(quant_q5_1_dot) {
    enum { N = 640 };
    float w[N], x[N], wd[N], xd[N];
    uint8_t row[N / 32 * 24];
    ig_block_q8_0 xq[N / 32];
    fill_weights(w, N);
    fill_activations(x, N);
    for (int i = 0; i < 32; i++) w[i] += 3.0f; /* a block far from zero: m matters */
    ig_quantize_row(IG_TYPE_Q5_1, w, row, N);
    ig_quantize_row_q8_0_act(x, xq, N);
    ig_dequantize_row(IG_TYPE_Q5_1, row, wd, N);
    ig_dequantize_row(IG_TYPE_Q8_0, xq, xd, N);
    double ref = 0.0, mag = 0.0;
    for (int i = 0; i < N; i++) {
        ref += (double)wd[i] * xd[i];
        mag += fabs((double)wd[i] * xd[i]);
    }
    const float got = ig_vec_dot_q5_1_q8_0(row, xq, N);
    CHECK_NEAR(got, ref, mag * 4 * (N / 32) * 0x1p-24 + 1e-30);
    CHECK(fabs(ref) > 1e-3);
}
