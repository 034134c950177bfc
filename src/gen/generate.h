/* The single-sequence generation loop of `ignis run` and `ignis chat`: the
 * prompt in batched chunks, then one ig_gen_seq step per token (gen/seq.h:
 * sampling, stop ids and strings, text), streaming UTF-8-complete text
 * through a callback, stopping at end-of-turn/eos, -n, a stop string or an
 * interrupt flag. Reuses whatever prefix of the prompt the sequence already
 * holds in the KV cache (multi-turn chat). */
#ifndef IG_GENERATE_H
#define IG_GENERATE_H

#include "gen/seq.h"
#include "gen/spec.h"
#include "ignis.h"

#include <signal.h>

typedef struct ig_gen_params {
    int n_predict;              /* max new tokens; < 0 = until the context is full */
    ig_sampler_params sampling;
    const char *const *stop;    /* stop strings (not emitted) */
    int n_stop;
    int n_chunk;                /* prompt tokens per ig_decode (<= n_batch) */
    volatile sig_atomic_t *interrupt; /* set non-zero to stop after the current token */
    const ig_grammar *grammar;  /* constrained decoding (gen/seq.h), NULL: none */
    const ig_token_trie *trie;  /* the vocabulary's trie, with grammar */
    ig_spec *spec;              /* speculative decoding (gen/spec.h); NULL: off */
} ig_gen_params;

typedef struct ig_gen_stats {
    int n_prompt;        /* prompt tokens evaluated (excluding reused prefix) */
    int n_reused;        /* prompt tokens found already in the cache */
    int n_generated;
    double t_prompt, t_generate; /* seconds */
    ig_finish finish;    /* STOP, LENGTH, or INTERRUPT (the flag was set or emit said stop) */
    int32_t stop_token;  /* the end-of-turn / eos id that ended generation, else -1 */
    int n_steps;         /* target ig_decode steps while generating */
    int n_drafted;       /* draft tokens verified (speculative decoding) */
    int n_accepted;      /* of which accepted */
} ig_gen_stats;

/* Called with each new piece of text; return false to stop. */
typedef bool (*ig_gen_emit)(void *user, const char *text, size_t len);
/* Called with each generated token id (optional). */
typedef void (*ig_gen_token)(void *user, int32_t id);

typedef struct ig_gen_io {
    ig_gen_emit emit;
    ig_gen_token on_token;
    void *user;
} ig_gen_io;

/* A growable list of token ids, e.g. to collect what was generated. */
typedef struct ig_token_list {
    int32_t *ids;
    int n, cap;
    bool oom; /* a push failed: the list is incomplete */
} ig_token_list;

bool ig_token_list_push(ig_token_list *l, int32_t id);
void ig_token_list_free(ig_token_list *l);
/* An ig_gen_token callback that pushes into the ig_token_list in user. */
void ig_token_list_collect(void *user, int32_t id);

/* history/n_history: the token ids the sequence currently holds (as fed by
 * earlier calls), used to reuse the common prefix (ig_gen_prefix_keep); may
 * be NULL. On success the sequence holds the prompt and the generated
 * tokens that were fed back: all but the last one (all of them when the
 * interrupt flag ended generation); ig_seq_len tells how many. The eot and
 * eos ids of the model end generation; the prompt counts for the
 * penalties. With params->spec, each target step verifies the drafter's
 * proposals (gen/spec.h): the output is distributed exactly as without it
 * (greedy: the same tokens), the cache keeps only accepted positions. */
ig_status ig_generate(ig_context *ctx, int seq, const ig_tokenizer *tok, const int32_t *prompt,
                      int n_prompt, const int32_t *history, int n_history,
                      const ig_gen_params *params, const ig_gen_io *io, ig_gen_stats *stats);

#endif
