/* Image rows of `ignis bench` (bench_image.c). */
#ifndef IG_CLI_BENCH_IMAGE_H
#define IG_CLI_BENCH_IMAGE_H

#include "ignis.h"

#include <jansson.h>

/* Image encode (the vision tower on preprocessed pixels) and the prefill of
 * the image's tokens (after a short untimed text prefix), reps times each,
 * with n_threads; then the tower's weight and activation bytes. Rows are
 * printed and appended to results. 0 on success. */
int bench_image_run(ig_model *model, const char *image, int n_threads, int reps, int n_batch, ig_kv_type kv,
                    json_t *results);

#endif
