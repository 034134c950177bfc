/* The streaming GGUF writer (round trips through our reader: every metadata
 * type, arrays, alignment, tensor data, I/O errors) and the synthetic model
 * generator (the Q4_K_M recipe, sizes, determinism, and 2-layer 270M files
 * of each type that load and give finite logits). */
#include "test.h"

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- temp files ----------------------------------------------------------- */

static char g_dir[64];

/* Every test removes its files; the (then empty) directory goes at exit. */
static void remove_tmp_dir(void) {
    if (g_dir[0]) rmdir(g_dir);
}

static const char *tmp_dir(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/ignis-synth-test-XXXXXX");
        if (!mkdtemp(g_dir)) {
            g_dir[0] = '\0';
            return NULL;
        }
        atexit(remove_tmp_dir);
    }
    return g_dir;
}

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmp_dir() ? tmp_dir() : "/tmp", name);
}

/* ---- writer round trip ---------------------------------------------------- */

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

typedef struct rt_tensor {
    const char *name;
    int n_dims;
    int64_t ne[4];
    ig_dtype type;
} rt_tensor;

static const rt_tensor k_rt_tensors[] = {
    {"a.f32", 1, {5, 1, 1, 1}, IG_TYPE_F32},          /* 20 bytes: padded */
    {"b.f16", 2, {3, 7, 1, 1}, IG_TYPE_F16},          /* 42 bytes */
    {"c.q8_0", 2, {64, 3, 1, 1}, IG_TYPE_Q8_0},       /* 204 bytes */
    {"d.q4_k", 2, {256, 2, 1, 1}, IG_TYPE_Q4_K},      /* 288 bytes */
    {"e.q6_k.3d", 3, {256, 2, 2, 1}, IG_TYPE_Q6_K},   /* 840 bytes */
    {"f.bf16.4d", 4, {2, 1, 3, 2}, IG_TYPE_BF16},     /* 24 bytes */
    {"g.q5_0", 1, {32, 1, 1, 1}, IG_TYPE_Q5_0},       /* 22 bytes */
};
#define RT_NT (sizeof k_rt_tensors / sizeof k_rt_tensors[0])

/* Adds one key of every type and every array kind. */
static ig_status add_all_kv(gguf_writer *w) {
    static const uint8_t au8[] = {0, 1, 255};
    static const int8_t ai8[] = {-128, 0, 127};
    static const uint16_t au16[] = {0, 65535};
    static const int16_t ai16[] = {-32768, 32767};
    static const uint32_t au32[] = {1, 2, 0xfffffffeu};
    static const int32_t ai32[] = {INT32_MIN, -1, INT32_MAX};
    static const uint64_t au64[] = {UINT64_MAX, 0};
    static const int64_t ai64[] = {INT64_MIN, INT64_MAX};
    static const float af32[] = {1.5f, -0.0f, 3.0e38f};
    static const double af64[] = {1e-300, -2.5};
    static const uint8_t abool[] = {1, 0, 1, 1};
    static const gguf_str astr[] = {{"x", 1}, {"", 0}, {"with\0nul", 8}, {"\xe2\x96\x81", 3}};
    IG_TRY(gguf_writer_add_u8(w, "t.u8", 200));
    IG_TRY(gguf_writer_add_i8(w, "t.i8", -100));
    IG_TRY(gguf_writer_add_u16(w, "t.u16", 60000));
    IG_TRY(gguf_writer_add_i16(w, "t.i16", -30000));
    IG_TRY(gguf_writer_add_u32(w, "t.u32", 4000000000u));
    IG_TRY(gguf_writer_add_i32(w, "t.i32", -2000000000));
    IG_TRY(gguf_writer_add_u64(w, "t.u64", 0xfedcba9876543210ull));
    IG_TRY(gguf_writer_add_i64(w, "t.i64", -(int64_t)0x123456789abcll));
    IG_TRY(gguf_writer_add_f32(w, "t.f32", 0.1f));
    IG_TRY(gguf_writer_add_f64(w, "t.f64", 0.1));
    IG_TRY(gguf_writer_add_bool(w, "t.bool", true));
    IG_TRY(gguf_writer_add_str(w, "t.str", "hello"));
    IG_TRY(gguf_writer_add_strn(w, "t.str0", "a\0b", 3));
    IG_TRY(gguf_writer_add_str(w, "t.empty", ""));
    IG_TRY(gguf_writer_add_arr(w, "a.u8", GGUF_TYPE_UINT8, au8, 3));
    IG_TRY(gguf_writer_add_arr(w, "a.i8", GGUF_TYPE_INT8, ai8, 3));
    IG_TRY(gguf_writer_add_arr(w, "a.u16", GGUF_TYPE_UINT16, au16, 2));
    IG_TRY(gguf_writer_add_arr(w, "a.i16", GGUF_TYPE_INT16, ai16, 2));
    IG_TRY(gguf_writer_add_arr(w, "a.u32", GGUF_TYPE_UINT32, au32, 3));
    IG_TRY(gguf_writer_add_arr(w, "a.i32", GGUF_TYPE_INT32, ai32, 3));
    IG_TRY(gguf_writer_add_arr(w, "a.u64", GGUF_TYPE_UINT64, au64, 2));
    IG_TRY(gguf_writer_add_arr(w, "a.i64", GGUF_TYPE_INT64, ai64, 2));
    IG_TRY(gguf_writer_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, af32, 3));
    IG_TRY(gguf_writer_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, af64, 2));
    IG_TRY(gguf_writer_add_arr(w, "a.bool", GGUF_TYPE_BOOL, abool, 4));
    IG_TRY(gguf_writer_add_arr(w, "a.empty", GGUF_TYPE_INT32, NULL, 0));
    IG_TRY(gguf_writer_add_arr_str(w, "a.str", astr, 4));
    IG_TRY(gguf_writer_add_arr_str(w, "a.str_empty", NULL, 0));
    return IG_OK;
}
#define ALL_KV_COUNT 28

