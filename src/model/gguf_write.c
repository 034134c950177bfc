/* Streaming GGUF v3 writer (see gguf_write.h). Metadata is serialized into
 * a growing byte buffer as it is added; tensor infos are kept as records so
 * that their offsets are known before any data is written; tensor data goes
 * straight to the FILE*. */
#include "model/gguf_write.h"
#include "core/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_write.c assumes a little-endian host (numeric arrays are copied as is)"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_VERSION 3
/* Keys are bounded like the reader's names. */
#define GGUF_WRITER_MAX_KEY 4096

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

typedef struct wtensor {
    char *name;
    int n_dims;
    int64_t ne[IG_MAX_DIMS];
    ig_dtype type;
    uint64_t nbytes; /* unpadded */
    uint64_t offset; /* relative to the data section */
} wtensor;

struct gguf_writer {
    size_t alignment;
    wbuf kv;         /* serialized key/value pairs */
    char **keys;     /* owned copies, for duplicate checks */
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_size; /* padded size of the data section */
    uint64_t info_size; /* serialized size of the tensor infos */
    /* output state */
    FILE *fp;
    bool begun, failed, finished;
    size_t cur;          /* tensor being written */
    uint64_t cur_left;   /* bytes of it still to come */
    uint64_t written;    /* bytes written to fp */
};

/* ---- buffers ------------------------------------------------------------- */

static ig_status wb_reserve(wbuf *b, size_t extra) {
    size_t need;
    if (!ig_size_add(b->n, extra, &need))
        return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: metadata size overflows");
    if (need <= b->cap) return IG_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        if (!ig_size_mul(cap, 2, &cap))
            return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: metadata size overflows");
    }
    uint8_t *p = ig_realloc_array(b->p, cap, 1);
    if (!p) return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return IG_OK;
}

static ig_status wb_bytes(wbuf *b, const void *src, size_t n) {
    if (n == 0) return IG_OK;
    IG_TRY(wb_reserve(b, n));
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return IG_OK;
}

static ig_status wb_le(wbuf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    return wb_bytes(b, t, (size_t)n);
}

static ig_status wb_str(wbuf *b, const char *s, size_t len) {
    IG_TRY(wb_le(b, (uint64_t)len, 8));
    return wb_bytes(b, s, len);
}

static size_t elem_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- lifetime ------------------------------------------------------------ */

ig_status gguf_writer_create(size_t alignment, gguf_writer **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_create: NULL argument");
    *out = NULL;
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX)
        return ig_fail(IG_ERR_INVALID_ARG,
                       "gguf writer: alignment %zu is not a power of two below 2^32", alignment);
    gguf_writer *w = ig_calloc_array(1, sizeof *w);
    if (!w) return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: out of memory");
    w->alignment = alignment;
    if (alignment != GGUF_DEFAULT_ALIGNMENT) {
        ig_status st = gguf_writer_add_u32(w, "general.alignment", (uint32_t)alignment);
        if (st != IG_OK) {
            gguf_writer_free(w);
            return st;
        }
    }
    *out = w;
    return IG_OK;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

/* ---- metadata ------------------------------------------------------------ */

bool gguf_writer_has_key(const gguf_writer *w, const char *key) {
    if (!w || !key) return false;
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return true;
    return false;
}

/* Validates the key, records it and serializes key + type id. On failure
 * nothing is recorded. The caller appends the value; if that fails the
 * writer is marked failed (the buffer would hold a partial pair). */
