/* Device memory: blocks of VkDeviceMemory, each with one VkBuffer spanning
 * it, from which buffers are carved at aligned offsets (a bump allocator;
 * a block is released when its last buffer is). Large parts get a block of
 * their own. Uploads on UMA devices are plain memcpy into mapped memory;
 * otherwise they go through a staging buffer. Also the per-step buffer. */
#include "backend/vulkan/vk_internal.h"

#include <stdlib.h>
#include <string.h>

#define SHARED_BLOCK_BYTES (64ull << 20)   /* blocks shared by small buffers */
#define DEDICATED_MIN_BYTES (16ull << 20)  /* parts this large get their own block */
#define STAGING_BYTES (32ull << 20)

/* Memory types per kind, in order of preference. */
int ig_vk_pick_memory(const ig_vk_device *d, int kind, uint32_t type_bits, int nth) {
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    VkMemoryPropertyFlags prefs[4];
    int np = 0;
    switch (kind) {
    case IG_VK_MEM_DEVICE:
        if (d->info.uma) prefs[np++] = DL | HV | HC;
        prefs[np++] = DL;
        prefs[np++] = HV | HC;
        break;
    case IG_VK_MEM_UPLOAD:
        prefs[np++] = DL | HV | HC;
        prefs[np++] = HV | HC;
        break;
    default: /* READBACK */
        if (d->info.uma) prefs[np++] = DL | HV | HC | CA;
        prefs[np++] = HV | HC | CA;
        prefs[np++] = HV | HC;
        break;
    }
    int seen = 0;
    for (int p = 0; p < np; p++) {
        for (uint32_t t = 0; t < d->memprops.memoryTypeCount; t++) {
            if (!(type_bits & (1u << t))) continue;
            VkMemoryPropertyFlags f = d->memprops.memoryTypes[t].propertyFlags;
            if ((f & prefs[p]) != prefs[p]) continue;
            /* device-local without host access should not pick a host-visible
             * type on discrete GPUs: prefer pure VRAM when asked for DL only */
            if (prefs[p] == DL && !d->info.uma && (f & HV)) {
                bool other = false;
                for (uint32_t u = 0; u < d->memprops.memoryTypeCount; u++)
                    if ((type_bits & (1u << u)) && (d->memprops.memoryTypes[u].propertyFlags & DL) &&
                        !(d->memprops.memoryTypes[u].propertyFlags & HV))
                        other = true;
                if (other) continue;
            }
            if (seen++ == nth) return (int)t;
        }
    }
    return -1;
}

