/* The token trie, the matcher (a lazily built DFA over sets of automaton
 * stacks) and the per-step token mask.
 *
 * A stack is a chain of nodes (pos, parent): pos is an element index; the
 * top node's element is a byte set, a lower node's is where its rule goes
 * on once the rule above it is done. A reference that ends its alternative
 * pushes no return node (tail call), so repetition runs in constant depth.
 * Nodes are hash-consed, so a stack is identified by its top node; a state
 * is a sorted set of top nodes plus whether the sentence may end there,
 * also interned. Transitions state x byte -> state are memoised in a table
 * per state, so after warm-up a byte costs one load. */
#include "grammar/grammar_internal.h"

#include "core/util.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define TRIE_MAX_TOKEN_LEN 1024
#define SOFT_STATES 4096
#define HARD_STATES 32768
#define SOFT_NODES (1u << 20)
#define MASK_CACHE 8
#define TR_UNKNOWN (-2)
#define DEAD (-1)

/* ---- token trie -------------------------------------------------------------- */

/* One trie node, in pre-order: the walk reads them front to back. */
typedef struct trie_node {
    int32_t end;       /* index after the node's subtree */
    int32_t first_tok; /* a token whose bytes end here, or -1 */
    uint16_t depth;    /* 1 for the root's children */
    uint8_t byte;      /* edge byte into the node */
    uint8_t plain;     /* every byte of the subtree, this one included, is plain */
    uint8_t u8;        /* the node starts a character and every token of the subtree is
                          plain ASCII and well-formed UTF-8 beyond ASCII */
    uint16_t sub_len;  /* longest token of the subtree, in bytes from this node on */
} trie_node;

/* Plain bytes: printable ASCII but '"' and '\\'. When every plain byte
 * leads a state to one same next state, and so on for at least the length
 * of a plain subtree's longest token (inside a JSON string: forever; in a
 * string of bounded length: as many bytes as remain), every token of that
 * subtree is allowed, and the walk takes it whole. */
static inline bool plain_byte(unsigned b) { return b >= 0x20 && b <= 0x7E && b != '"' && b != '\\'; }

/* Second byte ranges of a UTF-8 lead byte (the rest are 80-BF); lo > hi
 * when b does not lead a well-formed sequence. n: continuation bytes. */
static void utf8_lead(unsigned b, int *n, unsigned *lo, unsigned *hi) {
    *n = 0;
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) *n = 1;
    else if (b >= 0xE0 && b <= 0xEF) {
        *n = 2;
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        *n = 3;
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
    } else {
        *lo = 1;
        *hi = 0;
    }
}

/* Whether s[0..n) is plain ASCII and well-formed multi-byte UTF-8. */
static bool plain_text(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            if (!plain_byte(s[i])) return false;
            i++;
            continue;
        }
        int k;
        unsigned lo, hi;
        utf8_lead(s[i], &k, &lo, &hi);
        if (k == 0 || i + (size_t)k >= n) return false; /* bytes i..i+k must exist */
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (int j = 2; j <= k; j++)
            if (s[i + (size_t)j] < 0x80 || s[i + (size_t)j] > 0xBF) return false;
        i += (size_t)k + 1;
    }
    return true;
}

struct ig_token_trie {
    int n_vocab;
    size_t n_nodes;
    trie_node *node;
    int32_t *next_tok;  /* [n_vocab] next token with the same bytes, or -1 */
    int32_t *seq_tok;   /* the tokens in pre-order of their nodes */
    int32_t *seq_off;   /* [n_nodes + 1] first entry of seq_tok at or after node i */
    char *bytes;        /* all tokens' bytes */
    size_t *off;        /* [n_vocab + 1] */
    int max_depth;
};

typedef struct tok_ref {
    const char *b;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *x, const void *y) {
    const tok_ref *a = x, *b = y;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->b, b->b, n) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void ig_token_trie_free(ig_token_trie *t) {
    if (!t) return;
    free(t->node);
    free(t->next_tok);
    free(t->seq_tok);
    free(t->seq_off);
    free(t->bytes);
    free(t->off);
    free(t);
}

int ig_token_trie_n_vocab(const ig_token_trie *t) { return t ? t->n_vocab : 0; }