static ig_status kv_begin(gguf_writer *w, const char *key, gguf_type type) {
    if (!w || !key) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (w->failed) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: an earlier call failed");
    if (w->begun)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: key '%s' added after the header", key);
    size_t len = strlen(key);
    if (len == 0 || len > GGUF_WRITER_MAX_KEY)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: key of %zu bytes (must be 1..%d)", len,
                       GGUF_WRITER_MAX_KEY);
    if (gguf_writer_has_key(w, key))
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: duplicate key '%s'", key);
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        char **k = ig_realloc_array(w->keys, cap, sizeof *k);
        if (!k) return IG_ERR_NO_MEMORY;
        w->keys = k;
        w->cap_kv = cap;
    }
    char *copy = ig_strdup(key);
    if (!copy) return IG_ERR_NO_MEMORY;
    size_t mark = w->kv.n;
    ig_status st = wb_str(&w->kv, key, len);
    if (st == IG_OK) st = wb_le(&w->kv, (uint64_t)type, 4);
    if (st != IG_OK) {
        w->kv.n = mark;
        free(copy);
        return st;
    }
    w->keys[w->n_kv++] = copy;
    return IG_OK;
}

static ig_status kv_value(gguf_writer *w, ig_status st) {
    if (st != IG_OK) w->failed = true;
    return st;
}

static ig_status kv_scalar(gguf_writer *w, const char *key, gguf_type type, uint64_t bits) {
    IG_TRY(kv_begin(w, key, type));
    return kv_value(w, wb_le(&w->kv, bits, (int)elem_size(type)));
}

ig_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v) {
    return kv_scalar(w, key, GGUF_TYPE_UINT8, v);
}
ig_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v) {
    return kv_scalar(w, key, GGUF_TYPE_INT8, (uint8_t)v);
}
ig_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v) {
    return kv_scalar(w, key, GGUF_TYPE_UINT16, v);
}
ig_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v) {
    return kv_scalar(w, key, GGUF_TYPE_INT16, (uint16_t)v);
}
ig_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) {
    return kv_scalar(w, key, GGUF_TYPE_UINT32, v);
}
ig_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) {
    return kv_scalar(w, key, GGUF_TYPE_INT32, (uint32_t)v);
}
ig_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) {
    return kv_scalar(w, key, GGUF_TYPE_UINT64, v);
}
ig_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v) {
    return kv_scalar(w, key, GGUF_TYPE_INT64, (uint64_t)v);
}
ig_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return kv_scalar(w, key, GGUF_TYPE_FLOAT32, u);
}
ig_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return kv_scalar(w, key, GGUF_TYPE_FLOAT64, u);
}
ig_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v) {
    return kv_scalar(w, key, GGUF_TYPE_BOOL, v ? 1u : 0u);
}

ig_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *s, size_t len) {
    if (!w || !key) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (!s && len) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL string for '%s'", key);
    IG_TRY(kv_begin(w, key, GGUF_TYPE_STRING));
    return kv_value(w, wb_str(&w->kv, s, len));
}

ig_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s) {
    if (!s) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL string");
    return gguf_writer_add_strn(w, key, s, strlen(s));
}

ig_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                              const void *data, uint64_t count) {
    if (!w || !key) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL argument");
    size_t es = elem_size(elem_type);
    if (es == 0)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: '%s': arrays of %s are not numeric",
                       key, gguf_type_name(elem_type));
    size_t bytes;
    if (count > SIZE_MAX || !ig_size_mul((size_t)count, es, &bytes))
        return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: array '%s' is too large", key);
    if (!data && count) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL array data");
    if (elem_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < count; i++)
            if (((const uint8_t *)data)[i] > 1)
                return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: '%s'[%llu] is not a bool", key,
                               (unsigned long long)i);
    IG_TRY(kv_begin(w, key, GGUF_TYPE_ARRAY));
    ig_status st = wb_le(&w->kv, (uint64_t)elem_type, 4);
    if (st == IG_OK) st = wb_le(&w->kv, count, 8);
    if (st == IG_OK) st = wb_bytes(&w->kv, data, bytes);
    return kv_value(w, st);
}

