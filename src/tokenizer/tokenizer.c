/* Tokenizer core: vocabulary lookup structures, SentencePiece-BPE encoding
 * with byte fallback, decoding and the streaming detokenizer.
 *
 * Encoding (see tokenizer.h for the model):
 *  1. cut the text at pieces found in a trie (leftmost, longest match);
 *  2. escape ' ' -> U+2581 in each remaining fragment;
 *  3. split the fragment into UTF-8 characters (an invalid byte is a
 *     character of its own), linked as a doubly linked list;
 *  4. push every adjacent pair whose concatenation is a mergeable piece on a
 *     max-heap keyed by (score, -left index); pop, drop stale pairs, merge,
 *     push the two new neighbour pairs; every merge removes one symbol, so
 *     there are at most 3n pushes and the whole is O(n log n);
 *  5. emit each symbol's id, or its bytes as <0xXX> tokens. */
#include "tokenizer/tok_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Longest text ig_tokenize accepts; far beyond any context, and it keeps
 * every offset of the escaped text (3 bytes per space) within uint32_t. */
#define IG_TOK_MAX_TEXT ((size_t)1 << 30)

/* ---- vocabulary ------------------------------------------------------- */

ig_status ig_tok_alloc(int32_t n_vocab, ig_tokenizer **out) {
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > IG_TOK_MAX_VOCAB)
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer: vocabulary size %d out of range (1..%d)",
                       (int)n_vocab, IG_TOK_MAX_VOCAB);
    ig_tokenizer *t = ig_calloc_array(1, sizeof *t);
    if (!t) return IG_ERR_NO_MEMORY;
    size_t n = (size_t)n_vocab;
    t->n_vocab = n_vocab;
    t->piece = ig_calloc_array(n, sizeof *t->piece);
    t->piece_len = ig_calloc_array(n, sizeof *t->piece_len);
    t->score = ig_calloc_array(n, sizeof *t->score);
    t->type = ig_calloc_array(n, sizeof *t->type);
    t->attr = ig_calloc_array(n, sizeof *t->attr);
    t->byte_value = ig_calloc_array(n, sizeof *t->byte_value);
    if (!t->piece || !t->piece_len || !t->score || !t->type || !t->attr || !t->byte_value) {
        ig_tokenizer_free(t);
        return IG_ERR_NO_MEMORY;
    }
    memset(t->type, IG_TOKEN_NORMAL, n);
    t->bos = t->eos = t->unk = t->pad = t->eot = -1;
    t->escape_spaces = true;
    for (int i = 0; i < 256; i++) t->byte_token[i] = -1;
    *out = t;
    return IG_OK;
}

ig_status ig_tok_set_piece(ig_tokenizer *t, int32_t id, const char *text, size_t len) {
    if (id < 0 || id >= t->n_vocab)
        return ig_fail(IG_ERR_FORMAT, "tokenizer: token id %d out of range", (int)id);
    if (len > UINT32_MAX - 1)
        return ig_fail(IG_ERR_FORMAT, "tokenizer: piece %d is too long", (int)id);
    if (!text && len) return ig_fail(IG_ERR_INVALID_ARG, "tokenizer: NULL piece text");
    char *p = ig_malloc(len + 1);
    if (!p) return IG_ERR_NO_MEMORY;
    if (len) memcpy(p, text, len); /* pieces may hold NUL bytes: copy all */
    p[len] = '\0';
    free(t->piece[id]);
    t->piece[id] = p;
    t->piece_len[id] = (uint32_t)len;
    return IG_OK;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

int32_t ig_tok_find(const ig_tokenizer *t, const char *s, size_t len) {
    if (!t || !t->hash || len > t->max_piece_len) return -1;
    size_t i = (size_t)hash_bytes(s, len) & t->hash_mask;
    for (;;) {
        int32_t id = t->hash[i];
        if (id < 0) return -1;
        if (t->piece_len[id] == len && memcmp(t->piece[id], s, len) == 0) return id;
        i = (i + 1) & t->hash_mask;
    }
}

static size_t merge_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key;
}

