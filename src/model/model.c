/* Model loading: opens a GGUF file or an HF directory, reads the
 * hyper-parameters, binds every Gemma 3 tensor after checking its shape and
 * type, and builds the tokenizer the file carries. */
#include "model/model.h"

#include "engine/backend.h"
#include "model/hparams.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_model_params ig_model_default_params(void) {
    ig_model_params p = {0};
    p.n_threads = 0;
    p.backend = IG_BACKEND_CPU;
    p.device = 0;
    return p;
}

const ig_tensor_table *ig_model_tensors(const ig_model *m) {
    return m->gguf ? &m->gguf->tensors : &m->hf->tensors;
}

const char *ig_model_format(const ig_model *m) { return m->gguf ? "gguf" : "safetensors"; }

static bool type_is_matrix_type(ig_dtype t) {
    switch (t) {
    case IG_TYPE_F32: case IG_TYPE_F16: case IG_TYPE_BF16: case IG_TYPE_Q8_0: case IG_TYPE_Q4_0:
    case IG_TYPE_Q5_0: case IG_TYPE_Q5_1: case IG_TYPE_Q4_K: case IG_TYPE_Q5_K: case IG_TYPE_Q6_K:
        return true;
    }
    return false;
}

/* Finds a 2-D tensor {ne0, ne1} by name. */
static ig_status bind_matrix(const ig_tensor_table *tt, const char *name, int64_t ne0, int64_t ne1,
                             const ig_tensor **out) {
    const ig_tensor *t = ig_tensor_find(tt, name);
    if (!t) return ig_fail(IG_ERR_FORMAT, "missing tensor %s", name);
    if (t->n_dims != 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
        return ig_fail(IG_ERR_FORMAT, "tensor %s has shape [%lld, %lld] (%d dims), expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)ne0,
                       (long long)ne1);
    if (!type_is_matrix_type(t->type))
        return ig_fail(IG_ERR_UNSUPPORTED, "tensor %s has unsupported type %s", name,
                       ig_dtype_name(t->type));
    *out = t;
    return IG_OK;
}

/* Copies a 1-D norm weight of n elements into dst as f32 (+1 for HF). */
static ig_status bind_norm(const ig_model *m, const char *name, int64_t n, float *dst) {
    const ig_tensor *t = ig_tensor_find(ig_model_tensors(m), name);
    if (!t) return ig_fail(IG_ERR_FORMAT, "missing tensor %s", name);
    if (t->n_dims != 1 || t->ne[0] != n)
        return ig_fail(IG_ERR_FORMAT, "tensor %s has %lld elements (%d dims), expected %lld", name,
                       (long long)t->ne[0], t->n_dims, (long long)n);
    if (n % (int64_t)ig_dtype_block_elems(t->type) != 0)
        return ig_fail(IG_ERR_FORMAT, "tensor %s: %lld elements do not fill %s blocks", name,
                       (long long)n, ig_dtype_name(t->type));
    ig_dequantize_row(t->type, t->data, dst, n);
    if (m->hf && m->hf->norm_plus_one)
        for (int64_t i = 0; i < n; i++) dst[i] += 1.0f;
    return IG_OK;
}

static ig_status bind_tensors(ig_model *m) {
    const ig_hparams *hp = &m->hp;
    const ig_tensor_table *tt = ig_model_tensors(m);
    const int64_t H = hp->n_embd, F = hp->n_ff, q_dim = (int64_t)hp->n_head * hp->head_dim,
                  k_dim = (int64_t)hp->n_head_kv * hp->head_dim,
                  v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v,
                  o_dim = (int64_t)hp->n_head * hp->head_dim_v;

    const ig_tensor *emb = ig_tensor_find(tt, "token_embd.weight");
    if (!emb) return ig_fail(IG_ERR_FORMAT, "missing tensor token_embd.weight");
    if (emb->n_dims != 2 || emb->ne[0] != H || emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return ig_fail(IG_ERR_FORMAT, "token_embd.weight has shape [%lld, %lld], expected [%lld, vocab]",
                       (long long)emb->ne[0], (long long)emb->ne[1], (long long)H);
    if (!type_is_matrix_type(emb->type))
        return ig_fail(IG_ERR_UNSUPPORTED, "token_embd.weight has unsupported type %s",
                       ig_dtype_name(emb->type));
    m->tok_embd = emb;
    m->hp.n_vocab = (int)emb->ne[1];
    if (m->hp.n_vocab_real <= 0 || m->hp.n_vocab_real > m->hp.n_vocab) m->hp.n_vocab_real = m->hp.n_vocab;
    const ig_tensor *out = ig_tensor_find(tt, "output.weight");
    if (out) IG_TRY(bind_matrix(tt, "output.weight", H, emb->ne[1], &m->output));
    else m->output = emb;

    /* One block for every norm vector: 4 H-wide per layer, 2 hd-wide, + final. */
    size_t per_layer = 4 * (size_t)H + 2 * (size_t)hp->head_dim;
    size_t total = per_layer * (size_t)hp->n_layer + (size_t)H;
    m->norm_storage = ig_calloc_array(total, sizeof(float));
    if (!m->norm_storage) return IG_ERR_NO_MEMORY;
    float *p = m->norm_storage;
    m->output_norm = p;
    p += H;
    IG_TRY(bind_norm(m, "output_norm.weight", H, m->output_norm));

    char name[128];
#define NAME(fmt) (snprintf(name, sizeof name, "blk.%d." fmt, l), name)
    for (int l = 0; l < hp->n_layer; l++) {
        ig_layer *ly = &m->layers[l];
        IG_TRY(bind_matrix(tt, NAME("attn_q.weight"), H, q_dim, &ly->wq));
        IG_TRY(bind_matrix(tt, NAME("attn_k.weight"), H, k_dim, &ly->wk));
        IG_TRY(bind_matrix(tt, NAME("attn_v.weight"), H, v_dim, &ly->wv));
        IG_TRY(bind_matrix(tt, NAME("attn_output.weight"), o_dim, H, &ly->wo));
        IG_TRY(bind_matrix(tt, NAME("ffn_gate.weight"), H, F, &ly->w_gate));
        IG_TRY(bind_matrix(tt, NAME("ffn_up.weight"), H, F, &ly->w_up));
        IG_TRY(bind_matrix(tt, NAME("ffn_down.weight"), F, H, &ly->w_down));
        ly->attn_norm = p, p += H;
        ly->post_attn_norm = p, p += H;
        ly->ffn_norm = p, p += H;
        ly->post_ffn_norm = p, p += H;
        ly->q_norm = p, p += hp->head_dim;
        ly->k_norm = p, p += hp->head_dim;
        IG_TRY(bind_norm(m, NAME("attn_norm.weight"), H, ly->attn_norm));
        IG_TRY(bind_norm(m, NAME("post_attention_norm.weight"), H, ly->post_attn_norm));
        IG_TRY(bind_norm(m, NAME("ffn_norm.weight"), H, ly->ffn_norm));
        IG_TRY(bind_norm(m, NAME("post_ffw_norm.weight"), H, ly->post_ffn_norm));
        IG_TRY(bind_norm(m, NAME("attn_q_norm.weight"), hp->head_dim, ly->q_norm));
        IG_TRY(bind_norm(m, NAME("attn_k_norm.weight"), hp->head_dim, ly->k_norm));
        ly->is_swa = hp->layer_is_swa[l] && hp->sliding_window > 0;
        ly->rope_base = ly->is_swa ? hp->rope_base_local : hp->rope_base_global;
        ly->rope_scale = ly->is_swa ? hp->rope_scale_local : hp->rope_scale_global;
        if (!(ly->rope_scale > 0)) ly->rope_scale = 1.0f;
        m->weight_bytes += ly->wq->nbytes + ly->wk->nbytes + ly->wv->nbytes + ly->wo->nbytes +
                           ly->w_gate->nbytes + ly->w_up->nbytes + ly->w_down->nbytes;
    }
#undef NAME
    m->weight_bytes += m->output->nbytes;
    return IG_OK;
}

static ig_status load_gguf(ig_model *m, const char *path) {
    IG_TRY(gguf_open(path, &m->gguf));
    IG_TRY(hparams_from_gguf(m->gguf, &m->hp)); /* (checks the architecture) */
    if (gguf_find(m->gguf, "tokenizer.ggml.tokens")) {
        IG_TRY(ig_tokenizer_from_gguf(m->gguf, &m->tokenizer));
        gguf_str tmpl;
        if (gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl)) {
            m->chat_template = ig_strndup(tmpl.ptr, tmpl.len);
            if (!m->chat_template) return IG_ERR_NO_MEMORY;
        }
    }
    return IG_OK;
}

static ig_status load_hf(ig_model *m, const char *dir) {
    IG_TRY(hf_open(dir, &m->hf));
    m->hp = m->hf->hparams;
    if (m->hf->tokenizer_json_path)
        IG_TRY(ig_tokenizer_from_hf_json(m->hf->tokenizer_json_path, &m->tokenizer));
    if (m->hf->chat_template) {
        m->chat_template = ig_strdup(m->hf->chat_template);
        if (!m->chat_template) return IG_ERR_NO_MEMORY;
    }
    return IG_OK;
}

ig_status ig_model_load(const char *path, const ig_model_params *params, ig_model **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "ig_model_load: out is NULL");
    *out = NULL;
    if (!path) return ig_fail(IG_ERR_INVALID_ARG, "ig_model_load: path is NULL");
    ig_clear_error();
    ig_model *m = ig_calloc_array(1, sizeof *m);
    if (!m) return IG_ERR_NO_MEMORY;
    m->params = params ? *params : ig_model_default_params();
    if (m->params.n_threads <= 0) m->params.n_threads = ig_physical_cores();
    if (m->params.n_threads > 512) m->params.n_threads = 512;
    ig_status st;
    m->path = ig_strdup(path);
    if (!m->path) {
        st = IG_ERR_NO_MEMORY;
        goto fail;
    }
    st = ig_path_is_dir(path) ? load_hf(m, path) : load_gguf(m, path);
    if (st != IG_OK) goto fail;
    st = hparams_validate(&m->hp);
    if (st != IG_OK) goto fail;
    m->arch = ig_arch_find(m->hp.arch, strlen(m->hp.arch));
    if (!m->arch) {
        st = ig_fail(IG_ERR_UNSUPPORTED, "architecture '%s' is not supported", m->hp.arch);
        goto fail;
    }
    st = ig_model_quantize_weights(m);
    if (st != IG_OK) goto fail;
    st = bind_tensors(m);
    if (st != IG_OK) goto fail;
    st = ig_model_attach_vision(m);
    if (st != IG_OK) goto fail;
    if (m->tokenizer) {
        int32_t eot = ig_tokenizer_eot(m->tokenizer);
        if (eot >= 0) m->hp.eot_id = eot;
        if (m->hp.bos_id < 0) m->hp.bos_id = ig_tokenizer_bos(m->tokenizer);
        if (m->hp.eos_id < 0) m->hp.eos_id = ig_tokenizer_eos(m->tokenizer);
        int tv = ig_tokenizer_n_vocab(m->tokenizer);
        if (tv > 0 && tv < m->hp.n_vocab_real) m->hp.n_vocab_real = tv;
    }
    *out = m;
    return IG_OK;
fail:
    if (st != IG_ERR_NO_MEMORY || *ig_last_error()) ig_fail_wrap(st, "%s", path);
    ig_model_free(m);
    return st;
}