ig_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const gguf_str *strs,
                                  uint64_t count) {
    if (!w || !key) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL argument");
    if (!strs && count) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL string array");
    for (uint64_t i = 0; i < count; i++)
        if (!strs[i].ptr && strs[i].len)
            return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: NULL string in '%s'", key);
    IG_TRY(kv_begin(w, key, GGUF_TYPE_ARRAY));
    ig_status st = wb_le(&w->kv, (uint64_t)GGUF_TYPE_STRING, 4);
    if (st == IG_OK) st = wb_le(&w->kv, count, 8);
    for (uint64_t i = 0; i < count && st == IG_OK; i++)
        st = wb_str(&w->kv, strs[i].ptr, strs[i].len);
    return kv_value(w, st);
}

ig_status gguf_writer_add_kv(gguf_writer *w, const gguf_kv *kv) {
    if (!w || !kv || !kv->key) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_add_kv: NULL");
    const char *k = kv->key;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: return gguf_writer_add_u8(w, k, (uint8_t)kv->v.u64);
    case GGUF_TYPE_INT8: return gguf_writer_add_i8(w, k, (int8_t)kv->v.i64);
    case GGUF_TYPE_UINT16: return gguf_writer_add_u16(w, k, (uint16_t)kv->v.u64);
    case GGUF_TYPE_INT16: return gguf_writer_add_i16(w, k, (int16_t)kv->v.i64);
    case GGUF_TYPE_UINT32: return gguf_writer_add_u32(w, k, (uint32_t)kv->v.u64);
    case GGUF_TYPE_INT32: return gguf_writer_add_i32(w, k, (int32_t)kv->v.i64);
    case GGUF_TYPE_UINT64: return gguf_writer_add_u64(w, k, kv->v.u64);
    case GGUF_TYPE_INT64: return gguf_writer_add_i64(w, k, kv->v.i64);
    case GGUF_TYPE_FLOAT32: return gguf_writer_add_f32(w, k, (float)kv->v.f64);
    case GGUF_TYPE_FLOAT64: return gguf_writer_add_f64(w, k, kv->v.f64);
    case GGUF_TYPE_BOOL: return gguf_writer_add_bool(w, k, kv->v.u64 != 0);
    case GGUF_TYPE_STRING: return gguf_writer_add_strn(w, k, kv->v.str.ptr, kv->v.str.len);
    case GGUF_TYPE_ARRAY:
        if (kv->arr_type == GGUF_TYPE_STRING) {
            if (kv->arr_count && !kv->arr_strs)
                return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: '%s' has no strings", k);
            return gguf_writer_add_arr_str(w, k, kv->arr_strs, kv->arr_count);
        }
        if (kv->arr_type == GGUF_TYPE_BOOL) {
            /* the reader keeps raw bytes: normalise any non-zero to 1 */
            uint8_t *tmp = kv->arr_count ? ig_calloc_array((size_t)kv->arr_count, 1) : NULL;
            if (kv->arr_count && !tmp) return IG_ERR_NO_MEMORY;
            for (uint64_t i = 0; i < kv->arr_count; i++)
                tmp[i] = ((const uint8_t *)kv->arr_data)[i] != 0;
            ig_status st = gguf_writer_add_arr(w, k, GGUF_TYPE_BOOL, tmp, kv->arr_count);
            free(tmp);
            return st;
        }
        return gguf_writer_add_arr(w, k, kv->arr_type, kv->arr_data, kv->arr_count);
    }
    return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: key '%s' has unknown type %d", k,
                   (int)kv->type);
}

/* ---- tensors ------------------------------------------------------------- */

