/* Builds the Gemma 3 forward pass (../shared/docs/gemma3.md §1) as an op
 * list. Order per layer: norm → q/k/v → QK-norm → RoPE → cache → attention
 * → wo → post-norm + residual → norm → gate/up → GeGLU → down → post-norm +
 * residual. The final norm and the tied output projection run only on the
 * rows that want logits. */
#include "engine/graph.h"

#include <math.h>
#include <stdlib.h>

const char *ig_op_name(ig_op_kind k) {
    switch (k) {
    case IG_OP_EMBED: return "embed";
    case IG_OP_RMSNORM: return "rmsnorm";
    case IG_OP_MATMUL: return "matmul";
    case IG_OP_ROPE: return "rope";
    case IG_OP_KV_STORE: return "kv_store";
    case IG_OP_ATTENTION: return "attention";
    case IG_OP_GEGLU: return "geglu";
    case IG_OP_ADD_RMSNORM: return "add_rmsnorm";
    case IG_OP_GATHER: return "gather";
    case IG_OP_SOFTCAP: return "softcap";
    }
    return "?";
}

ig_op_rw ig_op_io(const ig_op *op) {
    ig_op_rw io = {.kv_read = -1, .kv_write = -1};
    const uint32_t src = ig_buf_bit(op->src), dst = ig_buf_bit(op->dst);
    switch (op->kind) {
    case IG_OP_EMBED: io.writes = dst; break;
    case IG_OP_KV_STORE:
        io.reads = ig_buf_bit(IG_BUF_K) | ig_buf_bit(IG_BUF_V);
        io.kv_write = op->layer;
        break;
    case IG_OP_ROPE:
    case IG_OP_SOFTCAP: io.reads = io.writes = dst; break;
    case IG_OP_GEGLU:
    case IG_OP_ADD_RMSNORM:
        io.reads = src | dst;
        io.writes = dst;
        break;
    case IG_OP_ATTENTION:
        io.reads = src;
        io.writes = dst;
        io.kv_read = op->layer;
        break;
    case IG_OP_RMSNORM:
    case IG_OP_MATMUL:
    case IG_OP_GATHER:
        io.reads = src;
        io.writes = dst;
        break;
    }
    return io;
}

bool ig_ops_conflict(const ig_op *a, const ig_op *b) {
    const ig_op_rw x = ig_op_io(a), y = ig_op_io(b);
    if ((x.writes & (y.reads | y.writes)) || (x.reads & y.writes)) return true;
    if (x.kv_write >= 0 && (x.kv_write == y.kv_read || x.kv_write == y.kv_write)) return true;
    return y.kv_write >= 0 && y.kv_write == x.kv_read;
}

typedef struct builder {
    ig_graph *g;
    int cap;
    bool overflow;
    ig_op scratch; /* written instead of past the end when cap is too small */
} builder;

static ig_op *push(builder *b, ig_op_kind kind) {
    ig_op *op = &b->scratch;
    if (b->g->n_ops < b->cap) op = &b->g->ops[b->g->n_ops++];
    else b->overflow = true;
    *op = (ig_op){.kind = kind};
    return op;
}

static ig_op *matmul(builder *b, ig_buf_id src, ig_buf_id dst, const ig_tensor *w) {
    ig_op *op = push(b, IG_OP_MATMUL);
    op->src = src;
    op->dst = dst;
    op->w = w;
    op->width = (int)w->ne[1];
    return op;
}

static ig_op *rmsnorm(builder *b, ig_buf_id src, ig_buf_id dst, const float *w, int width, int heads,
                     float eps) {
    ig_op *op = push(b, IG_OP_RMSNORM);
    op->src = src;
    op->dst = dst;
    op->norm = w;
    op->width = width;
    op->n_heads = heads;
    op->f0 = eps;
    return op;
}

