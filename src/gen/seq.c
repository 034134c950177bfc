#include "gen/seq.h"

#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bytes one token's text may take when pushed through the detokenizer (a
 * longer piece would come out over several pushes). */
#define PIECE_CAP 4096

struct ig_gen_seq {
    ig_sampler *smp;
    ig_detok_stream *detok; /* NULL without a tokenizer */
    int n_vocab;
    int32_t *stop_ids;
    int n_stop_ids;
    char **stop;            /* the pointers and the strings: one allocation */
    size_t n_stop;
    int max_tokens, n_ctx, n_prompt;
    bool logprobs;
    int top_k;
    float *lp;              /* n_vocab log-probabilities (allocated at the first step) */
    int n_accepted;
    bool done;

    /* Decoded text not yet released; NUL-terminated. The first `drop` bytes
     * went out with the last event and are removed at the next call (the
     * event's text points at them until then). */
    char *pend;
    size_t pend_len, pend_cap, drop;
    /* Logprob entries waiting for their text; span[i] is the entry's text
     * in bytes of the whole decoded output (released + pending). The first
     * lp_drop entries went out with the last event. */
    ig_gen_logprob *lpq;
    struct span {
        size_t start, end;
    } *span;
    size_t n_lpq, cap_lpq, lp_drop;
    size_t gen_bytes; /* bytes decoded so far */
    size_t rel_bytes; /* bytes released so far */

    /* constrained decoding */
    ig_grammar_matcher *gm;
    const ig_token_trie *trie;
    uint32_t *mask;  /* (n_vocab + 31) / 32 words */
    float *masked;   /* n_vocab logits with the disallowed ones at -inf */
    double mask_s;
    bool mask_ready;     /* mask holds the current state's (ig_gen_seq_prepare_mask) */
    int n_allowed_ready; /* its count of allowed tokens */
    ig_status mask_err;  /* why the last mask failed (a grammar too ambiguous: unsupported) */
    double prepare_s;    /* the time ig_gen_seq_prepare_mask took */
};

/* ---- stop strings -------------------------------------------------------- */

size_t ig_gen_stop_scan(const char *text, size_t len, const char *const *stops, size_t n_stops,
                        bool *matched) {
    *matched = false;
    size_t best = len;
    for (size_t k = 0; k < n_stops; k++) {
        size_t sl = stops[k] ? strlen(stops[k]) : 0;
        if (!sl || sl > len) continue;
        for (size_t i = 0; i + sl <= len && i < best; i++) {
            if (!memcmp(text + i, stops[k], sl)) {
                best = i;
                *matched = true;
                break;
            }
        }
    }
    if (*matched) return best;
    size_t hold = 0;
    for (size_t k = 0; k < n_stops; k++) {
        size_t sl = stops[k] ? strlen(stops[k]) : 0;
        if (!sl) continue;
        size_t maxl = sl - 1 < len ? sl - 1 : len;
        for (size_t l = maxl; l > hold; l--) {
            if (!memcmp(text + len - l, stops[k], l)) {
                hold = l;
                break;
            }
        }
    }
    return len - hold;
}

/* ---- prefix reuse -------------------------------------------------------- */

int ig_gen_common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    if (!a || !b) return 0;
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

int ig_gen_prefix_len(const int32_t *cached, int n_cached, const int32_t *prompt, int n_prompt) {
    int keep = ig_gen_common_prefix(cached, n_cached, prompt, n_prompt);
    if (keep > n_prompt - 1) keep = n_prompt - 1;
    return keep > 0 ? keep : 0;
}

int ig_gen_prefix_keep(ig_context *ctx, int seq, const int32_t *cached, int n_cached,
                       const int32_t *prompt, int n_prompt) {
    int held = ig_seq_len(ctx, seq);
    int keep = n_cached == held ? ig_gen_prefix_len(cached, n_cached, prompt, n_prompt) : 0;
    if (keep < held && (keep == 0 || ig_seq_truncate(ctx, seq, keep) != IG_OK)) {
        ig_seq_clear(ctx, seq);
        keep = 0;
    }
    return keep;
}

