/* GGUF reader and GGUF hparams: hand-built images (every metadata type,
 * v2, alignment, corruption of every field and every truncation) and the
 * real Gemma 3 270M Q4_K_M file. */
#include "test.h"

#include "model/gguf.h"
#include "model/hparams.h"

#include <stdlib.h>
#include <string.h>

/* ---- a tiny GGUF writer ---------------------------------------------- */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void gb_bytes(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void gb_le(gbuf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, t, (size_t)n);
}
static void gb_u8(gbuf *b, uint8_t v) { gb_le(b, v, 1); }
static void gb_u16(gbuf *b, uint16_t v) { gb_le(b, v, 2); }
static void gb_u32(gbuf *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(gbuf *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_f32(gbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}
static void gb_f64(gbuf *b, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    gb_u64(b, u);
}
static void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static void gb_pad(gbuf *b, size_t align) {
    while (b->n % align) gb_u8(b, 0);
}
static void gb_key(gbuf *b, const char *k, uint32_t type) {
    gb_str(b, k);
    gb_u32(b, type);
}
static void kv_u32(gbuf *b, const char *k, uint32_t v) {
    gb_key(b, k, GGUF_TYPE_UINT32);
    gb_u32(b, v);
}
static void kv_f32(gbuf *b, const char *k, float v) {
    gb_key(b, k, GGUF_TYPE_FLOAT32);
    gb_f32(b, v);
}
static void kv_str(gbuf *b, const char *k, const char *v) {
    gb_key(b, k, GGUF_TYPE_STRING);
    gb_str(b, v);
}
static void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* Byte offsets of interesting fields in the sample image. */
typedef struct sample_pos {
    size_t n_tensors, n_kv;
    size_t key0_len;         /* length of the first key */
    size_t str_len;          /* length of the "t.str" value */
    size_t arr_type, arr_count;  /* u32 array header */
    size_t sarr_count;       /* string array count */
    size_t sarr_elem_len;    /* length of its second element */
    size_t align_val;        /* value of general.alignment (when written) */
    size_t t_name_len;       /* first tensor's name length */
    size_t t_ndims, t_ne0, t_ne1, t_type, t_offset; /* first tensor */
    size_t t2_type, t2_offset;                      /* second tensor (Q8_0) */
    size_t data;             /* start of the data section */
} sample_pos;

#define SAMPLE_NKV 19
#define SAMPLE_NT 3

/* v2/v3 image with one key of every type, alignment `align` (0: no
 * general.alignment key, default 32) and three tensors: "a" F32 {4, 2},
 * "b" Q8_0 {64, 2}, "c" F16 {3}. The last tensor ends the file. */
static uint8_t *build_sample(uint32_t version, uint32_t align, size_t *size, sample_pos *pos) {
    gbuf b = {0};
    sample_pos ps;
    memset(&ps, 0, sizeof ps);
    bool with_align = align != 0;
    if (!align) align = 32;
    gb_bytes(&b, "GGUF", 4);
    gb_u32(&b, version);
    ps.n_tensors = b.n;
    gb_u64(&b, SAMPLE_NT);
    ps.n_kv = b.n;
    gb_u64(&b, SAMPLE_NKV - (with_align ? 0 : 1));
    ps.key0_len = b.n;
    gb_key(&b, "t.u8", GGUF_TYPE_UINT8);
    gb_u8(&b, 200);
    gb_key(&b, "t.i8", GGUF_TYPE_INT8);
    gb_u8(&b, (uint8_t)-100);
    gb_key(&b, "t.u16", GGUF_TYPE_UINT16);
    gb_u16(&b, 60000);
    gb_key(&b, "t.i16", GGUF_TYPE_INT16);
    gb_u16(&b, (uint16_t)-30000);
    kv_u32(&b, "t.u32", 4000000000u);
    gb_key(&b, "t.i32", GGUF_TYPE_INT32);
    gb_u32(&b, (uint32_t)-2000000000);
    kv_f32(&b, "t.f32", 1.5f);
    gb_key(&b, "t.bool", GGUF_TYPE_BOOL);
    gb_u8(&b, 1);
    gb_key(&b, "t.str", GGUF_TYPE_STRING);
    ps.str_len = b.n;
    gb_str(&b, "hello");
    gb_key(&b, "t.arr_u32", GGUF_TYPE_ARRAY);
    ps.arr_type = b.n;
    gb_u32(&b, GGUF_TYPE_UINT32);
    ps.arr_count = b.n;
    gb_u64(&b, 3);
    gb_u32(&b, 1);
    gb_u32(&b, 2);
    gb_u32(&b, 0xfffffffeu);
    gb_key(&b, "t.arr_str", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_STRING);
    ps.sarr_count = b.n;
    gb_u64(&b, 3);
    gb_str(&b, "a");
    ps.sarr_elem_len = b.n;
    gb_str(&b, "bc");
    gb_str(&b, "");
    gb_key(&b, "t.u64", GGUF_TYPE_UINT64);
    gb_u64(&b, (uint64_t)1 << 40);
    gb_key(&b, "t.i64", GGUF_TYPE_INT64);
    gb_u64(&b, (uint64_t)-((int64_t)1 << 40));
    gb_key(&b, "t.f64", GGUF_TYPE_FLOAT64);
    gb_f64(&b, 3.25);
    gb_key(&b, "t.arr_i16", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_INT16);
    gb_u64(&b, 2);
    gb_u16(&b, (uint16_t)-7);
    gb_u16(&b, 9);
    gb_key(&b, "t.arr_bool", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_BOOL);
    gb_u64(&b, 3);
    gb_u8(&b, 1);
    gb_u8(&b, 0);
    gb_u8(&b, 1);
    gb_key(&b, "t.arr_f32", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_FLOAT32);
    gb_u64(&b, 2);
    gb_f32(&b, -0.25f);
    gb_f32(&b, 8.0f);
    gb_key(&b, "t.empty_arr", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_UINT8);
    gb_u64(&b, 0);
    if (with_align) {
        gb_key(&b, "general.alignment", GGUF_TYPE_UINT32);
        ps.align_val = b.n;
        gb_u32(&b, align);
    }
    /* tensor infos; offsets relative to the data section */
    size_t a_bytes = 4 * 2 * 4, b_bytes = 2 * 2 * 34, c_bytes = 3 * 2;
    size_t off_b = (a_bytes + align - 1) / align * align;
    size_t off_c = (off_b + b_bytes + align - 1) / align * align;
    ps.t_name_len = b.n;
    gb_str(&b, "a");
    ps.t_ndims = b.n;
    gb_u32(&b, 2);
    ps.t_ne0 = b.n;
    gb_u64(&b, 4);
    ps.t_ne1 = b.n;
    gb_u64(&b, 2);
    ps.t_type = b.n;
    gb_u32(&b, 0);
    ps.t_offset = b.n;
    gb_u64(&b, 0);
    gb_str(&b, "b");
    gb_u32(&b, 2);
    gb_u64(&b, 64);
    gb_u64(&b, 2);
    ps.t2_type = b.n;
    gb_u32(&b, 8);
    ps.t2_offset = b.n;
    gb_u64(&b, off_b);
    gb_str(&b, "c");
    gb_u32(&b, 1);
    gb_u64(&b, 3);
    gb_u32(&b, 1);
    gb_u64(&b, off_c);
    gb_pad(&b, align);
    ps.data = b.n;
    for (size_t i = 0; i < a_bytes; i++) gb_u8(&b, (uint8_t)(0x10 + i));
    gb_pad(&b, align);
    for (size_t i = 0; i < b_bytes; i++) gb_u8(&b, (uint8_t)(0x80 + i));
    gb_pad(&b, align);
    for (size_t i = 0; i < c_bytes; i++) gb_u8(&b, (uint8_t)(0xf0 + i));
    *size = b.n;
    if (pos) *pos = ps;
    return b.p;
}

/* Parses an exact-size heap copy so that ASan sees any overread. */
static ig_status parse_copy(const uint8_t *img, size_t n, gguf_file **out) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, img, n);
    ig_status st = gguf_parse(c, n, out);
    if (st == IG_OK) {
        /* keep the copy alive with the file: the caller frees img_of() */
        (*out)->map.data = c;
    } else {
        free(c);
    }
    return st;
}
static void close_copy(gguf_file *f) {
    if (!f) return;
    void *c = (void *)f->map.data;
    gguf_close(f);
    free(c);
}

