/* Hugging Face checkpoint reader: a directory with config.json and
 * safetensors weights (one file or shards listed in
 * model.safetensors.index.json), memory-mapped. Tensor names are mapped to
 * the GGUF names (token_embd.weight, blk.N.attn_q.weight, ...); vision tensors
 * and a tied lm_head are skipped. Norm weights keep the HF convention
 * (applied as 1 + w): hf_model.norm_plus_one says so. */
#ifndef IG_HF_H
#define IG_HF_H

#include "core/util.h"
#include "model/tensor.h"

/* One safetensors file parsed from memory: tensors with their HF names. */
typedef struct st_file {
    ig_mapped_file map;
    bool owns_map;
    ig_tensor_table tensors; /* names as stored in the file */
} st_file;

ig_status st_parse(const uint8_t *data, size_t size, st_file **out);
ig_status st_open(const char *path, st_file **out);
void st_close(st_file *f);

typedef struct hf_model {
    st_file **shards;
    size_t n_shards;
    ig_tensor_table tensors; /* GGUF-style names; data points into shards */
    ig_hparams hparams;
    bool norm_plus_one;      /* always true for HF checkpoints */
    char *tokenizer_json_path;   /* dir/tokenizer.json if present, else NULL */
    char *chat_template;         /* from tokenizer_config.json, or NULL */
} hf_model;

ig_status hf_open(const char *dir, hf_model **out);
void hf_close(hf_model *m);

/* Maps an HF tensor name to the GGUF name. Returns false for tensors that
 * are skipped (vision tower, projector, lm_head) or unknown. */
bool hf_map_tensor_name(const char *hf_name, char *out, size_t cap);

#endif
