/* ignis perplexity [MODEL] -f TEXT: perplexity of a model on a text, the way
 * llama-perplexity measures it, and the KL divergence of its next-token
 * distributions against a reference model's.
 *
 * The text is tokenized whole (with BOS); it is cut into windows of n_ctx
 * tokens (the last partial one dropped); each window starts with BOS (its
 * first token replaced), is evaluated from an empty cache, and the tokens of
 * its second half are scored: the logits at positions n_ctx/2 .. n_ctx-2
 * predict tokens n_ctx/2+1 .. n_ctx-1. PPL = exp(mean negative log-likelihood);
 * its standard error is PPL * sd(nll) / sqrt(count - 1).
 *
 * --path chooses how the scored logits are computed (the ways a server
 * evaluates a sequence):
 *   prefill        the whole window in one ig_decode;
 *   incremental    one token per ig_decode;
 *   prefix-decode  the first half in one ig_decode, then one token per step;
 *   batched        like prefix-decode, but every ig_decode also carries an
 *                  unrelated sequence (pseudo-random tokens) in slot 1.
 *
 * --kl-divergence-base FILE writes the model's distributions at every scored
 * position (layout in kl_ref.h); --kl-divergence FILE reads them back and
 * compares this model's distributions with them, on the windows stored in
 * the file. */
#include "cli.h"
#include "kl_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PATH_PREFILL, PATH_INCREMENTAL, PATH_PREFIX_DECODE, PATH_BATCHED };
static const char *const path_names[] = {"prefill", "incremental", "prefix-decode", "batched"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis perplexity [MODEL] -f TEXT [--ctx N] [--chunks N] [--path P]\n"
            "                        [--kl-divergence-base FILE [--kl-top-k K]]\n"
            "                        [--kl-divergence FILE] [--kv f16|f32] [-t N]\n"
            "                        [--backend cpu|vulkan] [--device N] [--quant q8_0|q4_0|q4_k]\n"
            "Perplexity over windows of --ctx tokens (default 512), each window's second\n"
            "half scored (llama-perplexity's method); prints the running value and the\n"
            "final estimate with its standard error.\n"
            "  -f TEXT                   UTF-8 text file (scripts/fetch-text.sh fetches one)\n"
            "  --chunks N                evaluate at most N windows (default: all)\n"
            "  --path P                  prefill (default), incremental, prefix-decode or\n"
            "                            batched: how the scored logits are computed\n"
            "  --kl-divergence-base FILE save this model's log-probs at every scored position\n"
            "  --kl-top-k K              keep the K most likely tokens per position (default\n"
            "                            64); 0 keeps the whole distribution (2 bytes a token)\n"
            "  --kl-divergence FILE      compare with the log-probs saved in FILE (its windows;\n"
            "                            -f is then optional and, if given, must match): KL\n"
            "                            divergence (mean, 99th percentile), top-1 agreement,\n"
            "                            |delta logprob| of the reference's top token, PPL ratio\n"
            "  --kv TYPE                 KV cache type (default f16)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct run_state {
    int V;
    kl_row_scratch sc;
    double nll, nll2;
    long count;
    FILE *base_out; /* --kl-divergence-base */
    FILE *kl_in;    /* --kl-divergence */
    kl_ref_header kh;
    double *kl_vals;
    long n_kl;
    double ref_nll, dlp_sum, dlp_max;
    long top1_same;
} run_state;

/* Scores one row of logits whose next token is tok. */
static int score_row(run_state *rs, const float *logits, int32_t tok) {
    int top = kl_log_softmax(&rs->sc, logits);
    double lp = rs->sc.lp[tok];
    rs->nll -= lp;
    rs->nll2 += lp * lp;
    rs->count++;
    if (rs->base_out) {
        kl_make_record(&rs->sc, tok, top);
        size_t nb = kl_ref_record_bytes(&rs->kh);
        if (fwrite(rs->sc.rec, 1, nb, rs->base_out) != nb) {
            fprintf(stderr, "ignis perplexity: cannot write the reference file\n");
            return 1;
        }
    }
    if (rs->kl_in) {
        size_t nb = kl_ref_record_bytes(&rs->kh);
        kl_row_stats k;
        if (fread(rs->sc.rec, 1, nb, rs->kl_in) != nb) {
            fprintf(stderr, "ignis perplexity: reference file truncated\n");
            return 1;
        }
        if (kl_compare_record(&rs->sc, &k) != IG_OK) {
            fprintf(stderr, "ignis perplexity: %s\n", ig_last_error());
            return 1;
        }
        rs->kl_vals[rs->n_kl++] = k.kl;
        rs->ref_nll -= k.ref_tok_lp;
        double d = fabs(k.dlp_top);
        rs->dlp_sum += d;
        if (d > rs->dlp_max) rs->dlp_max = d;
        rs->top1_same += top == k.ref_top;
    }
    return 0;
}

