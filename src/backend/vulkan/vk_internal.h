/* Internals of the Vulkan backend shared by its .c files. */
#ifndef IG_VK_INTERNAL_H
#define IG_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_tuning.h"
#include "core/util.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- Loader: entry points resolved at run time ------------------------- */

#define IG_VK_GLOBAL_FNS(X)                                                                        \
    X(vkCreateInstance)                                                                            \
    X(vkEnumerateInstanceExtensionProperties)

#define IG_VK_INSTANCE_FNS(X)                                                                      \
    X(vkDestroyInstance)                                                                           \
    X(vkEnumeratePhysicalDevices)                                                                  \
    X(vkGetPhysicalDeviceProperties)                                                               \
    X(vkGetPhysicalDeviceProperties2)                                                              \
    X(vkGetPhysicalDeviceFeatures2)                                                                \
    X(vkGetPhysicalDeviceMemoryProperties)                                                         \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                    \
    X(vkEnumerateDeviceExtensionProperties)                                                        \
    X(vkCreateDevice)                                                                              \
    X(vkDestroyDevice)                                                                             \
    X(vkGetDeviceQueue)                                                                            \
    X(vkCreateBuffer)                                                                              \
    X(vkDestroyBuffer)                                                                             \
    X(vkGetBufferMemoryRequirements)                                                               \
    X(vkAllocateMemory)                                                                            \
    X(vkFreeMemory)                                                                                \
    X(vkBindBufferMemory)                                                                          \
    X(vkMapMemory)                                                                                 \
    X(vkUnmapMemory)                                                                               \
    X(vkCreateShaderModule)                                                                        \
    X(vkDestroyShaderModule)                                                                       \
    X(vkCreateDescriptorSetLayout)                                                                 \
    X(vkDestroyDescriptorSetLayout)                                                                \
    X(vkCreatePipelineLayout)                                                                      \
    X(vkDestroyPipelineLayout)                                                                     \
    X(vkCreateComputePipelines)                                                                    \
    X(vkDestroyPipeline)                                                                           \
    X(vkCreateDescriptorPool)                                                                      \
    X(vkDestroyDescriptorPool)                                                                     \
    X(vkAllocateDescriptorSets)                                                                    \
    X(vkUpdateDescriptorSets)                                                                      \
    X(vkCreateCommandPool)                                                                         \
    X(vkDestroyCommandPool)                                                                        \
    X(vkAllocateCommandBuffers)                                                                    \
    X(vkFreeCommandBuffers)                                                                        \
    X(vkBeginCommandBuffer)                                                                        \
    X(vkEndCommandBuffer)                                                                          \
    X(vkResetCommandBuffer)                                                                        \
    X(vkCmdBindPipeline)                                                                           \
    X(vkCmdBindDescriptorSets)                                                                     \
    X(vkCmdPushConstants)                                                                          \
    X(vkCmdDispatch)                                                                               \
    X(vkCmdPipelineBarrier)                                                                        \
    X(vkCmdCopyBuffer)                                                                             \
    X(vkCmdFillBuffer)                                                                             \
    X(vkQueueSubmit)                                                                               \
    X(vkCreateFence)                                                                               \
    X(vkDestroyFence)                                                                              \
    X(vkWaitForFences)                                                                             \
    X(vkResetFences)                                                                               \
    X(vkDeviceWaitIdle)                                                                            \
    X(vkCreateQueryPool)                                                                           \
    X(vkDestroyQueryPool)                                                                          \
    X(vkCmdResetQueryPool)                                                                         \
    X(vkCmdWriteTimestamp)                                                                         \
    X(vkGetQueryPoolResults)

typedef struct ig_vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define IG_VK_DECL(name) PFN_##name name;
    IG_VK_GLOBAL_FNS(IG_VK_DECL)
    IG_VK_INSTANCE_FNS(IG_VK_DECL)
#undef IG_VK_DECL
    /* optional (NULL when the instance lacks them) */
    PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV vkGetPhysicalDeviceCooperativeMatrixPropertiesNV;
    PFN_vkVoidFunction vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR;
} ig_vk_fns;

