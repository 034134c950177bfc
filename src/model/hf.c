/* Hugging Face Gemma 3 checkpoint directory: config.json, safetensors
 * weights (single file or shards listed in model.safetensors.index.json),
 * optional tokenizer.json / tokenizer_config.json / chat_template.jinja.
 * Tensor names are mapped to GGUF names; data stays in the mappings. */
#include "model/hf.h"

#include "model/hparams.h"
#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_CONFIG ((size_t)4 << 20)
#define HF_MAX_INDEX ((size_t)64 << 20)
#define HF_MAX_TOKCFG ((size_t)64 << 20)
#define HF_MAX_TEMPLATE ((size_t)4 << 20)

typedef enum { MAP_OK, MAP_SKIP, MAP_UNKNOWN } map_result;

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* HF per-layer suffix → GGUF per-layer suffix. */
static const char *const k_layer_map[][2] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

static map_result map_name(const char *hf, char *out, size_t cap) {
    static const char *const skip[] = {
        "vision_tower.",        "multi_modal_projector.",        "lm_head.",
        "model.vision_tower.",  "model.multi_modal_projector.",  "model.lm_head.",
        "language_model.lm_head.",
    };
    for (size_t i = 0; i < IG_ARRAY_LEN(skip); i++)
        if (starts_with(hf, skip[i])) return MAP_SKIP;
    static const char *const prefixes[] = {"model.language_model.", "language_model.model.",
                                           "model."};
    const char *rest = NULL;
    for (size_t i = 0; i < IG_ARRAY_LEN(prefixes) && !rest; i++)
        if (starts_with(hf, prefixes[i])) rest = hf + strlen(prefixes[i]);
    if (!rest) return MAP_UNKNOWN;
    int n;
    if (!strcmp(rest, "embed_tokens.weight")) n = snprintf(out, cap, "token_embd.weight");
    else if (!strcmp(rest, "norm.weight")) n = snprintf(out, cap, "output_norm.weight");
    else if (starts_with(rest, "layers.")) {
        const char *p = rest + strlen("layers.");
        long layer = 0;
        const char *d = p;
        while (*d >= '0' && *d <= '9' && d - p < 4) layer = layer * 10 + (*d++ - '0');
        if (d == p || *d != '.' || (d - p > 1 && *p == '0') || layer >= IG_MAX_LAYERS)
            return MAP_UNKNOWN;
        const char *suffix = d + 1, *gg = NULL;
        for (size_t i = 0; i < IG_ARRAY_LEN(k_layer_map) && !gg; i++)
            if (!strcmp(suffix, k_layer_map[i][0])) gg = k_layer_map[i][1];
        if (!gg) return MAP_UNKNOWN;
        n = snprintf(out, cap, "blk.%ld.%s", layer, gg);
    } else {
        return MAP_UNKNOWN;
    }
    return n >= 0 && (size_t)n < cap ? MAP_OK : MAP_UNKNOWN;
}

