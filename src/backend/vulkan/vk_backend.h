/* Vulkan compute backend: devices, device memory, and a recorded list of
 * compute ops ("graph") that is replayed with one submit per step.
 *
 * Available when the build defines IGNIS_HAVE_VULKAN (Vulkan headers and a
 * GLSL compiler were found). The loader is opened at run time, so every call
 * fails cleanly (IG_ERR_UNSUPPORTED / IG_ERR_BACKEND, with ig_last_error())
 * on a machine without Vulkan or without a usable device.
 *
 * Model of use
 *  1. ig_vk_device_create() picks a device (an index from ig_vk_list_devices,
 *     or automatic), opens a compute queue.
 *  2. Weights: ig_vk_weight_create() + ig_vk_buffer_write() once; they never
 *     move. Rows are split over several bindings when a tensor is larger than
 *     maxStorageBufferRange (or maxMemoryAllocationSize). Activations and the
 *     KV cache: ig_vk_buffer_create(). On UMA devices (integrated GPUs,
 *     lavapipe) device memory is host-visible and written directly; on
 *     discrete GPUs writes go through a staging buffer.
 *  3. Per-step values (token ids, positions, sequences, output rows) live in
 *     an ig_vk_step; ops never capture them.
 *  4. ig_vk_graph_begin() starts recording for at most max_tokens rows (a
 *     batch-size bucket); ig_vk_op_*() append dispatches (barriers are added
 *     only where an op touches memory an earlier op wrote, or writes memory
 *     it read); ig_vk_graph_end() closes it. Then, every step:
 *     ig_vk_step_set(); ig_vk_graph_run() (or submit ... wait). Shaders read
 *     the actual row counts from the step, so one recording serves every
 *     n_tokens <= max_tokens.
 *
 * Views and layouts: activations are f32, row-major; a view is a buffer, a
 * byte offset (a multiple of 4) and a row stride in elements. Row r of an op
 * is a token of the step (IG_VK_ROWS_TOKENS) or one of its outputs
 * (IG_VK_ROWS_OUTPUTS, rows 0..n_out-1).
 *
 * Threads: a device may be used from one thread at a time. */
#ifndef IG_VK_BACKEND_H
#define IG_VK_BACKEND_H

#include "ignis.h"
#include "quant/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Devices ---------------------------------------------------------- */

#define IG_VK_MAX_HEAPS 16

typedef struct ig_vk_device_info {
    int index;                /* position in the loader's device list */
    char name[256];
    const char *type;         /* "discrete", "integrated", "virtual", "cpu", "other" */
    uint32_t vendor_id, device_id;
    uint32_t api_version;     /* VK_MAKE_API_VERSION packed */
    char driver[256];         /* driver name and info, when known */
    bool uma;                 /* device memory is host-visible (no staging copies) */
    int n_heaps;
    struct {
        uint64_t size;
        bool device_local;
        bool host_visible;    /* some memory type of this heap is host-visible */
    } heaps[IG_VK_MAX_HEAPS];
    uint32_t subgroup_size, subgroup_min, subgroup_max;
    bool subgroup_arith;      /* arithmetic subgroup ops in compute shaders */
    bool subgroup_shuffle;    /* and shuffles */
    bool subgroup_size_control; /* compute pipelines can require a subgroup size (property and feature) */
    bool subgroup_size_control_ext; /* ... through VK_EXT_subgroup_size_control (before 1.3) */
    bool vulkan_memory_model;       /* vulkanMemoryModel (the cooperative-matrix shaders' memory model) */
    bool vulkan_memory_model_ext;   /* ... through VK_KHR_vulkan_memory_model (before 1.2) */
    uint64_t max_storage_buffer_range;
    uint64_t max_memory_allocation_size;
    uint64_t max_buffer_size; /* maintenance4, else = max_memory_allocation_size */
    uint32_t min_storage_offset_align;
    uint32_t max_push_constants, max_shared_memory, max_wg_invocations;
    uint32_t max_wg_count[3];
    bool storage16, storage8; /* 16/8-bit storage buffer access */
    bool fp16, int8;          /* shaderFloat16 / shaderInt8 */
    bool int_dot, int_dot_accel; /* integer dot product; 4x8 packed signed accelerated */
    bool int_dot_ext;         /* it needs VK_KHR_shader_integer_dot_product (before 1.3) */
    bool coopmat_khr, coopmat_nv;  /* device extensions */
    char coopmat_shapes[256];      /* e.g. "f16 16x16x16->f32, ..." (KHR, else NV) */
    bool coopmat_nv_16x8x16;       /* NV: f16 16x8x16 -> f32 in subgroup scope */
    bool coopmat_nv_s8_16x8x32;    /* NV: s8 16x8x32 -> s32 in subgroup scope */
    bool coopmat_khr_16x16x16;     /* KHR: f16 16x16x16 -> f32 in subgroup scope */
    bool coopmat_khr_s8_16x16x32;  /* KHR: s8 16x16x32 -> s32 in subgroup scope */
    bool usable;                   /* meets the backend's requirements */
    char why_not[160];             /* when !usable */
} ig_vk_device_info;

