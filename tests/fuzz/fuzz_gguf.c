/* GGUF files (src/model/gguf.c and what reads a parsed file): the input is
 * parsed from memory and every metadata getter is exercised; then, as a
 * file (a memfd), it goes through the whole model load (hparams, tokenizer,
 * chat template, tensor binding), as `ignis run FILE` would. */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include "ignis.h"
#include "model/gguf.h"
#include "model/hparams.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static void read_metadata(const gguf_file *f) {
    for (size_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        gguf_str s;
        (void)gguf_get_u32(f, kv->key, &u32);
        (void)gguf_get_i64(f, kv->key, &i64);
        (void)gguf_get_f32(f, kv->key, &f32);
        (void)gguf_get_bool(f, kv->key, &b);
        if (gguf_get_str(f, kv->key, &s) && s.len && !s.ptr) abort();
        (void)gguf_type_name(kv->type);
        if (kv->type != GGUF_TYPE_ARRAY) continue;
        const void *data;
        uint64_t n;
        if (!gguf_get_arr(f, kv->key, kv->arr_type, &data, &n) || n != kv->arr_count) abort();
        for (uint64_t j = 0; j < n && j < 64; j++) {
            double d;
            (void)gguf_arr_get_i64(kv, j, &i64);
            (void)gguf_arr_get_f64(kv, j, &d);
        }
    }
    for (size_t i = 0; i < f->tensors.count; i++) {
        const ig_tensor *t = &f->tensors.items[i];
        if (ig_tensor_find(&f->tensors, t->name) == NULL) abort();
        (void)ig_tensor_nelements(t);
        /* the tensor's bytes lie inside the image: touch the first and last */
        if (t->nbytes) {
            volatile uint8_t first = ((const uint8_t *)t->data)[0];
            volatile uint8_t last = ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)first, (void)last;
        }
    }
}

static void load_model(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.gguf", 0);
    if (fd < 0) return;
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) break;
        off += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ig_model_params p = ig_model_default_params();
    p.n_threads = 1;
    ig_model *m = NULL;
    if (off == size && ig_model_load(path, &p, &m) == IG_OK) ig_model_free(m);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    if (gguf_parse(data, size, &f) != IG_OK) return 0;
    read_metadata(f);
    ig_hparams hp;
    if (hparams_from_gguf(f, &hp) == IG_OK) (void)hparams_validate(&hp);
    ig_tokenizer *tok = NULL;
    if (ig_tokenizer_from_gguf(f, &tok) == IG_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (ig_tokenize(tok, "a b\n<bos>", 9, true, true, &ids, &n) == IG_OK) {
            char *text = NULL;
            if (ig_detokenize(tok, ids, n, true, &text) == IG_OK) free(text);
            free(ids);
        }
        ig_tokenizer_free(tok);
    }
    gguf_close(f);
    load_model(data, size);
    return 0;
}
