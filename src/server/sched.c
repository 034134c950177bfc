#define _GNU_SOURCE
#include "server/sched.h"

#include "engine/backend.h"
#include "engine/context.h"

#include "core/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- jobs ---------------------------------------------------------------- */

srv_job *srv_job_create(srv_request *req, int32_t *prompt, int n_prompt, int max_tokens) {
    srv_job *j = ig_calloc_array(1, sizeof *j);
    if (!j) return NULL;
    j->n_choices = req->n > 0 ? req->n : 1;
    j->out = ig_calloc_array((size_t)j->n_choices, sizeof *j->out);
    if (!j->out) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    j->max_tokens = max_tokens;
    j->t_submit = ig_time_now();
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    for (int i = 0; i < j->n_choices; i++) {
        srv_buf_free(&j->out[i].text);
        srv_buf_free(&j->out[i].held);
        srv_tool_calls_free(j->out[i].calls, j->out[i].n_calls);
        free(j->out[i].lps);
    }
    free(j->out);
    free(j->prompt);
    srv_request_free(&j->req);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_cancel(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancel = true;
    pthread_mutex_unlock(&j->mu);
}

/* ---- scheduler state ----------------------------------------------------- */

typedef struct task {
    srv_job *job;
    int index;         /* choice index */
    int slot;          /* -1 while waiting */
    uint64_t admit_no; /* admission order (prefill fairness) */
    int n_fed;         /* prompt tokens already in the KV cache */
    bool generating;   /* prompt done; last_tok is fed next step */
    int32_t last_tok;
    int n_gen;
    int out_idx;       /* logits row this step, -1 none */
    ig_gen_seq *gen;   /* sampling, stop ids and strings, text, logprobs */
    bool spec;         /* speculative decoding on for this request */
    int n_draft;       /* drafts fed after last_tok this step (rows out_idx + 1 ...) */
    int32_t drafts[IG_SPEC_MAX_DRAFT];
    double t_last;
    struct task *next;
} task;

typedef struct slot {
    int32_t *cache; /* tokens whose KV the sequence holds */
    int n_cache;
    task *t;
} slot;

struct srv_sched {
    ig_model *model;
    ig_context *ctx;
    const ig_tokenizer *tok;
    int n_vocab;
    int n_ctx;
    srv_sched_params p;
    srv_metrics *m;

    pthread_t thread;
    bool thread_started;
    bool thread_joined; /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the engine */
    pthread_cond_t idle_cv; /* signalled when sequences finish */
    task *wait_head, *wait_tail;
    int n_waiting;
    int n_running;
    int n_steps; /* engine steps run (for the fault_step test hook) */
    bool accepting;
    bool cancel_all;
    bool stop;
    uint64_t admit_counter;
    uint64_t seed_counter;

    slot *slots;
    ig_token_trie *trie; /* built at the first constrained request (under mu) */
    /* engine-thread scratch */
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    const float **b_embd; /* image embeddings of the batch's tokens (NULL: text) */
    int32_t *b_img;       /* image number of each token (0: text) */
};

static void task_free(task *t) {
    if (!t) return;
    ig_gen_seq_free(t->gen);
    srv_job_unref(t->job);
    free(t);
}

static uint64_t random_seed(srv_sched *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (++s->seed_counter * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    return x;
}

static task *task_create(srv_sched *s, srv_job *j, int index, uint64_t seed) {
    if (j->req.grammar && !s->trie && ig_token_trie_create(s->tok, s->n_vocab, &s->trie) != IG_OK)
        return NULL;
    task *t = ig_calloc_array(1, sizeof *t);
    if (!t) return NULL;
    t->index = index;
    t->slot = -1;
    t->out_idx = -1;
    ig_sampler_params sp = ig_sampler_default_params();
    const srv_request *r = &j->req;
    sp.temperature = (float)r->temperature;
    sp.top_k = r->top_k;
    sp.top_p = (float)r->top_p;
    sp.min_p = (float)r->min_p;
    sp.repeat_penalty = 1.0f;
    sp.presence_penalty = (float)r->presence_penalty;
    sp.frequency_penalty = (float)r->frequency_penalty;
    sp.penalty_last_n = -1;
    sp.seed = seed;
    sp.logit_bias = r->logit_bias;
    sp.n_logit_bias = r->n_logit_bias;
    /* OpenAI's penalties count generated tokens only: no prompt history */
    ig_gen_seq_params gp = {
        .sampling = sp,
        .n_vocab = s->n_vocab,
        .tok = s->tok,
        .stop_ids = s->p.stop_ids,
        .n_stop_ids = (int)IG_ARRAY_LEN(s->p.stop_ids),
        .stop = (const char *const *)r->stop,
        .n_stop = r->n_stop,
        .max_tokens = j->max_tokens,
        .n_ctx = s->n_ctx,
        .n_prompt = j->n_prompt,
        .logprobs = r->logprobs,
        .top_logprobs = r->top_logprobs,
        .grammar = r->grammar,
        .trie = r->grammar ? s->trie : NULL,
    };
    if (ig_gen_seq_create(&gp, &t->gen) != IG_OK) {
        free(t);
        return NULL;
    }
    t->spec = s->p.spec && !r->no_speculative;
    srv_job_ref(j);
    t->job = j;
    return t;
}

int srv_sched_submit(srv_sched *s, srv_job *j) {
    int n = j->n_choices;
    task **ts = ig_calloc_array((size_t)n, sizeof *ts);
    if (!ts) return -3;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (!s->accepting) rc = -2;
    else {
        int free_slots = s->p.n_parallel - s->n_running;
        if (s->n_waiting + n > s->p.max_queue + free_slots) rc = -1;
    }
    if (rc == 0) {
        for (int i = 0; i < n && rc == 0; i++) {
            uint64_t seed = j->req.has_seed ? j->req.seed + (uint64_t)i : random_seed(s);
            ts[i] = task_create(s, j, i, seed);
            if (!ts[i]) rc = -3;
        }
        if (rc != 0) {
            for (int i = 0; i < n; i++) task_free(ts[i]);
        } else {
            for (int i = 0; i < n; i++) {
                if (s->wait_tail) s->wait_tail->next = ts[i];
                else s->wait_head = ts[i];
                s->wait_tail = ts[i];
            }
            s->n_waiting += n;
            pthread_mutex_lock(&s->m->mu);
            s->m->waiting = s->n_waiting;
            s->m->prompt_tokens += (uint64_t)j->n_prompt;
            pthread_mutex_unlock(&s->m->mu);
            pthread_cond_signal(&s->cv);
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(ts);
    return rc;
}

void srv_sched_load(srv_sched *s, int *running, int *waiting) {
    pthread_mutex_lock(&s->mu);
    *running = s->n_running;
    *waiting = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
}

/* ---- output to the job ----------------------------------------------------- */

static bool job_cancelled(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool c = j->cancel;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* Appends what a step released (text and the logprob entries covering
 * it) to the choice. */
static bool emit(task *t, const ig_gen_event *ev) {
    srv_job *j = t->job;
    srv_choice_out *o = &j->out[t->index];
    bool ok = true;
    size_t k = ev->n_lps;
    pthread_mutex_lock(&j->mu);
    if (ev->n_text)
        ok = srv_buf_append(srv_tools_active(&j->req) ? &o->held : &o->text, ev->text, ev->n_text);
    if (ok && k) {
        if (o->n_lps + k > o->cap_lps) {
            size_t cap = o->cap_lps ? o->cap_lps : 16;
            while (cap < o->n_lps + k) cap *= 2;
            ig_gen_logprob *p = ig_realloc_array(o->lps, cap, sizeof *p);
            if (!p) ok = false;
            else {
                o->lps = p;
                o->cap_lps = cap;
            }
        }
        if (ok) {
            memcpy(o->lps + o->n_lps, ev->lps, k * sizeof *ev->lps);
            o->n_lps += k;
        }
    }
    o->n_gen = t->n_gen;
    pthread_mutex_unlock(&j->mu);
    if (ev->n_text || k) pthread_cond_broadcast(&j->cv);
    return ok;
}

/* Ends a sequence: marks its choice done (finish NULL = failed/cancelled)
 * and gives its slot back (the slot keeps its cache for prefix reuse). */
static void finish(srv_sched *s, task *t, const char *reason, const char *fail_msg) {
    srv_job *j = t->job;
    double now = ig_time_now();
    /* Slot and metrics first: a client that has its last byte must find the
     * sequence gone from /metrics. */
    pthread_mutex_lock(&s->mu);
    if (t->slot >= 0) {
        s->slots[t->slot].t = NULL;
        s->n_running--;
    }
    pthread_mutex_lock(&s->m->mu);
    s->m->running = s->n_running;
    if (reason && (!strcmp(reason, "stop") || !strcmp(reason, "tool_calls")))
        s->m->requests_finished_stop++;
    else if (reason) s->m->requests_finished_length++;
    else s->m->requests_cancelled++;
    if (reason) srv_hist_observe(&s->m->e2e, now - j->t_submit);
    pthread_mutex_unlock(&s->m->mu);
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);

    pthread_mutex_lock(&j->mu);
    srv_choice_out *o = &j->out[t->index];
    if (srv_tools_active(&j->req) && o->held.len) {
        /* the held text: content up to the first call, then the calls */
        size_t content_len = o->held.len;
        int n = reason ? srv_parse_tool_calls(&j->req, o->held.data, o->held.len, &o->calls,
                                              &content_len)
                       : 0;
        if (n > 0) {
            o->n_calls = n;
            if (!strcmp(reason, "stop")) reason = "tool_calls"; /* a cut keeps "length" */
        }
        if (n < 0 || !srv_buf_append(&o->text, o->held.data, content_len)) {
            reason = NULL;
            fail_msg = "out of memory";
        }
    }
    o->finish = reason;
    o->n_gen = t->n_gen;
    o->done = true;
    j->n_done++;
    if (fail_msg && !j->failed) {
        j->failed = true;
        snprintf(j->fail_msg, sizeof j->fail_msg, "%s", fail_msg);
    }
    pthread_mutex_unlock(&j->mu);
    pthread_cond_broadcast(&j->cv);
    task_free(t);
}

/* Streams what one step of t's sequence produced; false when t ended (and
 * is freed). */
static bool after_step(srv_sched *s, task *t, ig_status st, const ig_gen_event *evp) {
    srv_job *j = t->job;
    ig_gen_event ev = *evp;
    if (st == IG_OK && ev.token < 0 && ev.finish != IG_FINISH_NONE) {
        /* the grammar is complete and nothing may follow */
        if (!emit(t, &ev)) finish(s, t, NULL, "out of memory");
        else finish(s, t, "stop", NULL);
        return false;
    }
    if (ev.token < 0) { /* nothing sampled */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", st == IG_ERR_NO_MEMORY ? "out of memory"
                                        : *ig_last_error() ? ig_last_error() : "sampling failed");
        finish(s, t, NULL, msg);
        return false;
    }
    double now = ig_time_now();
    pthread_mutex_lock(&s->m->mu);
    if (t->n_gen == 0) srv_hist_observe(&s->m->ttft, now - j->t_submit);
    else srv_hist_observe(&s->m->itl, now - t->t_last);
    s->m->generated_tokens++;
    pthread_mutex_unlock(&s->m->mu);
    t->t_last = now;
    t->n_gen++;
    if (st != IG_OK || !emit(t, &ev)) { /* after sampling, only memory can fail */
        finish(s, t, NULL, "out of memory");
        return false;
    }
    if (ev.finish != IG_FINISH_NONE) {
        finish(s, t, ev.finish == IG_FINISH_STOP ? "stop" : "length", NULL);
        return false;
    }
    t->last_tok = ev.token;
    t->generating = true;
    return true;
}

/* Hands t's logits row to its sequence and streams what comes out. */
static void process_token(srv_sched *s, task *t, const float *logits) {
    ig_gen_event ev;
    ig_status st = ig_gen_seq_step(t->gen, logits, &ev);
    after_step(s, t, st, &ev);
}

typedef struct verify_ctx {
    srv_sched *s;
    task *t;
    int n_events;
    bool gone; /* the task ended (and was freed) */
} verify_ctx;

static bool on_verified(void *user, const ig_gen_event *ev) {
    verify_ctx *v = user;
    task *t = v->t;
    /* The counters move before the event goes out: a client that has its
     * answer finds them up to date. A token equal to its draft is the
     * accepted draft (a rejection never draws the draft again). */
    int k = v->n_events++;
    pthread_mutex_lock(&v->s->m->mu);
    if (k == 0) v->s->m->spec_drafted += (uint64_t)t->n_draft;
    if (k < t->n_draft && ev->token == t->drafts[k]) v->s->m->spec_accepted++;
    pthread_mutex_unlock(&v->s->m->mu);
    v->gone = !after_step(v->s, t, IG_OK, ev);
    return !v->gone;
}

/* Speculative step of t (slot i): the rows of last_tok and its drafts go
 * through the sequence one by one (gen/spec.h); the cache drops the
 * positions after the first rejected draft. */
static void process_verified(srv_sched *s, task *t, int i) {
    slot *sl = &s->slots[i];
    int n_draft = t->n_draft;
    verify_ctx v = {s, t, 0, false};
    ig_spec_result res;
    ig_status st = ig_spec_verify(t->gen, s->ctx, t->out_idx, t->drafts, n_draft, on_verified, &v, &res);
    if (st != IG_OK && !v.gone) {
        finish(s, t, NULL, st == IG_ERR_NO_MEMORY ? "out of memory" : "sampling failed");
        v.gone = true;
    }
    int drop = n_draft + 1 - res.n_steps;
    if (st == IG_OK && drop > 0) {
        sl->n_cache -= drop;
        if (ig_seq_truncate(s->ctx, i, sl->n_cache) != IG_OK) {
            ig_seq_clear(s->ctx, i);
            sl->n_cache = 0;
            if (!v.gone) finish(s, t, NULL, "internal error: cannot drop rejected drafts");
        }
    } else if (st != IG_OK) {
        ig_seq_clear(s->ctx, i);
        sl->n_cache = 0;
    }
}

/* ---- engine thread --------------------------------------------------------- */

/* Places t into the free slot whose cache shares the longest prefix with its
 * prompt, keeping that prefix. Called with s->mu held. */
static void assign_slot(srv_sched *s, task *t) {
    int best = -1, best_lcp = -1;
    for (int i = 0; i < s->p.n_parallel; i++) {
        if (s->slots[i].t) continue;
        int l = ig_gen_common_prefix(s->slots[i].cache, s->slots[i].n_cache, t->job->prompt,
                              t->job->n_prompt);
        /* ties: the slot with the least cached, so useful prefixes survive */
        if (l > best_lcp || (l == best_lcp && s->slots[i].n_cache < s->slots[best].n_cache)) {
            best = i;
            best_lcp = l;
        }
    }
    slot *sl = &s->slots[best];
    sl->t = t;
    t->slot = best;
    t->admit_no = ++s->admit_counter;
    s->n_running++;
}

static void reuse_prefix(srv_sched *s, task *t) {
    slot *sl = &s->slots[t->slot];
    /* An image's placeholder ids say nothing of its pixels: a prefix is
     * reused up to the first image only. */
    int upto = t->job->n_prompt;
    const int32_t pid = ig_model_image_token_id(s->ctx->model);
    for (int i = 0; pid >= 0 && i < upto; i++)
        if (t->job->prompt[i] == pid) upto = i;
    int keep = ig_gen_prefix_keep(s->ctx, t->slot, sl->cache, sl->n_cache, t->job->prompt, upto);
    sl->n_cache = keep;
    t->n_fed = keep;
    if (t->index == 0) {
        pthread_mutex_lock(&t->job->mu);
        t->job->n_cached = keep;
        pthread_mutex_unlock(&t->job->mu);
    }
    pthread_mutex_lock(&s->m->mu);
    s->m->cached_prompt_tokens += (uint64_t)keep;
    pthread_mutex_unlock(&s->m->mu);
}

static int cmp_admit(const void *a, const void *b) {
    const task *x = *(task *const *)a, *y = *(task *const *)b;
    return x->admit_no < y->admit_no ? -1 : x->admit_no > y->admit_no;
}

static void update_kv_metrics(srv_sched *s) {
    int64_t used = 0;
    int seqs = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        used += s->slots[i].n_cache;
        seqs += s->slots[i].n_cache > 0;
    }
    pthread_mutex_lock(&s->m->mu);
    s->m->kv_tokens = used;
    s->m->kv_sequences = seqs;
    s->m->kv_capacity = (int64_t)s->n_ctx * s->p.n_parallel;
    pthread_mutex_unlock(&s->m->mu);
}

/* The grammar masks of the sequences that get logits this step, computed
 * on a thread of their own while a device computes the logits: the engine
 * thread only waits for the device meanwhile, and no mask is left to make
 * after it. One thread for all, as sequences of one grammar share its
 * masks. */
typedef struct mask_ahead {
    pthread_t th;
    srv_sched *s;
    bool started;
} mask_ahead;

static void *mask_ahead_main(void *arg) {
    mask_ahead *a = arg;
    for (int i = 0; i < a->s->p.n_parallel; i++) {
        task *t = a->s->slots[i].t;
        if (t && t->out_idx >= 0 && t->gen) (void)ig_gen_seq_prepare_mask(t->gen); /* else made in the step */
    }
    return NULL;
}

static void mask_ahead_start(mask_ahead *a, srv_sched *s) {
    a->s = s;
    a->started = false;
    if (s->ctx->model->params.backend == IG_BACKEND_CPU) return; /* no device to wait for */
    bool any = false;
    for (int i = 0; i < s->p.n_parallel && !any; i++) {
        const task *t = s->slots[i].t;
        any = t && t->out_idx >= 0 && t->gen && t->job->req.grammar;
    }
    if (any) a->started = pthread_create(&a->th, NULL, mask_ahead_main, a) == 0;
}

static void mask_ahead_join(mask_ahead *a) {
    if (a->started) pthread_join(a->th, NULL);
    a->started = false;
}

/* One engine step over every running sequence. */
static void step(srv_sched *s) {
    int N = s->p.n_parallel, nb = 0, n_out = 0;
    task *prefill[256];
    int n_prefill = 0;

    /* cancelled sequences give their slot back first */
    for (int i = 0; i < N; i++) {
        task *t = s->slots[i].t;
        if (!t) continue;
        if (s->cancel_all) finish(s, t, NULL, "the server is shutting down");
        else if (job_cancelled(t->job)) finish(s, t, NULL, NULL);
    }
    /* speculative decoding: each generating sequence may add drafts within
     * an equal share of the batch */
    int n_generating = 0;
    for (int i = 0; i < N; i++)
        if (s->slots[i].t && s->slots[i].t->generating) n_generating++;
    int share = n_generating ? (s->p.n_batch - n_generating) / n_generating : 0;
    /* the next token of every generating sequence */
    for (int i = 0; i < N; i++) {
        task *t = s->slots[i].t;
        if (!t) continue;
        t->out_idx = -1;
        if (!t->generating) {
            if (n_prefill < (int)IG_ARRAY_LEN(prefill)) prefill[n_prefill++] = t;
            continue;
        }
        slot *sl = &s->slots[i];
        s->b_tok[nb] = t->last_tok;
        s->b_pos[nb] = sl->n_cache;
        s->b_seq[nb] = i;
        s->b_want[nb] = 1;
        sl->cache[sl->n_cache++] = t->last_tok;
        t->out_idx = n_out++;
        nb++;
        t->n_draft = 0;
        if (t->spec && share > 0) {
            int room = IG_MIN(share, s->n_ctx - sl->n_cache);
            room = IG_MIN(room, t->job->max_tokens - t->n_gen);
            if (room > 0)
                t->n_draft = ig_spec_draft(s->p.spec, i, sl->cache, sl->n_cache, room, t->drafts);
            bool first = false;
            const char *why = ig_spec_failure(s->p.spec, &first);
            if (why && first) fprintf(stderr, "ignis serve: %s\n", why);
            for (int q = 0; q < t->n_draft; q++) {
                s->b_tok[nb] = t->drafts[q];
                s->b_pos[nb] = sl->n_cache;
                s->b_seq[nb] = i;
                s->b_want[nb] = 1;
                sl->cache[sl->n_cache++] = t->drafts[q];
                n_out++;
                nb++;
            }
        }
    }
    int n_decoding = nb;
    /* prompt chunks, oldest admission first, within the batch budget */
    qsort(prefill, (size_t)n_prefill, sizeof prefill[0], cmp_admit);
    for (int k = 0; k < n_prefill && nb < s->p.n_batch; k++) {
        task *t = prefill[k];
        slot *sl = &s->slots[t->slot];
        int left = t->job->n_prompt - t->n_fed;
        int take = s->p.n_batch - nb < left ? s->p.n_batch - nb : left;
        const srv_request *rq = &t->job->req;
        const int32_t pid = rq->n_images ? ig_model_image_token_id(s->ctx->model) : -1;
        if (pid >= 0) {
            /* never split an image: stop the chunk before it, or, when it
             * comes first, take it whole (the context has room for one
             * image beyond the budget) */
            const int32_t *pp = t->job->prompt + t->n_fed;
            if (take < left && pp[take] == pid && take > 0 && pp[take - 1] == pid) {
                int b0 = take;
                while (b0 > 0 && pp[b0 - 1] == pid) b0--;
                if (b0 > 0) take = b0;
                else
                    while (take < left && pp[take] == pid) take++;
            }
        }
        /* image number and row of each placeholder: count the runs before */
        int img_no = 0, row = 0;
        if (pid >= 0)
            for (int q = 0; q < t->n_fed; q++) {
                const int32_t *pp = t->job->prompt;
                if (pp[q] == pid && (q == 0 || pp[q - 1] != pid)) img_no++;
            }
        for (int q = 0; q < take; q++) {
            int32_t id = t->job->prompt[t->n_fed + q];
            s->b_tok[nb] = id;
            s->b_pos[nb] = sl->n_cache;
            s->b_seq[nb] = t->slot;
            s->b_want[nb] = 0;
            s->b_embd[nb] = NULL;
            s->b_img[nb] = 0;
            if (pid >= 0 && id == pid) {
                const int at = t->n_fed + q;
                if (at == 0 || t->job->prompt[at - 1] != pid) {
                    img_no++;
                    row = 0;
                }
                if (img_no >= 1 && (size_t)img_no <= rq->n_images && rq->image_embd && rq->image_embd[img_no - 1]) {
                    s->b_embd[nb] = rq->image_embd[img_no - 1] + (size_t)row * ig_model_hparams(s->ctx->model)->n_embd;
                    s->b_img[nb] = img_no;
                }
                row++;
            }
            sl->cache[sl->n_cache++] = id;
            nb++;
        }
        t->n_fed += take;
        if (t->n_fed == t->job->n_prompt) {
            s->b_want[nb - 1] = 1;
            t->out_idx = n_out++;
        }
    }
    if (nb == 0) return;

    ig_batch b = {
        .n_tokens = nb, .tokens = s->b_tok, .pos = s->b_pos, .seq = s->b_seq, .want_logits = s->b_want};
    bool any_image = false;
    for (int q = n_decoding; q < nb && !any_image; q++) any_image = s->b_img[q] != 0;
    for (int q = 0; q < n_decoding && any_image; q++) {
        s->b_embd[q] = NULL;
        s->b_img[q] = 0;
    }
    const ig_batch_images bi = {.embd = s->b_embd, .image = s->b_img};
    if (s->p.fault_step > 0 && ++s->n_steps == s->p.fault_step) ig_device_test_fault(s->p.fault_kind);
    const double t_step = ig_time_now();
    mask_ahead ma;
    mask_ahead_start(&ma, s);
    ig_status st = any_image ? ig_decode_images(s->ctx, &b, &bi) : ig_decode(s->ctx, &b);
    mask_ahead_join(&ma);
    const double step_s = ig_time_now() - t_step;
    pthread_mutex_lock(&s->m->mu);
    srv_hist_observe(nb > n_decoding ? &s->m->step_prefill : &s->m->step_decode, step_s);
    s->m->decode_calls++;
    s->m->prefill_tokens += (uint64_t)(nb - n_decoding);
    pthread_mutex_unlock(&s->m->mu);
    if (st != IG_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "decode failed: %s", *ig_last_error() ? ig_last_error()
                                                                       : ig_status_str(st));
        fprintf(stderr, "ignis serve: %s\n", msg);
        ig_device_stats ds;
        const bool lost = ig_context_device_stats(s->ctx, &ds) == IG_OK && ds.device_lost;
        const int status = lost || st == IG_ERR_NO_MEMORY ? 503 : 500;
        bool in_batch[256] = {0};
        for (int q = 0; q < nb; q++)
            if (s->b_seq[q] >= 0 && s->b_seq[q] < 256) in_batch[s->b_seq[q]] = true;
        for (int i = 0; i < N; i++) {
            if (!in_batch[i]) continue;
            ig_seq_clear(s->ctx, i);
            s->slots[i].n_cache = 0;
            task *t = s->slots[i].t;
            if (!t) continue;
            pthread_mutex_lock(&t->job->mu);
            if (!t->job->failed) t->job->fail_status = status;
            pthread_mutex_unlock(&t->job->mu);
            finish(s, t, NULL, msg);
        }
        update_kv_metrics(s);
        return;
    }
    for (int i = 0; i < N; i++) {
        task *t = s->slots[i].t;
        if (!t || t->out_idx < 0) continue;
        const float *logits = ig_get_logits(s->ctx, t->out_idx);
        if (!logits) {
            finish(s, t, NULL, "internal error: missing logits");
            continue;
        }
        if (t->generating && t->n_draft > 0) process_verified(s, t, i);
        else process_token(s, t, logits);
    }
    update_kv_metrics(s);
}

static void *engine_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && !s->cancel_all && s->n_running == 0 && !s->wait_head)
            pthread_cond_wait(&s->cv, &s->mu);
        /* drop waiting sequences whose client went away, or all on shutdown */
        task **pp = &s->wait_head, *fail = NULL, *last = NULL;
        while (*pp) {
            task *t = *pp;
            if (s->cancel_all || job_cancelled(t->job)) {
                *pp = t->next;
                t->next = fail;
                fail = t;
                s->n_waiting--;
            } else {
                last = t;
                pp = &t->next;
            }
        }
        s->wait_tail = last;
        /* admit into free slots */
        task *admitted[256];
        int n_adm = 0;
        while (s->wait_head && s->n_running < s->p.n_parallel && n_adm < 256) {
            task *t = s->wait_head;
            s->wait_head = t->next;
            if (!s->wait_head) s->wait_tail = NULL;
            t->next = NULL;
            s->n_waiting--;
            assign_slot(s, t);
            admitted[n_adm++] = t;
        }
        bool quit = s->stop && s->n_running == 0 && !s->wait_head;
        pthread_mutex_lock(&s->m->mu);
        s->m->waiting = s->n_waiting;
        s->m->running = s->n_running;
        pthread_mutex_unlock(&s->m->mu);
        pthread_mutex_unlock(&s->mu);

        while (fail) {
            task *t = fail;
            fail = t->next;
            finish(s, t, NULL, s->cancel_all ? "the server is shutting down" : NULL);
        }
        for (int i = 0; i < n_adm; i++) reuse_prefix(s, admitted[i]);
        if (quit) break;
        step(s);
    }
    return NULL;
}

