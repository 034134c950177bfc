/* The Vulkan backend's tuning table and its "name=value" overrides. */
#include "backend/vulkan/vk_tuning.h"

#include "core/util.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* What suits a large discrete GPU (tuned on the H100; the measurements are
 * in the records of docs/benchmarks/). */
static const ig_vk_tuning defaults = {
    /* one item per lane per pass; groups of 64 for one token and for
       several (one shape of sum: batch invariance); two rows per group for
       several tokens, on large matrices only (small ones lose with two) */
    .mv_wg = 128, .mv_nr1 = 1, .mv_nrn = 2, .mv_tpr = 64, .mv_unroll = 1, .mv_unrolln = 1,
    .mv_nrn_min = 3072,
    /* past 128 tokens the f32 tiled kernel is faster than the mat-vec */
    .mv_max_tokens = 128,
    /* long rows (12B and 27B's down projection): a row per workgroup makes
       more waves of shorter workgroups */
    .mv_long_tpr = 128, .mv_long_pct = 200, .mv_long_unroll = 4, .mv_long_rows = 3072,
    /* groups of two rows: fewer workgroups of a head count themselves in */
    .head_tail_nr = 2,
    .int8 = true,
    .x8_producers = true,
    .x8_shuffle = true,
    /* K-quant products of many tokens on f16 tensor cores: the int8 ones
       (mmq.comp) scale each sub-block's sums per token by its multiplier t,
       and lose to f16 at 512 tokens and at 32 streams */
    .coopmat = true, .coopmat_int8 = false, .attn_coopmat = true,
    /* wide tiles only while every compute unit still gets several
       workgroups; split K until the GPU is full; prefetch the weights
       only (the activations' registers cost workgroups per compute unit) */
    .cm_wide_groups = 128, .cm_split_groups = 1024, .cm_pf = 2,
    /* the mat-vec's cost grows with every column; the tensor cores' not */
    .cm_min_tokens_int8 = 9, .cm_min_tokens_f32 = 5, .cm_min_tokens_f16 = 8,
    /* one workgroup merging more than 512 outputs takes longer than the
       stage it saves */
    .attn_wgs = 512, .attn_tile_min = 32, .attn_tile_run = 16, .attn_merge_max = 512,
    /* few rows, latency-bound: wide workgroups */
    .norm_wg = 1024,
    .invariant = false,
    .fuse = true,
    .busy_timestamps = true,
};

#define NVIDIA 0x10DE

/* In order: later entries win where two set the same value. */
const ig_vk_tuning_entry ig_vk_tuning_table[] = {
    {{.wg_below = 1024}, "norm_wg=256",
     "the row norms' wide workgroup does not fit"},
    {{.type = "cpu"},
     "mv_wg=32,mv_nr1=4,mv_nrn=1,mv_tpr=32,mv_unroll=2,mv_unrolln=2,mv_long_tpr=0,head_tail_nr=4,norm_wg=128",
     "CPU devices (lavapipe) run a workgroup's subgroups one after the other: small groups, several rows each"},
    {{.type = "discrete", .vendor_id = NVIDIA, .min_local_heap = (64ull << 30) - (1ull << 30)},
     "prefetch_stage=4194304,prefetch_ahead=33554432,prefetch_max_tokens=1",
     "decode prefetches the weights into L2; 40 MiB or more of it holds what is read ahead"},
};
const int ig_vk_tuning_table_len = (int)(sizeof ig_vk_tuning_table / sizeof ig_vk_tuning_table[0]);

typedef struct field {
    const char *name;
    size_t offset, size; /* size 1: bool */
} field;

#define F(n) {#n, offsetof(ig_vk_tuning, n), sizeof(((ig_vk_tuning *)0)->n)}
static const field fields[] = {
    F(mv_wg), F(mv_nr1), F(mv_nrn), F(mv_tpr), F(mv_unroll), F(mv_unrolln), F(mv_nrn_min),
    F(mv_max_tokens), F(mv_long_tpr), F(mv_long_pct), F(mv_long_unroll), F(mv_long_rows), F(head_tail_nr),
    F(int8), F(x8_producers), F(x8_shuffle), F(coopmat), F(coopmat_int8), F(attn_coopmat), F(cm_wide_groups),
    F(cm_split_groups), F(cm_pf), F(cm_min_tokens_int8), F(cm_min_tokens_f32), F(cm_min_tokens_f16),
    F(attn_wgs), F(attn_tile_min), F(attn_tile_run), F(attn_merge_max), F(norm_wg), F(prefetch_stage),
    F(prefetch_ahead), F(prefetch_max_tokens), F(invariant), F(fuse), F(head_cap), F(busy_timestamps),
};
#undef F

