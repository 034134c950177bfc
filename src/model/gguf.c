/* GGUF v2/v3 reader. The file is untrusted: every read is bounds-checked
 * against the image, every count is bounded by what the remaining bytes
 * could hold before anything is allocated, and every size is computed with
 * overflow checks. Tensor data is never copied. */
#include "model/gguf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
/* Longest key or tensor name we accept (ggml itself uses 64 for names). */
#define GGUF_MAX_NAME 4096

typedef struct reader {
    const uint8_t *data;
    size_t size;
    size_t pos;
} reader;

static size_t rd_left(const reader *r) { return r->size - r->pos; }

static ig_status rd_bytes(reader *r, size_t n, const uint8_t **out, const char *what) {
    *out = r->data + r->pos; /* never read on failure, but keeps it defined */
    if (n > rd_left(r))
        return ig_fail(IG_ERR_FORMAT, "gguf: truncated file reading %s (need %zu bytes at offset %zu, "
                                      "%zu left)",
                       what, n, r->pos, rd_left(r));
    r->pos += n;
    return IG_OK;
}

static uint64_t le_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static ig_status rd_u32(reader *r, uint32_t *v, const char *what) {
    const uint8_t *p;
    IG_TRY(rd_bytes(r, 4, &p, what));
    *v = le_u32(p);
    return IG_OK;
}

static ig_status rd_u64(reader *r, uint64_t *v, const char *what) {
    const uint8_t *p;
    IG_TRY(rd_bytes(r, 8, &p, what));
    *v = le_u64(p);
    return IG_OK;
}

static ig_status rd_str(reader *r, gguf_str *s, const char *what) {
    uint64_t len;
    s->ptr = NULL;
    s->len = 0;
    IG_TRY(rd_u64(r, &len, what));
    if (len > rd_left(r))
        return ig_fail(IG_ERR_FORMAT,
                       "gguf: %s length %llu at offset %zu exceeds the %zu bytes left in the file",
                       what, (unsigned long long)len, r->pos - 8, rd_left(r));
    const uint8_t *p;
    IG_TRY(rd_bytes(r, (size_t)len, &p, what));
    s->ptr = (const char *)p;
    s->len = (size_t)len;
    return IG_OK;
}

/* A key or tensor name: non-empty, bounded, no embedded NUL; returned as an
 * owned C string. */
static ig_status rd_name(reader *r, char **out, const char *what) {
    gguf_str s;
    *out = NULL;
    IG_TRY(rd_str(r, &s, what));
    if (s.len == 0) return ig_fail(IG_ERR_FORMAT, "gguf: empty %s at offset %zu", what, r->pos - 8);
    if (s.len > GGUF_MAX_NAME)
        return ig_fail(IG_ERR_FORMAT, "gguf: %s at offset %zu is %zu bytes long (max %d)", what,
                       r->pos - s.len - 8, s.len, GGUF_MAX_NAME);
    if (memchr(s.ptr, '\0', s.len))
        return ig_fail(IG_ERR_FORMAT, "gguf: %s at offset %zu contains a NUL byte", what,
                       r->pos - s.len - 8);
    *out = ig_strndup(s.ptr, s.len);
    return *out ? IG_OK : IG_ERR_NO_MEMORY;
}

const char *gguf_type_name(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: return "u8";
    case GGUF_TYPE_INT8: return "i8";
    case GGUF_TYPE_UINT16: return "u16";
    case GGUF_TYPE_INT16: return "i16";
    case GGUF_TYPE_UINT32: return "u32";
    case GGUF_TYPE_INT32: return "i32";
    case GGUF_TYPE_FLOAT32: return "f32";
    case GGUF_TYPE_BOOL: return "bool";
    case GGUF_TYPE_STRING: return "string";
    case GGUF_TYPE_ARRAY: return "array";
    case GGUF_TYPE_UINT64: return "u64";
    case GGUF_TYPE_INT64: return "i64";
    case GGUF_TYPE_FLOAT64: return "f64";
    }
    return "unknown";
}

