/* Image decoding and the Pillow-exact bilinear resize (see image.h). */
#include "vision/image.h"
#include "ignis.h"

#include <stdio.h>

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#ifndef IG_NO_IMAGE_CODECS
#include <jpeglib.h>
#include <png.h>
#endif

void ig_image_free(ig_image *img) {
    if (!img) return;
    free(img->rgb);
    free(img);
}

int ig_image_width(const ig_image *img) { return img ? img->w : 0; }
int ig_image_height(const ig_image *img) { return img ? img->h : 0; }

#ifndef IG_NO_IMAGE_CODECS
static ig_status check_size(long w, long h) {
    if (w < 1 || h < 1) return ig_fail(IG_ERR_FORMAT, "image of %ldx%ld pixels", w, h);
    if (w > IG_IMAGE_MAX_SIDE || h > IG_IMAGE_MAX_SIDE || (unsigned long)w * (unsigned long)h > IG_IMAGE_MAX_PIXELS)
        return ig_fail(IG_ERR_FORMAT, "image of %ldx%ld pixels is too large (at most %d per side, %u pixels)", w, h,
                       IG_IMAGE_MAX_SIDE, IG_IMAGE_MAX_PIXELS);
    return IG_OK;
}

static ig_image *image_new(int w, int h) {
    ig_image *img = ig_calloc_array(1, sizeof *img);
    if (!img) return NULL;
    img->w = w;
    img->h = h;
    img->rgb = ig_calloc_array((size_t)w * (size_t)h, 3);
    if (!img->rgb) {
        free(img);
        return NULL;
    }
    return img;
}

/* ---- PNG (libpng's simplified API: errors are returned, not raised) ---- */

static ig_status decode_png(const void *data, size_t size, ig_image **out) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&pi, data, size))
        return ig_fail(IG_ERR_FORMAT, "PNG: %s", pi.message);
    ig_status st = check_size((long)pi.width, (long)pi.height);
    if (st != IG_OK) {
        png_image_free(&pi);
        return st;
    }
    pi.format = PNG_FORMAT_RGBA;
    const size_t n = (size_t)pi.width * pi.height;
    uint8_t *rgba = ig_calloc_array(n, 4);
    ig_image *img = image_new((int)pi.width, (int)pi.height);
    if (!rgba || !img) {
        png_image_free(&pi);
        free(rgba);
        ig_image_free(img);
        return IG_ERR_NO_MEMORY;
    }
    if (!png_image_finish_read(&pi, NULL, rgba, 0, NULL)) {
        st = ig_fail(IG_ERR_FORMAT, "PNG: %s", pi.message);
        png_image_free(&pi);
        free(rgba);
        ig_image_free(img);
        return st;
    }
    for (size_t i = 0; i < n; i++) memcpy(img->rgb + 3 * i, rgba + 4 * i, 3);
    free(rgba);
    *out = img;
    return IG_OK;
}

/* ---- JPEG (libjpeg; its errors longjmp back here) ---------------------- */

typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_error_exit(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    e->mgr.format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_quiet(j_common_ptr cinfo, int level) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    /* A corrupt-data warning (truncated file, bad Huffman code) is an error
     * here: the image would be decoded with made-up pixels. */
    if (level < 0) {
        e->mgr.format_message(cinfo, e->msg);
        longjmp(e->jb, 1);
    }
}

