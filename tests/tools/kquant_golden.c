/* Writes tests/fixtures/kquant/golden.bin: rows of 256 floats and the Q4_K,
 * Q5_K and Q6_K blocks that ggml's reference quantizers (the ones
 * llama-quantize uses without an importance matrix) make of them. A
 * reference tool (never part of ignis), built against the libggml-base of
 * scripts/build-llamacpp.sh (B: its bin directory):
 *
 *   cc -O2 -std=c11 -o kquant_golden tests/tools/kquant_golden.c \
 *      -LB -lggml-base -lm -Wl,-rpath,B
 *   ./kquant_golden tests/fixtures/kquant/golden.bin
 *
 * Layout: "IGKQ", u32 row count, then per row 256 f32 (little-endian), the
 * 144-byte Q4_K, 176-byte Q5_K and 210-byte Q6_K block. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void quantize_row_q4_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q6_K_ref(const float *x, void *y, int64_t k);

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double uni(void) { /* [0, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double gauss(void) {
    const double u = uni() + 1e-12, v = uni();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#define NROWS 20

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kquant_golden OUT.bin\n");
        return 2;
    }
    static float x[NROWS][256];
    for (int r = 0; r < NROWS; r++)
        for (int i = 0; i < 256; i++) {
            float v;
            switch (r) {
            case 0: v = 0.0f; break;                                      /* all zeros */
            case 1: v = 0.37f; break;                                     /* constant */
            case 2: v = -2.5f; break;                                     /* negative constant */
            case 3: v = (float)(0.02 * gauss()); break;                   /* a weight row */
            case 4: v = (float)(2 * uni() - 1); break;                    /* uniform */
            case 5: v = (float)(3e4 * gauss()); break;                    /* huge */
            case 6: v = (float)(1e-6 * gauss()); break;                   /* small */
            case 7: v = i == 77 ? 3.0f : (float)(0.02 * gauss()); break;  /* one outlier */
            case 8: v = i == 200 ? -5.0f : (float)(0.02 * gauss()); break; /* negative outlier */
            case 9: v = (float)(0.1 + 0.9 * uni()); break;                /* all positive */
            case 10: v = (float)(-0.1 - 0.9 * uni()); break;              /* all negative */
            case 11: v = i % 37 == 0 ? (float)gauss() : 0.0f; break;      /* sparse */
            case 12: v = i < 128 ? 0.0f : (float)(0.05 * gauss()); break; /* half zero */
            case 13: v = (float)(1e-30 * gauss()); break;                 /* near zero */
            case 14: v = (float)(gauss() * pow(10.0, (double)(i / 32) - 4)); break; /* 1e-4..1e3 */
            case 15: v = (float)((int)(uni() * 16) - 8); break;           /* on a grid */
            case 16: v = (float)(0.02 * gauss() + (i / 16 % 2 ? 0.05 : -0.05)); break;
            case 17: v = i % 2 ? 1.0f : -1.0f; break;                     /* two levels */
            case 18: v = (float)(i - 128) / 64.0f; break;                 /* ramp */
            default: v = (float)(0.5 * gauss() * gauss()); break;         /* heavy tails */
            }
            x[r][i] = v;
        }
    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    const uint32_t n = NROWS;
    fwrite("IGKQ", 1, 4, f);
    fwrite(&n, 4, 1, f);
    for (int r = 0; r < NROWS; r++) {
        unsigned char q4[144], q5[176], q6[210];
        quantize_row_q4_K_ref(x[r], q4, 256);
        quantize_row_q5_K_ref(x[r], q5, 256);
        quantize_row_q6_K_ref(x[r], q6, 256);
        fwrite(x[r], 4, 256, f);
        fwrite(q4, 1, sizeof q4, f);
        fwrite(q5, 1, sizeof q5, f);
        fwrite(q6, 1, sizeof q6, f);
    }
    return fclose(f) == 0 ? 0 : 1;
}