const char *ig_token_trie_bytes(const ig_token_trie *t, int32_t id, size_t *len) {
    if (len) *len = 0;
    if (!t || id < 0 || id >= t->n_vocab || t->off[id + 1] == t->off[id]) return NULL;
    if (len) *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

/* Builds the trie over t->bytes / t->off. */
static ig_status trie_build(ig_token_trie *t) {
    size_t n = (size_t)t->n_vocab, total = t->off[n];
    tok_ref *refs = ig_calloc_array(n ? n : 1, sizeof *refs);
    t->next_tok = ig_calloc_array(n ? n : 1, sizeof *t->next_tok);
    if (!refs || !t->next_tok) {
        free(refs);
        return IG_ERR_NO_MEMORY;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        t->next_tok[i] = -1;
        size_t len = t->off[i + 1] - t->off[i];
        if (len == 0 || len > TRIE_MAX_TOKEN_LEN) continue;
        refs[m++] = (tok_ref){t->bytes + t->off[i], (uint32_t)len, (int32_t)i};
    }
    qsort(refs, m, sizeof *refs, cmp_tok);
    size_t cap = total ? total : 1;
    t->node = ig_calloc_array(cap, sizeof *t->node);
    int32_t path[TRIE_MAX_TOKEN_LEN + 1];
    int32_t last_tok[TRIE_MAX_TOKEN_LEN + 1];
    if (!t->node) {
        free(refs);
        return IG_ERR_NO_MEMORY;
    }
    size_t nn = 0;
    uint32_t plen = 0; /* length of the current path */
    const tok_ref *prev = NULL;
    for (size_t k = 0; k < m; k++) {
        const tok_ref *r = &refs[k];
        uint32_t l = 0;
        if (prev)
            while (l < prev->len && l < r->len && prev->b[l] == r->b[l]) l++;
        /* close the nodes below the common prefix */
        while (plen > l) t->node[path[--plen]].end = (int32_t)nn;
        for (uint32_t d = l; d < r->len; d++) {
            t->node[nn].byte = (uint8_t)r->b[d];
            t->node[nn].depth = (uint16_t)(d + 1);
            t->node[nn].first_tok = -1;
            path[plen++] = (int32_t)nn;
            nn++;
        }
        int32_t node = path[r->len - 1];
        if (t->node[node].first_tok < 0) t->node[node].first_tok = r->id;
        else t->next_tok[last_tok[r->len - 1]] = r->id;
        last_tok[r->len - 1] = r->id;
        if ((int)r->len > t->max_depth) t->max_depth = (int)r->len;
        prev = r;
    }
    while (plen > 0) t->node[path[--plen]].end = (int32_t)nn;
    t->n_nodes = nn;
    free(refs);
    /* plain subtrees (children before parents: reverse pre-order) */
    /* per node: every token of the subtree is plain text (kept in u8 for now) */
    for (size_t i = nn; i-- > 0;) {
        bool all = true;
        for (int32_t id = t->node[i].first_tok; id >= 0 && all; id = t->next_tok[id])
            all = plain_text((const uint8_t *)t->bytes + t->off[id], t->off[id + 1] - t->off[id]);
        for (size_t j = i + 1; all && j < (size_t)t->node[i].end; j = (size_t)t->node[j].end)
            all = t->node[j].u8 != 0;
        t->node[i].u8 = all;
    }
    /* then only where the node starts a character (its byte is no continuation) */
    for (size_t i = 0; i < nn; i++)
        if ((t->node[i].byte & 0xC0) == 0x80) t->node[i].u8 = 0;
    for (size_t i = nn; i-- > 0;) {
        bool pl = plain_byte(t->node[i].byte);
        unsigned len = 1;
        for (size_t j = i + 1; j < (size_t)t->node[i].end; j = (size_t)t->node[j].end) {
            pl = pl && t->node[j].plain;
            if (t->node[j].sub_len + 1u > len) len = t->node[j].sub_len + 1u;
        }
        t->node[i].plain = pl;
        t->node[i].sub_len = (uint16_t)IG_MIN(len, 65535u);
    }
    t->seq_tok = ig_calloc_array(n ? n : 1, sizeof *t->seq_tok);
    t->seq_off = ig_calloc_array(nn + 1, sizeof *t->seq_off);
    if (!t->seq_tok || !t->seq_off) return IG_ERR_NO_MEMORY;
    int32_t k = 0;
    for (size_t i = 0; i < nn; i++) {
        t->seq_off[i] = k;
        for (int32_t id = t->node[i].first_tok; id >= 0; id = t->next_tok[id]) t->seq_tok[k++] = id;
    }
    t->seq_off[nn] = k;
    return IG_OK;
}

ig_status ig_token_trie_from_bytes(const char *const *bytes, const size_t *lens, int n_vocab,
                                   ig_token_trie **out) {
    if (out) *out = NULL;
    if (!out || n_vocab < 0 || (n_vocab && (!bytes || !lens)))
        return ig_fail(IG_ERR_INVALID_ARG, "token trie: bad arguments");
    ig_token_trie *t = ig_calloc_array(1, sizeof *t);
    if (!t) return IG_ERR_NO_MEMORY;
    t->n_vocab = n_vocab;
    t->off = ig_calloc_array((size_t)n_vocab + 1, sizeof *t->off);
    size_t total = 0;
    for (int i = 0; t->off && i < n_vocab; i++) {
        size_t l = bytes[i] ? lens[i] : 0;
        if (!ig_size_add(total, l, &total)) {
            ig_token_trie_free(t);
            return ig_fail(IG_ERR_NO_MEMORY, "token trie: size overflows");
        }
        t->off[i + 1] = total;
    }
    t->bytes = t->off ? ig_calloc_array(total ? total : 1, 1) : NULL;
    if (!t->bytes) {
        ig_token_trie_free(t);
        return ig_fail(IG_ERR_NO_MEMORY, "token trie: out of memory");
    }
    for (int i = 0; i < n_vocab; i++)
        if (t->off[i + 1] > t->off[i]) memcpy(t->bytes + t->off[i], bytes[i], t->off[i + 1] - t->off[i]);
    if (trie_build(t) != IG_OK) {
        ig_token_trie_free(t);
        return ig_fail(IG_ERR_NO_MEMORY, "token trie: out of memory");
    }
    *out = t;
    return IG_OK;
}

ig_status ig_token_trie_create(const ig_tokenizer *tok, int n_vocab, ig_token_trie **out) {
    if (out) *out = NULL;
    if (!tok || !out || n_vocab < 1) return ig_fail(IG_ERR_INVALID_ARG, "token trie: bad arguments");
    if (n_vocab > ig_tokenizer_n_vocab(tok)) n_vocab = ig_tokenizer_n_vocab(tok);
    ig_token_trie *t = ig_calloc_array(1, sizeof *t);
    if (!t) return IG_ERR_NO_MEMORY;
    t->n_vocab = n_vocab;
    t->off = ig_calloc_array((size_t)n_vocab + 1, sizeof *t->off);
    size_t total = 0;
    for (int i = 0; t->off && i < n_vocab; i++) {
        size_t l = ig_token_bytes(tok, i, false, NULL, 0);
        if (!ig_size_add(total, l, &total)) break;
        t->off[i + 1] = total;
    }
    t->bytes = t->off ? ig_calloc_array(total ? total : 1, 1) : NULL;
    if (!t->bytes) {
        ig_token_trie_free(t);
        return ig_fail(IG_ERR_NO_MEMORY, "token trie: out of memory");
    }
    for (int i = 0; i < n_vocab; i++)
        ig_token_bytes(tok, i, false, t->bytes + t->off[i], t->off[i + 1] - t->off[i]);
    if (trie_build(t) != IG_OK) {
        ig_token_trie_free(t);
        return ig_fail(IG_ERR_NO_MEMORY, "token trie: out of memory");
    }
    *out = t;
    return IG_OK;
}

/* ---- matcher --------------------------------------------------------------------- */

typedef struct mstate {
    size_t off;    /* into tops */
    int32_t n;     /* top nodes */
    bool accept;   /* the sentence may end here */
    int32_t *tr;   /* 256 transitions (TR_UNKNOWN until computed), or NULL */
    uint64_t hash;
    int32_t run;   /* plain bytes always accepted from here (PLAIN_RUN_INF: any number), -1 unknown */
    int8_t loops_text; /* every plain character (any length) leads back here: 1, 0, -1 unknown */
    bool has_key;  /* k1, k2: content hashes, the same in every matcher */
    uint64_t k1, k2;
} mstate;

typedef struct mcache {
    int32_t state;
    const ig_token_trie *trie;
    uint32_t *mask;
    size_t words;
    int n_allowed;
} mcache;

struct ig_grammar_matcher {
    ig_grammar *g;
    /* nodes */
    int32_t *npos, *npar;
    uint16_t *ndepth;
    uint64_t *nh1, *nh2; /* content hashes of the stack ending at the node */
    size_t n_nodes, cap_nodes;
    int32_t *nhash;
    size_t nhash_cap;
    /* states */
    mstate *st;
    size_t n_st, cap_st;
    int32_t *tops;
    size_t n_tops, cap_tops;
    int32_t *shash;
    size_t shash_cap;
    int32_t cur, init;
    /* transition scratch */
    int32_t *scr;
    size_t n_scr, cap_scr;
    int64_t *work; /* (pos << 32 | parent + 1) */
    size_t n_work, cap_work;
    uint64_t *vkey;
    uint32_t *vgen;
    size_t vcap, vcount;
    uint32_t gen;
    bool accept_flag;
    bool failed;
    bool too_complex; /* failed on IG_GRAMMAR_MAX_STACKS or IG_GRAMMAR_MAX_WORK */
    size_t budget;    /* work (closure steps, stacks tried) in the current public call */
    mcache cache[MASK_CACHE];
    int cache_next;
    ig_grammar_stats stats;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = ig_realloc_array(*p, c, elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool nhash_rebuild(ig_grammar_matcher *m, size_t cap) {
    int32_t *h = ig_calloc_array(cap, sizeof *h);
    if (!h) return false;
    for (size_t i = 0; i < cap; i++) h[i] = -1;
    for (size_t i = 0; i < m->n_nodes; i++) {
        size_t k = mix64(((uint64_t)(uint32_t)m->npos[i] << 32) | (uint32_t)(m->npar[i] + 1)) & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = (int32_t)i;
    }
    free(m->nhash);
    m->nhash = h;
    m->nhash_cap = cap;
    return true;
}

/* The node (pos, par); -2 when the stack would be too deep, -3 out of memory. */
static int32_t cons(ig_grammar_matcher *m, int32_t pos, int32_t par) {
    int depth = par < 0 ? 1 : m->ndepth[par] + 1;
    if (depth > IG_GRAMMAR_MAX_STACK) return -2;
    if ((m->n_nodes + 1) * 2 > m->nhash_cap && !nhash_rebuild(m, m->nhash_cap ? m->nhash_cap * 2 : 1024))
        return -3;
    uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)(par + 1);
    size_t k = mix64(key) & (m->nhash_cap - 1);
    while (m->nhash[k] >= 0) {
        int32_t n = m->nhash[k];
        if (m->npos[n] == pos && m->npar[n] == par) return n;
        k = (k + 1) & (m->nhash_cap - 1);
    }
    size_t c1 = m->cap_nodes, c2 = m->cap_nodes, c3 = m->cap_nodes, c4 = m->cap_nodes,
           c5 = m->cap_nodes;
    if (!grow((void **)&m->npos, &c1, m->n_nodes + 1, sizeof *m->npos) ||
        !grow((void **)&m->npar, &c2, m->n_nodes + 1, sizeof *m->npar) ||
        !grow((void **)&m->ndepth, &c3, m->n_nodes + 1, sizeof *m->ndepth) ||
        !grow((void **)&m->nh1, &c4, m->n_nodes + 1, sizeof *m->nh1) ||
        !grow((void **)&m->nh2, &c5, m->n_nodes + 1, sizeof *m->nh2))
        return -3;
    m->cap_nodes = IG_MIN(IG_MIN(IG_MIN(c1, c2), IG_MIN(c3, c4)), c5);
    int32_t n = (int32_t)m->n_nodes++;
    m->npos[n] = pos;
    m->npar[n] = par;
    m->ndepth[n] = (uint16_t)depth;
    uint64_t p1 = par < 0 ? 0x51ED27052ull : m->nh1[par], p2 = par < 0 ? 0x7A3B9C11Dull : m->nh2[par];
    m->nh1[n] = mix64(p1 * 0x9E3779B97F4A7C15ull + (uint64_t)(uint32_t)pos + 1);
    m->nh2[n] = mix64((p2 ^ ((uint64_t)(uint32_t)pos << 17)) + 0xD1B54A32D192ED03ull);
    m->nhash[k] = n;
    return n;
}

static bool visit(ig_grammar_matcher *m, int32_t pos, int32_t par) {
    if ((m->vcount + 1) * 2 > m->vcap) {
        size_t cap = m->vcap ? m->vcap * 2 : 256;
        uint64_t *k = ig_calloc_array(cap, sizeof *k);
        uint32_t *g = ig_calloc_array(cap, sizeof *g);
        if (!k || !g) {
            free(k);
            free(g);
            m->failed = true;
            return false;
        }
        for (size_t i = 0; i < m->vcap; i++) {
            if (m->vgen[i] != m->gen) continue;
            size_t j = mix64(m->vkey[i]) & (cap - 1);
            while (g[j] == m->gen) j = (j + 1) & (cap - 1);
            k[j] = m->vkey[i];
            g[j] = m->gen;
        }
        free(m->vkey);
        free(m->vgen);
        m->vkey = k;
        m->vgen = g;
        m->vcap = cap;
    }
    uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)(par + 1);
    size_t j = mix64(key) & (m->vcap - 1);
    while (m->vgen[j] == m->gen) {
        if (m->vkey[j] == key) return false;
        j = (j + 1) & (m->vcap - 1);
    }
    m->vkey[j] = key;
    m->vgen[j] = m->gen;
    m->vcount++;
    return true;
}

static void begin_closure(ig_grammar_matcher *m) {
    m->n_scr = 0;
    m->accept_flag = false;
    m->vcount = 0;
    if (++m->gen == 0) { /* wrapped: clear the stamps */
        if (m->vgen) memset(m->vgen, 0, m->vcap * sizeof *m->vgen);
        m->gen = 1;
    }
}

static bool push_work(ig_grammar_matcher *m, int32_t pos, int32_t par) {
    if (!grow((void **)&m->work, &m->cap_work, m->n_work + 1, sizeof *m->work)) {
        m->failed = true;
        return false;
    }
    m->work[m->n_work++] = ((int64_t)pos << 32) | (uint32_t)(par + 1);
    return true;
}

static void fail_complex(ig_grammar_matcher *m) {
    m->failed = true;
    m->too_complex = true;
}

/* Adds to the scratch set every top node reachable from continuing at pos
 * with the stack par below. */
static void closure(ig_grammar_matcher *m, int32_t pos, int32_t par) {
    const ig_grammar *g = m->g;
    m->n_work = 0;
    if (!push_work(m, pos, par)) return;
    while (m->n_work > 0 && !m->failed) {
        int64_t w = m->work[--m->n_work];
        int32_t q = (int32_t)(w >> 32), r = (int32_t)(uint32_t)w - 1;
        if (++m->budget > IG_GRAMMAR_MAX_WORK) {
            fail_complex(m);
            return;
        }
        m->stats.work++;
        if (!visit(m, q, r)) continue;
        const ig_gelem *e = &g->elems[q];
        if (e->type == GE_BYTES) {
            int32_t n = cons(m, q, r);
            if (n == -3) m->failed = true;
            if (n < 0) continue;
            /* (pos, par) is visited once, so the set has no duplicates */
            if (m->n_scr >= IG_GRAMMAR_MAX_STACKS) {
                fail_complex(m);
                return;
            }
            if (!grow((void **)&m->scr, &m->cap_scr, m->n_scr + 1, sizeof *m->scr)) {
                m->failed = true;
                return;
            }
            m->scr[m->n_scr++] = n;
        } else if (e->type == GE_END) {
            if (r < 0) m->accept_flag = true;
            else push_work(m, m->npos[r], m->npar[r]);
        } else {
            int32_t ret = r;
            if (g->elems[q + 1].type != GE_END) {
                ret = cons(m, q + 1, r);
                if (ret == -3) m->failed = true;
                if (ret < 0) continue;
            }
            int32_t rule = e->val;
            for (int32_t a = g->rule_alt[rule + 1] - 1; a >= g->rule_alt[rule]; a--)
                push_work(m, g->alts[a], ret);
        }
    }
}

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

static bool shash_rebuild(ig_grammar_matcher *m, size_t cap) {
    int32_t *h = ig_calloc_array(cap, sizeof *h);
    if (!h) return false;
    for (size_t i = 0; i < cap; i++) h[i] = -1;
    for (size_t i = 0; i < m->n_st; i++) {
        size_t k = m->st[i].hash & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = (int32_t)i;
    }
    free(m->shash);
    m->shash = h;
    m->shash_cap = cap;
    return true;
}

/* Interns the scratch set (with accept_flag) as a state; DEAD when empty. */
static int32_t intern(ig_grammar_matcher *m) {
    if (m->failed) return DEAD;
    if (m->n_scr > 1) {
        qsort(m->scr, m->n_scr, sizeof *m->scr, cmp_i32);
        size_t u = 1;
        for (size_t i = 1; i < m->n_scr; i++)
            if (m->scr[i] != m->scr[u - 1]) m->scr[u++] = m->scr[i];
        m->n_scr = u;
    }
    if (m->n_scr == 0 && !m->accept_flag) return DEAD;
    uint64_t h = m->accept_flag ? 0x9E3779B97F4A7C15ull : 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < m->n_scr; i++) h = mix64(h ^ (uint64_t)(uint32_t)m->scr[i]);
    if ((m->n_st + 1) * 2 > m->shash_cap && !shash_rebuild(m, m->shash_cap ? m->shash_cap * 2 : 256)) {
        m->failed = true;
        return DEAD;
    }
    size_t k = h & (m->shash_cap - 1);
    while (m->shash[k] >= 0) {
        const mstate *s = &m->st[m->shash[k]];
        if (s->hash == h && s->accept == m->accept_flag && (size_t)s->n == m->n_scr &&
            !memcmp(m->tops + s->off, m->scr, m->n_scr * sizeof *m->scr))
            return m->shash[k];
        k = (k + 1) & (m->shash_cap - 1);
    }
    if (m->n_st >= HARD_STATES || !grow((void **)&m->st, &m->cap_st, m->n_st + 1, sizeof *m->st) ||
        !grow((void **)&m->tops, &m->cap_tops, m->n_tops + m->n_scr, sizeof *m->tops)) {
        m->failed = true;
        return DEAD;
    }
    mstate *s = &m->st[m->n_st];
    s->off = m->n_tops;
    s->n = (int32_t)m->n_scr;
    s->accept = m->accept_flag;
    s->tr = NULL;
    s->hash = h;
    s->has_key = false;
    s->run = -1;
    s->loops_text = -1;
    if (m->n_scr) memcpy(m->tops + m->n_tops, m->scr, m->n_scr * sizeof *m->scr);
    m->n_tops += m->n_scr;
    m->shash[k] = (int32_t)m->n_st;
    m->stats.dfa_states++;
    if ((uint64_t)m->n_scr > m->stats.max_state_stacks) m->stats.max_state_stacks = m->n_scr;
    return (int32_t)m->n_st++;
}

