/* Fusion patterns matched by kind and dataflow (see fuse.h). */
#include "engine/fuse.h"

const char *ig_fusion_name(ig_fusion_kind k) {
    switch (k) {
    case IG_FUSE_QKV: return "qkv";
    case IG_FUSE_NORM_ROPE_STORE: return "norm_rope_store";
    case IG_FUSE_NORM_ROPE: return "norm_rope";
    case IG_FUSE_ROPE_STORE: return "rope_store";
    case IG_FUSE_ADD_NORM_NORM: return "add_norm_norm";
    case IG_FUSE_MATMUL_GEGLU: return "matmul_geglu";
    case IG_FUSE_COUNT: break;
    }
    return "?";
}

static bool live(const bool *done, int j) { return !done || !done[j]; }

static uint32_t touches(const ig_op *op) {
    const ig_op_rw io = ig_op_io(op);
    return io.reads | io.writes;
}

/* The first live op after `from` that reads or writes b, or -1. */
static int next_use(const ig_graph *g, const bool *done, int from, ig_buf_id b) {
    for (int j = from + 1; j < g->n_ops; j++)
        if (live(done, j) && (touches(&g->ops[j]) & ig_buf_bit(b))) return j;
    return -1;
}

/* The first live op at or after `from` that writes b, or -1. */
static int next_writer(const ig_graph *g, const bool *done, int from, ig_buf_id b) {
    for (int j = from; j < g->n_ops; j++)
        if (live(done, j) && (ig_op_io(&g->ops[j]).writes & ig_buf_bit(b))) return j;
    return -1;
}

static bool is_member(const ig_fusion *f, int j) {
    for (int m = 0; m < f->n; m++)
        if (f->op[m] == j) return true;
    return false;
}

/* The anchor i is the first member, every member is live and distinct, no
 * op between i and a member conflicts with it, and no later op reads a dead
 * buffer before rewriting it. */
static bool valid(const ig_graph *g, const bool *done, int i, const ig_fusion *f) {
    bool anchored = false;
    for (int m = 0; m < f->n; m++) {
        const int j = f->op[m];
        if (j < i || j >= g->n_ops || !live(done, j)) return false;
        for (int o = 0; o < m; o++)
            if (f->op[o] == j) return false;
        if (j == i) anchored = true;
        for (int k = i + 1; k < j; k++)
            if (live(done, k) && !is_member(f, k) && ig_ops_conflict(&g->ops[k], &g->ops[j])) return false;
    }
    if (!anchored) return false;
    for (int b = 0; b < IG_BUF_COUNT; b++) {
        if (!(f->dead & ig_buf_bit((ig_buf_id)b))) continue;
        for (int k = i + 1; k < g->n_ops; k++) {
            if (!live(done, k) || is_member(f, k)) continue;
            const ig_op_rw io = ig_op_io(&g->ops[k]);
            if (io.reads & ig_buf_bit((ig_buf_id)b)) return false;
            if (io.writes & ig_buf_bit((ig_buf_id)b)) break;
        }
    }
    return true;
}

static bool head_norm(const ig_op *op) {
    return op->kind == IG_OP_RMSNORM && op->src == op->dst && op->n_heads > 0 && !op->on_outputs;
}

static bool rope_of(const ig_op *r, const ig_op *norm) {
    return r->kind == IG_OP_ROPE && r->dst == norm->dst && r->n_heads == norm->n_heads && r->width == norm->width;
}

static bool projection(const ig_op *op, ig_buf_id src) {
    return op->kind == IG_OP_MATMUL && op->src == src && !op->on_outputs && op->dst != src;
}

/* The per-head norm at n (if any) and the RoPE after it: -1 when absent. */
static int norm_then_rope(const ig_graph *g, const bool *done, int n) {
    if (n < 0 || !head_norm(&g->ops[n])) return -1;
    const int r = next_use(g, done, n, g->ops[n].dst);
    return r >= 0 && rope_of(&g->ops[r], &g->ops[n]) ? r : -1;
}

static bool match_qkv(const ig_graph *g, const bool *done, int i, ig_fusion *f) {
    const ig_op *a = &g->ops[i];
    if (a->kind != IG_OP_MATMUL || a->on_outputs) return false;
    const ig_buf_id x = a->src;
    if (x == IG_BUF_K || x == IG_BUF_V) return false;
    const int mk = next_writer(g, done, i, IG_BUF_K), mv = next_writer(g, done, i, IG_BUF_V);
    if (mk < 0 || mv < 0 || !projection(&g->ops[mk], x) || !projection(&g->ops[mv], x)) return false;
    const int nk = next_use(g, done, mk, IG_BUF_K), rk = norm_then_rope(g, done, nk);
    if (rk < 0) return false;
    const int s = next_use(g, done, rk, IG_BUF_K);
    if (s < 0 || g->ops[s].kind != IG_OP_KV_STORE || next_use(g, done, mv, IG_BUF_V) != s) return false;
    /* q: the first other projection of x before the store with a QK-norm */
    int mq = -1;
    for (int j = i; j < s && mq < 0; j++)
        if (live(done, j) && j != mk && j != mv && projection(&g->ops[j], x) && g->ops[j].dst != IG_BUF_K &&
            g->ops[j].dst != IG_BUF_V)
            mq = j;
    if (mq < 0) return false;
    const int nq = next_use(g, done, mq, g->ops[mq].dst), rq = norm_then_rope(g, done, nq);
    if (rq < 0) return false;
    const ig_op *Nq = &g->ops[nq], *Nk = &g->ops[nk], *Rq = &g->ops[rq], *Rk = &g->ops[rk];
    if (Nq->f0 != Nk->f0 || Nq->width / Nq->n_heads != Nk->width / Nk->n_heads || Rq->f0 != Rk->f0 ||
        Rq->f1 != Rk->f1)
        return false;
    *f = (ig_fusion){.kind = IG_FUSE_QKV, .n = 8, .op = {mq, mk, mv, nq, nk, rq, rk, s},
                     .dead = ig_buf_bit(IG_BUF_K) | ig_buf_bit(IG_BUF_V)};
    return valid(g, done, i, f);
}