/* Size of a fixed-size scalar type; 0 for string/array/unknown. */
static size_t scalar_size(uint32_t t) {
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

static bool type_is_unsigned(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool type_is_signed(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* Decodes one little-endian scalar of type t at p into kv->v. */
static void decode_scalar(gguf_type t, const uint8_t *p, gguf_kv *kv) {
    switch (t) {
    case GGUF_TYPE_UINT8: kv->v.u64 = p[0]; break;
    case GGUF_TYPE_BOOL: kv->v.u64 = p[0] != 0; break;
    case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: kv->v.u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_TYPE_INT16: kv->v.i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_TYPE_UINT32: kv->v.u64 = le_u32(p); break;
    case GGUF_TYPE_INT32: kv->v.i64 = (int32_t)le_u32(p); break;
    case GGUF_TYPE_UINT64: kv->v.u64 = le_u64(p); break;
    case GGUF_TYPE_INT64: kv->v.i64 = (int64_t)le_u64(p); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t u = le_u32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        kv->v.f64 = f;
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        uint64_t u = le_u64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        kv->v.f64 = d;
        break;
    }
    default: break;
    }
}

static ig_status read_value(reader *r, gguf_kv *kv) {
    uint32_t t;
    IG_TRY(rd_u32(r, &t, "metadata value type"));
    if (t > GGUF_TYPE_FLOAT64)
        return ig_fail(IG_ERR_FORMAT, "gguf: key '%s' has unknown value type %u", kv->key, t);
    kv->type = (gguf_type)t;
    if (t == GGUF_TYPE_STRING) return rd_str(r, &kv->v.str, "string value");
    if (t != GGUF_TYPE_ARRAY) {
        const uint8_t *p;
        IG_TRY(rd_bytes(r, scalar_size(t), &p, "metadata value"));
        decode_scalar(kv->type, p, kv);
        return IG_OK;
    }
    uint32_t et;
    uint64_t n;
    IG_TRY(rd_u32(r, &et, "array element type"));
    IG_TRY(rd_u64(r, &n, "array length"));
    if (et == GGUF_TYPE_ARRAY)
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: key '%s' is a nested array (not supported)",
                       kv->key);
    if (et > GGUF_TYPE_FLOAT64)
        return ig_fail(IG_ERR_FORMAT, "gguf: key '%s' is an array of unknown type %u", kv->key, et);
    kv->arr_type = (gguf_type)et;
    /* Each element takes at least its scalar size (8 bytes for a string's
     * length), so the count is bounded by the bytes left. */
    size_t min_elem = et == GGUF_TYPE_STRING ? 8 : scalar_size(et);
    if (n > rd_left(r) / min_elem)
        return ig_fail(IG_ERR_FORMAT,
                       "gguf: key '%s': array of %llu %s elements cannot fit in the %zu bytes left",
                       kv->key, (unsigned long long)n, gguf_type_name(kv->arr_type), rd_left(r));
    kv->arr_count = n;
    kv->arr_data = r->data + r->pos;
    if (et != GGUF_TYPE_STRING) {
        const uint8_t *p;
        return rd_bytes(r, (size_t)n * min_elem, &p, "array data");
    }
    kv->arr_strs = ig_calloc_array((size_t)n, sizeof *kv->arr_strs);
    if (!kv->arr_strs) return IG_ERR_NO_MEMORY;
    for (uint64_t i = 0; i < n; i++) {
        ig_status st = rd_str(r, &kv->arr_strs[i], "array string");
        if (st != IG_OK)
            return ig_fail_wrap(st, "gguf: key '%s' element %llu", kv->key, (unsigned long long)i);
    }
    return IG_OK;
}

/* Duplicate detection by sorting pointers to names. */
static int cmp_cstr_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ig_status check_unique(const char **names, size_t n, const char *what) {
    if (n < 2) return IG_OK;
    qsort(names, n, sizeof *names, cmp_cstr_ptr);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i]))
            return ig_fail(IG_ERR_FORMAT, "gguf: duplicate %s '%s'", what, names[i]);
    return IG_OK;
}

