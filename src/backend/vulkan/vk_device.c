/* Physical-device queries, device selection and logical-device creation. */
#include "backend/vulkan/vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* VK_KHR_cooperative_matrix is newer than Debian 12's headers (1.3.239):
 * the few definitions needed to query it, from the Vulkan registry. */
#define IG_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define IG_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
typedef struct ig_vk_coopmat_features_khr {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} ig_vk_coopmat_features_khr;
typedef struct ig_vk_coopmat_props_khr {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    int32_t AType, BType, CType, ResultType; /* VkComponentTypeKHR (= NV values) */
    VkBool32 saturatingAccumulation;
    int32_t scope;                           /* VkScopeKHR: 3 = subgroup */
} ig_vk_coopmat_props_khr;
typedef VkResult(VKAPI_PTR *ig_pfn_coopmat_khr)(VkPhysicalDevice, uint32_t *, ig_vk_coopmat_props_khr *);

bool ig_vk_compiler_coopmat_khr(void) { return IG_VK_GLSL_COOPMAT_KHR != 0; }
bool ig_vk_compiler_coopmat_nv(void) { return IG_VK_GLSL_COOPMAT_NV != 0; }
bool ig_vk_compiler_int_dot(void) { return IG_VK_GLSL_INT_DOT != 0; }

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static const char *component_name(int32_t c) {
    switch (c) {
    case 0: return "f16";
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "s8";
    case 4: return "s16";
    case 5: return "s32";
    case 6: return "s64";
    case 7: return "u8";
    case 8: return "u16";
    case 9: return "u32";
    case 10: return "u64";
    case 1000141000: return "bf16";
    default: return "?";
    }
}

static void append(char *dst, size_t cap, const char *s) {
    size_t n = strlen(dst);
    if (n + 1 < cap) snprintf(dst + n, cap - n, "%s", s);
}

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return true;
    return false;
}

/* The device's KHR cooperative-matrix properties (malloc'ed; NULL and *n 0
 * when it has none or the query fails). */
static ig_vk_coopmat_props_khr *khr_props(VkPhysicalDevice pd, uint32_t *n) {
    *n = 0;
    if (!ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) return NULL;
    ig_pfn_coopmat_khr fn;
    PFN_vkVoidFunction v = ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR;
    memcpy(&fn, &v, sizeof fn);
    uint32_t count = 0;
    if (fn(pd, &count, NULL) != VK_SUCCESS || count == 0) return NULL;
    ig_vk_coopmat_props_khr *p = calloc(count, sizeof *p);
    if (!p) return NULL;
    for (uint32_t i = 0; i < count; i++) p[i].sType = IG_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    VkResult r = fn(pd, &count, p);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(p);
        return NULL;
    }
    *n = count;
    return p;
}

/* Whether KHR properties p[0..n) hold M x N x K with A and B of component
 * type ab, C and the result of cd, in subgroup scope. */
static bool khr_shape(const ig_vk_coopmat_props_khr *p, uint32_t n, uint32_t m, uint32_t nn, uint32_t k, int32_t ab,
                      int32_t cd) {
    for (uint32_t i = 0; i < n; i++)
        if (p[i].MSize == m && p[i].NSize == nn && p[i].KSize == k && p[i].AType == ab && p[i].BType == ab &&
            p[i].CType == cd && p[i].ResultType == cd && !p[i].saturatingAccumulation && p[i].scope == 3)
            return true;
    return false;
}

/* The shapes text of `ignis devices`: KHR's properties kp[0..kn) where the
 * device has the extension, else NV's. */
static void coopmat_shapes(VkPhysicalDevice pd, ig_vk_device_info *info, const ig_vk_coopmat_props_khr *kp,
                           uint32_t kn) {
    char *out = info->coopmat_shapes;
    size_t cap = sizeof info->coopmat_shapes;
    out[0] = 0;
    if (info->coopmat_khr && ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) {
        for (uint32_t i = 0; i < kn; i++) {
            if (kp[i].scope != 3) continue;
            char s[64];
            snprintf(s, sizeof s, "%s%s %ux%ux%u->%s", out[0] ? ", " : "", component_name(kp[i].AType), kp[i].MSize,
                     kp[i].NSize, kp[i].KSize, component_name(kp[i].ResultType));
            append(out, cap, s);
        }
    } else if (info->coopmat_nv && ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) {
        uint32_t n = 0;
        if (ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, NULL) != VK_SUCCESS || n == 0)
            return;
        VkCooperativeMatrixPropertiesNV *p = calloc(n, sizeof *p);
        if (!p) return;
        for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
        if (ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, p) == VK_SUCCESS) {
            for (uint32_t i = 0; i < n; i++) {
                char s[64];
                snprintf(s, sizeof s, "%s%s %ux%ux%u->%s", out[0] ? ", " : "", component_name((int32_t)p[i].AType),
                         p[i].MSize, p[i].NSize, p[i].KSize, component_name((int32_t)p[i].DType));
                append(out, cap, s);
            }
        }
        free(p);
    }
}

/* Whether the device has NV cooperative matrices of this shape and these
 * types (A and B ab, C and D cd) in subgroup scope. */
static bool nv_shape(VkPhysicalDevice pd, uint32_t m, uint32_t n, uint32_t k, VkComponentTypeNV ab,
                     VkComponentTypeNV cd) {
    if (!ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) return false;
    uint32_t count = 0;
    if (ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &count, NULL) != VK_SUCCESS || count == 0) return false;
    VkCooperativeMatrixPropertiesNV *p = calloc(count, sizeof *p);
    if (!p) return false;
    for (uint32_t i = 0; i < count; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    bool ok = false;
    if (ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &count, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < count; i++)
            if (p[i].MSize == m && p[i].NSize == n && p[i].KSize == k && p[i].AType == ab && p[i].BType == ab &&
                p[i].CType == cd && p[i].DType == cd && p[i].scope == VK_SCOPE_SUBGROUP_NV)
                ok = true;
    free(p);
    return ok;
}

