/* Runs the registered tests and prints "N passed, N failed". Usage:
 *   ignis_tests [--fast | --slow] [filter]
 * --fast leaves out the tests marked IG_TEST_SLOW, --slow runs only those;
 * a filter keeps the tests whose name contains it. Exit status is non-zero
 * on any failure or a bad argument. */
#include "test.h"

#include "ignis.h"
#include "core/util.h"
#include "model/synth.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TESTS 2048

static struct {
    const char *name;
    ig_test_fn fn;
    bool slow;
} g_tests[MAX_TESTS];
static int g_n_tests;
static int g_current_failed;
static int g_current_skipped;
static int g_n_overflow;

void ig_test_register(const char *name, ig_test_fn fn, bool slow) {
    if (g_n_tests < MAX_TESTS) {
        g_tests[g_n_tests].name = name;
        g_tests[g_n_tests].fn = fn;
        g_tests[g_n_tests].slow = slow;
        g_n_tests++;
    } else {
        g_n_overflow++;
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

bool ig_test_write_synth(const ig_synth_params *p, char *path) {
    const int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "  cannot create %s\n", path);
        return false;
    }
    close(fd);
    ig_synth *s = NULL;
    ig_status st = ig_synth_create(p, &s);
    FILE *fp = st == IG_OK ? fopen(path, "wb") : NULL;
    if (fp) {
        st = ig_synth_write(s, fp);
        if (fclose(fp) != 0 && st == IG_OK) st = IG_ERR_IO;
    } else if (st == IG_OK) {
        st = IG_ERR_IO;
    }
    ig_synth_free(s);
    if (st != IG_OK) fprintf(stderr, "  synthetic model %s: %s\n", path, ig_last_error());
    return st == IG_OK;
}

const char *ig_test_fixtures(void) {
    const char *env = getenv("IGNIS_FIXTURES");
    return env && *env ? env : IG_SOURCE_DIR "/tests/fixtures";
}

const char *ig_test_tokenizer_json(void) {
    static char path[4096];
    const char *env = getenv("IGNIS_FIXTURES");
    if (env && *env) {
        snprintf(path, sizeof path, "%s/tokenizer/gemma3/tokenizer.json", env);
        if (access(path, R_OK) == 0) return path;
    }
    return IG_BINARY_DIR "/fixtures/tokenizer/gemma3/tokenizer.json";
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
    const char *filter = NULL;
    int want_slow = -1; /* -1: every test, 0: --fast, 1: --slow */
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--fast") == 0) {
            want_slow = 0;
        } else if (strcmp(argv[a], "--slow") == 0) {
            want_slow = 1;
        } else if (argv[a][0] == '-' || filter) {
            fprintf(stderr, "usage: %s [--fast | --slow] [filter]\n", argv[0]);
            return 2;
        } else {
            filter = argv[a];
        }
    }
    if (g_n_overflow) {
        fprintf(stderr, "%d tests not registered: raise MAX_TESTS\n", g_n_overflow);
        return 2;
    }
    qsort(g_tests, (size_t)g_n_tests, sizeof g_tests[0], cmp_tests);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        if (want_slow >= 0 && g_tests[i].slow != (want_slow == 1)) continue;
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