/* A parse that succeeded must describe tensors inside the image. */
static bool tensors_inside(const gguf_file *f) {
    const uint8_t *lo = f->map.data, *hi = f->map.data + f->map.size;
    for (size_t i = 0; i < f->tensors.count; i++) {
        const ig_tensor *t = &f->tensors.items[i];
        const uint8_t *d = t->data;
        if (d < lo || d > hi || t->nbytes > (size_t)(hi - d)) return false;
        if ((size_t)(d - lo) % f->alignment) return false;
    }
    return true;
}

IG_TEST(gguf_all_metadata_types_round_trip) {
    size_t n;
    sample_pos ps;
    uint8_t *img = build_sample(3, 0, &n, &ps);
    gguf_file *f = NULL;
    REQUIRE_OK(gguf_parse(img, n, &f));
    CHECK_EQ_INT(f->version, 3);
    CHECK_EQ_INT(f->n_kv, SAMPLE_NKV - 1);
    CHECK_EQ_INT(f->alignment, 32);
    uint32_t u32;
    int64_t i64;
    float f32;
    bool bl;
    gguf_str s;
    CHECK(gguf_get_u32(f, "t.u8", &u32) && u32 == 200);
    CHECK(gguf_get_i64(f, "t.i8", &i64) && i64 == -100);
    CHECK(!gguf_get_u32(f, "t.i8", &u32)); /* negative does not fit */
    CHECK(gguf_get_u32(f, "t.u16", &u32) && u32 == 60000);
    CHECK(gguf_get_i64(f, "t.i16", &i64) && i64 == -30000);
    CHECK(gguf_get_u32(f, "t.u32", &u32) && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "t.u32", &i64) && i64 == 4000000000LL);
    CHECK(gguf_get_i64(f, "t.i32", &i64) && i64 == -2000000000LL);
    CHECK(gguf_get_f32(f, "t.f32", &f32) && f32 == 1.5f);
    CHECK(!gguf_get_u32(f, "t.f32", &u32));
    CHECK(!gguf_get_f32(f, "t.u32", &f32));
    CHECK(gguf_get_bool(f, "t.bool", &bl) && bl);
    CHECK(!gguf_get_bool(f, "t.u8", &bl));
    CHECK(!gguf_get_u32(f, "t.bool", &u32));
    REQUIRE(gguf_get_str(f, "t.str", &s));
    CHECK(s.len == 5 && !memcmp(s.ptr, "hello", 5));
    CHECK(!gguf_get_str(f, "t.u8", &s));
    CHECK(gguf_get_i64(f, "t.u64", &i64) && i64 == (int64_t)1 << 40);
    CHECK(!gguf_get_u32(f, "t.u64", &u32)); /* 2^40 does not fit u32 */
    CHECK(gguf_get_i64(f, "t.i64", &i64) && i64 == -((int64_t)1 << 40));
    CHECK(gguf_get_f32(f, "t.f64", &f32) && f32 == 3.25f);
    CHECK_NEAR(gguf_find(f, "t.f64")->v.f64, 3.25, 0);
    CHECK(gguf_find(f, "missing") == NULL);
    CHECK(!gguf_get_u32(f, "missing", &u32));

    const void *data;
    uint64_t cnt;
    REQUIRE(gguf_get_arr(f, "t.arr_u32", GGUF_TYPE_UINT32, &data, &cnt));
    CHECK_EQ_INT(cnt, 3);
    uint32_t tmp;
    memcpy(&tmp, (const uint8_t *)data + 8, 4);
    CHECK_EQ_INT(tmp, 0xfffffffeu);
    CHECK(!gguf_get_arr(f, "t.arr_u32", GGUF_TYPE_INT32, &data, &cnt));
    CHECK(!gguf_get_arr(f, "t.u32", GGUF_TYPE_UINT32, &data, &cnt));
    const gguf_kv *kv = gguf_find(f, "t.arr_u32");
    CHECK(gguf_arr_get_i64(kv, 2, &i64) && i64 == 0xfffffffeLL);
    CHECK(!gguf_arr_get_i64(kv, 3, &i64));
    REQUIRE(gguf_get_arr(f, "t.arr_str", GGUF_TYPE_STRING, &data, &cnt));
    CHECK_EQ_INT(cnt, 3);
    const gguf_str *strs = data;
    CHECK(strs[0].len == 1 && strs[0].ptr[0] == 'a');
    CHECK(strs[1].len == 2 && !memcmp(strs[1].ptr, "bc", 2));
    CHECK_EQ_INT(strs[2].len, 0);
    kv = gguf_find(f, "t.arr_i16");
    CHECK(gguf_arr_get_i64(kv, 0, &i64) && i64 == -7);
    CHECK(gguf_arr_get_i64(kv, 1, &i64) && i64 == 9);
    kv = gguf_find(f, "t.arr_bool");
    CHECK(kv && kv->arr_type == GGUF_TYPE_BOOL && kv->arr_count == 3);
    CHECK(gguf_arr_get_i64(kv, 1, &i64) && i64 == 0);
    CHECK(gguf_arr_get_i64(kv, 2, &i64) && i64 == 1);
    double d;
    kv = gguf_find(f, "t.arr_f32");
    CHECK(gguf_arr_get_f64(kv, 0, &d) && d == -0.25);
    CHECK(gguf_arr_get_f64(kv, 1, &d) && d == 8.0);
    CHECK(!gguf_arr_get_i64(kv, 0, &i64));
    REQUIRE(gguf_get_arr(f, "t.empty_arr", GGUF_TYPE_UINT8, &data, &cnt));
    CHECK_EQ_INT(cnt, 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_FLOAT64), "f64") == 0);

    /* tensors */
    REQUIRE(f->tensors.count == SAMPLE_NT);
    CHECK_EQ_INT(f->data_offset, ps.data);
    CHECK_EQ_INT(f->data_offset % 32, 0);
    const ig_tensor *a = ig_tensor_find(&f->tensors, "a");
    const ig_tensor *tb = ig_tensor_find(&f->tensors, "b");
    const ig_tensor *c = ig_tensor_find(&f->tensors, "c");
    REQUIRE(a && tb && c);
    CHECK_EQ_INT(a->type, IG_TYPE_F32);
    CHECK_EQ_INT(a->n_dims, 2);
    CHECK(a->ne[0] == 4 && a->ne[1] == 2 && a->ne[2] == 1 && a->ne[3] == 1);
    CHECK_EQ_INT(a->nbytes, 32);
    CHECK(a->data == img + ps.data); /* zero copy */
    CHECK_EQ_INT(((const uint8_t *)a->data)[0], 0x10);
    CHECK_EQ_INT(tb->type, IG_TYPE_Q8_0);
    CHECK_EQ_INT(tb->nbytes, 136);
    CHECK(tb->data == img + ps.data + 32);
    CHECK_EQ_INT(((const uint8_t *)tb->data)[0], 0x80);
    CHECK_EQ_INT(c->type, IG_TYPE_F16);
    CHECK_EQ_INT(c->n_dims, 1);
    CHECK_EQ_INT(c->nbytes, 6);
    CHECK(c->data == img + ps.data + 192);
    CHECK_EQ_INT(((const uint8_t *)c->data)[5], 0xf5);
    CHECK((const uint8_t *)c->data + c->nbytes == img + n);
    gguf_close(f);
    free(img);
}