/* Lists every physical device (*out malloc'ed, free() it; *n may be 0).
 * Fails with IG_ERR_UNSUPPORTED when there is no Vulkan loader. */
ig_status ig_vk_list_devices(ig_vk_device_info **out, int *n);

/* Whether the GLSL compiler used at build time can build cooperative-matrix
 * shaders (KHR / NV v1). */
bool ig_vk_compiler_coopmat_khr(void);
bool ig_vk_compiler_coopmat_nv(void);
/* ... and packed int8 dot products (the int8 mat-vec and matmul) */
bool ig_vk_compiler_int_dot(void);

typedef struct ig_vk_device ig_vk_device;

typedef enum ig_vk_coopmat_ext {
    IG_VK_COOPMAT_AUTO = 0, /* the f16 matmul on KHR's where there, NV's for the rest */
    IG_VK_COOPMAT_NV,       /* NV's only */
    IG_VK_COOPMAT_KHR,      /* KHR's only (no int8 matmul, no prefill attention on them) */
} ig_vk_coopmat_ext;

typedef struct ig_vk_device_params {
    int index;                  /* device index; -1 = automatic ($IGNIS_VK_DEVICE
                                   in the environment, else the first usable
                                   discrete, integrated, virtual, cpu device) */
    uint64_t weight_part_bytes; /* 0 = the binding limit; smaller splits
                                   weights into more parts (tests) */
    bool force_staging;         /* treat device memory as not host-visible,
                                   as on a discrete GPU (tests) */
    ig_vk_coopmat_ext coopmat_ext; /* which cooperative-matrix extensions to
                                      use: both where there (AUTO), or one
                                      (tests) */
    /* Explicit overrides of the device's tuning (vk_tuning.h), applied
       after its table (and the process-wide overrides): */
    bool no_coopmat;            /* never use cooperative matrices */
    bool no_int8;               /* never quantize activations to int8 for the mat-vec */
    bool no_coopmat_int8;       /* never use int8 cooperative matrices */
    bool no_attn_coopmat;       /* prefill attention without cooperative matrices */
    uint32_t coopmat_wide_groups; /* workgroups from which the tensor-core
                                     matmul takes 128-token tiles; 0 = the
                                     table's (tests use 1) */
    uint32_t coopmat_split_groups; /* the tensor-core matmul splits K until it
                                      has this many workgroups; 0 = the
                                      table's; 1 = never */
    uint32_t attn_tile_min; /* tokens from which a graph's attention also
                               holds the tiled prefill kernel (f16 caches);
                               0 = the table's (tests: 1) */
    uint32_t attn_tile_run; /* steps whose rows come in runs of one sequence
                               this long on average run it; 0 = the table's
                               (tests: 1, always) */
    uint32_t attn_merge_max; /* the split attention's chunks are merged by
                                the last workgroup of each unit of heads
                                when the unit has at most this many outputs,
                                else by a dispatch of their own
                                (attn_reduce.comp); 0 = the table's */
    bool no_head_tails;      /* one-token q/k/v without the norm, RoPE and
                                cache store in their tails (ig_vk_qkv_tail_ok
                                says no) */
    const char *tuning;      /* "name=value,..." (vk_tuning.h), applied last;
                                NULL = none */
} ig_vk_device_params;

