/* llama-perplexity's measurement, and an exact KL divergence, through
 * llama.cpp's public C API (llama.h): a reference tool for comparing
 * `ignis perplexity` with llama.cpp (never part of ignis), built against the
 * libllama of scripts/build-llamacpp.sh (B: its bin directory, S: the
 * llama.cpp source):
 *
 *   cc -O2 -std=c11 -o llamacpp_ppl tests/tools/llamacpp_ppl.c -IS/include \
 *      -IS/ggml/include -LB -lllama -lggml -lggml-base -lm -Wl,-rpath,B
 *
 *   llamacpp_ppl [-t N] [-c CTX] [--chunks N] [--top-k K] TEXT MODEL [REF_MODEL]
 *
 * The text is tokenized whole (BOS added, specials not parsed), cut into
 * windows of CTX tokens (default 512), the first token of each replaced by
 * BOS; a window is decoded as one batch from an empty cache (KV f16, flash
 * attention as llama.cpp's default decides) and the logits at positions
 * CTX/2 .. CTX-2 score the tokens after them. Prints "Final estimate: PPL =
 * X +/- Y" as llama-perplexity does. With REF_MODEL, both models evaluate
 * each window and the KL divergence KL(ref || model) is computed over the
 * whole vocabulary in double precision: mean, 99th percentile, max, top-1
 * agreement, |delta logprob| of the reference's top token, PPL ratio.
 * --top-k K also prints the KL divergence of the two distributions coarsened
 * to the reference's K most likely tokens plus one "rest" outcome: what
 * `ignis perplexity --kl-divergence` reports against a reference saved with
 * `--kl-top-k K`, so that both engines can be compared on that footing. */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void die(const char *msg) {
    fprintf(stderr, "llamacpp_ppl: %s\n", msg);
    exit(1);
}

static struct llama_context *make_ctx(struct llama_model *m, int n_ctx, int threads) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) die("cannot create a context");
    return ctx;
}

static void eval(struct llama_context *ctx, llama_token *w, int n_ctx, int first) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch b = llama_batch_init(n_ctx, 0, 1);
    for (int i = 0; i < n_ctx; i++) {
        b.token[i] = w[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i >= first && i <= n_ctx - 2;
    }
    b.n_tokens = n_ctx;
    if (llama_decode(ctx, b)) die("decode failed");
    llama_batch_free(b);
}

/* log-softmax in double; returns the argmax. */
static int log_softmax(const float *l, int n, double *out) {
    int top = 0;
    for (int j = 1; j < n; j++)
        if (l[j] > l[top]) top = j;
    double z = 0;
    for (int j = 0; j < n; j++) z += exp((double)l[j] - l[top]);
    double lse = l[top] + log(z);
    for (int j = 0; j < n; j++) out[j] = (double)l[j] - lse;
    return top;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The k-th largest of a[0..n) (a is reordered): quickselect. */
static double kth_largest(double *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const double pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                const double t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return a[k - 1];
    }
    return a[lo];
}

/* KL(p || q) of the distributions coarsened to p's k most likely tokens
 * (ties at the threshold included) and the rest. */
static double kl_top(const double *lp, const double *lq, double *scratch, int V, int k) {
    memcpy(scratch, lp, sizeof *scratch * (size_t)V);
    const double t = kth_largest(scratch, V, k);
    double kl = 0, p_rest = 0, q_rest = 0;
    for (int j = 0; j < V; j++) {
        if (lp[j] >= t) kl += exp(lp[j]) * (lp[j] - lq[j]);
        else {
            p_rest += exp(lp[j]);
            q_rest += exp(lq[j]);
        }
    }
    if (p_rest > 0) kl += p_rest * (log(p_rest) - log(q_rest > 1e-300 ? q_rest : 1e-300));
    return kl;
}