const ig_merge_slot *ig_tok_merge_find(const ig_tokenizer *t, int32_t left, int32_t right) {
    if (!t->merges || left < 0 || right < 0) return NULL;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = merge_hash(key) & t->merges_mask;
    for (;;) {
        const ig_merge_slot *m = &t->merges[i];
        if (m->key == IG_MERGE_EMPTY) return NULL;
        if (m->key == key) return m;
        i = (i + 1) & t->merges_mask;
    }
}

ig_status ig_tok_merge_add(ig_tokenizer *t, int32_t left, int32_t right, int32_t rank,
                           int32_t result) {
    if (!t->merges) return ig_fail(IG_ERR_INTERNAL, "tokenizer: merge table not allocated");
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = merge_hash(key) & t->merges_mask;
    while (t->merges[i].key != IG_MERGE_EMPTY) {
        if (t->merges[i].key == key) return IG_OK; /* duplicate: the lower rank stays */
        i = (i + 1) & t->merges_mask;
    }
    t->merges[i].key = key;
    t->merges[i].rank = rank;
    t->merges[i].result = result;
    return IG_OK;
}

ig_status ig_tok_merges_alloc(ig_tokenizer *t, size_t n_merges) {
    size_t cap = 16;
    while (cap < n_merges * 2) {
        if (!ig_size_mul(cap, 2, &cap))
            return ig_fail(IG_ERR_NO_MEMORY, "tokenizer: too many merges");
    }
    t->merges = ig_calloc_array(cap, sizeof *t->merges);
    if (!t->merges) return IG_ERR_NO_MEMORY;
    for (size_t i = 0; i < cap; i++) t->merges[i].key = IG_MERGE_EMPTY;
    t->merges_mask = cap - 1;
    return IG_OK;
}

static ig_status build_hash(ig_tokenizer *t) {
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2) cap *= 2;
    t->hash = ig_calloc_array(cap, sizeof *t->hash);
    if (!t->hash) return IG_ERR_NO_MEMORY;
    memset(t->hash, 0xff, cap * sizeof *t->hash); /* -1 */
    t->hash_mask = cap - 1;
    t->max_piece_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->piece_len[id] > t->max_piece_len) t->max_piece_len = t->piece_len[id];
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len = t->piece_len[id];
        if (len == 0) continue; /* empty pieces are never looked up */
        size_t i = (size_t)hash_bytes(t->piece[id], len) & t->hash_mask;
        bool dup = false;
        while (t->hash[i] >= 0) {
            int32_t o = t->hash[i];
            if (t->piece_len[o] == len && memcmp(t->piece[o], t->piece[id], len) == 0) {
                dup = true; /* duplicate text: the lowest id wins */
                break;
            }
            i = (i + 1) & t->hash_mask;
        }
        if (!dup) t->hash[i] = id;
    }
    return IG_OK;
}

static bool trie_piece_kind(int type) {
    return type == IG_TOKEN_USER_DEFINED || type == IG_TOKEN_CONTROL || type == IG_TOKEN_UNKNOWN;
}

static ig_status trie_new_node(ig_tokenizer *t, size_t *cap, uint8_t byte, int32_t *out) {
    if (t->trie_n >= (size_t)INT32_MAX)
        return ig_fail(IG_ERR_UNSUPPORTED, "tokenizer: special pieces too large");
    if (t->trie_n == *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        ig_trie_node *n = ig_realloc_array(t->trie, nc, sizeof *n);
        if (!n) return IG_ERR_NO_MEMORY;
        t->trie = n;
        *cap = nc;
    }
    ig_trie_node *node = &t->trie[t->trie_n];
    node->first_child = -1;
    node->next_sibling = -1;
    node->token = -1;
    node->byte = byte;
    *out = (int32_t)t->trie_n++;
    return IG_OK;
}

