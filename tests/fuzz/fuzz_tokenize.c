/* Encoding and decoding arbitrary bytes with the real Gemma 3 tokenizer
 * (the test fixture's tokenizer.json, loaded once). The first byte picks
 * the flags; the rest is text to encode, and also, read as little-endian
 * 32-bit ids, tokens to decode (whole and through the streaming decoder). */
#include "fuzz_common.h"

#include "ignis.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>

#ifndef IG_FUZZ_TOKENIZER_JSON
#error "IG_FUZZ_TOKENIZER_JSON names the tokenizer.json to load"
#endif

static ig_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("IGNIS_FUZZ_TOKENIZER");
    if (!path || !*path) path = IG_FUZZ_TOKENIZER_JSON;
    if (ig_tokenizer_from_hf_json(path, &g_tok) != IG_OK) {
        fprintf(stderr, "fuzz_tokenize: cannot load %s: %s\n", path, ig_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    unsigned flags = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    int32_t *ids = NULL;
    size_t n = 0;
    if (ig_tokenize(g_tok, text, len, flags & 1, flags & 2, &ids, &n) == IG_OK) {
        char *out = NULL;
        if (ig_detokenize(g_tok, ids, n, false, &out) != IG_OK) abort();
        free(out);
        free(ids);
    }

    /* the same bytes as token ids, any value (out of range included) */
    size_t n_ids = len / 4;
    int32_t *raw = malloc((n_ids ? n_ids : 1) * sizeof *raw);
    if (!raw) return 0;
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t u = (uint32_t)(uint8_t)text[4 * i] | (uint32_t)(uint8_t)text[4 * i + 1] << 8 |
                     (uint32_t)(uint8_t)text[4 * i + 2] << 16 |
                     (uint32_t)(uint8_t)text[4 * i + 3] << 24;
        if (flags & 4) u %= (uint32_t)ig_tokenizer_n_vocab(g_tok) + 2; /* mostly valid ids */
        raw[i] = (int32_t)u;
    }
    char *out = NULL;
    if (ig_detokenize(g_tok, raw, n_ids, flags & 8, &out) == IG_OK) free(out);
    ig_detok_stream *s = NULL;
    if (ig_detok_stream_create(g_tok, &s) == IG_OK) {
        char buf[64];
        for (size_t i = 0; i < n_ids; i++) (void)ig_detok_stream_push(s, raw[i], buf, sizeof buf);
        (void)ig_detok_stream_flush(s, buf, sizeof buf);
        ig_detok_stream_free(s);
    }
    free(raw);
    return 0;
}
