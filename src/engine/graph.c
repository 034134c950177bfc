/* The op list: what ops read and write, building a list (the model families'
 * builders are in model/), freeing it. */
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

ig_status ig_gb_begin(ig_graph_builder *b, ig_graph *g, int cap) {
    *g = (ig_graph){0};
    *b = (ig_graph_builder){.g = g, .cap = cap};
    if (cap < 1) return ig_fail(IG_ERR_INTERNAL, "graph of %d ops", cap);
    g->ops = ig_calloc_array((size_t)cap, sizeof *g->ops);
    return g->ops ? IG_OK : IG_ERR_NO_MEMORY;
}

ig_op *ig_gb_op(ig_graph_builder *b, ig_op_kind kind) {
    ig_op *op = &b->scratch;
    if (b->g->n_ops < b->cap) op = &b->g->ops[b->g->n_ops++];
    else b->overflow = true;
    *op = (ig_op){.kind = kind};
    return op;
}

ig_op *ig_gb_matmul(ig_graph_builder *b, ig_buf_id src, ig_buf_id dst, const ig_tensor *w) {
    ig_op *op = ig_gb_op(b, IG_OP_MATMUL);
    op->src = src;
    op->dst = dst;
    op->w = w;
    op->width = (int)w->ne[1];
    return op;
}

ig_op *ig_gb_rmsnorm(ig_graph_builder *b, ig_buf_id src, ig_buf_id dst, const float *w, int width, int heads,
                     float eps) {
    ig_op *op = ig_gb_op(b, IG_OP_RMSNORM);
    op->src = src;
    op->dst = dst;
    op->norm = w;
    op->width = width;
    op->n_heads = heads;
    op->f0 = eps;
    return op;
}

ig_status ig_gb_end(ig_graph_builder *b) {
    if (!b->overflow) return IG_OK;
    ig_graph_free(b->g);
    return ig_fail(IG_ERR_INTERNAL, "graph op count overflow");
}

ig_status ig_graph_build(const ig_model *m, ig_graph *g) {
    *g = (ig_graph){0};
    if (!m || !m->arch) return ig_fail(IG_ERR_INTERNAL, "graph: the model has no architecture");
    return m->arch->build_graph(m, g);
}

void ig_graph_free(ig_graph *g) {
    if (!g) return;
    free(g->ops);
    g->ops = NULL;
    g->n_ops = 0;
}