static ig_status build_trie(ig_tokenizer *t) {
    size_t cap = 0;
    int32_t root;
    IG_TRY(trie_new_node(t, &cap, 0, &root));
    memset(t->trie_first, 0, sizeof t->trie_first);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!trie_piece_kind(t->type[id]) || t->piece_len[id] == 0) continue;
        const uint8_t *s = (const uint8_t *)t->piece[id];
        int32_t node = root;
        for (uint32_t i = 0; i < t->piece_len[id]; i++) {
            int32_t c = t->trie[node].first_child;
            while (c >= 0 && t->trie[c].byte != s[i]) c = t->trie[c].next_sibling;
            if (c < 0) {
                IG_TRY(trie_new_node(t, &cap, s[i], &c));
                t->trie[c].next_sibling = t->trie[node].first_child;
                t->trie[node].first_child = c;
            }
            node = c;
        }
        if (t->trie[node].token < 0) t->trie[node].token = id; /* lowest id wins */
        t->trie_first[s[0]] = 1;
    }
    return IG_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xXX>" -> byte, or -1. */
static int parse_byte_piece(const char *p, size_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int hi = hexval(p[3]), lo = hexval(p[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

ig_status ig_tok_finalize(ig_tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->piece[id]) {
            IG_TRY(ig_tok_set_piece(t, id, "", 0));
            t->type[id] = IG_TOKEN_UNUSED;
        }
        int ty = t->type[id];
        if (ty < IG_TOKEN_NORMAL || ty > IG_TOKEN_BYTE)
            return ig_fail(IG_ERR_FORMAT, "tokenizer: token %d has unknown type %d", (int)id, ty);
        if (isnan(t->score[id])) t->score[id] = -FLT_MAX;
        if (ty == IG_TOKEN_BYTE) {
            int b = parse_byte_piece(t->piece[id], t->piece_len[id]);
            if (b < 0)
                return ig_fail(IG_ERR_FORMAT,
                               "tokenizer: byte token %d has piece '%.16s', not <0xXX>", (int)id,
                               t->piece[id]);
            t->byte_value[id] = (uint8_t)b;
            if (t->byte_token[b] < 0) t->byte_token[b] = id;
            t->attr[id] &= (uint8_t)~IG_TOKA_MERGEABLE;
        }
        if (ty == IG_TOKEN_CONTROL || ty == IG_TOKEN_UNKNOWN || ty == IG_TOKEN_UNUSED)
            t->attr[id] &= (uint8_t)~IG_TOKA_MERGEABLE;
    }
    const int32_t *ids[] = {&t->bos, &t->eos, &t->unk, &t->pad};
    const char *names[] = {"bos", "eos", "unknown", "padding"};
    for (size_t i = 0; i < IG_ARRAY_LEN(ids); i++)
        if (*ids[i] < -1 || *ids[i] >= t->n_vocab)
            return ig_fail(IG_ERR_FORMAT, "tokenizer: %s id %d out of range (vocabulary %d)",
                           names[i], (int)*ids[i], (int)t->n_vocab);
    if (t->unk < 0) /* no id given: the first UNKNOWN piece, if any */
        for (int32_t id = 0; id < t->n_vocab && t->unk < 0; id++)
            if (t->type[id] == IG_TOKEN_UNKNOWN) t->unk = id;
    IG_TRY(build_hash(t));
    /* Gemma marks <end_of_turn> user-defined in tokenizer.model; it ends a
     * turn, so it is a control token (never rendered, never merged). */
    t->eot = ig_tok_find(t, "<end_of_turn>", 13);
    if (t->eot >= 0) {
        t->type[t->eot] = IG_TOKEN_CONTROL;
        t->attr[t->eot] &= (uint8_t)~IG_TOKA_MERGEABLE;
    }
    /* The image markers are user-defined too, but they are special tokens:
     * decoding leaves them out unless asked to render special tokens, and
     * only parse_special maps their text to them. */
    static const char *const image_markers[] = {"<start_of_image>", "<end_of_image>",
                                                "<image_soft_token>"};
    for (size_t i = 0; i < IG_ARRAY_LEN(image_markers); i++) {
        int32_t id = ig_tok_find(t, image_markers[i], strlen(image_markers[i]));
        if (id >= 0 && t->type[id] == IG_TOKEN_USER_DEFINED) {
            t->type[id] = IG_TOKEN_CONTROL;
            t->attr[id] &= (uint8_t)~IG_TOKA_MERGEABLE;
        }
    }
    IG_TRY(build_trie(t));
    return IG_OK;
}

void ig_tokenizer_free(ig_tokenizer *t) {
    if (!t) return;
    if (t->piece)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->piece[i]);
    free(t->piece);
    free(t->piece_len);
    free(t->score);
    free(t->type);
    free(t->attr);
    free(t->byte_value);
    free(t->hash);
    free(t->trie);
    free(t->merges);
    free(t);
}

