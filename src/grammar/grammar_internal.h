/* Compiled grammar layout, shared by the GBNF compiler and the matcher. */
#ifndef IG_GRAMMAR_INTERNAL_H
#define IG_GRAMMAR_INTERNAL_H

#include "grammar/grammar.h"

#include <pthread.h>
#include <stdatomic.h>

enum {
    GE_END = 0,   /* end of an alternative */
    GE_BYTES = 1, /* one byte from the set val */
    GE_REF = 2,   /* the rule val */
};

typedef struct ig_gelem {
    int32_t type;
    int32_t val;
} ig_gelem;

typedef struct ig_byteset {
    uint32_t w[8];
} ig_byteset;

static inline bool ig_byteset_has(const ig_byteset *s, unsigned b) {
    return (s->w[b >> 5] >> (b & 31)) & 1u;
}

/* Masks shared by every matcher of a grammar, keyed by the content of the
 * automaton state (two independent hashes of its stacks) and the trie. */
#define IG_GRAMMAR_SHARED_MASKS 128

typedef struct ig_shared_mask {
    uint64_t h1, h2;
    const void *trie;
    uint32_t *mask;
    size_t words;
    int n_allowed;
    uint64_t used;
} ig_shared_mask;

struct ig_grammar {
    atomic_int refs;
    pthread_mutex_t mu; /* guards masks */
    ig_shared_mask masks[IG_GRAMMAR_SHARED_MASKS];
    uint64_t mask_clock;
    int32_t n_rules;
    int32_t root;
    int32_t *rule_alt; /* n_rules + 1 offsets into alts */
    int32_t *alts;     /* element index where each alternative starts */
    ig_gelem *elems;
    size_t n_elems;
    ig_byteset *sets;
    int32_t n_sets;
};

#endif
