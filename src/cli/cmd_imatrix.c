/* ignis imatrix [MODEL] -f TEXT -o FILE: the importance matrix of a model on
 * a text, as llama.cpp's llama-imatrix computes it: for every weight matrix
 * of the layers (blk.*), the per-input-channel sum of the squares of the
 * activations its matmul reads (the normed hidden state for q/k/v and
 * gate/up, the attention output for attn_output, the GEGLU product for
 * ffn_down), and the number of tokens.
 *
 * The text is tokenized whole (with BOS) and cut into chunks of -c tokens
 * (default 512; the last partial one dropped, --skip-chunks N leading ones
 * skipped); each chunk starts with BOS (its first token replaced) and is
 * evaluated in one step from an empty cache on the CPU backend, whose
 * matmul observer (ig_context_params) hands every matmul input to the
 * collector. Like llama-imatrix, steps of fewer than 16 tokens and the
 * output projection are not counted.
 *
 * The file is llama.cpp's GGUF imatrix (src/quant/imatrix.h), written to a
 * temporary file and renamed onto FILE once complete; an existing FILE
 * needs --force. */
#include "cli.h"

#include "core/util.h"
#include "quant/imatrix.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis imatrix [MODEL] -f TEXT -o FILE [-c N] [--chunks N] [--skip-chunks N]\n"
            "                     [-t N] [--force]\n"
            "Importance matrix of MODEL on TEXT in llama.cpp's imatrix format (GGUF), for\n"
            "`ignis quantize --imatrix FILE` (or llama-quantize): per weight matrix of the\n"
            "layers, the sum over the tokens of the square of each input channel of its\n"
            "matmul, and the token count.\n"
            "  -f TEXT           UTF-8 text file\n"
            "  -o FILE           output file (an existing one needs --force)\n"
            "  -c, --ctx N       tokens per chunk (default 512), each from an empty cache\n"
            "  --chunks N        use at most N chunks (default: all)\n"
            "  --skip-chunks N   skip the first N chunks of the text\n"
            "  -t N              threads\n");
}

typedef struct collector {
    ig_imatrix *im;
    ig_status st; /* the first failure */
} collector;

/* The matmul observer: llama-imatrix's choice of inputs. */
static void observe(void *user, const char *weight, const float *x, int rows, int width) {
    collector *c = user;
    if (c->st != IG_OK || rows < 16 || strncmp(weight, "blk.", 4) != 0) return;
    c->st = ig_imatrix_add(c->im, weight, x, rows, width);
}