IG_TEST(gguf_v2_accepted_v1_rejected) {
    size_t n;
    uint8_t *img = build_sample(2, 0, &n, NULL);
    gguf_file *f = NULL;
    REQUIRE_OK(gguf_parse(img, n, &f));
    CHECK_EQ_INT(f->version, 2);
    CHECK_EQ_INT(f->tensors.count, SAMPLE_NT);
    gguf_close(f);

    img[4] = 1; /* version 1 */
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_UNSUPPORTED);
    CHECK(f == NULL);
    CHECK(strstr(ig_last_error(), "version 1") != NULL);
    img[4] = 4;
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_UNSUPPORTED);
    /* a big-endian file's version reads as 0x03000000 */
    img[4] = 0;
    img[7] = 3;
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "big-endian") != NULL);
    img[7] = 0;
    img[4] = 3;
    img[0] = 'X';
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK_STATUS(gguf_parse(img, 0, &f), IG_ERR_FORMAT);
    free(img);
}

IG_TEST(gguf_alignment_honoured) {
    const uint32_t aligns[] = {1, 8, 64, 256};
    for (size_t k = 0; k < IG_ARRAY_LEN(aligns); k++) {
        size_t n;
        sample_pos ps;
        uint8_t *img = build_sample(3, aligns[k], &n, &ps);
        gguf_file *f = NULL;
        ig_status st = gguf_parse(img, n, &f);
        CHECK_STATUS(st, IG_OK);
        if (st == IG_OK) {
            CHECK_EQ_INT(f->alignment, aligns[k]);
            CHECK_EQ_INT(f->data_offset, ps.data);
            CHECK_EQ_INT(f->data_offset % aligns[k], 0);
            const ig_tensor *tb = ig_tensor_find(&f->tensors, "b");
            REQUIRE(tb);
            size_t off_b = (32 + aligns[k] - 1) / aligns[k] * aligns[k];
            CHECK(tb->data == img + ps.data + off_b);
            CHECK_EQ_INT(((const uint8_t *)tb->data)[1], 0x81);
            CHECK(tensors_inside(f));
            gguf_close(f);
        }
        free(img);
    }
    /* with alignment 64, an offset that is a multiple of 32 only is refused */
    size_t n;
    sample_pos ps;
    uint8_t *img = build_sample(3, 64, &n, &ps);
    gguf_file *f = NULL;
    img[ps.t2_offset] = 32;
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "'b'") != NULL);
    free(img);
    /* bad alignment values */
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t k = 0; k < IG_ARRAY_LEN(bad); k++) {
        img = build_sample(3, 64, &n, &ps);
        img[ps.align_val] = (uint8_t)bad[k];
        img[ps.align_val + 1] = (uint8_t)(bad[k] >> 8);
        img[ps.align_val + 2] = (uint8_t)(bad[k] >> 16);
        img[ps.align_val + 3] = (uint8_t)(bad[k] >> 24);
        CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
        CHECK(strstr(ig_last_error(), "general.alignment") != NULL);
        free(img);
    }
    /* alignment of the wrong type */
    gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.alignment", GGUF_TYPE_UINT64);
    gb_u64(&b, 32);
    CHECK_STATUS(gguf_parse(b.p, b.n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "general.alignment") != NULL);
    free(b.p);
}