ig_status srv_sched_start(ig_model *model, ig_context *ctx, const srv_sched_params *p,
                          srv_metrics *metrics, srv_sched **out) {
    *out = NULL;
    if (p->n_parallel < 1 || p->n_parallel > 256 || p->n_batch < p->n_parallel)
        return ig_fail(IG_ERR_INVALID_ARG, "bad scheduler parameters");
    srv_sched *s = ig_calloc_array(1, sizeof *s);
    if (!s) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    s->model = model;
    s->ctx = ctx;
    s->tok = ig_model_tokenizer(model);
    s->n_vocab = ig_model_hparams(model)->n_vocab_real;
    s->n_ctx = ig_context_params_get(ctx)->n_ctx;
    s->p = *p;
    s->m = metrics;
    s->accepting = true;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->slots = ig_calloc_array((size_t)p->n_parallel, sizeof *s->slots);
    s->b_tok = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_tok);
    s->b_pos = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_pos);
    s->b_seq = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_seq);
    s->b_want = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_want);
    s->b_embd = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_embd);
    s->b_img = ig_calloc_array((size_t)p->n_batch + (size_t)p->n_image, sizeof *s->b_img);
    bool ok = s->slots && s->b_tok && s->b_pos && s->b_seq && s->b_want && s->tok;
    for (int i = 0; ok && i < p->n_parallel; i++) {
        s->slots[i].cache = ig_calloc_array((size_t)s->n_ctx + 1, sizeof(int32_t));
        if (!s->slots[i].cache) ok = false;
    }
    if (ok && pthread_create(&s->thread, NULL, engine_main, s) != 0) ok = false;
    if (!ok) {
        s->thread_started = false;
        srv_sched_shutdown(s, 0, NULL);
        return ig_fail(IG_ERR_NO_MEMORY, "cannot start the scheduler");
    }
    s->thread_started = true;
    pthread_mutex_lock(&metrics->mu);
    metrics->slots = p->n_parallel;
    metrics->kv_capacity = (int64_t)s->n_ctx * p->n_parallel;
    pthread_mutex_unlock(&metrics->mu);
    srv_metrics_attach(metrics, ctx, p->max_queue);
    *out = s;
    return IG_OK;
}

