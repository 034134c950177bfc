/* ignis synth: writes a random-weight GGUF at the shapes of a Gemma 3 size
 * (src/model/synth.h), for benchmarks and tests. */
#include "cli.h"

#include "model/synth.h"
#include "model/synth_mmproj.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ignis synth --size 270m|1b|4b|12b|27b --type f16|q8_0|q4_k_m -o OUT.gguf\n"
            "                   [--vocab-from MODEL.gguf] [--seed S] [--layers N] [--exact]\n"
            "                   [--quiet] [--mmproj OUT.gguf [--mmproj-type f16|q8_0]\n"
            "                   [--vision-layers N] [--image-size S]]\n"
            "Writes a GGUF with random weights at the real shapes of a Gemma 3 size, laid out\n"
            "as llama.cpp writes it (loads in ignis and llama.cpp). For benchmarks: the\n"
            "model's output is noise.\n"
            "  --vocab-from M  copy the tokenizer.* metadata of M (default: a generated\n"
            "                  vocabulary of 262144 pieces with Gemma's special ids)\n"
            "  --seed S        PRNG seed (default 0); equal seeds give identical files\n"
            "  --layers N      override the layer count (small files with real widths)\n"
            "  --exact         quantize drawn floats with the reference quantizer instead of\n"
            "                  drawing random quantized blocks (slower)\n"
            "  --quiet         no progress output\n"
            "  --mmproj F      also write a vision tower (llama.cpp's mmproj layout) at the\n"
            "                  released Gemma 3 shapes (image 896, patch 14, 27 layers, width\n"
            "                  1152, MLP 4304, 16 heads, 256 tokens per image), projecting to\n"
            "                  the text model's width; needs --vocab-from a Gemma 3 GGUF (the\n"
            "                  image tokens; <image_soft_token> is added when it lacks it)\n"
            "  --mmproj-type T the tower's matrices: f16 (default) or q8_0\n"
            "  --vision-layers N, --image-size S\n"
            "                  smaller towers (S a multiple of 56) for tests\n");
}

static void human(double bytes, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
    snprintf(out, cap, "%.2f %s", bytes, u[i]);
}

typedef struct progress {
    double t0, last;
    int last_decile;
    bool tty;
} progress;

static void on_progress(void *user, uint64_t done, uint64_t total) {
    progress *p = user;
    double now = ig_time_now();
    if (p->tty) {
        if (now - p->last < 0.25 && done < total) return;
        p->last = now;
        char a[32], b[32];
        human((double)done, a, sizeof a);
        human((double)total, b, sizeof b);
        double dt = now - p->t0;
        fprintf(stderr, "\rignis synth: %5.1f%%  %s / %s  %.0f MiB/s   ",
                total ? 100.0 * (double)done / (double)total : 100.0, a, b,
                dt > 0 ? (double)done / dt / (1 << 20) : 0.0);
        if (done >= total) fputc('\n', stderr);
    } else {
        int decile = total ? (int)(10 * done / total) : 10;
        if (decile <= p->last_decile) return;
        p->last_decile = decile;
        fprintf(stderr, "ignis synth: %d%% (%.1f s)\n", decile * 10, now - p->t0);
    }
}

static int parse_seed(const char *s, uint64_t *out) {
    if (!s) {
        fprintf(stderr, "ignis synth: --seed needs a value\n");
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || s[0] == '+' || s[0] == ' ') {
        fprintf(stderr, "ignis synth: --seed expects an integer in [0, 2^64), got '%s'\n", s);
        return 2;
    }
    *out = (uint64_t)v;
    return 0;
}

/* Directory part of path ("." when none), into buf. */
static void dir_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, cap, ".");
    else if (slash == path) snprintf(buf, cap, "/");
    else snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* The vision tower to path, after the text model. */
