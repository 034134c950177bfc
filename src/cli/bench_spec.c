/* ignis bench --draft MODEL / --lookup: speculative decoding against the
 * same target without it, in one run. The prompt is real text (chat
 * template when the model has one), generation greedy for -n tokens;
 * plain and speculative runs alternate (A/B) so that a changing machine
 * load hits both alike. Rows: tokens/s (mean ± sd), acceptance rate of the
 * drafts, mean tokens per target step, speed-up over plain. */
#include "bench_spec.h"

#include "gen/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Natural text: an instruction for a chat model, the opening of an
 * article for a base model (which would otherwise echo an instruction). */
static const char *k_chat_prompt =
    "Write a short story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the sea, the weather and what the message says.";
static const char *k_text_prompt = "The history of the lighthouse begins in ancient times, when sailors";

static const char *k_copy_prompt =
    "Repeat the following text exactly, word for word:\n\n"
    "The old lighthouse stood at the edge of the cliff, its white paint peeling in the salt wind. "
    "Every evening the keeper climbed the one hundred and twelve steps to the lamp room, wound the "
    "clockwork, trimmed the wick and lit the great lamp. Ships passing in the night saw its beam "
    "sweep across the water every ten seconds, and they knew where the rocks were. In the morning "
    "he wrote the weather in his log: the wind, the swell, the colour of the sky, and any ships "
    "he had seen.";

typedef struct run_out {
    double ts;
    int n_gen, n_steps, n_drafted, n_accepted;
} run_out;

static int one_run(ig_context *ctx, const ig_tokenizer *tok, const int32_t *prompt, int n_prompt,
                   int n_gen, ig_spec *spec, run_out *o) {
    ig_seq_clear(ctx, 0);
    ig_gen_params gp = {.n_predict = n_gen, .sampling = ig_sampler_default_params(), .spec = spec};
    gp.sampling.temperature = 0.0f;
    ig_gen_io io = {0};
    ig_gen_stats st;
    if (ig_generate(ctx, 0, tok, prompt, n_prompt, NULL, 0, &gp, &io, &st) != IG_OK) {
        fprintf(stderr, "ignis bench: generation failed: %s\n", ig_last_error());
        return 1;
    }
    o->ts = st.t_generate > 0 ? (st.n_generated - 1) / st.t_generate : 0.0;
    o->n_gen = st.n_generated;
    o->n_steps = st.n_steps;
    o->n_drafted = st.n_drafted;
    o->n_accepted = st.n_accepted;
    return 0;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double s = 0.0, q = 0.0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = n ? s / n : 0.0;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

int bench_spec_run(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c) {
    const ig_tokenizer *tok = ig_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "ignis bench: speculative rows need a model with a tokenizer\n");
        return 1;
    }
    bool chat = ig_model_chat_template(model) != NULL;
    const char *text = c->prompt   ? c->prompt
                       : c->lookup ? k_copy_prompt
                       : chat      ? k_chat_prompt
                                   : k_text_prompt;
    char *rendered = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    ig_status st;
    if (chat) {
        ig_chat_message msg = {"user", text};
        st = ig_chat_render(&msg, 1, true, &rendered);
        if (st == IG_OK) st = ig_tokenize(tok, rendered, strlen(rendered), false, true, &ids, &n_ids);
    } else {
        st = ig_tokenize(tok, text, strlen(text), true, false, &ids, &n_ids);
    }
    free(rendered);
    if (st != IG_OK) {
        fprintf(stderr, "ignis bench: cannot tokenize the prompt: %s\n", ig_last_error());
        return 1;
    }
    int rc = 1;
    ig_context *ctx = NULL;
    ig_model *draft_m = NULL;
    ig_spec *spec = NULL;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = (int)n_ids + c->n_gen + 8;
    cp.n_batch = c->n_batch;
    cp.kv_type = c->kv;
    cp.n_threads = mp->n_threads;
    if (ig_context_create(model, &cp, &ctx) != IG_OK) {
        fprintf(stderr, "ignis bench: %s\n", ig_last_error());
        goto done;
    }
    ig_spec_params sp = c->spec;
    sp.kv_type = c->kv;
    if (spec_options_setup("ignis bench", c->draft, c->lookup, &sp, model, mp, cp.n_ctx, 1,
                           &draft_m, &spec))
        goto done;
    /* Warm-up of both, then alternating repetitions. */
    run_out o;
    if (one_run(ctx, tok, ids, (int)n_ids, 16, NULL, &o) || one_run(ctx, tok, ids, (int)n_ids, 16, spec, &o))
        goto done;
    double ts[2][64];
    long drafted = 0, accepted = 0, steps = 0, gen = 0;
    int reps = c->reps < 64 ? c->reps : 64;
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* alternate which goes first */
            if (one_run(ctx, tok, ids, (int)n_ids, c->n_gen, which ? spec : NULL, &o)) goto done;
            ts[which][r] = o.ts;
            if (which) {
                drafted += o.n_drafted;
                accepted += o.n_accepted;
                steps += o.n_steps;
                gen += o.n_gen - 1; /* the first token comes from the prompt step */
            }
        }
    }
    double m0, s0, m1, s1;
    mean_sd(ts[0], reps, &m0, &s0);
    mean_sd(ts[1], reps, &m1, &s1);
    char label[160];
    if (c->draft) {
        const char *base = strrchr(c->draft, '/');
        snprintf(label, sizeof label, "draft %s K=%d", base ? base + 1 : c->draft, sp.draft_max);
    } else {
        snprintf(label, sizeof label, "lookup %d..%d K=%d", sp.ngram_min, sp.ngram_max, sp.draft_max);
    }
    printf("\nspeculative decoding: prompt %zu tokens (%s), greedy tg%d, %d repetitions (A/B)\n",
           n_ids, c->prompt ? "given" : c->lookup ? "copy task" : "natural text", c->n_gen, reps);
    printf("| %-34s | %16s | %8s | %11s | %8s |\n", "test", "t/s", "accept", "tokens/step", "speed-up");
    printf("| %-34s | %8.2f ± %5.2f | %8s | %11s | %8s |\n", "plain", m0, s0, "-", "1.00", "1.00x");
    char acc[16], tps[16];
    snprintf(acc, sizeof acc, "%.1f%%", drafted ? 100.0 * accepted / drafted : 0.0);
    snprintf(tps, sizeof tps, "%.2f", steps ? (double)gen / steps : 0.0);
    printf("| %-34s | %8.2f ± %5.2f | %8s | %11s | %7.2fx |\n", label, m1, s1, acc, tps,
           m0 > 0 ? m1 / m0 : 0.0);
    rc = 0;
done:
    ig_spec_free(spec);
    ig_model_free(draft_m);
    ig_context_free(ctx);
    free(ids);
    return rc;
}
