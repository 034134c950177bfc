/* Reference log-probability files of `ignis perplexity` (layout: kl_ref.h).
 * Values are stored in the host's byte order, which ignis requires to be
 * little-endian (as GGUF is). */
#include "kl_ref.h"

#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LO_RANGE 40.0f /* nats below the top log-prob kept by full records */

size_t kl_ref_record_bytes(const kl_ref_header *h) {
    size_t base = 3 * 4;
    if (h->top_k > 0) return base + 4 + (size_t)h->top_k * 8;
    return base + 8 + (size_t)h->n_vocab * 2;
}

int kl_ref_per_window(const kl_ref_header *h) { return (int)h->n_ctx - 1 - (int)h->first; }

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

ig_status kl_ref_write_header(FILE *f, const kl_ref_header *h, const int32_t *tokens) {
    unsigned char hdr[KL_REF_HEADER_BYTES] = {0};
    memcpy(hdr, KL_REF_MAGIC, 8);
    put_u32(hdr + 8, h->n_ctx);
    put_u32(hdr + 12, h->n_vocab);
    put_u32(hdr + 16, h->n_chunks);
    put_u32(hdr + 20, h->first);
    put_u32(hdr + 24, h->top_k);
    size_t n = (size_t)h->n_chunks * h->n_ctx;
    if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr || fwrite(tokens, 4, n, f) != n)
        return ig_fail(IG_ERR_IO, "cannot write the reference file");
    return IG_OK;
}

ig_status kl_ref_read_header(FILE *f, kl_ref_header *h, int32_t **tokens, int n_vocab_model) {
    *tokens = NULL;
    unsigned char hdr[KL_REF_HEADER_BYTES];
    if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr || memcmp(hdr, KL_REF_MAGIC, 8) != 0)
        return ig_fail(IG_ERR_FORMAT, "not an ignis reference log-prob file");
    h->n_ctx = get_u32(hdr + 8);
    h->n_vocab = get_u32(hdr + 12);
    h->n_chunks = get_u32(hdr + 16);
    h->first = get_u32(hdr + 20);
    h->top_k = get_u32(hdr + 24);
    if (h->n_ctx < 4 || h->n_ctx > (1u << 20) || h->n_vocab < 2 || h->n_vocab > (1u << 24) ||
        h->n_chunks < 1 || h->n_chunks > (1u << 20) || h->first < 1 || h->first + 1 >= h->n_ctx ||
        h->top_k > KL_REF_MAX_TOP_K || h->top_k > h->n_vocab || get_u32(hdr + 28) != 0)
        return ig_fail(IG_ERR_FORMAT, "reference file header out of range");
    if ((int)h->n_vocab != n_vocab_model)
        return ig_fail(IG_ERR_INVALID_ARG,
                       "reference file is for a vocabulary of %u tokens, the model has %d",
                       h->n_vocab, n_vocab_model);
    uint64_t n_tok = (uint64_t)h->n_chunks * h->n_ctx;
    uint64_t want = KL_REF_HEADER_BYTES + n_tok * 4 +
                    (uint64_t)h->n_chunks * (uint64_t)kl_ref_per_window(h) * kl_ref_record_bytes(h);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != want)
        return ig_fail(IG_ERR_FORMAT, "reference file has %lld bytes, its header implies %llu",
                       (long long)sb.st_size, (unsigned long long)want);
    if (n_tok > SIZE_MAX / 4) return ig_fail(IG_ERR_NO_MEMORY, "reference file too large");
    int32_t *t = malloc((size_t)n_tok * 4);
    if (!t) return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    if (fread(t, 4, (size_t)n_tok, f) != (size_t)n_tok) {
        free(t);
        return ig_fail(IG_ERR_FORMAT, "reference file truncated");
    }
    for (uint64_t i = 0; i < n_tok; i++)
        if (t[i] < 0 || (uint32_t)t[i] >= h->n_vocab) {
            int32_t bad = t[i];
            free(t);
            return ig_fail(IG_ERR_FORMAT, "reference file holds token id %d", bad);
        }
    *tokens = t;
    return IG_OK;
}