static int32_t trans_slow(ig_grammar_matcher *m, int32_t s, unsigned b) {
    if (m->failed) return DEAD;
    if (!m->st[s].tr) {
        int32_t *tr = ig_calloc_array(256, sizeof *tr);
        if (!tr) {
            m->failed = true;
            return DEAD;
        }
        for (int i = 0; i < 256; i++) tr[i] = TR_UNKNOWN;
        m->st[s].tr = tr;
    }
    /* each stack tried counts: a state of many stacks that all refuse
     * the byte must not be free either */
    m->budget += (size_t)m->st[s].n;
    m->stats.work += (uint64_t)m->st[s].n;
    if (m->budget > IG_GRAMMAR_MAX_WORK) {
        fail_complex(m);
        return DEAD;
    }
    begin_closure(m);
    const ig_grammar *g = m->g;
    for (int32_t i = 0; i < m->st[s].n; i++) {
        int32_t n = m->tops[m->st[s].off + (size_t)i];
        const ig_gelem *e = &g->elems[m->npos[n]];
        if (ig_byteset_has(&g->sets[e->val], b)) closure(m, m->npos[n] + 1, m->npar[n]);
    }
    int32_t t = intern(m);
    if (m->failed) return DEAD;
    m->st[s].tr[b] = t;
    m->stats.dfa_transitions_built++;
    return t;
}

