/* Per-device tuning of the Vulkan backend: the shapes and thresholds its
 * kernels use, in one struct, filled from one table of device classes.
 *
 * ig_vk_device_create() starts from the defaults (what suits a large
 * discrete GPU), applies every table entry whose match fits the device, in
 * table order, then the explicit overrides of its params. Overrides are
 * "name=value" pairs separated by commas, the names those of the fields
 * below (ig_vk_tuning_parse); tests and `ignis --debug-vk-tuning` use them.
 * The measurements behind the values are in docs/benchmarks/. */
#ifndef IG_VK_TUNING_H
#define IG_VK_TUNING_H

#include "backend/vulkan/vk_backend.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ig_vk_tuning {
    /* mat-vec (mv.comp): workgroup size, rows per group for one token and
       for several, invocations per row (for any number of tokens: it is
       the shape of each output's sum), most items per lane per loop pass
       (each matrix takes as few passes as this allows) for one token and
       for several */
    uint32_t mv_wg, mv_nr1, mv_nrn, mv_tpr, mv_unroll, mv_unrolln;
    /* several tokens: mv_nrn rows per group only on matrices of at least
       this many rows and elements per row, else one */
    uint64_t mv_nrn_min;
    /* batches up to which the int8 mat-vec runs (else the tiled kernel;
       matrices large enough for the tensor cores leave it earlier) */
    uint32_t mv_max_tokens;
    /* mat-vecs of long rows (100 n_in >= mv_long_pct n_out) and at least
       mv_long_rows rows take a row per workgroup of mv_long_tpr
       invocations, at most mv_long_unroll items per lane per pass; 0: off */
    uint32_t mv_long_tpr, mv_long_pct, mv_long_unroll, mv_long_rows;
    /* one-token q/k/v mat-vecs do the QK-norm, RoPE and cache store in
       their tails, q and k in row groups of this many rows; 0: off */
    uint32_t head_tail_nr;
    /* int8 activations for the mat-vec where the device has packed int8
       dot products */
    bool int8;
    /* norms and attention write the int8 copy of their output themselves
       (off: a quant_x8 dispatch makes it; the tests' reference) */
    bool x8_producers;
    /* the int8 copies quantized with subgroup shuffles where the device has
       them (off: through shared memory, the other form's test) */
    bool x8_shuffle;
    /* tensor cores where the device has them: the f16 matmul, the int8
       one, the prefill attention */
    bool coopmat, coopmat_int8, attn_coopmat;
    /* tensor-core matmul: workgroups from which it takes 128-token tiles;
       split K until it has this many workgroups (1: never); the register
       prefetch of mmcm.comp (bit 0 activations, bit 1 weights) */
    uint32_t cm_wide_groups, cm_split_groups, cm_pf;
    /* batches from which large quantized matrices take the tensor cores
       instead of the mat-vec: after the int8 mat-vec, after the f32 one
       (no int8 dot products), and for f16 types on KHR's fragments after
       the int8 mat-vec */
    uint32_t cm_min_tokens_int8, cm_min_tokens_f32, cm_min_tokens_f16;
    /* attention: workgroups to aim for when splitting keys into chunks;
       tokens from which a graph also holds the tiled prefill kernel; the
       average run of one sequence's rows from which a step runs it; the
       most outputs of a unit of heads that the split attention's last
       workgroup merges (larger: attn_reduce.comp; 0: always that) */
    uint32_t attn_wgs, attn_tile_min, attn_tile_run, attn_merge_max;
    uint32_t norm_wg; /* workgroup of the row norms */
    /* L2 prefetch of the weights ahead in graphs of up to
       prefetch_max_tokens: bytes next to each small op, bytes ahead
       (prefetch_stage 0: off) */
    uint64_t prefetch_stage, prefetch_ahead;
    uint32_t prefetch_max_tokens;
    /* batch invariance: a token's logits are the same bits whatever shares
       its step (alone, in a batch, in a prefill chunk). The matmuls take
       the mat-vec for every batch size and attention attn.comp for every
       step; off: batches of many tokens take the tiled and tensor-core
       kernels (faster prefill, other roundings) */
    bool invariant;
    /* the engine's graphs (vk_engine.c): fused ops (off: the plain op for
       every op, the tests' reference); most logits rows held on the device
       at once (0: as many as fit) */
    bool fuse;
    uint32_t head_cap;
    /* monitoring: a pair of GPU timestamps around each step for the busy
       time of /metrics (vk_monitor.c; off: no busy time) */
    bool busy_timestamps;
} ig_vk_tuning;

/* How a table entry matches a device: every set criterion must hold. */
typedef struct ig_vk_tuning_match {
    const char *type;        /* "discrete", "integrated", "cpu"...; NULL: any */
    uint32_t vendor_id;      /* PCI vendor; 0: any */
    uint32_t subgroup_size;  /* 0: any */
    uint64_t min_local_heap; /* largest device-local heap at least this; 0: any */
    uint32_t wg_below;       /* maxComputeWorkGroupInvocations below this; 0: any */
} ig_vk_tuning_match;

typedef struct ig_vk_tuning_entry {
    ig_vk_tuning_match match;
    const char *values; /* "name=value,..." */
    const char *reason;
} ig_vk_tuning_entry;

extern const ig_vk_tuning_entry ig_vk_tuning_table[];
extern const int ig_vk_tuning_table_len;

bool ig_vk_tuning_matches(const ig_vk_tuning_match *m, const ig_vk_device_info *info);
/* The defaults with every matching entry applied. */
ig_status ig_vk_tuning_for(const ig_vk_device_info *info, ig_vk_tuning *out);
/* Applies "name=value,..." to t (NULL or "": nothing). Unknown names, bad
 * numbers and values out of a field's range fail with IG_ERR_INVALID_ARG;
 * t may then be partly updated. */
ig_status ig_vk_tuning_parse(ig_vk_tuning *t, const char *spec);
/* Checks the shapes against the device's limits (after overrides). */
ig_status ig_vk_tuning_check(const ig_vk_tuning *t, const ig_vk_device_info *info);

#endif
