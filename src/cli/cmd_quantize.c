/* ignis quantize IN OUT.gguf --type T: converts an F32/F16/BF16 GGUF, or a
 * Hugging Face checkpoint directory (config.json + safetensors), to F32,
 * F16, BF16, Q8_0, Q4_0, Q5_0 or Q5_1, or to llama-quantize's K-quant mixes
 * Q4_K_M, Q5_K_M and Q6_K (per-tensor types: src/quant/quant_mix.h; with
 * --pure every weight matrix takes the mix's K type, with the same
 * fallbacks for rows that are not whole 256-blocks).
 *
 * Every tensor of two or more dimensions whose rows are a whole number of
 * blocks of T becomes T (the token embedding included); the others (the
 * norms) are written as F32. From a GGUF all metadata is copied, except
 * general.file_type (set to T's llama.cpp file type) and
 * general.quantization_version (set to 2, as llama-quantize does for block
 * types). From a Hugging Face checkpoint the metadata is that of llama.cpp's
 * converter (src/model/hf_gguf.h) and the norm weights get the +1 of the
 * GGUF convention. The blocks are ig_quantize_row's, which for these types are
 * byte-exact with ggml's reference quantizers; llama-quantize gives the same
 * blocks with --pure (without it, it makes the output matrix Q6_K for Q4_0
 * and Q5_0/Q5_1).
 *
 * With --imatrix FILE (an importance matrix from `ignis imatrix` or
 * llama-imatrix, GGUF or legacy form), the matrices it has an entry for are
 * quantized with llama-quantize's importance-weighted searches
 * (ig_quantize_row_imatrix: Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), giving
 * llama-quantize --imatrix's blocks; the others as without. The file's
 * provenance goes into quantize.imatrix.* keys as llama-quantize writes them.
 *
 * Streaming: the input (GGUF or safetensors) is memory-mapped and converted
 * one row at a time.
 * The output goes to a temporary file next to OUT, is fsync'ed, then renamed
 * to OUT (a failure leaves no OUT and no temporary file); an existing OUT is
 * refused unless --force. */
#include "cli.h"

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/hf.h"
#include "model/hf_gguf.h"
#include "quant/imatrix.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis quantize IN OUT.gguf --type T [--pure] [--imatrix FILE] [--force]\n"
            "  T: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k_m (or q4_k), q5_k_m (or q5_k), q6_k\n"
            "Converts an F32, F16 or BF16 GGUF, or a Hugging Face checkpoint directory\n"
            "(config.json + safetensors; llama.cpp's gemma3 metadata, norms +1, the tokenizer\n"
            "from tokenizer.model or tokenizer.json): every weight matrix becomes the type, the norms stay F32,\n"
            "a GGUF's metadata (tokenizer, chat template) is kept. The K types\n"
            "follow llama-quantize's mixes (output/embedding Q6_K, more bits for some\n"
            "attn_v and ffn_down, fallbacks where rows are not whole 256-blocks); --pure\n"
            "gives every weight matrix the K type itself (fallbacks kept). The blocks are\n"
            "llama-quantize's. --imatrix FILE (from `ignis imatrix` or llama-imatrix)\n"
            "weights the quantization error of each column by its importance, as\n"
            "llama-quantize --imatrix does (Q4_0, Q5_0, Q5_1 and the K types). The output is\n"
            "written to a temporary file next to OUT and renamed onto OUT once complete; an\n"
            "existing OUT needs --force.\n");
}

static const struct {
    const char *name;
    ig_dtype type;
    uint32_t file_type; /* llama.cpp's enum llama_ftype */
    bool mix;           /* a K-quant mix: per-tensor types from quant_mix.h */
} types[] = {
    {"f32", IG_TYPE_F32, 0, false},
    {"f16", IG_TYPE_F16, 1, false},
    {"bf16", IG_TYPE_BF16, 32, false},
    {"q8_0", IG_TYPE_Q8_0, 7, false},
    {"q4_0", IG_TYPE_Q4_0, 2, false},
    {"q5_0", IG_TYPE_Q5_0, 8, false},
    {"q5_1", IG_TYPE_Q5_1, 9, false},
    {"q4_k_m", IG_TYPE_Q4_K, IG_FTYPE_Q4_K_M, true},
    {"q4_k", IG_TYPE_Q4_K, IG_FTYPE_Q4_K_M, true}, /* llama-quantize's alias */
    {"q5_k_m", IG_TYPE_Q5_K, IG_FTYPE_Q5_K_M, true},
    {"q5_k", IG_TYPE_Q5_K, IG_FTYPE_Q5_K_M, true},
    {"q6_k", IG_TYPE_Q6_K, IG_FTYPE_Q6_K, true},
};

static void row_to_f32(ig_dtype t, const unsigned char *src, float *dst, int64_t n) {
    if (t == IG_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)n);
    else ig_dequantize_row(t, src, dst, n);
}

/* Loads the importance matrix; its values must be finite, as
 * llama-quantize requires. */