ig_status kl_scratch_init(kl_row_scratch *s, int n_vocab, int top_k) {
    memset(s, 0, sizeof *s);
    s->n_vocab = n_vocab;
    s->top_k = top_k;
    kl_ref_header h = {.n_vocab = (uint32_t)n_vocab, .top_k = (uint32_t)top_k};
    s->rec = malloc(kl_ref_record_bytes(&h));
    s->lp = malloc(sizeof *s->lp * (size_t)n_vocab);
    s->mark = calloc((size_t)n_vocab, 1);
    s->heap_id = malloc(sizeof *s->heap_id * (size_t)(top_k > 0 ? top_k : 1));
    s->heap_lp = malloc(sizeof *s->heap_lp * (size_t)(top_k > 0 ? top_k : 1));
    if (!s->rec || !s->lp || !s->mark || !s->heap_id || !s->heap_lp) {
        kl_scratch_free(s);
        return ig_fail(IG_ERR_NO_MEMORY, "out of memory");
    }
    return IG_OK;
}

void kl_scratch_free(kl_row_scratch *s) {
    free(s->rec);
    free(s->lp);
    free(s->mark);
    free(s->heap_id);
    free(s->heap_lp);
    memset(s, 0, sizeof *s);
}

int kl_log_softmax(kl_row_scratch *s, const float *logits) {
    const int V = s->n_vocab;
    int top = 0;
    float m = logits[0];
    for (int j = 1; j < V; j++)
        if (logits[j] > m) {
            m = logits[j];
            top = j;
        }
    double z = 0.0;
    for (int j = 0; j < V; j++) z += exp((double)logits[j] - m);
    double lse = m + log(z);
    for (int j = 0; j < V; j++) s->lp[j] = (float)((double)logits[j] - lse);
    return top;
}

/* Min-heap on (lp, then higher id = worse) of the K best. */
static int worse(const float *lp, const int32_t *id, int a, int b) {
    return lp[a] < lp[b] || (lp[a] == lp[b] && id[a] > id[b]);
}

static void heap_swap(float *lp, int32_t *id, int a, int b) {
    float t = lp[a];
    lp[a] = lp[b];
    lp[b] = t;
    int32_t u = id[a];
    id[a] = id[b];
    id[b] = u;
}

static void sift_down(float *lp, int32_t *id, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(lp, id, l, w)) w = l;
        if (r < n && worse(lp, id, r, w)) w = r;
        if (w == i) return;
        heap_swap(lp, id, i, w);
        i = w;
    }
}

static void sift_up(float *lp, int32_t *id, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!worse(lp, id, i, p)) return;
        heap_swap(lp, id, i, p);
        i = p;
    }
}

void kl_make_record(kl_row_scratch *s, int32_t tok, int32_t top) {
    const int V = s->n_vocab, K = s->top_k;
    const float *lp = s->lp;
    unsigned char *r = s->rec;
    float tok_lp = lp[tok], top_lp = lp[top];
    memcpy(r, &tok_lp, 4);
    memcpy(r + 4, &top, 4);
    memcpy(r + 8, &top_lp, 4);
    r += 12;
    if (K > 0) {
        float *hl = s->heap_lp;
        int32_t *hi = s->heap_id;
        int n = 0;
        for (int j = 0; j < V; j++) {
            if (n < K) {
                hl[n] = lp[j];
                hi[n] = j;
                sift_up(hl, hi, n++);
            } else if (lp[j] > hl[0]) { /* ties keep the lower id, seen first */
                hl[0] = lp[j];
                hi[0] = j;
                sift_down(hl, hi, n, 0);
            }
        }
        /* Pop worst-first into the tail: best first in the record. */
        double kept = 0.0;
        unsigned char *e = r + 4;
        for (int k = n - 1; k >= 0; k--) {
            float l = hl[0];
            int32_t id = hi[0];
            kept += exp((double)l);
            memcpy(e + (size_t)k * 8, &id, 4);
            memcpy(e + (size_t)k * 8 + 4, &l, 4);
            heap_swap(hl, hi, 0, k);
            sift_down(hl, hi, k, 0);
        }
        /* The rest's probability, summed directly (1 - kept cancels). */
        for (int k = 0; k < n; k++) {
            int32_t id;
            memcpy(&id, e + (size_t)k * 8, 4);
            s->mark[id] = 1;
        }
        double rest = 0.0;
        for (int j = 0; j < V; j++)
            if (!s->mark[j]) rest += exp((double)lp[j]);
        for (int k = 0; k < n; k++) {
            int32_t id;
            memcpy(&id, e + (size_t)k * 8, 4);
            s->mark[id] = 0;
        }
        (void)kept;
        float rest_lp = rest > 0.0 ? (float)log(rest) : -INFINITY;
        memcpy(r, &rest_lp, 4);
        return;
    }
    float lo = top_lp;
    for (int j = 0; j < V; j++)
        if (lp[j] < lo) lo = lp[j];
    if (lo < top_lp - LO_RANGE) lo = top_lp - LO_RANGE;
    float step = (top_lp - lo) / 65535.0f;
    memcpy(r, &lo, 4);
    memcpy(r + 4, &step, 4);
    unsigned char *q = r + 8;
    for (int j = 0; j < V; j++) {
        uint16_t v = 0;
        if (step > 0.0f && lp[j] > lo) {
            float x = roundf((lp[j] - lo) / step);
            v = x >= 65535.0f ? 65535 : (uint16_t)x;
        }
        memcpy(q + (size_t)j * 2, &v, 2);
    }
}

