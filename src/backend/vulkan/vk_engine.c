/* The engine on the Vulkan backend: a context's op list (engine/graph.h)
 * recorded into one command buffer per batch-size bucket and replayed with
 * one submit per step.
 *
 * - The model's ig_device (engine/backend.h) holds the Vulkan device and
 *   the weights (and the f32 norm vectors), uploaded once, so every context
 *   of the model shares them.
 * - Per context: the activation buffers, the KV cache (K and V of each layer
 *   in a buffer of its own, which must fit one binding), a step buffer for
 *   the per-step values and a logits buffer read back after the step.
 * - Graphs are recorded lazily, the first time a step needs a bucket
 *   (1, 2, 4, ... n_batch tokens); shaders read the actual counts from the
 *   step buffer, so one recording serves every batch up to its bucket. The
 *   ops writing the logits form a separate "head" graph, chosen by the
 *   step's output count (mat-vec for up to 8 rows, tiled above) and
 *   submitted with the body in the same vkQueueSubmit.
 * - Fusions, where the op list allows them (matched by dataflow,
 *   engine/fuse.h; tuning `fuse=0` turns them off):
 *   post-norm + residual + next pre-norm (add_rmsnorm_norm), QK-norm + RoPE
 *   of Q (rmsnorm_rope), QK-norm + RoPE of K + the cache store
 *   (rmsnorm_rope_kv_store, else rope_kv_store), gate + up + GeGLU
 *   (matmul_geglu); in one-token graphs on the int8 mat-vec, the q/k/v
 *   projections with all of those in their tails (qkv_tail).
 * - L2 prefetch (tuning `prefetch_*`, on where the table says): in graphs of few
 *   tokens, the weights ahead are read into the GPU's cache next to the
 *   ops that leave the memory bus idle (see `prefetch` below).
 * - Logits: the output rows go through at most `head_cap` rows of a device
 *   buffer (a binding and a memory budget bound it); on discrete GPUs they
 *   are copied into host memory by the last dispatch. ig_get_logits reads
 *   that cached host memory in place (32 rows of a 262k vocabulary are
 *   32 MiB: a memcpy of them took longer than the whole GPU step of 270M).
 *   A step wanting more outputs than head_cap runs the output projection in
 *   further chunks, copied into the context's own logits. */
#include "backend/vulkan/vk_internal.h"
#include "engine/backend.h"
#include "engine/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define MAX_BUCKETS 24
#define LOGITS_BUDGET (256ull << 20) /* bytes of device logits per context */
#define HEAD_VEC_ROWS 8              /* output rows the mat-vec head takes */

/* ---- the device: weights shared by the contexts of a model ---- */

typedef struct wentry {
    const void *key; /* an ig_tensor, or a norm vector */
    ig_vk_buffer *buf;
} wentry;

typedef struct vk_model {
    ig_vk_device *dev;
    int device;
    wentry *w;
    int n_w, cap_w;
} vk_model;

static void vk_model_free(void *p) {
    vk_model *vm = p;
    if (!vm) return;
    for (int i = 0; i < vm->n_w; i++) ig_vk_buffer_free(vm->w[i].buf);
    free(vm->w);
    ig_vk_device_free(vm->dev);
    free(vm);
}

static ig_vk_buffer *vm_find(const vk_model *vm, const void *key) {
    for (int i = 0; i < vm->n_w; i++)
        if (vm->w[i].key == key) return vm->w[i].buf;
    return NULL;
}

static ig_status vm_add(vk_model *vm, const void *key, ig_vk_buffer *buf) {
    if (vm->n_w == vm->cap_w) {
        int nc = vm->cap_w ? 2 * vm->cap_w : 64;
        wentry *nw = ig_realloc_array(vm->w, (size_t)nc, sizeof *nw);
        if (!nw) return IG_ERR_NO_MEMORY;
        vm->w = nw;
        vm->cap_w = nc;
    }
    vm->w[vm->n_w++] = (wentry){key, buf};
    return IG_OK;
}