static ig_status block_create(ig_vk_device *d, int kind, uint64_t size, bool dedicated, ig_vk_block **out) {
    *out = NULL;
    ig_vk_block *b = ig_calloc_array(1, sizeof *b);
    if (!b) return IG_ERR_NO_MEMORY;
    b->size = size;
    b->kind = kind;
    b->dedicated = dedicated;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = ig_vk.vkCreateBuffer(d->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return ig_vk_fail(r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    ig_vk.vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
    r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
    int type = -1;
    for (int nth = 0; r != VK_SUCCESS; nth++) {
        type = ig_vk_pick_memory(d, kind, req.memoryTypeBits, nth);
        if (type < 0) break;
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                   .allocationSize = req.size,
                                   .memoryTypeIndex = (uint32_t)type};
        r = ig_vk.vkAllocateMemory(d->dev, &ai, NULL, &b->mem);
    }
    if (r != VK_SUCCESS) {
        ig_vk.vkDestroyBuffer(d->dev, b->buf, NULL);
        free(b);
        if (type < 0 && r != VK_ERROR_OUT_OF_DEVICE_MEMORY && r != VK_ERROR_OUT_OF_HOST_MEMORY)
            return ig_fail(IG_ERR_BACKEND, "vulkan: no memory type for a %s buffer",
                           kind == IG_VK_MEM_DEVICE ? "device" : "host");
        return ig_fail(IG_ERR_NO_MEMORY, "vulkan: allocating %.1f MiB of device memory failed (%s)",
                       (double)size / (1 << 20), ig_vk_result_str(r));
    }
    r = ig_vk.vkBindBufferMemory(d->dev, b->buf, b->mem, 0);
    if (r == VK_SUCCESS && (d->memprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
        !(d->force_staging && kind == IG_VK_MEM_DEVICE)) {
        void *p = NULL;
        r = ig_vk.vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &p);
        b->map = p;
        b->host_cached = (d->memprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0;
    }
    if (r != VK_SUCCESS) {
        ig_vk.vkDestroyBuffer(d->dev, b->buf, NULL);
        ig_vk.vkFreeMemory(d->dev, b->mem, NULL);
        free(b);
        return ig_vk_fail(r, "binding or mapping device memory");
    }
    b->alloc_size = req.size;
    d->allocated += req.size;
    b->next = d->blocks;
    d->blocks = b;
    *out = b;
    return IG_OK;
}

static void block_destroy(ig_vk_device *d, ig_vk_block *b) {
    ig_vk_block **pp = &d->blocks;
    while (*pp && *pp != b) pp = &(*pp)->next;
    if (*pp) *pp = b->next;
    if (b->map) ig_vk.vkUnmapMemory(d->dev, b->mem);
    ig_vk.vkDestroyBuffer(d->dev, b->buf, NULL);
    ig_vk.vkFreeMemory(d->dev, b->mem, NULL);
    d->allocated -= b->alloc_size;
    free(b);
}

void ig_vk_memory_free_all(ig_vk_device *d) {
    while (d->blocks) block_destroy(d, d->blocks);
}

/* Places a part of size bytes. */
static ig_status place(ig_vk_device *d, int kind, uint64_t size, ig_vk_part *part) {
    uint64_t need;
    if (!ig_size_align(size ? size : 4, d->align, &need)) return IG_ERR_NO_MEMORY;
    if (need > d->max_block)
        return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: a buffer of %llu bytes exceeds the device's allocation limit",
                       (unsigned long long)need);
    if (need >= DEDICATED_MIN_BYTES) {
        IG_TRY(block_create(d, kind, need, true, &part->blk));
        part->offset = 0;
    } else {
        ig_vk_block *b = d->blocks;
        for (; b; b = b->next)
            if (!b->dedicated && b->kind == kind && b->size - b->used >= need) break;
        if (!b) {
            uint64_t bs = SHARED_BLOCK_BYTES < d->max_block ? SHARED_BLOCK_BYTES : d->max_block;
            if (kind != IG_VK_MEM_DEVICE) bs = 4ull << 20 > need ? 4ull << 20 : need;
            IG_TRY(block_create(d, kind, bs, false, &b));
        }
        part->blk = b;
        part->offset = b->used;
        b->used += need;
    }
    part->size = size;
    part->blk->live++;
    return IG_OK;
}

static void unplace(ig_vk_device *d, ig_vk_part *part) {
    ig_vk_block *b = part->blk;
    if (!b) return;
    part->blk = NULL;
    if (--b->live == 0) block_destroy(d, b); /* bump allocation: an empty block is not reused */
}

void ig_vk_buffer_free(ig_vk_buffer *buf) {
    if (!buf) return;
    for (int i = 0; i < buf->n_parts; i++) unplace(buf->dev, &buf->parts[i]);
    free(buf->parts);
    free(buf);
}

ig_status ig_vk_buffer_create(ig_vk_device *d, ig_vk_mem mem, uint64_t size, ig_vk_buffer **out) {
    *out = NULL;
    if (!d || (int)mem < 0 || mem > IG_VK_MEM_READBACK) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad buffer kind");
    if (size > d->max_binding)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "vulkan: a buffer of %llu bytes exceeds the %llu bytes a binding can cover on %s",
                       (unsigned long long)size, (unsigned long long)d->max_binding, d->info.name);
    ig_vk_buffer *b = ig_calloc_array(1, sizeof *b);
    ig_vk_part *p = ig_calloc_array(1, sizeof *p);
    if (!b || !p) {
        free(b);
        free(p);
        return IG_ERR_NO_MEMORY;
    }
    b->dev = d;
    b->mem = (int)mem;
    b->size = size;
    b->type = IG_TYPE_F32;
    b->ne0 = (int64_t)(size / 4);
    b->ne1 = 1;
    b->row_bytes = size;
    b->row_stride = size;
    b->parts = p;
    ig_status st = place(d, (int)mem, size, p);
    if (st != IG_OK) {
        free(p);
        free(b);
        return st;
    }
    b->n_parts = 1;
    p->row0 = 0;
    p->n_rows = 1;
    *out = b;
    return IG_OK;
}

