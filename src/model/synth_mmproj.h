/* Synthetic Gemma 3 vision towers: an mmproj GGUF with random weights, laid
 * out as llama.cpp's converter writes one (general.architecture = clip,
 * clip.projector_type = gemma3, v.* and mm.* tensors, 1-D tensors and the
 * position embeddings in F32, the patch kernel and the projection in F16,
 * the layers' matrices in F16 or Q8_0; a matrix whose rows are not a whole
 * number of Q8_0 blocks, such as ffn_down at the released shapes, stays
 * F16 as llama.cpp's quantizer leaves it), so that ignis and llama.cpp's
 * mtmd both load it. Weights ~ N(0, 1/fan_in) (uniform draws of that
 * variance), biases and position embeddings small, norm weights near 1.
 * For benchmarks: the embeddings are noise. */
#ifndef IG_SYNTH_MMPROJ_H
#define IG_SYNTH_MMPROJ_H

#include "model/gguf_write.h"

#include <stdio.h>

typedef struct ig_synth_mmproj_params {
    int image_size, patch, width, n_ff, n_layer, n_head;
    int pool;      /* patches per side of one image token (4 in the releases) */
    int n_embd;    /* the text model's width: the projection's output */
    ig_dtype type; /* the layers' matrices: IG_TYPE_F16 or IG_TYPE_Q8_0 */
    uint64_t seed;
} ig_synth_mmproj_params;

/* The released shapes (image 896, patch 14, width 1152, MLP 4304, 27
 * layers, 16 heads, 256 tokens per image), F16, for a text width. */
ig_synth_mmproj_params ig_synth_mmproj_released(int n_embd);

/* Checks p; the file's size in bytes (*size, may be NULL). */
ig_status ig_synth_mmproj_check(const ig_synth_mmproj_params *p, uint64_t *size);
/* Writes the file to fp (the caller opens and closes it). */
ig_status ig_synth_mmproj_write(const ig_synth_mmproj_params *p, FILE *fp);

#endif