int32_t ig_tokenizer_eot(const ig_tokenizer *t) { return t ? t->eot : -1; }
int32_t ig_tokenizer_bos(const ig_tokenizer *t) { return t ? t->bos : -1; }
int32_t ig_tokenizer_eos(const ig_tokenizer *t) { return t ? t->eos : -1; }
int32_t ig_tokenizer_unk(const ig_tokenizer *t) { return t ? t->unk : -1; }
int32_t ig_tokenizer_pad(const ig_tokenizer *t) { return t ? t->pad : -1; }
bool ig_tokenizer_add_bos(const ig_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

int ig_tokenizer_n_vocab(const ig_tokenizer *tok) { return tok ? (int)tok->n_vocab : 0; }

int ig_token_type_of(const ig_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    return t->type[id];
}

const char *ig_token_piece(const ig_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return NULL;
    return tok->piece[id];
}

int32_t ig_token_lookup(const ig_tokenizer *tok, const char *piece) {
    if (!tok || !piece) return -1;
    return ig_tok_find(tok, piece, strlen(piece));
}

bool ig_token_is_control(const ig_tokenizer *tok, int32_t id) {
    return ig_token_type_of(tok, id) == IG_TOKEN_CONTROL;
}

/* ---- UTF-8 ------------------------------------------------------------ */

enum { U8_INVALID = 0, U8_OK = 1, U8_SHORT = 2 };

/* Classifies the character at s[0..n) (n >= 1): U8_OK with its length,
 * U8_SHORT when the bytes present are a valid prefix of a longer character,
 * U8_INVALID when s[0] cannot start a well-formed character here
 * (overlongs, surrogates and > U+10FFFF are invalid, as in RFC 3629). */
static int utf8_class(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c < 0x80) {
        *len = 1;
        return U8_OK;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return U8_INVALID;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return U8_SHORT;
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return U8_INVALID;
    }
    *len = need;
    return U8_OK;
}

/* ---- growable buffers ------------------------------------------------- */

typedef struct bytebuf {
    char *p;
    size_t len, cap;
} bytebuf;

static ig_status buf_reserve(bytebuf *b, size_t extra) {
    size_t need;
    if (!ig_size_add(b->len, extra, &need) || !ig_size_add(need, 1, &need))
        return ig_fail(IG_ERR_NO_MEMORY, "tokenizer: text size overflows");
    if (need <= b->cap) return IG_OK;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < need) {
        if (!ig_size_mul(nc, 2, &nc)) return ig_fail(IG_ERR_NO_MEMORY, "tokenizer: text too large");
    }
    char *p = ig_realloc_array(b->p, nc, 1);
    if (!p) return IG_ERR_NO_MEMORY;
    b->p = p;
    b->cap = nc;
    b->p[b->len] = '\0'; /* always a valid C string once allocated */
    return IG_OK;
}

static ig_status buf_append(bytebuf *b, const void *s, size_t n) {
    IG_TRY(buf_reserve(b, n));
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return IG_OK;
}

static const char k_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Appends s[0..n) to out as well-formed UTF-8: each byte that is not part
 * of a well-formed character becomes U+FFFD. When !final an incomplete
 * character at the end is left unconsumed. Returns bytes consumed. */
