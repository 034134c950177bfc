/* What a benchmark step must move and compute, from the model's actual
 * tensors: the floors against which `ignis bench` quotes its speeds. */
#include "bench/bench.h"

#include "engine/kv_cache.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

/* llama.cpp's general.file_type values (enum llama_ftype). */
static const char *ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return NULL;
    }
}

void ig_bench_model_describe(const ig_model *m, ig_bench_model_info *out) {
    memset(out, 0, sizeof *out);
    const ig_hparams *hp = &m->hp;
    const ig_tensor_table *tt = ig_model_tensors(m);
    for (size_t i = 0; i < tt->count; i++) {
        out->n_params += (double)ig_tensor_nelements(&tt->items[i]);
        out->file_tensor_bytes += tt->items[i].nbytes;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const ig_layer *ly = &m->layers[l];
        const ig_tensor *mats[] = {ly->wq, ly->wk, ly->wv, ly->wo, ly->w_gate, ly->w_up, ly->w_down};
        for (size_t k = 0; k < IG_ARRAY_LEN(mats); k++)
            out->layer_matrix_params += (double)ig_tensor_nelements(mats[k]);
    }
    out->output_params = (double)ig_tensor_nelements(m->output);
    out->weight_bytes = m->weight_bytes;

    const char *label = NULL;
    uint32_t ft;
    if (m->gguf && gguf_get_u32(m->gguf, "general.file_type", &ft)) label = ftype_name(ft);
    if (!label && hp->n_layer > 0) label = ig_dtype_name(m->layers[0].w_gate->type);
    snprintf(out->type, sizeof out->type, "%s", label ? label : "?");
}

/* Keys a token at position pos sees in a layer with the given window. */
static double keys_seen(int64_t pos, int window) {
    int64_t n = pos + 1;
    if (window > 0 && n > window) n = window;
    return (double)n;
}

double ig_bench_step_bytes(const ig_model *m, ig_kv_type kv, const ig_bench_step *s) {
    const ig_hparams *hp = &m->hp;
    double row = (double)hp->n_head_kv * (hp->head_dim + hp->head_dim_v) * ig_kv_elem_size(kv);
    double kv_bytes = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int window = m->layers[l].is_swa ? hp->sliding_window : 0;
        /* rows attended by the last new token (every earlier one sees a
         * subset), plus the new rows written */
        kv_bytes += (keys_seen((int64_t)s->n_past + s->n_new - 1, window) + s->n_new) * row;
    }
    /* input embedding: one row per new token */
    double emb_row = (double)m->tok_embd->nbytes / (double)m->tok_embd->ne[1];
    return (double)m->weight_bytes + kv_bytes * s->n_seq + emb_row * s->n_new * s->n_seq;
}

double ig_bench_step_flops(const ig_model *m, const ig_bench_step *s) {
    const ig_hparams *hp = &m->hp;
    ig_bench_model_info info;
    ig_bench_model_describe(m, &info);
    double tokens = (double)s->n_new * s->n_seq;
    double flops = 2.0 * info.layer_matrix_params * tokens + 2.0 * info.output_params * s->n_out;
    double per_key = 2.0 * hp->n_head * (hp->head_dim + hp->head_dim_v);
    double keys = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int window = m->layers[l].is_swa ? hp->sliding_window : 0;
        for (int j = 0; j < s->n_new; j++) keys += keys_seen((int64_t)s->n_past + j, window);
    }
    return flops + per_key * keys * s->n_seq;
}
