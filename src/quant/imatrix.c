/* Importance matrices: collection, the GGUF writer, and the readers of the
 * GGUF and legacy forms (see imatrix.h). */
#include "quant/imatrix.h"
#include "core/util.h"
#include "model/gguf.h"
#include "model/gguf_write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ig_imatrix *ig_imatrix_new(void) { return ig_calloc_array(1, sizeof(ig_imatrix)); }

void ig_imatrix_free(ig_imatrix *im) {
    if (!im) return;
    for (size_t i = 0; i < im->n_entries; i++) {
        free(im->entries[i].name);
        free(im->entries[i].sum2);
    }
    for (size_t i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->datasets);
    free(im->entries);
    free(im);
}

static char *dup_n(const char *s, size_t n) {
    char *d = ig_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

const ig_imatrix_entry *ig_imatrix_find(const ig_imatrix *im, const char *name) {
    for (size_t i = 0; i < im->n_entries; i++)
        if (!strcmp(im->entries[i].name, name)) return &im->entries[i];
    return NULL;
}

/* A new zeroed entry of n channels (name: len bytes) into *out. */
static ig_status new_entry(ig_imatrix *im, const char *name, size_t len, int64_t n, ig_imatrix_entry **out) {
    *out = NULL;
    if (n < 1 || n > ((int64_t)1 << 30))
        return ig_fail(IG_ERR_FORMAT, "imatrix entry %.*s: %lld channels", (int)len, name, (long long)n);
    if (im->n_entries == im->cap) {
        const size_t cap = im->cap ? im->cap * 2 : 64;
        ig_imatrix_entry *e = ig_calloc_array(cap, sizeof *e);
        if (!e) return IG_ERR_NO_MEMORY;
        if (im->n_entries) memcpy(e, im->entries, im->n_entries * sizeof *e);
        free(im->entries);
        im->entries = e;
        im->cap = cap;
    }
    ig_imatrix_entry *e = &im->entries[im->n_entries];
    e->name = dup_n(name, len);
    e->sum2 = ig_calloc_array((size_t)n, sizeof *e->sum2);
    if (!e->name || !e->sum2) {
        free(e->name);
        free(e->sum2);
        memset(e, 0, sizeof *e);
        return IG_ERR_NO_MEMORY;
    }
    e->n = n;
    e->count = 0;
    im->n_entries++;
    *out = e;
    return IG_OK;
}

ig_status ig_imatrix_add(ig_imatrix *im, const char *name, const float *x, int rows, int width) {
    ig_imatrix_entry *e = (ig_imatrix_entry *)ig_imatrix_find(im, name);
    if (!e) IG_TRY(new_entry(im, name, strlen(name), width, &e));
    if (e->n != width)
        return ig_fail(IG_ERR_INVALID_ARG, "imatrix %s: %d channels, had %lld", name, width, (long long)e->n);
    /* double sums: the order of the tokens does not matter to 1e-12 */
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * (size_t)width;
        for (int j = 0; j < width; j++) e->sum2[j] += (double)xr[j] * (double)xr[j];
    }
    e->count += rows;
    return IG_OK;
}

ig_status ig_imatrix_add_dataset(ig_imatrix *im, const char *name) {
    char **d = ig_calloc_array(im->n_datasets + 1, sizeof *d);
    if (!d) return IG_ERR_NO_MEMORY;
    if (!(d[im->n_datasets] = dup_n(name, strlen(name)))) {
        free(d);
        return IG_ERR_NO_MEMORY;
    }
    if (im->n_datasets) memcpy(d, im->datasets, im->n_datasets * sizeof *d);
    free(im->datasets);
    im->datasets = d;
    im->n_datasets++;
    return IG_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ig_imatrix_entry *)a)->name, ((const ig_imatrix_entry *)b)->name);
}