static ig_status upload_tensor(vk_model *vm, const ig_tensor *t) {
    if (vm_find(vm, t)) return IG_OK;
    if (t->n_dims > 2 && (t->ne[2] != 1 || t->ne[3] != 1))
        return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: tensor %s has more than two dimensions", t->name);
    ig_vk_buffer *b;
    ig_status st = ig_vk_weight_create(vm->dev, t->type, t->ne[0], t->ne[1], &b);
    if (st != IG_OK) return st;
    st = ig_vk_buffer_write(b, 0, t->data, ig_vk_buffer_size(b));
    if (st == IG_OK) st = vm_add(vm, t, b);
    if (st != IG_OK) ig_vk_buffer_free(b);
    return st;
}

static ig_status upload_norm(vk_model *vm, const float *p, int n) {
    ig_vk_buffer *b = vm_find(vm, p);
    if (b) {
        if (ig_vk_buffer_size(b) < (uint64_t)n * 4)
            return ig_fail(IG_ERR_INTERNAL, "vulkan: a norm vector is used with two widths");
        return IG_OK;
    }
    ig_status st = ig_vk_buffer_create(vm->dev, IG_VK_MEM_DEVICE, (uint64_t)n * 4, &b);
    if (st != IG_OK) return st;
    st = ig_vk_buffer_write(b, 0, p, (uint64_t)n * 4);
    if (st == IG_OK) st = vm_add(vm, p, b);
    if (st != IG_OK) ig_vk_buffer_free(b);
    return st;
}

/* Uploads the weights and norm vectors the graph reads that the device
 * does not hold yet (the contexts of a model share them). */
static ig_status upload_weights(vk_model *vm, const ig_graph *G) {
    ig_status st = IG_OK;
    for (int i = 0; i < G->n_ops && st == IG_OK; i++) {
        const ig_op *op = &G->ops[i];
        if (op->w) st = upload_tensor(vm, op->w);
        if (st == IG_OK && op->norm) st = upload_norm(vm, op->norm, op->width / (op->n_heads > 0 ? op->n_heads : 1));
    }
    return st;
}

static const ig_device_ops vk_device_ops;

const ig_vk_device *ig_vk_engine_device(const ig_model *m) {
    if (!m || !m->device || m->device->ops != &vk_device_ops) return NULL;
    return ((const vk_model *)m->device->impl)->dev;
}

/* ---- a context's backend ---- */

typedef struct vk_backend {
    vk_model *vm;
    const ig_graph *G;
    int n_vocab;
    ig_vk_device *dev;
    ig_vk_step *step;
    ig_vk_buffer *act[IG_BUF_COUNT];
    uint32_t stride[IG_BUF_COUNT]; /* row stride of each activation buffer (elements) */
    ig_vk_kv kv[IG_MAX_LAYERS];
    ig_vk_buffer *logits;    /* [head_cap, n_vocab] on the device */
    ig_vk_buffer *logits_rb; /* host copy (NULL when logits is host-visible) */
    int head_cap;
    int n_buckets;
    int bucket[MAX_BUCKETS];
    ig_vk_graph *graph[MAX_BUCKETS]; /* bodies */
    ig_vk_graph *head[5];            /* output rows <= 1, 2, 4, 8 (mat-vec), <= head_cap */
    ig_vk_step *hstep;       /* output chunks past head_cap */
    ig_vk_graph **hgraph;
    int n_hgraph;
    bool fuse;
} vk_backend;

static ig_vk_view view(const vk_backend *vb, ig_buf_id id) {
    if (id == IG_BUF_LOGITS) return (ig_vk_view){vb->logits, 0, 0};
    return (ig_vk_view){vb->act[id], 0, vb->stride[id]};
}

static ig_vk_rows rows_of(const ig_op *op) {
    if (op->dst == IG_BUF_LOGITS) return IG_VK_ROWS_HEAD;
    return op->on_outputs ? IG_VK_ROWS_OUTPUTS : IG_VK_ROWS_TOKENS;
}

static ig_vk_buffer *wbuf(const vk_backend *vb, const void *key) { return vm_find(vb->vm, key); }

/* Emits the fused form of f if this backend has it for these shapes
 * (*emitted false otherwise: nothing recorded). */
