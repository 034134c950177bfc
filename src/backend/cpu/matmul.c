/* Matrix products on the CPU: generic path that dequantizes one weight row
 * at a time into scratch and dots it with every token of the batch, so each
 * weight byte is read once per step whatever the batch size. */
#include "backend/cpu/cpu_ops.h"

#include <stdint.h>

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
        s4 += a[i + 4] * b[i + 4];
        s5 += a[i + 5] * b[i + 5];
        s6 += a[i + 6] * b[i + 6];
        s7 += a[i + 7] * b[i + 7];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

void ig_cpu_matmul_rows(const ig_tensor *w, const float *x, int n, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, ig_cpu_scratch *scratch) {
    const int64_t k = w->ne[0];
    const size_t row_bytes = w->nbytes / (size_t)w->ne[1];
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
        const float *wr;
        if (w->type == IG_TYPE_F32 && (uintptr_t)row % sizeof(float) == 0) {
            wr = row;
        } else {
            ig_dequantize_row(w->type, row, scratch->f, k);
            wr = scratch->f;
        }
        for (int t = 0; t < n; t++) y[t * ldy + r] = dot_f32(wr, x + t * ldx, k);
    }
}
