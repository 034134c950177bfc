/* Tokenizer: internal constructors and accessors. The public encode/decode
 * API lives in ignis.h (ig_tokenize, ig_detokenize, ig_detok_stream_*,
 * ig_chat_render).
 *
 * The model is SentencePiece BPE with byte fallback (Gemma 3):
 *  - user-defined pieces (space runs, "\n", HTML tags, ...) are cut out of the
 *    raw text first (leftmost-longest match); control pieces ("<bos>",
 *    "<start_of_turn>", ...) only when parse_special is set;
 *  - the rest has ' ' replaced by U+2581 and is merged pair by pair, best
 *    score first (ties: leftmost), with a heap: O(n log n);
 *  - a symbol that is not a piece becomes one <0xXX> token per byte.
 * Both constructors build the same vocabulary: pieces, scores, types. From a
 * GGUF, a pair merges when its text is a piece, best piece score first (as
 * SentencePiece and llama.cpp do). From a Hugging Face tokenizer.json the
 * merge list itself is kept: a pair merges only when it is a listed rule,
 * lowest rank first (bigram score -rank), which is exactly HF's BPE; each
 * piece's score is also set to minus the rank of its first merge, so the
 * two agree whenever the merges are all the splits of the pieces (as in any
 * SentencePiece-converted tokenizer.json, Gemma 3's included).
 */
#ifndef IG_TOKENIZER_H
#define IG_TOKENIZER_H

#include "core/util.h"
#include "model/gguf.h"

/* From GGUF metadata: tokenizer.ggml.{model,tokens,scores,token_type},
 * bos/eos/unknown/padding ids, add_bos_token, add_space_prefix. */
ig_status ig_tokenizer_from_gguf(const gguf_file *f, ig_tokenizer **out);
/* From a Hugging Face tokenizer.json (BPE model with byte fallback). */
ig_status ig_tokenizer_from_hf_json(const char *path, ig_tokenizer **out);
/* The same from the JSON text in memory (len bytes, need not be NUL-terminated). */
ig_status ig_tokenizer_from_hf_json_buf(const char *json, size_t len, ig_tokenizer **out);
void ig_tokenizer_free(ig_tokenizer *t);

/* Special ids, -1 when the vocabulary has none. eot is "<end_of_turn>". */
int32_t ig_tokenizer_eot(const ig_tokenizer *t);
int32_t ig_tokenizer_bos(const ig_tokenizer *t);
int32_t ig_tokenizer_eos(const ig_tokenizer *t);
int32_t ig_tokenizer_unk(const ig_tokenizer *t);
int32_t ig_tokenizer_pad(const ig_tokenizer *t);
/* Whether the model wants BOS prepended to raw prompts (not to a rendered
 * chat, which already starts with "<bos>"). */
bool ig_tokenizer_add_bos(const ig_tokenizer *t);

/* Piece kinds, numbered as in GGUF tokenizer.ggml.token_type. */
typedef enum ig_token_type {
    IG_TOKEN_NORMAL = 1,
    IG_TOKEN_UNKNOWN = 2,
    IG_TOKEN_CONTROL = 3,
    IG_TOKEN_USER_DEFINED = 4,
    IG_TOKEN_UNUSED = 5,
    IG_TOKEN_BYTE = 6,
} ig_token_type;

/* Type of id, or 0 when id is out of range. */
int ig_token_type_of(const ig_tokenizer *t, int32_t id);

/* Raw bytes of token id as decoding produces them: U+2581 becomes ' ', a
 * byte piece its byte; control and unknown pieces give nothing unless
 * render_special (then their piece text). Writes at most cap bytes to out
 * (no NUL; out may be NULL when cap is 0) and returns the full length; 0
 * for an id out of range. */
size_t ig_token_bytes(const ig_tokenizer *t, int32_t id, bool render_special, char *out,
                      size_t cap);

/* Work counters of one encode, for tests that check the cost is
 * linearithmic rather than timing it. */
typedef struct ig_tokenize_stats {
    uint64_t n_symbols;  /* UTF-8 characters fed to BPE */
    uint64_t n_bigrams;  /* candidate merges pushed on the heap */
    uint64_t heap_steps; /* sift-up/sift-down steps of the heap */
    uint64_t trie_steps; /* trie nodes visited by the special-piece matcher */
} ig_tokenize_stats;

/* ig_tokenize that also reports its work counters (stats may be NULL). */
ig_status ig_tokenize_ex(const ig_tokenizer *tok, const char *text, size_t len, bool add_bos,
                         bool parse_special, int32_t **ids, size_t *n_ids,
                         ig_tokenize_stats *stats);

/* True when a chat template (GGUF tokenizer.chat_template or
 * tokenizer_config.json) is Gemma's: it uses <start_of_turn>. */
bool ig_chat_template_is_gemma(const char *template_text);
/* True when a chat template reads tool definitions or tool calls (the
 * Jinja variables tools / tool_calls, or role "tool"): a template with its
 * own tool format, which ignis's C renderer does not reproduce. */
bool ig_chat_template_has_tools(const char *template_text);

#endif