/* Checks the keys add_all_kv wrote. */
static void check_all_kv(const gguf_file *f) {
    int64_t i;
    uint32_t u32;
    float f32;
    bool b;
    gguf_str s;
    const gguf_kv *kv;
    REQUIRE((kv = gguf_find(f, "t.u8")) && kv->type == GGUF_TYPE_UINT8 && kv->v.u64 == 200);
    REQUIRE((kv = gguf_find(f, "t.i8")) && kv->type == GGUF_TYPE_INT8 && kv->v.i64 == -100);
    REQUIRE((kv = gguf_find(f, "t.u16")) && kv->type == GGUF_TYPE_UINT16 && kv->v.u64 == 60000);
    REQUIRE((kv = gguf_find(f, "t.i16")) && kv->type == GGUF_TYPE_INT16 && kv->v.i64 == -30000);
    CHECK(gguf_get_u32(f, "t.u32", &u32) && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "t.i32", &i) && i == -2000000000);
    REQUIRE((kv = gguf_find(f, "t.u64")) && kv->type == GGUF_TYPE_UINT64 &&
            kv->v.u64 == 0xfedcba9876543210ull);
    CHECK(gguf_get_i64(f, "t.i64", &i) && i == -(int64_t)0x123456789abcll);
    CHECK(gguf_get_f32(f, "t.f32", &f32) && f32 == 0.1f);
    REQUIRE((kv = gguf_find(f, "t.f64")) && kv->type == GGUF_TYPE_FLOAT64 && kv->v.f64 == 0.1);
    CHECK(gguf_get_bool(f, "t.bool", &b) && b);
    CHECK(gguf_get_str(f, "t.str", &s) && s.len == 5 && !memcmp(s.ptr, "hello", 5));
    CHECK(gguf_get_str(f, "t.str0", &s) && s.len == 3 && !memcmp(s.ptr, "a\0b", 3));
    CHECK(gguf_get_str(f, "t.empty", &s) && s.len == 0);

    const void *data;
    uint64_t n;
    REQUIRE(gguf_get_arr(f, "a.u8", GGUF_TYPE_UINT8, &data, &n) && n == 3);
    CHECK(!memcmp(data, (const uint8_t[]){0, 1, 255}, 3));
    REQUIRE((kv = gguf_find(f, "a.i8")) && kv->arr_type == GGUF_TYPE_INT8 && kv->arr_count == 3);
    CHECK(gguf_arr_get_i64(kv, 0, &i) && i == -128);
    CHECK(gguf_arr_get_i64(kv, 2, &i) && i == 127);
    REQUIRE((kv = gguf_find(f, "a.u16")) && kv->arr_type == GGUF_TYPE_UINT16);
    CHECK(gguf_arr_get_i64(kv, 1, &i) && i == 65535);
    REQUIRE((kv = gguf_find(f, "a.i16")) && kv->arr_type == GGUF_TYPE_INT16);
    CHECK(gguf_arr_get_i64(kv, 0, &i) && i == -32768);
    REQUIRE((kv = gguf_find(f, "a.u32")) && kv->arr_type == GGUF_TYPE_UINT32);
    CHECK(gguf_arr_get_i64(kv, 2, &i) && i == 0xfffffffell);
    REQUIRE((kv = gguf_find(f, "a.i32")) && kv->arr_type == GGUF_TYPE_INT32 && kv->arr_count == 3);
    CHECK(gguf_arr_get_i64(kv, 0, &i) && i == INT32_MIN);
    CHECK(gguf_arr_get_i64(kv, 2, &i) && i == INT32_MAX);
    REQUIRE((kv = gguf_find(f, "a.u64")) && kv->arr_type == GGUF_TYPE_UINT64 && kv->arr_count == 2);
    uint64_t u64;
    memcpy(&u64, kv->arr_data, 8);
    CHECK(u64 == UINT64_MAX);
    REQUIRE((kv = gguf_find(f, "a.i64")) && kv->arr_type == GGUF_TYPE_INT64);
    CHECK(gguf_arr_get_i64(kv, 0, &i) && i == INT64_MIN);
    CHECK(gguf_arr_get_i64(kv, 1, &i) && i == INT64_MAX);
    double d;
    REQUIRE((kv = gguf_find(f, "a.f32")) && kv->arr_type == GGUF_TYPE_FLOAT32 &&
            kv->arr_count == 3);
    CHECK(gguf_arr_get_f64(kv, 0, &d) && d == 1.5);
    CHECK(gguf_arr_get_f64(kv, 1, &d) && d == 0.0 && signbit(d));
    CHECK(gguf_arr_get_f64(kv, 2, &d) && d == (double)3.0e38f);
    REQUIRE((kv = gguf_find(f, "a.f64")) && kv->arr_type == GGUF_TYPE_FLOAT64);
    CHECK(gguf_arr_get_f64(kv, 0, &d) && d == 1e-300);
    REQUIRE(gguf_get_arr(f, "a.bool", GGUF_TYPE_BOOL, &data, &n) && n == 4);
    CHECK(!memcmp(data, (const uint8_t[]){1, 0, 1, 1}, 4));
    CHECK(gguf_get_arr(f, "a.empty", GGUF_TYPE_INT32, &data, &n) && n == 0);
    REQUIRE(gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &data, &n) && n == 4);
    const gguf_str *ss = data;
    CHECK(ss[0].len == 1 && ss[0].ptr[0] == 'x');
    CHECK(ss[1].len == 0);
    CHECK(ss[2].len == 8 && !memcmp(ss[2].ptr, "with\0nul", 8));
    CHECK(ss[3].len == 3 && !memcmp(ss[3].ptr, "\xe2\x96\x81", 3));
    CHECK(gguf_get_arr(f, "a.str_empty", GGUF_TYPE_STRING, &data, &n) && n == 0);
}

