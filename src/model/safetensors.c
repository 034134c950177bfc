/* safetensors reader: u64 LE header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [b, e]}, "__metadata__": {...}},
 * then the data; offsets are relative to byte 8 + N. The file is untrusted:
 * header length, offsets and sizes are all checked against the file. */
#include "model/hf.h"

#include "core/json.h"

#include <stdlib.h>
#include <string.h>

/* A header larger than this is not a model header (real ones are < 1 MB). */
#define ST_MAX_HEADER ((size_t)100 * 1024 * 1024)

static bool st_dtype(const char *s, ig_dtype *type, size_t *elem_size) {
    if (!strcmp(s, "F32")) {
        *type = IG_TYPE_F32;
        *elem_size = 4;
    } else if (!strcmp(s, "F16")) {
        *type = IG_TYPE_F16;
        *elem_size = 2;
    } else if (!strcmp(s, "BF16")) {
        *type = IG_TYPE_BF16;
        *elem_size = 2;
    } else {
        return false;
    }
    return true;
}

/* A JSON integer in [0, max]. */
static bool json_to_u64(const ig_json *v, uint64_t max, uint64_t *out) {
    if (ig_json_is_integer(v)) {
        long long i = ig_json_int(v);
        if (i < 0 || (uint64_t)i > max) return false;
        *out = (uint64_t)i;
        return true;
    }
    return false;
}

static ig_status parse_entry(const char *name, const ig_json *obj, const uint8_t *base,
                             size_t data_size,
                             ig_tensor *t) {
    if (!ig_json_is_object(obj))
        return ig_fail(IG_ERR_FORMAT, "safetensors: entry '%s' is not an object", name);
    const ig_json *jd = ig_json_get(obj, "dtype");
    const ig_json *js = ig_json_get(obj, "shape");
    const ig_json *jo = ig_json_get(obj, "data_offsets");
    if (!ig_json_is_string(jd))
        return ig_fail(IG_ERR_FORMAT, "safetensors: tensor '%s' has no string \"dtype\"", name);
    if (!ig_json_is_array(js))
        return ig_fail(IG_ERR_FORMAT, "safetensors: tensor '%s' has no array \"shape\"", name);
    if (!ig_json_is_array(jo) || ig_json_size(jo) != 2)
        return ig_fail(IG_ERR_FORMAT,
                       "safetensors: tensor '%s' has no two-element array \"data_offsets\"", name);
    size_t esize;
    if (!st_dtype(ig_json_str(jd), &t->type, &esize))
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "safetensors: tensor '%s' has unsupported dtype %s (only F32, F16, BF16)",
                       name, ig_json_str(jd));
    size_t nd = ig_json_size(js);
    if (nd > IG_MAX_DIMS)
        return ig_fail(IG_ERR_UNSUPPORTED, "safetensors: tensor '%s' has %zu dimensions (max %d)",
                       name, nd, IG_MAX_DIMS);
    for (int d = 0; d < IG_MAX_DIMS; d++) t->ne[d] = 1;
    t->n_dims = nd ? (int)nd : 1; /* a scalar is one element */
    uint64_t total = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t dim;
        if (!json_to_u64(ig_json_at(js, i), (uint64_t)INT64_MAX, &dim))
            return ig_fail(IG_ERR_FORMAT,
                           "safetensors: tensor '%s' shape[%zu] is not a non-negative integer",
                           name, i);
        if (dim == 0)
            return ig_fail(IG_ERR_UNSUPPORTED, "safetensors: tensor '%s' is empty (shape[%zu] = 0)",
                           name, i);
        if (__builtin_mul_overflow(total, dim, &total) || total > (uint64_t)INT64_MAX)
            return ig_fail(IG_ERR_FORMAT, "safetensors: tensor '%s' element count overflows", name);
        /* HF shapes are row-major [.., out, in]; GGUF order is reversed. */
        t->ne[nd - 1 - i] = (int64_t)dim;
    }
    uint64_t b, e;
    if (!json_to_u64(ig_json_at(jo, 0), UINT64_MAX >> 1, &b) ||
        !json_to_u64(ig_json_at(jo, 1), UINT64_MAX >> 1, &e))
        return ig_fail(IG_ERR_FORMAT,
                       "safetensors: tensor '%s' data_offsets are not non-negative integers", name);
    if (b > e || e > data_size)
        return ig_fail(IG_ERR_FORMAT,
                       "safetensors: tensor '%s' data_offsets [%llu, %llu] lie outside the %zu "
                       "data bytes",
                       name, (unsigned long long)b, (unsigned long long)e, data_size);
    size_t want;
    if (total > SIZE_MAX || !ig_size_mul((size_t)total, esize, &want) || want != e - b)
        return ig_fail(IG_ERR_FORMAT,
                       "safetensors: tensor '%s' has %llu bytes but its shape and dtype need "
                       "%llu x %zu",
                       name, (unsigned long long)(e - b), (unsigned long long)total, esize);
    t->nbytes = (size_t)(e - b);
    t->data = base + b;
    t->name = ig_strdup(name);
    return t->name ? IG_OK : IG_ERR_NO_MEMORY;
}

