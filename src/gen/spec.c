#include "gen/spec.h"

#include "core/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens the draft model catches up on per ig_decode. */
#define DRAFT_CHUNK 128

typedef struct spec_slot {
    int32_t *held; /* ids the draft context holds for this sequence */
    int n_held, cap;
} spec_slot;

struct ig_spec {
    ig_spec_params p;
    ig_context *dctx; /* draft model context; NULL for prompt lookup */
    int n_seq, n_ctx, n_vocab;
    spec_slot *slots;
    int32_t pos[DRAFT_CHUNK], seqs[DRAFT_CHUNK];
    bool failed, reported;
    char failure[256];
};

ig_spec_params ig_spec_default_params(void) {
    return (ig_spec_params){
        .draft = NULL,
        .draft_max = 8,
        .draft_min = 0,
        .p_min = 0.0f,
        .ngram_min = 1,
        .ngram_max = 3,
        .kv_type = IG_KV_F16,
        .n_threads = 0,
    };
}

ig_status ig_spec_check_draft(const ig_model *target, const ig_model *draft) {
    if (!target || !draft) return ig_fail(IG_ERR_INVALID_ARG, "draft check: NULL model");
    const ig_hparams *ht = ig_model_hparams(target), *hd = ig_model_hparams(draft);
    if (strcmp(hd->arch, "gemma3") != 0)
        return ig_fail(IG_ERR_UNSUPPORTED, "the draft model is not Gemma 3 (architecture \"%s\")",
                       hd->arch);
    if (hd->n_vocab_real != ht->n_vocab_real)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "the draft model's vocabulary has %d tokens but the target's has %d: a "
                       "draft model must share the target's vocabulary",
                       hd->n_vocab_real, ht->n_vocab_real);
    const ig_tokenizer *tt = ig_model_tokenizer(target), *td = ig_model_tokenizer(draft);
    if (tt && td) {
        int n = ig_tokenizer_n_vocab(tt);
        if (ig_tokenizer_n_vocab(td) != n)
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "the draft model's tokenizer has %d tokens but the target's has %d",
                           ig_tokenizer_n_vocab(td), n);
        /* Same size but another vocabulary: compare a spread of pieces. */
        for (int i = 0; i < 64 && n > 0; i++) {
            int32_t id = (int32_t)(((int64_t)i * 7919 * 131) % n);
            const char *a = ig_token_piece(tt, id), *b = ig_token_piece(td, id);
            if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
                return ig_fail(IG_ERR_UNSUPPORTED,
                               "the draft model's vocabulary differs from the target's (token %d)",
                               (int)id);
        }
    }
    size_t bt = ig_model_weight_bytes(target), bd = ig_model_weight_bytes(draft);
    if (bd > bt)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "the draft model (%zu MiB of weights) is larger than the target (%zu MiB)",
                       bd >> 20, bt >> 20);
    return IG_OK;
}

ig_status ig_spec_create(const ig_spec_params *params, const ig_model *target, int n_ctx, int n_seq,
                         ig_spec **out) {
    if (out) *out = NULL;
    if (!params || !target || !out || n_ctx < 1 || n_seq < 1)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_spec_create: bad arguments");
    ig_spec_params p = *params;
    if (p.draft_max < 1 || p.draft_max > IG_SPEC_MAX_DRAFT)
        return ig_fail(IG_ERR_INVALID_ARG, "--draft-max must be within 1..%d (got %d)",
                       IG_SPEC_MAX_DRAFT, p.draft_max);
    if (p.draft_min < 0 || p.draft_min > p.draft_max)
        return ig_fail(IG_ERR_INVALID_ARG, "--draft-min must be within 0..%d (got %d)",
                       p.draft_max, p.draft_min);
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f))
        return ig_fail(IG_ERR_INVALID_ARG, "--draft-p-min must be within 0..1");
    if (p.ngram_min < 1 || p.ngram_max < p.ngram_min || p.ngram_max > 64)
        return ig_fail(IG_ERR_INVALID_ARG, "lookup n-gram sizes must satisfy 1 <= min <= max <= 64");
    if (p.draft) {
        ig_status st = ig_spec_check_draft(target, p.draft);
        if (st != IG_OK) return st;
    }
    ig_spec *sp = ig_calloc_array(1, sizeof *sp);
    if (!sp) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    sp->p = p;
    sp->n_seq = n_seq;
    sp->n_ctx = n_ctx;
    sp->n_vocab = ig_model_hparams(target)->n_vocab_real;
    sp->slots = ig_calloc_array((size_t)n_seq, sizeof *sp->slots);
    if (!sp->slots) {
        ig_spec_free(sp);
        return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    }
    if (p.draft) {
        ig_context_params cp = ig_context_default_params();
        cp.n_ctx = n_ctx;
        cp.n_seq = n_seq;
        cp.n_batch = DRAFT_CHUNK;
        cp.kv_type = p.kv_type;
        cp.n_threads = p.n_threads;
        ig_status st = ig_context_create(p.draft, &cp, &sp->dctx);
        if (st != IG_OK) {
            ig_spec_free(sp);
            return ig_fail_wrap(st, "draft model context");
        }
    }
    *out = sp;
    return IG_OK;
}

