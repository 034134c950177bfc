/* ignis bench [MODEL]: llama-bench-style speed measurement.
 *
 * Tests (each after one warm-up, repeated -r times, quoted as mean ± sd of
 * the per-repetition tokens/s):
 *   ppP       P fixed pseudo-random tokens through ig_decode in chunks of the
 *             context's n_batch (logits of each chunk's last token only);
 *   tgN       a short prompt (untimed), then N steps of one token each;
 *   tgN@bB    B sequences, each with the same short prompt, then N steps of
 *             B tokens (one per sequence) through one ig_decode per step;
 *   ...@dD    (-d D) every test after D tokens already in each sequence's
 *             cache (untimed, made once per test): speed at a context depth;
 *   tgN free / tgN schema  (--json-schema FILE) generation through the
 *             sampler (temperature 1, top-k 64, top-p 0.95, fixed seed),
 *             feeding back each sampled token, without and with the
 *             schema's grammar mask; the schema row adds the mask time per
 *             token (p50, p99). A document that completes starts over;
 *             each repetition compiles the schema afresh, so its masks
 *             start uncached (a new schema). --prompt TEXT replaces the
 *             short random prompt.
 * Each row also carries the fraction of the machine's limit: the larger of
 * the bytes floor (weights + KV cache read, over the measured memory read
 * bandwidth) and the flops floor (matrix and attention arithmetic, over the
 * measured f32 FMA peak), both measured here with the test's thread count
 * (src/bench/). */
#include "cli.h"

#include "bench/bench.h"
#include "core/util.h"
#include "gen/seq.h"
#include "grammar/grammar.h"
#include "bench_image.h"
#include "bench_spec.h"
#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 16
#define TG_PROMPT 8    /* tokens of the short prompt before a tg test */
#define TG_WARMUP 16   /* steps of the warm-up run of a tg test */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis bench [MODEL] [-p N] [-n N] [-r N] [-t N,...] [--batch B,...]\n"
            "                   [-d N] [-b N] [--kv f16|f32] [--backend cpu|vulkan] [--device N]\n"
            "                   [--quant q8_0|q4_0|q4_k] [--json FILE] [--json-schema FILE]\n"
            "                   [--draft M | --lookup | --draft-replay] [--verify-curve]\n"
            "                   [--image IMG [--mmproj FILE]]\n"
            "Measures prompt processing (ppN) and generation (tgN, and tgN@bB: B sequences\n"
            "decoding together, one ig_decode per step) in tokens/s, mean ± sd over the\n"
            "repetitions after one warm-up, and quotes each against the machine's limit\n"
            "(memory bandwidth for decode, f32 FMA peak for prefill, both measured here).\n"
            "  -p N          prompt tokens of the pp test (default 512; 0 skips it)\n"
            "  -n N          generated tokens of the tg tests (default 128; 0 skips them)\n"
            "  -r N          repetitions (default 5)\n"
            "  -t N,...      thread counts (default: physical cores)\n"
            "  --batch B,... parallel sequences of the batched tg tests (default 8; 0: none)\n"
            "  -d N          context depth: N tokens in each sequence's cache before every\n"
            "                test (untimed; default 0)\n"
            "  -b N          n_batch: the most tokens per ig_decode (default 512)\n"
            "  --kv TYPE     KV cache type (default f16)\n"
            "  --json FILE   also write the results as JSON\n"
            "  --json-schema FILE  add tgN free / tgN schema: sampled generation without\n"
            "                and with the schema's grammar, and the mask time per token\n"
            "                (after --prompt TEXT when given, else a short random prompt)\n"
            "  --draft MODEL, --lookup  add speculative-decoding rows (greedy, -n tokens of a\n"
            "                story prompt, or of a copy task with --lookup) against plain\n"
            "                decoding of the same prompt; --prompt TEXT overrides the prompt;\n"
            "                --draft-max K, --draft-min K, --draft-p-min P, --lookup-ngram A:B\n"
            "  --draft-replay  add a speculative row whose drafts are plain greedy's own\n"
            "                tokens (recorded first): every draft is accepted, an upper bound\n"
            "                that measures what verification costs, whatever the drafter\n"
            "  --verify-curve  add the time of one step of 1, 2, 4, 8, 16 tokens (all with\n"
            "                logits, as a verify step) after -d tokens, relative to 1 token\n"
            "  --image IMG   add the image rows: the vision tower's encode time (pixels\n"
            "                preprocessed beforehand) and the prefill of the image's tokens,\n"
            "                then the encoder's weight and activation bytes (-p 0 -n 0: only\n"
            "                these); --mmproj FILE gives the tower of a GGUF model\n");
}

/* Parses "1,2,4" into out[]: integers in [min, max], at most MAX_LIST. */
static int parse_list(const char *opt, const char *s, long min, long max, int *out, int *n) {
    if (!s) {
        fprintf(stderr, "ignis: %s needs a value\n", opt);
        return 2;
    }
    char buf[256];
    if (strlen(s) >= sizeof buf || !*s) {
        fprintf(stderr, "ignis: %s expects a comma-separated list of integers, got '%s'\n", opt, s);
        return 2;
    }
    strcpy(buf, s);
    int count = 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        long v;
        if (count == MAX_LIST) {
            fprintf(stderr, "ignis: %s takes at most %d values\n", opt, MAX_LIST);
            return 2;
        }
        if (cli_parse_int(opt, p, min, max, &v)) return 2;
        out[count++] = (int)v;
        if (!comma) break;
        p = comma + 1;
    }
    *n = count;
    return 0;
}

