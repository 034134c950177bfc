/* Fusion patterns over an op list, matched by kind and dataflow rather than
 * by position: a backend walking the ops in order asks, at the first op not
 * yet emitted, whether it starts a pattern whose other ops can be moved up
 * to it. A match needs
 *  - the ops' kinds and shapes, and their dataflow (the consumer reads the
 *    producer's output, the same source for sibling matmuls);
 *  - every other member movable to the first: no op left between them
 *    conflicts with it (ig_ops_conflict);
 *  - the buffers a member writes but the fused form does not (per pattern,
 *    ig_fusion.dead) unread by every later op before they are rewritten.
 * Which fused forms a backend has, and their extra limits, stay its own. */
#ifndef IG_FUSE_H
#define IG_FUSE_H

#include "engine/graph.h"

typedef enum ig_fusion_kind {
    /* q, k, v projections of one source, QK-norm and RoPE of q and k, the
     * cache store; the fused form leaves K unnormed and writes no V. Roles:
     * q, k, v, q-norm, k-norm, q-rope, k-rope, store. */
    IG_FUSE_QKV,
    /* in-place per-head rmsnorm then RoPE of the same rows, then the cache
     * store reading them; K is not written back. Roles: norm, rope, store. */
    IG_FUSE_NORM_ROPE_STORE,
    /* in-place per-head rmsnorm then RoPE of the same rows. Roles: norm, rope. */
    IG_FUSE_NORM_ROPE,
    /* RoPE of K then the cache store; K is not written back. Roles: rope, store. */
    IG_FUSE_ROPE_STORE,
    /* add_rmsnorm (post-norm + residual) then the rmsnorm of the residual
     * into another buffer. Roles: add, norm. */
    IG_FUSE_ADD_NORM_NORM,
    /* gate and up projections of one source then GEGLU; up is not written.
     * Roles: gate, up, geglu. */
    IG_FUSE_MATMUL_GEGLU,
    IG_FUSE_COUNT
} ig_fusion_kind;

#define IG_FUSE_MAX_OPS 8

typedef struct ig_fusion {
    ig_fusion_kind kind;
    int n;                    /* members */
    int op[IG_FUSE_MAX_OPS];  /* op indices in the pattern's role order */
    uint32_t dead;            /* buffers written by members, not by the fused form */
} ig_fusion;

const char *ig_fusion_name(ig_fusion_kind k);

/* Whether the ops not marked in done (done may be NULL: none) starting at
 * op i (not done, the first member in list order) form a `kind` pattern. */
bool ig_fuse_match(const ig_graph *g, const bool *done, int i, ig_fusion_kind kind, ig_fusion *out);

#endif
