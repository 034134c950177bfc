/* Graph recording: one command buffer per graph, recorded once and replayed
 * with one submit per step. Each dispatch gets its own descriptor set
 * (written at record time: buffers never move). Barriers are emitted only
 * when an op reads or writes a byte range an op since the last barrier wrote,
 * or writes a range one of them read.
 *
 * Environment: $IGNIS_VK_PROFILE set (any value) times every dispatch and
 * prints the time per shader when a graph is freed; 2 also lists the
 * dispatches of the second layer in order. */
#include "backend/vulkan/vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETS_PER_POOL 256

typedef struct access {
    VkBuffer buf;
    uint64_t lo, hi; /* absolute byte range in buf */
    bool write;
} access;

struct ig_vk_graph {
    ig_vk_device *dev;
    ig_vk_step *step;
    int max_tokens;
    VkCommandBuffer cb;
    VkFence fence;
    VkDescriptorPool *pools;
    int n_pools;
    int sets_left;
    access *pending;
    int n_pending, cap_pending;
    struct owned {
        ig_vk_buffer *buf;
        void *data; /* a copy, to share identical constants */
        uint64_t size;
    } *owned;
    int n_owned;
    ig_status err;
    bool ended, in_flight;
    ig_vk_matmul_path path;
    ig_vk_graph_stats stats;
    ig_vk_x8_cache x8;
    const ig_vk_buffer *split_sums; /* the tensor-core matmul's split-K scratch */
    const ig_vk_buffer *counters;   /* zeroed counters (ig_vk_graph_counters) */
    /* $IGNIS_VK_PROFILE: a timestamp after every dispatch, summed per shader
     * over the runs and printed (stderr) when the graph is freed */
    VkQueryPool qpool;
    int n_q, cap_q;
    VkPipeline *q_pipe; /* pipeline of the dispatch ending at query i + 1 */
    double *q_ns;       /* summed ns per dispatch */
    int n_runs;
    VkQueryPool busy_q; /* monitoring: timestamps around the whole graph (vk_monitor.c) */
};

#define PROFILE_QUERIES 8192

/* $IGNIS_VK_PROFILE: unset 0 (off); set, at least 1 (per-shader times when
 * a graph is freed); 2 also lists the dispatches of the second layer. */
static int profile_level(void) {
    const char *e = getenv("IGNIS_VK_PROFILE");
    if (!e) return 0;
    const int v = atoi(e);
    return v > 1 ? v : 1;
}

static void profile_collect(ig_vk_graph *g) {
    if (!g->qpool || g->n_q < 2) return;
    uint64_t *ts = ig_calloc_array((size_t)g->n_q, sizeof *ts);
    if (!ts) return;
    VkResult r = ig_vk.vkGetQueryPoolResults(g->dev->dev, g->qpool, 0, (uint32_t)g->n_q, (size_t)g->n_q * 8, ts, 8,
                                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS) {
        for (int i = 1; i < g->n_q; i++) g->q_ns[i - 1] += (double)(ts[i] - ts[i - 1]) * g->dev->timestamp_period;
        g->n_runs++;
    }
    free(ts);
}

static void profile_print(ig_vk_graph *g) {
    if (!g->qpool || g->n_runs == 0) return;
    /* sum per shader name */
    const char *names[128];
    double tot[128];
    int cnt[128], n = 0;
    double all = 0;
    for (int i = 0; i + 1 < g->n_q; i++) {
        const char *nm = ig_vk_pipeline_name(g->dev, g->q_pipe[i]);
        int k = 0;
        while (k < n && strcmp(names[k], nm)) k++;
        if (k == n && n < 128) names[n] = nm, tot[n] = 0, cnt[n] = 0, n++;
        if (k < n) tot[k] += g->q_ns[i], cnt[k]++;
        all += g->q_ns[i];
    }
    fprintf(stderr, "vulkan profile: graph of %d tokens, %d runs, %.1f us per run, %d dispatches, %d barriers\n",
            g->max_tokens, g->n_runs, all / g->n_runs / 1e3, g->n_q - 1, g->stats.n_barrier);
    for (int pass = 0; pass < n; pass++) {
        int best = -1;
        for (int k = 0; k < n; k++)
            if (cnt[k] >= 0 && (best < 0 || tot[k] > tot[best])) best = k;
        if (best < 0) break;
        fprintf(stderr, "  %-24s %5d x %9.1f us = %9.1f us per run (%4.1f%%)\n", names[best], cnt[best],
                tot[best] / g->n_runs / 1e3 / cnt[best], tot[best] / g->n_runs / 1e3, 100.0 * tot[best] / all);
        cnt[best] = -1;
    }
    /* IGNIS_VK_PROFILE=2: also the dispatches of the second layer's span, in order */
    if (profile_level() >= 2)
        for (int i = 14; i < 44 && i + 1 < g->n_q; i++)
            fprintf(stderr, "    #%-3d %-24s %8.1f us\n", i, ig_vk_pipeline_name(g->dev, g->q_pipe[i]),
                    g->q_ns[i] / g->n_runs / 1e3);
}