typedef struct bench_cfg {
    const char *path;
    long n_prompt, n_gen, reps, n_batch, depth;
    int threads[MAX_LIST], n_threads;
    int batches[MAX_LIST], n_batches;
    ig_kv_type kv;
    ig_model_params mp;
    const char *json_path;
    const char *schema_path;
    const char *image, *mmproj;
    bench_spec_cfg spec; /* --draft / --lookup rows */
} bench_cfg;

typedef struct machine {
    int n_threads;
    ig_membw_result bw;
    ig_fma_result fma;
} machine;

/* One test's outcome. */
typedef struct result {
    char test[48];
    int threads, n_seq;
    long depth; /* tokens in each sequence's cache before the test */
    double ts[64]; /* per repetition (reps <= 64) */
    int n_ts;
    double mean, sd;
    double tokens;          /* tokens per repetition */
    double bytes, flops;    /* per repetition, the floors' numerators */
    double limit_ts;        /* tokens/s at the larger floor; 0 = unknown */
    const char *bound;      /* "bandwidth" or "compute" */
    bool has_mask;
    double mask_p50_ms, mask_p99_ms, mask_mean_ms; /* grammar mask per token (schema rows) */
} result;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static int32_t next_token(int n_vocab) {
    /* splitmix64: fixed sequence, the same ids on every run */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (int32_t)(z % (uint64_t)n_vocab);
}

static int decode_fail(const char *what, ig_status st) {
    fprintf(stderr, "ignis bench: %s failed: %s\n", what,
            *ig_last_error() ? ig_last_error() : ig_status_str(st));
    return 1;
}

/* Arrays for one ig_decode of up to cap tokens. */
typedef struct batch_buf {
    int32_t *tok, *pos, *seq;
    uint8_t *want;
} batch_buf;

static int batch_alloc(batch_buf *b, int cap) {
    b->tok = calloc((size_t)cap, sizeof *b->tok);
    b->pos = calloc((size_t)cap, sizeof *b->pos);
    b->seq = calloc((size_t)cap, sizeof *b->seq);
    b->want = calloc((size_t)cap, 1);
    return b->tok && b->pos && b->seq && b->want ? 0 : 1;
}

static void batch_free(batch_buf *b) {
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->want);
}

/* Fills sequence s with positions from .. to - 1 in chunks of n_batch:
 * tokens[k] at position from + k, or pseudo-random tokens where tokens is
 * NULL (the depth before a test, a tg test's short prompt). */
static int fill_seq(ig_context *ctx, batch_buf *b, int s, int from, int to, const int32_t *tokens, int n_batch,
                    int n_vocab) {
    for (int done = from; done < to;) {
        int m = to - done < n_batch ? to - done : n_batch;
        for (int i = 0; i < m; i++) {
            b->tok[i] = tokens ? tokens[done - from + i] : next_token(n_vocab);
            b->pos[i] = done + i;
            b->seq[i] = s;
        }
        ig_batch batch = {m, b->tok, b->pos, b->seq, NULL};
        ig_status st = ig_decode(ctx, &batch);
        if (st != IG_OK) return decode_fail("prompt decode", st);
        done += m;
    }
    return 0;
}

/* Sequence s holding its first `depth` positions only: those an earlier
 * repetition made, where the cache still holds them, else made again. */
static int to_depth(ig_context *ctx, batch_buf *b, int s, int depth, int n_batch, int n_vocab) {
    if (depth > 0 && ig_seq_len(ctx, s) >= depth && ig_seq_truncate(ctx, s, depth) == IG_OK) return 0;
    ig_seq_clear(ctx, s);
    return fill_seq(ctx, b, s, 0, depth, NULL, n_batch, n_vocab);
}

/* Prompt processing: n tokens of sequence 0 after its first `depth`, in
 * chunks of n_batch. */
static int run_pp(ig_context *ctx, batch_buf *b, const int32_t *prompt, int n, int n_batch, int depth,
                  int n_vocab, double *dt) {
    if (to_depth(ctx, b, 0, depth, n_batch, n_vocab)) return 1;
    double t0 = ig_time_now();
    if (fill_seq(ctx, b, 0, depth, depth + n, prompt, n_batch, n_vocab)) return 1;
    *dt = ig_time_now() - t0;
    return 0;
}

/* Generation: every sequence gets the depth and the short prompt, then
 * `steps` steps of one token per sequence in one ig_decode (all logits
 * wanted). */
static int run_tg(ig_context *ctx, batch_buf *b, int n_seq, int steps, int depth, int n_batch, int n_vocab,
                  double *dt) {
    for (int s = 0; s < n_seq; s++) {
        if (to_depth(ctx, b, s, depth, n_batch, n_vocab)) return 1;
        if (fill_seq(ctx, b, s, depth, depth + TG_PROMPT, NULL, n_batch, n_vocab)) return 1;
    }
    double t0 = ig_time_now();
    for (int k = 0; k < steps; k++) {
        for (int s = 0; s < n_seq; s++) {
            b->tok[s] = next_token(n_vocab);
            b->pos[s] = depth + TG_PROMPT + k;
            b->seq[s] = s;
            b->want[s] = 1;
        }
        ig_batch batch = {n_seq, b->tok, b->pos, b->seq, b->want};
        ig_status st = ig_decode(ctx, &batch);
        if (st != IG_OK) return decode_fail("generation step", st);
    }
    *dt = ig_time_now() - t0;
    return 0;
}