static ig_status emit_fusion(vk_backend *vb, ig_vk_graph *g, const ig_graph *G, const ig_fusion *f, bool *emitted) {
    const ig_op *o[IG_FUSE_MAX_OPS];
    for (int m = 0; m < f->n; m++) o[m] = &G->ops[f->op[m]];
    *emitted = true;
    switch (f->kind) {
    case IG_FUSE_QKV: {
        /* one-token graphs: QK-norm, RoPE and the cache store in the
           projections' own dispatches */
        const ig_op *q = o[0], *k = o[1], *v = o[2], *nq = o[3], *nk = o[4], *rq = o[5], *st = o[7];
        const ig_vk_kv *kv = &vb->kv[st->layer];
        const ig_vk_qkv p = {wbuf(vb, q->w),     wbuf(vb, k->w), wbuf(vb, v->w), wbuf(vb, nq->norm),
                             wbuf(vb, nk->norm), nq->n_heads,    nq->f0,         rq->f0,
                             rq->f1};
        if (!ig_vk_qkv_tail_ok(g, &p, kv, view(vb, q->src))) break; /* (it checks the heads against the cache) */
        return ig_vk_op_qkv_tail(g, &p, kv, view(vb, q->src), view(vb, q->dst), view(vb, k->dst), view(vb, v->dst));
    }
    case IG_FUSE_NORM_ROPE_STORE: {
        const ig_op *n = o[0], *r = o[1], *s = o[2];
        if (n->width / n->n_heads != vb->kv[s->layer].head_dim) break;
        return ig_vk_op_rmsnorm_rope_kv_store(g, &vb->kv[s->layer], view(vb, IG_BUF_K), wbuf(vb, n->norm),
                                              view(vb, IG_BUF_V), n->f0, r->f0, r->f1);
    }
    case IG_FUSE_NORM_ROPE: {
        const ig_op *n = o[0], *r = o[1];
        return ig_vk_op_rmsnorm_rope(g, view(vb, n->dst), wbuf(vb, n->norm), n->n_heads, n->width / n->n_heads, n->f0,
                                     r->f0, r->f1);
    }
    case IG_FUSE_ROPE_STORE: {
        const ig_op *r = o[0], *s = o[1];
        if (r->width / r->n_heads != vb->kv[s->layer].head_dim) break;
        return ig_vk_op_rope_kv_store(g, &vb->kv[s->layer], view(vb, IG_BUF_K), view(vb, IG_BUF_V), r->f0, r->f1);
    }
    case IG_FUSE_ADD_NORM_NORM: {
        const ig_op *a = o[0], *n = o[1];
        return ig_vk_op_add_rmsnorm_norm(g, rows_of(a), view(vb, a->src), view(vb, a->dst), wbuf(vb, a->norm),
                                         view(vb, n->dst), wbuf(vb, n->norm), a->width, a->f0);
    }
    case IG_FUSE_MATMUL_GEGLU: {
        const ig_op *gate = o[0], *up = o[1];
        return ig_vk_op_matmul_geglu(g, rows_of(gate), wbuf(vb, gate->w), wbuf(vb, up->w), view(vb, gate->src),
                                     view(vb, gate->dst));
    }
    case IG_FUSE_COUNT: break;
    }
    *emitted = false;
    return IG_OK;
}

/* The fusions tried at an op, most ops first. */
static const ig_fusion_kind fusions[] = {IG_FUSE_QKV,        IG_FUSE_MATMUL_GEGLU, IG_FUSE_NORM_ROPE_STORE,
                                         IG_FUSE_NORM_ROPE,  IG_FUSE_ROPE_STORE,   IG_FUSE_ADD_NORM_NORM};

/* Emits op i, fused with later ops where a pattern matches (engine/fuse.h);
 * *used: the ops emitted, all marked done. */