void srv_sched_stop(srv_sched *s, double grace_s, const atomic_int *abort) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->accepting = false; /* submit checks this under s->mu */
    if (s->thread_started && !s->thread_joined && grace_s > 0) {
        double deadline = ig_time_now() + grace_s;
        while ((s->n_running > 0 || s->wait_head) && ig_time_now() < deadline &&
               !(abort && atomic_load(abort))) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
        }
    }
    s->cancel_all = true;
    s->stop = true;
    pthread_cond_signal(&s->cv);
    bool join = s->thread_started && !s->thread_joined;
    s->thread_joined = true;
    pthread_mutex_unlock(&s->mu);
    if (join) pthread_join(s->thread, NULL);
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s, 0, NULL);
    /* nothing is left when the thread ran; free whatever never got one */
    while (s->wait_head) {
        task *t = s->wait_head;
        s->wait_head = t->next;
        task_free(t);
    }
    if (s->slots)
        for (int i = 0; i < s->p.n_parallel; i++) free(s->slots[i].cache);
    free(s->slots);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    ig_token_trie_free(s->trie);
    free(s->b_embd);
    free(s->b_img);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void srv_sched_shutdown(srv_sched *s, double grace_s, const atomic_int *abort) {
    srv_sched_stop(s, grace_s, abort);
    srv_sched_free(s);
}
