/* The CPU backend: activation buffers allocated once per context, and a
 * forward pass executed as one thread-pool run with a barrier between steps.
 *
 * The op list is replayed as a plan of steps (about 10 barriers per layer
 * instead of one per op):
 *  - a run of row-local ops (norms, RoPE, KV store, GEGLU, ...), each thread
 *    doing its own rows of all of them;
 *  - such a run followed by consecutive matmuls that read the same input
 *    (Q, K, V; gate, up): the input is quantized by the thread that produced
 *    each row, then one barrier, then one shared dot phase;
 *  - attention. */
#include "backend/cpu/cpu_ops.h"

#include <stdlib.h>

typedef struct cpu_step {
    int pre, n_pre; /* row-local ops run before the matmuls (matmul steps) */
    int op, n;      /* the step's ops: matmuls, row-local ops, or one other op */
    bool matmul;
} cpu_step;

typedef struct cpu_backend {
    const ig_graph *graph;
    ig_kv_cache *kv;
    ig_threadpool *pool;
    float *buf[IG_BUF_COUNT];
    ig_cpu_scratch *scratch;
    int n_threads;
    const ig_mm_isa *isa;
    uint8_t *act;
    cpu_step *steps;
    int n_steps;
    atomic_int *next; /* [n_steps] chunk counters of the dot phases */
    void (*observer)(void *user, const char *weight, const float *x, int rows, int width);
    void *observer_user;
} cpu_backend;

typedef struct run_arg {
    ig_cpu_exec ex;
    const cpu_backend *cb;
} run_arg;

/* After a matmul step: hands the matmuls' inputs (intact until the next
 * step writes them) to the observer on thread 0, then holds every thread
 * until it is done. */
static void observe(const cpu_backend *cb, const ig_cpu_exec *ex, const ig_op *ops, int n, int ith) {
    if (ith == 0)
        for (int i = 0; i < n; i++) {
            const int rows = ops[i].on_outputs ? ex->step->n_out : ex->step->n_tokens;
            cb->observer(cb->observer_user, ops[i].w->name, ex->buf[ops[i].src], rows, (int)ops[i].w->ne[0]);
        }
    ig_threadpool_barrier(ex->pool);
}

static void run_graph(void *arg, int ith, int nth) {
    const run_arg *ra = arg;
    const ig_cpu_exec *ex = &ra->ex;
    const ig_graph *g = ra->cb->graph;
    for (int s = 0; s < ra->cb->n_steps; s++) {
        const cpu_step *st = &ra->cb->steps[s];
        if (st->matmul)
            ig_cpu_matmuls(ex, &g->ops[st->pre], st->n_pre, &g->ops[st->op], st->n, &ra->cb->next[s], ith, nth);
        else ig_cpu_ops(ex, &g->ops[st->op], st->n, &ra->cb->next[s], ith, nth);
        ig_threadpool_barrier(ex->pool);
        if (st->matmul && ra->cb->observer) observe(ra->cb, ex, &g->ops[st->op], st->n, ith);
    }
}

static ig_status cpu_compute(ig_backend *be, const ig_step *step, float *logits, const float **rows) {
    cpu_backend *cb = be->impl;
    run_arg ra = {.ex = {.kv = cb->kv, .pool = cb->pool, .step = step, .scratch = cb->scratch, .isa = cb->isa,
                         .act = cb->act},
                  .cb = cb};
    for (int i = 0; i < IG_BUF_COUNT; i++) ra.ex.buf[i] = cb->buf[i];
    ra.ex.buf[IG_BUF_LOGITS] = logits;
    for (int s = 0; s < cb->n_steps; s++) atomic_store_explicit(&cb->next[s], 0, memory_order_relaxed);
    ig_threadpool_run(cb->pool, run_graph, &ra);
    *rows = logits;
    return IG_OK;
}

static void cpu_destroy(ig_backend *be) {
    if (!be) return;
    cpu_backend *cb = be->impl;
    if (cb) {
        for (int i = 0; i < IG_BUF_COUNT; i++) ig_aligned_free(cb->buf[i]);
        if (cb->scratch)
            for (int i = 0; i < cb->n_threads; i++) {
                ig_aligned_free(cb->scratch[i].f);
                ig_aligned_free(cb->scratch[i].mm);
                ig_aligned_free(cb->scratch[i].tmp);
            }
        free(cb->scratch);
        ig_aligned_free(cb->act);
        free(cb->steps);
        free(cb->next);
        free(cb);
    }
    free(be);
}

