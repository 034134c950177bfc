/* safetensors, HF checkpoint directories and config.json hparams: the
 * tiny fixtures, inline configs of every style, hand-built sharded
 * checkpoints, and corrupted inputs. */
#define _XOPEN_SOURCE 700
#include "test.h"

#include "model/hf.h"
#include "model/hparams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------- */

static char *fixture_dir(const char *model, const char *variant) {
    static char path[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/hf/%s/%s", ig_test_fixtures(), model, variant);
    return path[k];
}

/* A safetensors image: 8-byte length + header + data. */
static uint8_t *st_image(const char *header, const void *data, size_t data_len, size_t *size) {
    size_t hn = strlen(header);
    *size = 8 + hn + data_len;
    uint8_t *p = malloc(*size ? *size : 1);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(p + 8, header, hn);
    if (data_len) memcpy(p + 8 + hn, data, data_len);
    return p;
}

static ig_status st_parse_copy(const uint8_t *img, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, img, n);
    st_file *f = NULL;
    ig_status st = st_parse(c, n, &f);
    if (st == IG_OK) {
        /* whatever was accepted must lie inside the copy */
        for (size_t i = 0; i < f->tensors.count; i++) {
            const ig_tensor *t = &f->tensors.items[i];
            const uint8_t *d = t->data;
            if (d < c || d + t->nbytes > c + n)
                ig_test_fail_at(__FILE__, __LINE__, "tensor '%s' outside the image", t->name);
        }
    }
    st_close(f);
    free(c);
    return st;
}

/* Temporary directories for hand-built checkpoints. */
typedef struct tmpdir {
    char path[256];
    char files[16][64];
    int n;
} tmpdir;

static bool tmp_make(tmpdir *d) {
    const char *base = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/ignis_hf_XXXXXX", base && *base ? base : "/tmp");
    d->n = 0;
    return mkdtemp(d->path) != NULL;
}

static void tmp_write(tmpdir *d, const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d->path, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        ig_test_fail_at(__FILE__, __LINE__, "cannot write %s", p);
        return;
    }
    fwrite(data, 1, n, f);
    fclose(f);
    bool known = false;
    for (int i = 0; i < d->n; i++) known |= !strcmp(d->files[i], name);
    if (!known && d->n < 16) snprintf(d->files[d->n++], sizeof d->files[0], "%s", name);
}

static void tmp_write_str(tmpdir *d, const char *name, const char *text) {
    tmp_write(d, name, text, strlen(text));
}

static void tmp_remove(tmpdir *d, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d->path, name);
    unlink(p);
}

static void tmp_cleanup(tmpdir *d) {
    for (int i = 0; i < d->n; i++) tmp_remove(d, d->files[i]);
    rmdir(d->path);
}

/* ---- the tiny fixtures ------------------------------------------------- */

static uint16_t bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static void check_layers(const ig_hparams *hp, int global_layer) {
    for (int l = 0; l < hp->n_layer; l++) CHECK_EQ_INT(hp->layer_is_swa[l], l != global_layer);
}