static ig_status read_tensor_info(reader *r, gguf_file *f, size_t idx, uint64_t *offset) {
    ig_tensor *t = &f->tensors.items[idx];
    IG_TRY(rd_name(r, &t->name, "tensor name"));
    uint32_t n_dims;
    IG_TRY(rd_u32(r, &n_dims, "tensor n_dims"));
    if (n_dims < 1 || n_dims > IG_MAX_DIMS)
        return ig_fail(IG_ERR_FORMAT, "gguf: tensor '%s' has %u dimensions (must be 1..%d)",
                       t->name, n_dims, IG_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < IG_MAX_DIMS; d++) t->ne[d] = 1;
    uint64_t total = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        IG_TRY(rd_u64(r, &ne, "tensor dimension"));
        if (ne < 1 || ne > (uint64_t)INT64_MAX)
            return ig_fail(IG_ERR_FORMAT, "gguf: tensor '%s' dimension %u is %llu", t->name, d,
                           (unsigned long long)ne);
        if (__builtin_mul_overflow(total, ne, &total) || total > (uint64_t)INT64_MAX)
            return ig_fail(IG_ERR_FORMAT, "gguf: tensor '%s' element count overflows", t->name);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    IG_TRY(rd_u32(r, &type, "tensor type"));
    if (!ig_dtype_known(type))
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: tensor '%s' has unsupported ggml type %u", t->name,
                       type);
    t->type = (ig_dtype)type;
    IG_TRY(rd_u64(r, offset, "tensor offset"));
    if (*offset % f->alignment)
        return ig_fail(IG_ERR_FORMAT,
                       "gguf: tensor '%s' offset %llu is not a multiple of the alignment %zu",
                       t->name, (unsigned long long)*offset, f->alignment);
    /* Bytes: whole blocks along ne[0], times the number of rows. */
    size_t blk = ig_dtype_block_elems(t->type), blk_bytes = ig_dtype_block_bytes(t->type);
    if (blk == 0 || blk_bytes == 0)
        return ig_fail(IG_ERR_INTERNAL, "gguf: no block size for type %u", type);
    if ((uint64_t)t->ne[0] % blk)
        return ig_fail(IG_ERR_FORMAT,
                       "gguf: tensor '%s' row length %lld is not a multiple of the %s block size %zu",
                       t->name, (long long)t->ne[0], ig_dtype_name(t->type), blk);
    uint64_t rows = total / (uint64_t)t->ne[0];
    size_t row_bytes, nbytes;
    if (!ig_size_mul((size_t)((uint64_t)t->ne[0] / blk), blk_bytes, &row_bytes) ||
        rows > SIZE_MAX || !ig_size_mul(row_bytes, (size_t)rows, &nbytes))
        return ig_fail(IG_ERR_FORMAT, "gguf: tensor '%s' byte size overflows", t->name);
    t->nbytes = nbytes;
    return IG_OK;
}

