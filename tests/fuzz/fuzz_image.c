/* Image decoding (src/vision/image.c): any bytes as a PNG or JPEG file; a
 * decoded image is checked for its promised bounds and resized to a small
 * square as the vision preprocessing does. */
#include "fuzz_common.h"

#include "ignis.h"
#include "vision/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ig_image *img = NULL;
    if (ig_image_decode(data, size, &img) != IG_OK) {
        if (img) abort();
        return 0;
    }
    int w = ig_image_width(img), h = ig_image_height(img);
    if (w <= 0 || h <= 0 || w > IG_IMAGE_MAX_SIDE || h > IG_IMAGE_MAX_SIDE ||
        (uint64_t)w * (uint64_t)h > IG_IMAGE_MAX_PIXELS)
        abort();
    /* small images only: a large one costs seconds under the sanitizers */
    if ((uint64_t)w * (uint64_t)h <= 1u << 16) {
        uint8_t dst[8 * 8 * 3];
        if (ig_image_resize_bilinear(img->rgb, w, h, dst, 8, 8) != IG_OK) abort();
    }
    ig_image_free(img);
    return 0;
}