ig_vk_device *ig_vk_graph_device(ig_vk_graph *g) { return g->dev; }
int ig_vk_graph_max_tokens(const ig_vk_graph *g) { return g->max_tokens; }
int ig_vk_graph_max_rows(const ig_vk_graph *g, ig_vk_rows rows) {
    if (rows != IG_VK_ROWS_HEAD) return g->max_tokens;
    int h = ig_vk_step_head_cap(g->step);
    return h < g->max_tokens ? h : g->max_tokens;
}
ig_vk_matmul_path ig_vk_graph_matmul_path(const ig_vk_graph *g) { return g->path; }
ig_vk_x8_cache *ig_vk_graph_x8(ig_vk_graph *g) { return &g->x8; }
const ig_vk_buffer **ig_vk_graph_split_sums(ig_vk_graph *g) { return &g->split_sums; }
ig_status ig_vk_graph_error(const ig_vk_graph *g) { return g->err; }
ig_vk_graph_stats ig_vk_graph_get_stats(const ig_vk_graph *g) { return g->stats; }
void ig_vk_graph_set_matmul_path(ig_vk_graph *g, ig_vk_matmul_path path) { g->path = path; }

ig_status ig_vk_graph_set_error(ig_vk_graph *g, ig_status st) {
    if (st != IG_OK && g->err == IG_OK) g->err = st;
    return st;
}

static void full_barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src,
                         VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src, .dstAccessMask = dst};
    ig_vk.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

ig_status ig_vk_graph_begin(ig_vk_device *d, ig_vk_step *step, int max_tokens, ig_vk_graph **out) {
    *out = NULL;
    if (!d || !step || max_tokens <= 0 || max_tokens > ig_vk_step_capacity(step))
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graph for %d tokens with a step of capacity %d", max_tokens,
                       step ? ig_vk_step_capacity(step) : 0);
    ig_vk_graph *g = ig_calloc_array(1, sizeof *g);
    if (!g) return IG_ERR_NO_MEMORY;
    g->dev = d;
    g->step = step;
    g->max_tokens = max_tokens;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    VkResult r = ig_vk.vkAllocateCommandBuffers(d->dev, &ai, &g->cb);
    if (r != VK_SUCCESS) {
        free(g);
        return ig_vk_fail(r, "vkAllocateCommandBuffers");
    }
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    r = ig_vk.vkCreateFence(d->dev, &fci, NULL, &g->fence);
    if (r == VK_SUCCESS) {
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        r = ig_vk.vkBeginCommandBuffer(g->cb, &bi);
    }
    if (r != VK_SUCCESS) {
        ig_status st = ig_vk_fail(r, "starting a graph");
        ig_vk_graph_free(g);
        return st;
    }
    if (profile_level()) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                     .queryCount = PROFILE_QUERIES};
        g->q_pipe = ig_calloc_array(PROFILE_QUERIES, sizeof *g->q_pipe);
        g->q_ns = ig_calloc_array(PROFILE_QUERIES, sizeof *g->q_ns);
        if (g->q_pipe && g->q_ns && ig_vk.vkCreateQueryPool(d->dev, &qci, NULL, &g->qpool) == VK_SUCCESS) {
            g->cap_q = PROFILE_QUERIES;
            ig_vk.vkCmdResetQueryPool(g->cb, g->qpool, 0, PROFILE_QUERIES);
        }
    }
    /* host writes (step values) and any earlier submission before this one */
    full_barrier(g->cb,
                 VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                 VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    if (g->qpool) ig_vk.vkCmdWriteTimestamp(g->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g->qpool, (uint32_t)g->n_q++);
    g->busy_q = ig_vk_busy_begin(d, g->cb);
    *out = g;
    return IG_OK;
}