IG_TEST(gguf_truncated_at_every_offset) {
    size_t n;
    uint8_t *img = build_sample(3, 0, &n, NULL);
    int accepted = 0;
    for (size_t len = 0; len < n; len++) {
        gguf_file *f = NULL;
        ig_status st = parse_copy(img, len, &f);
        if (st == IG_OK) {
            accepted++;
            close_copy(f);
        } else if (f != NULL) {
            accepted++;
        }
    }
    CHECK_EQ_INT(accepted, 0);
    gguf_file *f = NULL;
    CHECK_STATUS(parse_copy(img, n, &f), IG_OK);
    close_copy(f);
    free(img);
}

static void poke_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void poke_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

IG_TEST(gguf_huge_and_bad_fields_rejected) {
    static const uint64_t huge[] = {UINT64_MAX, UINT64_MAX / 2, (uint64_t)1 << 62,
                                    (uint64_t)1 << 32, 1000000};
    size_t n;
    sample_pos ps;
    uint8_t *base = build_sample(3, 0, &n, &ps);
    const size_t u64_fields[] = {ps.n_tensors, ps.n_kv,     ps.key0_len, ps.str_len,
                                 ps.arr_count, ps.sarr_count, ps.sarr_elem_len, ps.t_name_len,
                                 ps.t_ne0,      ps.t_ne1,   ps.t_offset, ps.t2_offset};
    const char *names[] = {"tensor count", "kv count", "key length", "string length",
                           "array count",  "string array count", "array string length",
                           "tensor name length", "ne0", "ne1", "offset", "offset 2"};
    for (size_t k = 0; k < IG_ARRAY_LEN(u64_fields); k++) {
        for (size_t h = 0; h < IG_ARRAY_LEN(huge); h++) {
            uint8_t *img = malloc(n);
            memcpy(img, base, n);
            poke_u64(img + u64_fields[k], huge[h]);
            gguf_file *f = NULL;
            ig_status st = gguf_parse(img, n, &f);
            if (st == IG_OK) {
                ig_test_fail_at(__FILE__, __LINE__, "%s = %llu accepted", names[k],
                                (unsigned long long)huge[h]);
                gguf_close(f);
            }
            CHECK(f == NULL);
            free(img);
        }
    }
    /* 32-bit fields */
    struct {
        size_t pos;
        uint32_t v;
        ig_status want;
        const char *msg;
    } cases[] = {
        {ps.t_ndims, 0, IG_ERR_FORMAT, "dimensions"},
        {ps.t_ndims, 5, IG_ERR_FORMAT, "dimensions"},
        {ps.t_ndims, 0xffffffffu, IG_ERR_FORMAT, "dimensions"},
        {ps.t_type, 99, IG_ERR_UNSUPPORTED, "type 99"},
        {ps.t_type, 3, IG_ERR_UNSUPPORTED, "type 3"}, /* Q4_1: a real ggml type we lack */
        {ps.t2_type, 0xffffffffu, IG_ERR_UNSUPPORTED, "'b'"},
        {ps.arr_type, GGUF_TYPE_ARRAY, IG_ERR_UNSUPPORTED, "nested"},
        {ps.arr_type, 13, IG_ERR_FORMAT, "t.arr_u32"},
        {ps.key0_len + 8 + 4, 13, IG_ERR_FORMAT, "t.u8"}, /* value type */
    };
    for (size_t k = 0; k < IG_ARRAY_LEN(cases); k++) {
        uint8_t *img = malloc(n);
        memcpy(img, base, n);
        poke_u32(img + cases[k].pos, cases[k].v);
        gguf_file *f = NULL;
        CHECK_STATUS(gguf_parse(img, n, &f), cases[k].want);
        if (!strstr(ig_last_error(), cases[k].msg))
            ig_test_fail_at(__FILE__, __LINE__, "case %zu: error '%s' lacks '%s'", k,
                            ig_last_error(), cases[k].msg);
        free(img);
    }
    /* ne = 0, and a dimension product that overflows int64 */
    uint8_t *img = malloc(n);
    memcpy(img, base, n);
    poke_u64(img + ps.t_ne0, 0);
    gguf_file *f = NULL;
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    memcpy(img, base, n);
    poke_u64(img + ps.t_ne0, (uint64_t)1 << 40);
    poke_u64(img + ps.t_ne1, (uint64_t)1 << 40);
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "overflow") != NULL);
    /* a row that is not a whole number of Q8_0 blocks */
    memcpy(img, base, n);
    poke_u32(img + ps.t_type, IG_TYPE_Q8_0); /* "a": ne0 = 4 */
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "block") != NULL);
    /* data one byte past the end: offset of "b" + 32 */
    memcpy(img, base, n);
    poke_u64(img + ps.t2_offset, 32 + 32 * 3);
    CHECK_STATUS(gguf_parse(img, n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "outside") != NULL);
    free(img);
    free(base);
}

