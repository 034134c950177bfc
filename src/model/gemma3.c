/* Gemma 3: the forward pass as an op list.
 * Order per layer: norm → q/k/v → QK-norm → RoPE → cache → attention → wo →
 * post-norm + residual → norm → gate/up → GeGLU → down → post-norm +
 * residual. The final norm and the tied output projection run only on the
 * rows that want logits. */
#include "engine/graph.h"
#include "model/arch.h"

#include <math.h>

/* RoPE in place on the heads of buf, with the layer's base and scaling. */
static void rope(ig_graph_builder *b, ig_buf_id buf, int heads, int hd, const ig_layer *ly) {
    ig_op *op = ig_gb_op(b, IG_OP_ROPE);
    op->dst = buf;
    op->width = heads * hd;
    op->n_heads = heads;
    op->f0 = ly->rope_base;
    op->f1 = ly->rope_scale;
}

ig_status ig_gemma3_build_graph(const ig_model *m, ig_graph *g) {
    const ig_hparams *hp = &m->hp;
    ig_graph_builder b;
    IG_TRY(ig_gb_begin(&b, g, 20 * hp->n_layer + 8)); /* 18 ops per layer + head and tail */
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

    ig_op *op = ig_gb_op(&b, IG_OP_EMBED);
    op->dst = IG_BUF_X;
    op->w = m->tok_embd;
    op->width = H;
    op->f0 = sqrtf((float)H);

    for (int l = 0; l < hp->n_layer; l++) {
        const ig_layer *ly = &m->layers[l];
        ig_gb_rmsnorm(&b, IG_BUF_X, IG_BUF_XN, ly->attn_norm, H, 1, hp->rms_eps);
        ig_gb_matmul(&b, IG_BUF_XN, IG_BUF_Q, ly->wq);
        ig_gb_matmul(&b, IG_BUF_XN, IG_BUF_K, ly->wk);
        ig_gb_matmul(&b, IG_BUF_XN, IG_BUF_V, ly->wv);
        ig_gb_rmsnorm(&b, IG_BUF_Q, IG_BUF_Q, ly->q_norm, hp->n_head * hd, hp->n_head, hp->rms_eps);
        ig_gb_rmsnorm(&b, IG_BUF_K, IG_BUF_K, ly->k_norm, hp->n_head_kv * hd, hp->n_head_kv, hp->rms_eps);
        rope(&b, IG_BUF_Q, hp->n_head, hd, ly);
        rope(&b, IG_BUF_K, hp->n_head_kv, hd, ly);
        op = ig_gb_op(&b, IG_OP_KV_STORE);
        op->layer = l;
        op = ig_gb_op(&b, IG_OP_ATTENTION);
        op->src = IG_BUF_Q;
        op->dst = IG_BUF_ATTN;
        op->layer = l;
        op->n_heads = hp->n_head;
        op->width = hp->n_head * hdv;
        op->f0 = hp->attn_scale;
        op->f1 = hp->attn_logit_softcap;
        ig_gb_matmul(&b, IG_BUF_ATTN, IG_BUF_PROJ, ly->wo);
        op = ig_gb_op(&b, IG_OP_ADD_RMSNORM);
        op->src = IG_BUF_PROJ;
        op->dst = IG_BUF_X;
        op->norm = ly->post_attn_norm;
        op->width = H;
        op->f0 = hp->rms_eps;
        ig_gb_rmsnorm(&b, IG_BUF_X, IG_BUF_XN, ly->ffn_norm, H, 1, hp->rms_eps);
        ig_gb_matmul(&b, IG_BUF_XN, IG_BUF_GATE, ly->w_gate);
        ig_gb_matmul(&b, IG_BUF_XN, IG_BUF_UP, ly->w_up);
        op = ig_gb_op(&b, IG_OP_GEGLU);
        op->src = IG_BUF_UP;
        op->dst = IG_BUF_GATE;
        op->width = hp->n_ff;
        ig_gb_matmul(&b, IG_BUF_GATE, IG_BUF_PROJ, ly->w_down);
        op = ig_gb_op(&b, IG_OP_ADD_RMSNORM);
        op->src = IG_BUF_PROJ;
        op->dst = IG_BUF_X;
        op->norm = ly->post_ffn_norm;
        op->width = H;
        op->f0 = hp->rms_eps;
    }
    op = ig_gb_op(&b, IG_OP_GATHER);
    op->src = IG_BUF_X;
    op->dst = IG_BUF_OUT_H;
    op->width = H;
    op->on_outputs = true;
    ig_gb_rmsnorm(&b, IG_BUF_OUT_H, IG_BUF_OUT_H, m->output_norm, H, 1, hp->rms_eps)->on_outputs = true;
    ig_gb_matmul(&b, IG_BUF_OUT_H, IG_BUF_LOGITS, m->output)->on_outputs = true;
    if (hp->final_logit_softcap > 0) {
        op = ig_gb_op(&b, IG_OP_SOFTCAP);
        op->dst = IG_BUF_LOGITS;
        op->width = hp->n_vocab;
        op->f0 = hp->final_logit_softcap;
        op->on_outputs = true;
    }
    return ig_gb_end(&b);
}