static inline int32_t trans(ig_grammar_matcher *m, int32_t s, unsigned b) {
    const int32_t *tr = m->st[s].tr;
    if (IG_LIKELY(tr != NULL)) {
        int32_t v = tr[b];
        if (v != TR_UNKNOWN) return v;
    }
    return trans_slow(m, s, b);
}

#define PLAIN_RUN_INF 65536
#define PLAIN_RUN_CHAIN 1024

/* The state every plain byte leads s to, DEAD when they differ (or die). */
static int32_t plain_next(ig_grammar_matcher *m, int32_t s) {
    int32_t q = trans(m, s, ' ');
    for (unsigned b = 0x21; b <= 0x7E && q != DEAD; b++)
        if (plain_byte(b) && trans(m, s, b) != q) q = DEAD;
    return m->failed ? DEAD : q;
}

/* How many plain bytes in a row s surely accepts (memoised along the chain
 * of next states; a cycle means any number). */
static int32_t plain_run(ig_grammar_matcher *m, int32_t s) {
    if (m->st[s].run >= 0) return m->st[s].run;
    int32_t chain[PLAIN_RUN_CHAIN];
    int n = 0;
    int32_t cur = s, tail;
    for (;;) {
        if (m->st[cur].run >= 0) {
            tail = m->st[cur].run;
            break;
        }
        if (n == PLAIN_RUN_CHAIN) {
            tail = 0;
            break;
        }
        bool seen = false;
        for (int k = 0; k < n && !seen; k++) seen = chain[k] == cur;
        if (seen) {
            tail = PLAIN_RUN_INF;
            break;
        }
        chain[n++] = cur;
        int32_t q = plain_next(m, cur);
        if (q == DEAD) {
            m->st[cur].run = 0;
            n--;
            tail = 0;
            break;
        }
        cur = q;
    }
    for (int k = n; k-- > 0;) {
        tail = tail >= PLAIN_RUN_INF ? PLAIN_RUN_INF : tail + 1;
        m->st[chain[k]].run = tail;
    }
    return m->st[s].run;
}