static ig_status emit(vk_backend *vb, const ig_graph *G, ig_vk_graph *g, int i, bool *done, ig_fusion *used) {
    const ig_op *op = &G->ops[i];
    const ig_vk_rows rows = rows_of(op);
    for (size_t k = 0; vb->fuse && k < sizeof fusions / sizeof fusions[0]; k++) {
        bool emitted;
        if (!ig_fuse_match(G, done, i, fusions[k], used)) continue;
        IG_TRY(emit_fusion(vb, g, G, used, &emitted));
        if (!emitted) continue;
        for (int m = 0; m < used->n; m++) done[used->op[m]] = true;
        return IG_OK;
    }
    *used = (ig_fusion){.kind = IG_FUSE_COUNT, .n = 1, .op = {i}};
    done[i] = true;
    switch (op->kind) {
    case IG_OP_EMBED: return ig_vk_op_embed(g, wbuf(vb, op->w), op->f0, view(vb, op->dst));
    case IG_OP_RMSNORM:
        return ig_vk_op_rmsnorm(g, rows, view(vb, op->src), view(vb, op->dst), wbuf(vb, op->norm), op->width,
                                op->n_heads > 0 ? op->n_heads : 1, op->f0);
    case IG_OP_ADD_RMSNORM:
        return ig_vk_op_add_rmsnorm(g, rows, view(vb, op->src), view(vb, op->dst), wbuf(vb, op->norm), op->width,
                                    op->f0);
    case IG_OP_MATMUL: return ig_vk_op_matmul(g, rows, wbuf(vb, op->w), view(vb, op->src), view(vb, op->dst));
    case IG_OP_ROPE: return ig_vk_op_rope(g, view(vb, op->dst), op->n_heads, op->width / op->n_heads, op->f0, op->f1);
    case IG_OP_KV_STORE: return ig_vk_op_kv_store(g, &vb->kv[op->layer], view(vb, IG_BUF_K), view(vb, IG_BUF_V));
    case IG_OP_ATTENTION:
        return ig_vk_op_attention(g, &vb->kv[op->layer], view(vb, op->src), view(vb, op->dst), op->n_heads, op->f0,
                                  op->f1);
    case IG_OP_GEGLU:
        return ig_vk_op_geglu(g, rows, view(vb, op->dst), view(vb, op->src), view(vb, op->dst), op->width);
    case IG_OP_GATHER: return ig_vk_op_gather(g, view(vb, op->src), view(vb, op->dst), op->width);
    case IG_OP_SOFTCAP: return ig_vk_op_softcap(g, rows, view(vb, op->dst), op->width, op->f0);
    }
    return ig_fail(IG_ERR_INTERNAL, "vulkan: unknown op %d", (int)op->kind);
}

/* ---- L2 prefetch (small batches) ----
 * Between the mat-vecs of decoding come ops that move few bytes (norms,
 * QK-norm and RoPE, attention) and leave the memory bus idle. Next to each,
 * in the same barrier stage, a prefetch dispatch touches the next bytes of
 * the weights ahead, so the mat-vecs find them in L2: at most `stage` bytes
 * per op and `ahead` bytes touched but not yet read. Matrices that one
 * dispatch reads side by side (gate and up) advance together. */
typedef struct prefetch {
    uint64_t stage, ahead; /* 0: off */
    uint64_t pending;      /* bytes touched and not yet read */
    uint64_t *done;        /* per op: bytes of its weight touched */
} prefetch;

static bool pf_pair(const ig_graph *G, int j) {
    const ig_op *a = &G->ops[j], *b = j + 1 < G->n_ops ? &G->ops[j + 1] : NULL;
    return b && b->kind == IG_OP_MATMUL && b->src == a->src && b->w->type == a->w->type &&
           b->w->ne[0] == a->w->ne[0] && b->w->ne[1] == a->w->ne[1];
}

static ig_status pf_after(vk_backend *vb, const ig_graph *G, ig_vk_graph *g, prefetch *pf, int i,
                          const bool *done) {
    uint64_t budget = pf->stage;
    for (int j = i + 1; j < G->n_ops && budget > 0 && pf->pending < pf->ahead; j++) {
        const ig_op *op = &G->ops[j];
        if (done[j] || op->kind != IG_OP_MATMUL) continue;
        const int m = pf_pair(G, j) ? 2 : 1;
        const ig_vk_buffer *w = wbuf(vb, op->w);
        if (!w) return ig_fail(IG_ERR_INTERNAL, "vulkan: prefetch of an unknown weight");
        const uint64_t size = ig_vk_buffer_size(w);
        if (pf->done[j] < size) {
            uint64_t n = size - pf->done[j], room = (pf->ahead - pf->pending) / (uint64_t)m;
            if (n > budget / (uint64_t)m) n = budget / (uint64_t)m;
            if (n > room) n = room;
            if (n == 0 || (n < 4096 && n < size - pf->done[j])) break; /* no slivers but a weight's last */
            for (int k = 0; k < m; k++) {
                IG_TRY(ig_vk_op_prefetch(g, wbuf(vb, G->ops[j + k].w), pf->done[j + k], pf->done[j + k] + n));
                pf->done[j + k] += n;
            }
            pf->pending += n * (uint64_t)m;
            budget -= n * (uint64_t)m;
        }
        j += m - 1;
    }
    return IG_OK;
}

