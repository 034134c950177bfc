/* A dependency-free unit-test harness. Each test file defines tests with
 * IG_TEST(name) { ... }; they register themselves at start-up, so there is
 * no central list to edit. CHECK* macros print both operands and count a
 * failure without stopping the test; REQUIRE* stop the current test. */
#ifndef IG_TEST_H
#define IG_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

typedef void (*ig_test_fn)(void);
void ig_test_register(const char *name, ig_test_fn fn, bool slow);
void ig_test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Path of the fixtures directory (tests/fixtures by default, or
 * $IGNIS_FIXTURES). */
const char *ig_test_fixtures(void);
/* Path of the real Gemma 3 tokenizer.json: the fixture directory keeps it
 * compressed and the build unpacks it; $IGNIS_FIXTURES may hold it unpacked. */
const char *ig_test_tokenizer_json(void);
/* Path of the real Gemma 3 270M GGUF, or NULL when it is not present (tests
 * that need it fail unless IGNIS_ALLOW_MISSING_MODEL=1). */
const char *ig_test_real_model(void);
/* Writes the synthetic model p describes to a new file named from path, a
 * mkstemp template ("...XXXXXX", rewritten in place); false (with the error
 * printed) when it cannot. The caller unlinks the file. */
struct ig_synth_params;
bool ig_test_write_synth(const struct ig_synth_params *p, char *path);
/* Marks the current test as skipped (counted separately). */
void ig_test_skip(const char *why);

#define IG_TEST_DEFINE_(name, slow)                                                                \
    static void ig_test_##name(void);                                                              \
    __attribute__((constructor)) static void ig_test_reg_##name(void) {                            \
        ig_test_register(#name, ig_test_##name, slow);                                             \
    }                                                                                              \
    static void ig_test_##name(void)
#define IG_TEST(name) IG_TEST_DEFINE_(name, false)
/* A test that takes seconds (a real model, large shapes on lavapipe):
 * `ignis_tests --fast` (make check, make test) leaves it out, `--slow` (make
 * test-slow) runs only these. */
#define IG_TEST_SLOW(name) IG_TEST_DEFINE_(name, true)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) ig_test_fail_at(__FILE__, __LINE__, "CHECK(%s)", #cond);                      \
    } while (0)
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ig_test_fail_at(__FILE__, __LINE__, "REQUIRE(%s)", #cond);                             \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long ig_a_ = (long long)(a), ig_b_ = (long long)(b);                                  \
        if (ig_a_ != ig_b_)                                                                        \
            ig_test_fail_at(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, ig_a_, ig_b_);   \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double ig_a_ = (double)(a), ig_b_ = (double)(b);                                           \
        if (!(fabs(ig_a_ - ig_b_) <= (tol)))                                                       \
            ig_test_fail_at(__FILE__, __LINE__, "%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, ig_a_,  \
                            ig_b_, (double)(tol));                                                 \
    } while (0)
#define CHECK_STATUS(expr, want)                                                                   \
    do {                                                                                           \
        int ig_s_ = (int)(expr);                                                                   \
        if (ig_s_ != (int)(want))                                                                  \
            ig_test_fail_at(__FILE__, __LINE__, "%s: status %d, want %d (%s)", #expr, ig_s_,       \
                            (int)(want), ig_last_error());                                         \
    } while (0)
#define REQUIRE_OK(expr)                                                                           \
    do {                                                                                           \
        int ig_s_ = (int)(expr);                                                                   \
        if (ig_s_ != 0) {                                                                          \
            ig_test_fail_at(__FILE__, __LINE__, "%s failed: %d (%s)", #expr, ig_s_,                \
                            ig_last_error());                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#endif