/* Whether every plain ASCII byte and every well-formed multi-byte UTF-8
 * character lead s back to s (inside a JSON string, say). The bytes after
 * a lead byte are checked one level at a time: all of a level's bytes must
 * lead to one same state. */
static bool state_loops_text(ig_grammar_matcher *m, int32_t s) {
    if (m->st[s].loops_text >= 0) return m->st[s].loops_text;
    bool ok = true;
    for (unsigned b = 0x20; b <= 0x7E && ok; b++)
        if (plain_byte(b)) ok = trans(m, s, b) == s;
    for (unsigned lead = 0xC2; lead <= 0xF4 && ok; lead++) {
        int k;
        unsigned lo, hi;
        utf8_lead(lead, &k, &lo, &hi);
        int32_t q = trans(m, s, lead);
        for (int level = 1; level <= k && ok && q != DEAD; level++) {
            unsigned a = level == 1 ? lo : 0x80, z = level == 1 ? hi : 0xBF;
            int32_t next = trans(m, q, a);
            for (unsigned c = a + 1; c <= z && ok; c++) ok = trans(m, q, c) == next;
            q = next;
        }
        ok = ok && q == s;
    }
    if (m->failed) return false;
    m->st[s].loops_text = ok;
    return ok;
}

static void clear_cache(ig_grammar_matcher *m) {
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].mask);
        m->cache[i] = (mcache){.state = DEAD};
    }
}