/* Writes the round-trip file at `align` (0 = default), feeding the data in
 * `chunk`-byte pieces that run across tensor boundaries. *data gets the
 * concatenated tensor bytes (malloc'ed). */
static ig_status write_rt(const char *path, size_t align, size_t chunk, uint8_t **data,
                          uint64_t *predicted) {
    gguf_writer *w = NULL;
    *data = NULL;
    IG_TRY(gguf_writer_create(align, &w));
    ig_status st = add_all_kv(w);
    size_t total = 0;
    for (size_t i = 0; i < RT_NT && st == IG_OK; i++) {
        const rt_tensor *t = &k_rt_tensors[i];
        st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type);
        total += (size_t)gguf_writer_tensor_bytes(w, i);
    }
    *predicted = gguf_writer_file_size(w);
    uint8_t *bytes = malloc(total);
    FILE *fp = fopen(path, "wb");
    if (st == IG_OK && (!bytes || !fp)) st = IG_ERR_IO;
    if (st == IG_OK) {
        fill_bytes(bytes, total, 1234);
        st = gguf_writer_begin(w, fp);
    }
    for (size_t off = 0; off < total && st == IG_OK; off += chunk)
        st = gguf_writer_write(w, bytes + off, IG_MIN(chunk, total - off));
    if (st == IG_OK) st = gguf_writer_finish(w);
    if (fp && fclose(fp) != 0 && st == IG_OK) st = IG_ERR_IO;
    gguf_writer_free(w);
    *data = bytes;
    return st;
}

static void check_rt(size_t align, size_t chunk) {
    char path[256];
    tmp_path(path, sizeof path, "rt.gguf");
    uint8_t *data = NULL;
    uint64_t predicted = 0;
    ig_status st = write_rt(path, align, chunk, &data, &predicted);
    CHECK_STATUS(st, IG_OK);
    gguf_file *f = NULL;
    if (st == IG_OK) st = gguf_open(path, &f);
    CHECK_STATUS(st, IG_OK);
    if (st == IG_OK) {
        size_t eff = align ? align : 32;
        CHECK_EQ_INT(f->version, 3);
        CHECK_EQ_INT(f->map.size, predicted);
        CHECK_EQ_INT(f->alignment, eff);
        CHECK_EQ_INT(f->n_kv, ALL_KV_COUNT + (align && align != 32 ? 1 : 0));
        CHECK_EQ_INT(f->data_offset % eff, 0);
        uint32_t a;
        CHECK_EQ_INT(gguf_get_u32(f, "general.alignment", &a), align && align != 32);
        /* keys in insertion order */
        CHECK(!strcmp(f->kv[align && align != 32 ? 1 : 0].key, "t.u8"));
        check_all_kv(f);
        REQUIRE(f->tensors.count == RT_NT);
        size_t off = 0;
        for (size_t i = 0; i < RT_NT; i++) {
            const rt_tensor *e = &k_rt_tensors[i];
            const ig_tensor *t = &f->tensors.items[i];
            CHECK(!strcmp(t->name, e->name));
            CHECK_EQ_INT(t->type, e->type);
            CHECK_EQ_INT(t->n_dims, e->n_dims);
            for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], e->ne[d]);
            CHECK_EQ_INT(((const uint8_t *)t->data - f->map.data - f->data_offset) % eff, 0);
            CHECK(!memcmp(t->data, data + off, t->nbytes));
            off += t->nbytes;
        }
        /* the file ends with the last tensor's padding */
        const ig_tensor *last = &f->tensors.items[RT_NT - 1];
        size_t end = (size_t)((const uint8_t *)last->data - f->map.data) + last->nbytes;
        CHECK_EQ_INT(f->map.size - end, (eff - last->nbytes % eff) % eff);
    }
    gguf_close(f);
    free(data);
    unlink(path);
}

IG_TEST(synth_writer_roundtrip_default_alignment) { check_rt(0, 7); }
IG_TEST(synth_writer_roundtrip_alignment_64_one_write) { check_rt(64, 1 << 20); }
IG_TEST(synth_writer_roundtrip_alignment_1) { check_rt(1, 13); }
IG_TEST(synth_writer_roundtrip_alignment_4096) { check_rt(4096, 1); }

/* Every kv read from a file, copied with gguf_writer_add_kv, reads back the
 * same. */
IG_TEST(synth_writer_copies_kv) {
    char a[256], b[256];
    tmp_path(a, sizeof a, "kv_a.gguf");
    tmp_path(b, sizeof b, "kv_b.gguf");
    uint8_t *data = NULL;
    uint64_t pred;
    REQUIRE_OK(write_rt(a, 0, 4096, &data, &pred));
    free(data);
    gguf_file *f = NULL;
    REQUIRE_OK(gguf_open(a, &f));
    gguf_writer *w = NULL;
    ig_status st = gguf_writer_create(0, &w);
    for (size_t i = 0; i < f->n_kv && st == IG_OK; i++) st = gguf_writer_add_kv(w, &f->kv[i]);
    CHECK_STATUS(st, IG_OK);
    CHECK_EQ_INT(gguf_writer_n_kv(w), f->n_kv);
    CHECK(gguf_writer_has_key(w, "a.str"));
    CHECK(!gguf_writer_has_key(w, "a.nope"));
    FILE *fp = fopen(b, "wb");
    REQUIRE(fp);
    if (st == IG_OK) st = gguf_writer_begin(w, fp);
    if (st == IG_OK) st = gguf_writer_finish(w); /* no tensors */
    CHECK_STATUS(st, IG_OK);
    CHECK(fclose(fp) == 0);
    gguf_writer_free(w);
    gguf_file *g = NULL;
    CHECK_STATUS(gguf_open(b, &g), IG_OK);
    if (g) {
        CHECK_EQ_INT(g->tensors.count, 0);
        check_all_kv(g);
        /* the key/value section is byte-identical: it runs from byte 24 to
         * at most 31 bytes of padding before the (empty) data section */
        CHECK_EQ_INT(g->map.size, g->data_offset);
        REQUIRE(g->data_offset > 24 + 31 && g->data_offset <= f->map.size);
        CHECK(!memcmp(g->map.data + 16, f->map.data + 16, 8)); /* kv count */
        CHECK(!memcmp(g->map.data + 24, f->map.data + 24, g->data_offset - 24 - 31));
    }
    gguf_close(g);
    gguf_close(f);
    unlink(a);
    unlink(b);
}

