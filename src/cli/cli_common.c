#define _GNU_SOURCE /* realpath */
#include "cli.h"

#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_default_model(void) {
    static char path[4096];
    const char *env = getenv("IGNIS_MODEL");
    if (env && *env) return env;
    const char *home = getenv("HOME");
    if (!home) return NULL;
    snprintf(path, sizeof path, "%s/.cache/ignis/gemma-3-270m-q4_k_m.gguf", home);
    return path;
}

ig_model *cli_load_model(const char *path, const ig_model_params *params) {
    if (!path) {
        path = cli_default_model();
        if (!path || access(path, R_OK) != 0) {
            fprintf(stderr,
                    "ignis: no MODEL given and the default model is missing (%s).\n"
                    "Fetch it with:  make model   (or scripts/fetch-model.sh)\n",
                    path ? path : "~/.cache/ignis/gemma-3-270m-q4_k_m.gguf");
            return NULL;
        }
    }
    ig_model *m = NULL;
    ig_model_params mp = params ? *params : ig_model_default_params();
    if (cli_deterministic) mp.deterministic = true;
    ig_status st = ig_model_load(path, &mp, &m);
    if (st == IG_OK && cli_vk_tuning) st = ig_model_set_device_tuning(m, cli_vk_tuning);
    if (st != IG_OK) {
        ig_model_free(m);
        fprintf(stderr, "ignis: cannot load %s: %s\n", path,
                *ig_last_error() ? ig_last_error() : ig_status_str(st));
        return NULL;
    }
    return m;
}

int cli_parse_int(const char *opt, const char *s, long min, long max, long *out) {
    if (!s) {
        fprintf(stderr, "ignis: %s needs a value\n", opt);
        return 2;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "ignis: %s expects an integer in [%ld, %ld], got '%s'\n", opt, min, max, s);
        return 2;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, double min, double max, double *out) {
    if (!s) {
        fprintf(stderr, "ignis: %s needs a value\n", opt);
        return 2;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "ignis: %s expects a number in [%g, %g], got '%s'\n", opt, min, max, s);
        return 2;
    }
    *out = v;
    return 0;
}

int cli_parse_backend(const char *s, ig_backend_kind *out) {
    if (s && !strcmp(s, "cpu")) *out = IG_BACKEND_CPU;
    else if (s && !strcmp(s, "vulkan")) *out = IG_BACKEND_VULKAN;
    else {
        fprintf(stderr, "ignis: --backend expects cpu or vulkan, got '%s'\n", s ? s : "");
        return 2;
    }
    return 0;
}

int cli_parse_quant(const char *s, ig_weight_quant *out) {
    if (s && !strcmp(s, "q8_0")) *out = IG_WEIGHT_Q8_0;
    else if (s && !strcmp(s, "q4_0")) *out = IG_WEIGHT_Q4_0;
    else if (s && !strcmp(s, "q4_k")) *out = IG_WEIGHT_Q4_K;
    else {
        fprintf(stderr, "ignis: --quant expects q8_0, q4_0 or q4_k, got '%s'\n", s ? s : "");
        return 2;
    }
    return 0;
}

int cli_attach_vision(ig_model *m, const char *model_path, const char *mmproj, bool required) {
    char *found = NULL;
    if (!mmproj && !ig_model_has_vision(m) && model_path && !ig_path_is_dir(model_path)) {
        if (ig_mmproj_next_to(model_path, &found) != IG_OK) {
            fprintf(stderr, "ignis: out of memory\n");
            return 1;
        }
        mmproj = found;
    }
    int rc = 0;
    if (mmproj && ig_model_load_mmproj(m, mmproj) != IG_OK) {
        fprintf(stderr, "ignis: cannot load the vision tower: %s\n", ig_last_error());
        rc = 1;
    } else if (required && !ig_model_has_vision(m)) {
        fprintf(stderr, "ignis: this model has no vision tower: images need a vision-language checkpoint or "
                        "--mmproj FILE (llama.cpp's mmproj GGUF)\n");
        rc = 1;
    }
    free(found);
    return rc;
}

ig_status cli_embed_images(ig_model *m, char **paths, int n, int n_threads, float ***out) {
    *out = NULL;
    float **e = calloc((size_t)(n > 0 ? n : 1), sizeof *e);
    if (!e) return IG_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++) {
        ig_image *img = NULL;
        ig_status st = ig_image_load(paths[i], &img);
        if (st == IG_OK) st = ig_image_embed(m, img, n_threads, &e[i], NULL);
        ig_image_free(img);
        if (st != IG_OK) {
            cli_free_images(e, n);
            return st;
        }
    }
    *out = e;
    return IG_OK;
}