ig_status gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                                 ig_dtype type) {
    if (!w || !name || !ne) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_add_tensor: NULL");
    if (w->failed) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: an earlier call failed");
    if (w->begun)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: tensor '%s' added after the header",
                       name);
    size_t len = strlen(name);
    if (len == 0 || len > GGUF_WRITER_MAX_NAME)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: tensor name '%s' has %zu bytes (1..%d)",
                       name, len, GGUF_WRITER_MAX_NAME);
    if (n_dims < 1 || n_dims > IG_MAX_DIMS)
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: tensor '%s' has %d dimensions (1..%d)",
                       name, n_dims, IG_MAX_DIMS);
    if (!ig_dtype_known((uint32_t)type))
        return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: tensor '%s' has unknown type %d", name,
                       (int)type);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: duplicate tensor '%s'", name);
    size_t bytes;
    if (ne[0] < 1 || !ig_dtype_row_bytes(type, ne[0], &bytes))
        return ig_fail(IG_ERR_INVALID_ARG,
                       "gguf writer: tensor '%s': a row of %lld is not a whole number of %s "
                       "blocks",
                       name, (long long)ne[0], ig_dtype_name(type));
    uint64_t nbytes = bytes;
    for (int d = 1; d < n_dims; d++)
        if (ne[d] < 1 || __builtin_mul_overflow(nbytes, (uint64_t)ne[d], &nbytes))
            return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: tensor '%s' has a bad shape", name);
    uint64_t padded = nbytes, info;
    if (nbytes % w->alignment) padded += w->alignment - nbytes % w->alignment;
    /* name + n_dims + ne[] + type + offset */
    info = 8 + len + 4 + 8 * (uint64_t)n_dims + 4 + 8;
    if (padded < nbytes || w->data_size + padded < w->data_size)
        return ig_fail(IG_ERR_NO_MEMORY, "gguf writer: data section size overflows");
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = ig_realloc_array(w->tensors, cap, sizeof *t);
        if (!t) return IG_ERR_NO_MEMORY;
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = ig_strdup(name);
    if (!t->name) return IG_ERR_NO_MEMORY;
    t->n_dims = n_dims;
    for (int d = 0; d < IG_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    t->nbytes = nbytes;
    t->offset = w->data_size;
    w->data_size += padded;
    w->info_size += info;
    w->n_tensors++;
    return IG_OK;
}

size_t gguf_writer_n_tensors(const gguf_writer *w) { return w ? w->n_tensors : 0; }
size_t gguf_writer_n_kv(const gguf_writer *w) { return w ? w->n_kv : 0; }

uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i) {
    return w && i < w->n_tensors ? w->tensors[i].nbytes : 0;
}

/* Bytes before the data section (header + kv + infos, unpadded). */
static uint64_t head_size(const gguf_writer *w) { return 24 + (uint64_t)w->kv.n + w->info_size; }

static uint64_t data_start(const gguf_writer *w) {
    uint64_t h = head_size(w);
    return h % w->alignment ? h + (w->alignment - h % w->alignment) : h;
}

uint64_t gguf_writer_file_size(const gguf_writer *w) {
    return w ? data_start(w) + w->data_size : 0;
}

/* ---- output -------------------------------------------------------------- */

static ig_status out_bytes(gguf_writer *w, const void *p, size_t n) {
    if (n == 0) return IG_OK;
    errno = 0;
    size_t done = fwrite(p, 1, n, w->fp);
    if (done != n) {
        int e = errno;
        w->failed = true;
        return ig_fail(IG_ERR_IO, "gguf writer: write failed after %llu bytes: %s",
                       (unsigned long long)(w->written + done), e ? strerror(e) : "I/O error");
    }
    w->written += n;
    return IG_OK;
}

static ig_status out_zeros(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        IG_TRY(out_bytes(w, zeros, k));
        n -= k;
    }
    return IG_OK;
}

static uint64_t pad_of(const gguf_writer *w, uint64_t n) {
    return n % w->alignment ? w->alignment - n % w->alignment : 0;
}

