/* ignis info MODEL: architecture, hyper-parameters, tensor table, memory. */
#include "cli.h"
#include "vision/vision.h"

#include "engine/kv_cache.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: ignis info [MODEL] [--ctx N] [--kv f16|f32] [--seq N] [--no-tensors] [--mmproj FILE]\n"
               "Shows the architecture, hyper-parameters, tensor table and the memory needed for\n"
               "the weights and for the KV cache at the given context (default 4096).\n");
}

static void human(double bytes, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
    snprintf(out, cap, "%.2f %s", bytes, u[i]);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *mmproj = NULL;
    long n_ctx = 4096, n_seq = 1;
    ig_kv_type kv = IG_KV_F16;
    int tensors = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mmproj") && i + 1 < argc) {
            mmproj = argv[++i];
        } else if (!strcmp(a, "--ctx")) {
            if (cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "--seq")) {
            if (cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 4096, &n_seq)) return 2;
        } else if (!strcmp(a, "--kv")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (!strcmp(v, "f16")) kv = IG_KV_F16;
            else if (!strcmp(v, "f32")) kv = IG_KV_F32;
            else {
                fprintf(stderr, "ignis info: --kv expects f16 or f32\n");
                return 2;
            }
        } else if (!strcmp(a, "--no-tensors")) {
            tensors = 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis info: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "ignis info: unexpected argument %s\n", a);
            return 2;
        }
    }
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 1;
    ig_model *m = cli_load_model(path, &mp);
    if (m && cli_attach_vision(m, path, mmproj, false)) {
        ig_model_free(m);
        return 1;
    }
    if (!m) return 1;
    const ig_hparams *hp = ig_model_hparams(m);
    printf("model:            %s\n", m->path);
    printf("format:           %s\n", ig_model_format(m));
    printf("architecture:     %s\n", hp->arch);
    if (hp->name[0]) printf("name:             %s\n", hp->name);
    printf("vocab:            %d (real tokens %d)\n", hp->n_vocab, hp->n_vocab_real);
    printf("embedding:        %d\n", hp->n_embd);
    printf("feed-forward:     %d\n", hp->n_ff);
    printf("layers:           %d\n", hp->n_layer);
    printf("heads:            %d query, %d key/value\n", hp->n_head, hp->n_head_kv);
    printf("head dim:         %d (value %d)\n", hp->head_dim, hp->head_dim_v);
    printf("context (train):  %d\n", hp->n_ctx_train);
    printf("sliding window:   %d\n", hp->sliding_window);
    printf("global layers:   ");
    int n_global = 0;
    for (int l = 0; l < hp->n_layer; l++)
        if (!m->layers[l].is_swa) printf(" %d", l), n_global++;
    printf("%s\n", n_global ? "" : " none");
    printf("rope theta:       %g global, %g local\n", hp->rope_base_global, hp->rope_base_local);
    printf("rope scaling:     linear x%g global, x%g local\n", hp->rope_scale_global,
           hp->rope_scale_local);
    printf("attention scale:  %.7g\n", hp->attn_scale);
    printf("rms eps:          %g\n", hp->rms_eps);
    printf("softcap:          final %g, attention %g\n", hp->final_logit_softcap,
           hp->attn_logit_softcap);
    printf("special tokens:   bos %d, eos %d, end_of_turn %d, pad %d\n", hp->bos_id, hp->eos_id,
           hp->eot_id, hp->pad_id);
    printf("tokenizer:        %s\n", ig_model_tokenizer(m) ? "yes" : "none");
    printf("chat template:    %s\n", ig_model_chat_template(m) ? "yes" : "none");
    if (m->vision) {
        const ig_vision *v = m->vision;
        printf("vision tower:     SigLIP (%s), image %dx%d, patch %d (%d patches), width %d, mlp %d, %d layers, %d heads\n",
               v->format, v->image_size, v->image_size, v->patch, v->side * v->side, v->width, v->n_ff, v->n_layer,
               v->n_head);
        printf("image tokens:     %d per image (pooled %dx%d), ids: image %d, start %d, end %d\n", v->n_tokens, v->pool,
               v->pool, (int)v->image_id, (int)v->boi_id, (int)v->eoi_id);
    } else {
        printf("vision tower:     none\n");
    }
    const ig_tensor_table *tt = ig_model_tensors(m);
    size_t total = 0, counts[64] = {0};
    int64_t params = 0;
    for (size_t i = 0; i < tt->count; i++) {
        total += tt->items[i].nbytes;
        params += ig_tensor_nelements(&tt->items[i]);
        if ((unsigned)tt->items[i].type < 64) counts[tt->items[i].type]++;
    }
    char b1[32], b2[32], b3[32];
    human((double)total, b1, sizeof b1);
    human((double)ig_model_weight_bytes(m), b2, sizeof b2);
    printf("parameters:       %.1f M\n", (double)params / 1e6);
    printf("weights:          %s in %zu tensors (%s read per decoded token)\n", b1, tt->count, b2);
    printf("tensor types:    ");
    for (int t = 0; t < 64; t++)
        if (counts[t]) printf(" %s x%zu", ig_dtype_name((ig_dtype)t), counts[t]);
    printf("\n");
    size_t kvb = ig_kv_cache_bytes(hp, kv, (int)n_seq, (int)n_ctx, 512);
    human((double)kvb, b3, sizeof b3);
    printf("KV cache:         %s at context %ld x %ld sequence(s), %s\n", b3, n_ctx, n_seq,
           kv == IG_KV_F16 ? "f16" : "f32");
    if (tensors) {
        printf("\n%-36s %-6s %s\n", "tensor", "type", "shape");
        for (size_t i = 0; i < tt->count; i++) {
            const ig_tensor *t = &tt->items[i];
            printf("%-36s %-6s [", t->name, ig_dtype_name(t->type));
            for (int d = 0; d < t->n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t->ne[d]);
            printf("]\n");
        }
    }
    ig_model_free(m);
    return 0;
}