IG_TEST(synth_writer_rejects_misuse) {
    gguf_writer *w = NULL;
    CHECK_STATUS(gguf_writer_create(48, &w), IG_ERR_INVALID_ARG);
    CHECK(w == NULL);
    REQUIRE_OK(gguf_writer_create(0, &w));
    CHECK_STATUS(gguf_writer_add_u32(w, "k", 1), IG_OK);
    CHECK_STATUS(gguf_writer_add_u32(w, "k", 2), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_str(w, "", "x"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_str(w, NULL, "x"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_str(w, "s", NULL), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_arr(w, "arr", GGUF_TYPE_STRING, "x", 1), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_arr(w, "arr", GGUF_TYPE_BOOL, (const uint8_t[]){2}, 1),
                 IG_ERR_INVALID_ARG);
    CHECK_EQ_INT(gguf_writer_n_kv(w), 1);
    const int64_t ne_ok[2] = {32, 2}, ne_bad[2] = {33, 2}, ne_zero[2] = {32, 0};
    CHECK_STATUS(gguf_writer_add_tensor(w, "t", 2, ne_ok, IG_TYPE_Q8_0), IG_OK);
    CHECK_STATUS(gguf_writer_add_tensor(w, "t", 2, ne_ok, IG_TYPE_Q8_0), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_tensor(w, "u", 2, ne_bad, IG_TYPE_Q8_0), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_tensor(w, "u", 2, ne_zero, IG_TYPE_Q8_0), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_tensor(w, "u", 5, ne_ok, IG_TYPE_F32), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_tensor(w, "u", 2, ne_ok, (ig_dtype)3), IG_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    CHECK_STATUS(gguf_writer_add_tensor(w, longname, 2, ne_ok, IG_TYPE_F32), IG_ERR_INVALID_ARG);
    longname[63] = '\0';
    CHECK_STATUS(gguf_writer_add_tensor(w, longname, 2, ne_ok, IG_TYPE_F32), IG_OK);
    CHECK_EQ_INT(gguf_writer_n_tensors(w), 2);
    uint8_t buf[512] = {0};
    CHECK_STATUS(gguf_writer_write(w, buf, 1), IG_ERR_INVALID_ARG); /* before the header */
    char path[256];
    tmp_path(path, sizeof path, "misuse.gguf");
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp);
    CHECK_STATUS(gguf_writer_begin(w, fp), IG_OK);
    CHECK_STATUS(gguf_writer_begin(w, fp), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_u32(w, "late", 1), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_add_tensor(w, "late", 2, ne_ok, IG_TYPE_F32), IG_ERR_INVALID_ARG);
    CHECK_STATUS(gguf_writer_write(w, buf, 68), IG_OK); /* all of t */
    CHECK_EQ_INT(gguf_writer_current_tensor(w), 1);
    CHECK_STATUS(gguf_writer_finish(w), IG_ERR_INVALID_ARG); /* second is incomplete */
    CHECK_STATUS(gguf_writer_write(w, buf, 256), IG_OK);
    CHECK_STATUS(gguf_writer_write(w, buf, 1), IG_ERR_INVALID_ARG); /* past the end */
    CHECK_STATUS(gguf_writer_finish(w), IG_OK);
    CHECK_EQ_INT(gguf_writer_bytes_written(w), gguf_writer_file_size(w));
    fclose(fp);
    gguf_writer_free(w);
    gguf_writer_free(NULL);
    unlink(path);
}

/* A full disk: /dev/full fails every write with ENOSPC. */
IG_TEST(synth_writer_reports_disk_full) {
    FILE *fp = fopen("/dev/full", "wb");
    if (!fp) {
        ig_test_skip("no /dev/full");
        return;
    }
    gguf_writer *w = NULL;
    REQUIRE_OK(gguf_writer_create(0, &w));
    const int64_t ne[1] = {1 << 20};
    REQUIRE_OK(gguf_writer_add_tensor(w, "big", 1, ne, IG_TYPE_F32));
    /* buffered: the header fits stdio's buffer, the data does not */
    ig_status st = gguf_writer_begin(w, fp);
    float *data = calloc((size_t)ne[0], sizeof *data);
    REQUIRE(data);
    if (st == IG_OK) st = gguf_writer_write(w, data, (size_t)ne[0] * sizeof *data);
    if (st == IG_OK) st = gguf_writer_finish(w);
    CHECK_STATUS(st, IG_ERR_IO);
    CHECK(strstr(ig_last_error(), "No space") != NULL);
    /* the writer stays failed */
    CHECK_STATUS(gguf_writer_write(w, data, 4), IG_ERR_INVALID_ARG);
    free(data);
    gguf_writer_free(w);
    fclose(fp);
}

/* ---- synth: recipe and plan ------------------------------------------------ */

IG_TEST(synth_q4_k_m_recipe_matches_llama_cpp_270m) {
    /* blk.N.attn_v / ffn_down of llama.cpp's gemma-3-270m Q4_K_M file:
     * Q8_0/Q6_K on layers 0 1 4 7 10 13 15 16 17, else Q5_0/Q4_K */
    const int more[] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1};
    for (int l = 0; l < 18; l++) {
        ig_dtype v = ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_ATTN_V, l, 18, 640);
        ig_dtype d = ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_FFN_DOWN, l, 18, 2048);
        CHECK_EQ_INT(v, more[l] ? IG_TYPE_Q8_0 : IG_TYPE_Q5_0);
        CHECK_EQ_INT(d, more[l] ? IG_TYPE_Q6_K : IG_TYPE_Q4_K);
        CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_ATTN_Q, l, 18, 640),
                     IG_TYPE_Q5_0);
        CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_ATTN_OUTPUT, l, 18, 1024),
                     IG_TYPE_Q4_K);
    }
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_TOKEN_EMBD, 0, 18, 640),
                 IG_TYPE_Q8_0);
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_NORM, 0, 18, 640), IG_TYPE_F32);
    /* 27B: H = 5376 = 21 * 256, so no fallbacks */
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_TOKEN_EMBD, 0, 62, 5376),
                 IG_TYPE_Q6_K);
    int n_q6 = 0;
    for (int l = 0; l < 62; l++) {
        ig_dtype v = ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_ATTN_V, l, 62, 5376);
        bool more_bits = l < 7 || l >= 54 || (l - 7) % 3 == 2;
        CHECK_EQ_INT(v, more_bits ? IG_TYPE_Q6_K : IG_TYPE_Q4_K);
        n_q6 += v == IG_TYPE_Q6_K;
        CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q4_K_M, IG_SYNTH_FFN_GATE, l, 62, 5376),
                     IG_TYPE_Q4_K);
    }
    CHECK_EQ_INT(n_q6, 7 + 8 + 15);
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_Q8_0, IG_SYNTH_TOKEN_EMBD, 0, 62, 5376),
                 IG_TYPE_Q8_0);
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_F16, IG_SYNTH_FFN_DOWN, 0, 62, 21504), IG_TYPE_F16);
    CHECK_EQ_INT(ig_synth_tensor_type(IG_SYNTH_F16, IG_SYNTH_NORM, 0, 62, 5376), IG_TYPE_F32);
}