ig_status ig_imatrix_write(ig_imatrix *im, FILE *fp) {
    if (im->n_entries == 0) return ig_fail(IG_ERR_INVALID_ARG, "the imatrix has no entries");
    for (size_t i = 0; i < im->n_entries; i++)
        for (int64_t j = 0; j < im->entries[i].n; j++)
            if (!isfinite((float)im->entries[i].sum2[j]))
                return ig_fail(IG_ERR_INVALID_ARG, "imatrix %s: non-finite value", im->entries[i].name);
    qsort(im->entries, im->n_entries, sizeof *im->entries, cmp_entry);
    gguf_writer *w = NULL;
    float *buf = NULL;
    gguf_str *ds = ig_calloc_array(im->n_datasets + 1, sizeof *ds);
    ig_status st = ds ? gguf_writer_create(0, &w) : IG_ERR_NO_MEMORY;
    for (size_t i = 0; i < im->n_datasets; i++) ds[i] = (gguf_str){im->datasets[i], strlen(im->datasets[i])};
    if (st == IG_OK) st = gguf_writer_add_str(w, "general.type", "imatrix");
    if (st == IG_OK) st = gguf_writer_add_arr_str(w, "imatrix.datasets", ds, im->n_datasets);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "imatrix.chunk_count", im->chunk_count);
    if (st == IG_OK) st = gguf_writer_add_u32(w, "imatrix.chunk_size", im->chunk_size);
    int64_t max_n = 1;
    for (size_t i = 0; i < im->n_entries && st == IG_OK; i++) {
        const ig_imatrix_entry *e = &im->entries[i];
        char name[GGUF_WRITER_MAX_NAME + 2];
        const int64_t one = 1;
        if (snprintf(name, sizeof name, "%s.in_sum2", e->name) > GGUF_WRITER_MAX_NAME) {
            st = ig_fail(IG_ERR_INVALID_ARG, "imatrix: the name %s is too long", e->name);
            break;
        }
        st = gguf_writer_add_tensor(w, name, 1, &e->n, IG_TYPE_F32);
        snprintf(name, sizeof name, "%s.counts", e->name);
        if (st == IG_OK) st = gguf_writer_add_tensor(w, name, 1, &one, IG_TYPE_F32);
        if (e->n > max_n) max_n = e->n;
    }
    if (st == IG_OK && !(buf = ig_calloc_array((size_t)max_n, sizeof *buf))) st = IG_ERR_NO_MEMORY;
    if (st == IG_OK) st = gguf_writer_begin(w, fp);
    for (size_t i = 0; i < im->n_entries && st == IG_OK; i++) {
        const ig_imatrix_entry *e = &im->entries[i];
        for (int64_t j = 0; j < e->n; j++) buf[j] = (float)e->sum2[j];
        st = gguf_writer_write(w, buf, sizeof *buf * (size_t)e->n);
        const float c = (float)e->count;
        if (st == IG_OK) st = gguf_writer_write(w, &c, sizeof c);
    }
    if (st == IG_OK) st = gguf_writer_finish(w);
    gguf_writer_free(w);
    free(buf);
    free(ds);
    return st;
}

/* ---- reading ------------------------------------------------------------- */

static bool ends_with(const char *s, size_t n, const char *suffix, size_t *stem) {
    const size_t m = strlen(suffix);
    if (n <= m || memcmp(s + n - m, suffix, m) != 0) return false;
    *stem = n - m;
    return true;
}

static ig_status load_gguf(const char *path, ig_imatrix *im) {
    gguf_file *g = NULL;
    ig_status st = gguf_open(path, &g);
    if (st != IG_OK) return st;
    const gguf_kv *kv = gguf_find(g, "imatrix.datasets");
    uint32_t v;
    if (!kv || !gguf_get_u32(g, "imatrix.chunk_count", &im->chunk_count) ||
        !gguf_get_u32(g, "imatrix.chunk_size", &v)) {
        gguf_close(g);
        return ig_fail(IG_ERR_FORMAT, "%s: no imatrix metadata (imatrix.datasets, chunk_count, chunk_size)", path);
    }
    im->chunk_size = v;
    if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < kv->arr_count && st == IG_OK; i++) {
            char *s = dup_n(kv->arr_strs[i].ptr, kv->arr_strs[i].len);
            st = s ? ig_imatrix_add_dataset(im, s) : IG_ERR_NO_MEMORY;
            free(s);
        }
    const ig_tensor_table *tt = &g->tensors;
    if (tt->count > ((size_t)1 << 16)) st = ig_fail(IG_ERR_FORMAT, "%s: %zu tensors", path, tt->count);
    /* every W.in_sum2 with its W.counts */
    for (size_t i = 0; i < tt->count && st == IG_OK; i++) {
        const ig_tensor *t = &tt->items[i];
        size_t stem;
        if (!ends_with(t->name, strlen(t->name), ".in_sum2", &stem)) continue;
        const ig_tensor *c = NULL;
        for (size_t k = 0; k < tt->count && !c; k++) {
            size_t cs;
            const ig_tensor *u = &tt->items[k];
            if (ends_with(u->name, strlen(u->name), ".counts", &cs) && cs == stem && !memcmp(u->name, t->name, stem))
                c = u;
        }
        if (!c) {
            st = ig_fail(IG_ERR_FORMAT, "%s: %s has no counts", path, t->name);
            break;
        }
        if (t->type != IG_TYPE_F32 || c->type != IG_TYPE_F32) {
            st = ig_fail(IG_ERR_FORMAT, "%s: %s: sums and counts must be F32", path, t->name);
            break;
        }
        const int64_t nval = ig_tensor_nelements(t), ncounts = ig_tensor_nelements(c);
        if (ncounts != 1) {
            st = ig_fail(IG_ERR_UNSUPPORTED, "%s: %.*s has per-expert statistics (%lld matrices)", path,
                         (int)stem, t->name, (long long)ncounts);
            break;
        }
        if ((uint64_t)nval * sizeof(float) > t->nbytes || c->nbytes < sizeof(float)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: %s: truncated", path, t->name);
            break;
        }
        ig_imatrix_entry *e;
        if ((st = new_entry(im, t->name, stem, nval, &e)) != IG_OK) break;
        for (int64_t j = 0; j < nval; j++) {
            float f;
            memcpy(&f, (const char *)t->data + 4 * j, 4);
            e->sum2[j] = f;
        }
        float f;
        memcpy(&f, c->data, 4);
        if (!(f >= 0.0f && f < 9.2e18f)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: %s: bad count", path, c->name);
            break;
        }
        e->count = lroundf(f);
    }
    if (st == IG_OK && im->n_entries == 0) st = ig_fail(IG_ERR_FORMAT, "%s: no imatrix entries", path);
    gguf_close(g);
    return st;
}