int main(int argc, char **argv) {
    int threads = 2, n_ctx = 512, chunks = 0, top_k = 0, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-t") && a + 1 < argc) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-c") && a + 1 < argc) n_ctx = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--chunks") && a + 1 < argc) chunks = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--top-k") && a + 1 < argc) top_k = atoi(argv[++a]);
        else die("bad option");
    }
    if (argc - a < 2 || n_ctx < 16) die("usage: llamacpp_ppl [-t N] [-c CTX] [--chunks N] [--top-k K] TEXT MODEL [REF_MODEL]");
    const char *text_path = argv[a], *model_path = argv[a + 1];
    const char *ref_path = argc - a > 2 ? argv[a + 2] : NULL;

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) die("cannot load the model");
    struct llama_model *ref = ref_path ? llama_model_load_from_file(ref_path, mp) : NULL;
    if (ref_path && !ref) die("cannot load the reference model");
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int V = llama_vocab_n_tokens(vocab);

    FILE *f = fopen(text_path, "rb");
    if (!f) die("cannot open the text");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) die("cannot read the text");
    fclose(f);
    int n_tok = -llama_tokenize(vocab, text, (int32_t)len, NULL, 0, true, false);
    llama_token *tok = malloc(sizeof *tok * (size_t)n_tok);
    if (!tok || llama_tokenize(vocab, text, (int32_t)len, tok, n_tok, true, false) != n_tok)
        die("tokenize failed");
    int n_chunk = n_tok / n_ctx;
    if (chunks > 0 && chunks < n_chunk) n_chunk = chunks;
    fprintf(stderr, "llamacpp_ppl: %d tokens, %d windows of %d\n", n_tok, n_chunk, n_ctx);

    struct llama_context *ctx = make_ctx(model, n_ctx, threads);
    struct llama_context *rctx = ref ? make_ctx(ref, n_ctx, threads) : NULL;
    const int first = n_ctx / 2, per = n_ctx - 1 - first;
    double *lq = malloc(sizeof *lq * (size_t)V), *lp = malloc(sizeof *lp * (size_t)V);
    double *kls = malloc(sizeof *kls * (size_t)n_chunk * (size_t)per);
    double *sel = malloc(sizeof *sel * (size_t)V);
    double kl_top_sum = 0;
    if (top_k < 0 || top_k >= V) die("--top-k out of range");
    llama_token *w = malloc(sizeof *w * (size_t)n_ctx);
    if (!lq || !lp || !kls || !sel || !w) die("out of memory");
    double nll = 0, nll2 = 0, ref_nll = 0, dlp_sum = 0, dlp_max = 0;
    long count = 0, top1 = 0;
    for (int c = 0; c < n_chunk; c++) {
        memcpy(w, tok + (size_t)c * n_ctx, sizeof *w * (size_t)n_ctx);
        if (llama_vocab_get_add_bos(vocab)) w[0] = llama_vocab_bos(vocab);
        eval(ctx, w, n_ctx, first);
        if (rctx) eval(rctx, w, n_ctx, first);
        for (int i = first; i <= n_ctx - 2; i++) {
            int top = log_softmax(llama_get_logits_ith(ctx, i), V, lq);
            double l = lq[w[i + 1]];
            nll -= l;
            nll2 += l * l;
            if (rctx) {
                int rtop = log_softmax(llama_get_logits_ith(rctx, i), V, lp);
                double kl = 0;
                for (int j = 0; j < V; j++) kl += exp(lp[j]) * (lp[j] - lq[j]);
                kls[count] = kl;
                if (top_k > 0) kl_top_sum += kl_top(lp, lq, sel, V, top_k);
                ref_nll -= lp[w[i + 1]];
                top1 += top == rtop;
                double d = fabs(lq[rtop] - lp[rtop]);
                dlp_sum += d;
                if (d > dlp_max) dlp_max = d;
            }
            count++;
        }
        fprintf(stderr, "[%d]%.4f\n", c + 1, exp(nll / (double)count));
    }
    double mean = nll / (double)count, ppl = exp(mean), var = nll2 / (double)count - mean * mean;
    printf("windows: %d x %d tokens, %ld scored\n", n_chunk, n_ctx, count);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * sqrt(var / (double)(count - 1)));
    if (rctx) {
        double s = 0, s2 = 0;
        for (long i = 0; i < count; i++) {
            s += kls[i];
            s2 += kls[i] * kls[i];
        }
        double km = s / (double)count, kv = s2 / (double)count - km * km;
        qsort(kls, (size_t)count, sizeof *kls, cmp_double);
        double x = 0.99 * (double)(count - 1);
        long i = (long)x;
        double p99 = i >= count - 1 ? kls[count - 1] : kls[i] + (x - (double)i) * (kls[i + 1] - kls[i]);
        double rppl = exp(ref_nll / (double)count);
        printf("  PPL(reference): %.4f\n", rppl);
        printf("  PPL ratio: %.6f\n", ppl / rppl);
        printf("  mean KL: %.6f +/- %.6f\n", km, kv > 0 ? sqrt(kv / (double)(count - 1)) : 0.0);
        printf("  99th percentile KL: %.6f\n", p99);
        printf("  max KL: %.6f\n", kls[count - 1]);
        printf("  top-1 agreement: %.3f %%\n", 100.0 * (double)top1 / (double)count);
        printf("  mean |delta logprob| of the reference top token: %.6f\n", dlp_sum / (double)count);
        printf("  max |delta logprob| of the reference top token: %.6f\n", dlp_max);
        if (top_k > 0) printf("  mean KL, top %d + rest: %.6f\n", top_k, kl_top_sum / (double)count);
    }
    return 0;
}