/* ---- the sequence -------------------------------------------------------- */

static char **copy_strings(const char *const *v, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (!ig_size_add(total, (v[i] ? strlen(v[i]) : 0) + 1, &total)) return NULL;
    size_t ptrs;
    if (!ig_size_mul(n, sizeof(char *), &ptrs) || !ig_size_add(ptrs, total, &total)) return NULL;
    char **out = ig_calloc_array(1, total);
    if (!out) return NULL;
    char *p = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        size_t l = v[i] ? strlen(v[i]) : 0;
        if (l) memcpy(p, v[i], l);
        p[l] = '\0';
        out[i] = p;
        p += l + 1;
    }
    return out;
}

ig_status ig_gen_seq_create(const ig_gen_seq_params *p, ig_gen_seq **out) {
    if (out) *out = NULL;
    if (!p || !out || p->n_vocab < 1 || p->n_stop_ids < 0 || (p->n_stop_ids && !p->stop_ids) ||
        (p->n_stop && !p->stop) || p->n_history < 0 || (p->n_history && !p->history))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_create: bad parameters");
    ig_gen_seq *s = ig_calloc_array(1, sizeof *s);
    if (!s) return IG_ERR_NO_MEMORY;
    ig_status st = ig_sampler_create(&p->sampling, p->n_vocab, &s->smp);
    if (st == IG_OK && p->tok) st = ig_detok_stream_create(p->tok, &s->detok);
    if (st == IG_OK && p->n_stop_ids) {
        s->stop_ids = ig_calloc_array((size_t)p->n_stop_ids, sizeof *s->stop_ids);
        if (s->stop_ids) memcpy(s->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *s->stop_ids);
        else st = IG_ERR_NO_MEMORY;
    }
    if (st == IG_OK && p->n_stop && !(s->stop = copy_strings(p->stop, p->n_stop)))
        st = ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    if (st == IG_OK && (p->grammar || p->trie)) {
        if (!p->grammar || !p->trie)
            st = ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_create: a grammar needs a token trie");
        else st = ig_grammar_matcher_create(p->grammar, &s->gm);
        if (st == IG_OK) {
            s->trie = p->trie;
            s->mask = ig_calloc_array(((size_t)p->n_vocab + 31) / 32, sizeof *s->mask);
            s->masked = ig_calloc_array((size_t)p->n_vocab, sizeof *s->masked);
            if (!s->mask || !s->masked) st = ig_fail(IG_ERR_NO_MEMORY, "out of memory");
        }
    }
    if (st != IG_OK) {
        ig_gen_seq_free(s);
        return st;
    }
    s->n_vocab = p->n_vocab;
    s->n_stop_ids = p->n_stop_ids;
    s->n_stop = p->n_stop;
    s->max_tokens = p->max_tokens;
    s->n_ctx = p->n_ctx;
    s->n_prompt = p->n_prompt;
    s->logprobs = p->logprobs;
    s->top_k = p->top_logprobs < 0 ? 0 : IG_MIN(p->top_logprobs, IG_GEN_MAX_TOP_LOGPROBS);
    for (int i = 0; i < p->n_history; i++) ig_sampler_accept(s->smp, p->history[i]);
    *out = s;
    return IG_OK;
}

void ig_gen_seq_free(ig_gen_seq *s) {
    if (!s) return;
    ig_sampler_free(s->smp);
    ig_detok_stream_free(s->detok);
    free(s->stop_ids);
    free(s->stop);
    free(s->lp);
    free(s->pend);
    free(s->lpq);
    free(s->span);
    ig_grammar_matcher_free(s->gm);
    free(s->mask);
    free(s->masked);
    free(s);
}

