/* Devices are freed through their own ops (engine/backend.h). */
#include "engine/backend.h"

void ig_device_free(ig_device *dev) {
    if (dev) dev->ops->free(dev);
}