ig_status ig_vk_graph_end(ig_vk_graph *g) {
    if (!g) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: no graph");
    if (g->err != IG_OK) return g->err;
    if (g->ended) return IG_OK;
    /* results visible to the host and to whatever runs next */
    full_barrier(g->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                 VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                 VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_SHADER_READ_BIT);
    ig_vk_busy_end(g->cb, g->busy_q);
    VkResult r = ig_vk.vkEndCommandBuffer(g->cb);
    if (r != VK_SUCCESS) return ig_vk_graph_set_error(g, ig_vk_fail(r, "vkEndCommandBuffer"));
    g->ended = true;
    free(g->pending);
    g->pending = NULL;
    g->n_pending = g->cap_pending = 0;
    return IG_OK;
}

static atomic_int g_fail_next_submit; /* the test hook's kind, 0: none */

void ig_vk_test_fail_next_submit(int kind) { atomic_store(&g_fail_next_submit, kind); }

static VkResult queue_submit(VkQueue q, const VkSubmitInfo *si, VkFence fence) {
    switch (atomic_exchange(&g_fail_next_submit, 0)) {
    case 1: return VK_ERROR_DEVICE_LOST;
    case 2: return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    default: return ig_vk.vkQueueSubmit(q, 1, si, fence);
    }
}