IG_TEST(hf_fixture_tiny27b) {
    hf_model *m32 = NULL, *m16 = NULL;
    REQUIRE_OK(hf_open(fixture_dir("tiny-27b-like", "f32"), &m32));
    ig_status st = hf_open(fixture_dir("tiny-27b-like", "bf16"), &m16);
    CHECK_STATUS(st, IG_OK);
    if (st != IG_OK) {
        hf_close(m32);
        return;
    }
    const ig_hparams *hp = &m32->hparams;
    CHECK_EQ_INT(hp->n_vocab, 512);
    CHECK_EQ_INT(hp->n_vocab_real, 512);
    CHECK_EQ_INT(hp->n_embd, 128);
    CHECK_EQ_INT(hp->n_ff, 320);
    CHECK_EQ_INT(hp->n_layer, 7);
    CHECK_EQ_INT(hp->n_head, 4);
    CHECK_EQ_INT(hp->n_head_kv, 2);
    CHECK_EQ_INT(hp->head_dim, 32);
    CHECK_EQ_INT(hp->head_dim_v, 32);
    CHECK_EQ_INT(hp->n_ctx_train, 4096);
    CHECK_EQ_INT(hp->sliding_window, 8);
    check_layers(hp, 5);
    CHECK_NEAR(hp->rope_base_global, 1e6, 0);
    CHECK_NEAR(hp->rope_base_local, 1e4, 0);
    CHECK_NEAR(hp->rope_scale_global, 8, 0);
    CHECK_NEAR(hp->rope_scale_local, 1, 0);
    CHECK_NEAR(hp->attn_scale, 1.0 / sqrt(48.0), 1e-7);
    CHECK_NEAR(hp->rms_eps, 1e-6, 1e-12);
    CHECK_EQ_INT(hp->bos_id, 2);
    CHECK_EQ_INT(hp->eos_id, 1);
    CHECK_EQ_INT(hp->pad_id, 0);
    CHECK(m32->norm_plus_one);
    CHECK(m32->tokenizer_json_path == NULL);
    CHECK(m32->chat_template == NULL);
    CHECK(memcmp(&m32->hparams, &m16->hparams, sizeof(ig_hparams)) == 0);

    CHECK_EQ_INT(m32->n_shards, 1);
    CHECK_EQ_INT(m32->tensors.count, 7 * 13 + 2);
    CHECK_EQ_INT(m16->tensors.count, 7 * 13 + 2);
    for (size_t i = 0; i < m32->tensors.count; i++) {
        CHECK_EQ_INT(m32->tensors.items[i].type, IG_TYPE_F32);
        const ig_tensor *t16 = ig_tensor_find(&m16->tensors, m32->tensors.items[i].name);
        REQUIRE(t16);
        CHECK_EQ_INT(t16->type, IG_TYPE_BF16);
        CHECK(memcmp(t16->ne, m32->tensors.items[i].ne, sizeof t16->ne) == 0);
        CHECK_EQ_INT(t16->nbytes * 2, m32->tensors.items[i].nbytes);
    }
    struct {
        const char *name;
        int64_t ne0, ne1;
    } shapes[] = {
        {"token_embd.weight", 128, 512},     {"output_norm.weight", 128, 1},
        {"blk.0.attn_q.weight", 128, 128},   {"blk.0.attn_k.weight", 128, 64},
        {"blk.3.attn_v.weight", 128, 64},    {"blk.6.attn_output.weight", 128, 128},
        {"blk.5.attn_q_norm.weight", 32, 1}, {"blk.5.attn_k_norm.weight", 32, 1},
        {"blk.1.ffn_gate.weight", 128, 320}, {"blk.1.ffn_up.weight", 128, 320},
        {"blk.2.ffn_down.weight", 320, 128}, {"blk.4.ffn_norm.weight", 128, 1},
        {"blk.4.attn_norm.weight", 128, 1},  {"blk.6.post_attention_norm.weight", 128, 1},
        {"blk.6.post_ffw_norm.weight", 128, 1},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(shapes); i++) {
        const ig_tensor *t = ig_tensor_find(&m32->tensors, shapes[i].name);
        if (!t) {
            ig_test_fail_at(__FILE__, __LINE__, "missing %s", shapes[i].name);
            continue;
        }
        CHECK_EQ_INT(t->ne[0], shapes[i].ne0);
        CHECK_EQ_INT(t->ne[1], shapes[i].ne1);
        CHECK_EQ_INT(t->n_dims, shapes[i].ne1 == 1 ? 1 : 2);
        CHECK_EQ_INT(t->nbytes, (size_t)(shapes[i].ne0 * shapes[i].ne1 * 4));
    }
    CHECK(ig_tensor_find(&m32->tensors, "blk.7.attn_q.weight") == NULL);
    /* zero copy: the embedding starts the data section (offset 0) */
    const ig_tensor *e32 = ig_tensor_find(&m32->tensors, "token_embd.weight");
    const ig_tensor *e16 = ig_tensor_find(&m16->tensors, "token_embd.weight");
    REQUIRE(e32 && e16);
    const uint8_t *map = m32->shards[0]->map.data;
    CHECK(e32->data == map + 8 + 9912);
    /* the bf16 file holds the f32 weights rounded to nearest even */
    int mismatches = 0;
    for (int i = 0; i < 512 * 128; i++) {
        float f;
        uint16_t h;
        memcpy(&f, (const uint8_t *)e32->data + 4 * i, 4);
        memcpy(&h, (const uint8_t *)e16->data + 2 * i, 2);
        mismatches += bf16_round(f) != h;
    }
    CHECK_EQ_INT(mismatches, 0);
    hf_close(m32);
    hf_close(m16);
}

IG_TEST(hf_fixture_tiny1b) {
    const char *variants[] = {"f32", "bf16"};
    for (int v = 0; v < 2; v++) {
        hf_model *m = NULL;
        REQUIRE_OK(hf_open(fixture_dir("tiny-1b-like", variants[v]), &m));
        const ig_hparams *hp = &m->hparams;
        CHECK_EQ_INT(hp->n_vocab, 384);
        CHECK_EQ_INT(hp->n_embd, 96);
        CHECK_EQ_INT(hp->n_ff, 256);
        CHECK_EQ_INT(hp->n_layer, 6);
        CHECK_EQ_INT(hp->n_head, 3);
        CHECK_EQ_INT(hp->n_head_kv, 1); /* MQA */
        CHECK_EQ_INT(hp->head_dim, 32);
        CHECK_EQ_INT(hp->sliding_window, 16);
        check_layers(hp, 5);
        CHECK_NEAR(hp->rope_scale_global, 1, 0);
        CHECK_NEAR(hp->rope_base_global, 1e6, 0);
        CHECK_NEAR(hp->rope_base_local, 1e4, 0);
        CHECK_NEAR(hp->attn_scale, 1.0 / sqrt(32.0), 1e-7);
        CHECK_EQ_INT(m->tensors.count, 6 * 13 + 2);
        const ig_tensor *k = ig_tensor_find(&m->tensors, "blk.0.attn_k.weight");
        REQUIRE(k);
        CHECK(k->ne[0] == 96 && k->ne[1] == 32);
        CHECK_EQ_INT(k->type, v == 0 ? IG_TYPE_F32 : IG_TYPE_BF16);
        const ig_tensor *e = ig_tensor_find(&m->tensors, "token_embd.weight");
        REQUIRE(e);
        CHECK(e->ne[0] == 96 && e->ne[1] == 384);
        hf_close(m);
    }
}

