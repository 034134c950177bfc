/* Speculative decoding: a cheap drafter proposes the next few tokens of a
 * sequence, the target evaluates the last accepted token plus all drafts in
 * one ig_decode step (logits for each), and ig_spec_verify walks the rows
 * through the sequence's ig_gen_seq (gen/seq.h) with the speculative-sampling
 * rule (ig_sampler_verify), so the output is distributed exactly as plain
 * decoding's (greedy: identical, token for token). Shared by the CLI loop
 * (gen/generate.c) and the server scheduler.
 *
 * Two drafters:
 *  - a draft model: a smaller Gemma 3 with the target's vocabulary, drafting
 *    greedily in its own context; its cache follows the accepted text (the
 *    common prefix is kept, only new tokens are fed);
 *  - prompt lookup: the longest recent n-gram (ngram_max down to ngram_min
 *    tokens) that ends the text is searched for earlier in the prompt and
 *    output; the tokens that followed its latest earlier occurrence are the
 *    drafts. No second model.
 * A caller may plug in a drafter of its own (ig_spec_params.propose). All
 * are deterministic: q is one-hot on the drafted id. */
#ifndef IG_GEN_SPEC_H
#define IG_GEN_SPEC_H

#include "gen/seq.h"
#include "ignis.h"

#include <stdbool.h>
#include <stdint.h>

#define IG_SPEC_MAX_DRAFT 64

/* A drafter of the caller's own: proposes up to max tokens to follow
 * toks[0..n) into out and returns the count. */
typedef int (*ig_spec_propose_fn)(void *user, const int32_t *toks, int n, int max, int32_t *out);

typedef struct ig_spec_params {
    ig_model *draft;   /* draft model (not owned); NULL: prompt lookup */
    ig_spec_propose_fn propose; /* instead of either (draft NULL); user is its argument */
    void *propose_user;
    int draft_max;     /* most drafts per step (1..IG_SPEC_MAX_DRAFT); default 8 */
    int draft_min;     /* fewer drafts than this: a plain step instead; default 0 */
    float p_min;       /* the draft model stops when its top probability is below; default 0 */
    int ngram_min;     /* prompt lookup n-gram sizes; default 1 .. 3 */
    int ngram_max;
    ig_kv_type kv_type; /* draft model's cache; default IG_KV_F16 */
    int n_threads;     /* draft context threads; 0 = the draft model's setting */
} ig_spec_params;

ig_spec_params ig_spec_default_params(void);

/* Checks that draft can draft for target: a Gemma 3 model with the same
 * vocabulary size and no more weight bytes. IG_ERR_UNSUPPORTED with a
 * message naming both sizes otherwise. */
ig_status ig_spec_check_draft(const ig_model *target, const ig_model *draft);

typedef struct ig_spec ig_spec;

/* A drafter for sequences 0..n_seq-1 of a target context with n_ctx
 * positions. With a draft model, checks it (ig_spec_check_draft) and
 * creates its context. */
ig_status ig_spec_create(const ig_spec_params *p, const ig_model *target, int n_ctx, int n_seq,
                         ig_spec **out);
void ig_spec_free(ig_spec *sp);
const ig_spec_params *ig_spec_params_get(const ig_spec *sp);

/* Proposes up to max tokens (clamped to draft_max) to follow toks[0..n)
 * (the whole text of sequence seq: prompt and accepted output, the last
 * token not necessarily evaluated by the target yet) into out. Returns the
 * count, 0 when there is nothing to propose (or fewer than draft_min). When
 * the draft model fails, the drafter turns itself off for good (every later
 * call returns 0; ig_spec_failure says why) so generation goes on plainly. */
int ig_spec_draft(ig_spec *sp, int seq, const int32_t *toks, int n, int max, int32_t *out);
/* Forgets what the drafter holds for seq (a new request on that slot). */
void ig_spec_reset(ig_spec *sp, int seq);
/* The message of the failure that turned the drafter off, or NULL. Reports
 * it once: *first is set true at the first call after the failure (first
 * may be NULL). */
const char *ig_spec_failure(ig_spec *sp, bool *first);

/* Called with each event of a verified step; return false to stop there. */
typedef bool (*ig_spec_event_fn)(void *user, const ig_gen_event *ev);

typedef struct ig_spec_result {
    int n_steps;    /* ig_gen_seq steps taken: positions of the batch to keep */
    int n_accepted; /* drafts accepted */
    bool stopped;   /* the sequence finished or on_event returned false */
} ig_spec_result;

/* Applies the target's verdict on one verified step of sequence gs. The
 * step fed n_draft + 1 tokens (the last accepted one, then drafts) with
 * logits for each, found at ig_get_logits(ctx, first_out + i). Steps gs
 * once per row (ig_gen_seq_step_draft) until a token differs from its
 * draft, the sequence ends, or on_event says stop; the row after the last
 * draft gives a bonus token. The caller then keeps the first n_steps
 * positions of the batch in the target's cache (ig_seq_truncate). */
ig_status ig_spec_verify(ig_gen_seq *gs, const ig_context *ctx, int first_out,
                         const int32_t *drafts, int n_draft, ig_spec_event_fn on_event, void *user,
                         ig_spec_result *res);

#endif