static ig_status utf8_sanitize(bytebuf *out, const uint8_t *s, size_t n, bool final,
                               size_t *consumed) {
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && s[run] < 0x80) run++; /* ASCII fast path */
        if (run > i) {
            IG_TRY(buf_append(out, s + i, run - i));
            i = run;
            continue;
        }
        size_t len = 0;
        int cls = utf8_class(s + i, n - i, &len);
        if (cls == U8_OK) {
            IG_TRY(buf_append(out, s + i, len));
            i += len;
        } else if (cls == U8_SHORT && !final) {
            break;
        } else {
            IG_TRY(buf_append(out, k_replacement, sizeof k_replacement));
            i++;
        }
    }
    *consumed = i;
    return IG_OK;
}

/* ---- encoding --------------------------------------------------------- */

typedef struct symbol {
    int32_t prev, next;
    uint32_t start, n; /* bytes in the escaped fragment; n == 0: merged away */
    int32_t id;        /* piece id of the text, or -1 */
} symbol;

typedef struct bigram {
    float score;
    int32_t left, right;
    int32_t id;
    uint32_t size;
} bigram;

typedef struct encoder {
    const ig_tokenizer *t;
    bool parse_special;
    int32_t *ids;
    size_t n_ids, cap_ids;
    bytebuf esc; /* escaped fragment */
    symbol *sym;
    size_t cap_sym;
    bigram *heap;
    size_t n_heap, cap_heap;
    ig_tokenize_stats st;
} encoder;

static ig_status emit(encoder *e, int32_t id) {
    if (e->n_ids == e->cap_ids) {
        size_t nc = e->cap_ids ? e->cap_ids * 2 : 64;
        if (nc < e->cap_ids) return ig_fail(IG_ERR_NO_MEMORY, "tokenizer: too many tokens");
        int32_t *p = ig_realloc_array(e->ids, nc, sizeof *p);
        if (!p) return IG_ERR_NO_MEMORY;
        e->ids = p;
        e->cap_ids = nc;
    }
    e->ids[e->n_ids++] = id;
    return IG_OK;
}

static bool bigram_before(const bigram *a, const bigram *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static ig_status heap_push(encoder *e, bigram b) {
    if (e->n_heap == e->cap_heap) {
        size_t nc = e->cap_heap ? e->cap_heap * 2 : 256;
        bigram *p = ig_realloc_array(e->heap, nc, sizeof *p);
        if (!p) return IG_ERR_NO_MEMORY;
        e->heap = p;
        e->cap_heap = nc;
    }
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &e->heap[parent])) break;
        e->heap[i] = e->heap[parent];
        i = parent;
        e->st.heap_steps++;
    }
    e->heap[i] = b;
    e->st.n_bigrams++;
    return IG_OK;
}

static bigram heap_pop(encoder *e) {
    bigram top = e->heap[0];
    bigram last = e->heap[--e->n_heap];
    size_t n = e->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!bigram_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
        e->st.heap_steps++;
    }
    if (n) e->heap[i] = last;
    return top;
}

static ig_status try_bigram(encoder *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return IG_OK;
    const symbol *a = &e->sym[l], *b = &e->sym[r];
    uint64_t size = (uint64_t)a->n + b->n;
    if (e->t->merges) { /* tokenizer.json: only listed merges, by rank */
        const ig_merge_slot *m = ig_tok_merge_find(e->t, a->id, b->id);
        if (!m) return IG_OK;
        bigram bg = {-(float)m->rank, l, r, m->result, (uint32_t)size};
        return heap_push(e, bg);
    }
    if (size > e->t->max_piece_len) return IG_OK;
    int32_t id = ig_tok_find(e->t, e->esc.p + a->start, (size_t)size);
    if (id < 0 || !(e->t->attr[id] & IG_TOKA_MERGEABLE)) return IG_OK;
    bigram bg = {e->t->score[id], l, r, id, (uint32_t)size};
    return heap_push(e, bg);
}

/* A plain symbol (not merged) may stand for a piece that BPE could start
 * from: a normal or user-defined piece of the same text. */
static int32_t base_piece(const ig_tokenizer *t, const char *s, size_t n) {
    int32_t id = ig_tok_find(t, s, n);
    if (id < 0) return -1;
    int ty = t->type[id];
    return ty == IG_TOKEN_NORMAL || ty == IG_TOKEN_USER_DEFINED ? id : -1;
}

