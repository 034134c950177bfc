/* A tiny driver over llama.cpp's public C API (llama.h), used only to make
 * reference data (tests/tools/make_llamacpp_reference.py builds and runs it
 * against the libllama built by scripts/build-llamacpp.sh; never part of
 * ignis).  CPU only, f32 KV cache, flash attention off.
 *
 *   llamacpp_driver [-t THREADS] [--kv f32|f16] MODEL tokenize       (text on stdin)
 *       -> one line: the ids, comma-separated (BOS added, specials parsed)
 *   llamacpp_driver [...] MODEL generate N IDS
 *       -> N lines "token is_eog id1 logit1 ... id5 logit5" (the five largest
 *          logits, best first), greedy with llama.cpp's own greedy sampler;
 *          the prompt is decoded as one batch, then one token per decode
 *   llamacpp_driver [...] MODEL logits OUT IDS
 *       -> OUT: float32 little-endian logits of every position, row-major
 *          [n_tokens][n_vocab], all positions decoded as one batch
 *   llamacpp_driver [...] MODEL logits-inc OUT IDS
 *       -> same, but decoding one token at a time
 * IDS are comma-separated token ids. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int parse_ids(const char *s, llama_token **out) {
    int cap = 16, n = 0;
    llama_token *ids = malloc(sizeof *ids * cap);
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (n == cap) ids = realloc(ids, sizeof *ids * (cap *= 2));
        ids[n++] = (llama_token)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    *out = ids;
    return n;
}

static void die(const char *msg) {
    fprintf(stderr, "llamacpp_driver: %s\n", msg);
    exit(1);
}

int main(int argc, char **argv) {
    int threads = 2;
    enum ggml_type kv = GGML_TYPE_F32;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-t") && a + 1 < argc) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--kv") && a + 1 < argc) {
            a++;
            kv = !strcmp(argv[a], "f16") ? GGML_TYPE_F16 : GGML_TYPE_F32;
        } else die("bad option");
    }
    if (argc - a < 2) die("usage: llamacpp_driver [-t N] [--kv f32|f16] MODEL CMD ...");
    const char *model_path = argv[a], *cmd = argv[a + 1];
    char **rest = argv + a + 2;
    int nrest = argc - a - 2;

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) die("cannot load model");
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    if (!strcmp(cmd, "tokenize")) {
        size_t cap = 1 << 16, len = 0;
        char *text = malloc(cap);
        size_t got;
        while ((got = fread(text + len, 1, cap - len, stdin)) > 0) {
            len += got;
            if (len == cap) text = realloc(text, cap *= 2);
        }
        int n = -llama_tokenize(vocab, text, (int32_t)len, NULL, 0, true, true);
        llama_token *ids = malloc(sizeof *ids * (n + 1));
        if (llama_tokenize(vocab, text, (int32_t)len, ids, n + 1, true, true) != n) die("tokenize");
        for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("\n");
        return 0;
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = kv;
    cp.type_v = kv;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create context");

    if (!strcmp(cmd, "generate")) {
        if (nrest < 2) die("generate N IDS");
        int n_gen = atoi(rest[0]);
        llama_token *ids;
        int n = parse_ids(rest[1], &ids);
        struct llama_sampler *smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(smpl, llama_sampler_init_greedy());
        llama_batch batch = llama_batch_get_one(ids, n);
        for (int step = 0; step < n_gen; step++) {
            if (llama_decode(ctx, batch)) die("decode");
            const float *lg = llama_get_logits_ith(ctx, -1);
            enum { K = 5 };
            int top[K];
            for (int i = 0; i < K; i++) top[i] = -1;
            for (int v = 0; v < n_vocab; v++) {
                for (int i = 0; i < K; i++) {
                    if (top[i] < 0 || lg[v] > lg[top[i]]) {
                        for (int j = K - 1; j > i; j--) top[j] = top[j - 1];
                        top[i] = v;
                        break;
                    }
                }
            }
            llama_token tok = llama_sampler_sample(smpl, ctx, -1);
            printf("%d %d", tok, llama_vocab_is_eog(vocab, tok) ? 1 : 0);
            for (int i = 0; i < K; i++) printf(" %d %.9g", top[i], lg[top[i]]);
            printf("\n");
            if (tok != top[0] && lg[tok] != lg[top[0]])
                fprintf(stderr, "warning: sampler %d != argmax %d\n", tok, top[0]);
            static llama_token one;
            one = tok;
            batch = llama_batch_get_one(&one, 1);
        }
        llama_sampler_free(smpl);
    } else if (!strcmp(cmd, "logits") || !strcmp(cmd, "logits-inc")) {
        if (nrest < 2) die("logits OUT IDS");
        llama_token *ids;
        int n = parse_ids(rest[1], &ids);
        FILE *f = fopen(rest[0], "wb");
        if (!f) die("cannot open output");
        if (!strcmp(cmd, "logits")) {
            llama_batch batch = llama_batch_init(n, 0, 1);
            for (int i = 0; i < n; i++) {
                batch.token[i] = ids[i];
                batch.pos[i] = i;
                batch.n_seq_id[i] = 1;
                batch.seq_id[i][0] = 0;
                batch.logits[i] = 1;
            }
            batch.n_tokens = n;
            if (llama_decode(ctx, batch)) die("decode");
            for (int i = 0; i < n; i++)
                fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, f);
            llama_batch_free(batch);
        } else {
            for (int i = 0; i < n; i++) {
                llama_batch batch = llama_batch_get_one(&ids[i], 1);
                if (llama_decode(ctx, batch)) die("decode");
                fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), (size_t)n_vocab, f);
            }
        }
        fclose(f);
    } else {
        die("unknown command");
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