ig_status ig_model_set_device_tuning(ig_model *m, const char *spec) {
    if (!m) return ig_fail(IG_ERR_INVALID_ARG, "ig_model_set_device_tuning: model is NULL");
    if (m->device) return ig_fail(IG_ERR_INVALID_ARG, "the device tuning is set before the model's first context");
    char *copy = NULL;
    if (spec && *spec && !(copy = ig_strdup(spec))) return IG_ERR_NO_MEMORY;
    free(m->device_tuning);
    m->device_tuning = copy;
    return IG_OK;
}

bool ig_model_batch_invariant(const ig_model *m) {
    return m && m->device && m->device->ops->batch_invariant && m->device->ops->batch_invariant(m->device);
}

void ig_model_free(ig_model *m) {
    if (!m) return;
    ig_device_free(m->device);
    ig_vision_free(m->vision);
    ig_tokenizer_free(m->tokenizer);
    free(m->chat_template);
    free(m->norm_storage);
    if (m->gguf) gguf_close(m->gguf);
    if (m->hf) hf_close(m->hf);
    ig_aligned_free(m->quant_storage);
    free(m->path);
    free(m->device_tuning);
    free(m);
}

const ig_hparams *ig_model_hparams(const ig_model *m) { return &m->hp; }
size_t ig_model_weight_bytes(const ig_model *m) { return m->weight_bytes; }
const ig_tokenizer *ig_model_tokenizer(const ig_model *m) { return m->tokenizer; }
const char *ig_model_chat_template(const ig_model *m) { return m->chat_template; }
