/* Devices are freed through their own ops (engine/backend.h). */
#include "engine/backend.h"

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

void ig_device_free(ig_device *dev) {
    if (dev) dev->ops->free(dev);
}

void ig_device_test_fault(int kind) {
#ifdef IGNIS_HAVE_VULKAN
    ig_vk_test_fail_next_submit(kind);
#else
    (void)kind;
#endif
}