/* What a sampled tg test runs with (tgN free / tgN schema). */
typedef struct gen_mode {
    const ig_grammar *grammar; /* NULL: unconstrained; else compiled afresh from */
    const char *schema;        /* this text for each repetition, so that every one */
    size_t schema_len;         /* starts with no masks cached (a new schema) */
    const ig_token_trie *trie;
    const ig_tokenizer *tok;
    double *mask_s;            /* per step, when grammar */
    int n_mask;
    const int32_t *prompt;     /* --prompt's tokens (BOS first); NULL: TG_PROMPT pseudo-random */
    int n_prompt;
    bool mask_ahead;           /* the next mask computed while the device decodes */
} gen_mode;

/* ig_gen_seq_prepare_mask on a thread of its own, while this one decodes. */
typedef struct mask_job {
    pthread_t th;
    ig_gen_seq *gs;
    bool started;
} mask_job;

static void *mask_job_main(void *arg) {
    mask_job *j = arg;
    (void)ig_gen_seq_prepare_mask(j->gs); /* a failure recomputes in the step */
    return NULL;
}

static void mask_job_start(mask_job *j, ig_gen_seq *gs) {
    j->gs = gs;
    j->started = gs && pthread_create(&j->th, NULL, mask_job_main, j) == 0;
}