static void clear_states(ig_grammar_matcher *m) {
    for (size_t i = 0; i < m->n_st; i++) free(m->st[i].tr);
    m->n_st = 0;
    m->n_tops = 0;
    m->n_nodes = 0;
    if (m->nhash) for (size_t i = 0; i < m->nhash_cap; i++) m->nhash[i] = -1;
    if (m->shash) for (size_t i = 0; i < m->shash_cap; i++) m->shash[i] = -1;
    clear_cache(m);
}

static int32_t initial_state(ig_grammar_matcher *m) {
    const ig_grammar *g = m->g;
    begin_closure(m);
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) closure(m, g->alts[a], -1);
    return intern(m);
}

/* When the DFA has grown large, starts over from the current state alone:
 * its stacks are copied out, everything is cleared and they are rebuilt. */
static void maybe_compact(ig_grammar_matcher *m) {
    if (m->failed || (m->n_st < SOFT_STATES && m->n_nodes < SOFT_NODES)) return;
    if (m->cur == DEAD) {
        clear_states(m);
        m->init = initial_state(m);
        return;
    }
    const mstate *s = &m->st[m->cur];
    bool accept = s->accept;
    /* each stack bottom-up, preceded by its depth */
    size_t total = 0;
    for (int32_t i = 0; i < s->n; i++) total += 1 + m->ndepth[m->tops[s->off + (size_t)i]];
    int32_t *buf = ig_calloc_array(total ? total : 1, sizeof *buf);
    if (!buf) {
        m->failed = true;
        return;
    }
    size_t o = 0;
    for (int32_t i = 0; i < s->n; i++) {
        int32_t n = m->tops[s->off + (size_t)i];
        int d = m->ndepth[n];
        buf[o] = d;
        for (int k = d; k >= 1; k--, n = m->npar[n]) buf[o + (size_t)k] = m->npos[n];
        o += 1 + (size_t)d;
    }
    clear_states(m);
    m->init = initial_state(m);
    m->n_scr = 0;
    m->accept_flag = accept;
    for (size_t q = 0; q < total && !m->failed;) {
        int d = buf[q];
        int32_t par = -1;
        for (int k = 1; k <= d; k++) par = cons(m, buf[q + (size_t)k], par);
        if (par >= 0 && grow((void **)&m->scr, &m->cap_scr, m->n_scr + 1, sizeof *m->scr))
            m->scr[m->n_scr++] = par;
        else m->failed = true;
        q += 1 + (size_t)d;
    }
    free(buf);
    m->cur = intern(m);
}

