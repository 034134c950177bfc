/* ignis logits MODEL --tokens 2,10,20: runs the forward pass on token ids and
 * writes float32 logits (the reference-comparison entry point). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis logits [MODEL] --tokens ID,ID,... [--all] [--incremental] [--kv f32|f16]\n"
            "                    [--out FILE] [-t N] [--backend cpu|vulkan] [--image FILE]... [--mmproj FILE]\n"
            "Writes float32 little-endian logits of the last position (every position with\n"
            "--all, row-major positions x vocab) to FILE, or prints the top 10 per position.\n"
            "--incremental feeds one token per step through the KV cache.\n"
            "--image FILE (PNG or JPEG, repeatable): each run of image placeholder ids in\n"
            "--tokens takes the next image, in order (a vision-language model, or --mmproj).\n");
}

static int parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16, len = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) return 1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "ignis logits: --tokens expects comma-separated ids, got '%s'\n", s);
            free(ids);
            return 1;
        }
        if (len == cap) {
            if (cap > (1 << 24)) {
                free(ids);
                return 1;
            }
            int32_t *nid = realloc(ids, sizeof *ids * (size_t)cap * 2);
            if (!nid) {
                free(ids);
                return 1;
            }
            ids = nid;
            cap *= 2;
        }
        ids[len++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) {
            fprintf(stderr, "ignis logits: --tokens expects comma-separated ids, got '%s'\n", s);
            free(ids);
            return 1;
        }
    }
    if (len == 0) {
        fprintf(stderr, "ignis logits: --tokens is empty\n");
        free(ids);
        return 1;
    }
    *out = ids;
    *n = len;
    return 0;
}

static void print_top(const float *l, int n_vocab, int pos) {
    int top[10];
    int k = n_vocab < 10 ? n_vocab : 10;
    for (int i = 0; i < k; i++) top[i] = -1;
    for (int v = 0; v < n_vocab; v++) {
        for (int i = 0; i < k; i++) {
            if (top[i] < 0 || l[v] > l[top[i]]) {
                for (int j = k - 1; j > i; j--) top[j] = top[j - 1];
                top[i] = v;
                break;
            }
        }
    }
    printf("position %d:", pos);
    for (int i = 0; i < k; i++) printf(" %d (%.4f)", top[i], l[top[i]]);
    printf("\n");
}

int cmd_logits(int argc, char **argv) {
    const char *path = NULL, *tokens_arg = NULL, *out_path = NULL, *mmproj = NULL;
    char *images[CLI_MAX_IMAGES];
    int n_images = 0;
    float **embd = NULL;
    int all = 0, incremental = 0;
    long threads = 0;
    ig_kv_type kv = IG_KV_F32;
    ig_model_params mp = ig_model_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokens") && i + 1 < argc) {
            tokens_arg = argv[++i];
        } else if (!strcmp(a, "--image") && i + 1 < argc) {
            if (n_images == CLI_MAX_IMAGES) {
                fprintf(stderr, "ignis logits: at most %d images\n", CLI_MAX_IMAGES);
                return 2;
            }
            images[n_images++] = argv[++i];
        } else if (!strcmp(a, "--mmproj") && i + 1 < argc) {
            mmproj = argv[++i];
        } else if (!strcmp(a, "--out") && i + 1 < argc) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--all")) {
            all = 1;
        } else if (!strcmp(a, "--incremental")) {
            incremental = 1;
        } else if (!strcmp(a, "--kv") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "f16")) kv = IG_KV_F16;
            else if (!strcmp(v, "f32")) kv = IG_KV_F32;
            else {
                fprintf(stderr, "ignis logits: --kv expects f16 or f32\n");
                return 2;
            }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 512, &threads)) return 2;
        } else if (!strcmp(a, "--backend")) {
            if (cli_parse_backend(i + 1 < argc ? argv[++i] : NULL, &mp.backend)) return 2;
        } else if (!strcmp(a, "--device")) {
            long d;
            if (cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 0, 64, &d)) return 2;
            mp.device = (int)d;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis logits: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "ignis logits: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (!tokens_arg) {
        fprintf(stderr, "ignis logits: --tokens is required\n");
        usage(stderr);
        return 2;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (parse_ids(tokens_arg, &ids, &n)) return 2;
    mp.n_threads = (int)threads;
    ig_model *m = cli_load_model(path, &mp);
    if (!m) {
        free(ids);
        return 1;
    }
    if ((n_images || mmproj) && cli_attach_vision(m, path, mmproj, n_images > 0)) {
        ig_model_free(m);
        free(ids);
        return 1;
    }
    if (!n_images && ig_model_has_vision(m)) {
        int runs = 0;
        for (int i = 0; i < n; i++)
            runs += ids[i] == ig_model_image_token_id(m) && (i == 0 || ids[i - 1] != ids[i]);
        if (runs) {
            fprintf(stderr, "ignis logits: 0 images given but --tokens has places for %d (--image FILE)\n", runs);
            ig_model_free(m);
            free(ids);
            return 2;
        }
    }
    if (n_images && incremental) {
        fprintf(stderr, "ignis logits: --image and --incremental do not go together (an image is one block)\n");
        ig_model_free(m);
        free(ids);
        return 2;
    }
    if (n_images && cli_embed_images(m, images, n_images, (int)threads, &embd) != IG_OK) {
        fprintf(stderr, "ignis logits: %s\n", ig_last_error());
        ig_model_free(m);
        free(ids);
        return 1;
    }
    const int n_vocab = ig_model_hparams(m)->n_vocab;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n;
    cp.n_batch = incremental ? 1 : n;
    cp.kv_type = kv;
    ig_context *ctx = NULL;
    int rc = 1;
    float *rows = NULL;
    int32_t *pos = malloc(sizeof *pos * (size_t)n), *seq = calloc((size_t)n, sizeof *seq);
    uint8_t *want = calloc((size_t)n, 1);
    int n_rows = all ? n : 1;
    rows = malloc(sizeof(float) * (size_t)n_rows * (size_t)n_vocab);
    if (!pos || !seq || !want || !rows) {
        fprintf(stderr, "ignis logits: out of memory\n");
        goto done;
    }
    ig_status st = ig_context_create(m, &cp, &ctx);
    if (st != IG_OK) {
        fprintf(stderr, "ignis logits: %s\n", ig_last_error());
        goto done;
    }
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        want[i] = all || i == n - 1;
    }
    if (incremental) {
        int r = 0;
        for (int i = 0; i < n; i++) {
            ig_batch b = {1, ids + i, pos + i, seq + i, want + i};
            st = ig_decode(ctx, &b);
            if (st != IG_OK) break;
            if (want[i]) memcpy(rows + (size_t)r++ * n_vocab, ig_get_logits(ctx, 0), sizeof(float) * n_vocab);
        }
    } else if (n_images && !all) {
        st = ig_decode_prompt_images(ctx, 0, ids, n, (const float *const *)embd, n_images);
        if (st == IG_OK) memcpy(rows, ig_get_logits(ctx, 0), sizeof(float) * n_vocab);
    } else {
        ig_batch b = {n, ids, pos, seq, want};
        const float **tok_embd = NULL;
        int32_t *img = NULL;
        if (n_images) { /* every position: one batch, the images placed by hand */
            tok_embd = calloc((size_t)n, sizeof *tok_embd);
            img = calloc((size_t)n, sizeof *img);
            if (!tok_embd || !img) {
                free(tok_embd);
                free(img);
                fprintf(stderr, "ignis logits: out of memory\n");
                goto done;
            }
            const int32_t pid = ig_model_image_token_id(m);
            const int T = ig_model_image_tokens(m), E = ig_model_hparams(m)->n_embd;
            int k = 0;
            for (int i = 0; i < n && st == IG_OK;) {
                if (ids[i] != pid) {
                    i++;
                    continue;
                }
                int j = i;
                while (j < n && ids[j] == pid) j++;
                if (j - i != T || k >= n_images) {
                    st = IG_ERR_INVALID_ARG;
                    fprintf(stderr, "ignis logits: a run of %d image placeholders at %d does not match an image "
                                    "(%d tokens each, %d given)\n", j - i, i, T, n_images);
                    break;
                }
                for (int t = i; t < j; t++) {
                    tok_embd[t] = embd[k] + (size_t)(t - i) * E;
                    img[t] = k + 1;
                }
                k++;
                i = j;
            }
            if (st == IG_OK && k != n_images) {
                st = IG_ERR_INVALID_ARG;
                fprintf(stderr, "ignis logits: %d images given but --tokens has places for %d\n", n_images, k);
            }
            if (st != IG_OK) {
                free(tok_embd);
                free(img);
                goto done;
            }
        }
        const ig_batch_images bi = {.embd = tok_embd, .image = img};
        st = ig_decode_images(ctx, &b, n_images ? &bi : NULL);
        free(tok_embd);
        free(img);
        for (int r = 0; st == IG_OK && r < n_rows; r++)
            memcpy(rows + (size_t)r * n_vocab, ig_get_logits(ctx, r), sizeof(float) * n_vocab);
    }
    if (st != IG_OK) {
        fprintf(stderr, "ignis logits: %s\n", ig_last_error());
        goto done;
    }
    if (out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(rows, sizeof(float) * (size_t)n_vocab, (size_t)n_rows, f) != (size_t)n_rows) {
            fprintf(stderr, "ignis logits: cannot write %s\n", out_path);
            if (f) fclose(f);
            goto done;
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "ignis logits: cannot write %s\n", out_path);
            goto done;
        }
    } else {
        for (int r = 0; r < n_rows; r++) print_top(rows + (size_t)r * n_vocab, n_vocab, all ? r : n - 1);
    }
    rc = 0;
done:
    ig_context_free(ctx);
    ig_model_free(m);
    free(ids);
    free(pos);
    free(seq);
    free(want);
    free(rows);
    cli_free_images(embd, n_images);
    return rc;
}
