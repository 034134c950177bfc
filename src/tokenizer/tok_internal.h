/* Private layout of ig_tokenizer, shared by the vocabulary loaders
 * (vocab_gguf.c, vocab_hf.c) and the codec (tokenizer.c). */
#ifndef IG_TOK_INTERNAL_H
#define IG_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

/* Largest vocabulary a loader accepts (Gemma 3 has 262,145 at most). */
#define IG_TOK_MAX_VOCAB (1 << 24)

/* Per-piece attribute bits. */
enum {
    /* BPE may form this piece by merging two adjacent symbols. */
    IG_TOKA_MERGEABLE = 1u << 0,
};

/* Trie over the pieces matched in raw text before BPE (user-defined
 * always, control/unknown with parse_special). Children of a node form a
 * singly linked sibling list. */
typedef struct ig_trie_node {
    int32_t first_child;
    int32_t next_sibling;
    int32_t token; /* piece ending here, or -1 */
    uint8_t byte;
} ig_trie_node;

/* One BPE merge rule of a tokenizer.json: (left, right) -> result, rank. */
typedef struct ig_merge_slot {
    uint64_t key; /* left << 32 | right; IG_MERGE_EMPTY when free */
    int32_t rank;
    int32_t result;
} ig_merge_slot;
#define IG_MERGE_EMPTY UINT64_MAX

struct ig_tokenizer {
    int32_t n_vocab;
    char **piece;        /* [n_vocab] owned, NUL-terminated (may also hold NULs) */
    uint32_t *piece_len; /* [n_vocab] bytes */
    float *score;        /* [n_vocab] higher merges first */
    uint8_t *type;       /* [n_vocab] ig_token_type */
    uint8_t *attr;       /* [n_vocab] IG_TOKA_* */
    uint8_t *byte_value; /* [n_vocab] the byte of an IG_TOKEN_BYTE piece */

    int32_t bos, eos, unk, pad, eot;
    bool add_bos;
    bool add_space_prefix; /* prepend U+2581 to the text (not Gemma 3) */
    bool escape_spaces;    /* ' ' -> U+2581 before BPE */

    /* built by ig_tok_finalize */
    int32_t byte_token[256]; /* <0xXX> id per byte, -1 if absent */
    int32_t *hash;           /* open addressing over pieces, -1 = empty */
    size_t hash_mask;
    uint32_t max_piece_len;
    ig_trie_node *trie; /* node 0 is the root */
    size_t trie_n;
    uint8_t trie_first[256]; /* 1 if some matched piece starts with this byte */

    /* tokenizer.json only: BPE applies exactly the listed merges, lowest
     * rank first (score -rank), as HF does. Without it (GGUF), any adjacent
     * pair whose text is a mergeable piece merges, best piece score first. */
    ig_merge_slot *merges;
    size_t merges_mask;
};

/* Allocates an empty tokenizer with n_vocab slots: pieces NULL, scores 0,
 * type NORMAL, special ids -1. */
ig_status ig_tok_alloc(int32_t n_vocab, ig_tokenizer **out);
/* Sets the piece text of id (copied). */
ig_status ig_tok_set_piece(ig_tokenizer *t, int32_t id, const char *text, size_t len);
/* Validates the vocabulary and builds the lookup structures: missing pieces
 * become empty UNUSED slots, byte pieces are parsed, <end_of_turn> is forced
 * to CONTROL. Special ids must be -1 or in range. */
ig_status ig_tok_finalize(ig_tokenizer *t);
/* Piece id by exact bytes, -1 if absent (usable once finalized). */
int32_t ig_tok_find(const ig_tokenizer *t, const char *s, size_t len);
/* Allocates the merge table for n_merges rules, and adds one (a pair
 * already present keeps its first, lower, rank). */
ig_status ig_tok_merges_alloc(ig_tokenizer *t, size_t n_merges);
ig_status ig_tok_merge_add(ig_tokenizer *t, int32_t left, int32_t right, int32_t rank,
                           int32_t result);
/* The merge rule of the pair (left, right), or NULL. */
const ig_merge_slot *ig_tok_merge_find(const ig_tokenizer *t, int32_t left, int32_t right);

#endif