static void mask_job_join(mask_job *j) {
    if (j->started) pthread_join(j->th, NULL);
    j->started = false;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Generation through ig_gen_seq: a short prompt (--prompt's text when
 * given), then `steps` tokens, each sampled from the logits (masked by the
 * grammar) and fed back. */
static int run_tg_sampled(ig_context *ctx, batch_buf *b, int steps, int n_batch, const ig_hparams *hp,
                          gen_mode *gm, double *dt) {
    ig_seq_clear(ctx, 0);
    const int n_prompt = gm->prompt ? gm->n_prompt : TG_PROMPT;
    if (fill_seq(ctx, b, 0, 0, n_prompt, gm->prompt, n_batch, hp->n_vocab_real)) return 1;
    ig_grammar *fresh = NULL;
    if (gm->grammar) {
        ig_status st = ig_grammar_from_json_schema(gm->schema, gm->schema_len, &fresh);
        if (st != IG_OK) return decode_fail("schema", st);
    }
    int32_t stop_ids[2] = {hp->eot_id, hp->eos_id};
    ig_gen_seq_params sp = {
        .sampling = ig_sampler_default_params(),
        .n_vocab = hp->n_vocab_real,
        .tok = gm->tok,
        .stop_ids = stop_ids,
        .n_stop_ids = 2,
        .max_tokens = -1,
        .grammar = fresh,
        .trie = fresh ? gm->trie : NULL,
    };
    sp.sampling.seed = 1234;
    ig_gen_seq *gs = NULL;
    gm->n_mask = 0;
    int rc = 0;
    double t0 = ig_time_now();
    for (int k = 0; k < steps && !rc; k++) {
        if (!gs && ig_gen_seq_create(&sp, &gs) != IG_OK) {
            rc = decode_fail("sequence", IG_ERR_NO_MEMORY);
            break;
        }
        ig_gen_event ev;
        ig_status st = ig_gen_seq_step(gs, ig_get_logits(ctx, 0), &ev);
        if (st != IG_OK) {
            rc = decode_fail("sampling", st);
            break;
        }
        if (fresh) gm->mask_s[gm->n_mask++] = ig_gen_seq_mask_seconds(gs);
        int32_t tok = ev.token;
        if (ev.finish != IG_FINISH_NONE) { /* a complete document: start another */
            ig_gen_seq_free(gs);
            gs = NULL;
        }
        if (tok < 0 || ev.stop_token) tok = hp->bos_id >= 0 ? hp->bos_id : 2;
        b->tok[0] = tok;
        b->pos[0] = n_prompt + k;
        b->seq[0] = 0;
        b->want[0] = 1;
        ig_batch batch = {1, b->tok, b->pos, b->seq, b->want};
        mask_job mj = {0};
        if (gm->mask_ahead && fresh) mask_job_start(&mj, gs);
        st = ig_decode(ctx, &batch);
        mask_job_join(&mj);
        if (st != IG_OK) rc = decode_fail("generation step", st);
    }
    *dt = ig_time_now() - t0;
    ig_gen_seq_free(gs);
    ig_grammar_free(fresh);
    return rc;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = n ? s / n : 0;
    double q = 0;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* Fills bytes/flops/limit of r from the steps the test runs. */
static void account(const ig_model *model, const bench_cfg *cfg, const machine *mc, result *r,
                    int is_pp, int n_seq, int n_batch) {
    r->bytes = r->flops = 0;
    if (is_pp) {
        for (int done = 0; done < cfg->n_prompt;) {
            int m = (int)(cfg->n_prompt - done < n_batch ? cfg->n_prompt - done : n_batch);
            ig_bench_step st = {1, (int)cfg->depth + done, m, 1};
            r->bytes += ig_bench_step_bytes(model, cfg->kv, &st);
            r->flops += ig_bench_step_flops(model, &st);
            done += m;
        }
    } else {
        for (int k = 0; k < cfg->n_gen; k++) {
            ig_bench_step st = {n_seq, (int)cfg->depth + TG_PROMPT + k, 1, n_seq};
            r->bytes += ig_bench_step_bytes(model, cfg->kv, &st);
            r->flops += ig_bench_step_flops(model, &st);
        }
    }
    r->limit_ts = 0;
    r->bound = NULL;
    if (!mc || mc->bw.gbs <= 0 || mc->fma.gflops <= 0) return;
    double t_bytes = r->bytes / (mc->bw.gbs * 1e9);
    double t_flops = r->flops / (mc->fma.gflops * 1e9);
    double t = t_bytes > t_flops ? t_bytes : t_flops;
    r->bound = t_bytes > t_flops ? "bandwidth" : "compute";
    r->limit_ts = t > 0 ? r->tokens / t : 0;
}

static int tty_progress;
/* the largest device memory the rows' contexts held (printed at the end) */
static ig_device_stats dev_peak;
static bool have_dev_peak;

static void progress(const char *test, int threads, int rep, int reps) {
    if (!tty_progress) return;
    if (rep < 0) fprintf(stderr, "\r\033[K%s t=%d: warm-up", test, threads);
    else fprintf(stderr, "\r\033[K%s t=%d: %d/%d", test, threads, rep + 1, reps);
    fflush(stderr);
}

/* The limits of the GPU the model runs on (vk_probe.c). The flops limit is
 * the f16 tensor-core rate, the unit the prefill matmul is made of; without
 * tensor cores no fraction is quoted. */
static int probe_vulkan(const bench_cfg *cfg, machine *mcs) {
#ifdef IGNIS_HAVE_VULKAN
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = cfg->mp.device;
    ig_vk_device *d;
    ig_vk_probe_result pr;
    ig_status st = ig_vk_device_create(&p, &d);
    if (st == IG_OK) {
        printf("device: %s\n", ig_vk_device_get_info(d)->name);
        st = ig_vk_probe(d, &pr);
        ig_vk_device_free(d);
    }
    if (st != IG_OK) {
        fprintf(stderr, "ignis bench: device probe failed: %s\n", ig_last_error());
        return 1;
    }
    printf("device memory read %.1f GB/s (best of %d passes over %llu MiB)", pr.read_gbs, pr.runs,
           (unsigned long long)(pr.read_bytes >> 20));
    if (pr.mma_tflops > 0) printf(", f16 tensor-core products %.1f TFLOP/s\n", pr.mma_tflops);
    else printf(", no tensor-core matmul (no flops limit quoted)\n");
    for (int i = 0; i < cfg->n_threads; i++) {
        mcs[i].n_threads = cfg->threads[i];
        mcs[i].bw.gbs = pr.read_gbs;
        mcs[i].bw.buffer_bytes = (size_t)pr.read_bytes;
        mcs[i].bw.runs = pr.runs;
        mcs[i].fma.gflops = pr.mma_tflops * 1e3;
        mcs[i].fma.isa = pr.mma_tflops > 0 ? "f16 tensor cores" : "none";
    }
    return 0;
#else
    (void)cfg;
    (void)mcs;
    fprintf(stderr, "ignis bench: built without the Vulkan backend\n");
    return 1;
#endif
}

/* Runs one test (pp when n_seq == 0, else tg with n_seq sequences). */
static int run_test(ig_model *model, const bench_cfg *cfg, const machine *mc, int threads,
                    int n_seq, int batched, gen_mode *gm, result *r) {
    const ig_hparams *hp = ig_model_hparams(model);
    const int is_pp = n_seq == 0;
    memset(r, 0, sizeof *r);
    r->threads = threads;
    r->n_seq = is_pp ? 1 : n_seq;
    r->depth = cfg->depth;
    if (is_pp) snprintf(r->test, sizeof r->test, "pp%ld", cfg->n_prompt);
    else if (batched) snprintf(r->test, sizeof r->test, "tg%ld@b%d", cfg->n_gen, n_seq);
    else snprintf(r->test, sizeof r->test, "tg%ld", cfg->n_gen);
    if (gm) {
        const size_t len = strlen(r->test);
        snprintf(r->test + len, sizeof r->test - len, gm->grammar ? " schema" : " free");
    }
    if (cfg->depth > 0) {
        const size_t len = strlen(r->test);
        snprintf(r->test + len, sizeof r->test - len, "@d%ld", cfg->depth);
    }

    ig_context_params cp = ig_context_default_params();
    cp.n_threads = threads;
    cp.kv_type = cfg->kv;
    int n_batch;
    if (is_pp) {
        cp.n_ctx = (int)(cfg->depth + cfg->n_prompt);
        cp.n_seq = 1;
        n_batch = (int)(cfg->n_batch < cfg->n_prompt ? cfg->n_batch : cfg->n_prompt);
    } else {
        cp.n_ctx = (int)(cfg->depth + (gm && gm->prompt ? gm->n_prompt : TG_PROMPT) + cfg->n_gen);
        cp.n_seq = n_seq;
        n_batch = n_seq > TG_PROMPT ? n_seq : TG_PROMPT;
        /* the depth goes in in chunks as large as a prompt's */
        if (cfg->depth > 0 && n_batch < cfg->n_batch) n_batch = (int)cfg->n_batch;
    }
    cp.n_batch = n_batch;
    r->tokens = is_pp ? (double)cfg->n_prompt : (double)cfg->n_gen * n_seq;

    ig_context *ctx = NULL;
    ig_status st = ig_context_create(model, &cp, &ctx);
    if (st != IG_OK) {
        fprintf(stderr, "ignis bench: cannot create a context for %s: %s\n", r->test,
                *ig_last_error() ? ig_last_error() : ig_status_str(st));
        return 1;
    }
    batch_buf b;
    int32_t *prompt = NULL;
    int rc = batch_alloc(&b, n_batch);
    /* mask times of every timed repetition (schema rows) */
    int n_mask_all = gm && gm->grammar ? (int)(cfg->n_gen * cfg->reps) : 0, n_mask_total = 0;
    double *mask_all = n_mask_all ? calloc((size_t)n_mask_all, sizeof *mask_all) : NULL;
    if (n_mask_all && !mask_all) rc = 1;
    if (!rc && is_pp) {
        prompt = malloc(sizeof *prompt * (size_t)cfg->n_prompt);
        if (!prompt) rc = 1;
        else
            for (long i = 0; i < cfg->n_prompt; i++) prompt[i] = next_token(hp->n_vocab_real);
    }
    if (rc) fprintf(stderr, "ignis bench: out of memory\n");
    for (int rep = -1; !rc && rep < cfg->reps; rep++) {
        progress(r->test, threads, rep, (int)cfg->reps);
        double dt = 0;
        if (is_pp) rc = run_pp(ctx, &b, prompt, (int)cfg->n_prompt, n_batch, (int)cfg->depth, hp->n_vocab_real, &dt);
        else {
            int steps = rep < 0 && cfg->n_gen > TG_WARMUP ? TG_WARMUP : (int)cfg->n_gen;
            if (gm) rc = run_tg_sampled(ctx, &b, steps, n_batch, hp, gm, &dt);
            else rc = run_tg(ctx, &b, n_seq, steps, (int)cfg->depth, n_batch, hp->n_vocab_real, &dt);
            if (!rc && rep >= 0 && gm && gm->grammar && n_mask_all) {
                memcpy(mask_all + n_mask_total, gm->mask_s, (size_t)gm->n_mask * sizeof *mask_all);
                n_mask_total += gm->n_mask;
            }
        }
        if (!rc && rep >= 0) r->ts[r->n_ts++] = dt > 0 ? r->tokens / dt : 0;
    }
    if (!rc && n_mask_total > 0) {
        qsort(mask_all, (size_t)n_mask_total, sizeof *mask_all, cmp_double);
        r->has_mask = true;
        r->mask_p50_ms = 1e3 * mask_all[n_mask_total / 2];
        r->mask_p99_ms = 1e3 * mask_all[IG_MIN(n_mask_total - 1, (int)(n_mask_total * 0.99))];
        double sum = 0;
        for (int i = 0; i < n_mask_total; i++) sum += mask_all[i];
        r->mask_mean_ms = 1e3 * sum / n_mask_total;
    }
    free(mask_all);
    if (tty_progress) fprintf(stderr, "\r\033[K");
    free(prompt);
    batch_free(&b);
    cli_device_peak(ctx, &dev_peak, &have_dev_peak);
    ig_context_free(ctx);
    if (rc) return rc;
    mean_sd(r->ts, r->n_ts, &r->mean, &r->sd);
    account(model, cfg, mc, r, is_pp, r->n_seq, n_batch);
    return 0;
}

static void fmt_ts(char *out, size_t cap, double mean, double sd) {
    snprintf(out, cap, "%.2f ± %.2f", mean, sd);
}

static void print_header(void) {
    printf("| %-18s | %10s | %10s | %-7s | %7s | %-12s | %20s | %24s |\n", "model", "size",
           "params", "backend", "threads", "test", "t/s", "% of limit");
    printf("| %.18s | %.10s:| %.10s:| %.7s | %.7s:| %.12s | %.20s:| %.24s:|\n",
           "-------------------", "-----------", "-----------", "--------", "--------",
           "-------------", "---------------------", "-------------------------");
}

static void print_row(const char *model_label, const ig_bench_model_info *info,
                      const char *backend, const result *r) {
    char size[32], params[32], ts[48], lim[48];
    snprintf(size, sizeof size, "%.2f MiB", (double)info->file_tensor_bytes / (1024.0 * 1024.0));
    snprintf(params, sizeof params, "%.2f M", info->n_params / 1e6);
    fmt_ts(ts, sizeof ts, r->mean, r->sd);
    if (r->limit_ts > 0)
        snprintf(lim, sizeof lim, "%.1f %% of %.0f (%s)", 100.0 * r->mean / r->limit_ts,
                 r->limit_ts, r->bound[0] == 'b' ? "bw" : "fma");
    else snprintf(lim, sizeof lim, "-");
    /* "±" is 2 bytes but one column: pad by one more */
    printf("| %-18s | %10s | %10s | %-7s | %7d | %-12s | %21s | %24s |\n", model_label, size,
           params, backend, r->threads, r->test, ts, lim);
    fflush(stdout);
}

static json_t *result_json(const result *r) {
    json_t *o = json_object();
    json_t *samples = json_array();
    for (int i = 0; i < r->n_ts; i++) json_array_append_new(samples, json_real(r->ts[i]));
    json_object_set_new(o, "test", json_string(r->test));
    json_object_set_new(o, "threads", json_integer(r->threads));
    json_object_set_new(o, "n_seq", json_integer(r->n_seq));
    json_object_set_new(o, "depth", json_integer(r->depth));
    json_object_set_new(o, "tokens", json_integer((json_int_t)r->tokens));
    json_object_set_new(o, "samples_ts", samples);
    json_object_set_new(o, "avg_ts", json_real(r->mean));
    json_object_set_new(o, "stddev_ts", json_real(r->sd));
    json_object_set_new(o, "bytes_per_token", json_real(r->tokens > 0 ? r->bytes / r->tokens : 0));
    json_object_set_new(o, "flops_per_token", json_real(r->tokens > 0 ? r->flops / r->tokens : 0));
    if (r->limit_ts > 0) {
        json_object_set_new(o, "limit_ts", json_real(r->limit_ts));
        json_object_set_new(o, "bound", json_string(r->bound));
        json_object_set_new(o, "fraction_of_limit", json_real(r->mean / r->limit_ts));
    } else {
        json_object_set_new(o, "limit_ts", json_null());
        json_object_set_new(o, "bound", json_null());
        json_object_set_new(o, "fraction_of_limit", json_null());
    }
    if (r->has_mask) {
        json_object_set_new(o, "mask_p50_ms", json_real(r->mask_p50_ms));
        json_object_set_new(o, "mask_p99_ms", json_real(r->mask_p99_ms));
        json_object_set_new(o, "mask_mean_ms", json_real(r->mask_mean_ms));
    }
    return o;
}

static int parse_args(int argc, char **argv, bench_cfg *c) {
    memset(c, 0, sizeof *c);
    c->n_prompt = 512;
    c->n_gen = 128;
    c->reps = 5;
    c->n_batch = 512;
    c->kv = IG_KV_F16;
    c->mp = ig_model_default_params();
    c->batches[0] = 8;
    c->n_batches = 1;
    c->spec.spec = ig_spec_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int sr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (cli_parse_int(a, v, 0, 1 << 20, &c->n_prompt)) return 2;
            i++;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (cli_parse_int(a, v, 0, 1 << 20, &c->n_gen)) return 2;
            i++;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (cli_parse_int(a, v, 1, 64, &c->reps)) return 2;
            i++;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            if (cli_parse_int(a, v, 0, 1 << 20, &c->depth)) return 2;
            i++;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--n-batch")) {
            if (cli_parse_int(a, v, 1, 65536, &c->n_batch)) return 2;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (parse_list(a, v, 1, 512, c->threads, &c->n_threads)) return 2;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (parse_list(a, v, 0, 4096, c->batches, &c->n_batches)) return 2;
            i++;
        } else if (!strcmp(a, "--kv")) {
            if (v && !strcmp(v, "f16")) c->kv = IG_KV_F16;
            else if (v && !strcmp(v, "f32")) c->kv = IG_KV_F32;
            else {
                fprintf(stderr, "ignis bench: --kv expects f16 or f32, got '%s'\n", v ? v : "");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--backend")) {
            if (cli_parse_backend(v, &c->mp.backend)) return 2;
            i++;
        } else if (!strcmp(a, "--quant")) {
            if (cli_parse_quant(v, &c->mp.quant)) return 2;
            i++;
        } else if (!strcmp(a, "--device")) {
            long d;
            if (cli_parse_int(a, v, 0, 64, &d)) return 2;
            c->mp.device = (int)d;
            i++;
        } else if (!strcmp(a, "--json-schema")) {
            if (!v || !*v) {
                fprintf(stderr, "ignis bench: --json-schema needs a file name\n");
                return 2;
            }
            c->schema_path = v;
            i++;
        } else if (!strcmp(a, "--json")) {
            if (!v || !*v) {
                fprintf(stderr, "ignis bench: --json needs a file name\n");
                return 2;
            }
            c->json_path = v;
            i++;
        } else if (!strcmp(a, "--image") || !strcmp(a, "--mmproj")) {
            if (!v || !*v) {
                fprintf(stderr, "ignis bench: %s needs a file name\n", a);
                return 2;
            }
            if (!strcmp(a, "--image")) c->image = v;
            else c->mmproj = v;
            i++;
        } else if (!strcmp(a, "--draft-replay")) {
            c->spec.replay = true;
        } else if (!strcmp(a, "--verify-curve")) {
            c->spec.verify_curve = true;
        } else if (!strcmp(a, "--prompt")) {
            if (!v || !*v) {
                fprintf(stderr, "ignis bench: --prompt needs a text\n");
                return 2;
            }
            c->spec.prompt = v;
            i++;
        } else if ((sr = spec_options_parse(&c->spec.draft, &c->spec.lookup, &c->spec.spec, argc,
                                             argv, &i)) != 0) {
            if (sr < 0) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis bench: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (c->path) {
            fprintf(stderr, "ignis bench: more than one MODEL given ('%s' and '%s')\n", c->path, a);
            return 2;
        } else {
            c->path = a;
        }
    }
    if ((c->spec.draft != NULL) + c->spec.lookup + c->spec.replay > 1) {
        fprintf(stderr, "ignis bench: --draft, --lookup and --draft-replay are exclusive\n");
        return 2;
    }
    if (c->n_prompt == 0 && c->n_gen == 0 && !c->spec.verify_curve && !c->image) {
        fprintf(stderr, "ignis bench: nothing to run (-p 0 and -n 0)\n");
        return 2;
    }
    /* --batch 0 anywhere in the list: no batched tests */
    int nb = 0;
    for (int i = 0; i < c->n_batches; i++)
        if (c->batches[i] == 0) nb = -1;
    if (nb < 0) c->n_batches = 0;
    if (c->n_threads == 0) {
        c->threads[0] = ig_physical_cores();
        c->n_threads = 1;
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_cfg cfg;
    int prc = parse_args(argc, argv, &cfg);
    if (prc) return prc < 0 ? 0 : prc;
    tty_progress = isatty(2);

    int max_threads = 1;
    for (int i = 0; i < cfg.n_threads; i++)
        if (cfg.threads[i] > max_threads) max_threads = cfg.threads[i];
    cfg.mp.n_threads = max_threads;
    /* The GPU's limits are probed before the model takes its memory. */
    machine mcs[MAX_LIST];
    memset(mcs, 0, sizeof mcs);
    if (cfg.mp.backend == IG_BACKEND_VULKAN && probe_vulkan(&cfg, mcs)) return 1;
    ig_model *model = cli_load_model(cfg.path, &cfg.mp);
    if (!model) return 1;
    if ((cfg.image || cfg.mmproj) && cli_attach_vision(model, cfg.path, cfg.mmproj, cfg.image != NULL)) {
        ig_model_free(model);
        return 1;
    }
    const char *path = cfg.path ? cfg.path : cli_default_model();
    const ig_hparams *hp = ig_model_hparams(model);
    ig_bench_model_info info;
    ig_bench_model_describe(model, &info);
    char model_label[64];
    snprintf(model_label, sizeof model_label, "%s %s", hp->arch, info.type);
    const char *backend = cfg.mp.backend == IG_BACKEND_VULKAN ? "vulkan" : "cpu";

    /* The CPU's limits, per thread count (on the Vulkan backend the GPU's
     * were probed above). */
    char cpu[256];
    ig_bench_cpu_name(cpu, sizeof cpu);
    printf("cpu: %s, %d cores\n", cpu, ig_physical_cores());
    if (cfg.mp.backend == IG_BACKEND_CPU) {
        for (int i = 0; i < cfg.n_threads; i++) {
            machine *mc = &mcs[i];
            mc->n_threads = cfg.threads[i];
            ig_status st = ig_bench_membw(mc->n_threads, 0, 5, &mc->bw);
            if (st == IG_OK) st = ig_bench_fma_peak(mc->n_threads, 3, &mc->fma);
            if (st != IG_OK) {
                fprintf(stderr, "ignis bench: machine probe failed: %s\n", ig_last_error());
                ig_model_free(model);
                return 1;
            }
            printf("threads %d: memory read %.1f GB/s (best of %d over %zu MiB), "
                   "f32 FMA peak %.1f GFLOP/s (%s)\n",
                   mc->n_threads, mc->bw.gbs, mc->bw.runs, mc->bw.buffer_bytes >> 20,
                   mc->fma.gflops, mc->fma.isa);
        }
    }
    ig_grammar *schema = NULL;
    ig_token_trie *trie = NULL;
    double *mask_buf = NULL;
    int32_t *schema_prompt = NULL;
    size_t n_schema_prompt = 0, schema_len = 0;
    char *schema_text = NULL;
    if (cfg.schema_path) {
        ig_status st = ig_file_read_all(cfg.schema_path, IG_GRAMMAR_MAX_TEXT, &schema_text, &schema_len);
        if (st == IG_OK) st = ig_grammar_from_json_schema(schema_text, schema_len, &schema);
        if (st == IG_OK && ig_model_tokenizer(model))
            st = ig_token_trie_create(ig_model_tokenizer(model), hp->n_vocab_real, &trie);
        else if (st == IG_OK) st = ig_fail(IG_ERR_UNSUPPORTED, "the model has no tokenizer");
        /* --prompt: the same text for every engine a comparison runs */
        if (st == IG_OK && cfg.spec.prompt) {
            st = ig_tokenize(ig_model_tokenizer(model), cfg.spec.prompt, strlen(cfg.spec.prompt), true,
                             false, &schema_prompt, &n_schema_prompt);
            if (st == IG_OK && (n_schema_prompt == 0 || n_schema_prompt > 4096))
                st = ig_fail(IG_ERR_INVALID_ARG, "--prompt: %zu tokens (1..4096)", n_schema_prompt);
        }
        mask_buf = calloc((size_t)cfg.n_gen + 1, sizeof *mask_buf);
        if (st != IG_OK || !mask_buf) {
            fprintf(stderr, "ignis bench: %s: %s\n", cfg.schema_path, ig_last_error());
            ig_grammar_free(schema);
            ig_token_trie_free(trie);
            free(mask_buf);
            free(schema_prompt);
            free(schema_text);
            ig_model_free(model);
            return 1;
        }
    }
    printf("model: %s (%s, weights read per step %.2f MiB)\n\n", path, model_label,
           (double)info.weight_bytes / (1024.0 * 1024.0));
    print_header();

    json_t *results = json_array();
    int rc = 0;
    for (int ti = 0; ti < cfg.n_threads && !rc; ti++) {
        const machine *mc = &mcs[ti];
        int th = cfg.threads[ti];
        /* pp, tg, then each batched tg */
        int n_tests = 2 + cfg.n_batches;
        for (int k = 0; k < n_tests && !rc; k++) {
            result r;
            if (k == 0 && cfg.n_prompt == 0) continue;
            if (k >= 1 && cfg.n_gen == 0) continue;
            int n_seq = k == 0 ? 0 : k == 1 ? 1 : cfg.batches[k - 2];
            rc = run_test(model, &cfg, mc, th, n_seq, k >= 2, NULL, &r);
            if (rc) break;
            print_row(model_label, &info, backend, &r);
            json_array_append_new(results, result_json(&r));
        }
        /* sampled generation without and with the schema's grammar */
        for (int k = 0; k < 2 && !rc && schema && cfg.n_gen > 0; k++) {
            result r;
            gen_mode gm = {.grammar = k ? schema : NULL, .trie = trie, .tok = ig_model_tokenizer(model),
                           .schema = schema_text, .schema_len = schema_len, .mask_s = mask_buf,
                           .prompt = schema_prompt, .n_prompt = (int)n_schema_prompt,
                           .mask_ahead = cfg.mp.backend != IG_BACKEND_CPU};
            rc = run_test(model, &cfg, mc, th, 1, 0, &gm, &r);
            if (rc) break;
            print_row(model_label, &info, backend, &r);
            if (r.has_mask)
                printf("|   grammar mask per token: p50 %.3f ms, p99 %.3f ms, mean %.3f ms\n",
                       r.mask_p50_ms, r.mask_p99_ms, r.mask_mean_ms);
            json_array_append_new(results, result_json(&r));
        }
    }
    ig_grammar_free(schema);
    ig_token_trie_free(trie);
    free(mask_buf);
    free(schema_prompt);
    free(schema_text);

    cfg.spec.n_gen = (int)cfg.n_gen;
    cfg.spec.reps = (int)cfg.reps;
    cfg.spec.n_batch = (int)cfg.n_batch;
    cfg.spec.depth = (int)cfg.depth;
    cfg.spec.kv = cfg.kv;
    ig_model_params spec_mp = cfg.mp;
    spec_mp.n_threads = cfg.threads[0];
    if (!rc && (cfg.spec.draft || cfg.spec.lookup || cfg.spec.replay) && cfg.n_gen > 0)
        rc = bench_spec_run(model, &spec_mp, &cfg.spec, results);
    if (!rc && cfg.spec.verify_curve) rc = bench_verify_curve(model, &spec_mp, &cfg.spec, results);
    for (int ti = 0; ti < cfg.n_threads && !rc && cfg.image; ti++)
        rc = bench_image_run(model, cfg.image, cfg.threads[ti], (int)cfg.reps, (int)cfg.n_batch, cfg.kv, results);

    if (!rc && cfg.json_path) {
        json_t *root = json_object();
        json_t *jm = json_object();
        json_object_set_new(jm, "path", json_string(path));
        json_object_set_new(jm, "arch", json_string(hp->arch));
        json_object_set_new(jm, "type", json_string(info.type));
        json_object_set_new(jm, "size_bytes", json_integer((json_int_t)info.file_tensor_bytes));
        json_object_set_new(jm, "weight_bytes", json_integer((json_int_t)info.weight_bytes));
        json_object_set_new(jm, "n_params", json_integer((json_int_t)info.n_params));
        json_object_set_new(jm, "layer_matrix_params",
                            json_integer((json_int_t)info.layer_matrix_params));
        json_object_set_new(jm, "output_params", json_integer((json_int_t)info.output_params));
        json_object_set_new(jm, "n_layer", json_integer(hp->n_layer));
        json_object_set_new(jm, "n_embd", json_integer(hp->n_embd));
        json_object_set_new(jm, "n_vocab", json_integer(hp->n_vocab));
        json_t *jmc = json_array();
        for (int i = 0; i < cfg.n_threads; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "threads", json_integer(mcs[i].n_threads));
            json_object_set_new(o, "mem_read_gbs", json_real(mcs[i].bw.gbs));
            json_object_set_new(o, "mem_buffer_bytes", json_integer((json_int_t)mcs[i].bw.buffer_bytes));
            json_object_set_new(o, "fma_peak_gflops", json_real(mcs[i].fma.gflops));
            json_object_set_new(o, "fma_isa", json_string(mcs[i].fma.isa));
            json_array_append_new(jmc, o);
        }
        json_t *jcfg = json_object();
        json_object_set_new(jcfg, "n_prompt", json_integer(cfg.n_prompt));
        json_object_set_new(jcfg, "n_gen", json_integer(cfg.n_gen));
        json_object_set_new(jcfg, "n_depth", json_integer(cfg.depth));
        json_object_set_new(jcfg, "repetitions", json_integer(cfg.reps));
        json_object_set_new(jcfg, "n_batch", json_integer(cfg.n_batch));
        json_object_set_new(jcfg, "tg_prompt", json_integer(TG_PROMPT));
        json_object_set_new(jcfg, "kv_type", json_string(cfg.kv == IG_KV_F16 ? "f16" : "f32"));
        json_object_set_new(root, "ignis_version", json_string(IGNIS_VERSION));
        json_object_set_new(root, "cpu", json_string(cpu));
        json_object_set_new(root, "backend", json_string(backend));
        json_object_set_new(root, "device", json_integer(cfg.mp.device));
        json_object_set_new(root, "model", jm);
        json_object_set_new(root, "config", jcfg);
        json_object_set_new(root, "machine", jmc);
        json_object_set_new(root, "results", results);
        results = NULL;
        if (json_dump_file(root, cfg.json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(8)) != 0) {
            fprintf(stderr, "ignis bench: cannot write %s\n", cfg.json_path);
            rc = 1;
        }
        json_decref(root);
    }
    json_decref(results);
    if (have_dev_peak) cli_print_memory(&dev_peak);
    ig_model_free(model);
    return rc;
}