void cli_free_images(float **e, int n) {
    if (!e) return;
    for (int i = 0; i < n; i++) free(e[i]);
    free(e);
}

static void fmt_bytes(char *out, size_t cap, double b) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(out, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else snprintf(out, cap, "%.0f MiB", b / (1024.0 * 1024));
}

void cli_device_peak(const ig_context *ctx, ig_device_stats *peak, bool *have) {
    ig_device_stats d;
    if (!ctx || ig_context_device_stats(ctx, &d) != IG_OK) return;
    if (!*have) *peak = d;
    if (d.allocated_bytes > peak->allocated_bytes) peak->allocated_bytes = d.allocated_bytes;
    if (d.used_bytes > peak->used_bytes) peak->used_bytes = d.used_bytes;
    if (d.kv_bytes > peak->kv_bytes) peak->kv_bytes = d.kv_bytes;
    peak->budget_bytes = d.budget_bytes;
    *have = true;
}

void cli_print_memory(const ig_device_stats *dev) {
    struct rusage ru;
    char rss[32] = "?", a[32], u[32], t[32];
    if (getrusage(RUSAGE_SELF, &ru) == 0) fmt_bytes(rss, sizeof rss, (double)ru.ru_maxrss * 1024.0);
    if (dev && dev->backend == IG_BACKEND_VULKAN) {
        fmt_bytes(a, sizeof a, (double)dev->allocated_bytes);
        fmt_bytes(u, sizeof u, (double)dev->used_bytes);
        fmt_bytes(t, sizeof t, (double)dev->budget_bytes);
        fprintf(stderr, "memory: peak RSS %s; vulkan device: %s allocated, %s used of %s%s\n", rss, a, u, t,
                dev->memory_budget ? " (memory budget)" : "");
    } else if (dev) {
        fmt_bytes(a, sizeof a, (double)dev->weight_bytes);
        fmt_bytes(u, sizeof u, (double)dev->kv_bytes);
        fprintf(stderr, "memory: peak RSS %s (weights %s, KV cache %s)\n", rss, a, u);
    } else {
        fprintf(stderr, "memory: peak RSS %s\n", rss);
    }
}

/* ---- outputs written whole or not at all ---------------------------------- */

static void output_free(cli_output *o) {
    free(o->path);
    free(o->tmp);
    o->path = o->tmp = NULL;
    o->fp = NULL;
}

int cli_output_open(cli_output *o, const char *path) {
    memset(o, 0, sizeof *o);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) { /* a device or FIFO: no rename onto it */
        o->fp = fopen(path, "wb");
        return o->fp ? 0 : -1;
    }
    struct stat lsb;
    bool link = lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode);
    o->path = link && exists ? realpath(path, NULL) : strdup(path);
    if (!o->path) return -1;
    /* DIR/.BASE.XXXXXX: hidden, in the final name's directory (so that the
     * rename stays within one file system) */
    const char *slash = strrchr(o->path, '/');
    size_t dir_len = slash ? (size_t)(slash - o->path) + 1 : 0;
    const char *base = o->path + dir_len;
    size_t n = strlen(o->path) + 16;
    o->tmp = malloc(n);
    if (!o->tmp) {
        output_free(o);
        errno = ENOMEM;
        return -1;
    }
    snprintf(o->tmp, n, "%.*s.%s.XXXXXX", (int)dir_len, o->path, base);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        output_free(o);
        errno = e;
        return -1;
    }
    /* mkstemp's 0600 to what a plain fopen would have given */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0 || !(o->fp = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        output_free(o);
        errno = e;
        return -1;
    }
    return 0;
}

int cli_output_commit(cli_output *o) {
    if (!o->tmp) { /* written directly */
        int rc = fclose(o->fp);
        output_free(o);
        return rc == 0 ? 0 : -1;
    }
    int rc = fflush(o->fp) == 0 && fsync(fileno(o->fp)) == 0 ? 0 : -1;
    int e = errno;
    if (fclose(o->fp) != 0 && rc == 0) rc = -1, e = errno;
    if (rc == 0 && rename(o->tmp, o->path) != 0) rc = -1, e = errno;
    if (rc != 0) unlink(o->tmp);
    output_free(o);
    errno = e;
    return rc;
}

void cli_output_abort(cli_output *o) {
    if (o->fp) fclose(o->fp);
    if (o->tmp) unlink(o->tmp);
    output_free(o);
}

/* Reads a whole file (at most 1 GiB) into a NUL-terminated buffer. */
char *cli_read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap >= ((size_t)1 << 30)) {
            free(buf);
            buf = NULL;
            break;
        }
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}