double ig_gen_seq_mask_seconds(const ig_gen_seq *s) { return s ? s->mask_s : 0.0; }

/* Writes into s->masked the logits with every token the grammar does not
 * allow now at -inf (stop ids allowed when the sentence may end). Returns
 * the number of allowed tokens (0: none), -1 on failure. */
ig_status ig_gen_seq_prepare_mask(ig_gen_seq *s) {
    if (!s || !s->gm || s->done || s->mask_ready) return IG_OK;
    const double t0 = ig_time_now();
    ig_status st = ig_grammar_matcher_mask(s->gm, s->trie, s->mask, &s->n_allowed_ready);
    s->prepare_s = ig_time_now() - t0;
    s->mask_ready = st == IG_OK;
    return st;
}

static int apply_grammar(ig_gen_seq *s, const float *logits) {
    double t0 = ig_time_now(), prepared = 0.0;
    int n_allowed = 0;
    if (s->mask_ready) { /* computed ahead, while the logits were */
        n_allowed = s->n_allowed_ready;
        prepared = s->prepare_s;
        s->mask_ready = false;
    } else if ((s->mask_err = ig_grammar_matcher_mask(s->gm, s->trie, s->mask, &n_allowed)) != IG_OK) {
        return -1;
    }
    int V = s->n_vocab, Vt = ig_token_trie_n_vocab(s->trie);
    if (Vt > V) Vt = V;
    float *out = s->masked;
    int i = 0;
    for (; i + 32 <= Vt; i += 32) {
        uint32_t w = s->mask[i >> 5];
        if (w == 0) {
            for (int k = 0; k < 32; k++) out[i + k] = -INFINITY;
        } else if (w == UINT32_MAX) {
            memcpy(out + i, logits + i, 32 * sizeof *out);
        } else {
            for (int k = 0; k < 32; k++) out[i + k] = (w >> k) & 1u ? logits[i + k] : -INFINITY;
        }
    }
    for (; i < Vt; i++) out[i] = (s->mask[i >> 5] >> (i & 31)) & 1u ? logits[i] : -INFINITY;
    for (; i < V; i++) out[i] = -INFINITY;
    if (ig_grammar_matcher_can_end(s->gm))
        for (int k = 0; k < s->n_stop_ids; k++) {
            int32_t id = s->stop_ids[k];
            if (id >= 0 && id < V) {
                if (out[id] == -INFINITY) n_allowed++;
                out[id] = logits[id];
            }
        }
    s->mask_s = prepared + (ig_time_now() - t0);
    return n_allowed;
}

static bool pend_append(ig_gen_seq *s, const char *t, size_t n) {
    size_t need;
    if (!ig_size_add(s->pend_len, n, &need) || !ig_size_add(need, 1, &need)) return false;
    if (need > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap : 64;
        while (cap < need)
            if (!ig_size_mul(cap, 2, &cap)) return false;
        char *b = ig_realloc_array(s->pend, cap, 1);
        if (!b) return false;
        s->pend = b;
        s->pend_cap = cap;
    }
    if (n) memcpy(s->pend + s->pend_len, t, n);
    s->pend_len += n;
    s->pend[s->pend_len] = '\0';
    return true;
}

static bool lpq_push(ig_gen_seq *s, const ig_gen_logprob *e, size_t start, size_t end) {
    if (s->n_lpq == s->cap_lpq) {
        size_t cap = s->cap_lpq ? s->cap_lpq * 2 : 8;
        ig_gen_logprob *a = ig_realloc_array(s->lpq, cap, sizeof *a);
        if (!a) return false;
        s->lpq = a;
        struct span *b = ig_realloc_array(s->span, cap, sizeof *b);
        if (!b) return false;
        s->span = b;
        s->cap_lpq = cap;
    }
    s->lpq[s->n_lpq] = *e;
    s->span[s->n_lpq] = (struct span){start, end};
    s->n_lpq++;
    return true;
}