extern ig_vk_fns ig_vk;

/* Opens the loader and the process-wide instance (kept until exit). */
ig_status ig_vk_instance_acquire(VkInstance *out, uint32_t *api_version);
void ig_vk_instance_release(void);

const char *ig_vk_result_str(VkResult r);
/* ig_fail with "what: VkResult" (IG_ERR_NO_MEMORY for out-of-memory codes). */
ig_status ig_vk_fail(VkResult r, const char *what);

/* Fills info for a physical device (vk_device.c). */
void ig_vk_query_device(VkPhysicalDevice pd, int index, uint32_t instance_api, ig_vk_device_info *info);

/* ---- Memory ------------------------------------------------------------ */

typedef struct ig_vk_block {
    struct ig_vk_block *next;
    VkDeviceMemory mem;
    VkBuffer buf;      /* one buffer spanning the block */
    uint64_t size, used;
    uint64_t alloc_size; /* bytes of device memory */
    uint8_t *map;      /* persistently mapped, or NULL */
    bool host_cached;  /* map is cached host memory: fast to read from the CPU */
    int kind;          /* ig_vk_mem */
    int live;          /* sub-allocations not yet freed */
    bool dedicated;    /* never shared with other buffers */
} ig_vk_block;

typedef struct ig_vk_part {
    ig_vk_block *blk;
    uint64_t offset, size; /* within the block */
    int64_t row0, n_rows;  /* weights: rows held by this part */
} ig_vk_part;

struct ig_vk_buffer {
    ig_vk_device *dev;
    int mem;
    uint64_t size;
    ig_dtype type;         /* weights; IG_TYPE_F32 for plain buffers */
    int64_t ne0, ne1;
    uint64_t row_bytes;    /* bytes of a row in ggml's layout (what callers write) */
    uint64_t row_stride;   /* bytes of a row on the device: a multiple of 16, in the
                              device layout (ig_vk_weight_repacked) */
    bool is_weight;
    int n_parts;
    ig_vk_part *parts;
};

#define IG_VK_N_BINDINGS 8
#define IG_VK_PUSH_BYTES 128
#define IG_VK_N_SPEC 5 /* specialization constants 0 .. 4, unset ones 0 */

typedef struct ig_vk_pipe {
    int shader;
    uint32_t spec[IG_VK_N_SPEC];
    VkPipeline pipe;
} ig_vk_pipe;

struct ig_vk_device {
    ig_vk_device_info info;
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceMemoryProperties memprops;
    uint64_t max_binding; /* bytes one descriptor may cover */
    uint64_t max_weight_part; /* <= max_binding */
    uint64_t max_block;   /* largest allocation */
    uint64_t align;       /* offset alignment of sub-allocations */
    ig_vk_block *blocks;
    _Atomic uint64_t allocated; /* read by monitoring from any thread */
    /* transfers */
    VkCommandPool pool;
    VkCommandBuffer xfer_cb;
    VkFence xfer_fence;
    ig_vk_buffer *staging;
    /* pipelines */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    ig_vk_pipe *pipes;
    int n_pipes, cap_pipes;
    uint32_t wg_size; /* default local size for spec-constant shaders */
    ig_vk_tuning tune; /* shapes and thresholds (vk_tuning.h) */
    bool force_staging; /* device memory is never mapped (tests) */
    /* batches from which large quantized matrices take the tensor cores
       instead of the mat-vec (the mat-vec's cost grows with every column):
       tune's value for this device's mat-vec; ... the f16 ones (types the
       int8 ones do not take) */
    uint32_t cm_min_tokens, cm_min_tokens_f16;
    /* tensor cores (ig_vk_coopmat_choose): the f16 matmul (mmcm_* on NV's
       extension, mmcmk_* on KHR's), the int8 one (mmq_*, mmqk_*), the
       prefill attention (attn_cm_*, attn_cmk_*); the extensions, f16 and
       shaderInt8 enabled accordingly */
    ig_vk_coopmat_choice cm;
    bool int8_mv;       /* shaderIntegerDotProduct enabled: quant_x8.comp + mv8_* */
    bool x8_shuffle;    /* the int8 copies quantized with subgroup shuffles (x8_quant_vecs) */
    ig_vk_buffer *dummy; /* bound to unused descriptor slots */
    float timestamp_period; /* ns per timestamp tick (profiling) */
    /* monitoring (vk_monitor.c) */
    _Atomic uint64_t busy_ns; /* GPU time of the submitted graphs */
    uint64_t ts_mask;         /* valid bits of the queue's timestamps; 0: none */
    bool memory_budget;       /* VK_EXT_memory_budget */
    PFN_vkGetPhysicalDeviceMemoryProperties2 get_memprops2;
};