void ig_spec_free(ig_spec *sp) {
    if (!sp) return;
    if (sp->slots)
        for (int i = 0; i < sp->n_seq; i++) free(sp->slots[i].held);
    free(sp->slots);
    ig_context_free(sp->dctx);
    free(sp);
}

const ig_spec_params *ig_spec_params_get(const ig_spec *sp) { return sp ? &sp->p : NULL; }

void ig_spec_reset(ig_spec *sp, int seq) {
    if (!sp || seq < 0 || seq >= sp->n_seq) return;
    sp->slots[seq].n_held = 0;
    if (sp->dctx) ig_seq_clear(sp->dctx, seq);
}

const char *ig_spec_failure(ig_spec *sp, bool *first) {
    if (first) *first = false;
    if (!sp || !sp->failed) return NULL;
    if (first && !sp->reported) *first = true;
    sp->reported = true;
    return sp->failure;
}

/* ---- prompt lookup -------------------------------------------------------- */

static int lookup_draft(const ig_spec *sp, const int32_t *toks, int n, int max, int32_t *out) {
    for (int g = IG_MIN(sp->p.ngram_max, n - 1); g >= sp->p.ngram_min; g--) {
        const int32_t *tail = toks + n - g;
        /* The latest earlier occurrence that has at least one token after it. */
        for (int i = n - g - 1; i >= 0; i--) {
            if (memcmp(toks + i, tail, (size_t)g * sizeof *toks) != 0) continue;
            int k = 0, from = i + g;
            while (k < max && from + k < n) {
                out[k] = toks[from + k];
                k++;
            }
            return k;
        }
    }
    return 0;
}

/* ---- draft model ---------------------------------------------------------- */

static bool slot_push(spec_slot *s, int32_t id) {
    if (s->n_held == s->cap) {
        int cap = s->cap ? s->cap * 2 : 256;
        int32_t *p = ig_realloc_array(s->held, (size_t)cap, sizeof *p);
        if (!p) return false;
        s->held = p;
        s->cap = cap;
    }
    s->held[s->n_held++] = id;
    return true;
}

static ig_status draft_feed(ig_spec *sp, int seq, const int32_t *toks, int n) {
    spec_slot *s = &sp->slots[seq];
    for (int i = 0; i < n; i += DRAFT_CHUNK) {
        int m = IG_MIN(DRAFT_CHUNK, n - i);
        int base = ig_seq_len(sp->dctx, seq);
        for (int k = 0; k < m; k++) {
            sp->pos[k] = base + k;
            sp->seqs[k] = seq;
        }
        ig_batch b = {m, toks + i, sp->pos, sp->seqs, NULL};
        ig_status st = ig_decode(sp->dctx, &b);
        if (st != IG_OK) return st;
        for (int k = 0; k < m; k++)
            if (!slot_push(s, toks[i + k])) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    }
    return IG_OK;
}

