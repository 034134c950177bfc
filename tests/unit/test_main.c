/* Runs every registered test (or those whose name contains argv[1]) and
 * prints "N passed, N failed". Exit status is non-zero on any failure. */
#include "test.h"

#include "ignis.h"
#include "core/util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TESTS 2048

static struct {
    const char *name;
    ig_test_fn fn;
} g_tests[MAX_TESTS];
static int g_n_tests;
static int g_current_failed;
static int g_current_skipped;

void ig_test_register(const char *name, ig_test_fn fn) {
    if (g_n_tests < MAX_TESTS) {
        g_tests[g_n_tests].name = name;
        g_tests[g_n_tests].fn = fn;
        g_n_tests++;
    }
}

void ig_test_fail_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_current_failed++;
}

void ig_test_skip(const char *why) {
    fprintf(stderr, "  skipped: %s\n", why);
    g_current_skipped = 1;
}

const char *ig_test_fixtures(void) {
    const char *env = getenv("IGNIS_FIXTURES");
    return env && *env ? env : IG_SOURCE_DIR "/../shared/fixtures";
}

const char *ig_test_real_model(void) {
    static char path[4096];
    const char *env = getenv("IGNIS_MODEL");
    if (env && *env) return access(env, R_OK) == 0 ? env : NULL;
    const char *home = getenv("HOME");
    if (!home) return NULL;
    snprintf(path, sizeof path, "%s/.cache/ignis/gemma-3-270m-q4_k_m.gguf", home);
    return access(path, R_OK) == 0 ? path : NULL;
}

static int cmp_tests(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    qsort(g_tests, (size_t)g_n_tests, sizeof g_tests[0], cmp_tests);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        g_current_failed = 0;
        g_current_skipped = 0;
        fprintf(stderr, "[ RUN  ] %s\n", g_tests[i].name);
        double t0 = ig_time_now();
        g_tests[i].fn();
        double dt = ig_time_now() - t0;
        if (g_current_failed) {
            failed++;
            fprintf(stderr, "[ FAIL ] %s (%.2fs)\n", g_tests[i].name, dt);
        } else if (g_current_skipped) {
            skipped++;
            fprintf(stderr, "[ SKIP ] %s\n", g_tests[i].name);
        } else {
            passed++;
            fprintf(stderr, "[  OK  ] %s (%.2fs)\n", g_tests[i].name, dt);
        }
    }
    fflush(stderr);
    if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