static ig_status decode_jpeg(const void *data, size_t size, ig_image **out) {
    struct jpeg_decompress_struct ci;
    jpeg_err err;
    memset(&ci, 0, sizeof ci);
    memset(&err, 0, sizeof err);
    ci.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_error_exit;
    err.mgr.emit_message = jpeg_quiet;
    ig_image *volatile img = NULL;
    if (setjmp(err.jb)) {
        jpeg_destroy_decompress(&ci);
        ig_image_free(img);
        return ig_fail(IG_ERR_FORMAT, "JPEG: %s", err.msg);
    }
    if (size > (size_t)(unsigned long)-1) longjmp(err.jb, 1);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, (const unsigned char *)data, (unsigned long)size);
    jpeg_read_header(&ci, TRUE);
    ig_status st = check_size((long)ci.image_width, (long)ci.image_height);
    if (st != IG_OK) {
        jpeg_destroy_decompress(&ci);
        return st;
    }
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&ci);
        return ig_fail(IG_ERR_UNSUPPORTED, "JPEG: CMYK images are not supported");
    }
    ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    if (ci.output_components != 3 || (int)ci.output_width != (int)ci.image_width ||
        (int)ci.output_height != (int)ci.image_height) {
        jpeg_destroy_decompress(&ci);
        return ig_fail(IG_ERR_FORMAT, "JPEG: unexpected output layout");
    }
    img = image_new((int)ci.output_width, (int)ci.output_height);
    if (!img) {
        jpeg_destroy_decompress(&ci);
        return IG_ERR_NO_MEMORY;
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = img->rgb + (size_t)ci.output_scanline * (size_t)img->w * 3;
        if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
            snprintf(err.msg, sizeof err.msg, "truncated image");
            longjmp(err.jb, 1);
        }
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *out = img;
    return IG_OK;
}

#endif /* IG_NO_IMAGE_CODECS */

ig_status ig_image_decode(const void *data, size_t size, ig_image **out) {
    if (!out) return ig_fail(IG_ERR_INVALID_ARG, "ig_image_decode: out is NULL");
    *out = NULL;
    if (!data || size == 0) return ig_fail(IG_ERR_FORMAT, "empty image");
    const uint8_t *b = data;
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    bool is_png = size >= 8 && !memcmp(b, png_sig, 8);
    bool is_jpeg = size >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
#ifdef IG_NO_IMAGE_CODECS
    if (is_png || is_jpeg)
        return ig_fail(IG_ERR_UNSUPPORTED, "this build of ignis has no image decoders (configured with -DIGNIS_IMAGES=OFF)");
#else
    if (is_png) return decode_png(data, size, out);
    if (is_jpeg) return decode_jpeg(data, size, out);
#endif
    return ig_fail(IG_ERR_UNSUPPORTED, "unknown image format (PNG and JPEG are supported)");
}

#define IG_IMAGE_MAX_FILE ((size_t)256 << 20)

ig_status ig_image_load(const char *path, ig_image **out) {
    if (!path || !out) return ig_fail(IG_ERR_INVALID_ARG, "ig_image_load: NULL argument");
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    IG_TRY(ig_file_read_all(path, IG_IMAGE_MAX_FILE, &data, &len));
    ig_status st = ig_image_decode(data, len, out);
    free(data);
    if (st != IG_OK) ig_fail_wrap(st, "%s", path);
    return st;
}

/* ---- Pillow's resampling, 8 bits per channel ---------------------------- */

#define PREC_BITS (32 - 8 - 2)

static double bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Per output index: the first input index, the count, and ksize fixed-point
 * coefficients. */
static ig_status coeffs(int in_size, int out_size, int *ksize_out, int **bounds_out, int32_t **kk_out) {
    const double scale = (double)in_size / (double)out_size;
    const double fscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * fscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = ig_calloc_array((size_t)out_size * 2, sizeof *bounds);
    int32_t *kk = ig_calloc_array((size_t)out_size * (size_t)ksize, sizeof *kk);
    double *pk = ig_calloc_array((size_t)ksize, sizeof *pk);
    if (!bounds || !kk || !pk) {
        free(bounds);
        free(kk);
        free(pk);
        return IG_ERR_NO_MEMORY;
    }
    for (int xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale;
        const double ss = 1.0 / fscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax > ksize) xmax = ksize;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            pk[x] = bilinear((x + xmin - center + 0.5) * ss);
            ww += pk[x];
        }
        for (int x = 0; x < xmax; x++) {
            const double w = ww != 0.0 ? pk[x] / ww : pk[x];
            kk[(size_t)xx * ksize + x] =
                w < 0 ? (int32_t)(-0.5 + w * (1 << PREC_BITS)) : (int32_t)(0.5 + w * (1 << PREC_BITS));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(pk);
    *ksize_out = ksize;
    *bounds_out = bounds;
    *kk_out = kk;
    return IG_OK;
}

