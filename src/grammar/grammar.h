/* Constrained decoding: a grammar compiled to a pushdown automaton over
 * bytes, and per step the mask of the tokens whose bytes keep the output
 * inside the grammar.
 *
 * Sources of a grammar:
 *  - GBNF text (llama.cpp's format): rules `name ::= ...`, alternatives `|`,
 *    groups `( )`, repetition `* + ? {m} {m,} {m,n}`, literals "..." with
 *    escapes (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes
 *    [a-z], negated [^...], `.` (any character), comments `#`. A rule ends
 *    at the end of its line unless inside parentheses (a line starting with
 *    `|` continues it). Left recursion is refused.
 *  - JSON Schema (ig_json_schema_to_gbnf, grammar/schema.c documents what is
 *    exact);
 *  - "any JSON object" (ig_grammar_json_object).
 *
 * Characters are code points: classes and `.` compile to UTF-8 byte
 * sequences, so the automaton reads bytes and a character may be split
 * over tokens. The automaton state is a set of stacks of grammar positions
 * (persistent, hash-consed); sets of stacks are interned and their
 * transitions per byte memoised, a lazily built DFA. The mask walks a trie
 * of every token's bytes once, so a shared prefix is checked once, and a
 * transition already seen costs one table lookup; masks are cached per
 * automaton state.
 *
 * A compiled ig_grammar is immutable and reference-counted: one grammar may
 * serve many matchers on many threads. A matcher is one sequence's state
 * and is used by one thread at a time. */
#ifndef IG_GRAMMAR_H
#define IG_GRAMMAR_H

#include "ignis.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on untrusted input. */
#define IG_GRAMMAR_MAX_TEXT (1u << 20)     /* bytes of GBNF or schema text */
#define IG_GRAMMAR_MAX_ELEMS (1u << 20)    /* compiled grammar elements */
#define IG_GRAMMAR_MAX_NESTING 128         /* parentheses / schema depth */
#define IG_GRAMMAR_MAX_REPEAT 10000        /* m and n of {m,n} */
#define IG_GRAMMAR_MAX_STACK 512           /* automaton stack depth */
/* An ambiguous grammar can have a number of live parses (stacks) that
 * grows exponentially with the text; past these the matcher fails with
 * IG_ERR_UNSUPPORTED instead of pinning a thread. */
#define IG_GRAMMAR_MAX_STACKS 4096         /* stacks alive after one byte */
#define IG_GRAMMAR_MAX_WORK (1u << 23)     /* closure steps and stacks tried, one call */

typedef struct ig_grammar ig_grammar;

/* Compiles GBNF text (len bytes). root names the start rule (NULL: "root").
 * IG_ERR_FORMAT with a message naming line and column on a syntax error,
 * an undefined rule or left recursion. */
ig_status ig_grammar_from_gbnf(const char *text, size_t len, const char *root, ig_grammar **out);
/* JSON Schema text -> grammar (through ig_json_schema_to_gbnf). */
ig_status ig_grammar_from_json_schema(const char *json, size_t len, ig_grammar **out);
/* Any JSON object (OpenAI's response_format json_object). */
ig_status ig_grammar_json_object(ig_grammar **out);
/* A new reference to g. */
ig_grammar *ig_grammar_ref(ig_grammar *g);
/* Drops a reference (frees on the last one). NULL is fine. */
void ig_grammar_free(ig_grammar *g);

/* GBNF text for a JSON Schema (malloc'ed, NUL-terminated). Unsupported
 * keywords are IG_ERR_UNSUPPORTED naming the keyword and where it is. */
ig_status ig_json_schema_to_gbnf(const char *json, size_t len, char **gbnf);
/* The rules alone, every name starting with prefix (at most 8 characters of
 * [a-z0-9-]), the start rule named prefix + "root", without the shared base
 * rules (ig_gbnf_json), to combine several schemas in one grammar. */
ig_status ig_json_schema_to_gbnf_rules(const char *json, size_t len, const char *prefix,
                                       char **gbnf);
/* The shared base rules (ws, string, number, value, object, ..., fmt-*),
 * static text; "object" is any JSON object. */
const char *ig_gbnf_json(void);

/* ---- token trie: every token's bytes, built once per vocabulary ---------- */

typedef struct ig_token_trie ig_token_trie;

/* From a tokenizer: ids [0, n_vocab) with their decoded bytes
 * (ig_token_bytes); tokens with no bytes (control, unused) are left out
 * and never allowed by a mask. */
ig_status ig_token_trie_create(const ig_tokenizer *tok, int n_vocab, ig_token_trie **out);
/* From explicit byte strings (tests): token i has bytes[i][0..lens[i]). */
ig_status ig_token_trie_from_bytes(const char *const *bytes, const size_t *lens, int n_vocab,
                                   ig_token_trie **out);
void ig_token_trie_free(ig_token_trie *t);
int ig_token_trie_n_vocab(const ig_token_trie *t);
/* Bytes of token id (NULL when it has none). */
const char *ig_token_trie_bytes(const ig_token_trie *t, int32_t id, size_t *len);

/* ---- matcher: one sequence's position in the grammar ---------------------- */

typedef struct ig_grammar_matcher ig_grammar_matcher;

ig_status ig_grammar_matcher_create(const ig_grammar *g, ig_grammar_matcher **out);
void ig_grammar_matcher_free(ig_grammar_matcher *m);
/* Back to the start of the grammar. */
void ig_grammar_matcher_reset(ig_grammar_matcher *m);
/* Feeds n bytes. false (state unchanged) when they leave the grammar. */
bool ig_grammar_matcher_accept_bytes(ig_grammar_matcher *m, const char *bytes, size_t n);
/* Whether the bytes fed so far form a complete sentence. */
bool ig_grammar_matcher_can_end(const ig_grammar_matcher *m);
/* Whether no further byte is possible (the sentence is complete). */
bool ig_grammar_matcher_finished(ig_grammar_matcher *m);
/* Sets bit i of mask (n_vocab bits, (n_vocab+31)/32 words) for each token
 * whose bytes can be fed now; *n_allowed (may be NULL) gets their count.
 * End-of-sequence tokens are the caller's: allow them when can_end. */
ig_status ig_grammar_matcher_mask(ig_grammar_matcher *m, const ig_token_trie *t, uint32_t *mask,
                                  int *n_allowed);
/* Feeds the bytes of token id (false when they leave the grammar). */
bool ig_grammar_matcher_accept_token(ig_grammar_matcher *m, const ig_token_trie *t, int32_t id);
/* IG_OK, or why the matcher failed for good (out of memory, or
 * IG_ERR_UNSUPPORTED past IG_GRAMMAR_MAX_STACKS / IG_GRAMMAR_MAX_WORK),
 * with the message set: a false accept may be either. */
ig_status ig_grammar_matcher_status(const ig_grammar_matcher *m);

/* Work counters (tests, bench). */
typedef struct ig_grammar_stats {
    uint64_t masks, mask_cache_hits;
    uint64_t trie_nodes_visited;
    uint64_t dfa_states, dfa_transitions_built;
    uint64_t work; /* closure steps and stacks tried on a byte (IG_GRAMMAR_MAX_WORK) */
    uint64_t max_state_stacks; /* stacks of the largest state built */
} ig_grammar_stats;
void ig_grammar_matcher_stats(const ig_grammar_matcher *m, ig_grammar_stats *out);

#endif