IG_TEST(synth_names_and_bad_params) {
    ig_synth_ftype t;
    CHECK(ig_synth_parse_ftype("Q4_K_M", &t) && t == IG_SYNTH_Q4_K_M);
    CHECK(ig_synth_parse_ftype("f16", &t) && t == IG_SYNTH_F16);
    CHECK(!ig_synth_parse_ftype("q4_0", &t));
    CHECK(ig_synth_find_config("27B") && ig_synth_find_config("27B")->head_dim == 128);
    CHECK(ig_synth_find_config("2b") == NULL);
    CHECK_EQ_INT(ig_synth_file_type(IG_SYNTH_Q4_K_M), 15);
    ig_synth *s = NULL;
    ig_synth_params p = {0};
    p.size = "3b";
    CHECK_STATUS(ig_synth_create(&p, &s), IG_ERR_INVALID_ARG);
    p.size = "270m";
    p.n_layer = IG_MAX_LAYERS + 1;
    CHECK_STATUS(ig_synth_create(&p, &s), IG_ERR_INVALID_ARG);
    p.n_layer = 1;
    p.ftype = (ig_synth_ftype)7;
    CHECK_STATUS(ig_synth_create(&p, &s), IG_ERR_INVALID_ARG);
    p.ftype = IG_SYNTH_Q8_0;
    p.vocab_from = "/nonexistent/model.gguf";
    CHECK_STATUS(ig_synth_create(&p, &s), IG_ERR_IO);
    CHECK(s == NULL);
    CHECK_STATUS(ig_synth_create(NULL, &s), IG_ERR_INVALID_ARG);
}

/* Parameter counts and file sizes of every size (plans only, nothing
 * written) against gemma3.md §2 (text params; bf16, Q8_0 and Q4_K_M GB;
 * the files also carry ~6 MB of vocabulary). */
IG_TEST(synth_plans_match_the_size_table) {
    static const struct {
        const char *size;
        double params, gb[3]; /* F16, Q8_0, Q4_K_M */
        int n_layer;
    } want[] = {{"270m", 268.1e6, {0.54, 0.285, 0.25}, 18},
                {"1b", 999.9e6, {2.00, 1.06, 0.80}, 26},
                {"4b", 3.880e9, {7.76, 4.12, 2.48}, 34},
                {"12b", 11.766e9, {23.53, 12.50, 7.29}, 48},
                {"27b", 27.009e9, {54.02, 28.70, 16.54}, 62}};
    for (size_t i = 0; i < IG_ARRAY_LEN(want); i++) {
        for (int t = 0; t < 3; t++) {
            ig_synth_params p = {0};
            p.size = want[i].size;
            p.ftype = (ig_synth_ftype)t;
            ig_synth *s = NULL;
            REQUIRE_OK(ig_synth_create(&p, &s));
            double n = (double)ig_synth_n_params(s);
            CHECK(fabs(n - want[i].params) / want[i].params < 1e-3);
            double gb = (double)ig_synth_file_size(s) / 1e9;
            if (!(fabs(gb - want[i].gb[t]) < 0.01 + 0.005 * want[i].gb[t]))
                ig_test_fail_at(__FILE__, __LINE__, "%s %s: %.4f GB, table %.3f GB",
                                want[i].size, ig_synth_ftype_name(p.ftype), gb, want[i].gb[t]);
            CHECK_EQ_INT(ig_synth_get_config(s)->n_layer, want[i].n_layer);
            ig_synth_free(s);
        }
    }
}

/* ---- synth: files --------------------------------------------------------- */

static ig_status synth_file(const char *path, const char *size, ig_synth_ftype ft, int layers,
                            uint64_t seed, bool exact, const char *vocab) {
    ig_synth_params p = {0};
    p.size = size;
    p.ftype = ft;
    p.n_layer = layers;
    p.seed = seed;
    p.exact = exact;
    p.vocab_from = vocab;
    ig_synth *s = NULL;
    IG_TRY(ig_synth_create(&p, &s));
    FILE *fp = fopen(path, "wb");
    ig_status st = fp ? ig_synth_write(s, fp) : IG_ERR_IO;
    if (fp && fclose(fp) != 0 && st == IG_OK) st = IG_ERR_IO;
    if (st == IG_OK) {
        FILE *g = fopen(path, "rb");
        if (!g || fseek(g, 0, SEEK_END) != 0 || (uint64_t)ftell(g) != ig_synth_file_size(s))
            st = ig_fail(IG_ERR_INTERNAL, "size differs from the plan");
        if (g) fclose(g);
    }
    ig_synth_free(s);
    return st;
}