bool hf_map_tensor_name(const char *hf_name, char *out, size_t cap) {
    if (!hf_name || !out || cap == 0) return false;
    return map_name(hf_name, out, cap) == MAP_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ig_status open_shard(hf_model *m, const char *dir, const char *file) {
    char *path = ig_path_join(dir, file);
    if (!path) return IG_ERR_NO_MEMORY;
    st_file *sf = NULL;
    ig_status st = st_open(path, &sf);
    free(path);
    if (st != IG_OK) return st;
    m->shards[m->n_shards++] = sf;
    return IG_OK;
}

/* A shard name from the index must be a plain file name inside dir. */
static bool plain_file_name(const char *s) {
    return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static ig_status open_sharded(hf_model *m, const char *dir, const char *index_path) {
    char *text = NULL;
    IG_TRY(ig_file_read_all(index_path, HF_MAX_INDEX, &text, NULL));
    ig_json_error jerr;
    ig_json_doc *doc = ig_json_parse(text, strlen(text), IG_JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    const ig_json *root = ig_json_root(doc);
    if (!root)
        return ig_fail(ig_json_error_status(&jerr), "%s: bad JSON (line %d col %d): %s", index_path, jerr.line,
                       jerr.column, jerr.text);
    ig_status st = IG_OK;
    const char **files = NULL;
    const ig_json *wm = ig_json_is_object(root) ? ig_json_get(root, "weight_map") : NULL;
    size_t n_entries = ig_json_size(wm);
    if (!ig_json_is_object(wm) || n_entries == 0) {
        st = ig_fail(IG_ERR_FORMAT, "%s: no non-empty \"weight_map\" object", index_path);
        goto done;
    }
    files = ig_calloc_array(n_entries, sizeof *files);
    if (!files) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
    size_t n_files = 0;
    const char *key;
    for (size_t i = 0; i < n_entries; i++) {
        const ig_json *val = ig_json_at(wm, i);
        key = val->key;
        const char *file = ig_json_str(val);
        if (!file || !plain_file_name(file)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a shard file name",
                         index_path, key);
            goto done;
        }
        files[n_files++] = file;
    }
    qsort(files, n_files, sizeof *files, cmp_str_ptr);
    size_t n_distinct = 0;
    for (size_t i = 0; i < n_files; i++)
        if (i == 0 || strcmp(files[i], files[n_distinct - 1])) files[n_distinct++] = files[i];
    m->shards = ig_calloc_array(n_distinct, sizeof *m->shards);
    if (!m->shards) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < n_distinct && st == IG_OK; i++) st = open_shard(m, dir, files[i]);
    if (st != IG_OK) goto done;

    /* Every entry of the index must be in the shard it names. */
    for (size_t s = 0; s < m->n_shards && st == IG_OK; s++) {
        const ig_tensor_table *tt = &m->shards[s]->tensors;
        const char **names = ig_calloc_array(tt->count, sizeof *names);
        if (!names) {
            st = IG_ERR_NO_MEMORY;
            break;
        }
        for (size_t i = 0; i < tt->count; i++) names[i] = tt->items[i].name;
        qsort(names, tt->count, sizeof *names, cmp_str_ptr);
        for (size_t i = 0; i < n_entries; i++) {
            const ig_json *val = ig_json_at(wm, i);
            key = val->key;
            if (strcmp(ig_json_str(val), files[s])) continue;
            if (!bsearch(&key, names, tt->count, sizeof *names, cmp_str_ptr)) {
                st = ig_fail(IG_ERR_FORMAT, "%s lists tensor '%s' in %s, which does not have it",
                             index_path, key, files[s]);
                break;
            }
        }
        free(names);
    }
done:
    free(files);
    ig_json_free(doc);
    return st;
}

static ig_status collect_tensors(hf_model *m) {
    size_t total = 0;
    for (size_t s = 0; s < m->n_shards; s++) total += m->shards[s]->tensors.count;
    m->tensors.items = ig_calloc_array(total, sizeof *m->tensors.items);
    if (!m->tensors.items) return IG_ERR_NO_MEMORY;
    char name[128];
    for (size_t s = 0; s < m->n_shards; s++) {
        const ig_tensor_table *tt = &m->shards[s]->tensors;
        for (size_t i = 0; i < tt->count; i++) {
            const ig_tensor *src = &tt->items[i];
            map_result r = map_name(src->name, name, sizeof name);
            if (r == MAP_SKIP) continue;
            if (r == MAP_UNKNOWN)
                return ig_fail(IG_ERR_FORMAT, "unknown tensor '%s' in the checkpoint", src->name);
            ig_tensor *t = &m->tensors.items[m->tensors.count];
            *t = *src;
            t->name = ig_strdup(name);
            if (!t->name) return IG_ERR_NO_MEMORY;
            m->tensors.count++;
        }
    }
    if (m->tensors.count < 2) return IG_OK;
    const char **names = ig_calloc_array(m->tensors.count, sizeof *names);
    if (!names) return IG_ERR_NO_MEMORY;
    for (size_t i = 0; i < m->tensors.count; i++) names[i] = m->tensors.items[i].name;
    qsort(names, m->tensors.count, sizeof *names, cmp_str_ptr);
    ig_status st = IG_OK;
    for (size_t i = 1; i < m->tensors.count && st == IG_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            st = ig_fail(IG_ERR_FORMAT, "the checkpoint has two tensors that map to '%s'", names[i]);
    free(names);
    return st;
}

/* chat_template from tokenizer_config.json (a string, or a list of
 * {name, template} where "default" is used), else chat_template.jinja. */
static ig_status read_chat_template(hf_model *m, const char *dir) {
    char *path = ig_path_join(dir, "tokenizer_config.json");
    if (!path) return IG_ERR_NO_MEMORY;
    ig_status st = IG_OK;
    if (ig_path_is_file(path)) {
        char *text = NULL;
        st = ig_file_read_all(path, HF_MAX_TOKCFG, &text, NULL);
        ig_json_doc *doc = NULL;
        ig_json_error jerr;
        if (st == IG_OK) {
            doc = ig_json_parse(text, strlen(text), 0, &jerr);
            if (!doc)
                st = ig_fail(ig_json_error_status(&jerr), "%s: bad JSON (line %d col %d): %s", path, jerr.line,
                             jerr.column, jerr.text);
        }
        free(text);
        const ig_json *root = ig_json_root(doc);
        const ig_json *ct = ig_json_is_object(root) ? ig_json_get(root, "chat_template") : NULL;
        if (ig_json_is_array(ct)) {
            const ig_json *found = NULL;
            for (size_t i = 0; i < ig_json_size(ct); i++) {
                const ig_json *e = ig_json_at(ct, i);
                const char *nm = ig_json_str(ig_json_get(e, "name"));
                if (nm && !strcmp(nm, "default")) found = ig_json_get(e, "template");
            }
            ct = found;
        }
        if (st == IG_OK && ct && !ig_json_is_null(ct)) {
            if (!ig_json_is_string(ct)) st = ig_fail(IG_ERR_FORMAT, "%s: chat_template is not a string", path);
            else if (!(m->chat_template = ig_strdup(ig_json_str(ct)))) st = IG_ERR_NO_MEMORY;
        }
        ig_json_free(doc);
    }
    free(path);
    if (st != IG_OK || m->chat_template) return st;
    path = ig_path_join(dir, "chat_template.jinja");
    if (!path) return IG_ERR_NO_MEMORY;
    if (ig_path_is_file(path)) st = ig_file_read_all(path, HF_MAX_TEMPLATE, &m->chat_template, NULL);
    free(path);
    return st;
}

static ig_status hf_open_impl(hf_model *m, const char *dir) {
    char *path = ig_path_join(dir, "config.json");
    if (!path) return IG_ERR_NO_MEMORY;
    char *cfg = NULL;
    ig_status st = ig_file_read_all(path, HF_MAX_CONFIG, &cfg, NULL);
    if (st == IG_OK) {
        st = hparams_from_hf_config(cfg, &m->hparams);
        free(cfg);
        if (st != IG_OK) ig_fail_wrap(st, "%s", path);
    }
    free(path);
    IG_TRY(st);

    char *index = ig_path_join(dir, "model.safetensors.index.json");
    char *single = ig_path_join(dir, "model.safetensors");
    if (!index || !single) st = IG_ERR_NO_MEMORY;
    else if (ig_path_is_file(index)) st = open_sharded(m, dir, index);
    else if (ig_path_is_file(single)) {
        m->shards = ig_calloc_array(1, sizeof *m->shards);
        st = m->shards ? open_shard(m, dir, "model.safetensors") : IG_ERR_NO_MEMORY;
    } else {
        st = ig_fail(IG_ERR_IO, "%s has neither model.safetensors nor model.safetensors.index.json",
                     dir);
    }
    free(index);
    free(single);
    IG_TRY(st);
    IG_TRY(collect_tensors(m));

    path = ig_path_join(dir, "tokenizer.json");
    if (!path) return IG_ERR_NO_MEMORY;
    if (ig_path_is_file(path)) m->tokenizer_json_path = path;
    else free(path);
    return read_chat_template(m, dir);
}

ig_status hf_open(const char *dir, hf_model **out) {
    if (!dir || !out) return ig_fail(IG_ERR_INVALID_ARG, "hf_open: NULL argument");
    *out = NULL;
    if (!ig_path_is_dir(dir)) return ig_fail(IG_ERR_IO, "%s is not a directory", dir);
    hf_model *m = ig_calloc_array(1, sizeof *m);
    if (!m) return IG_ERR_NO_MEMORY;
    m->norm_plus_one = true;
    ig_status st = hf_open_impl(m, dir);
    if (st != IG_OK) {
        hf_close(m);
        return st;
    }
    *out = m;
    return IG_OK;
}

void hf_close(hf_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->tensors.count; i++) free(m->tensors.items[i].name);
    free(m->tensors.items);
    for (size_t i = 0; i < m->n_shards; i++) st_close(m->shards[i]);
    free(m->shards);
    free(m->tokenizer_json_path);
    free(m->chat_template);
    free(m);
}