static const ig_backend_ops cpu_ops = {
    .name = "cpu",
    .compute = cpu_compute,
    .destroy = cpu_destroy,
};

static bool joins(const ig_op *prev, const ig_op *op) {
    return op->kind == IG_OP_MATMUL && prev->kind == IG_OP_MATMUL && op->src == prev->src &&
           op->on_outputs == prev->on_outputs && op->w->ne[0] == prev->w->ne[0] &&
           ig_mm_act_kind(op->w->type) == ig_mm_act_kind(prev->w->type) &&
           (ig_mm_act_kind(op->w->type) != IG_ACT_F32 || op->w->type == prev->w->type) &&
           /* one layout of the activations for the whole step */
           (op->w->type == IG_TYPE_Q5_1) == (prev->w->type == IG_TYPE_Q5_1) &&
           !(ig_op_io(prev).writes & ig_op_io(op).reads);
}

/* Groups the ops into steps and sizes the matmul buffers. */
static ig_status plan(cpu_backend *cb, int nb, size_t *act_bytes, size_t *mm_bytes, size_t *tmp_bytes) {
    const ig_graph *g = cb->graph;
    cb->steps = ig_calloc_array((size_t)g->n_ops + 1, sizeof *cb->steps);
    cb->next = ig_calloc_array((size_t)g->n_ops + 1, sizeof *cb->next);
    if (!cb->steps || !cb->next) return IG_ERR_NO_MEMORY;
    *act_bytes = *mm_bytes = *tmp_bytes = 64;
    for (int i = 0; i < g->n_ops; i++) {
        const ig_op *op = &g->ops[i];
        if (op->kind != IG_OP_MATMUL) continue;
        if (!ig_mm_type_supported(op->w->type))
            return ig_fail(IG_ERR_UNSUPPORTED, "cpu matmul: weight type %s", ig_dtype_name(op->w->type));
        const ig_act_kind kind = ig_mm_act_kind(op->w->type);
        const int64_t k = op->w->ne[0];
        const size_t a = ig_mm_act_bytes(kind, k, nb, false), b = ig_mm_act_bytes(kind, k, nb, true);
        *act_bytes = IG_MAX(*act_bytes, IG_MAX(a, b));
        *mm_bytes = IG_MAX(*mm_bytes, ig_mm_scratch_bytes(cb->isa, op->w->type, k));
        *tmp_bytes = IG_MAX(*tmp_bytes, ig_mm_row_stride(kind, k));
    }
    for (int i = 0; i < g->n_ops;) {
        const ig_op *op = &g->ops[i];
        cpu_step st = {.op = i, .n = 1};
        if (ig_cpu_op_row_local(op)) {
            /* A gather reads other rows than it writes: it cannot join a
             * run that produces its input. */
            uint32_t written = ig_op_io(op).writes;
            int j = i + 1;
            while (j < g->n_ops && ig_cpu_op_row_local(&g->ops[j]) && g->ops[j].on_outputs == op->on_outputs &&
                   !(g->ops[j].kind == IG_OP_GATHER && (ig_op_io(&g->ops[j]).reads & written)))
                written |= ig_op_io(&g->ops[j++]).writes;
            if (j < g->n_ops && g->ops[j].kind == IG_OP_MATMUL && g->ops[j].on_outputs == op->on_outputs) {
                st = (cpu_step){.pre = i, .n_pre = j - i, .op = j, .n = 1, .matmul = true};
            } else {
                st.n = j - i;
            }
        } else if (op->kind == IG_OP_MATMUL) {
            st.matmul = true;
        }
        if (st.matmul)
            while (st.n < 4 && st.op + st.n < g->n_ops && joins(&g->ops[st.op + st.n - 1], &g->ops[st.op + st.n]))
                st.n++;
        cb->steps[cb->n_steps++] = st;
        i = st.op + st.n;
    }
    return IG_OK;
}