static ig_status load_imatrix(const char *path, ig_imatrix **out) {
    ig_status st = ig_imatrix_load(path, out);
    if (st != IG_OK) {
        if (*ig_last_error()) fprintf(stderr, "ignis quantize: cannot read the imatrix: %s\n", ig_last_error());
        else fprintf(stderr, "ignis quantize: cannot read the imatrix %s: %s\n", path, ig_status_str(st));
        return st;
    }
    for (size_t i = 0; i < (*out)->n_entries; i++) {
        const ig_imatrix_entry *e = &(*out)->entries[i];
        for (int64_t j = 0; j < e->n; j++)
            if (!isfinite((float)e->sum2[j])) {
                fprintf(stderr, "ignis quantize: the imatrix %s has a non-finite value for %s\n", path, e->name);
                ig_imatrix_free(*out);
                *out = NULL;
                return IG_ERR_FORMAT;
            }
    }
    fprintf(stderr, "ignis quantize: %zu importance matrix entries from %s (%u chunks)\n", (*out)->n_entries, path,
            (*out)->chunk_count);
    return IG_OK;
}

/* llama-quantize's record of the imatrix: its path, first dataset, entry
 * and chunk counts (strings cut to 127 bytes as there). */
static ig_status add_imatrix_keys(gguf_writer *w, const ig_imatrix *im, const char *path) {
    ig_status st = gguf_writer_add_strn(w, "quantize.imatrix.file", path, strnlen(path, 127));
    if (st == IG_OK && im->n_datasets)
        st = gguf_writer_add_strn(w, "quantize.imatrix.dataset", im->datasets[0], strnlen(im->datasets[0], 127));
    if (st == IG_OK)
        st = gguf_writer_add_u32(w, "quantize.imatrix.entries_count",
                                 im->n_entries > UINT32_MAX ? UINT32_MAX : (uint32_t)im->n_entries);
    if (st == IG_OK && im->chunk_count > 0)
        st = gguf_writer_add_u32(w, "quantize.imatrix.chunks_count", im->chunk_count);
    return st;
}

/* The importance of t's columns into qw (t->ne[0] floats): 1 when the
 * imatrix has them, 0 when it has no entry for t, -1 (message printed) when
 * its entry has another width -- except for the token embedding, which
 * llama-quantize then quantizes without. */