/* The body (every op but those writing the logits) for buckets of T tokens,
 * or the head (the ops writing the logits, then the copy to host memory) for
 * up to T output rows. */
static ig_status record(vk_backend *vb, int T, bool head, ig_vk_graph **out) {
    const ig_graph *G = vb->G;
    ig_vk_graph *g;
    IG_TRY(ig_vk_graph_begin(vb->dev, vb->step, T, &g));
    bool *done = ig_calloc_array((size_t)G->n_ops + 1, sizeof *done);
    ig_status st = done ? IG_OK : IG_ERR_NO_MEMORY;
    for (int i = 0; i < G->n_ops && st == IG_OK; i++) done[i] = (G->ops[i].dst == IG_BUF_LOGITS) != head;
    prefetch pf = {0};
    if (st == IG_OK && !head && vb->dev->tune.prefetch_stage && T <= (int)vb->dev->tune.prefetch_max_tokens) {
        pf = (prefetch){vb->dev->tune.prefetch_stage, vb->dev->tune.prefetch_ahead, 0,
                        ig_calloc_array((size_t)G->n_ops + 1, sizeof *pf.done)};
        if (!pf.done) st = IG_ERR_NO_MEMORY;
    }
    for (int i = 0; i < G->n_ops && st == IG_OK; i++) {
        if (done[i]) continue;
        const bool mm = G->ops[i].kind == IG_OP_MATMUL;
        ig_fusion used;
        st = emit(vb, G, g, i, done, &used);
        if (st != IG_OK || !pf.done) continue;
        if (!mm) {
            st = pf_after(vb, G, g, &pf, i, done);
            continue;
        }
        /* what the matmuls just recorded read from L2 is no longer ahead */
        for (int m = 0; m < used.n; m++) {
            const int k = used.op[m];
            if (G->ops[k].kind == IG_OP_MATMUL && pf.done[k] != UINT64_MAX) {
                pf.pending -= pf.done[k] < pf.pending ? pf.done[k] : pf.pending;
                pf.done[k] = UINT64_MAX;
            }
        }
    }
    free(pf.done);
    if (st == IG_OK && head && vb->logits_rb)
        st = ig_vk_op_copy(g, IG_VK_ROWS_HEAD, (ig_vk_view){vb->logits, 0, 0}, (ig_vk_view){vb->logits_rb, 0, 0},
                           vb->n_vocab);
    if (st == IG_OK) st = ig_vk_graph_end(g);
    free(done);
    if (st != IG_OK) {
        ig_vk_graph_free(g);
        return st;
    }
    *out = g;
    return IG_OK;
}

/* The graph of chunk c (c >= 1) of the output rows: the output projection
 * (and softcap) of rows c * head_cap .. of OUT_H. */
static ig_status record_head(vk_backend *vb, int c, ig_vk_graph **out) {
    const ig_graph *G = vb->G;
    const int V = vb->n_vocab;
    ig_vk_graph *g;
    IG_TRY(ig_vk_graph_begin(vb->dev, vb->hstep, vb->head_cap, &g));
    ig_status st = IG_OK;
    bool seen = false;
    for (int i = 0; i < G->n_ops && st == IG_OK; i++) {
        const ig_op *op = &G->ops[i];
        if (op->dst != IG_BUF_LOGITS) continue;
        if (op->kind == IG_OP_MATMUL) {
            ig_vk_view src = view(vb, op->src);
            src.offset = (uint64_t)c * (uint64_t)vb->head_cap * vb->stride[op->src] * 4;
            st = ig_vk_op_matmul(g, IG_VK_ROWS_TOKENS, wbuf(vb, op->w), src, view(vb, op->dst));
            seen = true;
        } else if (op->kind == IG_OP_SOFTCAP) {
            st = ig_vk_op_softcap(g, IG_VK_ROWS_TOKENS, view(vb, op->dst), op->width, op->f0);
        } else {
            st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: op %s on the logits", ig_op_name(op->kind));
        }
    }
    if (st == IG_OK && !seen) st = ig_fail(IG_ERR_INTERNAL, "vulkan: no output projection");
    if (st == IG_OK && vb->logits_rb)
        st = ig_vk_op_copy(g, IG_VK_ROWS_TOKENS, (ig_vk_view){vb->logits, 0, 0}, (ig_vk_view){vb->logits_rb, 0, 0},
                           V);
    if (st == IG_OK) st = ig_vk_graph_end(g);
    if (st != IG_OK) {
        ig_vk_graph_free(g);
        return st;
    }
    *out = g;
    return IG_OK;
}

