/* Reference log-probabilities for `ignis perplexity --kl-divergence`: a
 * reference model's next-token distribution at every scored position of a
 * perplexity run, stored compactly, and the statistics of another model's
 * distributions against it.
 *
 * File layout (all little-endian):
 *   header, 32 bytes:
 *     char magic[8]     "IGKLREF1"
 *     u32  n_ctx        window size
 *     u32  n_vocab      real vocabulary size of the model (ids 0..n_vocab-1)
 *     u32  n_chunks     windows
 *     u32  first        scored positions of a window: first .. n_ctx-2
 *                       (the logits at p predict token p+1)
 *     u32  top_k        0: full distribution, K > 0: the K most likely tokens
 *     u32  reserved     0
 *   i32 tokens[n_chunks * n_ctx]   the windows as evaluated (BOS in place)
 *   n_chunks * (n_ctx - 1 - first) records, in window then position order:
 *     f32 tok_lp        log-prob of the actual next token
 *     i32 top_id        most likely token (lowest id among equals)
 *     f32 top_lp        its log-prob
 *     top_k > 0:
 *       f32 rest_lp     log of the probability outside the K tokens
 *                       (-inf when there is none)
 *       K x { i32 id; f32 lp; }   the K most likely, best first
 *     top_k == 0:
 *       f32 lo, f32 step; u16 q[n_vocab]
 *                       lp(j) ~= lo + q[j] * step, where
 *                       lo = max(min lp, top_lp - 40) and
 *                       step = (top_lp - lo) / 65535 (log-probs below lo
 *                       are stored as lo); renormalised when read
 *
 * With top_k > 0 the KL divergence is that of the distributions coarsened
 * to the K tokens plus one "rest" outcome: a lower bound of the exact one,
 * close to it when the rest's probability is small. */
#ifndef IG_CLI_KL_REF_H
#define IG_CLI_KL_REF_H

#include "ignis.h"

#include <stdio.h>

#define KL_REF_MAGIC "IGKLREF1"
#define KL_REF_HEADER_BYTES 32
#define KL_REF_MAX_TOP_K 4096

typedef struct kl_ref_header {
    uint32_t n_ctx, n_vocab, n_chunks, first, top_k;
} kl_ref_header;

/* Bytes of one record. */
size_t kl_ref_record_bytes(const kl_ref_header *h);
/* Scored positions per window. */
int kl_ref_per_window(const kl_ref_header *h);

ig_status kl_ref_write_header(FILE *f, const kl_ref_header *h, const int32_t *tokens);
/* Reads and validates the header and the tokens (*tokens malloc'ed,
 * n_chunks * n_ctx ids, each checked < n_vocab_model) and checks that the
 * file's size matches. */
ig_status kl_ref_read_header(FILE *f, kl_ref_header *h, int32_t **tokens, int n_vocab_model);

/* Per-row working state (scratch sized for the vocabulary). */
typedef struct kl_row_scratch {
    int n_vocab, top_k;
    unsigned char *rec; /* one record */
    float *lp;          /* n_vocab log-probs */
    int32_t *heap_id;   /* top_k */
    float *heap_lp;
    unsigned char *mark; /* n_vocab */
} kl_row_scratch;

ig_status kl_scratch_init(kl_row_scratch *s, int n_vocab, int top_k);
void kl_scratch_free(kl_row_scratch *s);

/* Log-softmax of logits[0..n_vocab) into s->lp (double accumulation);
 * returns the argmax (lowest id among equals). */
int kl_log_softmax(kl_row_scratch *s, const float *logits);

/* Builds the record of the distribution in s->lp (tok: the actual next
 * token, top: the argmax) into s->rec. */
void kl_make_record(kl_row_scratch *s, int32_t tok, int32_t top);

/* Statistics of the distribution in s->lp (the model under test) against a
 * record read into s->rec. */
typedef struct kl_row_stats {
    double kl;        /* KL(reference || test) */
    double ref_tok_lp; /* reference log-prob of the actual token */
    int32_t ref_top;
    double dlp_top;   /* test lp - reference lp of the reference's top token */
} kl_row_stats;
ig_status kl_compare_record(kl_row_scratch *s, kl_row_stats *out);

#endif