IG_TEST(gguf_byte_corruption_never_crashes) {
    /* Overwrite every byte with a few values: the parse either fails or
     * yields tensors that lie inside the image. ASan checks the rest. */
    size_t n;
    uint8_t *base = build_sample(3, 0, &n, NULL);
    static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t v = 0; v < IG_ARRAY_LEN(vals); v++) {
            if (base[i] == vals[v]) continue;
            uint8_t *img = malloc(n);
            memcpy(img, base, n);
            img[i] = vals[v];
            gguf_file *f = NULL;
            if (gguf_parse(img, n, &f) == IG_OK) {
                ok++;
                if (!tensors_inside(f))
                    ig_test_fail_at(__FILE__, __LINE__, "byte %zu = %u: tensor outside image", i,
                                    vals[v]);
                gguf_close(f);
            } else {
                bad++;
                CHECK(f == NULL);
                CHECK(ig_last_error()[0] != '\0');
            }
            free(img);
        }
    }
    /* data bytes and most values are free to change; counts and lengths
     * are not, so both outcomes must occur */
    CHECK(ok > 0);
    CHECK(bad > 100);
    free(base);
}

IG_TEST(gguf_duplicates_rejected) {
    gguf_file *f = NULL;
    gbuf b = {0};
    gb_header(&b, 3, 0, 3);
    kv_u32(&b, "x.a", 1);
    kv_u32(&b, "x.b", 2);
    kv_str(&b, "x.a", "again");
    CHECK_STATUS(gguf_parse(b.p, b.n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "duplicate") && strstr(ig_last_error(), "x.a"));
    free(b.p);

    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 2, 0);
    for (int i = 0; i < 2; i++) {
        gb_str(&b, "w");
        gb_u32(&b, 1);
        gb_u64(&b, 8);
        gb_u32(&b, IG_TYPE_F32);
        gb_u64(&b, 0);
    }
    gb_pad(&b, 32);
    for (int i = 0; i < 32; i++) gb_u8(&b, 0);
    CHECK_STATUS(gguf_parse(b.p, b.n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "duplicate") && strstr(ig_last_error(), "'w'"));
    /* the same image with distinct names is fine (both tensors share data) */
    b.p[24 + 8] = 'v';
    REQUIRE_OK(gguf_parse(b.p, b.n, &f));
    CHECK_EQ_INT(f->tensors.count, 2);
    gguf_close(f);
    free(b.p);

    /* empty key, key with a NUL byte */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    kv_u32(&b, "", 1);
    CHECK_STATUS(gguf_parse(b.p, b.n, &f), IG_ERR_FORMAT);
    free(b.p);
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, GGUF_TYPE_UINT8);
    gb_u8(&b, 1);
    CHECK_STATUS(gguf_parse(b.p, b.n, &f), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "NUL") != NULL);
    free(b.p);
}

IG_TEST(gguf_open_missing_file) {
    gguf_file *f = NULL;
    CHECK_STATUS(gguf_open("/nonexistent/dir/model.gguf", &f), IG_ERR_IO);
    CHECK(f == NULL);
    gguf_close(NULL);
}

/* ---- hparams from GGUF metadata -------------------------------------- */

typedef struct gemma_opts {
    uint32_t n_layer;
    int sliding_window;   /* -1: key absent */
    int pattern_kind;     /* 0 none, 1 u32 period, 2 bool array */
    uint32_t period;
    const char *scaling_type; /* NULL: absent */
    float scaling_factor;     /* 0: absent */
    float freq_base_swa;      /* 0: absent */
    float softcap;            /* 0: absent */
    float attn_scale;         /* 0: absent; < 0: written as a string */
    bool with_tokens;
} gemma_opts;

