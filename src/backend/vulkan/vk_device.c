/* Physical-device queries, device selection and logical-device creation.
 *
 * Environment: $IGNIS_VK_DEVICE (an index of `ignis devices`) picks the
 * device when the params leave the choice automatic. Everything else a
 * device runs with comes from its tuning (vk_tuning.h). */
#include "backend/vulkan/vk_internal.h"
#include "core/util.h"

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
    ig_vk_coopmat_props_khr *p = ig_calloc_array(count, sizeof *p);
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
        VkCooperativeMatrixPropertiesNV *p = ig_calloc_array(n, sizeof *p);
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
    VkCooperativeMatrixPropertiesNV *p = ig_calloc_array(count, sizeof *p);
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
        ext = ig_calloc_array(n_ext, sizeof *ext);
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
bool ig_vk_device_invariant(const ig_vk_device *dev) { return dev->tune.invariant; }

bool ig_vk_prefetch_default(const ig_vk_device_info *info) {
    ig_vk_tuning t;
    return ig_vk_tuning_for(info, &t) == IG_OK && t.prefetch_stage > 0;
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
    const char *exts[6];
    uint32_t n_exts = 0;
    /* each enabled feature structure goes at the head of s16's chain */
#define CHAIN(st) ((st).pNext = s16.pNext, s16.pNext = &(st))
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

/* The device's tuning: its table entries, then the params' overrides; what
 * the device can do limits the result. */
static ig_status tune_device(ig_vk_device *d, const ig_vk_device_params *p) {
    ig_vk_tuning *t = &d->tune;
    IG_TRY(ig_vk_tuning_for(&d->info, t));
    if (p->no_coopmat) t->coopmat = false;
    if (p->no_int8) t->int8 = false;
    if (p->no_coopmat_int8) t->coopmat_int8 = false;
    if (p->no_attn_coopmat) t->attn_coopmat = false;
    if (p->coopmat_wide_groups) t->cm_wide_groups = p->coopmat_wide_groups;
    if (p->coopmat_split_groups) t->cm_split_groups = p->coopmat_split_groups;
    if (p->attn_tile_min) t->attn_tile_min = p->attn_tile_min;
    if (p->attn_tile_run) t->attn_tile_run = p->attn_tile_run;
    if (p->attn_merge_max) t->attn_merge_max = p->attn_merge_max;
    if (p->no_head_tails) t->head_tail_nr = 0;
    IG_TRY(ig_vk_tuning_parse(t, p->tuning));
    IG_TRY(ig_vk_tuning_check(t, &d->info));
    /* mv.comp's reduction scratch when subgroups are narrower than 32 */
    if (d->info.subgroup_size < 32 && t->mv_wg > 128) t->mv_wg = 128;
    if (d->info.subgroup_size > 32 && t->mv_wg > 256) t->mv_wg = 256;
    d->int8_mv = IG_VK_GLSL_INT_DOT && t->int8 && d->info.int_dot;
    d->x8_shuffle = t->x8_shuffle && d->info.subgroup_shuffle && d->info.subgroup_size >= 8;
    d->cm = ig_vk_coopmat_choose(&d->info, IG_VK_GLSL_COOPMAT_NV, IG_VK_GLSL_COOPMAT_KHR,
                                 (ig_vk_coopmat_wants){.any = t->coopmat,
                                                       .ext = p->coopmat_ext,
                                                       .int8 = d->int8_mv && t->coopmat_int8,
                                                       .attn = t->attn_coopmat});
    d->cm_min_tokens = d->int8_mv ? t->cm_min_tokens_int8 : t->cm_min_tokens_f32;
    d->cm_min_tokens_f16 = d->cm.khr && d->int8_mv ? t->cm_min_tokens_f16 : d->cm_min_tokens;
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
        st = tune_device(d, &p);
        if (st == IG_OK) st = create_logical(d);
        if (st == IG_OK) ig_vk_monitor_init(d);
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
