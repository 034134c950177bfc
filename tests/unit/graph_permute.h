/* Reorders independent ops of a Gemma 3 style op list, as another graph
 * builder could lay them out: per layer v, k, q projections instead of
 * q, k, v; the k-norm before the q-norm; K's RoPE before Q's; up before
 * gate. perm[new index] = old index (perm may be NULL). Returns the number
 * of moves made. */
#ifndef IG_TEST_GRAPH_PERMUTE_H
#define IG_TEST_GRAPH_PERMUTE_H

#include "engine/graph.h"

static inline bool perm_is(const ig_op *op, ig_op_kind kind, ig_buf_id dst) {
    return op->kind == kind && op->dst == dst;
}

static inline void perm_swap(ig_graph *g, int *perm, int a, int b) {
    ig_op t = g->ops[a];
    g->ops[a] = g->ops[b];
    g->ops[b] = t;
    if (perm) {
        int p = perm[a];
        perm[a] = perm[b];
        perm[b] = p;
    }
}

static inline int permute_graph(ig_graph *g, int *perm) {
    if (perm)
        for (int i = 0; i < g->n_ops; i++) perm[i] = i;
    int moves = 0;
    for (int i = 0; i + 1 < g->n_ops; i++) {
        ig_op *o = &g->ops[i];
        if (i + 2 < g->n_ops && perm_is(o, IG_OP_MATMUL, IG_BUF_Q) && perm_is(o + 1, IG_OP_MATMUL, IG_BUF_K) &&
            perm_is(o + 2, IG_OP_MATMUL, IG_BUF_V)) {
            perm_swap(g, perm, i, i + 2); /* v, k, q */
            moves++;
            i += 2;
        } else if ((perm_is(o, IG_OP_RMSNORM, IG_BUF_Q) && perm_is(o + 1, IG_OP_RMSNORM, IG_BUF_K)) ||
                   (perm_is(o, IG_OP_ROPE, IG_BUF_Q) && perm_is(o + 1, IG_OP_ROPE, IG_BUF_K)) ||
                   (perm_is(o, IG_OP_MATMUL, IG_BUF_GATE) && perm_is(o + 1, IG_OP_MATMUL, IG_BUF_UP))) {
            perm_swap(g, perm, i, i + 1);
            moves++;
            i++;
        }
    }
    return moves;
}

#endif