bool ig_vk_weight_repacked(ig_dtype type) {
    return type == IG_TYPE_Q8_0 || type == IG_TYPE_Q6_K || type == IG_TYPE_Q4_0 || type == IG_TYPE_Q5_0;
}

ig_status ig_vk_weight_create(ig_vk_device *d, ig_dtype type, int64_t ne0, int64_t ne1, ig_vk_buffer **out) {
    *out = NULL;
    if (!d || !ig_dtype_known((uint32_t)type) || ne0 <= 0 || ne1 <= 0 || ne0 > (int64_t)UINT32_MAX / 2)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad weight shape %lld x %lld", (long long)ne0, (long long)ne1);
    /* No shader reads Q5_1 (a fallback type of Q5_K mixes): say so here
     * rather than fail later on a missing pipeline. */
    if (type == IG_TYPE_Q5_1)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "vulkan: %s weights are not supported by the Vulkan backend (the CPU backend runs them)",
                       ig_dtype_name(type));
    size_t rb;
    if (!ig_dtype_row_bytes(type, ne0, &rb))
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: %lld elements are not whole %s blocks", (long long)ne0,
                       ig_dtype_name(type));
    const uint64_t stride = ((uint64_t)rb + 15) & ~(uint64_t)15;
    if (stride > d->max_weight_part)
        return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: one weight row (%zu bytes) exceeds a binding", rb);
    uint64_t rows_per = d->max_weight_part / stride;
    /* keep parts below 2^31 16-bit words so shader indices fit in 32 bits */
    if (rows_per * stride > (1ull << 32) - 256) rows_per = ((1ull << 32) - 256) / stride;
    int64_t n_parts = (ne1 + (int64_t)rows_per - 1) / (int64_t)rows_per;
    ig_vk_buffer *b = ig_calloc_array(1, sizeof *b);
    ig_vk_part *parts = ig_calloc_array((size_t)n_parts, sizeof *parts);
    if (!b || !parts) {
        free(b);
        free(parts);
        return IG_ERR_NO_MEMORY;
    }
    b->dev = d;
    b->mem = IG_VK_MEM_DEVICE;
    b->type = type;
    b->ne0 = ne0;
    b->ne1 = ne1;
    b->row_bytes = rb;
    b->row_stride = stride;
    b->size = (uint64_t)rb * (uint64_t)ne1;
    b->is_weight = true;
    b->parts = parts;
    for (int64_t i = 0; i < n_parts; i++) {
        int64_t r0 = i * (int64_t)rows_per;
        int64_t nr = ne1 - r0 < (int64_t)rows_per ? ne1 - r0 : (int64_t)rows_per;
        parts[i].row0 = r0;
        parts[i].n_rows = nr;
        ig_status st = place(d, IG_VK_MEM_DEVICE, (uint64_t)nr * stride, &parts[i]);
        if (st != IG_OK) {
            ig_vk_buffer_free(b);
            return st;
        }
        b->n_parts = (int)i + 1;
    }
    *out = b;
    return IG_OK;
}

uint64_t ig_vk_buffer_size(const ig_vk_buffer *buf) { return buf->size; }
int ig_vk_buffer_n_parts(const ig_vk_buffer *buf) { return buf->n_parts; }

void *ig_vk_buffer_host_ptr(const ig_vk_buffer *buf) {
    if (!buf || buf->n_parts != 1 || !buf->parts[0].blk->map) return NULL;
    return buf->parts[0].blk->map + buf->parts[0].offset;
}

bool ig_vk_buffer_host_cached(const ig_vk_buffer *buf) {
    return ig_vk_buffer_host_ptr(buf) && buf->parts[0].blk->host_cached;
}

/* ---- transfers ---- */