ig_vk_device_params ig_vk_device_default_params(void);
ig_status ig_vk_device_create(const ig_vk_device_params *params, ig_vk_device **out);
void ig_vk_device_free(ig_vk_device *dev);
const ig_vk_device_info *ig_vk_device_get_info(const ig_vk_device *dev);
/* Bytes allocated from the device, by kind of memory. */
uint64_t ig_vk_device_allocated(const ig_vk_device *dev);
/* Memory and busy time of a device, for monitoring (vk_monitor.c); safe to
 * call from any thread while another one uses the device. */
typedef struct ig_vk_device_stats {
    uint64_t allocated;  /* bytes this device object allocated */
    uint64_t used;       /* device-local heaps summed: VK_EXT_memory_budget's usage (every
                            process), else allocated */
    uint64_t budget;     /* ... its budget for this process, else the heaps' size */
    bool memory_budget;  /* used and budget come from VK_EXT_memory_budget */
    bool timestamps;     /* busy_ns is measured */
    uint64_t busy_ns;    /* GPU time of the graphs run on it (a timestamp pair around each) */
    bool lost;           /* a call returned VK_ERROR_DEVICE_LOST */
} ig_vk_device_stats;
void ig_vk_device_get_stats(const ig_vk_device *dev, ig_vk_device_stats *out);
/* Test hook: the next graph submission (of any device) reports
 * VK_ERROR_DEVICE_LOST (kind 1) or VK_ERROR_OUT_OF_DEVICE_MEMORY (kind 2)
 * without reaching the driver, once; 0 disarms. It goes through the same
 * error path as the driver's answer, so a reported loss marks the device
 * lost (ig_vk_device_stats.lost) for good, as a real one does. */
void ig_vk_test_fail_next_submit(int kind);
/* What a device's tensor-core kernels run on, decided from what it, the
 * GLSL compiler (glsl_nv, glsl_khr: ig_vk_compiler_coopmat_*) and the user
 * allow: ig_vk_device_create's choice, which `ignis devices` shows. */
typedef struct ig_vk_coopmat_wants {
    bool any;              /* tensor cores at all */
    ig_vk_coopmat_ext ext; /* which extensions */
    bool int8;             /* the int8 matmul (needs the int8 mat-vec's activations) */
    bool attn;             /* the prefill attention on them */
} ig_vk_coopmat_wants;
typedef struct ig_vk_coopmat_choice {
    bool f16;           /* the f16 matmul on them */
    bool nv, khr;       /* ... on NV's 16x8x16, KHR's 16x16x16 (both: KHR's for batches <= 32) */
    bool sg32;          /* KHR pipelines require subgroups of 32 (not the device's default) */
    bool i8;            /* the int8 matmul on them */
    bool i8_nv, i8_khr; /* ... on NV's s8 16x8x32, KHR's s8 16x16x32 */
    bool attn;          /* the prefill attention on them */
    bool attn_nv, attn_khr; /* ... on NV's, on KHR's (both: vk_ops.c chooses per head dim) */
} ig_vk_coopmat_choice;
ig_vk_coopmat_choice ig_vk_coopmat_choose(const ig_vk_device_info *info, bool glsl_nv, bool glsl_khr,
                                          ig_vk_coopmat_wants w);