/* Finite logits for a few tokens, two of them requested. */
static void check_logits(ig_model *m) {
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.n_threads = 2;
    ig_context *ctx = NULL;
    REQUIRE_OK(ig_context_create(m, &cp, &ctx));
    const int32_t toks[5] = {2, 105, 1000, 50000, 262143};
    const int32_t pos[5] = {0, 1, 2, 3, 4};
    const int32_t seq[5] = {0};
    const uint8_t want[5] = {1, 0, 0, 0, 1};
    ig_batch b = {5, toks, pos, seq, want};
    CHECK_STATUS(ig_decode(ctx, &b), IG_OK);
    CHECK_EQ_INT(ig_n_outputs(ctx), 2);
    for (int o = 0; o < 2; o++) {
        const float *l = ig_get_logits(ctx, o);
        REQUIRE(l);
        int bad = 0;
        float amax = 0;
        for (int i = 0; i < 262144; i++) {
            if (!isfinite(l[i])) bad++;
            else amax = fmaxf(amax, fabsf(l[i]));
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(amax > 0.1f && amax < 1000.0f);
    }
    ig_context_free(ctx);
}

static void check_270m_file(ig_synth_ftype ft) {
    char path[256];
    tmp_path(path, sizeof path, "s270.gguf");
    REQUIRE_OK(synth_file(path, "270m", ft, 2, 42, false, NULL));
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    ig_model *m = NULL;
    ig_status st = ig_model_load(path, &mp, &m);
    CHECK_STATUS(st, IG_OK);
    if (m) {
        const ig_hparams *hp = ig_model_hparams(m);
        CHECK(!strcmp(hp->arch, "gemma3"));
        CHECK_EQ_INT(hp->n_embd, 640);
        CHECK_EQ_INT(hp->n_ff, 2048);
        CHECK_EQ_INT(hp->n_layer, 2);
        CHECK_EQ_INT(hp->n_head, 4);
        CHECK_EQ_INT(hp->n_head_kv, 1);
        CHECK_EQ_INT(hp->head_dim, 256);
        CHECK_EQ_INT(hp->head_dim_v, 256);
        CHECK_EQ_INT(hp->n_ctx_train, 32768);
        CHECK_EQ_INT(hp->sliding_window, 512);
        CHECK_EQ_INT(hp->n_vocab, 262144);
        CHECK_EQ_INT(hp->n_vocab_real, 262144);
        CHECK_NEAR(hp->rope_base_global, 1e6, 1);
        CHECK_NEAR(hp->rope_base_local, 1e4, 1e-3);
        CHECK_NEAR(hp->rope_scale_global, 1.0, 0);
        CHECK_NEAR(hp->attn_scale, 1.0 / 16, 1e-7);
        CHECK_NEAR(hp->rms_eps, 1e-6, 1e-12);
        CHECK_EQ_INT(hp->bos_id, 2);
        CHECK_EQ_INT(hp->eos_id, 1);
        CHECK_EQ_INT(hp->eot_id, 106);
        CHECK(hp->layer_is_swa[0] && hp->layer_is_swa[1]);
        CHECK(m->output == m->tok_embd);
        const ig_tensor_table *tt = ig_model_tensors(m);
        CHECK_EQ_INT(tt->count, 13 * 2 + 2);
        CHECK(ig_tensor_find(tt, "output.weight") == NULL);
        /* storage types per the recipe (270M: 640 and 2048-wide rows) */
        for (size_t i = 0; i < tt->count; i++) {
            const ig_tensor *t = &tt->items[i];
            int layer = 0;
            ig_synth_kind kind = IG_SYNTH_NORM;
            if (t->n_dims == 2) {
                const char *n = strchr(t->name, '.');
                if (!strncmp(t->name, "blk.", 4)) {
                    layer = atoi(t->name + 4);
                    n = strchr(n + 1, '.') + 1;
                } else {
                    n = t->name;
                }
                if (!strcmp(n, "token_embd.weight")) kind = IG_SYNTH_TOKEN_EMBD;
                else if (!strcmp(n, "attn_q.weight")) kind = IG_SYNTH_ATTN_Q;
                else if (!strcmp(n, "attn_k.weight")) kind = IG_SYNTH_ATTN_K;
                else if (!strcmp(n, "attn_v.weight")) kind = IG_SYNTH_ATTN_V;
                else if (!strcmp(n, "attn_output.weight")) kind = IG_SYNTH_ATTN_OUTPUT;
                else if (!strcmp(n, "ffn_gate.weight")) kind = IG_SYNTH_FFN_GATE;
                else if (!strcmp(n, "ffn_up.weight")) kind = IG_SYNTH_FFN_UP;
                else if (!strcmp(n, "ffn_down.weight")) kind = IG_SYNTH_FFN_DOWN;
                else CHECK(!"unexpected matrix");
            }
            CHECK_EQ_INT(t->type, ig_synth_tensor_type(ft, kind, layer, 2, t->ne[0]));
        }
        if (ft == IG_SYNTH_Q4_K_M) { /* 2 layers: layer 1 >= 7*2/8 gets the extra bits */
            CHECK_EQ_INT(ig_tensor_find(tt, "token_embd.weight")->type, IG_TYPE_Q8_0);
            CHECK_EQ_INT(ig_tensor_find(tt, "blk.0.attn_v.weight")->type, IG_TYPE_Q5_0);
            CHECK_EQ_INT(ig_tensor_find(tt, "blk.1.attn_v.weight")->type, IG_TYPE_Q8_0);
            CHECK_EQ_INT(ig_tensor_find(tt, "blk.0.ffn_down.weight")->type, IG_TYPE_Q4_K);
            CHECK_EQ_INT(ig_tensor_find(tt, "blk.1.ffn_down.weight")->type, IG_TYPE_Q6_K);
            CHECK_EQ_INT(ig_tensor_find(tt, "blk.0.attn_output.weight")->type, IG_TYPE_Q4_K);
        }
        /* norms near 1 (stored as 1 + w) */
        const float *pn = m->layers[1].post_ffn_norm;
        for (int i = 0; i < 640; i++) CHECK(pn[i] > 0.5f && pn[i] < 1.5f);
        uint32_t ftype;
        CHECK(gguf_get_u32(m->gguf, "general.file_type", &ftype) &&
              ftype == ig_synth_file_type(ft));
        /* the generated vocabulary tokenizes */
        const ig_tokenizer *tok = ig_model_tokenizer(m);
        REQUIRE(tok);
        CHECK_EQ_INT(ig_tokenizer_n_vocab(tok), 262144);
        CHECK_EQ_INT(ig_token_lookup(tok, "<start_of_turn>"), 105);
        CHECK_EQ_INT(ig_token_lookup(tok, "<0x41>"), 238 + 0x41);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        const char *text = "Hello, synthetic world!\n\xf0\x9f\x99\x82";
        CHECK_STATUS(ig_tokenize(tok, text, strlen(text), true, false, &ids, &n_ids), IG_OK);
        CHECK(n_ids > 3 && ids[0] == 2);
        char *back = NULL;
        CHECK_STATUS(ig_detokenize(tok, ids, n_ids, false, &back), IG_OK);
        CHECK(back && !strcmp(back, text));
        free(back);
        free(ids);
        check_logits(m);
    }
    ig_model_free(m);
    unlink(path);
}

IG_TEST_SLOW(synth_270m_f16_loads) { check_270m_file(IG_SYNTH_F16); }
IG_TEST_SLOW(synth_270m_q8_0_loads) { check_270m_file(IG_SYNTH_Q8_0); }
IG_TEST_SLOW(synth_270m_q4_k_m_loads) { check_270m_file(IG_SYNTH_Q4_K_M); }

/* Tensor data bytes of a GGUF (everything after the data offset). */
static bool same_tensor_data(const char *a, const char *b, bool *same) {
    gguf_file *fa = NULL, *fb = NULL;
    bool ok = gguf_open(a, &fa) == IG_OK && gguf_open(b, &fb) == IG_OK;
    if (ok) {
        size_t na = fa->map.size - fa->data_offset, nb = fb->map.size - fb->data_offset;
        *same = na == nb &&
                !memcmp(fa->map.data + fa->data_offset, fb->map.data + fb->data_offset, na);
    }
    gguf_close(fa);
    gguf_close(fb);
    return ok;
}

/* A small vocabulary file (300 pieces) to keep files tiny. */
static ig_status write_small_vocab(const char *path) {
    gguf_writer *w = NULL;
    IG_TRY(gguf_writer_create(0, &w));
    enum { N = 300 };
    gguf_str toks[N];
    char buf[N][16];
    float scores[N];
    int32_t types[N];
    for (int i = 0; i < N; i++) {
        if (i < 256) snprintf(buf[i], sizeof buf[i], "<0x%02X>", i);
        else snprintf(buf[i], sizeof buf[i], "p%d", i);
        toks[i].ptr = buf[i];
        toks[i].len = strlen(buf[i]);
        scores[i] = (float)-i;
        types[i] = i < 256 ? 6 : 1;
    }
    ig_status st = gguf_writer_add_str(w, "general.architecture", "gemma3");
    if (st == IG_OK) st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    if (st == IG_OK) st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    if (st == IG_OK)
        st = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, N);
    if (st == IG_OK)
        st = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, N);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 257);
    if (st == IG_OK) st = gguf_writer_add_str(w, "tokenizer.chat_template", "{{ x }}");
    if (st == IG_OK) st = gguf_writer_add_u32(w, "other.key", 1);
    FILE *fp = st == IG_OK ? fopen(path, "wb") : NULL;
    if (st == IG_OK && !fp) st = IG_ERR_IO;
    if (st == IG_OK) st = gguf_writer_begin(w, fp);
    if (st == IG_OK) st = gguf_writer_finish(w);
    if (fp && fclose(fp) != 0 && st == IG_OK) st = IG_ERR_IO;
    gguf_writer_free(w);
    return st;
}

