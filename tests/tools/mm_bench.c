/* Times one CPU matmul kernel call (ig_mm_run: activation quantization and
 * the product) on a single thread, best of REPS, so that two builds can be
 * compared on a busy machine (the best of many short runs is the one that
 * was not interrupted). Not part of ignis; build it against a build tree:
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -I src -I include tests/tools/mm_bench.c \
 *      build/libignis_static.a -lm -lpthread -o mm_bench
 *   mm_bench ISA TYPE K ROWS N REPS
 *
 * ISA: scalar, avx2, avx512, neon; TYPE: a ggml type number (0 F32, 1 F16,
 * 8 Q8_0, 6 Q5_0, 12 Q4_K, 14 Q6_K, ...). Prints the best time in
 * microseconds. Rows past the 64th repeat the first 64 (the values do not
 * matter to the kernels' speed). */
#include "backend/cpu/matmul.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint32_t g_s = 1;
static float frand(void) {
    g_s = g_s * 1664525u + 1013904223u;
    return (float)(g_s >> 8) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: mm_bench ISA TYPE K ROWS N REPS\n");
        return 2;
    }
    const ig_dtype t = (ig_dtype)atoi(argv[2]);
    const int64_t k = atoll(argv[3]);
    const int rows = atoi(argv[4]), n = atoi(argv[5]), reps = atoi(argv[6]);
    const ig_mm_isa *isas[8], *isa = NULL;
    const int ni = ig_mm_isa_available(isas, 8);
    for (int i = 0; i < ni; i++)
        if (!strcmp(isas[i]->name, argv[1])) isa = isas[i];
    size_t rb = 0;
    if (!isa || !ig_mm_type_supported(t) || !ig_dtype_row_bytes(t, k, &rb) || rows < 1 || n < 1 || reps < 1) {
        fprintf(stderr, "mm_bench: unknown ISA, unsupported type or bad sizes\n");
        return 2;
    }
    const ig_act_kind kind = ig_mm_act_kind(t);
    const size_t act_bytes = kind == IG_ACT_F32 ? 64 : ig_mm_act_bytes(kind, k, n, ig_mm_use_groups(isa, t, n));
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc(sizeof(float) * (size_t)k), *x = malloc(sizeof(float) * (size_t)k * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)rows * (size_t)n);
    uint8_t *act = ig_aligned_alloc(64, ig_mm_align64(act_bytes));
    void *scratch = ig_aligned_alloc(64, ig_mm_align64(isa->scratch_bytes(k)));
    uint8_t *tmp = malloc(ig_mm_row_stride(IG_ACT_Q8_K, k) + ig_mm_row_stride(IG_ACT_Q8_0, k) + 64);
    if (!w || !wf || !x || !y || !act || !scratch || !tmp) {
        fprintf(stderr, "mm_bench: out of memory\n");
        return 1;
    }
    for (int r = 0; r < rows; r++) {
        if (r < 64) {
            for (int64_t i = 0; i < k; i++) wf[i] = frand();
            ig_quantize_row(t, wf, w + rb * (size_t)r, k);
        } else {
            memcpy(w + rb * (size_t)r, w + rb * (size_t)(r % 64), rb);
        }
    }
    for (int64_t i = 0; i < k * n; i++) x[i] = frand();
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        const double t0 = now();
        ig_mm_run(isa, t, w, k, 0, rows, x, n, y, rows, act, scratch, tmp);
        const double d = now() - t0;
        if (d < best) best = d;
    }
    printf("%s %s k=%lld rows=%d n=%d: best %.1f us (y[0] = %.6g)\n", isa->name, ig_dtype_name(t), (long long)k,
           rows, n, best * 1e6, (double)y[0]);
    free(w);
    free(wf);
    free(x);
    free(y);
    ig_aligned_free(act);
    ig_aligned_free(scratch);
    free(tmp);
    return 0;
}
