/* Grammar compilation (src/grammar/): the first byte picks GBNF or JSON
 * Schema, then comes the grammar text, a NUL byte, and bytes fed to a
 * matcher of the compiled grammar (one at a time, rejected ones skipped),
 * with a token mask over a small byte vocabulary after each. */
#include "fuzz_common.h"

#include "grammar/grammar.h"

#define N_VOCAB 300

static ig_token_trie *g_trie;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* tokens: the 256 single bytes, then a few multi-byte strings */
    static char singles[256];
    static const char *extra[] = {"{\"", "\":", "\"}", "true", "false", "null", "[1,", "\\u00",
                                  "  ", "\n"};
    const char *bytes[N_VOCAB];
    size_t lens[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) {
        if (i < 256) {
            singles[i] = (char)i;
            bytes[i] = &singles[i];
            lens[i] = 1;
        } else {
            const char *s = extra[(i - 256) % (sizeof extra / sizeof extra[0])];
            bytes[i] = s;
            lens[i] = strlen(s);
        }
    }
    if (ig_token_trie_from_bytes(bytes, lens, N_VOCAB, &g_trie) != IG_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t *text, *feed;
    size_t ntext, nfeed;
    fuzz_split(data + 1, size - 1, &text, &ntext, &feed, &nfeed);
    ig_grammar *g = NULL;
    ig_status st;
    if (data[0] & 1) {
        st = ig_grammar_from_json_schema((const char *)text, ntext, &g);
    } else {
        st = ig_grammar_from_gbnf((const char *)text, ntext, NULL, &g);
    }
    if (data[0] & 2) { /* also the rules-only form of a schema */
        char *rules = NULL;
        if (ig_json_schema_to_gbnf_rules((const char *)text, ntext, "p-", &rules) == IG_OK)
            free(rules);
    }
    if (st != IG_OK) return 0;

    ig_grammar_matcher *m = NULL;
    if (ig_grammar_matcher_create(g, &m) == IG_OK) {
        uint32_t mask[(N_VOCAB + 31) / 32];
        for (size_t i = 0; i < nfeed && i < 256; i++) {
            int n_allowed = 0;
            if (ig_grammar_matcher_mask(m, g_trie, mask, &n_allowed) != IG_OK) break;
            bool allowed = mask[feed[i] / 32] >> (feed[i] % 32) & 1;
            bool accepted = ig_grammar_matcher_accept_bytes(m, (const char *)&feed[i], 1);
            if (allowed != accepted) abort(); /* the mask and the matcher agree */
            if (ig_grammar_matcher_finished(m)) break;
        }
        (void)ig_grammar_matcher_can_end(m);
        ig_grammar_matcher_free(m);
    }
    ig_grammar_free(g);
    return 0;
}
