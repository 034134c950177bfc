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

/* Text not yet emitted because it might be the start of a stop string. */
typedef struct pending {
    char *buf;
    size_t len, cap;
} pending;

static bool pending_append(pending *p, const char *s, size_t n) {
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *nb = realloc(p->buf, cap);
        if (!nb) return false;
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = '\0';
    return true;
}

/* Length of the longest suffix of s that is a proper prefix of a stop string. */
static size_t stop_prefix_len(const char *s, size_t n, const char *const *stop, int n_stop) {
    size_t best = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > best; k--)
            if (k <= n && !memcmp(s + n - k, stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Finds the earliest stop string in s; returns its offset or -1. */
static long find_stop(const char *s, size_t n, const char *const *stop, int n_stop) {
    long best = -1;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (!sl || sl > n) continue;
        for (size_t off = 0; off + sl <= n; off++)
            if (!memcmp(s + off, stop[i], sl)) {
                if (best < 0 || (long)off < best) best = (long)off;
                break;
            }
    }
    return best;
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
    /* Reuse the common prefix already in the cache (keep at least one token
     * to feed, so there are logits to sample from). */
    int keep = 0, held = ig_seq_len(ctx, seq);
    if (history && n_history == held) {
        while (keep < n_history && keep < n_prompt - 1 && history[keep] == prompt[keep]) keep++;
    }
    if (keep < held && ig_seq_truncate(ctx, seq, keep) != IG_OK) {
        ig_seq_clear(ctx, seq);
        keep = 0;
    }
    stats->n_reused = keep;
    int n_chunk = gp->n_chunk > 0 ? IG_MIN(gp->n_chunk, cp->n_batch) : cp->n_batch;
    int32_t *pos = ig_calloc_array((size_t)n_chunk, sizeof(int32_t));
    int32_t *seqs = ig_calloc_array((size_t)n_chunk, sizeof(int32_t));
    ig_sampler *smp = NULL;
    ig_detok_stream *ds = NULL;
    pending pend = {0};
    ig_status st = IG_OK;
    if (!pos || !seqs) {
        st = IG_ERR_NO_MEMORY;
        goto done;
    }
    const ig_hparams *hp = &ctx->model->hp;
    st = ig_sampler_create(&gp->sampling, hp->n_vocab_real, &smp);
    if (st != IG_OK) goto done;
    if (tok) { /* without a tokenizer (bare test models) only ids come out */
        st = ig_detok_stream_create(tok, &ds);
        if (st != IG_OK) goto done;
    }
    for (int i = 0; i < n_prompt; i++) ig_sampler_accept(smp, prompt[i]);
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

    int32_t eot = hp->eot_id, eos = hp->eos_id;
    int cur = n_prompt;
    char piece[256];
    stats->finish = IG_FINISH_LENGTH;
    for (;;) {
        if (gp->n_predict >= 0 && stats->n_generated >= gp->n_predict) break;
        if (gp->interrupt && *gp->interrupt) {
            stats->finish = IG_FINISH_INTERRUPT;
            break;
        }
        int32_t id = ig_sampler_sample(smp, ig_get_logits(ctx, 0));
        if (id == eot || id == eos) {
            stats->finish = IG_FINISH_STOP;
            stats->stop_token = id;
            break;
        }
        ig_sampler_accept(smp, id);
        stats->n_generated++;
        if (io->on_token) io->on_token(io->user, id);
        size_t got = ds ? ig_detok_stream_push(ds, id, piece, sizeof piece) : 0;
        if (got && !pending_append(&pend, piece, got)) {
            st = IG_ERR_NO_MEMORY;
            goto done;
        }
        long at = gp->n_stop ? find_stop(pend.buf ? pend.buf : "", pend.len, gp->stop, gp->n_stop) : -1;
        if (at >= 0) {
            if (at > 0 && io->emit) io->emit(io->user, pend.buf, (size_t)at);
            pend.len = 0;
            stats->finish = IG_FINISH_STOP;
            break;
        }
        size_t hold = stop_prefix_len(pend.buf ? pend.buf : "", pend.len, gp->stop, gp->n_stop);
        if (pend.len > hold) {
            bool go = io->emit ? io->emit(io->user, pend.buf, pend.len - hold) : true;
            memmove(pend.buf, pend.buf + pend.len - hold, hold);
            pend.len = hold;
            if (!go) {
                stats->finish = IG_FINISH_INTERRUPT;
                break;
            }
        }
        if (cur >= cp->n_ctx) break; /* context full: finish with "length" */
        int32_t p = cur;
        ig_batch b = {1, &id, &p, seqs, NULL};
        st = ig_decode(ctx, &b);
        if (st != IG_OK) goto done;
        cur++;
    }
    /* Whatever is left (held for stop strings, or an incomplete UTF-8 tail). */
    if (stats->finish != IG_FINISH_STOP || pend.len) {
        size_t got = ds ? ig_detok_stream_flush(ds, piece, sizeof piece) : 0;
        if (got) pending_append(&pend, piece, got);
        if (pend.len && io->emit) io->emit(io->user, pend.buf, pend.len);
    }
    stats->t_generate = ig_time_now() - t1;
done:
    free(pend.buf);
    ig_detok_stream_free(ds);
    ig_sampler_free(smp);
    free(pos);
    free(seqs);
    return st;
}
