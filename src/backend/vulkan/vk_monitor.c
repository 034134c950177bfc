/* Monitoring of a Vulkan device: its memory (what ignis allocated, and
 * VK_EXT_memory_budget's usage and budget of the device-local heaps where
 * the device has the extension) and the GPU time of the engine's steps (a
 * pair of timestamps around each submitted graph, read back after its
 * fence: two queries a step, no extra submit or wait). */
#include "backend/vulkan/vk_internal.h"

#include <stdlib.h>
#include <string.h>

atomic_bool ig_vk_lost;

void ig_vk_monitor_init(ig_vk_device *d) {
    d->ts_mask = 0;
    uint32_t nq = 0;
    ig_vk.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties *qf = nq ? ig_calloc_array(nq, sizeof *qf) : NULL;
    if (qf) {
        ig_vk.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
        uint32_t bits = d->queue_family < nq ? qf[d->queue_family].timestampValidBits : 0;
        if (bits > 0 && d->timestamp_period > 0)
            d->ts_mask = bits >= 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
        free(qf);
    }

    d->memory_budget = false;
    d->get_memprops2 = NULL;
    if (d->info.api_version >= VK_API_VERSION_1_1)
        d->get_memprops2 = (PFN_vkGetPhysicalDeviceMemoryProperties2)ig_vk.vkGetInstanceProcAddr(
            d->instance, "vkGetPhysicalDeviceMemoryProperties2");
    if (!d->get_memprops2) return;
    uint32_t ne = 0;
    if (ig_vk.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &ne, NULL) != VK_SUCCESS || ne == 0) return;
    VkExtensionProperties *ext = ig_calloc_array(ne, sizeof *ext);
    if (!ext) return;
    if (ig_vk.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &ne, ext) == VK_SUCCESS)
        for (uint32_t i = 0; i < ne; i++)
            if (!strcmp(ext[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) d->memory_budget = true;
    free(ext);
}

VkQueryPool ig_vk_busy_begin(ig_vk_device *d, VkCommandBuffer cb) {
    if (!d->ts_mask || !d->tune.busy_timestamps) return VK_NULL_HANDLE;
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                 .queryCount = 2};
    VkQueryPool q = VK_NULL_HANDLE;
    if (ig_vk.vkCreateQueryPool(d->dev, &qci, NULL, &q) != VK_SUCCESS) return VK_NULL_HANDLE;
    ig_vk.vkCmdResetQueryPool(cb, q, 0, 2);
    /* when every earlier command has finished: the start of this graph's work */
    ig_vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q, 0);
    return q;
}

void ig_vk_busy_end(VkCommandBuffer cb, VkQueryPool q) {
    if (q) ig_vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q, 1);
}

void ig_vk_busy_collect(ig_vk_device *d, VkQueryPool q) {
    if (!q) return;
    uint64_t ts[2];
    /* the graph's fence has signalled: both results are available */
    VkResult r = ig_vk.vkGetQueryPoolResults(d->dev, q, 0, 2, sizeof ts, ts, sizeof ts[0], VK_QUERY_RESULT_64_BIT);
    if (r != VK_SUCCESS) return;
    uint64_t ticks = (ts[1] - ts[0]) & d->ts_mask;
    double ns = (double)ticks * (double)d->timestamp_period;
    if (ns > 0 && ns < 3.6e12) atomic_fetch_add(&d->busy_ns, (uint64_t)ns); /* below an hour a step */
}

void ig_vk_busy_free(ig_vk_device *d, VkQueryPool q) {
    if (q) ig_vk.vkDestroyQueryPool(d->dev, q, NULL);
}

void ig_vk_device_get_stats(const ig_vk_device *d, ig_vk_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (!d) return;
    out->allocated = atomic_load(&d->allocated);
    out->timestamps = d->ts_mask != 0 && d->tune.busy_timestamps;
    out->busy_ns = atomic_load(&d->busy_ns);
    out->lost = atomic_load(&ig_vk_lost);
    /* the device-local heaps (all heaps if none says so) */
    const VkPhysicalDeviceMemoryProperties *mp = &d->memprops;
    bool any_local = false;
    for (uint32_t h = 0; h < mp->memoryHeapCount; h++)
        if (mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) any_local = true;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bp = {.sType =
                                                        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                             .pNext = &bp};
    bool budget = d->memory_budget && d->get_memprops2;
    if (budget) d->get_memprops2(d->phys, &mp2);
    uint64_t used = 0, total = 0;
    for (uint32_t h = 0; h < mp->memoryHeapCount && h < VK_MAX_MEMORY_HEAPS; h++) {
        if (any_local && !(mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
        uint64_t size = budget ? bp.heapBudget[h] : mp->memoryHeaps[h].size;
        total = total + size < total ? UINT64_MAX : total + size;
        if (budget) used = used + bp.heapUsage[h] < used ? UINT64_MAX : used + bp.heapUsage[h];
    }
    out->memory_budget = budget;
    out->used = budget ? used : out->allocated;
    out->budget = total;
}
