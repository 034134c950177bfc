/* GGUF v2/v3 reader: parses the header, metadata and tensor table of a
 * memory-mapped file without copying tensor data. Every count, offset and
 * size is checked against the file size. */
#ifndef IG_GGUF_H
#define IG_GGUF_H

#include "core/util.h"
#include "model/tensor.h"

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

typedef struct gguf_str {
    const char *ptr; /* inside the mapping: NOT NUL-terminated */
    size_t len;
} gguf_str;

typedef struct gguf_kv {
    char *key;       /* owned, NUL-terminated */
    gguf_type type;
    union {
        uint64_t u64; /* any unsigned integer or bool */
        int64_t i64;  /* any signed integer */
        double f64;   /* float32 or float64 */
        gguf_str str;
    } v;
    /* arrays: element type, count, and either raw element data (numeric
     * arrays, little-endian, inside the mapping) or a parsed string list */
    gguf_type arr_type;
    uint64_t arr_count;
    const void *arr_data;
    gguf_str *arr_strs; /* owned; set when arr_type == GGUF_TYPE_STRING */
} gguf_kv;

typedef struct gguf_file {
    ig_mapped_file map; /* unmapped by gguf_close when owned */
    bool owns_map;
    uint32_t version;
    size_t alignment;
    gguf_kv *kv;
    size_t n_kv;
    ig_tensor_table tensors;
    size_t data_offset; /* start of the tensor data section */
} gguf_file;

/* Parse a GGUF image already in memory (not owned). */
ig_status gguf_parse(const uint8_t *data, size_t size, gguf_file **out);
/* Map and parse a file. */
ig_status gguf_open(const char *path, gguf_file **out);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
/* Typed getters: false when absent or of an incompatible type. Integer
 * getters accept any integer type whose value fits. */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array getter: element type must match exactly. For numeric arrays *data
 * is the raw little-endian element data inside the mapping (it may be
 * unaligned: read it with memcpy or the element getters below); for
 * GGUF_TYPE_STRING arrays *data is the parsed `const gguf_str *` list. */
bool gguf_get_arr(const gguf_file *f, const char *key, gguf_type elem_type, const void **data,
                  uint64_t *count);
/* Element i of a numeric array kv: any integer or bool element type into
 * an int64 (false if out of range or not an integer array), or f32/f64
 * into a double. */
bool gguf_arr_get_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_get_f64(const gguf_kv *kv, uint64_t i, double *out);
const char *gguf_type_name(gguf_type t);

#endif
