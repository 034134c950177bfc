/* Images for the vision encoder: decoding (PNG through libpng, JPEG through
 * libjpeg), conversion to 8-bit RGB (alpha dropped, grey replicated), and
 * the Gemma 3 image processor's preprocessing: a bilinear resize that
 * reproduces Pillow's 8-bit resampling exactly (a convolution whose support
 * widens with the downscale factor, fixed-point coefficients), then
 * x / 255, (x - 0.5) / 0.5, channels first. Input is untrusted: every
 * failure is an error, never a crash. */
#ifndef IG_VISION_IMAGE_H
#define IG_VISION_IMAGE_H

#include "core/util.h"

#include <stddef.h>
#include <stdint.h>

/* Largest accepted image: each side and the pixel count (decompression
 * bombs are refused before their pixels are decoded). */
#define IG_IMAGE_MAX_SIDE 16384
#define IG_IMAGE_MAX_PIXELS (64u * 1024u * 1024u)

struct ig_image {
    int w, h;
    uint8_t *rgb; /* [h][w][3] */
};

/* Pillow's bilinear resize of 8-bit RGB (src w×h → dst dw×dh). dst holds
 * dw*dh*3 bytes. */
ig_status ig_image_resize_bilinear(const uint8_t *src, int w, int h, uint8_t *dst, int dw, int dh);

#endif