static ig_status emit_symbol_bytes(encoder *e, const symbol *s) {
    const ig_tokenizer *t = e->t;
    const uint8_t *p = (const uint8_t *)e->esc.p + s->start;
    bool all = true;
    for (uint32_t i = 0; i < s->n; i++)
        if (t->byte_token[p[i]] < 0) all = false;
    if (all) {
        for (uint32_t i = 0; i < s->n; i++) IG_TRY(emit(e, t->byte_token[p[i]]));
        return IG_OK;
    }
    if (t->unk >= 0) return emit(e, t->unk);
    return ig_fail(IG_ERR_UNSUPPORTED,
                   "tokenizer: text has a character outside the vocabulary and the tokenizer has "
                   "neither byte pieces nor an unknown piece");
}

/* BPE over raw[0..n): escape, split into characters, merge, emit. */
static ig_status encode_fragment(encoder *e, const char *raw, size_t n, bool space_prefix) {
    if (n == 0 && !space_prefix) return IG_OK;
    static const char k_space[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */
    const ig_tokenizer *t = e->t;
    e->esc.len = 0;
    if (space_prefix) IG_TRY(buf_append(&e->esc, k_space, 3));
    for (size_t i = 0; i < n;) {
        size_t j = i;
        if (t->escape_spaces)
            while (j < n && raw[j] != ' ') j++;
        else
            j = n;
        IG_TRY(buf_append(&e->esc, raw + i, j - i));
        if (j < n) {
            IG_TRY(buf_append(&e->esc, k_space, 3));
            j++;
        }
        i = j;
    }
    size_t len = e->esc.len;
    const uint8_t *s = (const uint8_t *)e->esc.p;
    /* one symbol per character: at most one per raw byte, plus the prefix */
    size_t max_sym = IG_MIN(len, n + 1);
    if (max_sym > e->cap_sym) {
        symbol *p = ig_realloc_array(e->sym, max_sym, sizeof *p);
        if (!p) return IG_ERR_NO_MEMORY;
        e->sym = p;
        e->cap_sym = max_sym;
    }
    int32_t ns = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = 1;
        if (utf8_class(s + i, len - i, &cl) != U8_OK) cl = 1;
        if ((size_t)ns >= max_sym) return ig_fail(IG_ERR_INTERNAL, "tokenizer: symbol overflow");
        symbol *y = &e->sym[ns];
        y->prev = ns - 1;
        y->next = i + cl < len ? ns + 1 : -1;
        y->start = (uint32_t)i;
        y->n = (uint32_t)cl;
        y->id = base_piece(t, e->esc.p + i, cl);
        ns++;
        i += cl;
    }
    e->st.n_symbols += (uint64_t)ns;
    e->n_heap = 0;
    for (int32_t i = 0; i + 1 < ns; i++) IG_TRY(try_bigram(e, i, i + 1));
    while (e->n_heap > 0) {
        bigram b = heap_pop(e);
        symbol *l = &e->sym[b.left], *r = &e->sym[b.right];
        if (l->n == 0 || r->n == 0 || (uint64_t)l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) e->sym[r->next].prev = b.left;
        IG_TRY(try_bigram(e, l->prev, b.left));
        IG_TRY(try_bigram(e, b.left, l->next));
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = e->sym[i].next) {
        const symbol *y = &e->sym[i];
        if (y->id >= 0)
            IG_TRY(emit(e, y->id));
        else
            IG_TRY(emit_symbol_bytes(e, y));
    }
    return IG_OK;
}

/* Longest piece of the trie at text[0..n) that may match here; -1 if none. */
static int32_t match_special(encoder *e, const char *text, size_t n, size_t *mlen) {
    const ig_tokenizer *t = e->t;
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t c = t->trie[node].first_child;
        while (c >= 0 && t->trie[c].byte != (uint8_t)text[i]) {
            c = t->trie[c].next_sibling;
            e->st.trie_steps++;
        }
        if (c < 0) break;
        node = c;
        e->st.trie_steps++;
        int32_t tok = t->trie[node].token;
        if (tok >= 0 && (t->type[tok] == IG_TOKEN_USER_DEFINED || e->parse_special)) {
            best = tok;
            *mlen = i + 1;
        }
    }
    return best;
}

