/* The SentencePiece model reader: a hand-built ModelProto (pieces with and
 * without score and type, unknown fields skipped), and every truncation of
 * it refused without reading past the end. */
#include "test.h"

#include "tokenizer/sp_model.h"

#include <stdlib.h>
#include <string.h>

/* pieces "<unk>" (type 2, score 0), "\xe2\x96\x81a" (score -1.5, type
 * omitted: NORMAL), "<0x41>" (type 6, score 0.25); then a normalizer_spec
 * (field 3) and an unknown varint field 9. */
static const unsigned char k_model[] = {
    0x0a, 0x0e, 0x0a, 0x05, '<', 'u', 'n', 'k', '>', 0x15, 0x00, 0x00, 0x00, 0x00, 0x18, 0x02,
    0x0a, 0x0b, 0x0a, 0x04, 0xe2, 0x96, 0x81, 'a', 0x15, 0x00, 0x00, 0xc0, 0xbf,
    0x0a, 0x0f, 0x0a, 0x06, '<', '0', 'x', '4', '1', '>', 0x15, 0x00, 0x00, 0x80, 0x3e, 0x18, 0x06,
    0x1a, 0x03, 0x0a, 0x01, 'x',
    0x48, 0x96, 0x01,
};

IG_TEST(sp_model_parse) {
    char *buf = malloc(sizeof k_model);
    REQUIRE(buf != NULL);
    memcpy(buf, k_model, sizeof k_model);
    ig_sp_model m;
    REQUIRE(ig_sp_model_parse(buf, sizeof k_model, &m) == IG_OK);
    REQUIRE(m.n_pieces == 3);
    CHECK(m.pieces[0].len == 5 && !memcmp(m.pieces[0].text, "<unk>", 5));
    CHECK_EQ_INT(m.pieces[0].type, IG_SP_UNKNOWN);
    CHECK(m.pieces[0].score == 0.0f);
    CHECK(m.pieces[1].len == 4 && !memcmp(m.pieces[1].text, "\xe2\x96\x81" "a", 4));
    CHECK_EQ_INT(m.pieces[1].type, IG_SP_NORMAL);
    CHECK(m.pieces[1].score == -1.5f);
    CHECK_EQ_INT(m.pieces[2].type, IG_SP_BYTE);
    CHECK(m.pieces[2].score == 0.25f);
    ig_sp_model_free(&m);
}

IG_TEST(sp_model_truncated) {
    /* Prefixes that end between top-level fields are models with fewer
     * fields; every other prefix (and the empty one: no pieces) is refused. */
    static const size_t whole[] = {16, 29, 46, 51, sizeof k_model};
    size_t n_ok = 0;
    for (size_t n = 0; n <= sizeof k_model; n++) {
        char *buf = malloc(n ? n : 1);
        REQUIRE(buf != NULL);
        memcpy(buf, k_model, n);
        ig_sp_model m;
        const ig_status st = ig_sp_model_parse(buf, n, &m);
        bool want_ok = false;
        for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) want_ok |= n == whole[i];
        CHECK_EQ_INT(st == IG_OK, want_ok);
        if (st == IG_OK) {
            n_ok++;
            CHECK_EQ_INT(m.n_pieces, n >= 46 ? 3 : n >= 29 ? 2 : 1);
            ig_sp_model_free(&m);
        }
    }
    CHECK_EQ_INT(n_ok, 5);
}