/* ---- config.json styles ------------------------------------------------ */

static const char *k_cfg_tf5 =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\","
    " \"vocab_size\": 262144, \"hidden_size\": 640, \"intermediate_size\": 2048,"
    " \"num_hidden_layers\": 18, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
    " \"head_dim\": 256, \"query_pre_attn_scalar\": 256, \"max_position_embeddings\": 32768,"
    " \"rms_norm_eps\": 1e-06, \"sliding_window\": 512,"
    " \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
    " \"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\","
    " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
    " \"full_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\","
    " \"sliding_attention\", \"sliding_attention\", \"full_attention\"],"
    " \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1000000.0, \"rope_type\": "
    "\"default\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}},"
    " \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null,"
    " \"bos_token_id\": 2, \"eos_token_id\": [1, 106], \"pad_token_id\": 0}";

IG_TEST(hf_config_transformers5) {
    ig_hparams hp;
    REQUIRE_OK(hparams_from_hf_config(k_cfg_tf5, &hp));
    CHECK_EQ_INT(hp.n_vocab, 262144);
    CHECK_EQ_INT(hp.n_vocab_real, 262144);
    CHECK_EQ_INT(hp.n_layer, 18);
    CHECK_EQ_INT(hp.n_ctx_train, 32768);
    /* layer_types wins over the default period: 5, 11, 14, 17 global */
    for (int l = 0; l < 18; l++)
        CHECK_EQ_INT(hp.layer_is_swa[l], !(l == 5 || l == 11 || l == 14 || l == 17));
    CHECK_NEAR(hp.rope_base_global, 1e6, 0);
    CHECK_NEAR(hp.rope_base_local, 1e4, 0);
    CHECK_NEAR(hp.rope_scale_global, 1, 0);
    CHECK_NEAR(hp.attn_scale, 1.0 / 16, 1e-9);
    CHECK_NEAR(hp.final_logit_softcap, 0, 0);
    CHECK_EQ_INT(hp.eos_id, 1);
    CHECK_EQ_INT(hp.eot_id, -1);
}

IG_TEST(hf_config_hub_style) {
    const char *cfg =
        "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\","
        " \"vocab_size\": 262144, \"hidden_size\": 1152, \"intermediate_size\": 6912,"
        " \"num_hidden_layers\": 26, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
        " \"head_dim\": 256, \"query_pre_attn_scalar\": 256, \"max_position_embeddings\": 32768,"
        " \"rope_theta\": 1000000, \"rope_local_base_freq\": 10000.0,"
        " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}, \"sliding_window\": 512,"
        " \"sliding_window_pattern\": 6, \"final_logit_softcapping\": 30.0}";
    ig_hparams hp;
    REQUIRE_OK(hparams_from_hf_config(cfg, &hp));
    CHECK_EQ_INT(hp.n_embd, 1152);
    CHECK_EQ_INT(hp.n_layer, 26);
    for (int l = 0; l < 26; l++) CHECK_EQ_INT(hp.layer_is_swa[l], (l + 1) % 6 != 0);
    CHECK_NEAR(hp.rope_scale_global, 4, 0);
    CHECK_NEAR(hp.rope_scale_local, 1, 0);
    CHECK_NEAR(hp.rope_base_local, 1e4, 0);
    CHECK_NEAR(hp.final_logit_softcap, 30, 0);

    /* _sliding_window_pattern, rope_type spelling, rope_local_base_freq */
    const char *cfg2 =
        "{\"model_type\": \"gemma3_text\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"intermediate_size\": 128, \"num_hidden_layers\": 8, \"num_attention_heads\": 2,"
        " \"num_key_value_heads\": 1, \"head_dim\": 32, \"rope_theta\": 500000.0,"
        " \"rope_local_base_freq\": 20000.0, \"rope_scaling\": {\"rope_type\": \"linear\","
        " \"factor\": 2.0}, \"sliding_window\": 16, \"_sliding_window_pattern\": 4}";
    REQUIRE_OK(hparams_from_hf_config(cfg2, &hp));
    for (int l = 0; l < 8; l++) CHECK_EQ_INT(hp.layer_is_swa[l], l != 3 && l != 7);
    CHECK_NEAR(hp.rope_base_global, 5e5, 0);
    CHECK_NEAR(hp.rope_base_local, 2e4, 0);
    CHECK_NEAR(hp.rope_scale_global, 2, 0);
    CHECK_EQ_INT(hp.n_vocab_real, 1000);
    CHECK_NEAR(hp.attn_scale, 1.0 / 16, 1e-9); /* default query_pre_attn_scalar 256 */
    CHECK_EQ_INT(hp.bos_id, 2);                 /* Gemma3TextConfig defaults */
    CHECK_EQ_INT(hp.eos_id, 1);
}

