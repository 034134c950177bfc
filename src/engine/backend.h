/* The interface between the engine and its compute backends.
 *
 * A device (ig_device) is where a model's graphs run; it holds what every
 * context of one model shares there (on a GPU: the device and its copies of
 * the weights). The model owns it, made by its first context.
 *
 * A backend (ig_backend) executes one context's op list: made from a
 * descriptor of exactly what it needs (the ops, the KV cache layout, the
 * batch size, the thread pool), it never sees the context. */
#ifndef IG_BACKEND_H
#define IG_BACKEND_H

#include "engine/graph.h"
#include "engine/kv_cache.h"
#include "engine/threadpool.h"

typedef struct ig_backend_desc {
    const ig_graph *graph; /* outlives the backend; its weights stay mapped */
    ig_kv_cache *kv;       /* layout (per layer cap and window); the host K/V arrays when the device keeps the
                              cache on the host. The engine updates the per-sequence lengths after each step. */
    int n_batch;           /* most tokens of a step */
    ig_threadpool *pool;   /* the context's CPU threads */
    /* ig_context_params' matmul observer (NULL: none); only the CPU device
     * takes one (the engine refuses it for the others) */
    void (*matmul_observer)(void *user, const char *weight, const float *x, int rows, int width);
    void *matmul_observer_user;
} ig_backend_desc;

typedef struct ig_backend ig_backend;

typedef struct ig_backend_ops {
    const char *name;
    /* Runs the whole graph for one step. logits has room for step->n_out
     * rows of the vocabulary; *rows is set to where they are to be read:
     * logits, or rows of the backend's own that stay valid until the next
     * step (a mapped readback buffer: no copy). */
    ig_status (*compute)(ig_backend *be, const ig_step *step, float *logits, const float **rows);
    void (*destroy)(ig_backend *be);
} ig_backend_ops;

struct ig_backend {
    const ig_backend_ops *ops;
    void *impl;
};

typedef struct ig_device ig_device;

typedef struct ig_device_ops {
    const char *name;
    bool host_kv; /* its backends keep the KV cache in the host arrays of desc->kv */
    ig_status (*backend_create)(ig_device *dev, const ig_backend_desc *desc, ig_backend **out);
    void (*free)(ig_device *dev);
    /* Fills the device's memory and busy-time fields of out (allocated,
     * used, budget, busy); may run on any thread, also during a step. NULL:
     * the engine reports the host's numbers (ig_context_device_stats). */
    void (*stats)(const ig_device *dev, ig_device_stats *out);
    /* whether its contexts are batch-invariant: a token's logits the same
       bits whatever else shares its step */
    bool (*batch_invariant)(const ig_device *dev);
} ig_device_ops;

struct ig_device {
    const ig_device_ops *ops;
    void *impl;
};

ig_status ig_device_cpu_create(ig_device **out);
#ifdef IGNIS_HAVE_VULKAN
/* The Vulkan device `index`; weights are uploaded as backends need them,
 * once per device. tuning: overrides of the device's tuning table,
 * "name=value,..." (vk_tuning.h), or NULL. */
ig_status ig_device_vulkan_create(int index, const char *tuning, ig_device **out);
#endif
void ig_device_free(ig_device *dev);
/* Test hook: the next step the Vulkan backend submits fails as if the
 * driver had reported the device lost (IG_DEVICE_FAULT_LOST) or out of
 * device memory (IG_DEVICE_FAULT_OOM); a no-op without Vulkan. */
enum { IG_DEVICE_FAULT_NONE = 0, IG_DEVICE_FAULT_LOST = 1, IG_DEVICE_FAULT_OOM = 2 };
void ig_device_test_fault(int kind);

#endif
