/* Helpers shared by the libFuzzer targets of this directory. Each target
 * defines LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize where it needs
 * set-up); input comes from libFuzzer, so nothing here trusts it. */
#ifndef IG_FUZZ_COMMON_H
#define IG_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A NUL-terminated copy of data[0..size) (NULL when out of memory). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return NULL;
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Splits data at its first NUL byte: the part before it goes to *a, the
 * rest (after the NUL) to *b; without a NUL, all of it is a and b is empty. */
static inline void fuzz_split(const uint8_t *data, size_t size, const uint8_t **a, size_t *na,
                              const uint8_t **b, size_t *nb) {
    const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
    *a = data;
    if (!nul) {
        *na = size;
        *b = data + size;
        *nb = 0;
        return;
    }
    *na = (size_t)(nul - data);
    *b = nul + 1;
    *nb = size - *na - 1;
}

#endif
