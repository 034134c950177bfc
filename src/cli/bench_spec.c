/* ignis bench --draft MODEL / --lookup / --draft-replay: speculative
 * decoding against the same target without it, in one run. The prompt is
 * real text (chat template when the model has one), generation greedy for
 * -n tokens; plain and speculative runs alternate (A/B) so that a changing
 * machine load hits both alike. Rows: tokens/s (mean ± sd), acceptance rate
 * of the drafts, mean tokens per target step, speed-up over plain.
 *
 * --draft-replay is an upper bound: the drafter proposes the tokens plain
 * greedy decoding made (recorded first), so every draft is accepted and the
 * row measures what verification costs, whatever the drafter.
 * --verify-curve: the time of one target step of 1, 2, 4, 8, 16 tokens
 * after -d tokens, relative to one token (what a step of K drafts costs). */
#include "bench_spec.h"

#include "core/util.h"
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

#define K_FIXED_PROMPT 32

typedef struct run_out {
    double ts;
    int n_gen, n_steps, n_drafted, n_accepted;
} run_out;

/* The --draft-replay drafter: the output of plain greedy decoding after
 * the prompt, proposed as long as the text so far follows it. */
typedef struct replay {
    ig_token_list out; /* recorded output */
    int n_prompt;
} replay;

static int replay_propose(void *user, const int32_t *toks, int n, int max, int32_t *out) {
    const replay *r = user;
    int at = n - r->n_prompt; /* output tokens so far */
    if (at < 0 || at > r->out.n) return 0;
    if (at > 0 && toks[n - 1] != r->out.ids[at - 1]) return 0; /* off the recorded text */
    int k = r->out.n - at < max ? r->out.n - at : max;
    if (k > 0) memcpy(out, r->out.ids + at, (size_t)k * sizeof *out);
    return k > 0 ? k : 0;
}