static ig_status parse(const uint8_t *data, size_t size, st_file *f) {
    if (size < 8)
        return ig_fail(IG_ERR_FORMAT, "safetensors: file of %zu bytes is too short for a header",
                       size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | data[i];
    if (n > size - 8)
        return ig_fail(IG_ERR_FORMAT,
                       "safetensors: header length %llu exceeds the %zu bytes after it",
                       (unsigned long long)n, size - 8);
    if (n > ST_MAX_HEADER)
        return ig_fail(IG_ERR_FORMAT, "safetensors: header length %llu is implausibly large",
                       (unsigned long long)n);
    ig_json_error jerr;
    ig_json_doc *doc =
        ig_json_parse((const char *)data + 8, (size_t)n, IG_JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return ig_fail(ig_json_error_status(&jerr), "safetensors: bad JSON header (line %d col %d): %s",
                       jerr.line, jerr.column, jerr.text);
    const ig_json *root = ig_json_root(doc);
    if (!ig_json_is_object(root)) {
        ig_json_free(doc);
        return ig_fail(IG_ERR_FORMAT, "safetensors: JSON header is not an object");
    }
    size_t cap = ig_json_size(root);
    f->tensors.items = ig_calloc_array(cap, sizeof *f->tensors.items);
    if (!f->tensors.items) {
        ig_json_free(doc);
        return IG_ERR_NO_MEMORY;
    }
    const uint8_t *base = data + 8 + n;
    size_t data_size = size - 8 - (size_t)n;
    ig_status st = IG_OK;
    for (size_t i = 0; i < cap; i++) {
        const ig_json *val = ig_json_at(root, i);
        const char *key = val->key;
        if (!strcmp(key, "__metadata__")) continue;
        if (!*key) {
            st = ig_fail(IG_ERR_FORMAT, "safetensors: tensor with an empty name");
            break;
        }
        st = parse_entry(key, val, base, data_size, &f->tensors.items[f->tensors.count]);
        if (st != IG_OK) {
            /* parse_entry sets the name last, so nothing leaks. */
            break;
        }
        f->tensors.count++;
    }
    ig_json_free(doc);
    return st;
}

ig_status st_parse(const uint8_t *data, size_t size, st_file **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "st_parse: out is NULL");
    *out = NULL;
    if (!data && size) return ig_fail(IG_ERR_INVALID_ARG, "st_parse: data is NULL");
    st_file *f = ig_calloc_array(1, sizeof *f);
    if (!f) return IG_ERR_NO_MEMORY;
    f->map.data = data;
    f->map.size = size;
    ig_status st = parse(data, size, f);
    if (st != IG_OK) {
        st_close(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

ig_status st_open(const char *path, st_file **out) {
    if (!out || !path) return ig_fail(IG_ERR_INVALID_ARG, "st_open: NULL argument");
    *out = NULL;
    ig_mapped_file mf;
    IG_TRY(ig_file_map(path, &mf));
    st_file *f;
    ig_status st = st_parse(mf.data, mf.size, &f);
    if (st != IG_OK) {
        ig_file_unmap(&mf);
        return ig_fail_wrap(st, "%s", path);
    }
    f->owns_map = true;
    *out = f;
    return IG_OK;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->tensors.count; i++) free(f->tensors.items[i].name);
    free(f->tensors.items);
    if (f->owns_map) ig_file_unmap(&f->map);
    free(f);
}
