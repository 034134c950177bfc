/* Opens the Vulkan loader with dlopen (so that ignis runs without it) and
 * keeps one process-wide instance. The instance is created on first use and
 * lives until the process exits: creating one costs milliseconds, and
 * destroying it makes some drivers (Mesa 22.3 lavapipe) leak an allocation
 * that LeakSanitizer then reports. */
#include "backend/vulkan/vk_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

ig_vk_fns ig_vk;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_lib;
static VkInstance g_instance;
static uint32_t g_api;
static bool g_ready;

const char *ig_vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult error";
    }
}

ig_status ig_vk_fail(VkResult r, const char *what) {
    ig_status st = (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
                       ? IG_ERR_NO_MEMORY
                       : IG_ERR_BACKEND;
    if (r == VK_ERROR_DEVICE_LOST) atomic_store(&ig_vk_lost, true); /* monitoring (vk_monitor.c) */
    return ig_fail(st, "vulkan: %s: %s (%d)", what, ig_vk_result_str(r), (int)r);
}

static ig_status open_loader(void) {
    if (g_lib) return IG_OK;
    const char *names[] = {"libvulkan.so.1", "libvulkan.so"};
    for (size_t i = 0; i < IG_ARRAY_LEN(names) && !g_lib; i++) g_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!g_lib)
        return ig_fail(IG_ERR_UNSUPPORTED,
                       "vulkan: cannot open the Vulkan loader (libvulkan.so.1): install libvulkan1 "
                       "and a driver (mesa-vulkan-drivers, or the GPU vendor's)");
    void *sym = dlsym(g_lib, "vkGetInstanceProcAddr");
    if (!sym) {
        dlclose(g_lib);
        g_lib = NULL;
        return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: the loader has no vkGetInstanceProcAddr");
    }
    memcpy(&ig_vk.vkGetInstanceProcAddr, &sym, sizeof sym);
    return IG_OK;
}

static PFN_vkVoidFunction gipa(VkInstance inst, const char *name) {
    return ig_vk.vkGetInstanceProcAddr(inst, name);
}

ig_status ig_vk_instance_acquire(VkInstance *out, uint32_t *api_version) {
    pthread_mutex_lock(&g_lock);
    ig_status st = IG_OK;
    if (!g_ready) {
        st = open_loader();
        if (st != IG_OK) goto done;
#define IG_VK_LOAD(name) ig_vk.name = (PFN_##name)gipa(NULL, #name);
        IG_VK_GLOBAL_FNS(IG_VK_LOAD)
#undef IG_VK_LOAD
        ig_vk.vkEnumerateInstanceVersion =
            (PFN_vkEnumerateInstanceVersion)gipa(NULL, "vkEnumerateInstanceVersion");
        if (!ig_vk.vkCreateInstance || !ig_vk.vkEnumerateInstanceExtensionProperties) {
            st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: the loader lacks vkCreateInstance");
            goto done;
        }
        uint32_t api = VK_API_VERSION_1_0;
        if (ig_vk.vkEnumerateInstanceVersion) ig_vk.vkEnumerateInstanceVersion(&api);
        if (api < VK_API_VERSION_1_1) {
            st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: the loader supports only Vulkan 1.0 (1.1 needed)");
            goto done;
        }
        /* Ask for up to 1.3: devices report their own version. */
        uint32_t want = api < VK_API_VERSION_1_3 ? api : VK_API_VERSION_1_3;
        VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                 .pApplicationName = "ignis",
                                 .applicationVersion = 1,
                                 .pEngineName = "ignis",
                                 .engineVersion = 1,
                                 .apiVersion = want};
        VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                   .pApplicationInfo = &app};
        VkInstance inst = VK_NULL_HANDLE;
        VkResult r = ig_vk.vkCreateInstance(&ci, NULL, &inst);
        if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
            st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: no Vulkan driver found (install mesa-vulkan-drivers "
                                             "or the GPU vendor's driver)");
            goto done;
        }
        if (r != VK_SUCCESS) {
            st = ig_vk_fail(r, "vkCreateInstance");
            goto done;
        }
        bool missing = false;
#define IG_VK_LOAD(name)                                                                           \
    ig_vk.name = (PFN_##name)gipa(inst, #name);                                                    \
    if (!ig_vk.name) missing = true;
        IG_VK_INSTANCE_FNS(IG_VK_LOAD)
#undef IG_VK_LOAD
        ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV =
            (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)gipa(
                inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
        ig_vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR =
            gipa(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
        if (missing) {
            PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)gipa(inst, "vkDestroyInstance");
            if (destroy) destroy(inst, NULL);
            st = ig_fail(IG_ERR_UNSUPPORTED, "vulkan: the loader lacks Vulkan 1.1 entry points");
            goto done;
        }
        g_instance = inst;
        g_api = want;
        g_ready = true;
    }
    *out = g_instance;
    if (api_version) *api_version = g_api;
done:
    pthread_mutex_unlock(&g_lock);
    return st;
}

void ig_vk_instance_release(void) { /* the instance stays for the process (see above) */ }