IG_TEST(hf_config_sparse_27b_conditional_generation) {
    const char *cfg =
        "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\","
        " \"boi_token_index\": 255999, \"eos_token_id\": [1, 106], \"image_token_index\": 262144,"
        " \"text_config\": {\"head_dim\": 128, \"hidden_size\": 5376, \"intermediate_size\": 21504,"
        " \"model_type\": \"gemma3_text\", \"num_attention_heads\": 32, \"num_hidden_layers\": 62,"
        " \"num_key_value_heads\": 16, \"query_pre_attn_scalar\": 168,"
        " \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, \"sliding_window\": 1024},"
        " \"vision_config\": {\"hidden_size\": 1152, \"model_type\": \"siglip_vision_model\"}}";
    ig_hparams hp;
    REQUIRE_OK(hparams_from_hf_config(cfg, &hp));
    CHECK_EQ_INT(hp.n_embd, 5376);
    CHECK_EQ_INT(hp.n_ff, 21504);
    CHECK_EQ_INT(hp.n_layer, 62);
    CHECK_EQ_INT(hp.n_head, 32);
    CHECK_EQ_INT(hp.n_head_kv, 16);
    CHECK_EQ_INT(hp.head_dim, 128);
    CHECK_EQ_INT(hp.sliding_window, 1024);
    /* defaults filled in */
    CHECK_EQ_INT(hp.n_vocab, 262208);
    CHECK_EQ_INT(hp.n_vocab_real, 262144);
    CHECK_EQ_INT(hp.n_ctx_train, 131072);
    CHECK_NEAR(hp.rms_eps, 1e-6, 1e-12);
    CHECK_NEAR(hp.rope_base_global, 1e6, 0);
    CHECK_NEAR(hp.rope_base_local, 1e4, 0);
    CHECK_NEAR(hp.rope_scale_global, 8, 0);
    CHECK_NEAR(hp.rope_scale_local, 1, 0);
    CHECK_NEAR(hp.attn_scale, 1.0 / sqrt(168.0), 1e-8);
    CHECK_NEAR(hp.attn_scale, 0.0771517, 1e-6);
    CHECK_EQ_INT(hp.eos_id, 1); /* from the top level */
    CHECK_EQ_INT(hp.bos_id, 2);
    int n_global = 0;
    for (int l = 0; l < 62; l++) {
        CHECK_EQ_INT(hp.layer_is_swa[l], (l + 1) % 6 != 0);
        n_global += !hp.layer_is_swa[l];
    }
    CHECK_EQ_INT(n_global, 10);
    CHECK_EQ_INT(hp.layer_is_swa[60], 1);
    CHECK_EQ_INT(hp.layer_is_swa[61], 1);
}