static int tensor_importance(const ig_imatrix *im, const ig_tensor *t, float *qw) {
    const ig_imatrix_entry *e = ig_imatrix_find(im, t->name);
    if (!e) return 0;
    if (e->n != t->ne[0] || t->ne[2] != 1 || t->ne[3] != 1) {
        if (!strcmp(t->name, "token_embd.weight")) return 0;
        fprintf(stderr, "ignis quantize: the imatrix has %lld values for %s, which has %lld columns\n",
                (long long)e->n, t->name, (long long)t->ne[0]);
        return -1;
    }
    ig_imatrix_weights(im, e, qw);
    return 1;
}

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type_arg = NULL, *imatrix_path = NULL;
    int force = 0, pure = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--type") && i + 1 < argc) {
            type_arg = argv[++i];
        } else if (!strcmp(a, "--imatrix") && i + 1 < argc) {
            imatrix_path = argv[++i];
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (!strcmp(a, "--pure")) {
            pure = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "ignis quantize: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!in) {
            in = a;
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "ignis quantize: unexpected argument %s\n", a);
            return 2;
        }
    }
    if (!in || !out || !type_arg) {
        usage(stderr);
        return 2;
    }
    int ti = -1;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (!strcasecmp(type_arg, types[k].name)) ti = (int)k;
    if (ti < 0) {
        fprintf(stderr, "ignis quantize: --type expects f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k_m, q4_k, "
                "q5_k_m, q5_k or q6_k, got '%s'\n",
                type_arg);
        return 2;
    }
    const ig_dtype want = types[ti].type;
    if (!force && access(out, F_OK) == 0) {
        fprintf(stderr, "ignis quantize: %s exists (--force replaces it)\n", out);
        return 1;
    }

    int rc = 1;
    gguf_file *g = NULL;
    hf_model *hf = NULL;
    gguf_writer *w = NULL;
    cli_output o = {0};
    float *row = NULL;
    unsigned char *qrow = NULL;
    ig_dtype *out_type = NULL;
    ig_imatrix *im = NULL;
    float *qw = NULL;
    ig_status st;
    if (imatrix_path && (st = load_imatrix(imatrix_path, &im)) != IG_OK) goto done;
    st = ig_path_is_dir(in) ? hf_open(in, &hf) : gguf_open(in, &g);
    if (st != IG_OK) {
        fprintf(stderr, "ignis quantize: cannot read %s: %s\n", in,
                *ig_last_error() ? ig_last_error() : ig_status_str(st));
        goto done;
    }
    const ig_tensor_table *tt = hf ? &hf->tensors : &g->tensors;
    out_type = calloc(tt->count ? tt->count : 1, sizeof *out_type);
    if (!out_type) goto oom;
    int64_t max_row = 1;
    for (size_t i = 0; i < tt->count; i++) {
        const ig_tensor *t = &tt->items[i];
        if (t->type != IG_TYPE_F32 && t->type != IG_TYPE_F16 && t->type != IG_TYPE_BF16) {
            fprintf(stderr, "ignis quantize: %s is %s; the input must be F32, F16 or BF16\n",
                    t->name, ig_dtype_name(t->type));
            goto done;
        }
        if (t->ne[0] > max_row) max_row = t->ne[0];
    }
    char mix_err[256];
    if (!ig_quant_plan(tt, hf ? hf->hparams.n_layer : ig_quant_gguf_block_count(g), want,
                       types[ti].mix ? types[ti].file_type : 0, pure, out_type, mix_err, sizeof mix_err)) {
        fprintf(stderr, "ignis quantize: %s\n", mix_err);
        goto done;
    }
    if (max_row > ((int64_t)1 << 28)) {
        fprintf(stderr, "ignis quantize: rows of %lld elements are too long\n", (long long)max_row);
        goto done;
    }

    if ((st = gguf_writer_create(!g || g->alignment == 32 ? 0 : g->alignment, &w)) != IG_OK) goto fail;
    if (hf) st = hf_gguf_add_metadata(hf, in, w);
    for (size_t i = 0; g && i < g->n_kv && st == IG_OK; i++) {
        const char *k = g->kv[i].key;
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
            !strcmp(k, "general.alignment"))
            continue;
        st = gguf_writer_add_kv(w, &g->kv[i]);
    }
    if (st == IG_OK) st = gguf_writer_add_u32(w, "general.file_type", types[ti].file_type);
    if (st == IG_OK && (ig_dtype_block_elems(want) > 1 || hf)) /* llama.cpp's converter: always */
        st = gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (st == IG_OK && im) st = add_imatrix_keys(w, im, imatrix_path);
    for (size_t i = 0; i < tt->count && st == IG_OK; i++) {
        const ig_tensor *t = &tt->items[i];
        st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, out_type[i]);
    }
    if (st != IG_OK) goto fail;

    row = malloc(sizeof *row * (size_t)max_row);
    qrow = malloc(sizeof(float) * (size_t)max_row);
    qw = malloc(sizeof *qw * (size_t)max_row);
    if (!row || !qrow || !qw) goto oom;
    if (cli_output_open(&o, out) != 0) {
        fprintf(stderr, "ignis quantize: cannot create %s: %s\n", out, strerror(errno));
        goto done;
    }
    if ((st = gguf_writer_begin(w, o.fp)) != IG_OK) goto fail;
    const int tty = isatty(fileno(stderr));
    for (size_t i = 0; i < tt->count; i++) {
        const ig_tensor *t = &tt->items[i];
        int64_t n = t->ne[0], rows = ig_tensor_nelements(t) / n;
        size_t in_rb, out_rb;
        if (!ig_dtype_row_bytes(t->type, n, &in_rb) || !ig_dtype_row_bytes(out_type[i], n, &out_rb) ||
            (uint64_t)in_rb * (uint64_t)rows > t->nbytes) {
            fprintf(stderr, "ignis quantize: %s: inconsistent size\n", t->name);
            goto done;
        }
        const unsigned char *src = t->data;
        const float *w_imp = NULL;
        if (im && ig_dtype_block_elems(out_type[i]) > 1) {
            const int r2 = tensor_importance(im, t, qw);
            if (r2 < 0) goto done;
            if (r2 > 0) w_imp = qw;
        }
        const bool plus_one = hf && hf_gguf_is_norm(t->name); /* Gemma's norms: 1 + w in GGUF */
        for (int64_t r = 0; r < rows; r++) {
            row_to_f32(t->type, src + (size_t)r * in_rb, row, n);
            if (plus_one)
                for (int64_t e = 0; e < n; e++) row[e] += 1.0f;
            ig_quantize_row_imatrix(out_type[i], row, qrow, n, w_imp);
            if ((st = gguf_writer_write(w, qrow, out_rb)) != IG_OK) goto fail;
        }
        if (tty)
            fprintf(stderr, "\r[%zu/%zu] %-40s %s -> %s", i + 1, tt->count, t->name,
                    ig_dtype_name(t->type), ig_dtype_name(out_type[i]));
    }
    if (tty) fprintf(stderr, "\n");
    if ((st = gguf_writer_finish(w)) != IG_OK) goto fail;
    if (cli_output_commit(&o) != 0) {
        fprintf(stderr, "ignis quantize: cannot write %s: %s\n", out, strerror(errno));
        goto done;
    }
    printf("%s: %zu tensors, %s\n", out, tt->count,
           types[ti].mix ? types[ti].name : ig_dtype_name(want));
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "ignis quantize: out of memory\n");
    goto done;
fail:
    fprintf(stderr, "ignis quantize: %s\n", *ig_last_error() ? ig_last_error() : ig_status_str(st));
done:
    if (o.fp) cli_output_abort(&o);
    gguf_writer_free(w);
    gguf_close(g);
    hf_close(hf);
    free(row);
    free(qrow);
    free(qw);
    free(out_type);
    ig_imatrix_free(im);
    return rc;
}
