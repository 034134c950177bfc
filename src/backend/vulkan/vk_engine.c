/* Hook of the Vulkan backend into the engine (ig_context). Phase 1 provides
 * the device layer and the ops; running the engine's op list on them comes
 * next, so for now --backend vulkan fails with a clear message. */
#include "backend/vulkan/vk_internal.h"

typedef struct ig_backend ig_backend;
ig_status ig_backend_vulkan_create(ig_context *ctx, ig_backend **out);

ig_status ig_backend_vulkan_create(ig_context *ctx, ig_backend **out) {
    (void)ctx;
    *out = NULL;
    return ig_fail(IG_ERR_UNSUPPORTED, "vulkan: running the engine on the Vulkan backend is not implemented yet");
}