IG_TEST(synth_vocab_from_and_determinism) {
    char voc[256], a[256], b[256], c[256];
    tmp_path(voc, sizeof voc, "vocab.gguf");
    tmp_path(a, sizeof a, "a.gguf");
    tmp_path(b, sizeof b, "b.gguf");
    tmp_path(c, sizeof c, "c.gguf");
    REQUIRE_OK(write_small_vocab(voc));
    REQUIRE_OK(synth_file(a, "1b", IG_SYNTH_Q4_K_M, 1, 7, false, voc));
    gguf_file *f = NULL;
    REQUIRE_OK(gguf_open(a, &f));
    /* every tokenizer.* key copied, nothing else */
    const void *arr;
    uint64_t n;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &arr, &n) && n == 300);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &arr, &n) && n == 300);
    uint32_t u;
    CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 257);
    gguf_str s;
    CHECK(gguf_get_str(f, "tokenizer.chat_template", &s) && s.len == 7);
    CHECK(gguf_find(f, "other.key") == NULL);
    CHECK(gguf_find(f, "tokenizer.ggml.eos_token_id") == NULL);
    /* the embedding has one row per token */
    const ig_tensor *emb = ig_tensor_find(&f->tensors, "token_embd.weight");
    REQUIRE(emb);
    CHECK_EQ_INT(emb->ne[0], 1152);
    CHECK_EQ_INT(emb->ne[1], 300);
    CHECK_EQ_INT(emb->type, IG_TYPE_Q8_0); /* 1152 % 256 != 0 */
    CHECK_EQ_INT(ig_tensor_find(&f->tensors, "blk.0.ffn_down.weight")->type, IG_TYPE_Q6_K);
    CHECK_EQ_INT(ig_tensor_find(&f->tensors, "blk.0.ffn_gate.weight")->type, IG_TYPE_Q5_0);
    gguf_close(f);

    bool same = false;
    REQUIRE_OK(synth_file(b, "1b", IG_SYNTH_Q4_K_M, 1, 7, false, voc));
    CHECK(same_tensor_data(a, b, &same) && same);
    REQUIRE_OK(synth_file(b, "1b", IG_SYNTH_Q4_K_M, 1, 8, false, voc));
    CHECK(same_tensor_data(a, b, &same) && !same);
    /* F16: the fast path gives exactly the reference-quantized floats */
    REQUIRE_OK(synth_file(b, "1b", IG_SYNTH_F16, 1, 3, false, voc));
    REQUIRE_OK(synth_file(c, "1b", IG_SYNTH_F16, 1, 3, true, voc));
    CHECK(same_tensor_data(b, c, &same) && same);

    /* exact Q8_0 and direct Q8_0 both load and agree in scale */
    REQUIRE_OK(synth_file(b, "1b", IG_SYNTH_Q8_0, 1, 3, true, voc));
    REQUIRE_OK(synth_file(c, "1b", IG_SYNTH_Q8_0, 1, 3, false, voc));
    const char *files[2] = {b, c};
    double sd[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        ig_model_params mp = ig_model_default_params();
        mp.n_threads = 1;
        ig_model *m = NULL;
        CHECK_STATUS(ig_model_load(files[k], &mp, &m), IG_OK);
        if (!m) continue;
        CHECK_EQ_INT(ig_model_hparams(m)->n_vocab, 300);
        const ig_tensor *t = ig_tensor_find(ig_model_tensors(m), "blk.0.ffn_down.weight");
        REQUIRE(t && t->type == IG_TYPE_Q8_0 && t->ne[0] == 6912);
        float *row = malloc(sizeof(float) * 6912);
        REQUIRE(row);
        double ss = 0;
        size_t rb;
        REQUIRE(ig_dtype_row_bytes(t->type, t->ne[0], &rb));
        for (int r = 0; r < 64; r++) {
            ig_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, row, 6912);
            for (int i = 0; i < 6912; i++) ss += (double)row[i] * row[i];
        }
        sd[k] = sqrt(ss / (64.0 * 6912));
        free(row);
        ig_model_free(m);
    }
    const double want = 1.0 / sqrt(6912.0);
    CHECK(fabs(sd[0] - want) < 0.03 * want);
    CHECK(fabs(sd[1] - want) < 0.03 * want);
    unlink(voc);
    unlink(a);
    unlink(b);
    unlink(c);
}