/* The buffer the host reads the logits from. */
static const ig_vk_buffer *host_logits(const vk_backend *vb) { return vb->logits_rb ? vb->logits_rb : vb->logits; }

/* Copies n rows of logits from the device into dst. */
static ig_status read_logits(vk_backend *vb, float *dst, int n, int V) {
    const ig_vk_buffer *src = host_logits(vb);
    const uint64_t bytes = (uint64_t)n * (uint64_t)V * 4;
    const void *p = ig_vk_buffer_host_ptr(src);
    if (p) {
        memcpy(dst, p, (size_t)bytes);
        return IG_OK;
    }
    return ig_vk_buffer_read(src, 0, dst, bytes);
}

static ig_status vk_compute(ig_backend *be, const ig_step *st, float *logits, const float **rows_out) {
    vk_backend *vb = be->impl;
    const int V = vb->n_vocab;
    *rows_out = logits;
    int bi = 0;
    while (bi < vb->n_buckets - 1 && vb->bucket[bi] < st->n_tokens) bi++;
    if (!vb->graph[bi]) IG_TRY(record(vb, vb->bucket[bi], false, &vb->graph[bi]));
    const int first = st->n_out < vb->head_cap ? st->n_out : vb->head_cap;
    ig_vk_graph *run[2] = {vb->graph[bi], NULL};
    if (first > 0) {
        /* the output projection: mat-vec for up to 8 rows (a variant per
         * power of two), else tiled */
        int hi = 0, T = 1;
        while (T < first && T < HEAD_VEC_ROWS) T *= 2, hi++;
        if (T < first) T = vb->head_cap, hi = 4;
        if (T > vb->head_cap) T = vb->head_cap;
        if (!vb->head[hi]) IG_TRY(record(vb, T, true, &vb->head[hi]));
        run[1] = vb->head[hi];
    }
    IG_TRY(ig_vk_step_set(vb->step, st->n_tokens, st->tokens, st->pos, st->seq, st->n_out, st->out_idx));
    IG_TRY(ig_vk_graphs_run(run, run[1] ? 2 : 1));
    const ig_vk_buffer *out_rows = host_logits(vb);
    if (first > 0 && st->n_out == first && ig_vk_buffer_host_cached(out_rows))
        *rows_out = ig_vk_buffer_host_ptr(out_rows); /* one chunk: read in place */
    else if (first > 0)
        IG_TRY(read_logits(vb, logits, first, V));
    for (int c = 1; c * vb->head_cap < st->n_out; c++) {
        if (c > vb->n_hgraph) {
            ig_vk_graph **ng = ig_realloc_array(vb->hgraph, (size_t)c, sizeof *ng);
            if (!ng) return IG_ERR_NO_MEMORY;
            vb->hgraph = ng;
            for (int k = vb->n_hgraph; k < c; k++) vb->hgraph[k] = NULL;
            vb->n_hgraph = c;
        }
        if (!vb->hgraph[c - 1]) IG_TRY(record_head(vb, c, &vb->hgraph[c - 1]));
        const int rows = st->n_out - c * vb->head_cap < vb->head_cap ? st->n_out - c * vb->head_cap : vb->head_cap;
        IG_TRY(ig_vk_step_set(vb->hstep, rows, NULL, NULL, NULL, 0, NULL));
        IG_TRY(ig_vk_graph_run(vb->hgraph[c - 1]));
        IG_TRY(read_logits(vb, logits + (size_t)c * (size_t)vb->head_cap * (size_t)V, rows, V));
    }
    return IG_OK;
}

