/* Grammar-constrained sampling with llama.cpp's public C API (llama.h), for
 * bench/vs-llamacpp-grammar: the llama.cpp side of the side-by-side with
 * `ignis bench --json-schema`. Built by that script against the libllama of
 * scripts/build-llamacpp.sh (into the cache, never part of ignis). CPU only.
 *
 *   llamacpp_grammar [-t THREADS] [-n N] [-r REPS] [--seed S] [--modes LIST] [-v]
 *                    MODEL GBNF IDS
 *
 * GBNF is a file of llama.cpp's grammar text (for a JSON Schema: made by
 * llama.cpp's own converter, examples/json_schema_to_grammar.py); IDS the
 * prompt, comma-separated token ids. Three modes, each one warm-up of 16
 * steps and then REPS repetitions of: clear the cache, decode the prompt,
 * N steps of sample one token (top-k 64, top-p 0.95, temperature 1, seed S
 * -- ignis bench's settings) and decode it:
 *   free   no grammar;
 *   check  llama.cpp's default (common_sampler_sample with grammar_first
 *          false): sample without the grammar, check that one token against
 *          it, and only when it is refused apply the grammar to the whole
 *          vocabulary and sample again;
 *   full   the grammar applied to the whole vocabulary every step before
 *          sampling (grammar_first true; what ignis's mask does).
 * When an end-of-generation token is sampled the document is complete: the
 * grammar starts over and BOS is fed instead (as ignis bench does).
 * Prints one JSON object per mode on its own line:
 *   {"mode", "ts": [tokens/s per repetition], "grammar_ms": [per timed step:
 *    grammar apply + accept], "accept_ms": [the accept part], "refused": n
 *    (check mode: steps that needed the full apply), "docs": n}
 * --modes picks some of them (comma-separated, default free,check,full); -v
 * writes the generated text of every mode to stderr. */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void die(const char *msg) {
    fprintf(stderr, "llamacpp_grammar: %s\n", msg);
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open the grammar file");
    size_t cap = 1 << 16, len = 0, got;
    char *s = malloc(cap + 1);
    while (s && (got = fread(s + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) s = realloc(s, (cap *= 2) + 1);
    }
    fclose(f);
    if (!s) die("out of memory");
    s[len] = '\0';
    return s;
}

static int parse_ids(const char *s, llama_token **out) {
    int cap = 16, n = 0;
    llama_token *ids = malloc(sizeof *ids * cap);
    const char *p = s;
    while (ids && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (n == cap) ids = realloc(ids, sizeof *ids * (cap *= 2));
        if (!ids) break;
        ids[n++] = (llama_token)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    if (!ids) die("out of memory");
    *out = ids;
    return n;
}

static void print_list(const char *key, const double *v, int n, double scale) {
    printf(", \"%s\": [", key);
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? ", " : "", v[i] * scale);
    printf("]");
}

enum { MODE_FREE, MODE_CHECK, MODE_FULL };

int main(int argc, char **argv) {
    int threads = 2, n_gen = 128, reps = 3;
    unsigned seed = 1234;
    int a = 1, verbose = 0;
    const char *modes = "free,check,full";
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-t") && a + 1 < argc) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-n") && a + 1 < argc) n_gen = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-r") && a + 1 < argc) reps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--seed") && a + 1 < argc) seed = (unsigned)atol(argv[++a]);
        else if (!strcmp(argv[a], "-v")) verbose = 1;
        else if (!strcmp(argv[a], "--modes") && a + 1 < argc) modes = argv[++a];
        else die("bad option");
    }
    if (argc - a != 3 || n_gen < 1 || reps < 1 || threads < 1)
        die("usage: llamacpp_grammar [-t N] [-n N] [-r R] [--seed S] MODEL GBNF IDS");
    char *gbnf = read_file(argv[a + 1]);
    llama_token *prompt = NULL;
    int n_prompt = parse_ids(argv[a + 2], &prompt);
    if (n_prompt < 1) die("empty prompt");

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[a], mp);
    if (!model) die("cannot load model");
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 16 ? n_prompt : 16);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create a context");
    llama_token bos = llama_vocab_bos(vocab);

    llama_token_data *cand = malloc(sizeof *cand * (size_t)n_vocab);
    double *gms = malloc(sizeof *gms * (size_t)n_gen * (size_t)reps);
    double *ams = malloc(sizeof *ams * (size_t)n_gen * (size_t)reps);
    double *ts = malloc(sizeof *ts * (size_t)reps);
    if (!cand || !gms || !ams || !ts) die("out of memory");

    static const char *names[] = {"free", "check", "full"};
    for (int mode = MODE_FREE; mode <= MODE_FULL; mode++) {
        if (!strstr(modes, names[mode])) continue;
        struct llama_sampler *grmr = NULL;
        if (mode != MODE_FREE) {
            grmr = llama_sampler_init_grammar(vocab, gbnf, "root");
            if (!grmr) die("llama.cpp refused the grammar");
        }
        struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(64));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.95f, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp(1.0f));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
        int n_times = 0, refused = 0, docs = 0;
        for (int rep = -1; rep < reps; rep++) {
            int steps = rep < 0 ? (n_gen < 16 ? n_gen : 16) : n_gen;
            llama_memory_clear(llama_get_memory(ctx), true);
            llama_sampler_reset(chain);
            if (grmr) llama_sampler_reset(grmr);
            if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt))) die("prompt decode failed");
            double t0 = now();
            for (int k = 0; k < steps; k++) {
                const float *logits = llama_get_logits_ith(ctx, -1);
                for (int i = 0; i < n_vocab; i++) cand[i] = (llama_token_data){i, logits[i], 0.0f};
                llama_token_data_array cur = {cand, (size_t)n_vocab, -1, false};
                double g = 0, g0;
                if (mode == MODE_FULL) {
                    g0 = now();
                    llama_sampler_apply(grmr, &cur);
                    g += now() - g0;
                }
                llama_sampler_apply(chain, &cur);
                llama_token id = cur.data[cur.selected].id;
                if (mode == MODE_CHECK) {
                    g0 = now();
                    llama_token_data one = {id, 1.0f, 0.0f};
                    llama_token_data_array single = {&one, 1, -1, false};
                    llama_sampler_apply(grmr, &single);
                    bool ok = one.logit != -INFINITY;
                    g += now() - g0;
                    if (!ok) {
                        refused += rep >= 0;
                        for (int i = 0; i < n_vocab; i++) cand[i] = (llama_token_data){i, logits[i], 0.0f};
                        cur = (llama_token_data_array){cand, (size_t)n_vocab, -1, false};
                        g0 = now();
                        llama_sampler_apply(grmr, &cur);
                        g += now() - g0;
                        llama_sampler_apply(chain, &cur);
                        id = cur.data[cur.selected].id;
                    }
                }
                double acc = 0;
                if (grmr) {
                    g0 = now();
                    llama_sampler_accept(grmr, id);
                    acc = now() - g0;
                    g += acc;
                }
                llama_sampler_accept(chain, id);
                if (verbose) {
                    char piece[256];
                    int np = llama_token_to_piece(vocab, id, piece, sizeof piece, 0, true);
                    if (np > 0) fwrite(piece, 1, (size_t)np, stderr);
                }
                if (rep >= 0 && grmr) {
                    gms[n_times] = g;
                    ams[n_times++] = acc;
                }
                if (llama_vocab_is_eog(vocab, id)) { /* a complete document: start another */
                    docs += rep >= 0;
                    if (grmr) llama_sampler_reset(grmr);
                    id = bos;
                }
                if (llama_decode(ctx, llama_batch_get_one(&id, 1))) die("decode failed");
            }
            double dt = now() - t0;
            if (verbose) fprintf(stderr, "\n---- %s, repetition %d\n", names[mode], rep);
            if (rep >= 0) ts[rep] = dt > 0 ? steps / dt : 0;
        }
        printf("{\"mode\": \"%s\"", names[mode]);
        print_list("ts", ts, reps, 1.0);
        print_list("grammar_ms", gms, n_times, 1e3);
        print_list("accept_ms", ams, n_times, 1e3);
        printf(", \"refused\": %d, \"docs\": %d}\n", refused, docs);
        fflush(stdout);
        llama_sampler_free(chain);
        if (grmr) llama_sampler_free(grmr);
    }
    free(cand);
    free(gms);
    free(ams);
    free(ts);
    free(prompt);
    free(gbnf);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