ig_status kl_compare_record(kl_row_scratch *s, kl_row_stats *out) {
    const int V = s->n_vocab, K = s->top_k;
    const float *lq = s->lp;
    const unsigned char *r = s->rec;
    float tok_lp, top_lp;
    int32_t top;
    memcpy(&tok_lp, r, 4);
    memcpy(&top, r + 4, 4);
    memcpy(&top_lp, r + 8, 4);
    r += 12;
    if (top < 0 || top >= V || !isfinite(tok_lp) || !isfinite(top_lp))
        return ig_fail(IG_ERR_FORMAT, "reference record out of range");
    out->ref_tok_lp = tok_lp;
    out->ref_top = top;
    out->dlp_top = (double)lq[top] - top_lp;
    double kl = 0.0;
    if (K > 0) {
        float rest_lp;
        memcpy(&rest_lp, r, 4);
        const unsigned char *e = r + 4;
        ig_status st = IG_OK;
        int k;
        for (k = 0; k < K; k++) {
            int32_t id;
            float l;
            memcpy(&id, e + (size_t)k * 8, 4);
            memcpy(&l, e + (size_t)k * 8 + 4, 4);
            if (id < 0 || id >= V || s->mark[id] || !(l <= 0.0f) || !isfinite(l)) {
                st = ig_fail(IG_ERR_FORMAT, "reference record out of range");
                break;
            }
            s->mark[id] = 1;
            kl += exp((double)l) * ((double)l - lq[id]);
        }
        if (st == IG_OK && isfinite(rest_lp)) {
            double q_rest = 0.0;
            for (int j = 0; j < V; j++)
                if (!s->mark[j]) q_rest += exp((double)lq[j]);
            if (q_rest < 1e-300) q_rest = 1e-300;
            kl += exp((double)rest_lp) * ((double)rest_lp - log(q_rest));
        }
        for (int j = 0; j < k; j++) {
            int32_t id;
            memcpy(&id, e + (size_t)j * 8, 4);
            s->mark[id] = 0;
        }
        if (st != IG_OK) return st;
    } else {
        float lo, step;
        memcpy(&lo, r, 4);
        memcpy(&step, r + 4, 4);
        if (!isfinite(lo) || !isfinite(step) || step < 0.0f)
            return ig_fail(IG_ERR_FORMAT, "reference record out of range");
        const unsigned char *q = r + 8;
        double m = (double)lo + 65535.0 * step, z = 0.0;
        for (int j = 0; j < V; j++) {
            uint16_t v;
            memcpy(&v, q + (size_t)j * 2, 2);
            z += exp((double)lo + v * (double)step - m);
        }
        double lse = m + log(z);
        for (int j = 0; j < V; j++) {
            uint16_t v;
            memcpy(&v, q + (size_t)j * 2, 2);
            double lp = (double)lo + v * (double)step - lse;
            kl += exp(lp) * (lp - lq[j]);
        }
    }
    out->kl = kl;
    return IG_OK;
}