/* Removes what the previous event handed out. */
static void consume_released(ig_gen_seq *s) {
    if (s->drop) {
        memmove(s->pend, s->pend + s->drop, s->pend_len - s->drop);
        s->pend_len -= s->drop;
        s->pend[s->pend_len] = '\0';
        s->drop = 0;
    }
    if (s->lp_drop) {
        size_t k = s->lp_drop, left = s->n_lpq - k;
        memmove(s->lpq, s->lpq + k, left * sizeof *s->lpq);
        memmove(s->span, s->span + k, left * sizeof *s->span);
        s->n_lpq = left;
        s->lp_drop = 0;
    }
}

/* Releases the first n pending bytes with the logprob entries they cover:
 * while running, the tokens whose text lies entirely within the released
 * text; at the end (final), also the token a stop string cut through (it
 * contributed released text); the entries after it are dropped. */
static void release(ig_gen_seq *s, size_t n, bool final, ig_gen_event *ev) {
    s->rel_bytes += n;
    size_t k = 0;
    while (k < s->n_lpq && (final ? s->span[k].start < s->rel_bytes || s->span[k].end <= s->rel_bytes
                                  : s->span[k].end <= s->rel_bytes))
        k++;
    ev->text = n ? s->pend : "";
    ev->n_text = n;
    ev->lps = k ? s->lpq : NULL;
    ev->n_lps = k;
    s->drop = n;
    s->lp_drop = k;
}

/* Ends the sequence: flushes the detokenizer and releases everything held
 * back, still cut at a stop string. */
static ig_status drain(ig_gen_seq *s, ig_finish reason, ig_gen_event *ev) {
    s->done = true;
    if (s->detok) {
        char buf[PIECE_CAP];
        size_t n;
        while ((n = ig_detok_stream_flush(s->detok, buf, sizeof buf)) > 0) {
            if (!pend_append(s, buf, n)) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
            s->gen_bytes += n;
        }
    }
    bool matched = false;
    size_t rel = s->pend_len ? ig_gen_stop_scan(s->pend, s->pend_len, (const char *const *)s->stop,
                                                s->n_stop, &matched)
                             : 0;
    if (!matched) rel = s->pend_len;
    release(s, rel, true, ev);
    ev->finish = matched ? IG_FINISH_STOP : reason;
    return IG_OK;
}

/* The k most likely tokens of lp (NaN skipped), best first, ties by id. */
static void top_logprobs(const float *lp, int n_vocab, int k, ig_gen_logprob *out) {
    out->n_top = 0;
    for (int id = 0; id < n_vocab; id++) {
        float v = lp[id];
        if (isnan(v)) continue;
        if (out->n_top == k && !(v > out->top[k - 1].logprob)) continue;
        int pos = out->n_top < k ? out->n_top++ : k - 1;
        while (pos > 0 && out->top[pos - 1].logprob < v) {
            out->top[pos] = out->top[pos - 1];
            pos--;
        }
        out->top[pos].id = id;
        out->top[pos].logprob = v;
    }
}

static bool is_stop_id(const ig_gen_seq *s, int32_t id) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] >= 0 && s->stop_ids[i] == id) return true;
    return false;
}

static void event_init(ig_gen_event *ev) {
    *ev = (ig_gen_event){.token = -1, .text = "", .finish = IG_FINISH_NONE};
}

ig_status ig_gen_seq_step(ig_gen_seq *s, const float *logits, ig_gen_event *ev) {
    return ig_gen_seq_step_draft(s, logits, -1, NULL, NULL, ev);
}

