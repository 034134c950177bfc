/* Speculative-decoding rows of `ignis bench` (bench_spec.c). */
#ifndef IG_CLI_BENCH_SPEC_H
#define IG_CLI_BENCH_SPEC_H

#include "gen_options.h"

#include <jansson.h>

typedef struct bench_spec_cfg {
    const char *draft; /* draft model path, or NULL */
    bool lookup;
    bool replay;       /* --draft-replay: drafts are plain greedy's own tokens */
    bool verify_curve; /* --verify-curve: time of one step of 1..16 tokens */
    ig_spec_params spec;
    const char *prompt; /* NULL: a built-in story prompt (copy task with --lookup) */
    int n_gen, reps, n_batch;
    int depth; /* tokens in the cache before each verify-curve step */
    ig_kv_type kv;
} bench_spec_cfg;

/* The speculative rows (--draft, --lookup or --draft-replay); each row is
 * also appended to results as a JSON object. */
int bench_spec_run(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c, json_t *results);
/* The verification-cost curve: one target step of 1, 2, 4, 8, 16 tokens
 * (all with logits, as a verify step) after c->depth tokens, relative to
 * one token. */
int bench_verify_curve(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c, json_t *results);

#endif