/* A metadata-only gemma3 GGUF (no tensors) shaped like the 270M model. */
static uint8_t *build_gemma(const gemma_opts *o, size_t *size) {
    gbuf m = {0};
    uint64_t n_kv = 0;
    kv_str(&m, "general.architecture", "gemma3"), n_kv++;
    kv_str(&m, "general.name", "tiny gemma"), n_kv++;
    kv_u32(&m, "gemma3.context_length", 32768), n_kv++;
    kv_u32(&m, "gemma3.embedding_length", 640), n_kv++;
    kv_u32(&m, "gemma3.block_count", o->n_layer), n_kv++;
    kv_u32(&m, "gemma3.feed_forward_length", 2048), n_kv++;
    kv_u32(&m, "gemma3.attention.head_count", 4), n_kv++;
    kv_u32(&m, "gemma3.attention.head_count_kv", 1), n_kv++;
    kv_u32(&m, "gemma3.attention.key_length", 256), n_kv++;
    kv_u32(&m, "gemma3.attention.value_length", 256), n_kv++;
    kv_f32(&m, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f), n_kv++;
    kv_f32(&m, "gemma3.rope.freq_base", 1e6f), n_kv++;
    if (o->sliding_window >= 0)
        kv_u32(&m, "gemma3.attention.sliding_window", (uint32_t)o->sliding_window), n_kv++;
    if (o->pattern_kind == 1)
        kv_u32(&m, "gemma3.attention.sliding_window_pattern", o->period), n_kv++;
    if (o->pattern_kind == 2) {
        gb_key(&m, "gemma3.attention.sliding_window_pattern", GGUF_TYPE_ARRAY);
        gb_u32(&m, GGUF_TYPE_BOOL);
        gb_u64(&m, o->n_layer);
        for (uint32_t l = 0; l < o->n_layer; l++) gb_u8(&m, l % 3 != 0); /* 0, 3, ... global */
        n_kv++;
    }
    if (o->scaling_type) kv_str(&m, "gemma3.rope.scaling.type", o->scaling_type), n_kv++;
    if (o->scaling_factor != 0) kv_f32(&m, "gemma3.rope.scaling.factor", o->scaling_factor), n_kv++;
    if (o->freq_base_swa != 0) kv_f32(&m, "gemma3.rope.freq_base_swa", o->freq_base_swa), n_kv++;
    if (o->softcap != 0) kv_f32(&m, "gemma3.final_logit_softcapping", o->softcap), n_kv++;
    if (o->attn_scale > 0) kv_f32(&m, "gemma3.attention.scale", o->attn_scale), n_kv++;
    if (o->attn_scale < 0) kv_str(&m, "gemma3.attention.scale", "0.1"), n_kv++;
    if (o->with_tokens) {
        gb_key(&m, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
        gb_u32(&m, GGUF_TYPE_STRING);
        gb_u64(&m, 5);
        const char *toks[] = {"<pad>", "<eos>", "<bos>", "<unk>", "a"};
        for (int i = 0; i < 5; i++) gb_str(&m, toks[i]);
        n_kv++;
        kv_u32(&m, "tokenizer.ggml.bos_token_id", 2), n_kv++;
        kv_u32(&m, "tokenizer.ggml.eos_token_id", 1), n_kv++;
        kv_u32(&m, "tokenizer.ggml.padding_token_id", 0), n_kv++;
    }
    gbuf b = {0};
    gb_header(&b, 3, 0, n_kv);
    gb_bytes(&b, m.p, m.n);
    free(m.p);
    *size = b.n;
    return b.p;
}

static ig_status gemma_hparams(const gemma_opts *o, ig_hparams *hp) {
    size_t n;
    uint8_t *img = build_gemma(o, &n);
    gguf_file *f = NULL;
    ig_status st = gguf_parse(img, n, &f);
    if (st == IG_OK) st = hparams_from_gguf(f, hp);
    gguf_close(f);
    free(img);
    return st;
}

IG_TEST(gguf_hparams_defaults_and_pattern) {
    gemma_opts o = {.n_layer = 18, .sliding_window = 512, .with_tokens = true};
    ig_hparams hp;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    CHECK(strcmp(hp.arch, "gemma3") == 0);
    CHECK(strcmp(hp.name, "tiny gemma") == 0);
    CHECK_EQ_INT(hp.n_layer, 18);
    CHECK_EQ_INT(hp.n_embd, 640);
    CHECK_EQ_INT(hp.n_ff, 2048);
    CHECK_EQ_INT(hp.n_head, 4);
    CHECK_EQ_INT(hp.n_head_kv, 1);
    CHECK_EQ_INT(hp.head_dim, 256);
    CHECK_EQ_INT(hp.head_dim_v, 256);
    CHECK_EQ_INT(hp.n_ctx_train, 32768);
    CHECK_EQ_INT(hp.sliding_window, 512);
    CHECK_NEAR(hp.rms_eps, 1e-6, 1e-12);
    CHECK_NEAR(hp.rope_base_global, 1e6, 0);
    CHECK_NEAR(hp.rope_base_local, 1e4, 0);
    CHECK_NEAR(hp.rope_scale_global, 1, 0);
    CHECK_NEAR(hp.rope_scale_local, 1, 0);
    CHECK_NEAR(hp.attn_scale, 1.0 / 16, 1e-9);
    CHECK_NEAR(hp.final_logit_softcap, 0, 0);
    CHECK_EQ_INT(hp.n_vocab, 5);
    CHECK_EQ_INT(hp.n_vocab_real, 5);
    CHECK_EQ_INT(hp.bos_id, 2);
    CHECK_EQ_INT(hp.eos_id, 1);
    CHECK_EQ_INT(hp.pad_id, 0);
    CHECK_EQ_INT(hp.eot_id, -1);
    for (int l = 0; l < 18; l++) CHECK_EQ_INT(hp.layer_is_swa[l], (l + 1) % 6 != 0);
    CHECK_EQ_INT(hp.layer_is_swa[18], 0);

    /* explicit period 4: layers 3, 7, 11, 15 global */
    o.pattern_kind = 1;
    o.period = 4;
    o.freq_base_swa = 5e4f;
    o.softcap = 30.0f;
    o.with_tokens = false;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    for (int l = 0; l < 18; l++) CHECK_EQ_INT(hp.layer_is_swa[l], l % 4 != 3);
    CHECK_NEAR(hp.rope_base_local, 5e4, 0);
    CHECK_NEAR(hp.final_logit_softcap, 30, 0);
    CHECK_EQ_INT(hp.n_vocab, 0);
    CHECK_EQ_INT(hp.bos_id, -1);

    /* bool array */
    o.pattern_kind = 2;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    for (int l = 0; l < 18; l++) CHECK_EQ_INT(hp.layer_is_swa[l], l % 3 != 0);

    /* missing or zero window: all global, whatever the pattern says */
    o.sliding_window = -1;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    CHECK_EQ_INT(hp.sliding_window, 0);
    for (int l = 0; l < 18; l++) CHECK_EQ_INT(hp.layer_is_swa[l], 0);
    o.sliding_window = 0;
    o.pattern_kind = 0;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    for (int l = 0; l < 18; l++) CHECK_EQ_INT(hp.layer_is_swa[l], 0);
}

IG_TEST(gguf_hparams_rope_scaling_and_27b_scale) {
    gemma_opts o = {.n_layer = 34, .sliding_window = 1024, .scaling_type = "linear",
                    .scaling_factor = 8.0f};
    ig_hparams hp;
    REQUIRE_OK(gemma_hparams(&o, &hp));
    CHECK_NEAR(hp.rope_scale_global, 8, 0);
    CHECK_NEAR(hp.rope_scale_local, 1, 0);
    o.scaling_type = NULL; /* type defaults to linear */
    REQUIRE_OK(gemma_hparams(&o, &hp));
    CHECK_NEAR(hp.rope_scale_global, 8, 0);
    o.scaling_type = "none";
    REQUIRE_OK(gemma_hparams(&o, &hp));
    CHECK_NEAR(hp.rope_scale_global, 1, 0);
    o.scaling_type = "yarn";
    CHECK_STATUS(gemma_hparams(&o, &hp), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "yarn") != NULL);
    o.scaling_type = "linear";
    o.scaling_factor = -2.0f;
    CHECK_STATUS(gemma_hparams(&o, &hp), IG_ERR_FORMAT);

    /* 62 layers: 1/sqrt(n_embd / n_head) = 1/sqrt(160), not 1/sqrt(256) */
    gemma_opts o62 = {.n_layer = 62, .sliding_window = 1024};
    REQUIRE_OK(gemma_hparams(&o62, &hp));
    CHECK_NEAR(hp.attn_scale, 1.0 / sqrt(160.0), 1e-7);
    int n_global = 0;
    for (int l = 0; l < 62; l++) n_global += !hp.layer_is_swa[l];
    CHECK_EQ_INT(n_global, 10); /* 5, 11, ..., 59 */
    CHECK_EQ_INT(hp.layer_is_swa[59], 0);
    CHECK_EQ_INT(hp.layer_is_swa[60], 1);
    CHECK_EQ_INT(hp.layer_is_swa[61], 1);

    /* an explicit gemma3.attention.scale wins over both derivations */
    o62.attn_scale = 0.125f;
    REQUIRE_OK(gemma_hparams(&o62, &hp));
    CHECK_NEAR(hp.attn_scale, 0.125, 0);
    o62.attn_scale = -1;
    CHECK_STATUS(gemma_hparams(&o62, &hp), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "gemma3.attention.scale") != NULL);

    /* too many layers */
    gemma_opts big = {.n_layer = IG_MAX_LAYERS + 1, .sliding_window = 8};
    CHECK_STATUS(gemma_hparams(&big, &hp), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "block_count") != NULL);
}

