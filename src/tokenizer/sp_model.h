/* Reader of a SentencePiece model file (tokenizer.model: a serialized
 * sentencepiece.ModelProto): the pieces with their scores and types, which
 * is what llama.cpp's converter copies into a GGUF's tokenizer.ggml.tokens /
 * scores / token_type. Only ModelProto.pieces (field 1) is read; the
 * trainer and normalizer specs are skipped. */
#ifndef IG_SP_MODEL_H
#define IG_SP_MODEL_H

#include "core/util.h"

#include <stddef.h>
#include <stdint.h>

/* sentencepiece.ModelProto.SentencePiece.Type (also llama.cpp's token types). */
enum {
    IG_SP_NORMAL = 1,
    IG_SP_UNKNOWN = 2,
    IG_SP_CONTROL = 3,
    IG_SP_USER_DEFINED = 4,
    IG_SP_UNUSED = 5,
    IG_SP_BYTE = 6,
};

typedef struct ig_sp_piece {
    const char *text; /* into ig_sp_model.buf, not NUL-terminated */
    uint32_t len;
    float score;
    int32_t type;
} ig_sp_piece;

typedef struct ig_sp_model {
    char *buf; /* the file */
    ig_sp_piece *pieces;
    size_t n_pieces;
} ig_sp_model;

/* Parses data (size bytes; kept by the model, which frees it). */
ig_status ig_sp_model_parse(char *data, size_t size, ig_sp_model *out);
ig_status ig_sp_model_read(const char *path, ig_sp_model *out);
void ig_sp_model_free(ig_sp_model *m);

#endif
