/* A loaded model: its family, hyper-parameters and per-layer views of the
 * weights inside the mapped file(s) (the Gemma 3 layout). Norm weights are
 * the only copies: they are tiny, and converting them to f32 with the HF
 * "+1" folded in gives every backend one convention. */
#ifndef IG_MODEL_H
#define IG_MODEL_H

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "model/tensor.h"

typedef struct ig_layer {
    /* matrices, GGUF shapes ne = {in, out} */
    const ig_tensor *wq;     /* {H, nH*hd} */
    const ig_tensor *wk;     /* {H, nKV*hd} */
    const ig_tensor *wv;     /* {H, nKV*hdv} */
    const ig_tensor *wo;     /* {nH*hdv, H} */
    const ig_tensor *w_gate; /* {H, F} */
    const ig_tensor *w_up;   /* {H, F} */
    const ig_tensor *w_down; /* {F, H} */
    /* f32 norm weights with the +1 applied */
    float *attn_norm;      /* [H] */
    float *q_norm;         /* [hd] */
    float *k_norm;         /* [hd] */
    float *post_attn_norm; /* [H] */
    float *ffn_norm;       /* [H] */
    float *post_ffn_norm;  /* [H] */
    bool is_swa;
    float rope_base;
    float rope_scale; /* linear factor: angle uses pos / rope_scale */
} ig_layer;

struct ig_model {
    const ig_arch *arch; /* the family: its graph builder */
    ig_hparams hp;
    ig_model_params params;
    gguf_file *gguf; /* exactly one of gguf / hf is set */
    hf_model *hf;
    const ig_tensor *tok_embd; /* {H, n_vocab} */
    const ig_tensor *output;   /* {H, n_vocab}; == tok_embd when tied */
    float *output_norm;        /* [H] */
    ig_layer layers[IG_MAX_LAYERS];
    float *norm_storage;       /* backing store of every norm vector */
    ig_tokenizer *tokenizer;   /* may be NULL */
    char *chat_template;       /* may be NULL */
    size_t weight_bytes;
    char *path;
    /* where the model's graphs run, with what its contexts share there (a
     * GPU's copies of the weights); made by the first context */
    struct ig_device *device;
    /* overrides of the GPU device's tuning, "name=value,..." (the Vulkan
     * backend's vk_tuning.h), or NULL; read when the device is made */
    char *device_tuning;
    /* the vision tower and projector (vision-language models), or NULL */
    struct ig_vision *vision;
    /* the weights quantized at load (params.quant), or NULL */
    uint8_t *quant_storage;
};

/* Quantizes the float weight matrices in memory when m->params.quant asks
 * for it (model_quant.c); before the tensors are bound. */
ig_status ig_model_quantize_weights(ig_model *m);

/* Binds the vision tower of a Hugging Face checkpoint, if it has one. */
ig_status ig_model_attach_vision(ig_model *m);
/* The first mmproj*.gguf (by name) in the directory of model_path, or
 * *out = NULL; free() it. */
ig_status ig_mmproj_next_to(const char *model_path, char **out);
void ig_vision_free(struct ig_vision *v);

/* Sets the device tuning overrides (copied; NULL clears them). Only before
 * the model's first context: IG_ERR_INVALID_ARG once its device exists.
 * For tests and the CLI's --debug-vk-tuning; not part of the public API. */
ig_status ig_model_set_device_tuning(ig_model *m, const char *spec);

/* Whether the model's contexts are batch-invariant (a token's logits the
 * same bits whatever shares its step); false before its first context. */
bool ig_model_batch_invariant(const ig_model *m);

/* Table of tensors of the model's source file. */
const ig_tensor_table *ig_model_tensors(const ig_model *m);
const char *ig_model_format(const ig_model *m); /* "gguf" or "safetensors" */

#endif