/* The error of a failed matcher (its message set). */
static ig_status fail_status(const ig_grammar_matcher *m) {
    if (m->too_complex)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "grammar matcher: the grammar is too ambiguous to track (over %d parses "
                       "alive at once or %u steps of work for one token)",
                       IG_GRAMMAR_MAX_STACKS, IG_GRAMMAR_MAX_WORK);
    return ig_fail(IG_ERR_NO_MEMORY, "grammar matcher: out of memory or the grammar is too complex "
                                     "to track");
}

ig_status ig_grammar_matcher_create(const ig_grammar *g, ig_grammar_matcher **out) {
    if (out) *out = NULL;
    if (!g || !out) return ig_fail(IG_ERR_INVALID_ARG, "grammar matcher: NULL argument");
    ig_grammar_matcher *m = ig_calloc_array(1, sizeof *m);
    if (!m) return IG_ERR_NO_MEMORY;
    m->g = ig_grammar_ref((ig_grammar *)g);
    for (int i = 0; i < MASK_CACHE; i++) m->cache[i].state = DEAD;
    m->init = initial_state(m);
    m->cur = m->init;
    if (m->failed) {
        ig_status st = fail_status(m);
        ig_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return IG_OK;
}

ig_status ig_grammar_matcher_status(const ig_grammar_matcher *m) {
    if (!m) return ig_fail(IG_ERR_INVALID_ARG, "grammar matcher: NULL argument");
    return m->failed ? fail_status(m) : IG_OK;
}

void ig_grammar_matcher_free(ig_grammar_matcher *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_st; i++) free(m->st[i].tr);
    clear_cache(m);
    free(m->npos);
    free(m->npar);
    free(m->ndepth);
    free(m->nh1);
    free(m->nh2);
    free(m->nhash);
    free(m->st);
    free(m->tops);
    free(m->shash);
    free(m->scr);
    free(m->work);
    free(m->vkey);
    free(m->vgen);
    ig_grammar_free(m->g);
    free(m);
}

void ig_grammar_matcher_reset(ig_grammar_matcher *m) {
    if (m) m->cur = m->init;
}

bool ig_grammar_matcher_accept_bytes(ig_grammar_matcher *m, const char *bytes, size_t n) {
    if (!m || m->failed || m->cur == DEAD || (n && !bytes)) return false;
    m->budget = 0;
    maybe_compact(m);
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s != DEAD; i++) s = trans(m, s, (unsigned char)bytes[i]);
    if (s == DEAD || m->failed) return false;
    m->cur = s;
    return true;
}

bool ig_grammar_matcher_accept_token(ig_grammar_matcher *m, const ig_token_trie *t, int32_t id) {
    size_t len;
    const char *b = ig_token_trie_bytes(t, id, &len);
    return b && ig_grammar_matcher_accept_bytes(m, b, len);
}

bool ig_grammar_matcher_can_end(const ig_grammar_matcher *m) {
    return m && m->cur != DEAD && m->st[m->cur].accept;
}

bool ig_grammar_matcher_finished(ig_grammar_matcher *m) {
    return m && m->cur != DEAD && m->st[m->cur].n == 0;
}

/* Keeps a copy of the mask of the current state in the matcher's own ring
 * (a cache, so a failed allocation only skips it). */
static void remember_mask(ig_grammar_matcher *m, const ig_token_trie *t, const uint32_t *mask,
                          size_t words, int n_allowed) {
    mcache *c = &m->cache[m->cache_next];
    if (c->words != words) {
        free(c->mask);
        c->mask = ig_calloc_array(words, sizeof *c->mask);
        c->words = c->mask ? words : 0;
    }
    if (!c->mask) return;
    memcpy(c->mask, mask, words * sizeof *mask);
    c->state = m->cur;
    c->trie = t;
    c->n_allowed = n_allowed;
    m->cache_next = (m->cache_next + 1) % MASK_CACHE;
}

