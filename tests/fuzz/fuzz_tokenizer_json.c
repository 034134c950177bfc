/* Hugging Face tokenizer.json files (src/tokenizer/vocab_hf.c): any bytes as
 * the file's text; a tokenizer that loads encodes and decodes a short text. */
#include "fuzz_common.h"

#include "ignis.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ig_tokenizer *tok = NULL;
    if (ig_tokenizer_from_hf_json_buf((const char *)data, size, &tok) != IG_OK) return 0;
    static const char text[] = "ab c\xE2\x96\x81<bos>\xFF\n";
    int32_t *ids = NULL;
    size_t n = 0;
    if (ig_tokenize(tok, text, sizeof text - 1, true, true, &ids, &n) == IG_OK) {
        char *out = NULL;
        if (ig_detokenize(tok, ids, n, true, &out) == IG_OK) free(out);
        free(ids);
    }
    int nv = ig_tokenizer_n_vocab(tok);
    for (int32_t id = -1; id <= nv && id < 64; id++) {
        char buf[64];
        (void)ig_token_bytes(tok, id, true, buf, sizeof buf);
        (void)ig_token_piece(tok, id);
        (void)ig_token_type_of(tok, id);
    }
    ig_tokenizer_free(tok);
    return 0;
}
