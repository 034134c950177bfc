/* One generated sequence, step by step: the part of generation shared by
 * `ignis run`, `ignis chat` and the server. The caller owns the model, the
 * batch and the KV cache: it feeds tokens with ig_decode and hands each new
 * row of logits to ig_gen_seq_step, which
 *  - samples the next token (the sequence's own sampler and random stream);
 *  - ends the sequence at a stop id (the id is neither accepted nor decoded);
 *  - accepts the token into the sampler's penalty history;
 *  - decodes its text incrementally: only complete UTF-8 is released;
 *  - holds back text that may be the start of a stop string, and cuts the
 *    text at the earliest stop string (also in the middle of a token);
 *  - reports the logprob entries of the tokens whose text it releases, so
 *    logprobs never run ahead of text;
 *  - ends the sequence with "length" at max_tokens or a full context.
 * Prefix reuse (which cached tokens of a sequence to keep for a new prompt)
 * lives here too. */
#ifndef IG_GEN_SEQ_H
#define IG_GEN_SEQ_H

#include "grammar/grammar.h"
#include "ignis.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a sequence ended. */
typedef enum ig_finish {
    IG_FINISH_NONE,      /* still running */
    IG_FINISH_STOP,      /* a stop id or a stop string */
    IG_FINISH_LENGTH,    /* max_tokens reached or the context is full */
    IG_FINISH_INTERRUPT, /* the caller ended it (ig_gen_seq_finish) */
} ig_finish;

#define IG_GEN_MAX_TOP_LOGPROBS 20

typedef struct ig_gen_top_logprob {
    int32_t id;
    float logprob;
} ig_gen_top_logprob;

/* Logprob entry of one generated token: its log-probability under the
 * sampler's distribution (ig_sampler_logprobs) and the n_top most likely
 * tokens, best first (ties: lower id first). */
typedef struct ig_gen_logprob {
    int32_t id;
    float logprob;
    int n_top;
    ig_gen_top_logprob top[IG_GEN_MAX_TOP_LOGPROBS];
} ig_gen_logprob;

typedef struct ig_gen_seq_params {
    ig_sampler_params sampling; /* the seed gives the sequence its own random stream */
    int n_vocab;                /* ids below this are sampled (n_vocab_real) */
    const ig_tokenizer *tok;    /* NULL: ids only (no text; stop strings never match) */
    const int32_t *stop_ids;    /* ids that end the sequence; negative entries are ignored */
    int n_stop_ids;
    const char *const *stop;    /* stop strings (copied; empty ones ignored) */
    size_t n_stop;
    const int32_t *history;     /* ids the penalties see before the first generated one */
    int n_history;
    int max_tokens;             /* accepted tokens before "length"; < 0: no limit */
    /* When the k-th token is sampled the sequence holds n_prompt + k - 1
     * positions; once that reaches n_ctx the token cannot be fed and the
     * sequence ends with "length" (n_ctx <= 0: no limit). */
    int n_ctx;
    int n_prompt;
    bool logprobs;              /* report logprob entries */
    int top_logprobs;           /* alternatives per entry, clamped to 0..IG_GEN_MAX_TOP_LOGPROBS */
    /* Constrained decoding (both or neither): before sampling, every token
     * whose bytes would leave the grammar gets -inf, so bias, penalties,
     * top-k/top-p and logprobs all see only allowed tokens; stop ids are
     * allowed exactly when the output so far is a complete sentence, other
     * tokens without bytes (control tokens) never. When the sentence is
     * complete and nothing may follow, the sequence ends with "stop" without
     * sampling (ev->token -1) if no stop id is given. The grammar is
     * referenced (not copied); the trie must outlive the sequence. */
    const ig_grammar *grammar;
    const ig_token_trie *trie;
} ig_gen_seq_params;

typedef struct ig_gen_seq ig_gen_seq;

/* What one step (or ig_gen_seq_finish) produced. text and lps point into
 * the sequence and stay valid until the next call on it (or its free). */
typedef struct ig_gen_event {
    int32_t token;        /* the sampled id; -1 when none was sampled */
    bool stop_token;      /* token is a stop id: not accepted, no text */
    const char *text;     /* n_text bytes that may now be released (not NUL-terminated) */
    size_t n_text;
    const ig_gen_logprob *lps; /* entries of the tokens whose text is now released, in order */
    size_t n_lps;
    ig_finish finish;     /* IG_FINISH_NONE while the sequence goes on */
} ig_gen_event;