/* Whether the device runs the tensor-core matmul (IG_VK_MATMUL_COOPMAT). */
bool ig_vk_device_coopmat(const ig_vk_device *dev);
/* Whether its tensor-core matmul is the KHR cooperative-matrix one. */
bool ig_vk_device_coopmat_khr(const ig_vk_device *dev);
/* Whether it runs the int8 tensor-core matmul (IG_VK_MATMUL_COOPMAT_INT8). */
bool ig_vk_device_coopmat_int8(const ig_vk_device *dev);
/* Whether prefill attention runs on the tensor cores (attn_cm.comp). */
bool ig_vk_device_attn_coopmat(const ig_vk_device *dev);
/* Whether the device runs the int8 mat-vec (IG_VK_MATMUL_INT8). */
bool ig_vk_device_int8(const ig_vk_device *dev);
/* Whether its graphs are batch-invariant (tuning `invariant`): a token's
 * logits the same bits whatever shares its step. */
bool ig_vk_device_invariant(const ig_vk_device *dev);
/* Whether decode graphs prefetch the weights ahead into L2 on this device
 * by default (its tuning table entries; see vk_engine.c). */
bool ig_vk_prefetch_default(const ig_vk_device_info *info);
/* The device holding a model's weights, once a Vulkan context of the model
 * exists (vk_engine.c); else NULL. */
typedef struct ig_model ig_model;
const ig_vk_device *ig_vk_engine_device(const ig_model *m);
/* The engine's device (engine/backend.h) on vk, a device made by the caller
 * from params of its own (tests: weights in small parts, staging copies,
 * one cooperative-matrix extension), which it takes ownership of (freed
 * with it, or here on failure). ig_device_vulkan_create is this on a
 * device made from an index and a tuning string. */
typedef struct ig_device ig_device;
ig_status ig_device_vulkan_wrap(ig_vk_device *vk, ig_device **out);

/* The device's limits as `ignis bench` quotes them (vk_probe.c): memory read
 * bandwidth over a buffer of up to 1 GiB (one binding), and the rate of the
 * f16 tensor-core products of the prefill matmul (0 without them). */
typedef struct ig_vk_probe_result {
    double read_gbs;     /* 1e9 bytes/s */
    uint64_t read_bytes; /* size of the buffer read */
    int runs;            /* timed passes of each probe (the best is kept) */
    double mma_tflops;   /* 1e12 flops/s, a multiply-add counted as 2 */
} ig_vk_probe_result;
ig_status ig_vk_probe(ig_vk_device *dev, ig_vk_probe_result *out);

/* ---- Buffers ----------------------------------------------------------- */

typedef enum ig_vk_mem {
    IG_VK_MEM_DEVICE = 0, /* weights, activations, KV cache (host-visible on UMA) */
    IG_VK_MEM_UPLOAD,     /* small buffers the host writes every step */
    IG_VK_MEM_READBACK,   /* results the host reads (cached host memory) */
} ig_vk_mem;

typedef struct ig_vk_buffer ig_vk_buffer;

/* A buffer of size bytes in one binding (size <= the binding limit). */
ig_status ig_vk_buffer_create(ig_vk_device *dev, ig_vk_mem mem, uint64_t size, ig_vk_buffer **out);
/* A weight matrix of ne1 rows of ne0 elements of type (row-major, ggml block
 * layout); rows are split over several bindings when needed. */
ig_status ig_vk_weight_create(ig_vk_device *dev, ig_dtype type, int64_t ne0, int64_t ne1,
                              ig_vk_buffer **out);
void ig_vk_buffer_free(ig_vk_buffer *buf);
uint64_t ig_vk_buffer_size(const ig_vk_buffer *buf);
int ig_vk_buffer_n_parts(const ig_vk_buffer *buf);
/* Copies to / from the buffer (byte offsets; spans parts). Waits for the
 * transfer; must not race with a submitted graph using the buffer. */