int cmd_imatrix(int argc, char **argv) {
    const char *path = NULL, *text_path = NULL, *out_path = NULL;
    long n_ctx = 512, chunks = 0, skip = 0, threads = 0;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!v) goto missing;
            text_path = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) goto missing;
            out_path = argv[++i];
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (cli_parse_int(a, v, 16, 1 << 16, &n_ctx)) return 2;
            i++;
        } else if (!strcmp(a, "--chunks")) {
            if (cli_parse_int(a, v, 1, 1 << 24, &chunks)) return 2;
            i++;
        } else if (!strcmp(a, "--skip-chunks")) {
            if (cli_parse_int(a, v, 0, 1 << 24, &skip)) return 2;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(a, v, 1, 512, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis imatrix: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "ignis imatrix: unexpected argument %s\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "ignis imatrix: %s needs a value\n", a);
        return 2;
    }
    if (!text_path || !out_path) {
        fprintf(stderr, "ignis imatrix: -f TEXT and -o FILE are required\n");
        usage(stderr);
        return 2;
    }
    if (!force && access(out_path, F_OK) == 0) {
        fprintf(stderr, "ignis imatrix: %s exists (--force replaces it)\n", out_path);
        return 1;
    }

    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL, *pos = NULL, *seq = NULL;
    size_t n_ids = 0;
    ig_model *m = NULL;
    ig_context *ctx = NULL;
    collector col = {0};
    cli_output o = {0};

    ig_model_params mp = ig_model_default_params();
    mp.n_threads = (int)threads;
    mp.backend = IG_BACKEND_CPU; /* the observer is the CPU backend's */
    m = cli_load_model(path, &mp);
    if (!m) goto done;
    const ig_hparams *hp = ig_model_hparams(m);
    const ig_tokenizer *tok = ig_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "ignis imatrix: the model carries no tokenizer\n");
        goto done;
    }
    size_t len = 0;
    if (!(text = cli_read_text(text_path, &len))) {
        fprintf(stderr, "ignis imatrix: cannot read %s\n", text_path);
        goto done;
    }
    ig_status st = ig_tokenize(tok, text, len, true, false, &ids, &n_ids);
    if (st != IG_OK) {
        fprintf(stderr, "ignis imatrix: cannot tokenize %s: %s\n", text_path, ig_last_error());
        goto done;
    }
    const bool bos = hp->bos_id >= 0 && n_ids > 0 && ids[0] == hp->bos_id;
    const long avail = (long)(n_ids / (size_t)n_ctx) - skip;
    if (avail < 1) {
        fprintf(stderr, "ignis imatrix: %s has %zu tokens: no whole chunk of %ld after skipping %ld\n",
                text_path, n_ids, n_ctx, skip);
        goto done;
    }
    const long n_chunks = chunks && chunks < avail ? chunks : avail;

    if (!(col.im = ig_imatrix_new()) || ig_imatrix_add_dataset(col.im, text_path) != IG_OK) goto oom;
    pos = malloc(sizeof *pos * (size_t)n_ctx);
    seq = calloc((size_t)n_ctx, sizeof *seq);
    if (!pos || !seq) goto oom;
    for (long i = 0; i < n_ctx; i++) pos[i] = (int32_t)i;

    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = (int)n_ctx;
    cp.n_batch = (int)n_ctx;
    cp.matmul_observer = observe;
    cp.matmul_observer_user = &col;
    if ((st = ig_context_create(m, &cp, &ctx)) != IG_OK) {
        fprintf(stderr, "ignis imatrix: %s\n", ig_last_error());
        goto done;
    }
    fprintf(stderr, "ignis imatrix: %zu tokens, %ld chunks of %ld (from chunk %ld)\n", n_ids, n_chunks, n_ctx,
            skip);
    const int tty = isatty(fileno(stderr));
    const double t0 = ig_time_now();
    for (long c = 0; c < n_chunks; c++) {
        int32_t *w = ids + (size_t)(skip + c) * (size_t)n_ctx;
        const int32_t first = w[0];
        if (bos) w[0] = hp->bos_id;
        ig_seq_clear(ctx, 0);
        const ig_batch bt = {(int)n_ctx, w, pos, seq, NULL};
        st = ig_decode(ctx, &bt);
        w[0] = first;
        if (st != IG_OK || col.st != IG_OK) {
            fprintf(stderr, "ignis imatrix: chunk %ld: %s\n", c + 1,
                    *ig_last_error() ? ig_last_error() : ig_status_str(st != IG_OK ? st : col.st));
            goto done;
        }
        if (tty) fprintf(stderr, "\r[%ld/%ld] %.1f s", c + 1, n_chunks, ig_time_now() - t0);
    }
    if (tty) fprintf(stderr, "\n");
    col.im->chunk_count = (uint32_t)n_chunks;
    col.im->chunk_size = (uint32_t)n_ctx;

    if (cli_output_open(&o, out_path) != 0) {
        fprintf(stderr, "ignis imatrix: cannot create %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    if ((st = ig_imatrix_write(col.im, o.fp)) != IG_OK) {
        fprintf(stderr, "ignis imatrix: %s\n", *ig_last_error() ? ig_last_error() : ig_status_str(st));
        goto done;
    }
    if (cli_output_commit(&o) != 0) {
        fprintf(stderr, "ignis imatrix: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    printf("%s: %zu entries, %ld chunks of %ld tokens (%.1f s)\n", out_path, col.im->n_entries, n_chunks, n_ctx,
           ig_time_now() - t0);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "ignis imatrix: out of memory\n");
done:
    if (o.fp) cli_output_abort(&o);
    ig_context_free(ctx);
    ig_model_free(m);
    ig_imatrix_free(col.im);
    free(ids);
    free(text);
    free(pos);
    free(seq);
    return rc;
}