ig_status ig_vk_transfer(ig_vk_device *d, void (*record)(VkCommandBuffer cb, void *user), void *user) {
    VkResult r = ig_vk.vkResetCommandBuffer(d->xfer_cb, 0);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    r = ig_vk.vkBeginCommandBuffer(d->xfer_cb, &bi);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkBeginCommandBuffer");
    /* earlier shader / host work before this transfer, this transfer before
     * later host reads */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    ig_vk.vkCmdPipelineBarrier(d->xfer_cb,
                               VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT |
                                   VK_PIPELINE_STAGE_TRANSFER_BIT,
                               VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    record(d->xfer_cb, user);
    VkMemoryBarrier mb2 = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT |
                                            VK_ACCESS_SHADER_WRITE_BIT};
    ig_vk.vkCmdPipelineBarrier(d->xfer_cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                               VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb2,
                               0, NULL, 0, NULL);
    r = ig_vk.vkEndCommandBuffer(d->xfer_cb);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &d->xfer_cb};
    r = ig_vk.vkResetFences(d->dev, 1, &d->xfer_fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkResetFences");
    r = ig_vk.vkQueueSubmit(d->queue, 1, &si, d->xfer_fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkQueueSubmit (transfer)");
    r = ig_vk.vkWaitForFences(d->dev, 1, &d->xfer_fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkWaitForFences (transfer)");
    return IG_OK;
}

typedef struct copy_job {
    VkBuffer src, dst;
    VkBufferCopy region;
} copy_job;

static void rec_copy(VkCommandBuffer cb, void *user) {
    copy_job *j = user;
    ig_vk.vkCmdCopyBuffer(cb, j->src, j->dst, 1, &j->region);
}

typedef struct fill_job {
    VkBuffer buf;
    uint64_t offset, size;
} fill_job;

static void rec_fill(VkCommandBuffer cb, void *user) {
    fill_job *j = user;
    ig_vk.vkCmdFillBuffer(cb, j->buf, j->offset, j->size, 0);
}

static ig_status staging(ig_vk_device *d) {
    if (d->staging) return IG_OK;
    return ig_vk_buffer_create(d, IG_VK_MEM_UPLOAD, STAGING_BYTES < d->max_binding ? STAGING_BYTES : d->max_binding,
                               &d->staging);
}

static ig_status check_range(const ig_vk_buffer *buf, uint64_t offset, uint64_t size) {
    if (offset > buf->size || size > buf->size - offset)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: range %llu+%llu outside a buffer of %llu bytes",
                       (unsigned long long)offset, (unsigned long long)size, (unsigned long long)buf->size);
    return IG_OK;
}

/* Calls fn on each (part, offset within part, length, position in data). */
typedef ig_status (*span_fn)(ig_vk_device *d, const ig_vk_part *p, uint64_t off, uint64_t len, uint64_t pos,
                             void *user);

static ig_status for_spans(const ig_vk_buffer *buf, uint64_t offset, uint64_t size, span_fn fn, void *user) {
    uint64_t part_start = 0, pos = 0;
    for (int i = 0; i < buf->n_parts && size > 0; i++) {
        const ig_vk_part *p = &buf->parts[i];
        uint64_t part_end = part_start + p->size;
        if (offset < part_end) {
            uint64_t off = offset - part_start;
            uint64_t len = p->size - off < size ? p->size - off : size;
            IG_TRY(fn(buf->dev, p, off, len, pos, user));
            offset += len;
            size -= len;
            pos += len;
        }
        part_start = part_end;
    }
    return IG_OK;
}

static ig_status span_write(ig_vk_device *d, const ig_vk_part *p, uint64_t off, uint64_t len, uint64_t pos,
                            void *user) {
    const uint8_t *src = (const uint8_t *)user + pos;
    if (p->blk->map) {
        memcpy(p->blk->map + p->offset + off, src, len);
        return IG_OK;
    }
    IG_TRY(staging(d));
    ig_vk_part *sp = &d->staging->parts[0];
    while (len > 0) {
        uint64_t n = len < sp->size ? len : sp->size;
        memcpy(sp->blk->map + sp->offset, src, n);
        copy_job j = {sp->blk->buf, p->blk->buf, {sp->offset, p->offset + off, n}};
        IG_TRY(ig_vk_transfer(d, rec_copy, &j));
        src += n;
        off += n;
        len -= n;
    }
    return IG_OK;
}

static ig_status span_read(ig_vk_device *d, const ig_vk_part *p, uint64_t off, uint64_t len, uint64_t pos,
                           void *user) {
    uint8_t *dst = (uint8_t *)user + pos;
    if (p->blk->map) {
        memcpy(dst, p->blk->map + p->offset + off, len);
        return IG_OK;
    }
    IG_TRY(staging(d));
    ig_vk_part *sp = &d->staging->parts[0];
    while (len > 0) {
        uint64_t n = len < sp->size ? len : sp->size;
        copy_job j = {p->blk->buf, sp->blk->buf, {p->offset + off, sp->offset, n}};
        IG_TRY(ig_vk_transfer(d, rec_copy, &j));
        memcpy(dst, sp->blk->map + sp->offset, n);
        dst += n;
        off += n;
        len -= n;
    }
    return IG_OK;
}

/* ---- weight rows: ggml layout <-> device layout ---- */

/* One row from ggml's layout (src, row_bytes) to the device's (dst, stride
 * bytes, padding zeroed), or back when unpack. */
static void pack_row(const ig_vk_buffer *w, const uint8_t *src, uint8_t *dst, bool unpack) {
    const uint64_t rb = w->row_bytes;
    if (w->type == IG_TYPE_Q8_0) {
        const uint64_t nb = rb / 34;
        for (uint64_t b = 0; b < nb; b++) {
            const uint64_t g = b * 34, qs = b * 32, dd = nb * 32 + b * 2;
            if (!unpack) {
                memcpy(dst + qs, src + g + 2, 32);
                memcpy(dst + dd, src + g, 2);
            } else {
                memcpy(dst + g + 2, src + qs, 32);
                memcpy(dst + g, src + dd, 2);
            }
        }
    } else if (w->type == IG_TYPE_Q4_0 || w->type == IG_TYPE_Q5_0) {
        const bool q5 = w->type == IG_TYPE_Q5_0;
        const uint64_t bs = q5 ? 22 : 18, nb = rb / bs;
        for (uint64_t b = 0; b < nb; b++) {
            const uint64_t g = b * bs;
            /* fields: d (2 bytes), [qh (4)], qs (16) -> qs, [qh], d */
            const uint64_t off[3] = {b * 16, nb * 16 + b * 4, nb * (q5 ? 20 : 16) + b * 2};
            const uint64_t goff[3] = {q5 ? 6 : 2, 2, 0}, len[3] = {16, q5 ? 4 : 0, 2};
            for (int f = 0; f < 3; f++) {
                if (!len[f]) continue;
                if (!unpack) memcpy(dst + off[f], src + g + goff[f], len[f]);
                else memcpy(dst + g + goff[f], src + off[f], len[f]);
            }
        }
    } else if (w->type == IG_TYPE_Q6_K) {
        const uint64_t nb = rb / 210;
        for (uint64_t b = 0; b < nb; b++) {
            const uint64_t g = b * 210;
            const uint64_t off[4] = {b * 128, nb * 128 + b * 64, nb * 192 + b * 16, nb * 208 + b * 2};
            const uint64_t goff[4] = {0, 128, 192, 208}, len[4] = {128, 64, 16, 2};
            for (int f = 0; f < 4; f++) {
                if (!unpack) memcpy(dst + off[f], src + g + goff[f], len[f]);
                else memcpy(dst + g + goff[f], src + off[f], len[f]);
            }
        }
    } else {
        memcpy(dst, src, rb);
    }
    if (!unpack && w->row_stride > rb) memset(dst + rb, 0, w->row_stride - rb);
}

/* Rows [r0, r0 + n) of a weight from / to host memory in ggml's layout. */
static ig_status weight_rows(const ig_vk_buffer *w, int64_t r0, int64_t n, uint8_t *host, bool read) {
    ig_vk_device *d = w->dev;
    ig_status st = IG_OK;
    for (int i = 0; i < w->n_parts && n > 0 && st == IG_OK; i++) {
        const ig_vk_part *p = &w->parts[i];
        if (r0 < p->row0 || r0 >= p->row0 + p->n_rows) continue;
        int64_t k = p->row0 + p->n_rows - r0 < n ? p->row0 + p->n_rows - r0 : n;
        const uint64_t off = (uint64_t)(r0 - p->row0) * w->row_stride;
        if (p->blk->map) {
            uint8_t *m = p->blk->map + p->offset + off;
            for (int64_t r = 0; r < k; r++)
                pack_row(w, read ? m + r * w->row_stride : host + r * w->row_bytes,
                         read ? host + r * w->row_bytes : m + r * w->row_stride, read);
        } else {
            st = staging(d);
            if (st != IG_OK) break;
            const ig_vk_part *sp = &d->staging->parts[0];
            const int64_t per = (int64_t)(sp->size / w->row_stride);
            if (per < 1) {
                st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: a weight row exceeds the staging buffer");
                break;
            }
            for (int64_t r = 0; r < k && st == IG_OK; r += per) {
                const int64_t c = k - r < per ? k - r : per;
                uint8_t *sm = sp->blk->map + sp->offset;
                copy_job j = {sp->blk->buf, p->blk->buf,
                              {sp->offset, p->offset + off + (uint64_t)r * w->row_stride,
                               (uint64_t)c * w->row_stride}};
                if (read) {
                    j = (copy_job){p->blk->buf, sp->blk->buf, {j.region.dstOffset, sp->offset, j.region.size}};
                    st = ig_vk_transfer(d, rec_copy, &j);
                    for (int64_t q = 0; q < c && st == IG_OK; q++)
                        pack_row(w, sm + q * w->row_stride, host + (r + q) * w->row_bytes, true);
                } else {
                    for (int64_t q = 0; q < c; q++)
                        pack_row(w, host + (r + q) * w->row_bytes, sm + q * w->row_stride, false);
                    st = ig_vk_transfer(d, rec_copy, &j);
                }
            }
        }
        host += (size_t)k * w->row_bytes;
        r0 += k;
        n -= k;
    }
    return st;
}

static ig_status weight_access(const ig_vk_buffer *w, uint64_t offset, uint8_t *host, uint64_t size, bool read) {
    if (offset % w->row_bytes == 0 && size % w->row_bytes == 0)
        return weight_rows(w, (int64_t)(offset / w->row_bytes), (int64_t)(size / w->row_bytes), host, read);
    /* a byte range inside rows: go through the whole rows that cover it */
    const int64_t r0 = (int64_t)(offset / w->row_bytes);
    const int64_t r1 = (int64_t)((offset + size + w->row_bytes - 1) / w->row_bytes);
    uint8_t *tmp = ig_malloc((size_t)(r1 - r0) * w->row_bytes);
    if (!tmp) return IG_ERR_NO_MEMORY;
    const uint64_t skip = offset - (uint64_t)r0 * w->row_bytes;
    ig_status st = weight_rows(w, r0, r1 - r0, tmp, true);
    if (st == IG_OK && read) memcpy(host, tmp + skip, size);
    if (st == IG_OK && !read) {
        memcpy(tmp + skip, host, size);
        st = weight_rows(w, r0, r1 - r0, tmp, false);
    }
    free(tmp);
    return st;
}

ig_status ig_vk_buffer_write(ig_vk_buffer *buf, uint64_t offset, const void *src, uint64_t size) {
    if (!buf || (!src && size)) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad write");
    IG_TRY(check_range(buf, offset, size));
    if (buf->is_weight) return weight_access(buf, offset, (uint8_t *)(uintptr_t)src, size, false);
    return for_spans(buf, offset, size, span_write, (void *)(uintptr_t)src);
}

ig_status ig_vk_buffer_read(const ig_vk_buffer *buf, uint64_t offset, void *dst, uint64_t size) {
    if (!buf || (!dst && size)) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad read");
    IG_TRY(check_range(buf, offset, size));
    if (buf->is_weight) return weight_access(buf, offset, dst, size, true);
    return for_spans(buf, offset, size, span_read, dst);
}

ig_status ig_vk_buffer_zero(ig_vk_buffer *buf) {
    if (!buf) return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad buffer");
    for (int i = 0; i < buf->n_parts; i++) {
        ig_vk_part *p = &buf->parts[i];
        if (p->blk->map) {
            memset(p->blk->map + p->offset, 0, p->size);
        } else {
            uint64_t sz = (p->size + 3) & ~(uint64_t)3; /* fill works on words; parts are padded */
            fill_job j = {p->blk->buf, p->offset, sz};
            IG_TRY(ig_vk_transfer(buf->dev, rec_fill, &j));
        }
    }
    return IG_OK;
}

/* ---- per-step values ---- */

struct ig_vk_step {
    ig_vk_device *dev;
    ig_vk_buffer *buf;
    int cap;
    int head_cap;
    int busy; /* graphs submitted and not yet waited for */
};

void ig_vk_step_busy(ig_vk_step *step, int delta) { step->busy += delta; }

ig_status ig_vk_step_create(ig_vk_device *dev, int max_tokens, ig_vk_step **out) {
    *out = NULL;
    if (!dev || max_tokens <= 0 || max_tokens > (1 << 24))
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad step capacity %d", max_tokens);
    ig_vk_step *s = ig_calloc_array(1, sizeof *s);
    if (!s) return IG_ERR_NO_MEMORY;
    s->dev = dev;
    s->cap = max_tokens;
    s->head_cap = max_tokens;
    ig_status st = ig_vk_buffer_create(dev, IG_VK_MEM_UPLOAD, (uint64_t)(5 + 4 * (uint64_t)max_tokens) * 4, &s->buf);
    if (st != IG_OK) {
        free(s);
        return st;
    }
    int32_t *w = ig_vk_buffer_host_ptr(s->buf);
    if (!w) {
        ig_vk_step_free(s);
        return ig_fail(IG_ERR_BACKEND, "vulkan: the step buffer is not host-visible");
    }
    memset(w, 0, (size_t)ig_vk_buffer_size(s->buf));
    w[1] = max_tokens;
    *out = s;
    return IG_OK;
}

void ig_vk_step_free(ig_vk_step *step) {
    if (!step) return;
    ig_vk_buffer_free(step->buf);
    free(step);
}

int ig_vk_step_capacity(const ig_vk_step *step) { return step->cap; }
int ig_vk_step_head_cap(const ig_vk_step *step) { return step->head_cap; }

ig_status ig_vk_step_set_head_cap(ig_vk_step *step, int cap) {
    if (!step || cap < 1 || cap > step->cap)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad head cap %d", cap);
    step->head_cap = cap;
    return IG_OK;
}

const ig_vk_part *ig_vk_step_part(const ig_vk_step *step) { return &step->buf->parts[0]; }

ig_status ig_vk_step_set(ig_vk_step *step, int n_tokens, const int32_t *tokens, const int32_t *pos,
                         const int32_t *seq, int n_out, const int32_t *out_idx) {
    if (!step || n_tokens < 0 || n_tokens > step->cap || n_out < 0 || n_out > n_tokens ||
        (n_out > 0 && !out_idx))
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad step (%d tokens, %d outputs, capacity %d)", n_tokens,
                       n_out, step ? step->cap : 0);
    if (step->busy)
        return ig_fail(IG_ERR_INVALID_ARG, "vulkan: step values changed while a graph using them runs");
    for (int j = 0; j < n_out; j++)
        if (out_idx[j] < 0 || out_idx[j] >= n_tokens)
            return ig_fail(IG_ERR_INVALID_ARG, "vulkan: output row %d out of range", (int)out_idx[j]);
    int32_t *w = ig_vk_buffer_host_ptr(step->buf);
    const size_t cap = (size_t)step->cap, n = (size_t)n_tokens;
    w[0] = n_tokens;
    w[1] = step->cap;
    w[2] = n_out;
    w[3] = n_out < step->head_cap ? n_out : step->head_cap;
    if (tokens) memcpy(w + 4, tokens, n * 4);
    else memset(w + 4, 0, n * 4);
    if (pos) memcpy(w + 4 + cap, pos, n * 4);
    else memset(w + 4 + cap, 0, n * 4);
    if (seq) memcpy(w + 4 + 2 * cap, seq, n * 4);
    else memset(w + 4 + 2 * cap, 0, n * 4);
    if (n_out) memcpy(w + 4 + 3 * cap, out_idx, (size_t)n_out * 4);
    /* runs of consecutive tokens of one sequence: the attention reads it to
       choose between its tiled (prefill) and split (decoding) kernels */
    int32_t runs = 0;
    for (size_t t = 0; t < n; t++) runs += t == 0 || !seq || seq[t] != seq[t - 1];
    w[4 + 4 * cap] = runs;
    return IG_OK;
}
