/* The vision tower of a Gemma 3 vision-language model: a SigLIP encoder
 * and the multimodal projector, loaded from a Hugging Face checkpoint
 * (vision_tower.vision_model.*, multi_modal_projector.*) or from
 * llama.cpp's mmproj GGUF (v.*, mm.*). Small vectors (biases, norms, the
 * position embeddings, the patch kernel, the projection) are f32 copies;
 * the layers' matrices stay in the mapped file, in any type the CPU matmul
 * kernels take (f32, f16, bf16, q8_0, ...). */
#ifndef IG_VISION_H
#define IG_VISION_H

#include "model/gguf.h"
#include "model/hf.h"

typedef struct ig_vision_layer {
    const ig_tensor *wq, *wk, *wv, *wo, *fc1, *fc2; /* ne = {in, out} */
    float *bq, *bk, *bv, *bo, *b1, *b2;
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} ig_vision_layer;

typedef struct ig_vision {
    int image_size, patch, width, n_ff, n_layer, n_head;
    int side;      /* patches per side */
    int pool;      /* pooling kernel (patches per side of one token) */
    int n_tokens;  /* embeddings per image: (side / pool)^2 */
    int n_embd;    /* text model width */
    float eps;     /* LayerNorm and projector RMSNorm epsilon */
    int32_t image_id, boi_id, eoi_id;
    float *patch_w;  /* [width][3][patch][patch] */
    float *patch_b;  /* [width] */
    float *pos;      /* [side*side][width] */
    float *post_w, *post_b;
    float *mm_norm;  /* [width], 1 + w applied */
    float *mm_proj_t; /* [n_embd][width]: the projection, one row per output */
    ig_vision_layer *layers;
    float **allocs;  /* every f32 copy, freed with the tower */
    int n_allocs, cap_allocs;
    gguf_file *gguf; /* an mmproj file, owned; NULL for safetensors */
    char format[16]; /* "safetensors" or "mmproj" */
} ig_vision;

/* From an HF checkpoint's vision tensors and config.json (dir); *out is
 * NULL when the checkpoint has no vision tower. */
ig_status ig_vision_from_hf(const hf_model *hf, const char *dir, int n_embd, ig_vision **out);
/* From an mmproj GGUF; n_embd: the text model's width (checked). */
ig_status ig_vision_from_mmproj(const char *path, int n_embd, ig_vision **out);
void ig_vision_free(ig_vision *v);

/* Preprocessed pixels [3][S][S] → tower output [side^2][width] (optional)
 * and projected embeddings [n_tokens][n_embd]. CPU, n_threads threads. */
ig_status ig_vision_encode(const ig_vision *v, const float *pixels, int n_threads, float *tower_out,
                           float *embd);

/* Bytes of the tower's weights: the layers' matrices as stored, plus the
 * f32 copies. */
size_t ig_vision_weight_bytes(const ig_vision *v);
/* Peak bytes ig_vision_encode allocates for its activations and scratch
 * with n_threads threads (the caller's pixels and outputs not included). */
size_t ig_vision_act_bytes(const ig_vision *v, int n_threads);

/* The encoder's attention alone, every key visible: o = softmax(q kᵀ /
 * sqrt(hd)) v per head, [n][width] row-major (hd = width / n_head), one
 * thread. isa: a kernel set (backend/cpu/matmul.h), NULL for the selected
 * one. For tests. */
struct ig_mm_isa;
ig_status ig_vision_attention(const struct ig_mm_isa *isa, const float *q, const float *k, const float *v, float *o,
                              int n, int width, int n_head);

#endif
