#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_error[1024];

const char *ig_status_str(ig_status st) {
    switch (st) {
    case IG_OK: return "ok";
    case IG_ERR_INVALID_ARG: return "invalid argument";
    case IG_ERR_IO: return "i/o error";
    case IG_ERR_FORMAT: return "malformed file";
    case IG_ERR_UNSUPPORTED: return "unsupported";
    case IG_ERR_NO_MEMORY: return "out of memory";
    case IG_ERR_CONTEXT_FULL: return "context full";
    case IG_ERR_BACKEND: return "backend error";
    case IG_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *ig_last_error(void) { return g_error; }

void ig_clear_error(void) { g_error[0] = '\0'; }

ig_status ig_fail(ig_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return st;
}

ig_status ig_fail_wrap(ig_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof g_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_error, sizeof old);
    const char *detail = old[0] ? old : ig_status_str(st);
    /* Truncation is fine: the message is for humans. */
    size_t n = strlen(prefix);
    if (n > sizeof g_error - 3) n = sizeof g_error - 3;
    memcpy(g_error, prefix, n);
    g_error[n] = ':';
    g_error[n + 1] = ' ';
    size_t room = sizeof g_error - n - 3, dl = strlen(detail);
    if (dl > room) dl = room;
    memcpy(g_error + n + 2, detail, dl);
    g_error[n + 2 + dl] = '\0';
    return st;
}

static _Thread_local long g_fail_nth, g_alloc_count;
static _Thread_local bool g_fail_fired;

void ig_test_alloc_fail_nth(long n) {
    g_fail_nth = n > 0 ? n : 0;
    g_alloc_count = 0;
    g_fail_fired = false;
}

long ig_test_alloc_count(void) { return g_alloc_count; }

bool ig_test_alloc_failed(void) { return g_fail_fired; }

/* True when the armed fault injection makes this allocation fail. */
static bool alloc_injected_failure(void) {
    if (IG_LIKELY(g_fail_nth == 0)) return false;
    if (++g_alloc_count != g_fail_nth) return false;
    g_fail_fired = true;
    return true;
}

void *ig_malloc(size_t size) {
    if (alloc_injected_failure()) {
        ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes (injected)", size);
        return NULL;
    }
    void *p = malloc(size ? size : 1);
    if (!p) ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes", size);
    return p;
}

void *ig_calloc_array(size_t n, size_t size) {
    size_t total;
    if (!ig_size_mul(n, size, &total)) {
        ig_fail(IG_ERR_NO_MEMORY, "allocation size overflows (%zu x %zu)", n, size);
        return NULL;
    }
    if (alloc_injected_failure()) {
        ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes (injected)", total);
        return NULL;
    }
    void *p = calloc(total ? total : 1, 1);
    if (!p) ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes", total);
    return p;
}

void *ig_realloc_array(void *p, size_t n, size_t size) {
    size_t total;
    if (!ig_size_mul(n, size, &total)) {
        ig_fail(IG_ERR_NO_MEMORY, "allocation size overflows (%zu x %zu)", n, size);
        return NULL;
    }
    if (alloc_injected_failure()) {
        ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes (injected)", total);
        return NULL;
    }
    void *q = realloc(p, total ? total : 1);
    if (!q) ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu bytes", total);
    return q;
}

void *ig_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (alloc_injected_failure()) {
        ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu aligned bytes (injected)", size);
        return NULL;
    }
    if (posix_memalign(&p, align, size ? size : align) != 0) {
        ig_fail(IG_ERR_NO_MEMORY, "out of memory allocating %zu aligned bytes", size);
        return NULL;
    }
    return p;
}

void ig_aligned_free(void *p) { free(p); }

char *ig_strdup(const char *s) { return ig_strndup(s, strlen(s)); }

char *ig_strndup(const char *s, size_t n) {
    size_t total;
    if (!ig_size_add(n, 1, &total)) return NULL;
    char *p = ig_malloc(total);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

ig_status ig_file_map(const char *path, ig_mapped_file *out) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ig_fail(IG_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ig_fail(IG_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ig_fail(IG_ERR_IO, "%s is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return IG_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return ig_fail(IG_ERR_IO, "cannot mmap %s: %s", path, strerror(e));
    out->data = p;
    out->size = (size_t)st.st_size;
    return IG_OK;
}

void ig_file_unmap(ig_mapped_file *mf) {
    if (mf && mf->data) munmap((void *)mf->data, mf->size);
    if (mf) {
        mf->data = NULL;
        mf->size = 0;
    }
}

ig_status ig_file_read_all(const char *path, size_t max_size, char **out, size_t *out_len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ig_fail(IG_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = ig_malloc(cap);
    if (!buf) {
        fclose(f);
        return IG_ERR_NO_MEMORY;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max_size) {
                free(buf);
                fclose(f);
                return ig_fail(IG_ERR_FORMAT, "%s is larger than %zu bytes", path, max_size);
            }
            char *nb = ig_realloc_array(buf, cap, 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return IG_ERR_NO_MEMORY;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return ig_fail(IG_ERR_IO, "error reading %s", path);
    }
    if (len > max_size) {
        free(buf);
        return ig_fail(IG_ERR_FORMAT, "%s is larger than %zu bytes", path, max_size);
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return IG_OK;
}

bool ig_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool ig_path_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *ig_path_join(const char *dir, const char *name) {
    size_t n;
    if (!ig_size_add(strlen(dir), strlen(name), &n) || !ig_size_add(n, 2, &n)) return NULL;
    char *p = ig_malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

double ig_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ig_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs; fall back to online CPUs. */
    long logical = sysconf(_SC_NPROCESSORS_ONLN);
    if (logical < 1) logical = 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return (int)logical;
    char line[256];
    int phys = -1, n = 0;
    int seen[1024][2];
    while (fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            bool dup = false;
            for (int i = 0; i < n; i++)
                if (seen[i][0] == phys && seen[i][1] == v) dup = true;
            if (!dup && n < 1024) {
                seen[n][0] = phys;
                seen[n][1] = v;
                n++;
            }
        }
    }
    fclose(f);
    if (n <= 0 || n > logical) return (int)logical;
    return n;
}
