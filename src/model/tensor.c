#include "model/tensor.h"

#include <string.h>

const ig_tensor *ig_tensor_find(const ig_tensor_table *t, const char *name) {
    for (size_t i = 0; i < t->count; i++)
        if (!strcmp(t->items[i].name, name)) return &t->items[i];
    return NULL;
}

int64_t ig_tensor_nelements(const ig_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < IG_MAX_DIMS; i++) n *= t->ne[i];
    return n;
}