ig_status ig_graph_build(const ig_model *m, ig_graph *g) {
    const ig_hparams *hp = &m->hp;
    *g = (ig_graph){0};
    int cap = 20 * hp->n_layer + 8; /* 18 ops per layer + head and tail */
    g->ops = ig_calloc_array((size_t)cap, sizeof *g->ops);
    if (!g->ops) return IG_ERR_NO_MEMORY;
    builder b = {.g = g, .cap = cap};
    const int H = hp->n_embd, hd = hp->head_dim, hdv = hp->head_dim_v;
    g->buf_width[IG_BUF_X] = H;
    g->buf_width[IG_BUF_XN] = H;
    g->buf_width[IG_BUF_Q] = hp->n_head * hd;
    g->buf_width[IG_BUF_K] = hp->n_head_kv * hd;
    g->buf_width[IG_BUF_V] = hp->n_head_kv * hdv;
    g->buf_width[IG_BUF_ATTN] = hp->n_head * hdv;
    g->buf_width[IG_BUF_PROJ] = H;
    g->buf_width[IG_BUF_GATE] = hp->n_ff;
    g->buf_width[IG_BUF_UP] = hp->n_ff;
    g->buf_width[IG_BUF_OUT_H] = H;
    g->buf_width[IG_BUF_LOGITS] = hp->n_vocab;

    ig_op *op = push(&b, IG_OP_EMBED);
    op->dst = IG_BUF_X;
    op->w = m->tok_embd;
    op->width = H;
    op->f0 = sqrtf((float)H);

    for (int l = 0; l < hp->n_layer; l++) {
        const ig_layer *ly = &m->layers[l];
        rmsnorm(&b, IG_BUF_X, IG_BUF_XN, ly->attn_norm, H, 1, hp->rms_eps);
        matmul(&b, IG_BUF_XN, IG_BUF_Q, ly->wq);
        matmul(&b, IG_BUF_XN, IG_BUF_K, ly->wk);
        matmul(&b, IG_BUF_XN, IG_BUF_V, ly->wv);
        rmsnorm(&b, IG_BUF_Q, IG_BUF_Q, ly->q_norm, hp->n_head * hd, hp->n_head, hp->rms_eps);
        rmsnorm(&b, IG_BUF_K, IG_BUF_K, ly->k_norm, hp->n_head_kv * hd, hp->n_head_kv, hp->rms_eps);
        op = push(&b, IG_OP_ROPE);
        op->dst = IG_BUF_Q;
        op->width = hp->n_head * hd;
        op->n_heads = hp->n_head;
        op->f0 = ly->rope_base;
        op->f1 = ly->rope_scale;
        op = push(&b, IG_OP_ROPE);
        op->dst = IG_BUF_K;
        op->width = hp->n_head_kv * hd;
        op->n_heads = hp->n_head_kv;
        op->f0 = ly->rope_base;
        op->f1 = ly->rope_scale;
        op = push(&b, IG_OP_KV_STORE);
        op->layer = l;
        op = push(&b, IG_OP_ATTENTION);
        op->src = IG_BUF_Q;
        op->dst = IG_BUF_ATTN;
        op->layer = l;
        op->n_heads = hp->n_head;
        op->width = hp->n_head * hdv;
        op->f0 = hp->attn_scale;
        op->f1 = hp->attn_logit_softcap;
        matmul(&b, IG_BUF_ATTN, IG_BUF_PROJ, ly->wo);
        op = push(&b, IG_OP_ADD_RMSNORM);
        op->src = IG_BUF_PROJ;
        op->dst = IG_BUF_X;
        op->norm = ly->post_attn_norm;
        op->width = H;
        op->f0 = hp->rms_eps;
        rmsnorm(&b, IG_BUF_X, IG_BUF_XN, ly->ffn_norm, H, 1, hp->rms_eps);
        matmul(&b, IG_BUF_XN, IG_BUF_GATE, ly->w_gate);
        matmul(&b, IG_BUF_XN, IG_BUF_UP, ly->w_up);
        op = push(&b, IG_OP_GEGLU);
        op->src = IG_BUF_UP;
        op->dst = IG_BUF_GATE;
        op->width = hp->n_ff;
        matmul(&b, IG_BUF_GATE, IG_BUF_PROJ, ly->w_down);
        op = push(&b, IG_OP_ADD_RMSNORM);
        op->src = IG_BUF_PROJ;
        op->dst = IG_BUF_X;
        op->norm = ly->post_ffn_norm;
        op->width = H;
        op->f0 = hp->rms_eps;
    }
    op = push(&b, IG_OP_GATHER);
    op->src = IG_BUF_X;
    op->dst = IG_BUF_OUT_H;
    op->width = H;
    op->on_outputs = true;
    rmsnorm(&b, IG_BUF_OUT_H, IG_BUF_OUT_H, m->output_norm, H, 1, hp->rms_eps)->on_outputs = true;
    matmul(&b, IG_BUF_OUT_H, IG_BUF_LOGITS, m->output)->on_outputs = true;
    if (hp->final_logit_softcap > 0) {
        op = push(&b, IG_OP_SOFTCAP);
        op->dst = IG_BUF_LOGITS;
        op->width = hp->n_vocab;
        op->f0 = hp->final_logit_softcap;
        op->on_outputs = true;
    }
    if (b.overflow) {
        ig_graph_free(g);
        return ig_fail(IG_ERR_INTERNAL, "graph op count overflow");
    }
    return IG_OK;
}

void ig_graph_free(ig_graph *g) {
    if (!g) return;
    free(g->ops);
    g->ops = NULL;
    g->n_ops = 0;
}