ig_status ig_vk_buffer_write(ig_vk_buffer *buf, uint64_t offset, const void *src, uint64_t size);
ig_status ig_vk_buffer_read(const ig_vk_buffer *buf, uint64_t offset, void *dst, uint64_t size);
ig_status ig_vk_buffer_zero(ig_vk_buffer *buf);
/* The mapped host address of a single-part host-visible buffer, else NULL. */
void *ig_vk_buffer_host_ptr(const ig_vk_buffer *buf);
/* The host pointer reads cached memory (not write-combined or uncached). */
bool ig_vk_buffer_host_cached(const ig_vk_buffer *buf);

/* A region of f32 rows: byte offset (multiple of 4), row stride in elements. */
typedef struct ig_vk_view {
    const ig_vk_buffer *buf;
    uint64_t offset;
    uint32_t stride;
} ig_vk_view;

/* ---- Per-step values ---------------------------------------------------- */

typedef struct ig_vk_step ig_vk_step;

ig_status ig_vk_step_create(ig_vk_device *dev, int max_tokens, ig_vk_step **out);
void ig_vk_step_free(ig_vk_step *step);
int ig_vk_step_capacity(const ig_vk_step *step);
/* Rows of IG_VK_ROWS_HEAD ops: min(n_out, cap) (default cap: the capacity).
 * Set before recording graphs that use it; they size their views by it. */
ig_status ig_vk_step_set_head_cap(ig_vk_step *step, int cap);
int ig_vk_step_head_cap(const ig_vk_step *step);
/* Writes the values of the next step. tokens may be NULL when no op embeds;
 * pos/seq may be NULL (then 0); out_idx may be NULL when n_out == 0. Fails
 * while a graph using this step is in flight (submitted, not yet waited). */
ig_status ig_vk_step_set(ig_vk_step *step, int n_tokens, const int32_t *tokens,
                         const int32_t *pos, const int32_t *seq, int n_out,
                         const int32_t *out_idx);

/* ---- Graphs ------------------------------------------------------------- */

typedef struct ig_vk_graph ig_vk_graph;

typedef enum ig_vk_rows {
    IG_VK_ROWS_TOKENS = 0,
    IG_VK_ROWS_OUTPUTS = 1,
    IG_VK_ROWS_HEAD = 2, /* rows 0..min(n_out, head cap)-1 (ig_vk_step_set_head_cap) */
} ig_vk_rows;

typedef enum ig_vk_matmul_path {
    IG_VK_MATMUL_AUTO = 0, /* mat-vec for small batches (INT8, else FAST where they apply),
                              tensor cores or tiled above (policy in vk_ops.c) */
    IG_VK_MATMUL_VEC,      /* generic mat-vec (matvec.comp), any type and view */
    IG_VK_MATMUL_TILED,
    IG_VK_MATMUL_FAST,     /* mv.comp: F32/F16/BF16/Q4_0/Q5_0/Q8_0/Q4_K/Q6_K, x offset and stride
                              multiples of 4, float rows a multiple of 8 */
    IG_VK_MATMUL_COOPMAT,  /* mmcm.comp: tensor cores (NV cooperative matrix), f16
                              inputs; F16 and quantized weights (AUTO uses it for
                              batches of large quantized matrices from cm_min_tokens
                              where the device has it) */
    IG_VK_MATMUL_INT8,     /* mv.comp with X8: activations quantized to int8 blocks as
                              the CPU quantizes them (x8.glsl), packed integer dot
                              products; quantized weights (AUTO uses it instead of
                              FAST where the device has integer dot products) */
    IG_VK_MATMUL_COOPMAT_INT8, /* mmq.comp: int8 tensor cores on the int8 activations of
                                  INT8; Q4_K and Q6_K weights, rows of whole 256-blocks (AUTO
                                  uses it instead of COOPMAT where the device has it) */
} ig_vk_matmul_path;

typedef struct ig_vk_graph_stats {
    int n_dispatch, n_barrier, n_sets;
} ig_vk_graph_stats;