static ig_status parse(const uint8_t *data, size_t size, gguf_file *f) {
    reader r = {data, size, 0};
    const uint8_t *magic;
    IG_TRY(rd_bytes(&r, 4, &magic, "magic"));
    if (memcmp(magic, GGUF_MAGIC, 4))
        return ig_fail(IG_ERR_FORMAT, "not a GGUF file (magic %02x %02x %02x %02x)", magic[0],
                       magic[1], magic[2], magic[3]);
    IG_TRY(rd_u32(&r, &f->version, "version"));
    if (f->version == 1)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "gguf: version 1 files are not supported (only v2 and v3); re-convert the "
                       "model with a current llama.cpp");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0 && (f->version >> 16) != 0)
            return ig_fail(IG_ERR_UNSUPPORTED,
                           "gguf: version field 0x%08x looks big-endian; only little-endian GGUF "
                           "is supported",
                           f->version);
        return ig_fail(IG_ERR_UNSUPPORTED, "gguf: unsupported version %u (only v2 and v3)",
                       f->version);
    }
    uint64_t n_tensors, n_kv;
    IG_TRY(rd_u64(&r, &n_tensors, "tensor count"));
    IG_TRY(rd_u64(&r, &n_kv, "metadata count"));
    /* A key/value pair takes at least 8 (key length) + 1 (key) + 4 (type) +
     * 1 (value) bytes; a tensor info at least 8 + 1 + 4 + 8 + 4 + 8. */
    if (n_kv > rd_left(&r) / 14)
        return ig_fail(IG_ERR_FORMAT, "gguf: metadata count %llu cannot fit in a %zu-byte file",
                       (unsigned long long)n_kv, size);
    if (n_tensors > rd_left(&r) / 33)
        return ig_fail(IG_ERR_FORMAT, "gguf: tensor count %llu cannot fit in a %zu-byte file",
                       (unsigned long long)n_tensors, size);

    f->kv = ig_calloc_array((size_t)n_kv, sizeof *f->kv);
    if (!f->kv) return IG_ERR_NO_MEMORY;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        f->n_kv = (size_t)i + 1; /* so gguf_close frees what was read */
        ig_status st = rd_name(&r, &kv->key, "metadata key");
        if (st == IG_OK) st = read_value(&r, kv);
        if (st != IG_OK) return ig_fail_wrap(st, "gguf: metadata entry %llu", (unsigned long long)i);
    }
    {
        const char **names = ig_calloc_array(f->n_kv, sizeof *names);
        if (!names) return IG_ERR_NO_MEMORY;
        for (size_t i = 0; i < f->n_kv; i++) names[i] = f->kv[i].key;
        ig_status st = check_unique(names, f->n_kv, "metadata key");
        free(names);
        IG_TRY(st);
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return ig_fail(IG_ERR_FORMAT, "gguf: general.alignment has type %s (must be u32)",
                           gguf_type_name(al->type));
        uint64_t a = al->v.u64;
        if (a == 0 || (a & (a - 1)))
            return ig_fail(IG_ERR_FORMAT,
                           "gguf: general.alignment %llu is not a nonzero power of two",
                           (unsigned long long)a);
        f->alignment = (size_t)a;
    }

    f->tensors.items = ig_calloc_array((size_t)n_tensors, sizeof *f->tensors.items);
    if (!f->tensors.items) return IG_ERR_NO_MEMORY;
    uint64_t *offsets = ig_calloc_array((size_t)n_tensors, sizeof *offsets);
    if (!offsets) return IG_ERR_NO_MEMORY;
    ig_status st = IG_OK;
    for (uint64_t i = 0; i < n_tensors && st == IG_OK; i++) {
        f->tensors.count = (size_t)i + 1;
        st = read_tensor_info(&r, f, (size_t)i, &offsets[i]);
        if (st != IG_OK) st = ig_fail_wrap(st, "gguf: tensor info %llu", (unsigned long long)i);
    }
    if (st == IG_OK) {
        const char **names = ig_calloc_array(f->tensors.count, sizeof *names);
        if (!names) st = IG_ERR_NO_MEMORY;
        else {
            for (size_t i = 0; i < f->tensors.count; i++) names[i] = f->tensors.items[i].name;
            st = check_unique(names, f->tensors.count, "tensor name");
            free(names);
        }
    }
    if (st == IG_OK && !ig_size_align(r.pos, f->alignment, &f->data_offset))
        st = ig_fail(IG_ERR_FORMAT, "gguf: data offset overflows");
    for (size_t i = 0; i < f->tensors.count && st == IG_OK; i++) {
        ig_tensor *t = &f->tensors.items[i];
        size_t begin, end;
        if (offsets[i] > SIZE_MAX || !ig_size_add(f->data_offset, (size_t)offsets[i], &begin) ||
            !ig_size_add(begin, t->nbytes, &end) || end > size) {
            st = ig_fail(IG_ERR_FORMAT,
                         "gguf: tensor '%s' data [%llu, +%zu) at data offset %zu lies outside the "
                         "%zu-byte file",
                         t->name, (unsigned long long)offsets[i], t->nbytes, f->data_offset, size);
            break;
        }
        t->data = data + begin;
    }
    free(offsets);
    return st;
}

