/* Speculative-decoding rows of `ignis bench` (bench_spec.c). */
#ifndef IG_CLI_BENCH_SPEC_H
#define IG_CLI_BENCH_SPEC_H

#include "gen_options.h"

typedef struct bench_spec_cfg {
    const char *draft; /* draft model path, or NULL */
    bool lookup;
    ig_spec_params spec;
    const char *prompt; /* NULL: a built-in story prompt (copy task with --lookup) */
    int n_gen, reps, n_batch;
    ig_kv_type kv;
} bench_spec_cfg;

int bench_spec_run(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c);

#endif