IG_TEST(gguf_hparams_bad_metadata) {
    ig_hparams hp;
    gguf_file *f = NULL;
    /* wrong architecture */
    gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    kv_str(&b, "general.architecture", "llama");
    REQUIRE_OK(gguf_parse(b.p, b.n, &f));
    CHECK_STATUS(hparams_from_gguf(f, &hp), IG_ERR_UNSUPPORTED);
    CHECK(strstr(ig_last_error(), "llama") != NULL);
    gguf_close(f);
    free(b.p);
    /* a required key of the wrong type, and a missing one */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 2);
    kv_str(&b, "general.architecture", "gemma3");
    kv_str(&b, "gemma3.embedding_length", "640");
    REQUIRE_OK(gguf_parse(b.p, b.n, &f));
    CHECK_STATUS(hparams_from_gguf(f, &hp), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "gemma3.embedding_length") != NULL);
    gguf_close(f);
    free(b.p);
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 2);
    kv_str(&b, "general.architecture", "gemma3");
    kv_u32(&b, "gemma3.embedding_length", 640);
    REQUIRE_OK(gguf_parse(b.p, b.n, &f));
    CHECK_STATUS(hparams_from_gguf(f, &hp), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "gemma3.block_count") != NULL);
    gguf_close(f);
    free(b.p);
    /* heads not divisible by kv heads: validate catches it */
    gemma_opts o = {.n_layer = 6, .sliding_window = 8};
    size_t n;
    uint8_t *img = build_gemma(&o, &n);
    /* head_count_kv 1 -> 3 (4 % 3 != 0): find the key and patch its value */
    const char *key = "gemma3.attention.head_count_kv";
    uint8_t *p = NULL;
    for (size_t i = 0; i + strlen(key) <= n && !p; i++)
        if (!memcmp(img + i, key, strlen(key))) p = img + i;
    REQUIRE(p != NULL);
    p[strlen(key) + 4] = 3;
    REQUIRE_OK(gguf_parse(img, n, &f));
    CHECK_STATUS(hparams_from_gguf(f, &hp), IG_ERR_FORMAT);
    CHECK(strstr(ig_last_error(), "n_head_kv") != NULL);
    gguf_close(f);
    free(img);
}