/* Argmax (lowest id on ties) and its softmax probability. */
static int32_t top_token(const float *l, int n, float *prob) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    double z = 0.0;
    float m = l[best];
    for (int i = 0; i < n; i++) z += exp((double)(l[i] - m));
    *prob = isfinite(m) && z > 0.0 ? (float)(1.0 / z) : 0.0f;
    return best;
}

static int model_draft(ig_spec *sp, int seq, const int32_t *toks, int n, int max, int32_t *out) {
    spec_slot *s = &sp->slots[seq];
    int held = ig_seq_len(sp->dctx, seq);
    int keep = s->n_held == held ? ig_gen_common_prefix(s->held, s->n_held, toks, n) : 0;
    if (keep > n - 1) keep = n - 1; /* the last token is fed again: its logits are needed */
    if (keep < held && (keep == 0 || ig_seq_truncate(sp->dctx, seq, keep) != IG_OK)) {
        ig_seq_clear(sp->dctx, seq);
        keep = 0;
    }
    s->n_held = keep;
    ig_status st = draft_feed(sp, seq, toks + keep, n - keep);
    int k = 0;
    while (st == IG_OK && k < max) {
        const float *l = ig_get_logits(sp->dctx, 0);
        if (!l) {
            st = ig_fail(IG_ERR_INTERNAL, "the draft model gave no logits");
            break;
        }
        float p;
        int32_t t = top_token(l, sp->n_vocab, &p);
        if (p < sp->p.p_min) break;
        out[k++] = t;
        if (k == max) break;
        st = draft_feed(sp, seq, &t, 1);
    }
    if (st != IG_OK) {
        snprintf(sp->failure, sizeof sp->failure, "the draft model failed (%s: %s); decoding goes on without it",
                 ig_status_str(st), ig_last_error());
        sp->failed = true;
        for (int i = 0; i < sp->n_seq; i++) ig_spec_reset(sp, i);
        return 0;
    }
    return k;
}

int ig_spec_draft(ig_spec *sp, int seq, const int32_t *toks, int n, int max, int32_t *out) {
    if (!sp || sp->failed || seq < 0 || seq >= sp->n_seq || !toks || n < 1 || !out) return 0;
    if (max > sp->p.draft_max) max = sp->p.draft_max;
    if (max > sp->n_ctx - n) max = sp->n_ctx - n; /* the draft context holds n + max - 1 */
    if (max < 1 || max < sp->p.draft_min) return 0;
    int k = sp->dctx        ? model_draft(sp, seq, toks, n, max, out)
            : sp->p.propose ? sp->p.propose(sp->p.propose_user, toks, n, max, out)
                            : lookup_draft(sp, toks, n, max, out);
    if (k < 0 || k > max) k = 0;
    for (int i = 0; i < k; i++)
        if (out[i] < 0 || out[i] >= sp->n_vocab) k = i; /* only real ids go to the target */
    return k < sp->p.draft_min ? 0 : k;
}

/* ---- verification --------------------------------------------------------- */

ig_status ig_spec_verify(ig_gen_seq *gs, const ig_context *ctx, int first_out,
                         const int32_t *drafts, int n_draft, ig_spec_event_fn on_event, void *user,
                         ig_spec_result *res) {
    *res = (ig_spec_result){0};
    if (!gs || !ctx || n_draft < 0 || (n_draft && !drafts))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_spec_verify: bad arguments");
    for (int i = 0; i <= n_draft; i++) {
        const float *logits = ig_get_logits(ctx, first_out + i);
        if (!logits) return ig_fail(IG_ERR_INTERNAL, "ig_spec_verify: missing logits row %d", i);
        bool acc = false;
        ig_gen_event ev;
        ig_status st = ig_gen_seq_step_draft(gs, logits, i < n_draft ? drafts[i] : -1, NULL, &acc, &ev);
        res->n_steps++;
        if (st != IG_OK) return st;
        if (acc) res->n_accepted++;
        bool go = on_event ? on_event(user, &ev) : true;
        if (!go || ev.finish != IG_FINISH_NONE) {
            res->stopped = true;
            break;
        }
        if (!acc) break;
    }
    return IG_OK;
}