/* ---- Monitoring (vk_monitor.c) ------------------------------------------ */

/* Finds what the device offers for monitoring: timestamps on its queue, the
 * memory budget query. Called once, when the device is made. */
void ig_vk_monitor_init(ig_vk_device *d);
/* The busy time of a graph: a pair of timestamps around its commands.
 * begin records the reset and the first timestamp (VK_NULL_HANDLE without
 * timestamps: the other calls then do nothing); end the second, before the
 * command buffer ends; collect, after the graph's fence, adds the time
 * between them to the device's busy time. */
VkQueryPool ig_vk_busy_begin(ig_vk_device *d, VkCommandBuffer cb);
void ig_vk_busy_end(VkCommandBuffer cb, VkQueryPool q);
void ig_vk_busy_collect(ig_vk_device *d, VkQueryPool q);
void ig_vk_busy_free(ig_vk_device *d, VkQueryPool q);
/* Set once any call has returned VK_ERROR_DEVICE_LOST (ig_vk_fail). */
extern atomic_bool ig_vk_lost;

/* Weight rows on the device: ggml's block layout, except Q4_0, Q5_0, Q8_0 and
 * Q6_K rows, which are stored field by field so that the quantized bytes of a
 * row are contiguous and 16-byte aligned (for 128-bit loads):
 *   Q4_0: [qs: 16 nb][d: nb f16]
 *   Q5_0: [qs: 16 nb][qh: 4 nb][d: nb f16]
 *   Q8_0: [qs: 32 nb int8][d: nb f16]
 *   Q6_K: [ql: 128 nb][qh: 64 nb][scales: 16 nb][d: nb f16]
 * (nb blocks per row). Every row is padded to a multiple of 16 bytes. */
bool ig_vk_weight_repacked(ig_dtype type);

/* Picks a memory type for kind; requires bits from VkMemoryRequirements. */
int ig_vk_pick_memory(const ig_vk_device *d, int kind, uint32_t type_bits, int nth);
void ig_vk_memory_free_all(ig_vk_device *d);
/* Runs a one-off transfer command buffer: record(cb, user), submit, wait. */
ig_status ig_vk_transfer(ig_vk_device *d, void (*record)(VkCommandBuffer cb, void *user), void *user);

/* Pipeline for shader name with spec constants (created on first use). */
ig_status ig_vk_pipeline(ig_vk_device *d, const char *name, uint32_t spec0, uint32_t spec1,
                         VkPipeline *out);
/* The same with specialization constants 0 .. n - 1 from spec (n <= IG_VK_N_SPEC). */
ig_status ig_vk_pipeline_spec(ig_vk_device *d, const char *name, const uint32_t *spec, int n, VkPipeline *out);
ig_status ig_vk_pipelines_init(ig_vk_device *d);
/* The shader name of a pipeline made by ig_vk_pipeline (profiling). */
const char *ig_vk_pipeline_name(const ig_vk_device *d, VkPipeline pipe);
void ig_vk_pipelines_free(ig_vk_device *d);

/* The step's buffer (binding 0 of every dispatch), and the count of
 * submitted graphs reading it. */
const ig_vk_part *ig_vk_step_part(const ig_vk_step *step);
void ig_vk_step_busy(ig_vk_step *step, int delta);

