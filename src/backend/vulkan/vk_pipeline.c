/* Compute pipelines: one descriptor-set layout (8 storage buffers) and one
 * pipeline layout (128 bytes of push constants) shared by every shader;
 * pipelines are created on first use per (shader, specialization) and kept
 * for the device's lifetime. Spec constant 0 is the local size of shaders
 * that take it, the others shader-specific (mat-vec: tokens per workgroup,
 * rows per row group, invocations per row group, items per loop pass). */
#include "backend/vulkan/vk_internal.h"
#include "backend/vulkan/vk_shaders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_status ig_vk_pipelines_init(ig_vk_device *d) {
    VkDescriptorSetLayoutBinding b[IG_VK_N_BINDINGS];
    for (uint32_t i = 0; i < IG_VK_N_BINDINGS; i++) {
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    }
    VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = IG_VK_N_BINDINGS,
                                           .pBindings = b};
    VkResult r = ig_vk.vkCreateDescriptorSetLayout(d->dev, &dci, NULL, &d->dsl);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateDescriptorSetLayout");
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = IG_VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &d->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    r = ig_vk.vkCreatePipelineLayout(d->dev, &lci, NULL, &d->layout);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreatePipelineLayout");
    return IG_OK;
}

void ig_vk_pipelines_free(ig_vk_device *d) {
    for (int i = 0; i < d->n_pipes; i++) ig_vk.vkDestroyPipeline(d->dev, d->pipes[i].pipe, NULL);
    free(d->pipes);
    d->pipes = NULL;
    d->n_pipes = d->cap_pipes = 0;
    if (d->layout) ig_vk.vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    if (d->dsl) ig_vk.vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
    d->layout = VK_NULL_HANDLE;
    d->dsl = VK_NULL_HANDLE;
}

const char *ig_vk_pipeline_name(const ig_vk_device *d, VkPipeline pipe) {
    for (int i = 0; i < d->n_pipes; i++)
        if (d->pipes[i].pipe == pipe) return ig_vk_shader_table[d->pipes[i].shader].name;
    return "?";
}

static int find_shader(const char *name) {
    for (int i = 0; i < ig_vk_shader_count; i++)
        if (strcmp(ig_vk_shader_table[i].name, name) == 0) return i;
    return -1;
}

ig_status ig_vk_pipeline(ig_vk_device *d, const char *name, uint32_t spec0, uint32_t spec1, VkPipeline *out) {
    const uint32_t spec[2] = {spec0, spec1};
    return ig_vk_pipeline_spec(d, name, spec, 2, out);
}

ig_status ig_vk_pipeline_spec(ig_vk_device *d, const char *name, const uint32_t *given, int n, VkPipeline *out) {
    if (n < 0 || n > IG_VK_N_SPEC) return ig_fail(IG_ERR_INTERNAL, "vulkan: %d specialization constants", n);
    uint32_t spec[IG_VK_N_SPEC] = {0};
    for (int i = 0; i < n; i++) spec[i] = given[i];
    int sh = find_shader(name);
    if (sh < 0) return ig_fail(IG_ERR_INTERNAL, "vulkan: no shader named %s", name);
    for (int i = 0; i < d->n_pipes; i++) {
        const ig_vk_pipe *p = &d->pipes[i];
        if (p->shader == sh && memcmp(p->spec, spec, sizeof spec) == 0) {
            *out = p->pipe;
            return IG_OK;
        }
    }
    if (d->n_pipes == d->cap_pipes) {
        int nc = d->cap_pipes ? 2 * d->cap_pipes : 32;
        ig_vk_pipe *np = ig_realloc_array(d->pipes, (size_t)nc, sizeof *np);
        if (!np) return IG_ERR_NO_MEMORY;
        d->pipes = np;
        d->cap_pipes = nc;
    }
    const ig_vk_shader_entry *e = &ig_vk_shader_table[sh];
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = *e->words * 4,
                                    .pCode = e->code};
    VkShaderModule mod;
    VkResult r = ig_vk.vkCreateShaderModule(d->dev, &mci, NULL, &mod);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateShaderModule");
    VkSpecializationMapEntry me[IG_VK_N_SPEC];
    for (uint32_t i = 0; i < IG_VK_N_SPEC; i++) me[i] = (VkSpecializationMapEntry){i, 4 * i, 4};
    VkSpecializationInfo si = {.mapEntryCount = IG_VK_N_SPEC, .pMapEntries = me, .dataSize = sizeof spec, .pData = spec};
    /* the KHR tensor-core matmuls map their tiles onto subgroups of 32 (and
       the probe counts them so) */
    const bool sg32 = d->cm.sg32 && (strncmp(name, "mmcmk_", 6) == 0 || strncmp(name, "mmqk_", 5) == 0 ||
                                     strncmp(name, "attn_cmk_", 9) == 0 || strcmp(name, "probe_mmak") == 0);
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = 32};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .pNext = sg32 ? &rss : NULL,
                  .flags = sg32 ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = d->layout};
    VkPipeline pipe;
    r = ig_vk.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
    ig_vk.vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) return ig_vk_fail(r, name);
    ig_vk_pipe *np = &d->pipes[d->n_pipes++];
    *np = (ig_vk_pipe){.shader = sh, .pipe = pipe};
    memcpy(np->spec, spec, sizeof spec);
    *out = pipe;
    return IG_OK;
}