ig_status ig_tokenize_ex(const ig_tokenizer *tok, const char *text, size_t len, bool add_bos,
                         bool parse_special, int32_t **ids, size_t *n_ids,
                         ig_tokenize_stats *stats) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!tok || !ids || !n_ids || (!text && len))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_tokenize: NULL argument");
    if (len > IG_TOK_MAX_TEXT)
        return ig_fail(IG_ERR_INVALID_ARG, "ig_tokenize: text of %zu bytes is too long (max %zu)",
                       len, IG_TOK_MAX_TEXT);
    encoder e;
    memset(&e, 0, sizeof e);
    e.t = tok;
    e.parse_special = parse_special;
    ig_status st = IG_OK;
    if (add_bos) {
        if (tok->bos < 0) {
            st = ig_fail(IG_ERR_INVALID_ARG, "ig_tokenize: add_bos but the vocabulary has no BOS");
            goto done;
        }
        st = emit(&e, tok->bos);
        if (st != IG_OK) goto done;
    }
    size_t frag = 0;
    bool prefix = tok->add_space_prefix; /* at the start and after each special */
    for (size_t i = 0; i < len;) {
        size_t mlen = 0;
        int32_t sp =
            tok->trie_first[(uint8_t)text[i]] ? match_special(&e, text + i, len - i, &mlen) : -1;
        if (sp < 0) {
            i++;
            continue;
        }
        st = encode_fragment(&e, text + frag, i - frag, prefix && i > frag);
        if (st == IG_OK) st = emit(&e, sp);
        if (st != IG_OK) goto done;
        i += mlen;
        frag = i;
        prefix = tok->add_space_prefix;
    }
    st = encode_fragment(&e, text + frag, len - frag, prefix && len > frag);
done:
    free(e.esc.p);
    free(e.sym);
    free(e.heap);
    if (stats) *stats = e.st;
    if (st != IG_OK) {
        free(e.ids);
        return st;
    }
    if (!e.ids) { /* empty result: still hand back a free()-able pointer */
        e.ids = ig_malloc(sizeof *e.ids);
        if (!e.ids) return IG_ERR_NO_MEMORY;
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    return IG_OK;
}

ig_status ig_tokenize(const ig_tokenizer *tok, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **ids, size_t *n_ids) {
    return ig_tokenize_ex(tok, text, len, add_bos, parse_special, ids, n_ids, NULL);
}

/* ---- decoding --------------------------------------------------------- */

size_t ig_token_bytes(const ig_tokenizer *t, int32_t id, bool render_special, char *out,
                      size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    int ty = t->type[id];
    if (ty == IG_TOKEN_BYTE) {
        if (cap) out[0] = (char)t->byte_value[id];
        return 1;
    }
    if ((ty == IG_TOKEN_CONTROL || ty == IG_TOKEN_UNKNOWN) && !render_special) return 0;
    const char *p = t->piece[id];
    size_t n = t->piece_len[id], o = 0;
    for (size_t i = 0; i < n;) {
        bool space = i + 2 < n && (uint8_t)p[i] == 0xE2 && (uint8_t)p[i + 1] == 0x96 &&
                     (uint8_t)p[i + 2] == 0x81;
        if (o < cap) out[o] = space ? ' ' : p[i];
        o++;
        i += space ? 3 : 1;
    }
    return o;
}

/* Appends the raw bytes of one token (ig_token_bytes) to out. */
static ig_status token_bytes(const ig_tokenizer *t, int32_t id, bool render_special, bytebuf *out) {
    size_t n = ig_token_bytes(t, id, render_special, NULL, 0);
    IG_TRY(buf_reserve(out, n));
    ig_token_bytes(t, id, render_special, out->p + out->len, n);
    out->len += n;
    out->p[out->len] = '\0';
    return IG_OK;
}

