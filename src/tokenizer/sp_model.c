/* SentencePiece ModelProto reader (protobuf wire format, see sp_model.h). */
#include "tokenizer/sp_model.h"

#include <stdlib.h>
#include <string.h>

/* Largest tokenizer.model read (Gemma 3's is 4.7 MB). */
#define SP_MAX_BYTES ((size_t)1 << 30)

typedef struct reader {
    const uint8_t *p, *end;
} reader;

static bool varint(reader *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return false;
        const uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Skips one field of wire type wt (the tag already read). */
static bool skip(reader *r, unsigned wt) {
    uint64_t n;
    switch (wt) {
    case 0: return varint(r, &n);
    case 1: n = 8; break;
    case 2:
        if (!varint(r, &n)) return false;
        break;
    case 5: n = 4; break;
    default: return false; /* groups (3, 4) are not used by sentencepiece */
    }
    if (n > (uint64_t)(r->end - r->p)) return false;
    r->p += n;
    return true;
}

/* One SentencePiece message: piece (1, string), score (2, float), type (3). */
static bool parse_piece(reader r, ig_sp_piece *pc) {
    pc->text = "";
    pc->len = 0;
    pc->score = 0.0f;
    pc->type = IG_SP_NORMAL;
    while (r.p < r.end) {
        uint64_t tag;
        if (!varint(&r, &tag)) return false;
        const unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field == 1 && wt == 2) {
            uint64_t n;
            if (!varint(&r, &n) || n > (uint64_t)(r.end - r.p) || n > UINT32_MAX) return false;
            pc->text = (const char *)r.p;
            pc->len = (uint32_t)n;
            r.p += n;
        } else if (field == 2 && wt == 5) {
            if (r.end - r.p < 4) return false;
            uint32_t bits = (uint32_t)r.p[0] | (uint32_t)r.p[1] << 8 | (uint32_t)r.p[2] << 16 |
                            (uint32_t)r.p[3] << 24;
            memcpy(&pc->score, &bits, sizeof bits);
            r.p += 4;
        } else if (field == 3 && wt == 0) {
            uint64_t t;
            if (!varint(&r, &t)) return false;
            pc->type = t <= 6 ? (int32_t)t : IG_SP_NORMAL;
        } else if (!skip(&r, wt)) {
            return false;
        }
    }
    return true;
}

ig_status ig_sp_model_parse(char *data, size_t size, ig_sp_model *out) {
    memset(out, 0, sizeof *out);
    out->buf = data;
    reader r = {(const uint8_t *)data, (const uint8_t *)data + size};
    size_t cap = 0;
    while (r.p < r.end) {
        uint64_t tag;
        if (!varint(&r, &tag)) goto bad;
        const unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field != 1 || wt != 2) {
            if (!skip(&r, wt)) goto bad;
            continue;
        }
        uint64_t n;
        if (!varint(&r, &n) || n > (uint64_t)(r.end - r.p)) goto bad;
        if (out->n_pieces == cap) {
            const size_t nc = cap ? 2 * cap : 1024;
            ig_sp_piece *np = ig_realloc_array(out->pieces, nc, sizeof *np);
            if (!np) {
                ig_sp_model_free(out);
                return IG_ERR_NO_MEMORY;
            }
            out->pieces = np;
            cap = nc;
        }
        if (!parse_piece((reader){r.p, r.p + n}, &out->pieces[out->n_pieces])) goto bad;
        out->n_pieces++;
        r.p += n;
    }
    if (out->n_pieces == 0) {
        ig_sp_model_free(out);
        return ig_fail(IG_ERR_FORMAT, "tokenizer.model: no pieces");
    }
    return IG_OK;
bad:
    ig_sp_model_free(out);
    return ig_fail(IG_ERR_FORMAT, "tokenizer.model: malformed protobuf");
}

ig_status ig_sp_model_read(const char *path, ig_sp_model *out) {
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    IG_TRY(ig_file_read_all(path, SP_MAX_BYTES, &data, &len));
    return ig_sp_model_parse(data, len, out);
}

void ig_sp_model_free(ig_sp_model *m) {
    if (!m) return;
    free(m->buf);
    free(m->pieces);
    memset(m, 0, sizeof *m);
}