static void vk_destroy(ig_backend *be) {
    if (!be) return;
    vk_backend *vb = be->impl;
    if (vb) {
        for (int i = 0; i < vb->n_buckets; i++) ig_vk_graph_free(vb->graph[i]);
        for (int i = 0; i < 5; i++) ig_vk_graph_free(vb->head[i]);
        for (int i = 0; i < vb->n_hgraph; i++) ig_vk_graph_free(vb->hgraph[i]);
        free(vb->hgraph);
        for (int i = 0; i < IG_BUF_COUNT; i++) ig_vk_buffer_free(vb->act[i]);
        for (int l = 0; l < IG_MAX_LAYERS; l++) {
            ig_vk_buffer_free((ig_vk_buffer *)vb->kv[l].k);
            ig_vk_buffer_free((ig_vk_buffer *)vb->kv[l].v);
        }
        ig_vk_buffer_free(vb->logits);
        ig_vk_buffer_free(vb->logits_rb);
        ig_vk_step_free(vb->step);
        ig_vk_step_free(vb->hstep);
        free(vb);
    }
    free(be);
}

static const ig_backend_ops vk_ops = {
    .name = "vulkan",
    .compute = vk_compute,
    .destroy = vk_destroy,
};

static ig_status make_buffer(vk_backend *vb, uint64_t bytes, const char *what, ig_vk_mem mem, ig_vk_buffer **out) {
    ig_status st = ig_vk_buffer_create(vb->dev, mem, bytes ? bytes : 4, out);
    if (st == IG_ERR_UNSUPPORTED)
        return ig_fail(st, "vulkan: the %s (%.1f MiB) does not fit one binding of %s; use a smaller context, "
                           "batch or sequence count", what, (double)bytes / (1 << 20),
                       ig_vk_device_get_info(vb->dev)->name);
    return st;
}

static ig_status setup(vk_backend *vb, const ig_backend_desc *desc) {
    const ig_graph *G = desc->graph;
    const ig_kv_cache *kv = desc->kv;
    const int nb = desc->n_batch, V = G->buf_width[IG_BUF_LOGITS];
    vb->fuse = vb->dev->tune.fuse;
    if (kv->head_dim != kv->head_dim_v)
        return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: K and V head sizes differ (%d, %d)", kv->head_dim,
                       kv->head_dim_v);
    IG_TRY(ig_vk_step_create(vb->dev, nb, &vb->step));
    /* logits rows held on the device at once */
    const uint64_t row = (uint64_t)V * 4;
    uint64_t cap = vb->dev->max_binding / row;
    if (cap > LOGITS_BUDGET / row) cap = LOGITS_BUDGET / row;
    if (cap < 1) cap = 1;
    if (vb->dev->tune.head_cap && vb->dev->tune.head_cap < cap) cap = vb->dev->tune.head_cap;
    vb->head_cap = cap < (uint64_t)nb ? (int)cap : nb;
    IG_TRY(ig_vk_step_set_head_cap(vb->step, vb->head_cap));
    const int out_rows = (nb + vb->head_cap - 1) / vb->head_cap * vb->head_cap;
    for (int i = 0; i < IG_BUF_COUNT; i++) {
        if (i == IG_BUF_LOGITS) continue;
        vb->stride[i] = ((uint32_t)G->buf_width[i] + 3u) & ~3u;
        const uint64_t rows = i == IG_BUF_OUT_H ? (uint64_t)out_rows : (uint64_t)nb;
        IG_TRY(make_buffer(vb, rows * vb->stride[i] * 4, "activation buffer", IG_VK_MEM_DEVICE, &vb->act[i]));
    }
    IG_TRY(make_buffer(vb, (uint64_t)vb->head_cap * row, "logits buffer", IG_VK_MEM_DEVICE, &vb->logits));
    if (!ig_vk_buffer_host_ptr(vb->logits))
        IG_TRY(make_buffer(vb, (uint64_t)vb->head_cap * row, "logits buffer", IG_VK_MEM_READBACK, &vb->logits_rb));
    if (vb->head_cap < nb) IG_TRY(ig_vk_step_create(vb->dev, vb->head_cap, &vb->hstep));
    /* KV cache: the engine's ring layout, one buffer per layer and K / V */
    const uint64_t es = ig_kv_elem_size(kv->type);
    for (int l = 0; l < kv->n_layer; l++) {
        const ig_kv_layer *L = &kv->layers[l];
        ig_vk_kv *k = &vb->kv[l];
        ig_vk_buffer *kb = NULL, *vbuf = NULL;
        const uint64_t rows = (uint64_t)L->cap * (uint64_t)kv->n_seq;
        IG_TRY(make_buffer(vb, rows * (uint64_t)kv->k_dim * es, "KV cache of a layer", IG_VK_MEM_DEVICE, &kb));
        k->k = kb;
        IG_TRY(make_buffer(vb, rows * (uint64_t)kv->v_dim * es, "KV cache of a layer", IG_VK_MEM_DEVICE, &vbuf));
        k->v = vbuf;
        IG_TRY(ig_vk_buffer_zero(kb));
        IG_TRY(ig_vk_buffer_zero(vbuf));
        k->type = kv->type;
        k->n_seq = kv->n_seq;
        k->cap = L->cap;
        k->n_head_kv = kv->n_head_kv;
        k->head_dim = kv->head_dim;
        k->window = L->window;
    }
    /* buckets: powers of two below n_batch, then n_batch */
    for (int b = 1; b < nb && vb->n_buckets < MAX_BUCKETS - 1; b *= 2) vb->bucket[vb->n_buckets++] = b;
    vb->bucket[vb->n_buckets++] = nb;
    return IG_OK;
}

