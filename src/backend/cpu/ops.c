/* Portable elementwise kernels (the reference numerics of the CPU ops). */
#include "backend/cpu/matmul.h"

#include <math.h>

void ig_geglu_scalar(float *g, const float *u, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * u[i];
    }
}

void ig_rmsnorm_scalar(const float *x, float *y, const float *w, int d, float eps, bool add) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / d + eps));
    if (add)
        for (int i = 0; i < d; i++) y[i] += x[i] * scale * w[i];
    else
        for (int i = 0; i < d; i++) y[i] = x[i] * scale * w[i];
}

void ig_to_f16_scalar(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ig_f32_to_f16(x[i]);
}