ig_status ig_vk_graph_begin(ig_vk_device *dev, ig_vk_step *step, int max_tokens,
                            ig_vk_graph **out);
ig_status ig_vk_graph_end(ig_vk_graph *g);
ig_status ig_vk_graph_submit(ig_vk_graph *g);
ig_status ig_vk_graph_wait(ig_vk_graph *g);
ig_status ig_vk_graph_run(ig_vk_graph *g); /* submit + wait */
/* Runs n (<= 8) ended graphs of one device in order, in one submit, and waits. */
ig_status ig_vk_graphs_run(ig_vk_graph *const *gs, int n);
void ig_vk_graph_free(ig_vk_graph *g);
ig_vk_graph_stats ig_vk_graph_get_stats(const ig_vk_graph *g);
/* For the ops recorded after this call (tests and tuning). */
void ig_vk_graph_set_matmul_path(ig_vk_graph *g, ig_vk_matmul_path path);

/* A layer's KV cache: K and V are [n_seq][cap][n_head_kv * head_dim] of type,
 * starting at the given byte offsets; position p of sequence s is in row
 * s * cap + p % cap. For sliding layers cap must be >= window + max_tokens - 1
 * so that a batch never overwrites a key an earlier token of it still sees. */
typedef struct ig_vk_kv {
    const ig_vk_buffer *k, *v;
    uint64_t k_offset, v_offset;
    ig_kv_type type;
    int n_seq, cap;
    int n_head_kv, head_dim;
    int window; /* 0 = global layer */
} ig_vk_kv;

/* Recording errors are sticky: after a failure every later op and
 * ig_vk_graph_end return it. */

/* dst[t, :] = dequant(w[tokens[t], :]) * scale; w is ne1 rows of ne0. */
ig_status ig_vk_op_embed(ig_vk_graph *g, const ig_vk_buffer *w, float scale, ig_vk_view dst);
/* Rows of width = n_heads * d are n_heads rows of d:
 * dst = src / sqrt(mean(src^2) + eps) * norm (norm: d floats; dst may be src). */
ig_status ig_vk_op_rmsnorm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst,
                           const ig_vk_buffer *norm, int width, int n_heads, float eps);
/* dst += rmsnorm(src) * norm over rows of width. */
ig_status ig_vk_op_add_rmsnorm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst,
                               const ig_vk_buffer *norm, int width, float eps);
/* dst[t, r] = sum_i w[r, i] src[t, i], r < ne1, i < ne0. */
ig_status ig_vk_op_matmul(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_buffer *w, ig_vk_view src,
                          ig_vk_view dst);
/* dst[t, r] = gelu_tanh(gate[r]·src[t]) * (up[r]·src[t]); gate and up have
 * the same type and shape. */
ig_status ig_vk_op_matmul_geglu(ig_vk_graph *g, ig_vk_rows rows, const ig_vk_buffer *gate,
                                const ig_vk_buffer *up, ig_vk_view src, ig_vk_view dst);
/* NeoX RoPE in place on [t, n_heads, head_dim] rows at the tokens' positions:
 * angle = pos * (1 / base^(2i/head_dim) / factor), computed in f32 as the CPU
 * backend does. */
ig_status ig_vk_op_rope(ig_vk_graph *g, ig_vk_view x, int n_heads, int head_dim, float base,
                        float factor);
/* Writes each token's K and V rows ([t, n_head_kv * head_dim]) into the cache. */
ig_status ig_vk_op_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k, ig_vk_view v);
/* RoPE on K fused with the store: the cache gets rotated K rows and V rows;
 * k itself is left unchanged. */
ig_status ig_vk_op_rope_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k, ig_vk_view v,
                                 float base, float factor);
/* dst[t, h] = softmax_j(q[t, h]·K[j] * scale) V[j] over the cache (window
 * honoured); softcap > 0 applies softcap * tanh(score / softcap). */