ig_status gguf_parse(const uint8_t *data, size_t size, gguf_file **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "gguf_parse: out is NULL");
    *out = NULL;
    if (!data && size) return ig_fail(IG_ERR_INVALID_ARG, "gguf_parse: data is NULL");
    gguf_file *f = ig_calloc_array(1, sizeof *f);
    if (!f) return IG_ERR_NO_MEMORY;
    f->map.data = data;
    f->map.size = size;
    f->owns_map = false;
    ig_status st = parse(data ? data : (const uint8_t *)"", size, f);
    if (st != IG_OK) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

ig_status gguf_open(const char *path, gguf_file **out) {
    if (!out || !path) return ig_fail(IG_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    ig_mapped_file mf;
    IG_TRY(ig_file_map(path, &mf));
    gguf_file *f;
    ig_status st = gguf_parse(mf.data, mf.size, &f);
    if (st != IG_OK) {
        ig_file_unmap(&mf);
        return ig_fail_wrap(st, "%s", path);
    }
    f->owns_map = true;
    *out = f;
    return IG_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].arr_strs);
    }
    free(f->kv);
    for (size_t i = 0; i < f->tensors.count; i++) free(f->tensors.items[i].name);
    free(f->tensors.items);
    if (f->owns_map) ig_file_unmap(&f->map);
    free(f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && !strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    if (type_is_signed(kv->type)) {
        *out = kv->v.i64;
        return true;
    }
    if (type_is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->v.u64;
        return true;
    }
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t v;
    if (!gguf_get_i64(f, key, &v) || v < 0 || v > (int64_t)UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64)) return false;
    *out = (float)kv->v.f64;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return false;
    *out = kv->v.u64 != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return false;
    *out = kv->v.str;
    return true;
}

bool gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type, const void **data,
                  uint64_t *count) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != elem_type) return false;
    *data = elem_type == GGUF_TYPE_STRING ? (const void *)kv->arr_strs : kv->arr_data;
    *count = kv->arr_count;
    return true;
}

bool gguf_arr_get_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_TYPE_ARRAY || i >= kv->arr_count) return false;
    if (!type_is_signed(kv->arr_type) && !type_is_unsigned(kv->arr_type) &&
        kv->arr_type != GGUF_TYPE_BOOL)
        return false;
    size_t sz = scalar_size(kv->arr_type);
    gguf_kv tmp;
    memset(&tmp, 0, sizeof tmp);
    decode_scalar(kv->arr_type, (const uint8_t *)kv->arr_data + i * sz, &tmp);
    if (type_is_signed(kv->arr_type)) *out = tmp.v.i64;
    else if (tmp.v.u64 > (uint64_t)INT64_MAX) return false;
    else *out = (int64_t)tmp.v.u64;
    return true;
}

bool gguf_arr_get_f64(const gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != GGUF_TYPE_ARRAY || i >= kv->arr_count) return false;
    if (kv->arr_type != GGUF_TYPE_FLOAT32 && kv->arr_type != GGUF_TYPE_FLOAT64) return false;
    gguf_kv tmp;
    memset(&tmp, 0, sizeof tmp);
    decode_scalar(kv->arr_type,
                  (const uint8_t *)kv->arr_data + i * scalar_size(kv->arr_type), &tmp);
    *out = tmp.v.f64;
    return true;
}
