/* The forward pass as data: a list of ops over persistent activation
 * buffers, built once per context and replayed every step. Per-step values
 * (token ids, positions, sequences, which rows want logits) live in an
 * ig_step, never in the ops, so a GPU backend can record the list into a
 * command buffer once and only update a small parameter buffer per step.
 *
 * Every activation buffer is f32, row-major [rows, width] where rows is the
 * step's n_tokens (or n_out for ops flagged on_outputs). */
#ifndef IG_GRAPH_H
#define IG_GRAPH_H

#include "model/arch.h"
#include "model/model.h"

typedef enum ig_buf_id {
    IG_BUF_X,      /* residual stream [n, H] */
    IG_BUF_XN,     /* normed input of a block [n, H] */
    IG_BUF_Q,      /* [n, nH*hd] */
    IG_BUF_K,      /* [n, nKV*hd] */
    IG_BUF_V,      /* [n, nKV*hdv] */
    IG_BUF_ATTN,   /* attention output [n, nH*hdv] */
    IG_BUF_PROJ,   /* output of wo / w_down [n, H] */
    IG_BUF_GATE,   /* [n, F]; holds gelu(gate)*up after GEGLU */
    IG_BUF_UP,     /* [n, F] */
    IG_BUF_OUT_H,  /* final hidden rows of the outputs [n_out, H] */
    IG_BUF_LOGITS, /* [n_out, n_vocab] */
    IG_BUF_COUNT
} ig_buf_id;

typedef enum ig_op_kind {
    IG_OP_EMBED,       /* dst[t] = row(w, tokens[t]) * f0 */
    IG_OP_RMSNORM,     /* dst = rmsnorm(src) * norm over rows of width/n_heads; eps f0 */
    IG_OP_MATMUL,      /* dst[t, 0:out] = w · src[t] */
    IG_OP_ROPE,        /* in place on dst: NeoX RoPE per head; base f0, linear factor f1 */
    IG_OP_KV_STORE,    /* K and V rows of the step into the layer's cache */
    IG_OP_ATTENTION,   /* dst = softmax(Q Kᵀ·f0) V over the layer's cache (window honoured) */
    IG_OP_GEGLU,       /* dst = gelu_tanh(dst) * src */
    IG_OP_ADD_RMSNORM, /* dst += rmsnorm(src) * norm; eps f0 */
    IG_OP_GATHER,      /* dst[j] = src[out_idx[j]] */
    IG_OP_SOFTCAP,     /* dst = f0 * tanh(dst / f0) */
} ig_op_kind;

typedef struct ig_op {
    ig_op_kind kind;
    ig_buf_id src, dst;
    int width;          /* row width of dst (of src for GATHER) in elements */
    int n_heads;        /* RMSNORM/ROPE/ATTENTION: rows are split into this many heads */
    int layer;          /* KV_STORE / ATTENTION */
    const ig_tensor *w; /* EMBED / MATMUL weight */
    const float *norm;  /* RMSNORM / ADD_RMSNORM weight (f32, +1 folded) */
    float f0, f1;
    bool on_outputs;    /* rows = n_out instead of n_tokens */
} ig_op;

typedef struct ig_graph {
    ig_op *ops;
    int n_ops;
    int buf_width[IG_BUF_COUNT]; /* elements per row of each buffer */
} ig_graph;

/* The model's forward pass, by its family's builder (model/arch.h). */
ig_status ig_graph_build(const ig_model *m, ig_graph *g);
void ig_graph_free(ig_graph *g);
const char *ig_op_name(ig_op_kind k);

/* What an op reads and writes, as every backend executes it: masks of
 * activation buffers (bit 1 << ig_buf_id) and the KV cache layer read or
 * written (-1: none). Weights are constant and not listed. Planners and
 * fusers reason about dataflow through this alone. */
typedef struct ig_op_rw {
    uint32_t reads, writes;
    int kv_read, kv_write;
} ig_op_rw;

ig_op_rw ig_op_io(const ig_op *op);

static inline uint32_t ig_buf_bit(ig_buf_id b) { return 1u << (unsigned)b; }

/* Whether b must run after a: one writes what the other reads or writes
 * (buffers or a KV layer). */
bool ig_ops_conflict(const ig_op *a, const ig_op *b);

/* Appending ops, for the family builders: ig_gb_begin sizes the list for
 * up to cap ops; past it, ops are written to a scratch op and ig_gb_end
 * fails (and frees the list). */
typedef struct ig_graph_builder {
    ig_graph *g;
    int cap;
    bool overflow;
    ig_op scratch;
} ig_graph_builder;

ig_status ig_gb_begin(ig_graph_builder *b, ig_graph *g, int cap);
ig_op *ig_gb_op(ig_graph_builder *b, ig_op_kind kind); /* zeroed but for kind; never NULL */
ig_op *ig_gb_matmul(ig_graph_builder *b, ig_buf_id src, ig_buf_id dst, const ig_tensor *w);
ig_op *ig_gb_rmsnorm(ig_graph_builder *b, ig_buf_id src, ig_buf_id dst, const float *w, int width, int heads,
                     float eps);
ig_status ig_gb_end(ig_graph_builder *b);

/* The per-step values every backend reads. */
typedef struct ig_step {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    int n_out;
    const int32_t *out_idx; /* which tokens want logits, ascending */
    /* Images (NULL without): embd[t] != NULL is token t's embedding as is
     * (EMBED copies it, unscaled); img_lo[t] >= 0 marks token t as part of
     * an image spanning positions img_lo[t] .. img_hi[t] of its sequence,
     * all in this step: ATTENTION lets it see that whole span. */
    const float *const *embd;
    const int32_t *img_lo, *img_hi;
} ig_step;

#endif