ig_status ig_vk_graph_submit(ig_vk_graph *g) {
    if (!g) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: no graph");
    if (g->err != IG_OK) return g->err;
    if (!g->ended) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graph submitted before ig_vk_graph_end");
    if (g->in_flight) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graph submitted twice without a wait");
    VkResult r = ig_vk.vkResetFences(g->dev->dev, 1, &g->fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkResetFences");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &g->cb};
    r = queue_submit(g->dev->queue, &si, g->fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkQueueSubmit");
    g->in_flight = true;
    ig_vk_step_busy(g->step, 1);
    return IG_OK;
}

ig_status ig_vk_graph_wait(ig_vk_graph *g) {
    if (!g) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: no graph");
    if (!g->in_flight) return IG_OK;
    VkResult r = ig_vk.vkWaitForFences(g->dev->dev, 1, &g->fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkWaitForFences");
    g->in_flight = false;
    ig_vk_step_busy(g->step, -1);
    profile_collect(g);
    ig_vk_busy_collect(g->dev, g->busy_q);
    return IG_OK;
}

ig_status ig_vk_graph_run(ig_vk_graph *g) {
    IG_TRY(ig_vk_graph_submit(g));
    return ig_vk_graph_wait(g);
}

ig_status ig_vk_graphs_run(ig_vk_graph *const *gs, int n) {
    if (n < 1 || n > 8 || !gs) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad graph list");
    VkCommandBuffer cbs[8];
    for (int i = 0; i < n; i++) {
        const ig_vk_graph *g = gs[i];
        if (!g) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: no graph");
        if (g->err != IG_OK) return g->err;
        if (!g->ended) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graph submitted before ig_vk_graph_end");
        if (g->in_flight) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graph submitted twice without a wait");
        if (g->dev != gs[0]->dev) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: graphs of two devices");
        cbs[i] = g->cb;
    }
    ig_vk_graph *g0 = gs[0];
    VkResult r = ig_vk.vkResetFences(g0->dev->dev, 1, &g0->fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkResetFences");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = (uint32_t)n, .pCommandBuffers = cbs};
    r = queue_submit(g0->dev->queue, &si, g0->fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkQueueSubmit");
    for (int i = 0; i < n; i++) ig_vk_step_busy(gs[i]->step, 1);
    r = ig_vk.vkWaitForFences(g0->dev->dev, 1, &g0->fence, VK_TRUE, UINT64_MAX);
    for (int i = 0; i < n; i++) ig_vk_step_busy(gs[i]->step, -1);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkWaitForFences");
    for (int i = 0; i < n; i++) {
        profile_collect(gs[i]);
        ig_vk_busy_collect(gs[i]->dev, gs[i]->busy_q);
    }
    return IG_OK;
}

void ig_vk_graph_free(ig_vk_graph *g) {
    if (!g) return;
    ig_vk_device *d = g->dev;
    if (g->in_flight) {
        ig_vk.vkWaitForFences(d->dev, 1, &g->fence, VK_TRUE, UINT64_MAX);
        ig_vk_step_busy(g->step, -1);
    }
    profile_print(g);
    if (g->qpool) ig_vk.vkDestroyQueryPool(d->dev, g->qpool, NULL);
    ig_vk_busy_free(d, g->busy_q);
    free(g->q_pipe);
    free(g->q_ns);
    if (g->fence) ig_vk.vkDestroyFence(d->dev, g->fence, NULL);
    if (g->cb) ig_vk.vkFreeCommandBuffers(d->dev, d->pool, 1, &g->cb);
    for (int i = 0; i < g->n_pools; i++) ig_vk.vkDestroyDescriptorPool(d->dev, g->pools[i], NULL);
    free(g->pools);
    for (int i = 0; i < g->n_owned; i++) {
        ig_vk_buffer_free(g->owned[i].buf);
        free(g->owned[i].data);
    }
    free(g->owned);
    free(g->pending);
    free(g);
}

ig_status ig_vk_graph_const(ig_vk_graph *g, const void *data, uint64_t size, const ig_vk_buffer **out) {
    for (int i = 0; i < g->n_owned; i++) {
        if (g->owned[i].data && g->owned[i].size == size && memcmp(g->owned[i].data, data, (size_t)size) == 0) {
            *out = g->owned[i].buf;
            return IG_OK;
        }
    }
    struct owned *no = ig_realloc_array(g->owned, (size_t)g->n_owned + 1, sizeof *no);
    if (!no) return ig_vk_graph_set_error(g, IG_ERR_NO_MEMORY);
    g->owned = no;
    void *copy = ig_malloc((size_t)size);
    if (!copy) return ig_vk_graph_set_error(g, IG_ERR_NO_MEMORY);
    memcpy(copy, data, (size_t)size);
    ig_vk_buffer *b;
    ig_status st = ig_vk_buffer_create(g->dev, IG_VK_MEM_DEVICE, size, &b);
    if (st == IG_OK) {
        g->owned[g->n_owned++] = (struct owned){b, copy, size};
        st = ig_vk_buffer_write(b, 0, data, size);
    } else {
        free(copy);
    }
    IG_TRY(ig_vk_graph_set_error(g, st));
    *out = b;
    return IG_OK;
}

static ig_status scratch_new(ig_vk_graph *g, uint64_t size, ig_vk_buffer **out) {
    struct owned *no = ig_realloc_array(g->owned, (size_t)g->n_owned + 1, sizeof *no);
    if (!no) return ig_vk_graph_set_error(g, IG_ERR_NO_MEMORY);
    g->owned = no;
    ig_vk_buffer *b;
    IG_TRY(ig_vk_graph_set_error(g, ig_vk_buffer_create(g->dev, IG_VK_MEM_DEVICE, size ? size : 4, &b)));
    g->owned[g->n_owned++] = (struct owned){b, NULL, size};
    *out = b;
    return IG_OK;
}

ig_status ig_vk_graph_scratch(ig_vk_graph *g, uint64_t size, const ig_vk_buffer **out) {
    ig_vk_buffer *b;
    IG_TRY(scratch_new(g, size, &b));
    *out = b;
    return IG_OK;
}

ig_status ig_vk_graph_counters(ig_vk_graph *g, uint64_t n, const ig_vk_buffer **out) {
    if (n > UINT32_MAX / 4) return ig_vk_graph_set_error(g, ig_fail(IG_ERR_INVALID_ARG, "vulkan: too many counters"));
    if (!g->counters || ig_vk_buffer_size(g->counters) < n * 4) {
        ig_vk_buffer *b;
        IG_TRY(scratch_new(g, n * 4, &b));
        IG_TRY(ig_vk_graph_set_error(g, ig_vk_buffer_zero(b)));
        g->counters = b;
    }
    *out = g->counters;
    return IG_OK;
}

ig_status ig_vk_rec_hazards(ig_vk_graph *g, const ig_vk_bind *b, int n) {
    if (g->err != IG_OK) return g->err;
    if (g->ended) return ig_vk_graph_set_error(g, ig_fail(IG_ERR_INVALID_ARG, "vulkan: op recorded after end"));
    bool conflict = false;
    for (int i = 0; i < n && !conflict; i++) {
        if (!b[i].part) continue;
        VkBuffer buf = b[i].part->blk->buf;
        uint64_t lo = b[i].part->offset + b[i].lo, hi = b[i].part->offset + b[i].hi;
        for (int k = 0; k < g->n_pending; k++) {
            const access *a = &g->pending[k];
            if (a->buf == buf && a->lo < hi && lo < a->hi && (a->write || b[i].write)) {
                conflict = true;
                break;
            }
        }
    }
    if (conflict) {
        full_barrier(g->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        g->stats.n_barrier++;
        g->n_pending = 0;
    }
    for (int i = 0; i < n; i++) {
        if (!b[i].part) continue;
        const ig_vk_x8_cache *c = &g->x8;
        const uint64_t lo = b[i].part->offset + b[i].lo, hi = b[i].part->offset + b[i].hi;
        if (b[i].write && c->valid && c->src->blk->buf == b[i].part->blk->buf && c->src->offset + c->lo < hi &&
            lo < c->src->offset + c->hi)
            g->x8.valid = false; /* its source is rewritten */
        if (g->n_pending == g->cap_pending) {
            int nc = g->cap_pending ? 2 * g->cap_pending : 64;
            access *np = ig_realloc_array(g->pending, (size_t)nc, sizeof *np);
            if (!np) return ig_vk_graph_set_error(g, IG_ERR_NO_MEMORY);
            g->pending = np;
            g->cap_pending = nc;
        }
        g->pending[g->n_pending++] = (access){b[i].part->blk->buf, b[i].part->offset + b[i].lo,
                                              b[i].part->offset + b[i].hi, b[i].write};
    }
    return IG_OK;
}

static ig_status alloc_set(ig_vk_graph *g, VkDescriptorSet *out) {
    ig_vk_device *d = g->dev;
    if (g->sets_left == 0) {
        VkDescriptorPool *np = ig_realloc_array(g->pools, (size_t)g->n_pools + 1, sizeof *np);
        if (!np) return IG_ERR_NO_MEMORY;
        g->pools = np;
        VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, SETS_PER_POOL * IG_VK_N_BINDINGS};
        VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                          .maxSets = SETS_PER_POOL,
                                          .poolSizeCount = 1,
                                          .pPoolSizes = &ps};
        VkResult r = ig_vk.vkCreateDescriptorPool(d->dev, &pci, NULL, &g->pools[g->n_pools]);
        if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateDescriptorPool");
        g->n_pools++;
        g->sets_left = SETS_PER_POOL;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = g->pools[g->n_pools - 1],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &d->dsl};
    VkResult r = ig_vk.vkAllocateDescriptorSets(d->dev, &ai, out);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkAllocateDescriptorSets");
    g->sets_left--;
    g->stats.n_sets++;
    return IG_OK;
}

ig_status ig_vk_rec_dispatch(ig_vk_graph *g, VkPipeline pipe, const ig_vk_part *const *parts, int n,
                             const void *pc, uint32_t pc_size, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (g->err != IG_OK) return g->err;
    ig_vk_device *d = g->dev;
    if (n + 1 > IG_VK_N_BINDINGS || pc_size > IG_VK_PUSH_BYTES)
        return ig_vk_graph_set_error(g, ig_fail(IG_ERR_INTERNAL, "vulkan: dispatch with %d bindings", n));
    if (gx == 0 || gy == 0 || gz == 0) return IG_OK;
    if (gx > d->info.max_wg_count[0] || gy > d->info.max_wg_count[1] || gz > d->info.max_wg_count[2])
        return ig_vk_graph_set_error(
            g, ig_fail(IG_ERR_UNSUPPORTED, "vulkan: grid %ux%ux%u exceeds the device limits", gx, gy, gz));
    VkDescriptorSet set;
    IG_TRY(ig_vk_graph_set_error(g, alloc_set(g, &set)));
    VkDescriptorBufferInfo bi[IG_VK_N_BINDINGS];
    VkWriteDescriptorSet w[IG_VK_N_BINDINGS];
    for (int i = 0; i < IG_VK_N_BINDINGS; i++) {
        const ig_vk_part *p = i == 0 ? ig_vk_step_part(g->step) : (i <= n ? parts[i - 1] : NULL);
        if (!p) p = &d->dummy->parts[0];
        bi[i] = (VkDescriptorBufferInfo){p->blk->buf, p->offset, p->size ? p->size : 4};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    ig_vk.vkUpdateDescriptorSets(d->dev, IG_VK_N_BINDINGS, w, 0, NULL);
    ig_vk.vkCmdBindPipeline(g->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    ig_vk.vkCmdBindDescriptorSets(g->cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &set, 0, NULL);
    if (pc_size) ig_vk.vkCmdPushConstants(g->cb, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_size, pc);
    ig_vk.vkCmdDispatch(g->cb, gx, gy, gz);
    g->stats.n_dispatch++;
    if (g->qpool && g->n_q < g->cap_q) {
        g->q_pipe[g->n_q - 1] = pipe;
        ig_vk.vkCmdWriteTimestamp(g->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g->qpool, (uint32_t)g->n_q++);
    }
    return IG_OK;
}