IG_TEST(hf_config_errors) {
    ig_hparams hp;
    struct {
        const char *json;
        ig_status want;
        const char *msg;
    } cases[] = {
        {"{\"hidden_size\": \"640\"}", IG_ERR_FORMAT, "hidden_size"},
        {"{\"num_hidden_layers\": 6.5}", IG_ERR_FORMAT, "num_hidden_layers"},
        {"{\"rms_norm_eps\": \"x\"}", IG_ERR_FORMAT, "rms_norm_eps"},
        {"{\"num_hidden_layers\": 200}", IG_ERR_FORMAT, "num_hidden_layers"},
        {"{\"num_hidden_layers\": 0}", IG_ERR_FORMAT, "num_hidden_layers"},
        {"{\"num_attention_heads\": 6, \"num_key_value_heads\": 4}", IG_ERR_FORMAT, "n_head_kv"},
        {"{\"hidden_size\": -5}", IG_ERR_FORMAT, "n_embd"},
        {"{\"hidden_size\": 99999999999}", IG_ERR_FORMAT, "hidden_size"},
        {"{\"model_type\": \"llama\"}", IG_ERR_UNSUPPORTED, "llama"},
        {"{\"text_config\": 5}", IG_ERR_FORMAT, "text_config"},
        {"{\"text_config\": {\"hidden_size\": []}}", IG_ERR_FORMAT, "hidden_size"},
        {"{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8}}", IG_ERR_UNSUPPORTED,
         "yarn"},
        {"{\"rope_scaling\": {\"rope_type\": \"linear\"}}", IG_ERR_FORMAT, "factor"},
        {"{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -1}}", IG_ERR_FORMAT,
         "factor"},
        {"{\"rope_scaling\": \"linear\"}", IG_ERR_FORMAT, "rope_scaling"},
        {"{\"rope_parameters\": {\"full_attention\": {\"rope_theta\": \"big\"}}}", IG_ERR_FORMAT,
         "rope_theta"},
        {"{\"rope_parameters\": [1]}", IG_ERR_FORMAT, "rope_parameters"},
        {"{\"rope_theta\": -1}", IG_ERR_FORMAT, "RoPE"},
        {"{\"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\"]}", IG_ERR_FORMAT,
         "layer_types"},
        {"{\"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\", \"x\"]}",
         IG_ERR_FORMAT, "layer_types[1]"},
        {"{\"sliding_window_pattern\": 0}", IG_ERR_FORMAT, "sliding_window_pattern"},
        {"{\"sliding_window\": -1}", IG_ERR_FORMAT, "sliding_window"},
        {"{\"query_pre_attn_scalar\": 0}", IG_ERR_FORMAT, "query_pre_attn_scalar"},
        {"{\"eos_token_id\": \"1\"}", IG_ERR_FORMAT, "eos_token_id"},
        {"{\"vocab_size\": 100, \"eos_token_id\": 100}", IG_ERR_FORMAT, "eos_id"},
        {"{\"head_dim\": 33}", IG_ERR_FORMAT, "head_dim"},
        {"[1, 2]", IG_ERR_FORMAT, "object"},
        {"{\"a\": 1, \"a\": 2}", IG_ERR_FORMAT, "JSON"},
        {"", IG_ERR_FORMAT, "JSON"},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        ig_status st = hparams_from_hf_config(cases[i].json, &hp);
        if (st != cases[i].want || !strstr(ig_last_error(), cases[i].msg))
            ig_test_fail_at(__FILE__, __LINE__, "%s: status %d (want %d), error '%s' (want '%s')",
                            cases[i].json, st, cases[i].want, ig_last_error(), cases[i].msg);
    }
    /* an empty object is a valid (all defaults) Gemma3TextConfig */
    REQUIRE_OK(hparams_from_hf_config("{}", &hp));
    CHECK_EQ_INT(hp.n_embd, 2304);
    CHECK_EQ_INT(hp.n_layer, 26);
    CHECK_EQ_INT(hp.sliding_window, 4096);
    /* sliding_window null: every layer global */
    REQUIRE_OK(hparams_from_hf_config("{\"sliding_window\": null}", &hp));
    CHECK_EQ_INT(hp.sliding_window, 0);
    for (int l = 0; l < 26; l++) CHECK_EQ_INT(hp.layer_is_swa[l], 0);
}

IG_TEST(hf_config_truncated_everywhere) {
    /* every proper prefix of a real config is invalid JSON */
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", fixture_dir("tiny-27b-like", "f32"));
    char *text = NULL;
    size_t len = 0;
    REQUIRE_OK(ig_file_read_all(path, 1 << 20, &text, &len));
    ig_hparams hp;
    REQUIRE_OK(hparams_from_hf_config(text, &hp));
    int accepted = 0;
    for (size_t n = 0; n < len; n++) {
        char *prefix = malloc(n + 1);
        memcpy(prefix, text, n);
        prefix[n] = '\0';
        /* trailing whitespace after the closing brace would still parse */
        bool only_ws_left = true;
        for (size_t k = n; k < len; k++)
            if (text[k] != ' ' && text[k] != '\n' && text[k] != '\r' && text[k] != '\t')
                only_ws_left = false;
        ig_status st = hparams_from_hf_config(prefix, &hp);
        if (!only_ws_left) {
            if (st != IG_ERR_FORMAT) accepted++;
        }
        free(prefix);
    }
    CHECK_EQ_INT(accepted, 0);
    free(text);
}

/* ---- safetensors ------------------------------------------------------- */

IG_TEST(st_parse_valid_image) {
    float data[12];
    for (int i = 0; i < 12; i++) data[i] = (float)i;
    const char *hdr = "{\"__metadata__\": {\"format\": \"pt\"},"
                      " \"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
                      " \"h\": {\"dtype\": \"F16\", \"shape\": [2, 1, 3], \"data_offsets\": [24, 36]},"
                      " \"s\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [36, 38]},"
                      " \"t\": {\"dtype\": \"BF16\", \"shape\": [5], \"data_offsets\": [38, 48]}}";
    size_t n;
    uint8_t *img = st_image(hdr, data, sizeof data, &n);
    st_file *f = NULL;
    REQUIRE_OK(st_parse(img, n, &f));
    CHECK_EQ_INT(f->tensors.count, 4);
    const ig_tensor *w = ig_tensor_find(&f->tensors, "w");
    const ig_tensor *h = ig_tensor_find(&f->tensors, "h");
    const ig_tensor *s = ig_tensor_find(&f->tensors, "s");
    const ig_tensor *t = ig_tensor_find(&f->tensors, "t");
    REQUIRE(w && h && s && t);
    CHECK(ig_tensor_find(&f->tensors, "__metadata__") == NULL);
    CHECK_EQ_INT(w->type, IG_TYPE_F32);
    CHECK_EQ_INT(w->n_dims, 2);
    CHECK(w->ne[0] == 3 && w->ne[1] == 2 && w->ne[2] == 1); /* reversed */
    CHECK(w->data == img + 8 + strlen(hdr));
    float v;
    memcpy(&v, (const uint8_t *)w->data + 4 * 5, 4);
    CHECK_NEAR(v, 5.0, 0);
    CHECK_EQ_INT(h->type, IG_TYPE_F16);
    CHECK(h->n_dims == 3 && h->ne[0] == 3 && h->ne[1] == 1 && h->ne[2] == 2);
    CHECK(h->data == (const uint8_t *)w->data + 24);
    CHECK_EQ_INT(s->type, IG_TYPE_BF16);
    CHECK(s->n_dims == 1 && s->ne[0] == 1 && s->nbytes == 2);
    CHECK(t->ne[0] == 5 && t->nbytes == 10);
    st_close(f);

    /* truncation at every byte: always an error, never a crash */
    int accepted = 0;
    for (size_t k = 0; k < n; k++) accepted += st_parse_copy(img, k) == IG_OK;
    CHECK_EQ_INT(accepted, 0);
    CHECK_STATUS(st_parse_copy(img, n), IG_OK);
    /* every byte overwritten: whatever parses lies inside the image */
    for (size_t k = 0; k < n; k++) {
        const uint8_t vals[] = {0x00, 0x22, 0x39, 0x7d, 0xff};
        for (size_t j = 0; j < sizeof vals; j++) {
            uint8_t old = img[k];
            img[k] = vals[j];
            (void)st_parse_copy(img, n);
            img[k] = old;
        }
    }
    free(img);
}

