/* Importance matrices: per weight matrix, the sum over the tokens of a text
 * of the squares of each input channel of its matmul, and the number of
 * tokens (llama.cpp's llama-imatrix statistics). `ignis imatrix` collects
 * them; `ignis quantize --imatrix` turns them into per-column weights of
 * the quantizers' error (sum / count, as llama-quantize does).
 *
 * Files: written as llama.cpp's GGUF imatrix (general.type = "imatrix",
 * imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size; per weight W
 * the F32 tensors "W.in_sum2" [n] and "W.counts" [1], in name order); read
 * in that form and in llama.cpp's legacy binary form (.dat: per entry the
 * mean square times the number of chunks, and that number). */
#ifndef IG_IMATRIX_H
#define IG_IMATRIX_H

#include "ignis.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ig_imatrix_entry {
    char *name;    /* the weight's name */
    int64_t n;     /* input channels: the weight's ne[0] */
    double *sum2;  /* [n] sums of squares (legacy files: mean squares * count) */
    int64_t count; /* tokens seen (legacy files: chunks) */
} ig_imatrix_entry;

typedef struct ig_imatrix {
    ig_imatrix_entry *entries;
    size_t n_entries, cap;
    char **datasets; /* the texts it was computed on */
    size_t n_datasets;
    uint32_t chunk_count, chunk_size;
    bool legacy; /* read from a .dat file */
} ig_imatrix;

ig_imatrix *ig_imatrix_new(void);
void ig_imatrix_free(ig_imatrix *im);

/* Adds rows x width activations (row-major) to the entry of `name` (made
 * on first use; a later width must match). */
ig_status ig_imatrix_add(ig_imatrix *im, const char *name, const float *x, int rows, int width);
/* Records a dataset name (copied). */
ig_status ig_imatrix_add_dataset(ig_imatrix *im, const char *name);
/* Writes the GGUF form to fp (entries sorted by name; non-finite sums are
 * refused before anything is written). */
ig_status ig_imatrix_write(ig_imatrix *im, FILE *fp);
/* Reads a GGUF or legacy imatrix file. IG_ERR_FORMAT for a malformed or
 * empty one, IG_ERR_UNSUPPORTED for per-expert (3-D) entries. */
ig_status ig_imatrix_load(const char *path, ig_imatrix **out);

const ig_imatrix_entry *ig_imatrix_find(const ig_imatrix *im, const char *name);
/* llama-quantize's importance of each of e's n channels: sum / count in
 * f32 (1 where the count is 0; legacy: value / chunks, or the value itself
 * when chunks is 0). out has e->n floats. */
void ig_imatrix_weights(const ig_imatrix *im, const ig_imatrix_entry *e, float *out);

#endif