bool ig_vk_tuning_matches(const ig_vk_tuning_match *m, const ig_vk_device_info *info) {
    if (m->type && (!info->type || strcmp(m->type, info->type) != 0)) return false;
    if (m->vendor_id && m->vendor_id != info->vendor_id) return false;
    if (m->subgroup_size && m->subgroup_size != info->subgroup_size) return false;
    if (m->wg_below && info->max_wg_invocations >= m->wg_below) return false;
    if (m->min_local_heap) {
        uint64_t local = 0;
        for (int h = 0; h < info->n_heaps && h < IG_VK_MAX_HEAPS; h++)
            if (info->heaps[h].device_local && info->heaps[h].size > local) local = info->heaps[h].size;
        if (local < m->min_local_heap) return false;
    }
    return true;
}

ig_status ig_vk_tuning_for(const ig_vk_device_info *info, ig_vk_tuning *out) {
    *out = defaults;
    for (int i = 0; i < ig_vk_tuning_table_len; i++)
        if (ig_vk_tuning_matches(&ig_vk_tuning_table[i].match, info))
            IG_TRY(ig_vk_tuning_parse(out, ig_vk_tuning_table[i].values));
    return IG_OK;
}

static ig_status set_field(ig_vk_tuning *t, const char *item, size_t len) {
    const char *eq = memchr(item, '=', len);
    if (!eq) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: '%.*s' is not name=value", (int)len, item);
    const size_t nlen = (size_t)(eq - item);
    const field *f = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strlen(fields[i].name) == nlen && memcmp(fields[i].name, item, nlen) == 0) f = &fields[i];
    if (!f) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: unknown name '%.*s'", (int)nlen, item);
    char num[32];
    const size_t vlen = len - nlen - 1;
    if (vlen == 0 || vlen >= sizeof num || strspn(eq + 1, "0123456789") < vlen)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: %s wants a number, got '%.*s'", f->name, (int)vlen,
                       eq + 1);
    memcpy(num, eq + 1, vlen);
    num[vlen] = '\0';
    errno = 0;
    const unsigned long long v = strtoull(num, NULL, 10);
    const unsigned long long max = f->size == 1 ? 1 : f->size == 4 ? UINT32_MAX : UINT64_MAX;
    if (errno || v > max) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: %s=%s is out of range", f->name, num);
    char *p = (char *)t + f->offset;
    if (f->size == 1) *(bool *)p = v != 0;
    else if (f->size == 4) *(uint32_t *)p = (uint32_t)v;
    else *(uint64_t *)p = (uint64_t)v;
    return IG_OK;
}

ig_status ig_vk_tuning_parse(ig_vk_tuning *t, const char *spec) {
    if (!spec) return IG_OK;
    while (*spec) {
        const size_t len = strcspn(spec, ",");
        if (len) IG_TRY(set_field(t, spec, len));
        spec += len;
        if (*spec == ',') spec++;
    }
    return IG_OK;
}

static bool group_width(uint32_t t) { return t == 32 || t == 64 || t == 128; }

ig_status ig_vk_tuning_check(const ig_vk_tuning *t, const ig_vk_device_info *info) {
    const bool mv_ok = t->mv_wg >= 32 && t->mv_wg <= 256 && t->mv_wg % 32 == 0 && t->mv_nr1 >= 1 &&
                       t->mv_nr1 <= 8 && t->mv_nrn >= 1 && t->mv_nrn <= 8 && group_width(t->mv_tpr) &&
                       t->mv_tpr <= t->mv_wg && t->mv_unroll >= 1 && t->mv_unroll <= 8 &&
                       t->mv_unrolln >= 1 && t->mv_unrolln <= 8;
    if (!mv_ok) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: bad mat-vec shape");
    const uint32_t lt = t->mv_long_tpr;
    if (!(lt == 0 || lt == 32 || lt == 64 || lt == 128 || lt == 256) || lt > info->max_wg_invocations ||
        t->mv_long_pct < 1 || t->mv_long_pct > 10000 || t->mv_long_unroll < 1 || t->mv_long_unroll > 8)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: bad long-row mat-vec shape");
    if (t->mv_max_tokens < 8 || t->mv_max_tokens > 256)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: mv_max_tokens must be in [8, 256]");
    if (t->head_tail_nr > 8) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: head_tail_nr above 8");
    if (t->norm_wg % 64 != 0 || t->norm_wg == 0 || t->norm_wg > 1024)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: norm_wg must be a multiple of 64 up to 1024");
    if (t->cm_pf > 3) return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: cm_pf must be in [0, 3]");
    if (!t->cm_wide_groups || !t->cm_split_groups || !t->attn_wgs || !t->attn_tile_min || !t->attn_tile_run ||
        !t->cm_min_tokens_int8 || !t->cm_min_tokens_f32 || !t->cm_min_tokens_f16)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: a count is 0");
    if (t->prefetch_stage > (1ull << 30) || t->prefetch_ahead > (4096ull << 20) ||
        (t->prefetch_stage && (t->prefetch_max_tokens < 1 || t->prefetch_max_tokens > 256)))
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan tuning: bad prefetch");
    return IG_OK;
}