/* 27B widths with another layer count: llama.cpp (and ignis, which follows
 * it) then derive 1/sqrt(key_length) = 1/sqrt(128), so the generator
 * centres attn_q_norm on sqrt(128/168) to keep the intended 1/sqrt(168). */
IG_TEST(synth_27b_layer_override_keeps_attention_scale) {
    char voc[256], path[256];
    tmp_path(voc, sizeof voc, "vocab27.gguf");
    tmp_path(path, sizeof path, "s27.gguf");
    REQUIRE_OK(write_small_vocab(voc));
    REQUIRE_OK(synth_file(path, "27b", IG_SYNTH_Q4_K_M, 1, 5, false, voc));
    ig_model_params mp = ig_model_default_params();
    mp.n_threads = 2;
    ig_model *m = NULL;
    CHECK_STATUS(ig_model_load(path, &mp, &m), IG_OK);
    if (m) {
        const ig_hparams *hp = ig_model_hparams(m);
        CHECK_EQ_INT(hp->n_embd, 5376);
        CHECK_EQ_INT(hp->n_ff, 21504);
        CHECK_EQ_INT(hp->n_head, 32);
        CHECK_EQ_INT(hp->n_head_kv, 16);
        CHECK_EQ_INT(hp->head_dim, 128);
        CHECK_EQ_INT(hp->sliding_window, 1024);
        CHECK_NEAR(hp->rope_scale_global, 8.0, 0);
        CHECK_NEAR(hp->attn_scale, 1.0 / sqrt(128.0), 1e-7);
        double mq = 0, mk = 0;
        for (int i = 0; i < 128; i++) mq += m->layers[0].q_norm[i], mk += m->layers[0].k_norm[i];
        CHECK_NEAR(mq / 128 * hp->attn_scale, 1.0 / sqrt(168.0), 0.03 / sqrt(168.0));
        CHECK_NEAR(mk / 128, 1.0, 0.03);
        CHECK_EQ_INT(ig_tensor_find(ig_model_tensors(m), "token_embd.weight")->type, IG_TYPE_Q6_K);
        ig_context_params cp = ig_context_default_params();
        cp.n_ctx = 16;
        cp.n_batch = 4;
        ig_context *ctx = NULL;
        CHECK_STATUS(ig_context_create(m, &cp, &ctx), IG_OK);
        const int32_t toks[3] = {257, 5, 299}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
        ig_batch b = {3, toks, pos, seq, NULL};
        CHECK_STATUS(ctx ? ig_decode(ctx, &b) : IG_ERR_INTERNAL, IG_OK);
        const float *l = ctx ? ig_get_logits(ctx, 0) : NULL;
        CHECK(l != NULL);
        for (int i = 0; l && i < 300; i++) CHECK(isfinite(l[i]));
        ig_context_free(ctx);
    }
    ig_model_free(m);
    unlink(path);
    unlink(voc);
}