ig_status gguf_writer_begin(gguf_writer *w, FILE *fp) {
    if (!w || !fp) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_begin: NULL argument");
    if (w->failed) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: an earlier call failed");
    if (w->begun) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: header already written");
    w->fp = fp;
    w->begun = true;
    wbuf h = {0};
    ig_status st = wb_bytes(&h, "GGUF", 4);
    if (st == IG_OK) st = wb_le(&h, GGUF_VERSION, 4);
    if (st == IG_OK) st = wb_le(&h, (uint64_t)w->n_tensors, 8);
    if (st == IG_OK) st = wb_le(&h, (uint64_t)w->n_kv, 8);
    if (st == IG_OK) st = out_bytes(w, h.p, h.n);
    if (st == IG_OK) st = out_bytes(w, w->kv.p, w->kv.n);
    /* tensor infos, serialized in one buffer */
    h.n = 0;
    for (size_t i = 0; i < w->n_tensors && st == IG_OK; i++) {
        const wtensor *t = &w->tensors[i];
        st = wb_str(&h, t->name, strlen(t->name));
        if (st == IG_OK) st = wb_le(&h, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims && st == IG_OK; d++) st = wb_le(&h, (uint64_t)t->ne[d], 8);
        if (st == IG_OK) st = wb_le(&h, (uint64_t)t->type, 4);
        if (st == IG_OK) st = wb_le(&h, t->offset, 8);
    }
    if (st == IG_OK) st = out_bytes(w, h.p, h.n);
    free(h.p);
    if (st == IG_OK) st = out_zeros(w, pad_of(w, w->written));
    if (st == IG_OK && w->written != data_start(w))
        st = ig_fail(IG_ERR_INTERNAL, "gguf writer: header is %llu bytes, expected %llu",
                     (unsigned long long)w->written, (unsigned long long)data_start(w));
    if (st != IG_OK) {
        w->failed = true;
        return st;
    }
    w->cur = 0;
    w->cur_left = w->n_tensors ? w->tensors[0].nbytes : 0;
    return IG_OK;
}

ig_status gguf_writer_write(gguf_writer *w, const void *data, size_t n) {
    if (!w || (!data && n)) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_write: NULL argument");
    if (!w->begun) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: data before the header");
    if (w->failed) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: an earlier call failed");
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_tensors)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "gguf writer: %zu bytes of data past the last tensor", n);
        size_t k = w->cur_left < n ? (size_t)w->cur_left : n;
        IG_TRY(out_bytes(w, p, k));
        p += k;
        n -= k;
        w->cur_left -= k;
        if (w->cur_left == 0) {
            IG_TRY(out_zeros(w, pad_of(w, w->tensors[w->cur].nbytes)));
            w->cur++;
            w->cur_left = w->cur < w->n_tensors ? w->tensors[w->cur].nbytes : 0;
        }
    }
    return IG_OK;
}

size_t gguf_writer_current_tensor(const gguf_writer *w) { return w ? w->cur : 0; }
uint64_t gguf_writer_bytes_written(const gguf_writer *w) { return w ? w->written : 0; }

ig_status gguf_writer_finish(gguf_writer *w) {
    if (!w) return ig_fail(IG_ERR_INVALID_ARG, "gguf_writer_finish: NULL argument");
    if (!w->begun) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: nothing written yet");
    if (w->failed) return ig_fail(IG_ERR_INVALID_ARG, "gguf writer: an earlier call failed");
    if (w->cur < w->n_tensors)
        return ig_fail(IG_ERR_INVALID_ARG,
                       "gguf writer: tensor '%s' is incomplete (%llu bytes missing)",
                       w->tensors[w->cur].name, (unsigned long long)w->cur_left);
    errno = 0;
    if (fflush(w->fp) != 0) {
        int e = errno;
        w->failed = true;
        return ig_fail(IG_ERR_IO, "gguf writer: flush failed: %s", e ? strerror(e) : "I/O error");
    }
    if (w->written != gguf_writer_file_size(w))
        return ig_fail(IG_ERR_INTERNAL, "gguf writer: wrote %llu bytes, expected %llu",
                       (unsigned long long)w->written,
                       (unsigned long long)gguf_writer_file_size(w));
    w->finished = true;
    return IG_OK;
}