static int one_run(ig_context *ctx, const ig_tokenizer *tok, const int32_t *prompt, int n_prompt,
                   int n_gen, ig_spec *spec, ig_token_list *record, run_out *o) {
    ig_seq_clear(ctx, 0);
    ig_gen_params gp = {.n_predict = n_gen, .sampling = ig_sampler_default_params(), .spec = spec};
    gp.sampling.temperature = 0.0f;
    ig_gen_io io = {.on_token = record ? ig_token_list_collect : NULL, .user = record};
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

int bench_spec_run(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c, json_t *results) {
    const ig_tokenizer *tok = ig_model_tokenizer(model);
    if ((c->draft != NULL) + c->lookup + c->replay > 1) {
        fprintf(stderr, "ignis bench: --draft, --lookup and --draft-replay are exclusive\n");
        return 1;
    }
    if (!tok && c->prompt) {
        fprintf(stderr, "ignis bench: --prompt needs a model with a tokenizer\n");
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
    ig_status st = IG_OK;
    if (!tok) {
        /* No tokenizer (a test fixture): fixed ids, a phrase said twice
         * so that prompt lookup has something to find. */
        const int n_vocab = ig_model_hparams(model)->n_vocab_real;
        n_ids = K_FIXED_PROMPT;
        ids = malloc(n_ids * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "ignis bench: out of memory\n");
            return 1;
        }
        const int span = n_vocab > 4 ? n_vocab - 3 : 1;
        for (size_t i = 0; i < n_ids; i++)
            ids[i] = i == 0 ? ig_model_hparams(model)->bos_id : (int32_t)(3 + (int)(i % 12) * 29 % span);
        if (ids[0] < 0) ids[0] = 3;
    } else if (chat) {
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
    replay rp = {.n_prompt = (int)n_ids};
    run_out o;
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
    if (c->replay) {
        /* Record plain greedy's output, then replay it as the drafts. */
        if (one_run(ctx, tok, ids, (int)n_ids, c->n_gen, NULL, &rp.out, &o)) goto done;
        if (rp.out.oom) {
            fprintf(stderr, "ignis bench: out of memory\n");
            goto done;
        }
        sp.draft = NULL;
        sp.propose = replay_propose;
        sp.propose_user = &rp;
        if (ig_spec_create(&sp, model, cp.n_ctx, 1, &spec) != IG_OK) {
            fprintf(stderr, "ignis bench: %s\n", ig_last_error());
            goto done;
        }
    } else if (spec_options_setup("ignis bench", c->draft, c->lookup, &sp, model, mp, cp.n_ctx, 1,
                                  &draft_m, &spec)) {
        goto done;
    }
    /* Warm-up of both, then alternating repetitions. */
    if (one_run(ctx, tok, ids, (int)n_ids, 16, NULL, NULL, &o) ||
        one_run(ctx, tok, ids, (int)n_ids, 16, spec, NULL, &o))
        goto done;
    double ts[2][64];
    long drafted = 0, accepted = 0, steps = 0, gen = 0;
    int reps = c->reps < 64 ? c->reps : 64;
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* alternate which goes first */
            if (one_run(ctx, tok, ids, (int)n_ids, c->n_gen, which ? spec : NULL, NULL, &o)) goto done;
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
    const char *drafter;
    if (c->replay) {
        drafter = "replay";
        snprintf(label, sizeof label, "replay (upper bound) K=%d", sp.draft_max);
    } else if (c->draft) {
        drafter = "draft";
        const char *base = strrchr(c->draft, '/');
        snprintf(label, sizeof label, "draft %s K=%d", base ? base + 1 : c->draft, sp.draft_max);
    } else {
        drafter = "lookup";
        snprintf(label, sizeof label, "lookup %d..%d K=%d", sp.ngram_min, sp.ngram_max, sp.draft_max);
    }
    const char *what = !tok ? "fixed ids" : c->prompt ? "given" : c->lookup ? "copy task" : "natural text";
    printf("\nspeculative decoding: prompt %zu tokens (%s), greedy tg%d, %d repetitions (A/B)\n",
           n_ids, what, c->n_gen, reps);
    printf("| %-34s | %16s | %8s | %11s | %8s |\n", "test", "t/s", "accept", "tokens/step", "speed-up");
    printf("| %-34s | %8.2f ± %5.2f | %8s | %11s | %8s |\n", "plain", m0, s0, "-", "1.00", "1.00x");
    double acc = drafted ? (double)accepted / drafted : 0.0;
    double tps = steps ? (double)gen / steps : 0.0;
    double up = m0 > 0 ? m1 / m0 : 0.0;
    char acc_s[16], tps_s[16];
    snprintf(acc_s, sizeof acc_s, "%.1f%%", 100.0 * acc);
    snprintf(tps_s, sizeof tps_s, "%.2f", tps);
    printf("| %-34s | %8.2f ± %5.2f | %8s | %11s | %7.2fx |\n", label, m1, s1, acc_s, tps_s, up);
    if (results) {
        json_t *j = json_object();
        json_object_set_new(j, "test", json_string("speculative"));
        json_object_set_new(j, "drafter", json_string(drafter));
        json_object_set_new(j, "label", json_string(label));
        json_object_set_new(j, "prompt", json_string(what));
        json_object_set_new(j, "n_prompt", json_integer((json_int_t)n_ids));
        json_object_set_new(j, "n_gen", json_integer(c->n_gen));
        json_object_set_new(j, "draft_max", json_integer(sp.draft_max));
        json_object_set_new(j, "repetitions", json_integer(reps));
        json_object_set_new(j, "plain_ts", json_real(m0));
        json_object_set_new(j, "plain_sd", json_real(s0));
        json_object_set_new(j, "avg_ts", json_real(m1));
        json_object_set_new(j, "stddev_ts", json_real(s1));
        json_object_set_new(j, "drafted", json_integer(drafted));
        json_object_set_new(j, "accepted", json_integer(accepted));
        json_object_set_new(j, "acceptance", json_real(acc));
        json_object_set_new(j, "tokens_per_step", json_real(tps));
        json_object_set_new(j, "speedup", json_real(up));
        json_array_append_new(results, j);
    }
    rc = 0;
done:
    ig_spec_free(spec);
    ig_model_free(draft_m);
    ig_context_free(ctx);
    ig_token_list_free(&rp.out);
    free(ids);
    return rc;
}

/* splitmix64: the same pseudo-random token ids on every run */
static int32_t curve_token(uint64_t *state, int n_vocab) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (int32_t)(z % (uint64_t)n_vocab);
}

#define CURVE_N 5
#define CURVE_MAX 16

int bench_verify_curve(ig_model *model, const ig_model_params *mp, const bench_spec_cfg *c, json_t *results) {
    static const int sizes[CURVE_N] = {1, 2, 4, 8, 16};
    const int n_vocab = ig_model_hparams(model)->n_vocab_real;
    const int depth = c->depth > 0 ? c->depth : 0;
    const int reps = c->reps < 64 ? c->reps : 64;
    int chunk = c->n_batch > CURVE_MAX ? c->n_batch : CURVE_MAX; /* also fills the depth */
    if (chunk > depth + CURVE_MAX) chunk = depth + CURVE_MAX;
    if ((long)depth + CURVE_MAX > (1L << 24)) {
        fprintf(stderr, "ignis bench: -d %d is too deep for the verify curve\n", depth);
        return 1;
    }
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = depth + CURVE_MAX;
    cp.n_batch = chunk;
    cp.kv_type = c->kv;
    cp.n_threads = mp->n_threads;
    ig_context *ctx = NULL;
    if (ig_context_create(model, &cp, &ctx) != IG_OK) {
        fprintf(stderr, "ignis bench: %s\n", ig_last_error());
        return 1;
    }
    int rc = 1;
    int32_t *tok = calloc((size_t)chunk, sizeof *tok), *pos = calloc((size_t)chunk, sizeof *pos);
    int32_t *seq = calloc((size_t)chunk, sizeof *seq);
    uint8_t *want = calloc((size_t)chunk, 1);
    uint64_t rng = 0x243f6a8885a308d3ULL;
    double t[CURVE_N][64];
    if (!tok || !pos || !seq || !want) {
        fprintf(stderr, "ignis bench: out of memory\n");
        goto done;
    }
    /* The depth: pseudo-random tokens, made once (each step is taken back). */
    for (int done = 0; done < depth;) {
        int m = depth - done < chunk ? depth - done : chunk;
        for (int i = 0; i < m; i++) {
            tok[i] = curve_token(&rng, n_vocab);
            pos[i] = done + i;
            seq[i] = 0;
        }
        ig_batch b = {m, tok, pos, seq, NULL};
        if (ig_decode(ctx, &b) != IG_OK) {
            fprintf(stderr, "ignis bench: depth decode failed: %s\n", ig_last_error());
            goto done;
        }
        done += m;
    }
    /* One warm-up pass, then repetitions; the order of the sizes rotates
     * every repetition so that a changing load hits all alike. */
    for (int r = -1; r < reps; r++) {
        for (int k = 0; k < CURVE_N; k++) {
            int which = r < 0 ? k : (k + r) % CURVE_N, m = sizes[which];
            for (int i = 0; i < m; i++) {
                tok[i] = curve_token(&rng, n_vocab);
                pos[i] = depth + i;
                seq[i] = 0;
                want[i] = 1; /* a verify step needs every row's logits */
            }
            ig_batch b = {m, tok, pos, seq, want};
            double t0 = ig_time_now();
            ig_status st = ig_decode(ctx, &b);
            double dt = ig_time_now() - t0;
            if (st == IG_OK) st = ig_seq_truncate(ctx, 0, depth);
            if (st != IG_OK) {
                fprintf(stderr, "ignis bench: verify step failed: %s\n", ig_last_error());
                goto done;
            }
            if (r >= 0) t[which][r] = dt * 1e3;
        }
    }
    double m1, s1;
    mean_sd(t[0], reps, &m1, &s1);
    printf("\nverification cost: one step of N tokens (all with logits) after %d tokens, "
           "%d repetitions\n", depth, reps);
    printf("| %-10s | %16s | %13s | %12s |\n", "tokens", "ms/step", "vs 1 token", "ms/token");
    for (int k = 0; k < CURVE_N; k++) {
        double m, sd;
        mean_sd(t[k], reps, &m, &sd);
        double rel = m1 > 0 ? m / m1 : 0.0;
        printf("| %-10d | %8.2f ± %5.2f | %12.2fx | %12.2f |\n", sizes[k], m, sd, rel, m / sizes[k]);
        if (results) {
            json_t *j = json_object();
            char name[32];
            snprintf(name, sizeof name, "verify%d", sizes[k]);
            json_object_set_new(j, "test", json_string(name));
            json_object_set_new(j, "n_tokens", json_integer(sizes[k]));
            json_object_set_new(j, "n_depth", json_integer(depth));
            json_object_set_new(j, "repetitions", json_integer(reps));
            json_object_set_new(j, "avg_ms", json_real(m));
            json_object_set_new(j, "stddev_ms", json_real(sd));
            json_object_set_new(j, "relative", json_real(rel));
            json_array_append_new(results, j);
        }
    }
    rc = 0;
done:
    free(tok);
    free(pos);
    free(seq);
    free(want);
    ig_context_free(ctx);
    return rc;
}