static ig_status vk_backend_create(ig_device *dev, const ig_backend_desc *desc, ig_backend **out) {
    *out = NULL;
    vk_model *vm = dev->impl;
    if (!desc->kv || !desc->graph || desc->n_batch < 1)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan backend: incomplete descriptor");
    IG_TRY(upload_weights(vm, desc->graph));
    ig_backend *be = ig_calloc_array(1, sizeof *be);
    vk_backend *vb = ig_calloc_array(1, sizeof *vb);
    if (!be || !vb) {
        free(be);
        free(vb);
        return IG_ERR_NO_MEMORY;
    }
    be->ops = &vk_ops;
    be->impl = vb;
    vb->vm = vm;
    vb->dev = vm->dev;
    vb->G = desc->graph;
    vb->n_vocab = desc->graph->buf_width[IG_BUF_LOGITS];
    ig_status st = setup(vb, desc);
    if (st != IG_OK) {
        vk_destroy(be);
        return st;
    }
    *out = be;
    return IG_OK;
}

static void vk_device_free(ig_device *dev) {
    if (!dev) return;
    vk_model_free(dev->impl);
    free(dev);
}

/* Monitoring: the device's memory and busy time (vk_monitor.c). */
static void vk_device_stats(const ig_device *dev, ig_device_stats *out) {
    ig_vk_device_stats s;
    ig_vk_device_get_stats(((const vk_model *)dev->impl)->dev, &s);
    out->allocated_bytes = s.allocated;
    out->used_bytes = s.used;
    out->budget_bytes = s.budget;
    out->memory_budget = s.memory_budget;
    out->busy_measured = s.timestamps;
    out->busy_ns = s.busy_ns;
    out->device_lost = s.lost;
}

static bool vk_batch_invariant(const ig_device *dev) {
    const vk_model *vm = dev->impl;
    return vm->dev && ig_vk_device_invariant(vm->dev);
}

static const ig_device_ops vk_device_ops = {
    .name = "vulkan",
    .host_kv = false,
    .backend_create = vk_backend_create,
    .free = vk_device_free,
    .stats = vk_device_stats,
    .batch_invariant = vk_batch_invariant,
};

ig_status ig_device_vulkan_wrap(ig_vk_device *vk, ig_device **out) {
    *out = NULL;
    if (!vk) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: no device");
    ig_device *d = ig_calloc_array(1, sizeof *d);
    vk_model *vm = ig_calloc_array(1, sizeof *vm);
    if (!d || !vm) {
        free(d);
        free(vm);
        ig_vk_device_free(vk);
        return IG_ERR_NO_MEMORY;
    }
    vm->dev = vk;
    vm->device = ig_vk_device_get_info(vk)->index;
    d->ops = &vk_device_ops;
    d->impl = vm;
    *out = d;
    return IG_OK;
}

ig_status ig_device_vulkan_create(int index, const char *tuning, ig_device **out) {
    *out = NULL;
    ig_vk_device_params dp = ig_vk_device_default_params();
    dp.index = index;
    dp.tuning = tuning;
    ig_vk_device *vk;
    IG_TRY(ig_vk_device_create(&dp, &vk));
    return ig_device_vulkan_wrap(vk, out);
}