static inline uint8_t clip8(int64_t v) {
    v >>= PREC_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* One pass along x (rows y0..y1 of src into dst of width dw). */
static void pass_h(const uint8_t *src, int w, int y0, int y1, uint8_t *dst, int dw, const int *b, const int32_t *kk,
                   int ks) {
    for (int y = y0; y < y1; y++)
        for (int xx = 0; xx < dw; xx++) {
            const int xmin = b[2 * xx], n = b[2 * xx + 1];
            const int32_t *k = kk + (size_t)xx * ks;
            for (int c = 0; c < 3; c++) {
                int64_t s = (int64_t)1 << (PREC_BITS - 1);
                for (int x = 0; x < n; x++) s += (int64_t)src[((size_t)y * w + xmin + x) * 3 + c] * k[x];
                dst[((size_t)(y - y0) * dw + xx) * 3 + c] = clip8(s);
            }
        }
}

/* One pass along y (src rows shifted by y0) into dst of dh rows of width w. */
static void pass_v(const uint8_t *src, int w, int y0, uint8_t *dst, int dh, const int *b, const int32_t *kk, int ks) {
    for (int yy = 0; yy < dh; yy++) {
        const int ymin = b[2 * yy] - y0, n = b[2 * yy + 1];
        const int32_t *k = kk + (size_t)yy * ks;
        for (int xx = 0; xx < w; xx++)
            for (int c = 0; c < 3; c++) {
                int64_t s = (int64_t)1 << (PREC_BITS - 1);
                for (int y = 0; y < n; y++) s += (int64_t)src[((size_t)(ymin + y) * w + xx) * 3 + c] * k[y];
                dst[((size_t)yy * w + xx) * 3 + c] = clip8(s);
            }
    }
}

ig_status ig_image_resize_bilinear(const uint8_t *src, int w, int h, uint8_t *dst, int dw, int dh) {
    if (w < 1 || h < 1 || dw < 1 || dh < 1) return ig_fail(IG_ERR_INVALID_ARG, "resize: empty image");
    if (w == dw && h == dh) {
        memcpy(dst, src, (size_t)w * (size_t)h * 3);
        return IG_OK;
    }
    int kh = 0, kv = 0, *bh = NULL, *bv = NULL;
    int32_t *ch = NULL, *cv = NULL;
    ig_status st = coeffs(w, dw, &kh, &bh, &ch);
    if (st == IG_OK) st = coeffs(h, dh, &kv, &bv, &cv);
    uint8_t *tmp = NULL;
    if (st == IG_OK && w != dw && h != dh) {
        /* Two passes, each rounded to 8 bits. Pillow 13 runs the vertical
         * pass first when it shrinks while the horizontal one enlarges, and
         * horizontal first when both enlarge or only the horizontal
         * shrinks; when both shrink it picks either (by a rule not
         * reproduced here: the other order rounds some values one level
         * apart). Horizontal first reads only the rows the vertical pass
         * uses. */
        if (dh < h && dw > w) {
            tmp = ig_calloc_array((size_t)w * (size_t)dh, 3);
            if (!tmp) st = IG_ERR_NO_MEMORY;
            else {
                pass_v(src, w, 0, tmp, dh, bv, cv, kv);
                pass_h(tmp, w, 0, dh, dst, dw, bh, ch, kh);
            }
        } else {
            const int y0 = bv[0], y1 = bv[2 * (dh - 1)] + bv[2 * (dh - 1) + 1];
            tmp = ig_calloc_array((size_t)(y1 - y0) * (size_t)dw, 3);
            if (!tmp) st = IG_ERR_NO_MEMORY;
            else {
                pass_h(src, w, y0, y1, tmp, dw, bh, ch, kh);
                pass_v(tmp, dw, y0, dst, dh, bv, cv, kv);
            }
        }
    } else if (st == IG_OK && w != dw) {
        pass_h(src, w, 0, h, dst, dw, bh, ch, kh);
    } else if (st == IG_OK) {
        pass_v(src, w, 0, dst, dh, bv, cv, kv);
    }
    free(tmp);
    free(bh);
    free(bv);
    free(ch);
    free(cv);
    return st;
}