static bool rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static ig_status load_legacy(const char *path, ig_imatrix *im) {
    FILE *f = fopen(path, "rb");
    if (!f) return ig_fail(IG_ERR_IO, "cannot open %s", path);
    ig_status st = IG_OK;
    int32_t n_entries;
    float *tmp = NULL;
    char *name = NULL;
    if (!rd(f, &n_entries, 4) || n_entries < 1 || n_entries > (1 << 20)) {
        st = ig_fail(IG_ERR_FORMAT, "%s: neither a GGUF nor a legacy imatrix file", path);
        goto done;
    }
    im->legacy = true;
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!rd(f, &len, 4) || len < 1 || len > 4096 || !(name = ig_malloc((size_t)len + 1)) ||
            !rd(f, name, (size_t)len) || !rd(f, &ncall, 4) || !rd(f, &nval, 4) || nval < 1 || nval > (1 << 30)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: entry %d is truncated or malformed", path, (int)i);
            goto done;
        }
        name[len] = '\0';
        if (strlen(name) != (size_t)len || ig_imatrix_find(im, name)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: entry %d: bad or repeated name", path, (int)i);
            goto done;
        }
        ig_imatrix_entry *e;
        st = new_entry(im, name, (size_t)len, nval, &e);
        free(name);
        name = NULL;
        if (st != IG_OK) goto done;
        if (!(tmp = ig_calloc_array((size_t)nval, sizeof *tmp))) {
            st = IG_ERR_NO_MEMORY;
            goto done;
        }
        if (!rd(f, tmp, sizeof *tmp * (size_t)nval)) {
            st = ig_fail(IG_ERR_FORMAT, "%s: entry %d is truncated", path, (int)i);
            goto done;
        }
        for (int32_t j = 0; j < nval; j++) e->sum2[j] = tmp[j];
        free(tmp);
        tmp = NULL;
        e->count = ncall;
    }
    /* optional trailer: chunk count, dataset name */
    int32_t n_calls, len;
    if (rd(f, &n_calls, 4)) {
        im->chunk_count = n_calls > 0 ? (uint32_t)n_calls : 0;
        if (rd(f, &len, 4) && len > 0 && len <= 65536 && (name = ig_malloc((size_t)len + 1)) &&
            rd(f, name, (size_t)len)) {
            name[len] = '\0';
            st = ig_imatrix_add_dataset(im, name);
        }
    }
done:
    free(name);
    free(tmp);
    fclose(f);
    return st;
}

ig_status ig_imatrix_load(const char *path, ig_imatrix **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ig_fail(IG_ERR_IO, "cannot open %s", path);
    char magic[4] = {0};
    const bool is_gguf = rd(f, magic, 4) && !memcmp(magic, "GGUF", 4);
    fclose(f);
    ig_imatrix *im = ig_imatrix_new();
    if (!im) return IG_ERR_NO_MEMORY;
    ig_status st = is_gguf ? load_gguf(path, im) : load_legacy(path, im);
    if (st != IG_OK) {
        ig_imatrix_free(im);
        return st;
    }
    *out = im;
    return IG_OK;
}

void ig_imatrix_weights(const ig_imatrix *im, const ig_imatrix_entry *e, float *out) {
    for (int64_t j = 0; j < e->n; j++) {
        const float v = (float)e->sum2[j];
        out[j] = e->count > 0 ? v / (float)e->count : im->legacy ? v : 1.0f;
    }
}
