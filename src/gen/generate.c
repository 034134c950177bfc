#include "gen/generate.h"

#include "core/util.h"
#include "engine/context.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

bool ig_token_list_push(ig_token_list *l, int32_t id) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        int32_t *p = ig_realloc_array(l->ids, (size_t)cap, sizeof *p);
        if (!p) {
            l->oom = true;
            return false;
        }
        l->ids = p;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return true;
}

void ig_token_list_free(ig_token_list *l) {
    free(l->ids);
    *l = (ig_token_list){0};
}

void ig_token_list_collect(void *user, int32_t id) { ig_token_list_push(user, id); }

/* Hands an event's text to the caller; false when emit asks to stop. */
static bool deliver(const ig_gen_io *io, const ig_gen_event *ev) {
    return ev->n_text && io->emit ? io->emit(io->user, ev->text, ev->n_text) : true;
}

ig_status ig_generate(ig_context *ctx, int seq, const ig_tokenizer *tok, const int32_t *prompt,
                      int n_prompt, const int32_t *history, int n_history,
                      const ig_gen_params *gp, const ig_gen_io *io, ig_gen_stats *stats) {
    memset(stats, 0, sizeof *stats);
    stats->stop_token = -1;
    const ig_context_params *cp = ig_context_params_get(ctx);
    if (n_prompt < 1) return ig_fail(IG_ERR_INVALID_ARG, "empty prompt");
    if (n_prompt >= cp->n_ctx)
        return ig_fail(IG_ERR_CONTEXT_FULL, "the prompt has %d tokens but the context holds %d",
                       n_prompt, cp->n_ctx);
    int keep = ig_gen_prefix_keep(ctx, seq, history, history ? n_history : 0, prompt, n_prompt);
    stats->n_reused = keep;
    int n_chunk = gp->n_chunk > 0 ? IG_MIN(gp->n_chunk, cp->n_batch) : cp->n_batch;
    int32_t *pos = ig_calloc_array((size_t)n_chunk, sizeof(int32_t));
    int32_t *seqs = ig_calloc_array((size_t)n_chunk, sizeof(int32_t));
    ig_gen_seq *gs = NULL;
    ig_status st = IG_OK;
    if (!pos || !seqs) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
    const ig_hparams *hp = &ctx->model->hp;
    int32_t stop_ids[2] = {hp->eot_id, hp->eos_id};
    ig_gen_seq_params sp = {
        .sampling = gp->sampling,
        .n_vocab = hp->n_vocab_real,
        .tok = tok, /* without a tokenizer (bare test models) only ids come out */
        .stop_ids = stop_ids,
        .n_stop_ids = 2,
        .stop = gp->stop,
        .n_stop = gp->n_stop > 0 ? (size_t)gp->n_stop : 0,
        .history = prompt, /* the CLI's penalties see the prompt too */
        .n_history = n_prompt,
        .max_tokens = gp->n_predict,
        .n_ctx = cp->n_ctx,
        .n_prompt = n_prompt,
        .grammar = gp->grammar,
        .trie = gp->trie,
    };
    st = ig_gen_seq_create(&sp, &gs);
    if (st != IG_OK) goto done;
    for (int i = 0; i < n_chunk; i++) seqs[i] = seq;

    double t0 = ig_time_now();
    for (int i = keep; i < n_prompt; i += n_chunk) {
        int n = IG_MIN(n_chunk, n_prompt - i);
        for (int k = 0; k < n; k++) pos[k] = i + k;
        ig_batch b = {n, prompt + i, pos, seqs, NULL};
        st = ig_decode(ctx, &b);
        if (st != IG_OK) goto done;
        stats->n_prompt += n;
        if (gp->interrupt && *gp->interrupt) {
            stats->finish = IG_FINISH_INTERRUPT;
            stats->t_prompt = ig_time_now() - t0;
            goto done;
        }
    }
    double t1 = ig_time_now();
    stats->t_prompt = t1 - t0;

    ig_gen_event ev;
    for (;;) {
        if (gp->n_predict == 0 || (gp->interrupt && *gp->interrupt)) {
            st = ig_gen_seq_finish(gs, gp->n_predict == 0 ? IG_FINISH_LENGTH : IG_FINISH_INTERRUPT, &ev);
            if (st != IG_OK) goto done;
            deliver(io, &ev);
            break;
        }
        st = ig_gen_seq_step(gs, ig_get_logits(ctx, 0), &ev);
        if (st != IG_OK) goto done;
        if (ev.stop_token) {
            stats->stop_token = ev.token;
        } else if (ev.token >= 0) {
            stats->n_generated++;
            if (io->on_token) io->on_token(io->user, ev.token);
        }
        bool go = deliver(io, &ev);
        if (ev.finish != IG_FINISH_NONE) break;
        if (!go) { /* the caller stops: what is held back still goes out */
            st = ig_gen_seq_finish(gs, IG_FINISH_INTERRUPT, &ev);
            if (st != IG_OK) goto done;
            deliver(io, &ev);
            break;
        }
        int32_t p = n_prompt + stats->n_generated - 1;
        ig_batch b = {1, &ev.token, &p, seqs, NULL};
        st = ig_decode(ctx, &b);
        if (st != IG_OK) goto done;
    }
    stats->finish = ev.finish;
    stats->t_generate = ig_time_now() - t1;
done:
    ig_gen_seq_free(gs);
    free(pos);
    free(seqs);
    return st;
}
