/* Support for `ignis bench`: probes of the machine's limits (memory read
 * bandwidth, f32 FMA peak) and the accounting of what a test must move and
 * compute (bytes and flops per token), so that a measured speed can be quoted
 * as a fraction of the physical limit (docs/benchmarking.md). */
#ifndef IG_BENCH_H
#define IG_BENCH_H

#include "core/util.h"

/* ---- Machine probes --------------------------------------------------- */

typedef struct ig_membw_result {
    double gbs;          /* best read bandwidth, 1e9 bytes/s */
    size_t buffer_bytes; /* size of the buffer read */
    int n_threads;
    int runs;
} ig_membw_result;

/* Multi-threaded read over a buffer of buffer_bytes (0 = 512 MiB, well beyond
 * the last-level cache of any CPU we run on) split among n_threads; the best of `runs` full
 * passes. */
ig_status ig_bench_membw(int n_threads, size_t buffer_bytes, int runs, ig_membw_result *out);

typedef struct ig_fma_result {
    double gflops;   /* best rate, 1e9 flops/s (an FMA counts as 2) */
    const char *isa; /* "avx512", "avx2", or "scalar" */
    int n_threads;
} ig_fma_result;

/* Every thread runs independent chains of f32 fused multiply-adds in
 * registers with the widest vectors the CPU has (AVX-512 and AVX2 are both
 * tried where present, the faster is kept); best of `runs` passes of about
 * 0.1 s each. */
ig_status ig_bench_fma_peak(int n_threads, int runs, ig_fma_result *out);

/* The CPU model name (/proc/cpuinfo "model name"), or "unknown". */
void ig_bench_cpu_name(char *out, size_t cap);

/* ---- What a model moves and computes ---------------------------------- */

typedef struct ig_bench_model_info {
    char type[32];         /* weight type label, e.g. "Q4_K_M", "Q8_0", "F16" */
    double n_params;       /* every tensor's elements (tied embedding once) */
    double layer_matrix_params; /* q, k, v, o, gate, up, down of all layers */
    double output_params;  /* output projection (n_vocab x H) */
    size_t weight_bytes;   /* ig_model_weight_bytes */
    size_t file_tensor_bytes; /* every tensor's bytes (what llama-bench calls size) */
} ig_bench_model_info;

void ig_bench_model_describe(const ig_model *m, ig_bench_model_info *out);

/* One step that appends n_new tokens to each of n_seq sequences that already
 * hold n_past positions; n_out of the new tokens need logits. */
typedef struct ig_bench_step {
    int n_seq;
    int n_past;
    int n_new;
    int n_out;
} ig_bench_step;

/* Bytes the step must read at least: every weight matrix once (the tied
 * embedding as the output projection) plus the KV cache rows attended
 * (sliding-window layers only see their window) plus the new K/V rows
 * written. */
double ig_bench_step_bytes(const ig_model *m, ig_kv_type kv, const ig_bench_step *s);
/* Flops of the step: 2 x layer matrix params per token, 2 x output params per
 * output, and attention 4 x keys seen x heads x head_dim per token per layer
 * (QK^T and PV, causal within the step). */
double ig_bench_step_flops(const ig_model *m, const ig_bench_step *s);

#endif