static bool match_norm_rope(const ig_graph *g, const bool *done, int i, bool store, ig_fusion *f) {
    const int r = norm_then_rope(g, done, i);
    if (r < 0) return false;
    *f = (ig_fusion){.kind = IG_FUSE_NORM_ROPE, .n = 2, .op = {i, r}};
    if (store) {
        const int s = next_use(g, done, r, g->ops[i].dst);
        if (g->ops[i].dst != IG_BUF_K || s < 0 || g->ops[s].kind != IG_OP_KV_STORE) return false;
        *f = (ig_fusion){.kind = IG_FUSE_NORM_ROPE_STORE, .n = 3, .op = {i, r, s}, .dead = ig_buf_bit(IG_BUF_K)};
    }
    return valid(g, done, i, f);
}

static bool match_rope_store(const ig_graph *g, const bool *done, int i, ig_fusion *f) {
    const ig_op *r = &g->ops[i];
    if (r->kind != IG_OP_ROPE || r->dst != IG_BUF_K) return false;
    const int s = next_use(g, done, i, IG_BUF_K);
    if (s < 0 || g->ops[s].kind != IG_OP_KV_STORE) return false;
    *f = (ig_fusion){.kind = IG_FUSE_ROPE_STORE, .n = 2, .op = {i, s}, .dead = ig_buf_bit(IG_BUF_K)};
    return valid(g, done, i, f);
}

static bool match_add_norm_norm(const ig_graph *g, const bool *done, int i, ig_fusion *f) {
    const ig_op *a = &g->ops[i];
    if (a->kind != IG_OP_ADD_RMSNORM) return false;
    const int j = next_use(g, done, i, a->dst);
    if (j < 0) return false;
    const ig_op *n = &g->ops[j];
    if (n->kind != IG_OP_RMSNORM || n->src != a->dst || n->n_heads > 1 || n->width != a->width ||
        n->on_outputs != a->on_outputs || n->f0 != a->f0 || n->dst == a->dst || n->dst == a->src)
        return false;
    *f = (ig_fusion){.kind = IG_FUSE_ADD_NORM_NORM, .n = 2, .op = {i, j}};
    return valid(g, done, i, f);
}

static bool match_matmul_geglu(const ig_graph *g, const bool *done, int i, ig_fusion *f) {
    const ig_op *a = &g->ops[i];
    if (a->kind != IG_OP_MATMUL || a->dst == IG_BUF_LOGITS || a->dst == a->src) return false;
    const int j = next_use(g, done, i, a->dst);
    if (j < 0) return false;
    const ig_op *gl = &g->ops[j];
    if (gl->kind != IG_OP_GEGLU || gl->src == gl->dst || (gl->src != a->dst && gl->dst != a->dst)) return false;
    const ig_buf_id other = gl->dst == a->dst ? gl->src : gl->dst;
    int m = -1; /* the other projection: the last writer of its buffer before the GEGLU */
    for (int k = i + 1; k < j; k++)
        if (live(done, k) && (ig_op_io(&g->ops[k]).writes & ig_buf_bit(other))) m = k;
    if (m < 0 || next_use(g, done, m, other) != j) return false;
    const ig_op *b = &g->ops[m];
    if (b->kind != IG_OP_MATMUL || b->src != a->src || b->dst == b->src || b->on_outputs != a->on_outputs ||
        b->w->type != a->w->type || b->w->ne[0] != a->w->ne[0] || b->w->ne[1] != a->w->ne[1])
        return false;
    const int gate = gl->dst == a->dst ? i : m, up = gate == i ? m : i;
    if (gl->width != g->ops[gate].width) return false;
    *f = (ig_fusion){.kind = IG_FUSE_MATMUL_GEGLU, .n = 3, .op = {gate, up, j}, .dead = ig_buf_bit(gl->src)};
    return valid(g, done, i, f);
}

bool ig_fuse_match(const ig_graph *g, const bool *done, int i, ig_fusion_kind kind, ig_fusion *out) {
    if (!g || !out || i < 0 || i >= g->n_ops || !live(done, i)) return false;
    ig_fusion f = {0};
    bool ok = false;
    switch (kind) {
    case IG_FUSE_QKV: ok = match_qkv(g, done, i, &f); break;
    case IG_FUSE_NORM_ROPE_STORE: ok = match_norm_rope(g, done, i, true, &f); break;
    case IG_FUSE_NORM_ROPE: ok = match_norm_rope(g, done, i, false, &f); break;
    case IG_FUSE_ROPE_STORE: ok = match_rope_store(g, done, i, &f); break;
    case IG_FUSE_ADD_NORM_NORM: ok = match_add_norm_norm(g, done, i, &f); break;
    case IG_FUSE_MATMUL_GEGLU: ok = match_matmul_geglu(g, done, i, &f); break;
    case IG_FUSE_COUNT: break;
    }
    if (ok) *out = f;
    return ok;
}