IG_TEST(st_parse_rejects_bad_headers) {
    uint8_t data[64] = {0};
    struct {
        const char *hdr;
        size_t data_len;
        ig_status want;
        const char *msg;
    } cases[] = {
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}", 8,
         IG_ERR_FORMAT, "JSON"},
        {"not json", 8, IG_ERR_FORMAT, "JSON"},
        {"[]", 0, IG_ERR_FORMAT, "object"},
        {"{\"w\": 3}", 0, IG_ERR_FORMAT, "'w'"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 8,
         IG_ERR_FORMAT, "outside"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 4]}}", 8,
         IG_ERR_FORMAT, "outside"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 16,
         IG_ERR_FORMAT, "'w'"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0,"
         " 8]}}",
         16, IG_ERR_FORMAT, "overflow"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8,
         IG_ERR_FORMAT, "shape"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", 8,
         IG_ERR_FORMAT, "shape"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, -8]}}", 8,
         IG_ERR_FORMAT, "data_offsets"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8, IG_ERR_FORMAT,
         "data_offsets"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 1, 1, 1, 1], \"data_offsets\": [0, 8]}}", 8,
         IG_ERR_UNSUPPORTED, "dimensions"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}}", 8,
         IG_ERR_UNSUPPORTED, "empty"},
        {"{\"w\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
         IG_ERR_UNSUPPORTED, "I64"},
        {"{\"w\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 8, IG_ERR_FORMAT,
         "dtype"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
         8, IG_ERR_FORMAT, "JSON"},
        {"{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8,
         IG_ERR_FORMAT, "empty name"},
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(cases); i++) {
        size_t n;
        uint8_t *img = st_image(cases[i].hdr, data, cases[i].data_len, &n);
        st_file *f = NULL;
        ig_status st = st_parse(img, n, &f);
        if (st != cases[i].want || !strstr(ig_last_error(), cases[i].msg))
            ig_test_fail_at(__FILE__, __LINE__, "case %zu: status %d (want %d), '%s' (want '%s')",
                            i, st, cases[i].want, ig_last_error(), cases[i].msg);
        CHECK(f == NULL);
        st_close(f);
        free(img);
    }
    /* header length past the end of the file, and absurd */
    size_t n;
    uint8_t *img = st_image("{}", NULL, 0, &n);
    st_file *f = NULL;
    REQUIRE_OK(st_parse(img, n, &f));
    CHECK_EQ_INT(f->tensors.count, 0);
    st_close(f);
    img[0] = 3;
    CHECK_STATUS(st_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "header length") != NULL);
    memset(img, 0xff, 8);
    CHECK_STATUS(st_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK_STATUS(st_parse(img, 7, &f), IG_ERR_FORMAT);
    CHECK_STATUS(st_parse(NULL, 0, &f), IG_ERR_FORMAT);
    free(img);
    CHECK_STATUS(st_open("/nonexistent/x.safetensors", &f), IG_ERR_IO);
}

/* ---- tensor names ------------------------------------------------------ */