void ig_vk_query_device(VkPhysicalDevice pd, int index, uint32_t instance_api, ig_vk_device_info *info) {
    memset(info, 0, sizeof *info);
    info->index = index;
    VkPhysicalDeviceProperties props;
    ig_vk.vkGetPhysicalDeviceProperties(pd, &props);
    snprintf(info->name, sizeof info->name, "%s", props.deviceName);
    info->type = type_name(props.deviceType);
    info->vendor_id = props.vendorID;
    info->device_id = props.deviceID;
    uint32_t api = props.apiVersion < instance_api ? props.apiVersion : instance_api;
    info->api_version = props.apiVersion;

    uint32_t n_ext = 0;
    VkExtensionProperties *ext = NULL;
    if (ig_vk.vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, NULL) == VK_SUCCESS && n_ext) {
        ext = calloc(n_ext, sizeof *ext);
        if (!ext || ig_vk.vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, ext) != VK_SUCCESS)
            n_ext = 0;
    }
    bool v12 = api >= VK_API_VERSION_1_2, v13 = api >= VK_API_VERSION_1_3;
    bool has_maint4 = v13 || has_ext(ext, n_ext, "VK_KHR_maintenance4");
    bool has_driver = v12 || has_ext(ext, n_ext, "VK_KHR_driver_properties");
    bool has_f16i8 = v12 || has_ext(ext, n_ext, "VK_KHR_shader_float16_int8");
    bool has_8bit = v12 || has_ext(ext, n_ext, "VK_KHR_8bit_storage");
    bool has_sgsc = v13 || has_ext(ext, n_ext, "VK_EXT_subgroup_size_control");
    bool has_idot = v13 || has_ext(ext, n_ext, "VK_KHR_shader_integer_dot_product");
    bool has_vkmm = v12 || has_ext(ext, n_ext, "VK_KHR_vulkan_memory_model");
    info->coopmat_khr = has_ext(ext, n_ext, "VK_KHR_cooperative_matrix");
    info->coopmat_nv = has_ext(ext, n_ext, "VK_NV_cooperative_matrix");
    info->exec_props = has_ext(ext, n_ext, "VK_KHR_pipeline_executable_properties");

    /* properties */
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = &sg};
    VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlProperties sgsc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceShaderIntegerDotProductProperties idot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    void *chain = &m3;
    if (has_maint4) { m4.pNext = chain; chain = &m4; }
    if (has_driver) { drv.pNext = chain; chain = &drv; }
    if (has_sgsc) { sgsc.pNext = chain; chain = &sgsc; }
    if (has_idot) { idot.pNext = chain; chain = &idot; }
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = chain};
    ig_vk.vkGetPhysicalDeviceProperties2(pd, &p2);

    if (has_driver) snprintf(info->driver, sizeof info->driver, "%.120s %.120s", drv.driverName, drv.driverInfo);
    info->subgroup_size = sg.subgroupSize;
    info->subgroup_min = info->subgroup_max = sg.subgroupSize;
    if (has_sgsc && sgsc.minSubgroupSize) {
        info->subgroup_min = sgsc.minSubgroupSize;
        info->subgroup_max = sgsc.maxSubgroupSize;
        info->subgroup_size_control = (sgsc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
        info->subgroup_size_control_ext = !v13;
    }
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    info->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (sg.supportedOperations & need) == need;
    info->subgroup_shuffle = info->subgroup_arith && (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    info->max_storage_buffer_range = props.limits.maxStorageBufferRange;
    info->max_memory_allocation_size = m3.maxMemoryAllocationSize;
    info->max_buffer_size = has_maint4 && m4.maxBufferSize ? m4.maxBufferSize : m3.maxMemoryAllocationSize;
    info->min_storage_offset_align = (uint32_t)props.limits.minStorageBufferOffsetAlignment;
    info->max_push_constants = props.limits.maxPushConstantsSize;
    info->max_shared_memory = props.limits.maxComputeSharedMemorySize;
    info->max_wg_invocations = props.limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) info->max_wg_count[i] = props.limits.maxComputeWorkGroupCount[i];
    info->int_dot_accel = has_idot && idot.integerDotProduct4x8BitPackedSignedAccelerated;
    info->int_dot_ext = !v13; /* enabled through the extension before 1.3 */

    /* features */
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDevice8BitStorageFeatures s8 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures idf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceVulkanMemoryModelFeatures mmf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    chain = &s16;
    if (has_8bit) { s8.pNext = chain; chain = &s8; }
    if (has_f16i8) { f16.pNext = chain; chain = &f16; }
    if (has_idot) { idf.pNext = chain; chain = &idf; }
    if (has_sgsc) { sgf.pNext = chain; chain = &sgf; }
    if (has_vkmm) { mmf.pNext = chain; chain = &mmf; }
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = chain};
    ig_vk.vkGetPhysicalDeviceFeatures2(pd, &f2);
    info->storage16 = s16.storageBuffer16BitAccess;
    info->storage8 = has_8bit && s8.storageBuffer8BitAccess;
    info->fp16 = has_f16i8 && f16.shaderFloat16;
    info->int8 = has_f16i8 && f16.shaderInt8;
    info->int_dot = has_idot && idf.shaderIntegerDotProduct;
    info->int_dot_accel = info->int_dot && info->int_dot_accel;
    info->subgroup_size_control = info->subgroup_size_control && sgf.subgroupSizeControl && sgf.computeFullSubgroups;
    info->vulkan_memory_model = has_vkmm && mmf.vulkanMemoryModel;
    info->vulkan_memory_model_ext = !v12;

    /* memory */
    VkPhysicalDeviceMemoryProperties mp;
    ig_vk.vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    info->n_heaps = (int)(mp.memoryHeapCount < IG_VK_MAX_HEAPS ? mp.memoryHeapCount : IG_VK_MAX_HEAPS);
    for (int h = 0; h < info->n_heaps; h++) {
        info->heaps[h].size = mp.memoryHeaps[h].size;
        info->heaps[h].device_local = (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t t = 0; t < mp.memoryTypeCount; t++) {
        uint32_t h = mp.memoryTypes[t].heapIndex;
        if (h < IG_VK_MAX_HEAPS && (mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            info->heaps[h].host_visible = true;
    }
    /* UMA: an integrated or CPU device whose device-local memory is host-visible */
    if (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
        props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
        for (uint32_t t = 0; t < mp.memoryTypeCount; t++)
            if ((mp.memoryTypes[t].propertyFlags & (hv | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) ==
                (hv | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
                info->uma = true;
    }
    uint32_t n_khr = 0;
    ig_vk_coopmat_props_khr *khr = info->coopmat_khr ? khr_props(pd, &n_khr) : NULL;
    coopmat_shapes(pd, info, khr, n_khr);
    info->coopmat_nv_16x8x16 =
        info->coopmat_nv && nv_shape(pd, 16, 8, 16, VK_COMPONENT_TYPE_FLOAT16_NV, VK_COMPONENT_TYPE_FLOAT32_NV);
    info->coopmat_nv_s8_16x8x32 =
        info->coopmat_nv && nv_shape(pd, 16, 8, 32, VK_COMPONENT_TYPE_SINT8_NV, VK_COMPONENT_TYPE_SINT32_NV);
    info->coopmat_khr_16x16x16 = khr_shape(khr, n_khr, 16, 16, 16, 0 /* f16 */, 1 /* f32 */);
    info->coopmat_khr_s8_16x16x32 = khr_shape(khr, n_khr, 16, 16, 32, 3 /* s8 */, 5 /* s32 */);
    free(khr);

    /* requirements */
    info->usable = true;
    if (props.apiVersion < VK_API_VERSION_1_1 || instance_api < VK_API_VERSION_1_1)
        snprintf(info->why_not, sizeof info->why_not, "needs Vulkan 1.1");
    else if (!info->storage16)
        snprintf(info->why_not, sizeof info->why_not, "no storageBuffer16BitAccess");
    else if (!info->subgroup_arith)
        snprintf(info->why_not, sizeof info->why_not, "no subgroup arithmetic in compute shaders");
    else if (info->subgroup_size < 4)
        snprintf(info->why_not, sizeof info->why_not, "subgroup size %u < 4", info->subgroup_size);
    else if (info->max_shared_memory < 24 * 1024)
        snprintf(info->why_not, sizeof info->why_not, "less than 24 KiB of shared memory");
    else if (info->max_wg_invocations < 256)
        snprintf(info->why_not, sizeof info->why_not, "workgroups of 256 not supported");
    else if (info->max_push_constants < IG_VK_PUSH_BYTES)
        snprintf(info->why_not, sizeof info->why_not, "push constants < 128 bytes");
    if (info->why_not[0]) info->usable = false;
    free(ext);
}

ig_status ig_vk_list_devices(ig_vk_device_info **out, int *n) {
    *out = NULL;
    *n = 0;
    VkInstance inst;
    uint32_t api;
    IG_TRY(ig_vk_instance_acquire(&inst, &api));
    uint32_t count = 0;
    VkResult r = ig_vk.vkEnumeratePhysicalDevices(inst, &count, NULL);
    ig_status st = IG_OK;
    VkPhysicalDevice *pds = NULL;
    if (r != VK_SUCCESS) { st = ig_vk_fail(r, "vkEnumeratePhysicalDevices"); goto done; }
    if (count == 0) goto done;
    pds = ig_calloc_array(count, sizeof *pds);
    ig_vk_device_info *infos = ig_calloc_array(count, sizeof *infos);
    if (!pds || !infos) { free(infos); st = IG_ERR_NO_MEMORY; goto done; }
    r = ig_vk.vkEnumeratePhysicalDevices(inst, &count, pds);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(infos);
        st = ig_vk_fail(r, "vkEnumeratePhysicalDevices");
        goto done;
    }
    for (uint32_t i = 0; i < count; i++) ig_vk_query_device(pds[i], (int)i, api, &infos[i]);
    *out = infos;
    *n = (int)count;
done:
    free(pds);
    ig_vk_instance_release();
    return st;
}

/* Tensor cores: NV cooperative matrices (16 x 8 fragments) and KHR ones
 * (16 x 16: AMD's RDNA3 and Intel have only these), each where the device
 * and the compiler have them; where both are there, the matmuls choose per
 * tile (vk_ops.c). KHR pipelines run in subgroups of 32, required where
 * they are not the default, and declare the Vulkan memory model. The
 * prefill attention and the int8 matmul (s8 products of 16 x 8 x 32, NV,
 * or 16 x 16 x 32, KHR) choose per call where both are there (vk_ops.c). */
ig_vk_coopmat_choice ig_vk_coopmat_choose(const ig_vk_device_info *info, bool glsl_nv, bool glsl_khr,
                                          ig_vk_coopmat_wants w) {
    ig_vk_coopmat_choice c = {0};
    if (!w.any || !info->fp16 || info->max_shared_memory < 40 * 1024) return c;
    const bool sg32 = info->subgroup_size == 32 ||
                      (info->subgroup_size_control && info->subgroup_min <= 32 && info->subgroup_max >= 32);
    c.nv = w.ext != IG_VK_COOPMAT_KHR && glsl_nv && info->coopmat_nv_16x8x16 && info->subgroup_size == 32;
    c.khr = w.ext != IG_VK_COOPMAT_NV && glsl_khr && info->coopmat_khr_16x16x16 && sg32 && info->vulkan_memory_model;
    c.f16 = c.nv || c.khr;
    c.sg32 = c.khr && info->subgroup_size != 32;
    c.attn = (c.nv || c.khr) && w.attn && info->subgroup_shuffle;
    c.attn_nv = c.attn && c.nv;
    c.attn_khr = c.attn && c.khr;
    const bool i8 = w.int8 && info->int8;
    c.i8_nv = i8 && c.nv && info->coopmat_nv_s8_16x8x32;
    c.i8_khr = i8 && c.khr && info->coopmat_khr_s8_16x16x32;
    c.i8 = c.i8_nv || c.i8_khr;
    return c;
}

ig_vk_device_params ig_vk_device_default_params(void) {
    ig_vk_device_params p = {
        .index = -1, .weight_part_bytes = 0, .force_staging = false, .no_coopmat = false, .coopmat_wide_groups = 0};
    return p;
}

const ig_vk_device_info *ig_vk_device_get_info(const ig_vk_device *dev) { return &dev->info; }
uint64_t ig_vk_device_allocated(const ig_vk_device *dev) { return dev->allocated; }
bool ig_vk_device_coopmat(const ig_vk_device *dev) { return dev->cm.f16; }
bool ig_vk_device_coopmat_khr(const ig_vk_device *dev) { return dev->cm.khr; }
bool ig_vk_device_coopmat_int8(const ig_vk_device *dev) { return dev->cm.i8; }
bool ig_vk_device_attn_coopmat(const ig_vk_device *dev) { return dev->cm.attn; }
bool ig_vk_device_int8(const ig_vk_device *dev) { return dev->int8_mv; }

/* Vulkan does not report cache sizes. NVIDIA's GPUs of 64 GiB and more
 * (A100 80GB, H100, H200) have 40 MiB of L2 or more, which holds what the
 * prefetch reads ahead (32 MiB); a GPU with a few MiB of L2 would read it
 * twice, so elsewhere it is off unless $IGNIS_VK_PREFETCH asks for it. */
bool ig_vk_prefetch_default(const ig_vk_device_info *info) {
    uint64_t local = 0;
    for (int h = 0; h < info->n_heaps; h++)
        if (info->heaps[h].device_local && info->heaps[h].size > local) local = info->heaps[h].size;
    return info->vendor_id == 0x10DE && strcmp(info->type, "discrete") == 0 && local >= (64ull << 30) - (1ull << 30);
}

/* A positive integer from the environment variable `name`, else fallback. */
static uint32_t env_positive(const char *name, uint32_t fallback) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? (uint32_t)atoi(v) : fallback;
}

static int type_rank(const char *t) {
    if (strcmp(t, "discrete") == 0) return 0;
    if (strcmp(t, "integrated") == 0) return 1;
    if (strcmp(t, "virtual") == 0) return 2;
    if (strcmp(t, "cpu") == 0) return 3;
    return 4;
}

static ig_status choose_device(VkInstance inst, uint32_t api, int index, VkPhysicalDevice *pd_out,
                               ig_vk_device_info *info) {
    uint32_t count = 0;
    VkResult r = ig_vk.vkEnumeratePhysicalDevices(inst, &count, NULL);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkEnumeratePhysicalDevices");
    if (count == 0) return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: no Vulkan device found");
    VkPhysicalDevice *pds = ig_calloc_array(count, sizeof *pds);
    if (!pds) return IG_ERR_NO_MEMORY;
    r = ig_vk.vkEnumeratePhysicalDevices(inst, &count, pds);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(pds);
        return ig_vk_fail(r, "vkEnumeratePhysicalDevices");
    }
    ig_status st = IG_OK;
    if (index < 0) {
        const char *env = getenv("IGNIS_VK_DEVICE");
        if (env && *env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end || v < 0 || v > 1000) {
                free(pds);
                return ig_fail(IG_ERR_INVALID_ARG, "vulkan: bad IGNIS_VK_DEVICE '%s'", env);
            }
            index = (int)v;
        }
    }
    if (index >= 0) {
        if ((uint32_t)index >= count) {
            st = ig_fail(IG_ERR_INVALID_ARG, "vulkan: device %d does not exist (%u devices; see 'ignis devices')",
                         index, count);
        } else {
            ig_vk_query_device(pds[index], index, api, info);
            if (!info->usable)
                st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: device %d (%s) is not usable: %s", index,
                             info->name, info->why_not);
            *pd_out = pds[index];
        }
    } else {
        int best = -1, best_rank = 99;
        char why[512] = "";
        for (uint32_t i = 0; i < count; i++) {
            ig_vk_device_info tmp;
            ig_vk_query_device(pds[i], (int)i, api, &tmp);
            if (!tmp.usable) {
                snprintf(why, sizeof why, "%.250s: %.200s", tmp.name, tmp.why_not);
                continue;
            }
            int rank = type_rank(tmp.type);
            if (rank < best_rank) { best = (int)i; best_rank = rank; *info = tmp; }
        }
        if (best < 0) st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: no usable device (%s)", why);
        else *pd_out = pds[best];
    }
    free(pds);
    return st;
}

