/* ignis logits MODEL --tokens 2,10,20: runs the forward pass on token ids and
 * writes float32 logits (the reference-comparison entry point), or, with
 * --check-invariance, checks that they do not depend on how the tokens are
 * split into steps. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis logits [MODEL] --tokens ID,ID,... [--all] [--incremental] [--kv f32|f16]\n"
            "                    [--out FILE] [-t N] [--backend cpu|vulkan] [--check-invariance]\n"
            "                    [--image FILE]... [--mmproj FILE] [--quant q8_0|q4_0|q4_k]\n"
            "Writes float32 little-endian logits of the last position (every position with\n"
            "--all, row-major positions x vocab) to FILE, or prints the top 10 per position.\n"
            "--incremental feeds one token per step through the KV cache.\n"
            "--check-invariance evaluates the tokens all at once, one per step, in chunks of 3\n"
            "and of 7, from a cached prefix, and in steps shared with another, unrelated\n"
            "sequence; prints the largest difference of any position's logits from the\n"
            "all-at-once run (expected: 0) and exits with status 1 when it is not 0.\n"
            "--image FILE (PNG or JPEG, repeatable): each run of image placeholder ids in\n"
            "--tokens takes the next image, in order (a vision-language model, or --mmproj).\n");
}

/* Feeds ids[0..n) to sequence 0 in steps of `chunk` tokens starting from
 * position p0 (the cache holds the positions before it); when n_other > 0,
 * each step also carries up to `chunk` tokens of `other` for sequence 1
 * (first in the step). The logits of every position from p0 go to
 * rows[pos]. */
static ig_status feed(ig_context *ctx, const int32_t *ids, int n, int p0, int chunk,
                      const int32_t *other, int n_other, float *rows, int n_vocab) {
    const int cap = 2 * chunk;
    int32_t *tok = malloc(sizeof *tok * (size_t)cap), *pos = malloc(sizeof *pos * (size_t)cap);
    int32_t *seq = malloc(sizeof *seq * (size_t)cap);
    uint8_t *want = malloc((size_t)cap);
    ig_status st = IG_OK;
    if (!tok || !pos || !seq || !want) st = IG_ERR_NO_MEMORY;
    for (int i = p0, j = 0; st == IG_OK && (i < n || j < n_other);) {
        int m = 0;
        for (int c = 0; c < chunk && j < n_other; c++, j++, m++) {
            tok[m] = other[j];
            pos[m] = j;
            seq[m] = 1;
            want[m] = 0;
        }
        const int first = m;
        for (int c = 0; c < chunk && i < n; c++, i++, m++) {
            tok[m] = ids[i];
            pos[m] = i;
            seq[m] = 0;
            want[m] = 1;
        }
        ig_batch b = {m, tok, pos, seq, want};
        st = ig_decode(ctx, &b);
        for (int r = 0; st == IG_OK && r < m - first; r++) {
            const float *l = ig_get_logits(ctx, r);
            if (!l) st = IG_ERR_INTERNAL;
            else memcpy(rows + (size_t)pos[first + r] * n_vocab, l, sizeof(float) * (size_t)n_vocab);
        }
    }
    free(tok);
    free(pos);
    free(seq);
    free(want);
    return st;
}

/* The largest |a - b| over n floats (infinity where exactly one is NaN or
 * they are infinities of different signs), and whether any bits differ. */
static double max_diff(const float *a, const float *b, size_t n, bool *bits) {
    double d = 0;
    *bits = memcmp(a, b, n * sizeof(float)) != 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        const double e = isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

static int check_invariance(ig_model *m, const int32_t *ids, int n, ig_kv_type kv) {
    const int n_vocab = ig_model_hparams(m)->n_vocab;
    /* The unrelated sequence: other ids, a little longer. */
    const int n_other = n + 5;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n_other;
    cp.n_seq = 2;
    cp.n_batch = n + n_other;
    cp.kv_type = kv;
    ig_context *ctx = NULL;
    const size_t sz = (size_t)n * (size_t)n_vocab;
    float *ref = malloc(sizeof(float) * sz), *got = malloc(sizeof(float) * sz);
    int32_t *other = malloc(sizeof *other * (size_t)n_other);
    int rc = 1;
    if (!ref || !got || !other) {
        fprintf(stderr, "ignis logits: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n_other; i++)
        other[i] = i == 0 ? ids[0] : (int32_t)(((int64_t)ids[(i * 5) % n] * 31 + 17 * i + 1) % n_vocab);
    ig_status st = ig_context_create(m, &cp, &ctx);
    if (st == IG_OK) st = feed(ctx, ids, n, 0, n, NULL, 0, ref, n_vocab);
    if (st != IG_OK) {
        fprintf(stderr, "ignis logits: %s\n", ig_last_error());
        goto done;
    }
    static const struct {
        const char *name;
        int chunk, prefix, mixed;
    } modes[] = {
        {"one per step", 1, 0, 0},
        {"chunks of 3", 3, 0, 0},
        {"chunks of 7", 7, 0, 0},
        {"cached prefix + rest", 0, 1, 0},
        {"mixed with another sequence, chunks of 4", 4, 0, 1},
        {"mixed with another sequence, one per step", 1, 0, 1},
    };
    double worst = 0;
    bool any_bits = false;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        ig_seq_clear(ctx, 0);
        ig_seq_clear(ctx, 1);
        int p0 = 0, chunk = modes[k].chunk;
        if (modes[k].prefix) {
            /* the first half all at once, the cache cut back to its first
             * third, then the rest in one step (as a prefix-cache hit does) */
            const int half = (n + 1) / 2;
            st = feed(ctx, ids, half, 0, half, NULL, 0, got, n_vocab);
            p0 = n / 3;
            if (st == IG_OK) st = ig_seq_truncate(ctx, 0, p0);
            if (st == IG_ERR_UNSUPPORTED) {
                printf("%-44s skipped (the sliding window cannot be cut back)\n", modes[k].name);
                continue;
            }
            chunk = n - p0;
        }
        if (st == IG_OK)
            st = feed(ctx, ids, n, p0, chunk, modes[k].mixed ? other : NULL, modes[k].mixed ? n_other : 0,
                      got, n_vocab);
        if (st != IG_OK) {
            fprintf(stderr, "ignis logits: %s: %s\n", modes[k].name, ig_last_error());
            goto done;
        }
        bool bits = false;
        const double d = max_diff(ref, got, sz, &bits);
        if (d > worst) worst = d;
        any_bits |= bits;
        printf("%-44s max |diff| %.9g%s\n", modes[k].name, d,
               !bits ? " (bit-identical)" : d == 0 ? " (only signs of zeros differ)" : "");
    }
    printf("largest difference: %.9g%s\n", worst,
           any_bits && worst == 0 ? " (but signs of zeros differ)" : "");
    rc = any_bits ? 1 : 0;
done:
    ig_context_free(ctx);
    free(ref);
    free(got);
    free(other);
    return rc;
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
    int all = 0, incremental = 0, check = 0;
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
        } else if (!strcmp(a, "--check-invariance")) {
            check = 1;
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
        } else if (!strcmp(a, "--quant")) {
            if (cli_parse_quant(i + 1 < argc ? argv[++i] : NULL, &mp.quant)) return 2;
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
    if (check) {
        const int crc = n_images ? 2 : check_invariance(m, ids, n, kv);
        if (n_images) fprintf(stderr, "ignis logits: --check-invariance takes no --image\n");
        ig_model_free(m);
        free(ids);
        return crc;
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