IG_TEST(hf_tensor_name_mapping) {
    struct {
        const char *hf, *gguf;
    } ok[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
        {"model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight"},
        {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
        {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
        {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
        {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
        {"model.layers.3.post_attention_layernorm.weight", "blk.3.post_attention_norm.weight"},
        {"model.layers.3.pre_feedforward_layernorm.weight", "blk.3.ffn_norm.weight"},
        {"model.layers.3.post_feedforward_layernorm.weight", "blk.3.post_ffw_norm.weight"},
        {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
        {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight"},
        {"model.layers.61.mlp.down_proj.weight", "blk.61.ffn_down.weight"},
        {"language_model.model.layers.7.mlp.up_proj.weight", "blk.7.ffn_up.weight"},
        {"language_model.model.embed_tokens.weight", "token_embd.weight"},
        {"model.language_model.norm.weight", "output_norm.weight"},
        {"model.language_model.layers.0.self_attn.q_norm.weight", "blk.0.attn_q_norm.weight"},
    };
    char out[128];
    for (size_t i = 0; i < IG_ARRAY_LEN(ok); i++) {
        memset(out, 0, sizeof out);
        bool r = hf_map_tensor_name(ok[i].hf, out, sizeof out);
        if (!r || strcmp(out, ok[i].gguf))
            ig_test_fail_at(__FILE__, __LINE__, "%s -> '%s' (want %s)", ok[i].hf, r ? out : "-",
                            ok[i].gguf);
    }
    const char *no[] = {
        "lm_head.weight", "language_model.lm_head.weight", "vision_tower.vision_model.x.weight",
        "model.vision_tower.vision_model.x.weight", "multi_modal_projector.mm_input_projection_weight",
        "model.layers.0.mlp.foo.weight", "model.layers.x.mlp.up_proj.weight",
        "model.layers.01.mlp.up_proj.weight", "model.layers.128.mlp.up_proj.weight",
        "model.layers.99999.mlp.up_proj.weight", "model.layers..mlp.up_proj.weight",
        "embed_tokens.weight", "model.embed_tokens.bias", "", "model.",
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(no); i++)
        if (hf_map_tensor_name(no[i], out, sizeof out))
            ig_test_fail_at(__FILE__, __LINE__, "%s mapped to %s", no[i], out);
    /* too small an output buffer is a failure, not an overflow */
    CHECK(!hf_map_tensor_name("model.layers.3.mlp.up_proj.weight", out, 8));
}

/* ---- hand-built checkpoint directories --------------------------------- */

static const char *k_small_cfg =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\","
    " \"text_config\": {\"vocab_size\": 8, \"hidden_size\": 4, \"intermediate_size\": 8,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 1, \"num_key_value_heads\": 1,"
    " \"head_dim\": 2, \"max_position_embeddings\": 64, \"sliding_window\": 4}}";

/* A safetensors shard holding BF16 tensors of the given names with shape
 * [2, 2] (8 bytes each), values 0, 1, 2, ... */
static uint8_t *shard_with(const char *const *names, int n_names, size_t *size) {
    char hdr[4096];
    size_t pos = 0;
    pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos, "{");
    for (int i = 0; i < n_names; i++)
        pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos,
                                "%s\"%s\": {\"dtype\": \"BF16\", \"shape\": [2, 2], "
                                "\"data_offsets\": [%d, %d]}",
                                i ? ", " : "", names[i], 8 * i, 8 * i + 8);
    snprintf(hdr + pos, sizeof hdr - pos, "}");
    uint8_t data[8 * 16];
    for (int i = 0; i < (int)sizeof data; i++) data[i] = (uint8_t)i;
    return st_image(hdr, data, (size_t)(8 * n_names), size);
}

IG_TEST(hf_sharded_checkpoint) {
    tmpdir d;
    REQUIRE(tmp_make(&d));
    const char *s1[] = {"language_model.model.embed_tokens.weight",
                        "language_model.model.layers.0.self_attn.q_proj.weight",
                        "vision_tower.vision_model.embeddings.patch_embedding.weight"};
    const char *s2[] = {"language_model.model.norm.weight",
                        "language_model.model.layers.0.mlp.down_proj.weight",
                        "multi_modal_projector.mm_input_projection_weight",
                        "language_model.lm_head.weight"};
    size_t n1, n2;
    uint8_t *b1 = shard_with(s1, 3, &n1), *b2 = shard_with(s2, 4, &n2);
    tmp_write(&d, "model-00001-of-00002.safetensors", b1, n1);
    tmp_write(&d, "model-00002-of-00002.safetensors", b2, n2);
    tmp_write_str(&d, "config.json", k_small_cfg);
    char index[4096];
    snprintf(index, sizeof index,
             "{\"metadata\": {\"total_size\": 56}, \"weight_map\": {"
             "\"%s\": \"model-00001-of-00002.safetensors\", \"%s\": "
             "\"model-00001-of-00002.safetensors\", \"%s\": \"model-00001-of-00002.safetensors\","
             " \"%s\": \"model-00002-of-00002.safetensors\", \"%s\": "
             "\"model-00002-of-00002.safetensors\", \"%s\": \"model-00002-of-00002.safetensors\","
             " \"%s\": \"model-00002-of-00002.safetensors\"}}",
             s1[0], s1[1], s1[2], s2[0], s2[1], s2[2], s2[3]);
    tmp_write_str(&d, "model.safetensors.index.json", index);
    tmp_write_str(&d, "tokenizer.json", "{}");
    tmp_write_str(&d, "tokenizer_config.json",
                  "{\"bos_token\": \"<bos>\", \"chat_template\": \"{{ bos_token }}hi\"}");

    hf_model *m = NULL;
    ig_status st = hf_open(d.path, &m);
    CHECK_STATUS(st, IG_OK);
    if (st == IG_OK) {
        CHECK_EQ_INT(m->n_shards, 2);
        CHECK_EQ_INT(m->tensors.count, 4); /* vision, projector, lm_head skipped */
        CHECK_EQ_INT(m->hparams.n_embd, 4);
        CHECK_EQ_INT(m->hparams.n_vocab, 8);
        CHECK_EQ_INT(m->hparams.n_vocab_real, 8);
        const ig_tensor *norm = ig_tensor_find(&m->tensors, "output_norm.weight");
        const ig_tensor *down = ig_tensor_find(&m->tensors, "blk.0.ffn_down.weight");
        const ig_tensor *q = ig_tensor_find(&m->tensors, "blk.0.attn_q.weight");
        REQUIRE(norm && down && q && ig_tensor_find(&m->tensors, "token_embd.weight"));
        CHECK_EQ_INT(((const uint8_t *)down->data)[0], 8); /* second tensor of shard 2 */
        CHECK_EQ_INT(((const uint8_t *)q->data)[7], 15);
        CHECK_EQ_INT(norm->type, IG_TYPE_BF16);
        REQUIRE(m->tokenizer_json_path != NULL);
        CHECK(strstr(m->tokenizer_json_path, "/tokenizer.json") != NULL);
        REQUIRE(m->chat_template != NULL);
        CHECK(strcmp(m->chat_template, "{{ bos_token }}hi") == 0);
        hf_close(m);
    }

    /* chat_template.jinja when tokenizer_config.json has none */
    tmp_write_str(&d, "tokenizer_config.json", "{\"bos_token\": \"<bos>\"}");
    tmp_write_str(&d, "chat_template.jinja", "JINJA {{ messages }}");
    REQUIRE_OK(hf_open(d.path, &m));
    CHECK(m->chat_template && strcmp(m->chat_template, "JINJA {{ messages }}") == 0);
    hf_close(m);

    /* a broken tokenizer_config.json is reported */
    tmp_write_str(&d, "tokenizer_config.json", "{\"chat_template\": ");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "tokenizer_config.json") != NULL);
    tmp_remove(&d, "tokenizer_config.json");

    /* the index names a tensor its shard lacks */
    snprintf(index, sizeof index,
             "{\"weight_map\": {\"%s\": \"model-00001-of-00002.safetensors\", "
             "\"language_model.model.layers.0.mlp.up_proj.weight\": "
             "\"model-00002-of-00002.safetensors\"}}",
             s1[0]);
    tmp_write_str(&d, "model.safetensors.index.json", index);
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "up_proj") != NULL);
    /* shard names must stay inside the directory */
    tmp_write_str(&d, "model.safetensors.index.json",
                  "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "shard") != NULL);
    tmp_write_str(&d, "model.safetensors.index.json", "{\"weight_map\": {}}");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    tmp_write_str(&d, "model.safetensors.index.json",
                  "{\"weight_map\": {\"a\": \"missing.safetensors\"}}");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_IO);
    tmp_write_str(&d, "model.safetensors.index.json", "{\"weight_map\": ");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    tmp_remove(&d, "model.safetensors.index.json");

    /* no weights at all */
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_IO);
    CHECK(strstr(ig_last_error(), "model.safetensors") != NULL);

    /* single file: an unknown text tensor is an error naming it */
    const char *bad[] = {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.extra.weight"};
    size_t nb;
    uint8_t *bb = shard_with(bad, 2, &nb);
    tmp_write(&d, "model.safetensors", bb, nb);
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "model.layers.0.mlp.extra.weight") != NULL);
    free(bb);
    /* two names that map to the same tensor */
    const char *dup[] = {"model.norm.weight", "language_model.model.norm.weight"};
    bb = shard_with(dup, 2, &nb);
    tmp_write(&d, "model.safetensors", bb, nb);
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "output_norm.weight") != NULL);
    free(bb);
    /* a bad config.json is reported with its path */
    const char *good[] = {"model.norm.weight"};
    bb = shard_with(good, 1, &nb);
    tmp_write(&d, "model.safetensors", bb, nb);
    REQUIRE_OK(hf_open(d.path, &m));
    CHECK_EQ_INT(m->tensors.count, 1);
    CHECK(m->tokenizer_json_path != NULL);
    hf_close(m);
    tmp_write_str(&d, "config.json", "{\"text_config\": {\"hidden_size\": \"4\"}}");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "config.json") && strstr(ig_last_error(), "hidden_size"));
    tmp_remove(&d, "config.json");
    CHECK_STATUS(hf_open(d.path, &m), IG_ERR_IO);
    CHECK(m == NULL);
    free(bb);
    CHECK_STATUS(hf_open("/nonexistent/dir", &m), IG_ERR_IO);

    free(b1);
    free(b2);
    tmp_cleanup(&d);
}