ig_status ig_detokenize(const ig_tokenizer *tok, const int32_t *ids, size_t n_ids,
                        bool render_special, char **text) {
    if (text) *text = NULL;
    if (!tok || !text || (!ids && n_ids))
        return ig_fail(IG_ERR_INVALID_ARG, "ig_detokenize: NULL argument");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return ig_fail(IG_ERR_INVALID_ARG,
                           "ig_detokenize: token id %d at %zu out of range (0..%d)", (int)ids[i], i,
                           (int)tok->n_vocab - 1);
    bytebuf raw = {0}, out = {0};
    ig_status st = buf_reserve(&raw, 0);
    for (size_t i = 0; st == IG_OK && i < n_ids; i++)
        st = token_bytes(tok, ids[i], render_special, &raw);
    size_t used = 0;
    if (st == IG_OK) st = buf_reserve(&out, raw.len);
    if (st == IG_OK) st = utf8_sanitize(&out, (const uint8_t *)raw.p, raw.len, true, &used);
    free(raw.p);
    if (st != IG_OK) {
        free(out.p);
        return st;
    }
    *text = out.p;
    return IG_OK;
}

/* ---- streaming detokenizer -------------------------------------------- */

struct ig_detok_stream {
    const ig_tokenizer *tok;
    bytebuf raw;  /* bytes not yet validated (an incomplete character) */
    bytebuf q;    /* well-formed text not yet handed out */
    size_t q_off; /* first byte of q not yet handed out */
};

ig_status ig_detok_stream_create(const ig_tokenizer *tok, ig_detok_stream **out) {
    if (out) *out = NULL;
    if (!tok || !out) return ig_fail(IG_ERR_INVALID_ARG, "ig_detok_stream_create: NULL argument");
    ig_detok_stream *s = ig_calloc_array(1, sizeof *s);
    if (!s) return IG_ERR_NO_MEMORY;
    s->tok = tok;
    *out = s;
    return IG_OK;
}

void ig_detok_stream_free(ig_detok_stream *s) {
    if (!s) return;
    free(s->raw.p);
    free(s->q.p);
    free(s);
}

/* Copies as much queued text as fits in cap-1 bytes, cut at a character
 * boundary (the queue holds only whole characters). */
static size_t stream_deliver(ig_detok_stream *s, char *out, size_t cap) {
    if (!out || cap == 0) return 0;
    size_t avail = s->q.len - s->q_off, k = IG_MIN(avail, cap - 1);
    if (k < avail)
        while (k > 0 && ((uint8_t)s->q.p[s->q_off + k] & 0xC0) == 0x80) k--;
    if (k) memcpy(out, s->q.p + s->q_off, k);
    out[k] = '\0';
    s->q_off += k;
    if (s->q_off == s->q.len) s->q.len = s->q_off = 0;
    return k;
}

static ig_status stream_process(ig_detok_stream *s, bool final) {
    size_t used = 0;
    IG_TRY(utf8_sanitize(&s->q, (const uint8_t *)s->raw.p, s->raw.len, final, &used));
    memmove(s->raw.p, s->raw.p + used, s->raw.len - used);
    s->raw.len -= used;
    return IG_OK;
}

size_t ig_detok_stream_push(ig_detok_stream *s, int32_t id, char *out, size_t cap) {
    if (out && cap) out[0] = '\0';
    if (!s) return 0;
    if (id < 0 || id >= s->tok->n_vocab) {
        ig_fail(IG_ERR_INVALID_ARG, "ig_detok_stream_push: token id %d out of range", (int)id);
    } else {
        size_t before = s->raw.len;
        if (token_bytes(s->tok, id, false, &s->raw) != IG_OK || stream_process(s, false) != IG_OK)
            s->raw.len = IG_MIN(before, s->raw.len); /* out of memory: drop this token */
    }
    return stream_deliver(s, out, cap);
}

size_t ig_detok_stream_flush(ig_detok_stream *s, char *out, size_t cap) {
    if (out && cap) out[0] = '\0';
    if (!s) return 0;
    if (s->raw.len && stream_process(s, true) != IG_OK) s->raw.len = 0;
    return stream_deliver(s, out, cap);
}
