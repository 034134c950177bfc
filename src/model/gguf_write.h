/* Streaming GGUF v3 writer. Metadata and tensor infos are collected first
 * (they are small: serialized into memory as they are added); then
 * gguf_writer_begin writes the header, metadata, tensor infos and the
 * padding up to the data section to a FILE*, and the tensor data follows in
 * the order the tensors were added, in chunks of any size: the writer pads
 * every tensor to the alignment as ggml does and never holds tensor data.
 *
 *   gguf_writer *w;  gguf_writer_create(0, &w);
 *   gguf_writer_add_str(w, "general.architecture", "gemma3");
 *   gguf_writer_add_tensor(w, "a.weight", 2, ne, IG_TYPE_F16);
 *   gguf_writer_begin(w, fp);
 *   gguf_writer_write(w, bytes, n);  ... until every tensor is complete
 *   gguf_writer_finish(w);           (flushes; the caller closes fp)
 *
 * Keys and tensor names must be unique, non-empty and free of NUL bytes;
 * tensor names are limited to 63 bytes (ggml's GGML_MAX_NAME). Numbers are
 * written little-endian. Every I/O error (short write, disk full) is
 * reported as IG_ERR_IO with the system's message. */
#ifndef IG_GGUF_WRITE_H
#define IG_GGUF_WRITE_H

#include "model/gguf.h"

#include <stdio.h>

#define GGUF_WRITER_MAX_NAME 63

typedef struct gguf_writer gguf_writer;

/* alignment: a power of two (0 = GGUF's default 32). A non-default
 * alignment is recorded as general.alignment (u32) automatically. */
ig_status gguf_writer_create(size_t alignment, gguf_writer **out);
void gguf_writer_free(gguf_writer *w);

/* ---- metadata (only before gguf_writer_begin) ---------------------------- */
ig_status gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
ig_status gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
ig_status gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
ig_status gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
ig_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
ig_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
ig_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
ig_status gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
ig_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
ig_status gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
ig_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
/* A NUL-terminated string, or len bytes (may contain anything). */
ig_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *s);
ig_status gguf_writer_add_strn(gguf_writer *w, const char *key, const char *s, size_t len);
/* A numeric (or bool) array: count elements of elem_type in host order
 * (bool: one byte each, 0 or 1). */
ig_status gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_type elem_type,
                              const void *data, uint64_t count);
/* A string array (each string len bytes at ptr). */
ig_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const gguf_str *strs,
                                  uint64_t count);
/* Copies one key/value read by the GGUF reader (any type, arrays included). */
ig_status gguf_writer_add_kv(gguf_writer *w, const gguf_kv *kv);
/* True when key has been added. */
bool gguf_writer_has_key(const gguf_writer *w, const char *key);

/* ---- tensors (only before gguf_writer_begin) ----------------------------- */
/* ne[0] is the contiguous dimension and must be a whole number of blocks of
 * type; 1 <= n_dims <= 4, every ne >= 1. */
ig_status gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                                 ig_dtype type);
size_t gguf_writer_n_tensors(const gguf_writer *w);
size_t gguf_writer_n_kv(const gguf_writer *w);
/* Data bytes of tensor i (unpadded); 0 when out of range. */
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i);
/* Size of the whole file as it will be written (valid any time: it grows
 * as metadata and tensors are added). */
uint64_t gguf_writer_file_size(const gguf_writer *w);

/* ---- output -------------------------------------------------------------- */
/* Writes header, metadata, tensor infos and padding. fp stays the caller's. */
ig_status gguf_writer_begin(gguf_writer *w, FILE *fp);
/* Appends n bytes of tensor data: they continue the current tensor and run
 * on into the next ones (the padding between tensors is inserted). Writing
 * past the last tensor is IG_ERR_INVALID_ARG. */
ig_status gguf_writer_write(gguf_writer *w, const void *data, size_t n);
/* Index of the tensor the next byte belongs to (== n_tensors when done). */
size_t gguf_writer_current_tensor(const gguf_writer *w);
/* Bytes written to fp so far. */
uint64_t gguf_writer_bytes_written(const gguf_writer *w);
/* Checks that every tensor is complete and flushes fp. */
ig_status gguf_writer_finish(gguf_writer *w);

#endif