/* Creates a sequence (sampler and detokenizer included). The params'
 * arrays need only live for the call. */
ig_status ig_gen_seq_create(const ig_gen_seq_params *p, ig_gen_seq **out);
void ig_gen_seq_free(ig_gen_seq *s);

/* Samples the next token from logits (n_vocab floats) and fills *ev. Text
 * is held back while it may be the start of a stop string, or while the
 * last character is incomplete; when the sequence ends (ev->finish set)
 * everything is flushed and no further call is allowed. A logprob entry is
 * released with the last byte of its token's text (a token with no text:
 * at once); when a stop string cuts the text, the entry of the token it
 * cut through is released too and later ones are dropped. Errors:
 * IG_ERR_NO_MEMORY, IG_ERR_INTERNAL when sampling failed, IG_ERR_INVALID_ARG
 * after the end; the sequence is then over (ev->token says whether a token
 * was sampled). */
ig_status ig_gen_seq_step(ig_gen_seq *s, const float *logits, ig_gen_event *ev);

/* Seconds the last step spent computing and applying the grammar mask (0
 * without a grammar). */
double ig_gen_seq_mask_seconds(const ig_gen_seq *s);

/* Computes the grammar mask of the sequence's current state ahead of its
 * next ig_gen_seq_step, which then only applies it: a caller whose logits
 * come from a device runs this on another thread while the device computes
 * them, so the mask costs the step nothing. It reads and writes the
 * sequence's matcher and its grammar's shared masks: no other call may use
 * this sequence, or another sequence of the same grammar, until it returns.
 * A no-op without a grammar, after the end, or when already prepared. */
ig_status ig_gen_seq_prepare_mask(ig_gen_seq *s);
/* ig_gen_seq_step for speculative decoding: the token is chosen by
 * ig_sampler_verify against a drafted id (q: the drafter's distribution, or
 * NULL for a deterministic drafter), so it is distributed exactly as
 * ig_gen_seq_step's; *accepted (may be NULL) says whether it is the draft.
 * Everything after the choice (stop ids and strings, text, logprobs,
 * limits) is ig_gen_seq_step's. draft < 0: exactly ig_gen_seq_step. */
ig_status ig_gen_seq_step_draft(ig_gen_seq *s, const float *logits, int32_t draft, const float *q,
                                bool *accepted, ig_gen_event *ev);

/* Ends a running sequence early (e.g. interrupted): flushes the held-back
 * text, still cut at a stop string (ev->finish is then IG_FINISH_STOP,
 * else reason). */
ig_status ig_gen_seq_finish(ig_gen_seq *s, ig_finish reason, ig_gen_event *ev);

/* Stop strings. Given text not yet released, decides how much of it may be
 * released now: if some stop string occurs, *matched is set and the result
 * is the offset of the earliest occurrence (release up to it, then stop);
 * otherwise the result is len minus the longest suffix of text that is a
 * proper prefix of some stop string (that suffix is held back). NULL and
 * empty stop strings are ignored. */
size_t ig_gen_stop_scan(const char *text, size_t len, const char *const *stops, size_t n_stops,
                        bool *matched);

/* ---- prefix reuse ------------------------------------------------------ */

/* Length of the common prefix of a[0..na) and b[0..nb). */
int ig_gen_common_prefix(const int32_t *a, int na, const int32_t *b, int nb);

/* How many cached tokens to keep for prompt: the longest common prefix,
 * but at least one prompt token must be left to feed (its logits are the
 * first to sample from). */
int ig_gen_prefix_len(const int32_t *cached, int n_cached, const int32_t *prompt, int n_prompt);

/* Makes sequence seq of ctx ready for prompt. cached[0..n_cached) are the
 * ids the sequence holds; when n_cached differs from ig_seq_len they are
 * not trusted and nothing is kept. Keeps ig_gen_prefix_len tokens:
 * truncates to them, or clears the sequence when nothing is kept or the
 * engine refuses the truncation (a sliding-window ring no longer holds
 * those positions). Returns the number of prompt tokens kept, which the
 * caller does not feed again. */
int ig_gen_prefix_keep(ig_context *ctx, int seq, const int32_t *cached, int n_cached,
                       const int32_t *prompt, int n_prompt);

#endif