/* Whether mv.comp handles a matmul: its type, row length and x view (element
 * offset and stride). */
bool ig_vk_matmul_fast_ok(ig_dtype type, int64_t n_in, uint32_t x_off, uint32_t x_stride);

/* ---- Graph recording (vk_graph.c), used by vk_ops.c --------------------- */

/* One binding of a dispatch: a buffer part and the byte range it touches. */
typedef struct ig_vk_bind {
    const ig_vk_part *part;
    uint64_t lo, hi; /* byte range within the part touched by the op */
    bool write;
} ig_vk_bind;

/* Checks an op's accesses against what earlier ops touched since the last
 * barrier and records a barrier when they conflict. Call once per op, before
 * its dispatches (dispatches within one op never conflict). */
ig_status ig_vk_rec_hazards(ig_vk_graph *g, const ig_vk_bind *b, int n);
/* Records one dispatch: bindings at slots 1..n (slot 0 is the step buffer;
 * NULL parts get a dummy), push constants, grid. */
ig_status ig_vk_rec_dispatch(ig_vk_graph *g, VkPipeline pipe, const ig_vk_part *const *parts,
                             int n, const void *pc, uint32_t pc_size, uint32_t gx, uint32_t gy,
                             uint32_t gz);
ig_vk_device *ig_vk_graph_device(ig_vk_graph *g);
int ig_vk_graph_max_tokens(const ig_vk_graph *g);
/* Rows an op with this selector may touch: max_tokens, or the head cap. */
int ig_vk_graph_max_rows(const ig_vk_graph *g, ig_vk_rows rows);
ig_vk_matmul_path ig_vk_graph_matmul_path(const ig_vk_graph *g);
ig_status ig_vk_graph_error(const ig_vk_graph *g);
ig_status ig_vk_graph_set_error(ig_vk_graph *g, ig_status st);
/* The int8 copy of an activation view that the int8 mat-vec reads
 * (vk_ops.c): a graph scratch buffer, and the view it holds until an op
 * writes the view's bytes again (ig_vk_rec_hazards clears valid), so q, k
 * and v quantize their common input once. */
typedef struct ig_vk_x8_cache {
    const ig_vk_buffer *buf; /* NULL before the first use */
    bool valid;
    const ig_vk_part *src;   /* the f32 view: part, byte range, layout */
    uint64_t lo, hi;
    uint32_t x_off, x_stride, n_in;
    ig_vk_rows rows;
    uint32_t kind;           /* x8.glsl: 0 = blocks of 32, 1 = of 256 */
    /* the kind the last int8 mat-vec of each row length asked for: what a
     * producer of that width writes (a miss costs a quant_x8 dispatch) */
    uint32_t seen_n_in[4], seen_kind[4];
} ig_vk_x8_cache;
ig_vk_x8_cache *ig_vk_graph_x8(ig_vk_graph *g);
/* The graph's scratch for the partial sums of split-K matmuls (one buffer
 * reused by all of them: the hazard barriers order the uses; replaced by a
 * larger one when too small, the old one staying with the graph). */
const ig_vk_buffer **ig_vk_graph_split_sums(ig_vk_graph *g);

/* A buffer owned by the graph (freed with it), e.g. a RoPE table. */
ig_status ig_vk_graph_const(ig_vk_graph *g, const void *data, uint64_t size, const ig_vk_buffer **out);
/* An uninitialized device buffer owned by the graph (scratch of an op). */
ig_status ig_vk_graph_scratch(ig_vk_graph *g, uint64_t size, const ig_vk_buffer **out);
/* The graph's buffer of at least n zeroed 32-bit counters. Shaders put them
 * back to zero before their dispatch ends, so every later dispatch and
 * replay finds them so; the ops that use it declare it written, so two of
 * them never run side by side. One buffer serves all (a larger one replaces
 * it when too small, the old one staying with the graph). */
ig_status ig_vk_graph_counters(ig_vk_graph *g, uint64_t n, const ig_vk_buffer **out);

#endif
