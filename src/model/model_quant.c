/* In-memory quantization of a model's weights at load (ig_model_params.quant):
 * the tensor table's float matrices are replaced by blocks that
 * ig_quantize_row_ggml writes into one buffer the model owns, with the types
 * `ignis quantize --type T --pure` gives (ig_quant_plan), so the model
 * computes what the quantized file would. Rows are quantized in parallel
 * chunks on the load's threads. */
#include "model/model.h"

#include "engine/threadpool.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    ig_tensor *items;
    const ig_dtype *from, *to; /* per tensor: old and new type */
    const size_t *offset;      /* per tensor: where its blocks go in buf */
    const void **src;          /* per tensor: the old data */
    uint8_t *buf;
    size_t n;
    atomic_size_t next; /* next tensor to claim */
    size_t row_cap;     /* floats per worker row buffer */
    float *rows;        /* row_cap per worker */
} job;

static void quantize_tensor(const job *j, size_t i, float *row) {
    const ig_tensor *t = &j->items[i];
    const int64_t n = t->ne[0], rows = ig_tensor_nelements(t) / n;
    size_t in_rb = 0, out_rb = 0;
    ig_dtype_row_bytes(j->from[i], n, &in_rb);
    ig_dtype_row_bytes(j->to[i], n, &out_rb);
    const uint8_t *src = j->src[i];
    uint8_t *dst = j->buf + j->offset[i];
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)r * in_rb;
        if (j->from[i] == IG_TYPE_F32) memcpy(row, s, sizeof(float) * (size_t)n);
        else ig_dequantize_row(j->from[i], s, row, n);
        ig_quantize_row_ggml(j->to[i], row, dst + (size_t)r * out_rb, n);
    }
}

static void worker(void *arg, int ith, int nth) {
    (void)nth;
    job *j = arg;
    float *row = j->rows + (size_t)ith * j->row_cap;
    for (;;) {
        const size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n) break;
        if (j->to[i] != j->from[i]) quantize_tensor(j, i, row);
    }
}

ig_status ig_model_quantize_weights(ig_model *m) {
    static const struct {
        ig_weight_quant q;
        ig_dtype type;
        uint32_t mix; /* llama.cpp file type of the K mix, or 0 */
    } kinds[] = {
        {IG_WEIGHT_Q8_0, IG_TYPE_Q8_0, 0},
        {IG_WEIGHT_Q4_0, IG_TYPE_Q4_0, 0},
        {IG_WEIGHT_Q4_K, IG_TYPE_Q4_K, IG_FTYPE_Q4_K_M},
    };
    if (m->params.quant == IG_WEIGHT_AS_STORED) return IG_OK;
    int k = -1;
    for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
        if (kinds[i].q == m->params.quant) k = i;
    if (k < 0) return ig_fail(IG_ERR_INVALID_ARG, "unknown weight quantization %d", (int)m->params.quant);
    ig_tensor_table *tt = m->gguf ? &m->gguf->tensors : &m->hf->tensors;
    const size_t n = tt->count;
    ig_dtype *from = ig_calloc_array(n + 1, sizeof *from), *to = ig_calloc_array(n + 1, sizeof *to);
    size_t *offset = ig_calloc_array(n + 1, sizeof *offset);
    const void **src = ig_calloc_array(n + 1, sizeof *src);
    ig_status st = IG_OK;
    float *rows = NULL;
    ig_threadpool *pool = NULL;
    if (!from || !to || !offset || !src) {
        st = IG_ERR_NO_MEMORY;
        goto out;
    }
    char err[256];
    if (!ig_quant_plan(tt, m->hp.n_layer, kinds[k].type, kinds[k].mix, true, to, err, sizeof err)) {
        st = ig_fail(IG_ERR_UNSUPPORTED, "%s", err);
        goto out;
    }
    size_t total = 0;
    int64_t max_row = 1;
    for (size_t i = 0; i < n; i++) {
        const ig_tensor *t = &tt->items[i];
        from[i] = t->type;
        src[i] = t->data;
        if (t->n_dims < 2 || to[i] == from[i]) { /* norms: read as they are */
            to[i] = from[i];
            continue;
        }
        if (t->type != IG_TYPE_F32 && t->type != IG_TYPE_F16 && t->type != IG_TYPE_BF16) {
            st = ig_fail(IG_ERR_UNSUPPORTED, "--quant needs F32, F16 or BF16 weights; %s is %s", t->name,
                         ig_dtype_name(t->type));
            goto out;
        }
        size_t in_rb, out_rb;
        const int64_t rows_t = ig_tensor_nelements(t) / t->ne[0];
        if (!ig_dtype_row_bytes(from[i], t->ne[0], &in_rb) || !ig_dtype_row_bytes(to[i], t->ne[0], &out_rb) ||
            (uint64_t)in_rb * (uint64_t)rows_t > t->nbytes || (uint64_t)out_rb * (uint64_t)rows_t > SIZE_MAX - 64 - total) {
            st = ig_fail(IG_ERR_FORMAT, "%s: inconsistent size", t->name);
            goto out;
        }
        offset[i] = total;
        total = (total + out_rb * (size_t)rows_t + 63) & ~(size_t)63;
        if (t->ne[0] > max_row) max_row = t->ne[0];
    }
    if (max_row > ((int64_t)1 << 28)) {
        st = ig_fail(IG_ERR_UNSUPPORTED, "rows of %lld elements are too long", (long long)max_row);
        goto out;
    }
    m->quant_storage = ig_aligned_alloc(64, total ? total : 64);
    const int nth = m->params.n_threads > 0 ? m->params.n_threads : 1;
    rows = ig_calloc_array((size_t)nth * (size_t)max_row, sizeof *rows);
    if (!m->quant_storage || !rows) {
        st = IG_ERR_NO_MEMORY;
        goto out;
    }
    job j = {.items = tt->items, .from = from, .to = to, .offset = offset, .src = src,
             .buf = m->quant_storage, .n = n, .row_cap = (size_t)max_row, .rows = rows};
    atomic_init(&j.next, 0);
    if (nth > 1 && ig_threadpool_create(nth, &pool) == IG_OK) ig_threadpool_run(pool, worker, &j);
    else worker(&j, 0, 1);
    for (size_t i = 0; i < n; i++) {
        ig_tensor *t = &tt->items[i];
        if (to[i] == from[i]) continue;
        size_t out_rb = 0;
        ig_dtype_row_bytes(to[i], t->ne[0], &out_rb);
        t->type = to[i];
        t->data = m->quant_storage + offset[i];
        t->nbytes = out_rb * (size_t)(ig_tensor_nelements(t) / t->ne[0]);
    }
out:
    ig_threadpool_free(pool);
    free(rows);
    free(from);
    free(to);
    free(offset);
    free(src);
    return st;
}