ig_status ig_vk_op_attention(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view q, ig_vk_view dst,
                             int n_head, float scale, float softcap);
/* dst = gelu_tanh(gate) * up, over rows of width (dst may alias either). */
ig_status ig_vk_op_geglu(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view gate, ig_vk_view up,
                         ig_vk_view dst, int width);
/* dst = a + b. */
ig_status ig_vk_op_add(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view a, ig_vk_view b, ig_vk_view dst,
                       int width);
/* x = cap * tanh(x / cap), in place. */
ig_status ig_vk_op_softcap(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view x, int width, float cap);
/* dst = src. */
ig_status ig_vk_op_copy(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view dst, int width);
/* x += rmsnorm(src) * norm; then xn = rmsnorm(x) * norm2 (post-norm +
 * residual + the next block's pre-norm, one dispatch). */
ig_status ig_vk_op_add_rmsnorm_norm(ig_vk_graph *g, ig_vk_rows rows, ig_vk_view src, ig_vk_view x,
                                    const ig_vk_buffer *norm, ig_vk_view xn, const ig_vk_buffer *norm2,
                                    int width, float eps);
/* Per-head RMSNorm (norm: head_dim floats) then NeoX RoPE, in place on
 * [t, n_heads, head_dim] rows (QK-norm + RoPE of Q). */
ig_status ig_vk_op_rmsnorm_rope(ig_vk_graph *g, ig_vk_view x, const ig_vk_buffer *norm, int n_heads,
                                int head_dim, float eps, float base, float factor);
/* Per-head RMSNorm and RoPE of K, stored with V into the cache; k and v
 * themselves are left unchanged. */
ig_status ig_vk_op_rmsnorm_rope_kv_store(ig_vk_graph *g, const ig_vk_kv *kv, ig_vk_view k,
                                         const ig_vk_buffer *knorm, ig_vk_view v, float eps, float base,
                                         float factor);
/* The q, k and v projections of one token, each followed in its own
 * dispatch by what comes next (no stage of their own): q's QK-norm and RoPE
 * in place, k's into the cache, v straight into the cache (k keeps the raw
 * projection; v is only checked, never written). The last workgroup of each
 * head does its norm and rotation (mv.comp -DTAIL, -DV_CACHE). Applies to
 * graphs of one token whose projections take the int8 mat-vec
 * (ig_vk_qkv_tail_ok). */
typedef struct ig_vk_qkv {
    const ig_vk_buffer *wq, *wk, *wv; /* [n_head * hd, n_embd], [n_head_kv * hd, n_embd] x 2 */
    const ig_vk_buffer *qnorm, *knorm; /* hd floats each */
    int n_head;
    float eps, base, factor; /* QK-norm, RoPE (as ig_vk_op_rmsnorm_rope) */
} ig_vk_qkv;
bool ig_vk_qkv_tail_ok(ig_vk_graph *g, const ig_vk_qkv *p, const ig_vk_kv *kv, ig_vk_view src);
ig_status ig_vk_op_qkv_tail(ig_vk_graph *g, const ig_vk_qkv *p, const ig_vk_kv *kv, ig_vk_view src, ig_vk_view q,
                            ig_vk_view k, ig_vk_view v);
/* Reads bytes [lo, hi) of weight w (in the device layout, parts in order)
 * into the GPU's L2 cache, for a later op: no barrier, nothing written. */
ig_status ig_vk_op_prefetch(ig_vk_graph *g, const ig_vk_buffer *w, uint64_t lo, uint64_t hi);
/* dst[j] = src[out_idx[j]] for the step's outputs. */
ig_status ig_vk_op_gather(ig_vk_graph *g, ig_vk_view src, ig_vk_view dst, int width);

/* The f32 frequency table the RoPE ops use: freq[i] = (1 / base^(2i/hd)) / factor. */
void ig_vk_rope_freqs(float base, float factor, int head_dim, float *freq);

#endif