static int decode_fail(ig_status st) {
    fprintf(stderr, "ignis perplexity: decode failed: %s\n",
            *ig_last_error() ? ig_last_error() : ig_status_str(st));
    return 1;
}

/* Batch arrays for up to cap tokens. */
typedef struct bbuf {
    int32_t *tok, *pos, *seq;
    uint8_t *want;
} bbuf;

/* Evaluates one window w[0..n_ctx) by the chosen path and scores positions
 * first .. n_ctx-2. other: the unrelated sequence of the batched path. */
static int eval_window(ig_context *ctx, int path, const int32_t *w, int n_ctx, int first,
                       const int32_t *other, bbuf *b, run_state *rs) {
    ig_seq_clear(ctx, 0);
    if (path == PATH_BATCHED) ig_seq_clear(ctx, 1);
    ig_status st;
    if (path == PATH_PREFILL) {
        for (int i = 0; i < n_ctx; i++) {
            b->tok[i] = w[i];
            b->pos[i] = i;
            b->seq[i] = 0;
            b->want[i] = i >= first && i <= n_ctx - 2;
        }
        ig_batch bt = {n_ctx, b->tok, b->pos, b->seq, b->want};
        if ((st = ig_decode(ctx, &bt)) != IG_OK) return decode_fail(st);
        for (int i = first; i <= n_ctx - 2; i++) {
            const float *l = ig_get_logits(ctx, i - first);
            if (!l) return decode_fail(IG_ERR_INTERNAL);
            if (score_row(rs, l, w[i + 1])) return 1;
        }
        return 0;
    }
    /* Prefix: nothing for incremental, the first half otherwise (with the
     * other sequence's first half in the same batch when batched). */
    int start = 0;
    if (path != PATH_INCREMENTAL) {
        int n = 0;
        for (int i = 0; i < first; i++) {
            b->tok[n] = w[i];
            b->pos[n] = i;
            b->seq[n] = 0;
            b->want[n++] = 0;
        }
        if (path == PATH_BATCHED)
            for (int i = 0; i < first; i++) {
                b->tok[n] = other[i];
                b->pos[n] = i;
                b->seq[n] = 1;
                b->want[n++] = 0;
            }
        ig_batch bt = {n, b->tok, b->pos, b->seq, b->want};
        if ((st = ig_decode(ctx, &bt)) != IG_OK) return decode_fail(st);
        start = first;
    }
    for (int i = start; i <= n_ctx - 2; i++) {
        int n = 0;
        b->tok[n] = w[i];
        b->pos[n] = i;
        b->seq[n] = 0;
        b->want[n++] = i >= first;
        if (path == PATH_BATCHED) {
            b->tok[n] = other[i];
            b->pos[n] = i;
            b->seq[n] = 1;
            b->want[n++] = 1;
        }
        ig_batch bt = {n, b->tok, b->pos, b->seq, b->want};
        if ((st = ig_decode(ctx, &bt)) != IG_OK) return decode_fail(st);
        if (i >= first) {
            const float *l = ig_get_logits(ctx, 0);
            if (!l) return decode_fail(IG_ERR_INTERNAL);
            if (score_row(rs, l, w[i + 1])) return 1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Value at fraction f of the sorted v[0..n) (linear interpolation). */
static double percentile(const double *v, long n, double f) {
    double x = f * (double)(n - 1);
    long i = (long)x;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (x - (double)i) * (v[i + 1] - v[i]);
}

static void fmt_eta(double s, char *out, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, cap, "%lds", t);
}

int cmd_perplexity(int argc, char **argv) {
    const char *path = NULL, *text_path = NULL, *base_path = NULL, *kl_path = NULL;
    long n_ctx_arg = 0, chunks = 0, threads = 0, top_k = 64;
    int eval_path = PATH_PREFILL;
    ig_kv_type kv = IG_KV_F16;
    ig_model_params mp = ig_model_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!v) goto missing;
            text_path = argv[++i];
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (cli_parse_int(a, v, 16, 1 << 20, &n_ctx_arg)) return 2;
            i++;
        } else if (!strcmp(a, "--chunks")) {
            if (cli_parse_int(a, v, 1, 1 << 20, &chunks)) return 2;
            i++;
        } else if (!strcmp(a, "--path")) {
            if (!v) goto missing;
            int k = -1;
            for (int j = 0; j < 4; j++)
                if (!strcmp(v, path_names[j])) k = j;
            if (k < 0) {
                fprintf(stderr, "ignis perplexity: --path expects prefill, incremental, "
                                "prefix-decode or batched, got '%s'\n", v);
                return 2;
            }
            eval_path = k;
            i++;
        } else if (!strcmp(a, "--kl-divergence-base")) {
            if (!v) goto missing;
            base_path = argv[++i];
        } else if (!strcmp(a, "--kl-divergence")) {
            if (!v) goto missing;
            kl_path = argv[++i];
        } else if (!strcmp(a, "--kl-top-k")) {
            if (cli_parse_int(a, v, 0, KL_REF_MAX_TOP_K, &top_k)) return 2;
            i++;
        } else if (!strcmp(a, "--kv")) {
            if (v && !strcmp(v, "f16")) kv = IG_KV_F16;
            else if (v && !strcmp(v, "f32")) kv = IG_KV_F32;
            else {
                fprintf(stderr, "ignis perplexity: --kv expects f16 or f32\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(a, v, 1, 512, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--backend")) {
            if (cli_parse_backend(v, &mp.backend)) return 2;
            i++;
        } else if (!strcmp(a, "--quant")) {
            if (cli_parse_quant(v, &mp.quant)) return 2;
            i++;
        } else if (!strcmp(a, "--device")) {
            long d;
            if (cli_parse_int(a, v, 0, 64, &d)) return 2;
            mp.device = (int)d;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis perplexity: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "ignis perplexity: unexpected argument %s\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "ignis perplexity: %s needs a value\n", a);
        return 2;
    }
    if (!text_path && !kl_path) {
        fprintf(stderr, "ignis perplexity: -f TEXT is required\n");
        usage(stderr);
        return 2;
    }
    if (base_path && kl_path) {
        fprintf(stderr, "ignis perplexity: --kl-divergence-base and --kl-divergence exclude "
                        "each other\n");
        return 2;
    }

    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL, *ref_tokens = NULL, *wins = NULL, *other = NULL;
    size_t n_ids = 0;
    ig_model *m = NULL;
    ig_context *ctx = NULL;
    bbuf b = {0};
    run_state rs = {0};
    char *tmp_path = NULL;
    int n_ctx = (int)(n_ctx_arg ? n_ctx_arg : 512);
    long n_chunks = 0;

    mp.n_threads = (int)threads;
    m = cli_load_model(path, &mp);
    if (!m) goto done;
    const ig_hparams *hp = ig_model_hparams(m);
    const int V = hp->n_vocab_real;
    rs.V = V;

    if (kl_path) {
        rs.kl_in = fopen(kl_path, "rb");
        if (!rs.kl_in) {
            fprintf(stderr, "ignis perplexity: cannot open %s\n", kl_path);
            goto done;
        }
        if (kl_ref_read_header(rs.kl_in, &rs.kh, &ref_tokens, V) != IG_OK) {
            fprintf(stderr, "ignis perplexity: %s: %s\n", kl_path, ig_last_error());
            goto done;
        }
        if (n_ctx_arg && n_ctx_arg != (long)rs.kh.n_ctx) {
            fprintf(stderr, "ignis perplexity: --ctx %ld, but %s was made with %u\n", n_ctx_arg,
                    kl_path, rs.kh.n_ctx);
            goto done;
        }
        n_ctx = (int)rs.kh.n_ctx;
        if ((int)rs.kh.first != n_ctx / 2) {
            fprintf(stderr, "ignis perplexity: %s scores from position %u, expected %d\n", kl_path,
                    rs.kh.first, n_ctx / 2);
            goto done;
        }
        n_chunks = rs.kh.n_chunks;
        if (chunks && chunks < n_chunks) n_chunks = chunks;
    }

    const int first = n_ctx / 2;
    if (text_path) {
        const ig_tokenizer *tok = ig_model_tokenizer(m);
        if (!tok) {
            fprintf(stderr, "ignis perplexity: the model carries no tokenizer\n");
            goto done;
        }
        size_t len = 0;
        text = cli_read_text(text_path, &len);
        if (!text) {
            fprintf(stderr, "ignis perplexity: cannot read %s\n", text_path);
            goto done;
        }
        double t0 = now_s();
        ig_status st = ig_tokenize(tok, text, len, true, false, &ids, &n_ids);
        if (st != IG_OK) {
            fprintf(stderr, "ignis perplexity: cannot tokenize %s: %s\n", text_path,
                    ig_last_error());
            goto done;
        }
        fprintf(stderr, "ignis perplexity: %s: %zu tokens (tokenized in %.1f s)\n", text_path,
                n_ids, now_s() - t0);
        long max_chunks = (long)(n_ids / (size_t)n_ctx);
        if (max_chunks < 1) {
            fprintf(stderr, "ignis perplexity: the text has %zu tokens, fewer than one window of "
                            "%d\n", n_ids, n_ctx);
            goto done;
        }
        if (!kl_path) n_chunks = chunks && chunks < max_chunks ? chunks : max_chunks;
        else if (n_chunks > max_chunks) {
            fprintf(stderr, "ignis perplexity: %s does not match %s (too short)\n", text_path,
                    kl_path);
            goto done;
        }
    }

    /* The windows, BOS in place. */
    size_t n_win_tok = (size_t)n_chunks * (size_t)n_ctx;
    wins = malloc(sizeof *wins * n_win_tok);
    other = malloc(sizeof *other * (size_t)n_ctx);
    b.tok = malloc(sizeof *b.tok * (size_t)n_ctx);
    b.pos = malloc(sizeof *b.pos * (size_t)n_ctx);
    b.seq = malloc(sizeof *b.seq * (size_t)n_ctx);
    b.want = malloc((size_t)n_ctx);
    if (!wins || !other || !b.tok || !b.pos || !b.seq || !b.want) {
        fprintf(stderr, "ignis perplexity: out of memory\n");
        goto done;
    }
    if (ids) {
        memcpy(wins, ids, sizeof *wins * n_win_tok);
        if (hp->bos_id >= 0 && n_ids > 0 && ids[0] == hp->bos_id)
            for (long c = 0; c < n_chunks; c++) wins[(size_t)c * n_ctx] = hp->bos_id;
    }
    if (ref_tokens) {
        if (ids && memcmp(wins, ref_tokens, sizeof *wins * n_win_tok) != 0) {
            fprintf(stderr, "ignis perplexity: the windows of %s differ from those of %s\n",
                    text_path, kl_path);
            goto done;
        }
        memcpy(wins, ref_tokens, sizeof *wins * n_win_tok);
    }

    if (kl_ref_per_window(&(kl_ref_header){.n_ctx = (uint32_t)n_ctx, .first = (uint32_t)first}) < 1) {
        fprintf(stderr, "ignis perplexity: --ctx is too small\n");
        goto done;
    }
    if (base_path) {
        rs.kh = (kl_ref_header){(uint32_t)n_ctx, (uint32_t)V, (uint32_t)n_chunks,
                                (uint32_t)first, (uint32_t)top_k};
        size_t plen = strlen(base_path) + 8;
        tmp_path = malloc(plen);
        if (!tmp_path) goto done;
        snprintf(tmp_path, plen, "%s.tmp", base_path);
        rs.base_out = fopen(tmp_path, "wb");
        if (!rs.base_out) {
            fprintf(stderr, "ignis perplexity: cannot create %s\n", tmp_path);
            goto done;
        }
        if (kl_ref_write_header(rs.base_out, &rs.kh, wins) != IG_OK) {
            fprintf(stderr, "ignis perplexity: %s\n", ig_last_error());
            goto done;
        }
    }
    if (kl_scratch_init(&rs.sc, V, rs.kl_in || base_path ? (int)rs.kh.top_k : 0) != IG_OK) {
        fprintf(stderr, "ignis perplexity: out of memory\n");
        goto done;
    }
    if (rs.kl_in) {
        rs.kl_vals = malloc(sizeof *rs.kl_vals * (size_t)n_chunks * (size_t)(n_ctx - 1 - first));
        if (!rs.kl_vals) {
            fprintf(stderr, "ignis perplexity: out of memory\n");
            goto done;
        }
    }

    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = eval_path == PATH_BATCHED ? 2 : 1;
    cp.n_batch = eval_path == PATH_INCREMENTAL ? 1 : eval_path == PATH_PREFIX_DECODE ? first : n_ctx;
    if (cp.n_batch < 2) cp.n_batch = 2;
    cp.kv_type = kv;
    ig_status st = ig_context_create(m, &cp, &ctx);
    if (st != IG_OK) {
        fprintf(stderr, "ignis perplexity: %s\n", ig_last_error());
        goto done;
    }

    fprintf(stderr, "ignis perplexity: %ld windows of %d tokens, path %s%s\n", n_chunks, n_ctx,
            path_names[eval_path], rs.kl_in ? ", KL divergence against the reference" : "");
    const int tty = isatty(fileno(stderr));
    double t_start = now_s();
    for (long c = 0; c < n_chunks; c++) {
        /* The unrelated sequence: BOS then pseudo-random ids (splitmix64). */
        uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(c + 1);
        other[0] = hp->bos_id >= 0 ? hp->bos_id : 0;
        for (int i = 1; i < n_ctx; i++) {
            uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            other[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)V);
        }
        if (eval_window(ctx, eval_path, wins + (size_t)c * n_ctx, n_ctx, first, other, &b, &rs))
            goto done;
        double el = now_s() - t_start, per = el / (double)(c + 1);
        char eta[32];
        fmt_eta(per * (double)(n_chunks - c - 1), eta, sizeof eta);
        fprintf(stderr, "%s[%ld/%ld] PPL %.4f  (%.1f s/window, ETA %s)%s", tty ? "\r" : "", c + 1,
                n_chunks, exp(rs.nll / (double)rs.count), per, eta, tty ? "   " : "\n");
    }
    if (tty) fprintf(stderr, "\n");

    double mean = rs.nll / (double)rs.count, ppl = exp(mean);
    double var = rs.nll2 / (double)rs.count - mean * mean;
    printf("model: %s\n", path ? path : cli_default_model());
    printf("windows: %ld x %d tokens, %ld scored, path %s, kv %s\n", n_chunks, n_ctx, rs.count,
           path_names[eval_path], kv == IG_KV_F16 ? "f16" : "f32");
    if (rs.count > 1 && var > 0)
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * sqrt(var / (double)(rs.count - 1)));
    else printf("Final estimate: PPL = %.4f\n", ppl);

    if (rs.base_out) {
        FILE *f = rs.base_out;
        rs.base_out = NULL;
        if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 ||
            rename(tmp_path, base_path) != 0) {
            fprintf(stderr, "ignis perplexity: cannot write %s\n", base_path);
            goto done;
        }
        printf("reference log-probs written to %s (%s)\n", base_path,
               top_k ? "top-K" : "whole distribution");
    }
    if (rs.kl_in) {
        long n = rs.n_kl;
        double sum = 0, sum2 = 0;
        for (long i = 0; i < n; i++) {
            sum += rs.kl_vals[i];
            sum2 += rs.kl_vals[i] * rs.kl_vals[i];
        }
        double kmean = sum / (double)n, kvar = sum2 / (double)n - kmean * kmean;
        qsort(rs.kl_vals, (size_t)n, sizeof *rs.kl_vals, cmp_double);
        double ref_ppl = exp(rs.ref_nll / (double)n);
        printf("KL divergence against %s (%s):\n", kl_path,
               rs.kh.top_k ? "top-K tokens + rest" : "whole distribution");
        if (rs.kh.top_k) printf("  reference top-K: %u\n", rs.kh.top_k);
        printf("  PPL(reference): %.4f\n", ref_ppl);
        printf("  PPL ratio: %.6f\n", ppl / ref_ppl);
        printf("  mean KL: %.6f +/- %.6f\n", kmean,
               n > 1 && kvar > 0 ? sqrt(kvar / (double)(n - 1)) : 0.0);
        printf("  99th percentile KL: %.6f\n", percentile(rs.kl_vals, n, 0.99));
        printf("  max KL: %.6f\n", rs.kl_vals[n - 1]);
        printf("  top-1 agreement: %.3f %%\n", 100.0 * (double)rs.top1_same / (double)n);
        printf("  mean |delta logprob| of the reference top token: %.6f\n", rs.dlp_sum / (double)n);
        printf("  max |delta logprob| of the reference top token: %.6f\n", rs.dlp_max);
    }
    rc = 0;
done:
    if (rs.base_out) {
        fclose(rs.base_out);
        remove(tmp_path);
    }
    if (rs.kl_in) fclose(rs.kl_in);
    kl_scratch_free(&rs.sc);
    free(rs.kl_vals);
    free(tmp_path);
    ig_context_free(ctx);
    ig_model_free(m);
    free(text);
    free(ids);
    free(ref_tokens);
    free(wins);
    free(other);
    free(b.tok);
    free(b.pos);
    free(b.seq);
    free(b.want);
    return rc;
}