ig_status ig_gen_seq_step_draft(ig_gen_seq *s, const float *logits, int32_t draft, const float *q,
                                bool *accepted, ig_gen_event *ev) {
    if (accepted) *accepted = false;
    if (!ev) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_step: NULL event");
    event_init(ev);
    if (!s || !logits) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_step: NULL argument");
    if (s->done) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_step: the sequence has ended");
    consume_released(s);
    if (s->gm) {
        int n_allowed = apply_grammar(s, logits);
        if (n_allowed < 0) {
            s->done = true;
            return ig_fail_wrap(s->mask_err, "grammar");
        }
        if (n_allowed == 0) {
            if (ig_grammar_matcher_can_end(s->gm)) return drain(s, IG_FINISH_STOP, ev);
            s->done = true;
            return ig_fail(IG_ERR_INTERNAL, "grammar: no token can continue the output");
        }
        logits = s->masked;
    }
    if (s->logprobs && !s->lp) {
        s->lp = ig_calloc_array((size_t)s->n_vocab, sizeof *s->lp);
        if (!s->lp) {
            s->done = true;
            return IG_ERR_NO_MEMORY;
        }
    }
    if (s->logprobs) ig_sampler_logprobs(s->smp, logits, s->lp);
    bool acc = false;
    int32_t tok = draft >= 0 ? ig_sampler_verify(s->smp, logits, draft, q, &acc)
                             : ig_sampler_sample(s->smp, logits);
    if (accepted) *accepted = acc;
    if (tok < 0 || tok >= s->n_vocab) {
        s->done = true;
        return ig_fail(IG_ERR_INTERNAL, "sampling failed");
    }
    ev->token = tok;
    if (is_stop_id(s, tok)) {
        ev->stop_token = true;
        return drain(s, IG_FINISH_STOP, ev);
    }
    if (s->gm && !ig_grammar_matcher_accept_token(s->gm, s->trie, tok)) {
        s->done = true;
        ig_status gst = ig_grammar_matcher_status(s->gm);
        if (gst != IG_OK) return ig_fail_wrap(gst, "grammar");
        return ig_fail(IG_ERR_INTERNAL, "grammar: the sampled token %d leaves the grammar "
                       "(every allowed token has a zero probability)", (int)tok);
    }
    ig_sampler_accept(s->smp, tok);
    s->n_accepted++;
    size_t start = s->gen_bytes;
    if (s->detok) {
        char buf[PIECE_CAP];
        size_t n = ig_detok_stream_push(s->detok, tok, buf, sizeof buf);
        if (n && !pend_append(s, buf, n)) {
            s->done = true;
            return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
        }
        s->gen_bytes += n;
    }
    if (s->logprobs) {
        ig_gen_logprob e = {.id = tok, .logprob = s->lp[tok]};
        if (s->top_k > 0) top_logprobs(s->lp, s->n_vocab, s->top_k, &e);
        if (!lpq_push(s, &e, start, s->gen_bytes)) {
            s->done = true;
            return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
        }
    }
    bool matched = false;
    size_t rel = s->pend_len ? ig_gen_stop_scan(s->pend, s->pend_len, (const char *const *)s->stop,
                                                s->n_stop, &matched)
                             : 0;
    if (matched) {
        s->done = true;
        release(s, rel, true, ev);
        ev->finish = IG_FINISH_STOP;
        return IG_OK;
    }
    bool full = s->n_ctx > 0 && s->n_prompt + s->n_accepted - 1 >= s->n_ctx;
    if ((s->max_tokens >= 0 && s->n_accepted >= s->max_tokens) || full)
        return drain(s, IG_FINISH_LENGTH, ev); /* releases the held text as well */
    release(s, rel, false, ev);
    return IG_OK;
}

ig_status ig_gen_seq_finish(ig_gen_seq *s, ig_finish reason, ig_gen_event *ev) {
    if (!ev) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_finish: NULL event");
    event_init(ev);
    if (!s) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_finish: NULL sequence");
    if (s->done) return ig_fail(IG_ERR_INVALID_ARG, "ig_gen_seq_finish: the sequence has ended");
    consume_released(s);
    return drain(s, reason, ev);
}