static ig_status create_logical(ig_vk_device *d) {
    uint32_t nq = 0;
    ig_vk.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties *qf = ig_calloc_array(nq ? nq : 1, sizeof *qf);
    if (!qf) return IG_ERR_NO_MEMORY;
    ig_vk.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    int fam = -1;
    /* a compute family without graphics first, then any compute family */
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) &&
            qf[i].queueCount > 0)
            fam = (int)i;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].queueCount > 0) fam = (int)i;
    free(qf);
    if (fam < 0) return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", d->info.name);
    d->queue_family = (uint32_t)fam;

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                .storageBuffer16BitAccess = VK_TRUE};
    /* tensor cores: NV or KHR cooperative matrices with f16 arithmetic, in
       the Vulkan memory model (the shaders' SPIR-V declares it) */
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, .cooperativeMatrix = VK_TRUE};
    ig_vk_coopmat_features_khr cmk = {.sType = IG_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
                                      .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
                                                     .shaderFloat16 = VK_TRUE,
                                                     .shaderInt8 = d->cm.i8 ? VK_TRUE : VK_FALSE};
    VkPhysicalDeviceVulkanMemoryModelFeatures mmf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES, .vulkanMemoryModel = VK_TRUE};
    /* KHR pipelines on devices whose default subgroups are not 32 wide */
    VkPhysicalDeviceSubgroupSizeControlFeatures sgf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES,
        .subgroupSizeControl = VK_TRUE,
        .computeFullSubgroups = VK_TRUE};
    /* packed int8 dot products: the int8 mat-vec (mv8_*) */
    VkPhysicalDeviceShaderIntegerDotProductFeatures idf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
        .shaderIntegerDotProduct = VK_TRUE};
    /* $IGNIS_VK_PIPE_STATS: registers and the like of each pipeline */
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE};
    const char *exts[7];
    uint32_t n_exts = 0;
    /* each enabled feature structure goes at the head of s16's chain */
