/* A named weight tensor that points into a mapped model file. Shapes use
 * GGUF order: ne[0] is the contiguous (fastest) dimension, so a matrix of
 * `out` rows of `in` values has ne = {in, out}. */
#ifndef IG_TENSOR_H
#define IG_TENSOR_H

#include "quant/quant.h"

#include <stddef.h>
#include <stdint.h>

#define IG_MAX_DIMS 4

typedef struct ig_tensor {
    char *name;          /* owned by the table; GGUF-style name */
    ig_dtype type;
    int n_dims;
    int64_t ne[IG_MAX_DIMS]; /* unused dims are 1 */
    const void *data;    /* inside the mapping, never copied */
    size_t nbytes;
} ig_tensor;

typedef struct ig_tensor_table {
    ig_tensor *items;
    size_t count;
} ig_tensor_table;

/* Linear search by exact name; NULL if absent. */
const ig_tensor *ig_tensor_find(const ig_tensor_table *t, const char *name);
/* Number of elements (product of ne); the loaders guarantee no overflow. */
int64_t ig_tensor_nelements(const ig_tensor *t);

#endif