/* ---- the real Gemma 3 270M Q4_K_M ------------------------------------ */

IG_TEST(gguf_real_gemma3_270m) {
    const char *path = ig_test_real_model();
    if (!path) {
        if (getenv("IGNIS_ALLOW_MISSING_MODEL")) ig_test_skip("real model not present");
        else ig_test_fail_at(__FILE__, __LINE__, "real model missing (set IGNIS_MODEL)");
        return;
    }
    gguf_file *f = NULL;
    REQUIRE_OK(gguf_open(path, &f));
    CHECK_EQ_INT(f->version, 3);
    CHECK_EQ_INT(f->n_kv, 33);
    CHECK_EQ_INT(f->alignment, 32);
    REQUIRE(f->tensors.count == 236);
    /* end of the tensor infos is byte 6525112 (read independently) */
    CHECK_EQ_INT(f->data_offset, 6525120);

    ig_hparams hp;
    REQUIRE_OK(hparams_from_gguf(f, &hp));
    CHECK(strcmp(hp.name, "Gemma 3 270m") == 0);
    CHECK_EQ_INT(hp.n_layer, 18);
    CHECK_EQ_INT(hp.n_embd, 640);
    CHECK_EQ_INT(hp.n_ff, 2048);
    CHECK_EQ_INT(hp.n_head, 4);
    CHECK_EQ_INT(hp.n_head_kv, 1);
    CHECK_EQ_INT(hp.head_dim, 256);
    CHECK_EQ_INT(hp.n_ctx_train, 32768);
    CHECK_EQ_INT(hp.sliding_window, 512);
    CHECK_NEAR(hp.rope_base_global, 1e6, 0);
    CHECK_NEAR(hp.rope_base_local, 1e4, 0);
    CHECK_NEAR(hp.rope_scale_global, 1, 0);
    CHECK_NEAR(hp.attn_scale, 0.0625, 1e-9);
    CHECK_EQ_INT(hp.n_vocab, 262144);
    CHECK_EQ_INT(hp.bos_id, 2);
    CHECK_EQ_INT(hp.eos_id, 1);
    int n_global = 0;
    for (int l = 0; l < 18; l++) {
        CHECK_EQ_INT(hp.layer_is_swa[l], l != 5 && l != 11 && l != 17);
        n_global += !hp.layer_is_swa[l];
    }
    CHECK_EQ_INT(n_global, 3);

    const void *data;
    uint64_t cnt;
    REQUIRE(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &data, &cnt));
    CHECK_EQ_INT(cnt, 262144);
    const gguf_str *toks = data;
    CHECK(toks[2].len == 5 && !memcmp(toks[2].ptr, "<bos>", 5));
    const gguf_kv *tt = gguf_find(f, "tokenizer.ggml.token_type");
    int64_t v;
    CHECK(gguf_arr_get_i64(tt, 0, &v) && v == 3);
    double sc;
    CHECK(gguf_arr_get_f64(gguf_find(f, "tokenizer.ggml.scores"), 1, &sc) && sc == -1000.0);
    gguf_str s;
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s) && s.len == 5 && !memcmp(s.ptr, "llama", 5));

    int counts[31] = {0};
    size_t total = 0;
    for (size_t i = 0; i < f->tensors.count; i++) {
        const ig_tensor *t = &f->tensors.items[i];
        if ((int)t->type >= 0 && (int)t->type < 31) counts[t->type]++;
        total += t->nbytes;
    }
    CHECK_EQ_INT(counts[IG_TYPE_F32], 109);
    CHECK_EQ_INT(counts[IG_TYPE_Q5_0], 81);
    CHECK_EQ_INT(counts[IG_TYPE_Q4_K], 27);
    CHECK_EQ_INT(counts[IG_TYPE_Q8_0], 10);
    CHECK_EQ_INT(counts[IG_TYPE_Q6_K], 9);
    CHECK(total <= f->map.size - f->data_offset);
    const ig_tensor *emb = ig_tensor_find(&f->tensors, "token_embd.weight");
    REQUIRE(emb);
    CHECK_EQ_INT(emb->type, IG_TYPE_Q8_0);
    CHECK(emb->ne[0] == 640 && emb->ne[1] == 262144);
    CHECK_EQ_INT(emb->nbytes, (size_t)262144 * 20 * 34);
    CHECK(emb->data == f->map.data + f->data_offset + 2560);
    const ig_tensor *on = ig_tensor_find(&f->tensors, "output_norm.weight");
    REQUIRE(on);
    CHECK(on->data == f->map.data + f->data_offset);
    CHECK_EQ_INT(on->n_dims, 1);
    const ig_tensor *q = ig_tensor_find(&f->tensors, "blk.0.attn_output.weight");
    REQUIRE(q);
    CHECK_EQ_INT(q->type, IG_TYPE_Q4_K);
    CHECK(q->ne[0] == 1024 && q->ne[1] == 640);
    CHECK_EQ_INT(q->nbytes, (size_t)640 * 4 * 144);
    CHECK(ig_tensor_find(&f->tensors, "blk.17.post_ffw_norm.weight") != NULL);
    CHECK(ig_tensor_find(&f->tensors, "output.weight") == NULL);
    gguf_close(f);
}