#define CHAIN(st) ((st).pNext = s16.pNext, s16.pNext = &(st))
    if (d->pipe_stats) {
        CHAIN(pef);
        exts[n_exts++] = "VK_KHR_pipeline_executable_properties";
    }
    if (d->cm.f16) {
        CHAIN(f16);
        if (d->cm.khr) {
            CHAIN(cmk);
            exts[n_exts++] = "VK_KHR_cooperative_matrix";
        }
        if (d->cm.nv) {
            CHAIN(cm);
            exts[n_exts++] = "VK_NV_cooperative_matrix";
        }
        if (d->info.vulkan_memory_model) {
            CHAIN(mmf);
            if (d->info.vulkan_memory_model_ext) exts[n_exts++] = "VK_KHR_vulkan_memory_model";
        }
        if (d->cm.sg32) {
            CHAIN(sgf);
            if (d->info.subgroup_size_control_ext) exts[n_exts++] = "VK_EXT_subgroup_size_control";
        }
    }
    if (d->int8_mv) {
        CHAIN(idf);
        if (d->info.int_dot_ext) exts[n_exts++] = "VK_KHR_shader_integer_dot_product";
    }
#undef CHAIN
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &f2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_exts,
                              .ppEnabledExtensionNames = exts};
    VkResult r = ig_vk.vkCreateDevice(d->phys, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateDevice");
    ig_vk.vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    r = ig_vk.vkCreateCommandPool(d->dev, &pci, NULL, &d->pool);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    r = ig_vk.vkAllocateCommandBuffers(d->dev, &ai, &d->xfer_cb);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    r = ig_vk.vkCreateFence(d->dev, &fci, NULL, &d->xfer_fence);
    if (r != VK_SUCCESS) return ig_vk_fail(r, "vkCreateFence");
    return IG_OK;
}

