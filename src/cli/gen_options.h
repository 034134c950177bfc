/* Options shared by `ignis run` and `ignis chat`: model, backend, context,
 * sampling. */
#ifndef IG_GEN_OPTIONS_H
#define IG_GEN_OPTIONS_H

#include "cli.h"

#include <stdio.h>
#include "gen/generate.h"

#define GEN_MAX_STOP 16

typedef struct gen_options {
    const char *model;
    ig_model_params mp;
    ig_context_params cp;
    ig_sampler_params sp;
    bool seed_set;
    int n_predict;
    const char *stop[GEN_MAX_STOP];
    int n_stop;
    const char *system;
    const char *grammar_file; /* --grammar: GBNF */
    const char *schema_file;  /* --json-schema: JSON Schema */
    /* Speculative decoding. */
    const char *draft;  /* draft model path */
    bool lookup;        /* prompt lookup */
    ig_spec_params spec;
} gen_options;

void gen_options_init(gen_options *o);
/* Consumes argv[*i] (and its value) if it is a shared option: returns 1 when
 * consumed, 0 when not a shared option, -1 on a bad value (message printed). */
int gen_options_parse(gen_options *o, int argc, char **argv, int *i);
void gen_options_help(FILE *f);
/* Compiles --grammar / --json-schema into *out (NULL when neither was
 * given). Returns 0, or -1 with the reason printed. */
int gen_options_grammar(const gen_options *o, ig_grammar **out);
/* Seeds from the clock when no --seed was given. */
void gen_options_finish(gen_options *o);
/* Speculative decoding options (--draft, --lookup, --draft-max, ...):
 * consumed as gen_options_parse does. Shared with `ignis serve`/`bench`. */
int spec_options_parse(const char **draft, bool *lookup, ig_spec_params *sp, int argc, char **argv,
                       int *i);
void spec_options_help(FILE *f);
/* When --draft or --lookup was given: loads the draft model (*draft_model,
 * NULL for lookup) and creates the drafter for target (n_ctx, n_seq) into
 * *spec. Prints the error (prefixed with who) and returns -1 on failure;
 * 0 otherwise (*spec NULL when speculation is off). */
int spec_options_setup(const char *who, const char *draft, bool lookup, ig_spec_params *sp,
                       ig_model *target, const ig_model_params *mp, int n_ctx, int n_seq,
                       ig_model **draft_model, ig_spec **spec);

#endif