ig_status ig_grammar_matcher_mask(ig_grammar_matcher *m, const ig_token_trie *t, uint32_t *mask,
                                  int *n_allowed) {
    if (n_allowed) *n_allowed = 0;
    if (!m || !t || !mask) return ig_fail(IG_ERR_INVALID_ARG, "grammar mask: NULL argument");
    size_t words = ((size_t)t->n_vocab + 31) / 32;
    memset(mask, 0, words * sizeof *mask);
    if (m->failed) return fail_status(m);
    if (m->cur == DEAD) return IG_OK;
    m->budget = 0;
    maybe_compact(m);
    m->stats.masks++;
    for (int i = 0; i < MASK_CACHE; i++) {
        mcache *c = &m->cache[i];
        if (c->mask && c->state == m->cur && c->trie == t) {
            memcpy(mask, c->mask, words * sizeof *mask);
            if (n_allowed) *n_allowed = c->n_allowed;
            m->stats.mask_cache_hits++;
            return IG_OK;
        }
    }
    /* per depth: the state and its transition table (stable pointers) */
    /* a mask another matcher of this grammar computed for the same state */
    mstate *cs = &m->st[m->cur];
    if (!cs->has_key) {
        uint64_t a = cs->accept ? 0x1234567ull : 0x7654321ull, b = a ^ 0xABCDEFull;
        for (int32_t i = 0; i < cs->n; i++) { /* order-independent: sums of mixed hashes */
            int32_t n = m->tops[cs->off + (size_t)i];
            a += mix64(m->nh1[n]);
            b += mix64(m->nh2[n] ^ 0x5555555555555555ull);
        }
        cs->k1 = mix64(a + (uint64_t)cs->n);
        cs->k2 = mix64(b ^ ((uint64_t)cs->n << 40));
        cs->has_key = true;
    }
    uint64_t k1 = cs->k1, k2 = cs->k2;
    ig_grammar *g = m->g;
    bool shared_hit = false;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < IG_GRAMMAR_SHARED_MASKS; i++) {
        ig_shared_mask *e = &g->masks[i];
        if (e->mask && e->h1 == k1 && e->h2 == k2 && e->trie == (const void *)t && e->words == words) {
            memcpy(mask, e->mask, words * sizeof *mask);
            if (n_allowed) *n_allowed = e->n_allowed;
            e->used = ++g->mask_clock;
            shared_hit = true;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (shared_hit) {
        m->stats.mask_cache_hits++;
        remember_mask(m, t, mask, words, n_allowed ? *n_allowed : 0);
        return IG_OK;
    }
    int32_t stk[TRIE_MAX_TOKEN_LEN + 1];
    const int32_t *stk_tr[TRIE_MAX_TOKEN_LEN + 1];
    stk[0] = m->cur;
    stk_tr[0] = m->st[m->cur].tr;
    int count = 0;
    size_t i = 0, nn = t->n_nodes, visited = 0;
    const trie_node *node = t->node;
    while (i < nn) {
        const trie_node *x = &node[i];
        int d = x->depth;
        if ((x->u8 && state_loops_text(m, stk[d - 1])) ||
            (x->plain && x->sub_len <= plain_run(m, stk[d - 1]))) {
            /* the whole subtree is allowed */
            for (int32_t q = t->seq_off[i]; q < t->seq_off[x->end]; q++) {
                int32_t k = t->seq_tok[q];
                mask[k >> 5] |= 1u << (k & 31);
            }
            count += t->seq_off[x->end] - t->seq_off[i];
            visited++;
            i = (size_t)x->end;
            continue;
        }
        const int32_t *tr = stk_tr[d - 1];
        int32_t s = tr ? tr[x->byte] : TR_UNKNOWN;
        if (IG_UNLIKELY(s == TR_UNKNOWN)) {
            s = trans_slow(m, stk[d - 1], x->byte);
            stk_tr[d - 1] = m->st[stk[d - 1]].tr;
        }
        visited++;
        if (s == DEAD) {
            if (m->failed) break;
            i = (size_t)x->end;
            continue;
        }
        stk[d] = s;
        stk_tr[d] = m->st[s].tr;
        for (int32_t k = x->first_tok; k >= 0; k = t->next_tok[k]) {
            mask[k >> 5] |= 1u << (k & 31);
            count++;
        }
        i++;
    }
    m->stats.trie_nodes_visited += visited;
    if (m->failed) {
        memset(mask, 0, words * sizeof *mask);
        return fail_status(m);
    }
    if (n_allowed) *n_allowed = count;
    /* share it: replace the least recently used entry */
    pthread_mutex_lock(&g->mu);
    int victim = 0;
    for (int v = 1; v < IG_GRAMMAR_SHARED_MASKS; v++)
        if (g->masks[v].used < g->masks[victim].used) victim = v;
    ig_shared_mask *e = &g->masks[victim];
    if (e->words != words) {
        free(e->mask);
        e->mask = ig_calloc_array(words, sizeof *e->mask);
        e->words = e->mask ? words : 0;
    }
    if (e->mask) {
        memcpy(e->mask, mask, words * sizeof *mask);
        e->h1 = k1;
        e->h2 = k2;
        e->trie = t;
        e->n_allowed = count;
        e->used = ++g->mask_clock;
    }
    pthread_mutex_unlock(&g->mu);
    remember_mask(m, t, mask, words, count);
    return IG_OK;
}

void ig_grammar_matcher_stats(const ig_grammar_matcher *m, ig_grammar_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (m) *out = m->stats;
}
