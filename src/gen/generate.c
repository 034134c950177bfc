#include "gen/generate.h"

#include "core/util.h"
#include "engine/context.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
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

typedef struct gen_cb {
    const ig_gen_io *io;
    ig_gen_stats *stats;
    ig_token_list *text; /* prompt and output, for the drafter; NULL without one */
    ig_gen_event last;
} gen_cb;

/* One event of a (verified) step: count it, hand the token and text out. */
static bool on_event(void *user, const ig_gen_event *ev) {
    gen_cb *cb = user;
    cb->last = *ev;
    if (ev->stop_token) {
        cb->stats->stop_token = ev->token;
    } else if (ev->token >= 0) { /* < 0: a complete grammar ended it, nothing sampled */
        cb->stats->n_generated++;
        if (cb->io->on_token) cb->io->on_token(cb->io->user, ev->token);
        if (cb->text) ig_token_list_push(cb->text, ev->token);
    }
    return deliver(cb->io, ev);
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
    ig_token_list text = {0};
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
    gen_cb cb = {.io = io, .stats = stats, .text = gp->spec ? &text : NULL};
    if (gp->spec) /* the drafter sees the whole text: prompt, then output */
        for (int i = 0; i < n_prompt; i++) ig_token_list_push(&text, prompt[i]);
    int32_t batch_tok[IG_SPEC_MAX_DRAFT + 1];
    int32_t bpos[IG_SPEC_MAX_DRAFT + 1], bseq[IG_SPEC_MAX_DRAFT + 1];
    uint8_t bwant[IG_SPEC_MAX_DRAFT + 1];
    int n_draft = 0, n_past = n_prompt;
    for (;;) {
        if (gp->n_predict == 0 || (gp->interrupt && *gp->interrupt)) {
            st = ig_gen_seq_finish(gs, gp->n_predict == 0 ? IG_FINISH_LENGTH : IG_FINISH_INTERRUPT, &ev);
            if (st != IG_OK) goto done;
            deliver(io, &ev);
            break;
        }
        /* Rows 0..n_draft of the last step: the last token's, then each draft's. */
        ig_spec_result res;
        st = ig_spec_verify(gs, ctx, 0, batch_tok + 1, n_draft, on_event, &cb, &res);
        if (st != IG_OK) goto done;
        stats->n_accepted += res.n_accepted;
        ev = cb.last;
        if (text.oom) {
            st = ig_fail(IG_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        if (n_draft && res.n_steps < n_draft + 1) { /* drop the rejected positions */
            st = ig_seq_truncate(ctx, seq, n_past - n_draft - 1 + res.n_steps);
            if (st != IG_OK) goto done;
            n_past = n_past - n_draft - 1 + res.n_steps;
        }
        if (res.stopped) {
            if (ev.finish != IG_FINISH_NONE) break;
            /* the caller stops: what is held back still goes out */
            st = ig_gen_seq_finish(gs, IG_FINISH_INTERRUPT, &ev);
            if (st != IG_OK) goto done;
            deliver(io, &ev);
            break;
        }
        batch_tok[0] = ev.token;
        n_draft = 0;
        if (gp->spec) {
            int room = IG_MIN(cp->n_batch - 1, cp->n_ctx - n_past - 1);
            if (gp->n_predict > 0) room = IG_MIN(room, gp->n_predict - stats->n_generated);
            if (room > 0)
                n_draft = ig_spec_draft(gp->spec, seq, text.ids, text.n, room, batch_tok + 1);
            bool first = false;
            const char *why = ig_spec_failure(gp->spec, &first);
            if (why && first) fprintf(stderr, "ignis: %s\n", why);
        }
        for (int k = 0; k <= n_draft; k++) {
            bpos[k] = n_past + k;
            bseq[k] = seq;
            bwant[k] = 1;
        }
        ig_batch b = {n_draft + 1, batch_tok, bpos, bseq, bwant};
        st = ig_decode(ctx, &b);
        if (st != IG_OK) goto done;
        n_past += n_draft + 1;
        stats->n_steps++;
        stats->n_drafted += n_draft;
    }
    stats->finish = ev.finish;
    stats->t_generate = ig_time_now() - t1;
done:
    ig_gen_seq_free(gs);
    ig_token_list_free(&text);
    free(pos);
    free(seqs);
    return st;
}