ig_status ig_vk_device_create(const ig_vk_device_params *params, ig_vk_device **out) {
    *out = NULL;
    ig_vk_device_params p = params ? *params : ig_vk_device_default_params();
    ig_vk_device *d = ig_calloc_array(1, sizeof *d);
    if (!d) return IG_ERR_NO_MEMORY;
    uint32_t api = 0;
    ig_status st = ig_vk_instance_acquire(&d->instance, &api);
    if (st != IG_OK) {
        free(d);
        return st;
    }
    st = choose_device(d->instance, api, p.index, &d->phys, &d->info);
    if (st == IG_OK) {
        ig_vk.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->memprops);
        if (p.force_staging) {
            d->force_staging = true;
            d->info.uma = false;
        }
        /* H100, 27B Q4_K_M pp512: 512 (only gate/up wide) 1367, 128 (q, o and
           down too) 1385, 32 1391 tokens/s */
        d->cm_wide_groups =
            p.coopmat_wide_groups ? p.coopmat_wide_groups : env_positive("IGNIS_VK_CM_WIDE_GROUPS", 128);
        /* H100, 27B, split K off / 256 / 512 / 1024 workgroups: Q4_K_M 32
           streams 377 / 479 / 504 / 502 tokens/s, pp512 1,330 / 1,369 /
           1,351 / 1,369; Q8_0 (off / 512) 32 streams 368 / 509, pp512
           1,415 / 1,516. With 32-token tiles: 256 / 512 / 1024 gave 32
           streams 712 / 791 / 804, pp512 1,383 either way */
        d->cm_split_groups =
            p.coopmat_split_groups ? p.coopmat_split_groups : env_positive("IGNIS_VK_CM_SPLIT_GROUPS", 1024);
        /* H100, 27B Q4_K_M, 32-token tiles off / on: 20 streams 323 / 506,
           32 streams 507 / 791 */
        const char *cn = getenv("IGNIS_VK_CM_NARROW");
        d->cm_narrow = !(cn && strcmp(cn, "0") == 0);
        uint64_t mb = d->info.max_storage_buffer_range;
        if (d->info.max_memory_allocation_size && d->info.max_memory_allocation_size < mb)
            mb = d->info.max_memory_allocation_size;
        if (d->info.max_buffer_size && d->info.max_buffer_size < mb) mb = d->info.max_buffer_size;
        mb &= ~(uint64_t)255; /* whole 256-byte units */
        d->max_binding = mb;
        d->max_weight_part = p.weight_part_bytes && p.weight_part_bytes < mb ? p.weight_part_bytes : mb;
        d->max_block = d->info.max_memory_allocation_size ? d->info.max_memory_allocation_size : mb;
        if (d->info.max_buffer_size && d->info.max_buffer_size < d->max_block) d->max_block = d->info.max_buffer_size;
        d->align = d->info.min_storage_offset_align > 256 ? d->info.min_storage_offset_align : 256;
        VkPhysicalDeviceProperties props;
        ig_vk.vkGetPhysicalDeviceProperties(d->phys, &props);
        d->timestamp_period = props.limits.timestampPeriod;
        d->wg_size = 64;
        /* mat-vec shape: 4 row groups of 32 on GPUs; one on CPU devices
         * (lavapipe runs a workgroup's subgroups one after the other) */
        const bool cpu = strcmp(d->info.type, "cpu") == 0;
        /* measured on the H100 (27B Q4_K_M int8 decode, tokens/s): 128,2,1,32
           79.9; 128,2,1,64 80.5; 128,1,1,64 81.1; 128,2,1,128 73.3; 8 streams
           219.5 (tpr 32) against 227.4 (tpr 64). Items per lane per pass
           (unroll), 128,1,1,64: 2 83.9, 3 74.3, 4 79.9; 128,1,1,32,4 80.3;
           64,1,1,32,4 80.6 (in profiles, where every dispatch runs alone,
           unroll 4 was faster: 13.6 against 16.0 ms per token). Since the
           last pass is predicated (a 5376-long row was a pass of 2 and a
           one-item tail before): 128,1,1,64,2 83.7 and b8 262 (was 233);
           max unroll 3 84.1 / 218; 4 84.2 / 218; 128,1,1,32,6 76.5 / 151;
           128,2,1,64,3 83.0 / 215; 128,1,1,128,2 80.1 / 229.
           Eleventh session, one item per lane per pass and a shape of its
           own for several tokens (same lease, old 128,1,1,64,2 against
           new; tg / 8 streams): 27B 89.0 / 264 -> 91.7 / 298, 12B 171.1 /
           527 -> 172.8 / 614, 4B 315 / 1057 -> 326 / 1261, 1B 539 / 2287
           -> 544 / 2273 (32 streams 6814 -> 7124), 270M 844 / 4196 -> 849
           / 4478 (10731 -> 11911). Several tokens, 8 streams: 32
           invocations per group beat 64 everywhere (27B 268 against 263
           with one row, 303 against 288 with two); two rows per group pay
           on 12B and 27B (27B 303, 12B 629 against 270 and 586 with one
           row), not on 4B and 1B (1197 / 2049 against 1261 / 2302; even
           their down projections alone, long rows but fewer than 3072 of
           them, lose 3 %); three or four rows lose (27B 258 / 222); 16 or
           32 tokens per workgroup halve 16 streams (27B 203-276 against
           509 on the tensor cores). */
        d->mv_wg = cpu ? 32 : 128;
        d->mv_nr1 = cpu ? 4 : 1;
        d->mv_nrn = cpu ? 1 : 2;
        d->mv_tpr = cpu ? 32 : 64;
        d->mv_unroll = cpu ? 2 : 1;
        /* no narrower than a subgroup: measured only where subgroups are 32
           wide; wider ones (AMD's wave64) keep a row group per subgroup */
        const uint32_t sgs = d->info.subgroup_size;
        d->mv_tprn = sgs == 64 || sgs == 128 ? sgs : 32;
        d->mv_unrolln = cpu ? 2 : 1;
        d->mv_nrn_min = 3072;
        const char *nm = getenv("IGNIS_VK_MV_NRN_MIN");
        if (nm && *nm && strspn(nm, "0123456789") == strlen(nm) && strlen(nm) < 12)
            d->mv_nrn_min = strtoull(nm, NULL, 10);
        const char *mv = getenv("IGNIS_VK_MV");
        if (mv && *mv) {
            unsigned a = 0, b = 0, c = 0, t = 32, u = 2, tn = 0, un = 0;
            int n = sscanf(mv, "%u,%u,%u,%u,%u,%u,%u", &a, &b, &c, &t, &u, &tn, &un);
            if (n < 6) tn = t;
            if (n < 7) un = u;
            if (n >= 3 && a >= 32 && a <= 256 && a % 32 == 0 && b >= 1 && b <= 8 && c >= 1 && c <= 8 &&
                (t == 32 || t == 64 || t == 128) && t <= a && u >= 1 && u <= 8 &&
                (tn == 32 || tn == 64 || tn == 128) && tn <= a && un >= 1 && un <= 8) {
                d->mv_wg = a;
                d->mv_nr1 = b;
                d->mv_nrn = c;
                d->mv_tpr = t;
                d->mv_unroll = u;
                d->mv_tprn = tn;
                d->mv_unrolln = un;
            }
        }
        /* long rows: H100, tg128 tokens/s, usual shape against a row per
           workgroup of 128 with up to 4 items per lane per pass (two
           leases): 27B Q4_K_M 90.24 / 90.20 -> 92.00 / 91.85 (down, Q6_K:
           49.4 -> 44.9 us with one item per pass), 12B 169.1 / 168.2 ->
           172.3 / 173.2, 4B 316.6 / 318.5 -> 312.1 / 313.6, 1B 542.8 /
           540.6 -> 540.1 / 539.6. The usual shape gives 27B's down 2,688
           workgroups of two rows, 1.3 waves of the H100's resident
           workgroups; a row each makes 2.5 waves of shorter workgroups. 8
           items: 91.8; 256 invocations: 90.0-90.7; 64: 90.0-90.2. */
        d->mv_long_tpr = cpu ? 0 : 128;
        d->mv_long_pct = 200;
        d->mv_long_unroll = 4;
        d->mv_long_rows = 3072;
        /* short rows: H100, tg128 tokens/s, one token's mat-vecs all in
           groups of 32 against 64 (two runs each): 270M 868.7 / 861.5
           against 837.7 / 836.2 (its rows of 640 and 1024 are 20 and 32
           items), 1B 518.7 / 522.0 against 544.1 / 543.3 (rows of 1152: 36
           items, two passes at 32), 4B level. So only rows that fit one
           pass of 32 take them ($IGNIS_VK_MV_SHORT=0: never). */
        const char *ms = getenv("IGNIS_VK_MV_SHORT");
        d->mv_short = !(ms && strcmp(ms, "0") == 0);
        const char *ml = getenv("IGNIS_VK_MV_LONG");
        if (ml && *ml) {
            unsigned t = 0, r = 200, u = 4, mr = 3072;
            if (sscanf(ml, "%u,%u,%u,%u", &t, &r, &u, &mr) >= 1 &&
                (t == 0 || t == 32 || t == 64 || t == 128 || t == 256) && t <= d->info.max_wg_invocations &&
                r >= 1 && r <= 10000 && u >= 1 && u <= 8)
                d->mv_long_tpr = t, d->mv_long_pct = r, d->mv_long_unroll = u, d->mv_long_rows = mr;
        }
        d->attn_wgs = env_positive("IGNIS_VK_ATTN_WGS", 512);
        /* measured on the H100 (tokens/s, graphs with attn_tile.comp
           against attn.comp only): 27B Q4_K_M pp512@d8192 1500 / 886,
           pp512@d4096 1580 / 1055, pp64@d8192 811 / 595, pp32@d8192 535 /
           512, 32 streams at depth 4096 (attn.comp chosen per step) 535.6 /
           537.7; 270M pp512@d8192 34463 / 28339 */
        d->attn_tile_min = p.attn_tile_min ? p.attn_tile_min : env_positive("IGNIS_VK_ATTN_TILE_MIN", 32);
        d->attn_tile_run = p.attn_tile_run ? p.attn_tile_run : env_positive("IGNIS_VK_ATTN_TILE_RUN", 16);
        /* measured on the H100 (27B Q4_K_M decode, add_norm2_x8 per call):
           1024 84.7 t/s (15.3 us in that profile), 512 81.9 (15.6), 256
           72.0 (33.0) */
        d->norm_wg = cpu ? 128 : (d->info.max_wg_invocations >= 1024 ? 1024 : 256);
        const uint32_t nw = env_positive("IGNIS_VK_NORM_WG", d->norm_wg);
        if (nw % 64 == 0 && nw <= d->info.max_wg_invocations && nw <= 1024) d->norm_wg = nw;
        /* L2 prefetch: H100, 27B Q4_K_M tg128 84.6 -> 86.5 tokens/s at
           4096,32,1 (8192,32 84.4; 16384,40 79.5; 8 streams -0.1..-0.8 %;
           16-64 streams no gain) */
        if (ig_vk_prefetch_default(&d->info)) {
            d->prefetch_stage = 4096u << 10;
            d->prefetch_ahead = 32u << 20;
            d->prefetch_max_tokens = 1;
        }
        const char *pfe = getenv("IGNIS_VK_PREFETCH");
        if (pfe && strcmp(pfe, "0") == 0) d->prefetch_stage = 0;
        else if (pfe && *pfe) {
            unsigned kb = 0, amb = 0, tk = 1;
            if (sscanf(pfe, "%u,%u,%u", &kb, &amb, &tk) >= 2 && kb <= (1u << 20) && amb <= 4096 && tk >= 1 &&
                tk <= 256) {
                d->prefetch_stage = (uint64_t)kb << 10;
                d->prefetch_ahead = (uint64_t)amb << 20;
                d->prefetch_max_tokens = tk;
            }
        }
        const char *al = getenv("IGNIS_VK_ATTN");
        d->attn_legacy = al && strcmp(al, "legacy") == 0;
        /* H100, tokens/s, merged by the last workgroup against
           attn_reduce.comp: 27B Q4_K_M (units of 2 x 128 outputs) tg128
           88.1-88.4 / 86.5-87.1, tg64@d4096 80.8 / 77.4, 8 streams 263 /
           261; 4B (2 x 256) tg128 300-303 / 301-303, 8 streams 1,051-1,057
           / 1,042-1,050, 16 streams 1,973-1,984 / 1,946-1,947; 270M (4 x
           256) tg128 731-736 / 770-775, 8 streams 3,960-3,980 / 4,000-4,030:
           one workgroup merging 1024 outputs takes longer than the stage
           it saves */
        const char *am = getenv("IGNIS_VK_ATTN_MERGE");
        d->attn_merge_max = p.attn_merge_max ? p.attn_merge_max : 512;
        if (am && *am) d->attn_merge_max = (uint32_t)strtoul(am, NULL, 10);
        const char *ash = getenv("IGNIS_VK_ATTN_SPLIT_HEADS");
        d->attn_split_heads = !p.no_attn_split_heads && !(ash && strcmp(ash, "0") == 0);
        const char *qt = getenv("IGNIS_VK_QKV_TAIL");
        /* H100, tg128 tokens/s, q and k with row groups of 1 / 2 / 4 rows
           against no tails (one lease): 27B Q4_K_M 87.3 / 88.2 / 86.3 /
           87.7; 12B 167.0 / 167.9 / - / 161.6; 4B 311 / 309 / - / 296; 1B
           511 / 515 / - / 468; 270M 782 / 800 / - / 730. Each workgroup
           of a head counts itself in after a memory barrier, so fewer and
           longer workgroups pay for it less often. */
        d->head_tail_nr = p.no_head_tails ? 0 : cpu ? d->mv_nr1 : 2;
        if (qt && *qt && !p.no_head_tails) {
            const unsigned long nr = strtoul(qt, NULL, 10);
            if (nr <= 8) d->head_tail_nr = (uint32_t)nr;
        }
        /* mv.comp's reduction scratch when subgroups are narrower than 32 */
        if (d->info.subgroup_size < 32 && d->mv_wg > 128) d->mv_wg = 128;
        if (d->info.subgroup_size > 32 && d->mv_wg > 256) d->mv_wg = 256;
        /* $IGNIS_VK_COOPMAT: 0 no tensor cores, nv or khr that extension only */
        const char *cmv = getenv("IGNIS_VK_COOPMAT");
        const char *i8 = getenv("IGNIS_VK_INT8");
        d->int8_mv = IG_VK_GLSL_INT_DOT && !p.no_int8 && !(i8 && strcmp(i8, "0") == 0) && d->info.int_dot;
        d->pipe_stats = getenv("IGNIS_VK_PIPE_STATS") && d->info.exec_props &&
                        ig_vk.vkGetPipelineExecutablePropertiesKHR && ig_vk.vkGetPipelineExecutableStatisticsKHR;
        const char *ci8 = getenv("IGNIS_VK_CM_INT8");
        const char *acm = getenv("IGNIS_VK_ATTN_CM");
        ig_vk_coopmat_ext ext = p.coopmat_ext;
        if (cmv && strcmp(cmv, "nv") == 0) ext = IG_VK_COOPMAT_NV;
        if (cmv && strcmp(cmv, "khr") == 0) ext = IG_VK_COOPMAT_KHR;
        d->cm = ig_vk_coopmat_choose(
            &d->info, IG_VK_GLSL_COOPMAT_NV, IG_VK_GLSL_COOPMAT_KHR,
            (ig_vk_coopmat_wants){.any = !p.no_coopmat && !(cmv && strcmp(cmv, "0") == 0),
                                  .ext = ext,
                                  .int8 = d->int8_mv && !p.no_coopmat_int8 && !(ci8 && strcmp(ci8, "0") == 0),
                                  .attn = !p.no_attn_coopmat && !(acm && strcmp(acm, "0") == 0)});
        /* measured on the H100, synthetic Q4_K_M (tokens/s, 8 against 32):
           270M 16 streams 1814 / 3713, 32 streams 2845 / 3776; 1B 16
           streams 1227 / 1561, 32 streams 1969 / 2415. 32 against 128 (the
           f32 tiled kernel beyond): 270M 48 streams 6538 / 12965, 64
           streams 8158 / 14357, 128 streams 13596 / 16900; 1B 48 streams
           5750 / 8171, 64 streams 7161 / 9727, 128 streams 11261 / 12714 */
        const char *mt = getenv("IGNIS_VK_MV_MAX_TOKENS");
        d->mv_max_tokens = mt && atoi(mt) >= 8 && atoi(mt) <= 256 ? (uint32_t)atoi(mt) : 128;
        const char *xf = getenv("IGNIS_VK_X8_FUSE");
        d->x8_producers = !(xf && strcmp(xf, "0") == 0);
        /* the int8 copies quantized with subgroup shuffles (quant_x8s,
           add_norm2_x8s): measured on the H100, 27B Q4_K_M tg128 (see
           docs/vulkan-backend.md, fourteenth session) */
        const char *xs = getenv("IGNIS_VK_X8_SHUFFLE");
        d->x8_shuffle = d->info.subgroup_shuffle && d->info.subgroup_size >= 8 && !(xs && strcmp(xs, "0") == 0);
        /* measured on the H100 (27B Q4_K_M): the f32 mat-vec loses to the
           tensor cores from 5 streams (b8 62 against 107 tokens/s). The
           int8 one, against the tensor cores with split K and 32-token
           tiles: b6 215 / 164, b8 236 / 222, b12 249 / 318, b16 272 / 423
           (before those, it won up to 16) */
        d->cm_min_tokens = env_positive("IGNIS_VK_CM_MIN_TOKENS", d->int8_mv ? 9 : 5);
        /* the f16 tensor cores on KHR's fragments (narrow tiles) against
           the int8 mat-vec, H100, 27B Q8_0 (tokens/s, two runs each): 6
           streams 230.8 / 217.8, 7 streams 251 / 252, 8 streams 269.4 /
           286.0 */
        d->cm_min_tokens_f16 = env_positive("IGNIS_VK_CM_MIN_TOKENS_F16",
                                            d->cm.khr && d->int8_mv && !getenv("IGNIS_VK_CM_MIN_TOKENS")
                                                ? 8
                                                : d->cm_min_tokens);
        /* what mmcm.comp prefetches into registers a step ahead: bit 0 the
           activations, bit 1 the weights. Measured on the H100, 27B Q4_K_M
           pp512 / 32 streams (tokens/s): both 1379 / 807, weights only 1675
           / 822, activations only 1233 / 768, neither 1587 / 766 (the
           activations' registers cost workgroups per compute unit) */
        const char *pf = getenv("IGNIS_VK_CM_PF");
        d->cm_pf = pf && *pf >= '0' && *pf <= '3' && !pf[1] ? (uint32_t)(*pf - '0') : 2;
        st = create_logical(d);
    }
    if (st == IG_OK) st = ig_vk_pipelines_init(d);
    if (st == IG_OK) st = ig_vk_buffer_create(d, IG_VK_MEM_DEVICE, 256, &d->dummy);
    if (st != IG_OK) {
        ig_vk_device_free(d);
        return st;
    }
    *out = d;
    return IG_OK;
}

void ig_vk_device_free(ig_vk_device *d) {
    if (!d) return;
    if (d->dev) ig_vk.vkDeviceWaitIdle(d->dev);
    ig_vk_buffer_free(d->dummy);
    ig_vk_buffer_free(d->staging);
    if (d->dev) {
        ig_vk_pipelines_free(d);
        if (d->xfer_fence) ig_vk.vkDestroyFence(d->dev, d->xfer_fence, NULL);
        if (d->pool) ig_vk.vkDestroyCommandPool(d->dev, d->pool, NULL);
        ig_vk_memory_free_all(d);
        ig_vk.vkDestroyDevice(d->dev, NULL);
    }
    if (d->instance) ig_vk_instance_release();
    free(d);
}