static int write_mmproj(const char *path, const ig_synth_mmproj_params *vp, bool quiet) {
    uint64_t size = 0;
    if (ig_synth_mmproj_check(vp, &size) != IG_OK) {
        fprintf(stderr, "ignis synth: %s\n", ig_last_error());
        return 2;
    }
    cli_output o;
    if (cli_output_open(&o, path) != 0) {
        fprintf(stderr, "ignis synth: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    char hs[32];
    human((double)size, hs, sizeof hs);
    if (!quiet)
        fprintf(stderr, "ignis synth: vision tower, %d layers, width %d, image %d, %s -> %s (%s)\n", vp->n_layer,
                vp->width, vp->image_size, vp->type == IG_TYPE_Q8_0 ? "q8_0" : "f16", path, hs);
    const double t0 = ig_time_now();
    ig_status st = ig_synth_mmproj_write(vp, o.fp);
    if (st == IG_OK) {
        errno = 0;
        if (cli_output_commit(&o) != 0)
            st = ig_fail(IG_ERR_IO, "writing %s: %s", path, errno ? strerror(errno) : "I/O error");
    } else {
        cli_output_abort(&o);
    }
    if (st != IG_OK) {
        fprintf(stderr, "ignis synth: %s\n", ig_last_error());
        return 1;
    }
    fprintf(stderr, "ignis synth: wrote %s: %llu bytes (%s) in %.1f s\n", path, (unsigned long long)size, hs,
            ig_time_now() - t0);
    return 0;
}

int cmd_synth(int argc, char **argv) {
    const char *size = NULL, *type = NULL, *out = NULL, *vocab = NULL, *mmproj = NULL, *mmproj_type = "f16";
    uint64_t seed = 0;
    long layers = 0, vision_layers = 0, image_size = 0;
    bool exact = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--size") || !strcmp(a, "--type") || !strcmp(a, "-o") ||
                   !strcmp(a, "--output") || !strcmp(a, "--vocab-from") || !strcmp(a, "--mmproj") ||
                   !strcmp(a, "--mmproj-type")) {
            if (!v || !*v) {
                fprintf(stderr, "ignis synth: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--size")) size = v;
            else if (!strcmp(a, "--type")) type = v;
            else if (!strcmp(a, "--vocab-from")) vocab = v;
            else if (!strcmp(a, "--mmproj")) mmproj = v;
            else if (!strcmp(a, "--mmproj-type")) mmproj_type = v;
            else out = v;
        } else if (!strcmp(a, "--seed")) {
            if (parse_seed(v, &seed)) return 2;
            i++;
        } else if (!strcmp(a, "--layers")) {
            if (cli_parse_int(a, v, 1, IG_MAX_LAYERS, &layers)) return 2;
            i++;
        } else if (!strcmp(a, "--vision-layers")) {
            if (cli_parse_int(a, v, 1, 256, &vision_layers)) return 2;
            i++;
        } else if (!strcmp(a, "--image-size")) {
            if (cli_parse_int(a, v, 56, 8192, &image_size)) return 2;
            i++;
        } else if (!strcmp(a, "--exact")) {
            exact = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else {
            fprintf(stderr, "ignis synth: unexpected argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!size || !type || !out) {
        fprintf(stderr, "ignis synth: --size, --type and -o are required\n");
        usage(stderr);
        return 2;
    }
    ig_synth_params p = {0};
    p.size = size;
    if (!ig_synth_find_config(size)) {
        fprintf(stderr, "ignis synth: unknown --size '%s' (270m, 1b, 4b, 12b or 27b)\n", size);
        return 2;
    }
    if (!ig_synth_parse_ftype(type, &p.ftype)) {
        fprintf(stderr, "ignis synth: unknown --type '%s' (f16, q8_0 or q4_k_m)\n", type);
        return 2;
    }
    ig_synth_mmproj_params vp = ig_synth_mmproj_released(ig_synth_find_config(size)->n_embd);
    if (strcmp(mmproj_type, "f16") && strcmp(mmproj_type, "q8_0")) {
        fprintf(stderr, "ignis synth: unknown --mmproj-type '%s' (f16 or q8_0)\n", mmproj_type);
        return 2;
    }
    vp.type = strcmp(mmproj_type, "q8_0") ? IG_TYPE_F16 : IG_TYPE_Q8_0;
    if (vision_layers) vp.n_layer = (int)vision_layers;
    if (image_size) vp.image_size = (int)image_size;
    vp.seed = seed;
    if (mmproj && ig_synth_mmproj_check(&vp, NULL) != IG_OK) {
        fprintf(stderr, "ignis synth: %s\n", ig_last_error());
        return 2;
    }
    if (mmproj && !vocab) {
        fprintf(stderr, "ignis synth: --mmproj needs --vocab-from a Gemma 3 GGUF (its image tokens)\n");
        return 2;
    }
    p.image_tokens = mmproj != NULL;
    if (!mmproj && (vision_layers || image_size)) {
        fprintf(stderr, "ignis synth: --vision-layers and --image-size go with --mmproj\n");
        return 2;
    }
    p.n_layer = (int)layers;
    p.seed = seed;
    p.vocab_from = vocab;
    p.exact = exact;

    /* Writing over the file the vocabulary comes from would truncate a file
     * that is still mapped. */
    struct stat so, sv;
    if (vocab && stat(out, &so) == 0 && stat(vocab, &sv) == 0 && so.st_dev == sv.st_dev &&
        so.st_ino == sv.st_ino) {
        fprintf(stderr, "ignis synth: -o %s is the --vocab-from file\n", out);
        return 2;
    }

    ig_synth *s = NULL;
    ig_status st = ig_synth_create(&p, &s);
    if (st != IG_OK) {
        fprintf(stderr, "ignis synth: %s\n", ig_last_error());
        return st == IG_ERR_INVALID_ARG ? 2 : 1;
    }
    const ig_synth_config *c = ig_synth_get_config(s);
    uint64_t fsize = ig_synth_file_size(s);
    char hs[32];
    human((double)fsize, hs, sizeof hs);

    /* Fail early when the file clearly cannot fit (an existing output is
     * replaced only once the new one is complete: its blocks are not free). */
    char dir[4096];
    dir_of(out, dir, sizeof dir);
    struct statvfs vfs;
    bool exists = stat(out, &so) == 0;
    if ((!exists || S_ISREG(so.st_mode)) && statvfs(dir, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (avail < fsize) {
            char ha[32];
            human((double)avail, ha, sizeof ha);
            fprintf(stderr, "ignis synth: %s needs %s but only %s is free in %s\n", out, hs, ha,
                    dir);
            ig_synth_free(s);
            return 1;
        }
    }

    /* a temporary file renamed onto OUT once complete (a device such as
     * /dev/null or /dev/full is written directly) */
    cli_output o;
    if (cli_output_open(&o, out) != 0) {
        fprintf(stderr, "ignis synth: cannot create %s: %s\n", out, strerror(errno));
        ig_synth_free(s);
        return 1;
    }
    if (!quiet)
        fprintf(stderr,
                "ignis synth: Gemma 3 %s %s, %d layer%s, %.3f B parameters, seed %llu -> %s "
                "(%s)\n",
                c->label, ig_synth_ftype_name(p.ftype), c->n_layer, c->n_layer == 1 ? "" : "s",
                (double)ig_synth_n_params(s) / 1e9, (unsigned long long)seed, out, hs);
    progress pr = {0};
    pr.t0 = pr.last = ig_time_now();
    pr.last_decile = 0;
    pr.tty = isatty(fileno(stderr));
    if (!quiet) ig_synth_set_progress(s, on_progress, &pr);
    st = ig_synth_write(s, o.fp);
    if (st == IG_OK) {
        errno = 0;
        if (cli_output_commit(&o) != 0)
            st = ig_fail(IG_ERR_IO, "writing %s: %s", out, errno ? strerror(errno) : "I/O error");
    } else {
        cli_output_abort(&o);
    }
    ig_synth_free(s);
    if (st != IG_OK) {
        fprintf(stderr, "%signis synth: %s\n", pr.tty && !quiet ? "\n" : "", ig_last_error());
        return 1;
    }
    double dt = ig_time_now() - pr.t0;
    fprintf(stderr, "ignis synth: wrote %s: %llu bytes (%s) in %.1f s\n", out,
            (unsigned long long)fsize, hs, dt);
    return mmproj ? write_mmproj(mmproj, &vp, quiet) : 0;
}
