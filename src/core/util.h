/* Small shared helpers: error reporting, overflow-checked sizes, allocation,
 * memory-mapped files. Everything in src/ may include this. */
#ifndef IG_UTIL_H
#define IG_UTIL_H

#include "ignis.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define IG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define IG_LIKELY(x) __builtin_expect(!!(x), 1)
#define IG_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define IG_PRINTF(a, b)
#define IG_LIKELY(x) (x)
#define IG_UNLIKELY(x) (x)
#endif

#define IG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define IG_MAX(a, b) ((a) > (b) ? (a) : (b))
#define IG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Records a formatted detail message for ig_last_error() and returns st, so
 * that failing paths read: return ig_fail(IG_ERR_FORMAT, "bad %s", what); */
ig_status ig_fail(ig_status st, const char *fmt, ...) IG_PRINTF(2, 3);
/* Prefixes the current detail message with context ("loading x: ..."). */
ig_status ig_fail_wrap(ig_status st, const char *fmt, ...) IG_PRINTF(2, 3);
void ig_clear_error(void);

/* Propagate a failing status. */
#define IG_TRY(expr)                                                                               \
    do {                                                                                           \
        ig_status ig_try_st_ = (expr);                                                             \
        if (ig_try_st_ != IG_OK) return ig_try_st_;                                                \
    } while (0)

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool ig_size_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ig_size_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
/* Round up to a multiple of align (a power of two or any positive value). */
static inline bool ig_size_align(size_t v, size_t align, size_t *out) {
    size_t r = v % align;
    if (r == 0) { *out = v; return true; }
    return ig_size_add(v, align - r, out);
}

/* Allocation: NULL on failure (with ig_fail set to IG_ERR_NO_MEMORY).
 * ig_calloc_array checks n*size for overflow. Aligned memory is released with
 * ig_aligned_free. */
void *ig_malloc(size_t size);
void *ig_calloc_array(size_t n, size_t size);
void *ig_realloc_array(void *p, size_t n, size_t size);
void *ig_aligned_alloc(size_t align, size_t size);
void ig_aligned_free(void *p);
char *ig_strdup(const char *s);
char *ig_strndup(const char *s, size_t n);

/* Test hook, allocation-failure injection: after ig_test_alloc_fail_nth(n)
 * the n-th allocation through the wrappers above on the calling thread fails
 * (NULL with IG_ERR_NO_MEMORY), once; n = 0 disarms. The counter is
 * per-thread so that a test walking n = 1, 2, ... over one call sees the same
 * sequence each time. ig_test_alloc_count() is the number of allocations
 * counted since the hook was armed; ig_test_alloc_failed() whether the
 * injected failure has happened. Costs one thread-local load when disarmed. */
void ig_test_alloc_fail_nth(long n);
long ig_test_alloc_count(void);
bool ig_test_alloc_failed(void);

/* A read-only memory-mapped file (size 0 files map to data == NULL). */
typedef struct ig_mapped_file {
    const uint8_t *data;
    size_t size;
} ig_mapped_file;

ig_status ig_file_map(const char *path, ig_mapped_file *out);
void ig_file_unmap(ig_mapped_file *mf);
/* Reads a whole (small) file into a NUL-terminated malloc'ed buffer. */
ig_status ig_file_read_all(const char *path, size_t max_size, char **out, size_t *out_len);
bool ig_path_is_dir(const char *path);
bool ig_path_is_file(const char *path);
/* "dir/name", malloc'ed (NULL when out of memory). */
char *ig_path_join(const char *dir, const char *name);

/* Wall clock in seconds (monotonic). */
double ig_time_now(void);

/* Number of physical cores (falls back to logical CPUs). */
int ig_physical_cores(void);

#endif