static ig_status cpu_backend_create(ig_device *dev, const ig_backend_desc *desc, ig_backend **out) {
    (void)dev;
    *out = NULL;
    if (!desc->kv || !desc->graph || !desc->pool || desc->n_batch < 1)
        return ig_fail(IG_ERR_INVALID_ARG, "cpu backend: incomplete descriptor");
    ig_backend *be = ig_calloc_array(1, sizeof *be);
    cpu_backend *cb = ig_calloc_array(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return IG_ERR_NO_MEMORY;
    }
    be->ops = &cpu_ops;
    be->impl = cb;
    cb->isa = ig_mm_isa_select();
    cb->graph = desc->graph;
    cb->kv = desc->kv;
    cb->pool = desc->pool;
    cb->observer = desc->matmul_observer;
    cb->observer_user = desc->matmul_observer_user;
    const ig_graph *g = desc->graph;
    const ig_kv_cache *kv = desc->kv;
    for (int i = 0; i < IG_BUF_COUNT; i++) {
        if (i == IG_BUF_LOGITS) continue; /* owned by the context */
        size_t elems;
        if (!ig_size_mul((size_t)desc->n_batch, (size_t)g->buf_width[i], &elems) ||
            !ig_size_mul(elems, sizeof(float), &elems)) {
            cpu_destroy(be);
            return ig_fail(IG_ERR_NO_MEMORY, "activation buffer size overflows");
        }
        cb->buf[i] = ig_aligned_alloc(64, elems);
        if (!cb->buf[i]) {
            cpu_destroy(be);
            return IG_ERR_NO_MEMORY;
        }
    }
    size_t act_bytes, mm_bytes, tmp_bytes;
    ig_status st = plan(cb, desc->n_batch, &act_bytes, &mm_bytes, &tmp_bytes);
    if (st != IG_OK) {
        cpu_destroy(be);
        return st;
    }
    cb->act = ig_aligned_alloc(64, ig_mm_align64(act_bytes));
    if (!cb->act) {
        cpu_destroy(be);
        return IG_ERR_NO_MEMORY;
    }
    /* Scratch: a row of attention scores, or of any op's temporaries (a
     * row of a buffer; RoPE: three half-heads). */
    size_t widest = (size_t)kv->n_ctx;
    for (int i = 0; i < IG_BUF_COUNT; i++)
        if (i != IG_BUF_LOGITS) widest = IG_MAX(widest, (size_t)g->buf_width[i]);
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == IG_OP_ROPE && g->ops[i].n_heads > 0)
            widest = IG_MAX(widest, (size_t)(3 * (g->ops[i].width / g->ops[i].n_heads) / 2 + 1));
    widest = IG_MAX(widest, (size_t)kv->head_dim * 2);
    widest = IG_MAX(widest, ig_attn_scratch_floats(kv->head_dim, kv->head_dim_v));
    cb->n_threads = ig_threadpool_size(desc->pool);
    cb->scratch = ig_calloc_array((size_t)cb->n_threads, sizeof *cb->scratch);
    if (!cb->scratch) {
        cpu_destroy(be);
        return IG_ERR_NO_MEMORY;
    }
    for (int i = 0; i < cb->n_threads; i++) {
        cb->scratch[i].n = widest;
        cb->scratch[i].f = ig_aligned_alloc(64, widest * sizeof(float));
        cb->scratch[i].mm = ig_aligned_alloc(64, ig_mm_align64(mm_bytes));
        cb->scratch[i].tmp = ig_aligned_alloc(64, ig_mm_align64(tmp_bytes));
        if (!cb->scratch[i].f || !cb->scratch[i].mm || !cb->scratch[i].tmp) {
            cpu_destroy(be);
            return IG_ERR_NO_MEMORY;
        }
    }
    *out = be;
    return IG_OK;
}

static void cpu_device_free(ig_device *dev) { free(dev); }

/* every kernel of every ISA (docs/benchmarks/2026-11-28-cpu-invariance.md) */
static bool cpu_batch_invariant(const ig_device *dev) {
    (void)dev;
    return true;
}

static const ig_device_ops cpu_device_ops = {
    .name = "cpu",
    .host_kv = true,
    .backend_create = cpu_backend_create,
    .free = cpu_device_free,
    .batch_invariant = cpu_batch_invariant,
};

ig_status ig_device_cpu_create(ig_device **out) {
    ig_device *dev = ig_calloc_array(1, sizeof *dev);
    if (!dev) return IG_ERR_NO_MEMORY;
    dev->ops = &cpu_device_ops;
    *out = dev;
    return IG_OK;
}
