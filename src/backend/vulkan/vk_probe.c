/* Probes of a Vulkan device's limits, for `ignis bench --backend vulkan`:
 * the memory read bandwidth (probe.comp -DREAD) and the rate of the
 * tensor-core products the prefill matmul uses (probe.comp -DMMA). Each is
 * a graph of several dispatches timed from submit to fence, best of a few
 * runs, so the submit overhead is a small part of the time. */
#include "backend/vulkan/vk_internal.h"

#include <string.h>

#define PROBE_WG 256u
#define PROBE_READ_BYTES (1ull << 30)
#define PROBE_READ_REPS 4
#define PROBE_MMA_WGS 2048u
#define PROBE_MMA_ITERS 512u
#define PROBE_MMA_REPS 2
#define PROBE_RUNS 3

/* Records `reps` dispatches of one probe shader into a new graph. */
static ig_status probe_graph(ig_vk_device *d, ig_vk_step *s, const char *shader, const ig_vk_part *src,
                             const ig_vk_part *dst, const uint32_t pc, uint32_t groups, int reps, ig_vk_graph **out) {
    VkPipeline pipe;
    IG_TRY(ig_vk_pipeline(d, shader, 0, 0, &pipe));
    ig_vk_graph *g;
    IG_TRY(ig_vk_graph_begin(d, s, 1, &g));
    const ig_vk_part *parts[4] = {src, NULL, NULL, dst};
    ig_status st = IG_OK;
    for (int i = 0; i < reps && st == IG_OK; i++) st = ig_vk_rec_dispatch(g, pipe, parts, 4, &pc, sizeof pc, groups, 1, 1);
    if (st == IG_OK) st = ig_vk_graph_end(g);
    if (st != IG_OK) {
        ig_vk_graph_free(g);
        return st;
    }
    *out = g;
    return IG_OK;
}

/* Best wall time in seconds of `runs` replays of an ended graph, after one
 * untimed replay. */
static ig_status best_time(ig_vk_graph *g, int runs, double *best) {
    IG_TRY(ig_vk_graph_run(g));
    *best = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = ig_time_now();
        IG_TRY(ig_vk_graph_run(g));
        double t = ig_time_now() - t0;
        if (*best == 0 || t < *best) *best = t;
    }
    return IG_OK;
}

ig_status ig_vk_probe(ig_vk_device *d, ig_vk_probe_result *out) {
    if (!d || !out) return IG_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    const ig_vk_device_info *info = ig_vk_device_get_info(d);
    uint64_t bytes = PROBE_READ_BYTES;
    if (bytes > info->max_storage_buffer_range) bytes = info->max_storage_buffer_range & ~(uint64_t)15;
    if (bytes > info->max_memory_allocation_size) bytes = info->max_memory_allocation_size & ~(uint64_t)15;
    const uint32_t read_groups = 4096, mma_groups = PROBE_MMA_WGS;
    ig_vk_step *s = NULL;
    ig_vk_buffer *src = NULL, *dst = NULL;
    ig_vk_graph *g = NULL;
    ig_status st = ig_vk_step_create(d, 1, &s);
    if (st == IG_OK) st = ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, bytes, &src);
    if (st == IG_OK) st = ig_vk_buffer_zero(src);
    /* read: one uint per invocation; mma: one 16x8 (KHR: 16x16) f32 tile
       per subgroup of 32 */
    const bool khr = ig_vk_device_coopmat_khr(d);
    const uint32_t frag_n = khr ? 16 : 8;
    uint64_t dst_bytes = (uint64_t)read_groups * PROBE_WG * 4;
    if ((uint64_t)mma_groups * PROBE_WG * frag_n * 2 > dst_bytes) dst_bytes = (uint64_t)mma_groups * PROBE_WG * frag_n * 2;
    if (st == IG_OK) st = ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, dst_bytes, &dst);
    double t = 0;
    if (st == IG_OK)
        st = probe_graph(d, s, "probe_read", src->parts, dst->parts, (uint32_t)(bytes / 16), read_groups,
                         PROBE_READ_REPS, &g);
    if (st == IG_OK) st = best_time(g, PROBE_RUNS, &t);
    if (st == IG_OK && t > 0) {
        out->read_bytes = bytes;
        out->runs = PROBE_RUNS;
        out->read_gbs = (double)bytes * PROBE_READ_REPS / t / 1e9;
    }
    ig_vk_graph_free(g);
    g = NULL;
#if IG_VK_GLSL_COOPMAT_NV || IG_VK_GLSL_COOPMAT_KHR
    if (st == IG_OK && ig_vk_device_coopmat(d) && info->subgroup_size > 0) {
        st = probe_graph(d, s, khr ? "probe_mmak" : "probe_mma", NULL, dst->parts, PROBE_MMA_ITERS, mma_groups,
                         PROBE_MMA_REPS, &g);
        if (st == IG_OK) st = best_time(g, PROBE_RUNS, &t);
        if (st == IG_OK && t > 0) {
            /* KHR pipelines run in subgroups of 32 (required where not the default) */
            const double subgroups = (double)mma_groups * (PROBE_WG / (khr ? 32 : info->subgroup_size));
            /* four 16 x frag_n x 16 products per iteration */
            const double flops = subgroups * PROBE_MMA_ITERS * 4 * (2.0 * 16 * frag_n * 16) * PROBE_MMA_REPS;
            out->mma_tflops = flops / t / 1e12;
        }
        ig_vk_graph_free(g);
    }
#endif
    ig_vk_buffer_free(dst);
    ig_vk_buffer_free(src);
    ig_vk_step_free(s);
    return st;
}
