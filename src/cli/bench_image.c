/* `ignis bench --image`: the vision tower's encode time and the prefill of
 * one image's tokens, the two numbers llama.cpp's mtmd tool prints for an
 * image ("image slice encoded", "image decoded"). The encode is timed on
 * pixels preprocessed beforehand (decode and resize are not part of it, as
 * in llama.cpp's); the image prefill is one ig_decode_images of the image's
 * placeholder run, after <bos> <start_of_image> (untimed), no logits. */
#include "bench_image.h"

#include "cli.h"
#include "core/util.h"
#include "model/model.h"
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU seconds of the process (all threads): on a shared machine the wall
 * time depends on the other load, the CPU time much less. */
static double cpu_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

/* Reads every page of the tower's mapped matrices, so that the first
 * repetition does not pay for page faults. */
static double touch_weights(const ig_vision *v) {
    volatile uint8_t sink = 0;
    for (int l = 0; l < v->n_layer; l++) {
        const ig_vision_layer *L = &v->layers[l];
        const ig_tensor *ws[] = {L->wq, L->wk, L->wv, L->wo, L->fc1, L->fc2};
        for (int i = 0; i < 6; i++)
            for (size_t b = 0; b < ws[i]->nbytes; b += 4096) sink ^= ((const uint8_t *)ws[i]->data)[b];
    }
    return (double)sink;
}

static void row(const char *test, int n_threads, double mean, double sd, int reps, const char *extra) {
    printf("| %-24s | %7d | %10.1f ± %-8.1f | %4d | %s\n", test, n_threads, mean, sd, reps, extra);
}

static json_t *row_json(const char *test, int n_threads, const double *ms, int reps) {
    double mean, sd;
    stats(ms, reps, &mean, &sd);
    json_t *o = json_object();
    json_object_set_new(o, "test", json_string(test));
    json_object_set_new(o, "threads", json_integer(n_threads));
    json_object_set_new(o, "ms_mean", json_real(mean));
    json_object_set_new(o, "ms_sd", json_real(sd));
    json_t *a = json_array();
    for (int i = 0; i < reps; i++) json_array_append_new(a, json_real(ms[i]));
    json_object_set_new(o, "ms", a);
    return o;
}

int bench_image_run(ig_model *model, const char *image, int n_threads, int reps, int n_batch, ig_kv_type kv,
                    json_t *results) {
    const ig_vision *v = model->vision;
    if (!v) {
        fprintf(stderr, "ignis bench: --image needs a vision tower (--mmproj FILE)\n");
        return 1;
    }
    const int T = v->n_tokens, E = v->n_embd, n = T + 2;
    if (T > n_batch) {
        fprintf(stderr, "ignis bench: an image (%d tokens) does not fit a batch of %d (-b)\n", T, n_batch);
        return 1;
    }
    ig_image *img = NULL;
    float *px = NULL, *embd = NULL;
    double *enc_ms = calloc((size_t)reps, sizeof *enc_ms), *pf_ms = calloc((size_t)reps, sizeof *pf_ms);
    double enc_cpu = 0, pf_cpu = 0;
    int32_t *tok = calloc((size_t)n, sizeof *tok), *pos = calloc((size_t)n, sizeof *pos);
    int32_t *seq = calloc((size_t)n, sizeof *seq), *im = calloc((size_t)n, sizeof *im);
    const float **ep = calloc((size_t)n, sizeof *ep);
    uint8_t *want = calloc((size_t)n, 1);
    ig_context *ctx = NULL;
    int rc = 1;
    if (!enc_ms || !pf_ms || !tok || !pos || !seq || !im || !ep || !want) {
        fprintf(stderr, "ignis bench: out of memory\n");
        goto done;
    }
    if (ig_image_load(image, &img) != IG_OK || ig_image_preprocess(model, img, &px, NULL) != IG_OK) {
        fprintf(stderr, "ignis bench: %s: %s\n", image, ig_last_error());
        goto done;
    }
    embd = ig_calloc_array((size_t)T * (size_t)E, sizeof *embd);
    if (!embd) goto done;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = n + 8;
    cp.n_batch = n_batch;
    cp.kv_type = kv;
    cp.n_threads = n_threads;
    if (ig_context_create(model, &cp, &ctx) != IG_OK) {
        fprintf(stderr, "ignis bench: %s\n", ig_last_error());
        goto done;
    }
    (void)touch_weights(v);
    for (int r = 0; r < reps; r++) {
        const double t0 = ig_time_now(), c0 = cpu_now();
        if (ig_vision_encode(v, px, n_threads, NULL, embd) != IG_OK) {
            fprintf(stderr, "ignis bench: image encode: %s\n", ig_last_error());
            goto done;
        }
        enc_ms[r] = 1e3 * (ig_time_now() - t0);
        enc_cpu += cpu_now() - c0;
    }
    /* <bos> <start_of_image> | T placeholders */
    tok[0] = 2;
    tok[1] = v->boi_id;
    for (int i = 0; i < n; i++) pos[i] = i;
    for (int i = 2; i < 2 + T; i++) {
        tok[i] = v->image_id;
        im[i] = 1;
        ep[i] = embd + (size_t)(i - 2) * E;
    }
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        ig_seq_clear(ctx, 0);
        const ig_batch pre = {.n_tokens = 2, .tokens = tok, .pos = pos, .seq = seq, .want_logits = want};
        ig_status st = ig_decode(ctx, &pre);
        const ig_batch b = {.n_tokens = T, .tokens = tok + 2, .pos = pos + 2, .seq = seq + 2, .want_logits = want};
        const ig_batch_images bi = {.embd = ep + 2, .image = im + 2};
        const double t0 = ig_time_now(), c0 = cpu_now();
        if (st == IG_OK) st = ig_decode_images(ctx, &b, &bi);
        const double dt = 1e3 * (ig_time_now() - t0);
        if (r >= 0) pf_cpu += cpu_now() - c0;
        if (st != IG_OK) {
            fprintf(stderr, "ignis bench: image prefill: %s\n", ig_last_error());
            goto done;
        }
        if (r >= 0) pf_ms[r] = dt;
    }
    const int N = v->side * v->side;
    const double wmib = (double)ig_vision_weight_bytes(v) / (1 << 20);
    const double amib = (double)ig_vision_act_bytes(v, n_threads) / (1 << 20);
    /* The encoder's arithmetic: the layers' matrices (2 flops per weight per
     * patch), attention (4 N^2 width per layer), the patch kernel and the
     * projection. */
    const double flops = 2.0 * N * ((4.0 * v->width + 2.0 * v->n_ff) * v->width * v->n_layer +
                                    3.0 * v->patch * v->patch * v->width) +
                         4.0 * (double)N * N * v->width * v->n_layer + 2.0 * T * v->width * (double)E;
    double mean, sd;
    char extra[160];
    printf("\n| %-24s | %7s | %21s | %4s | %s\n", "image test", "threads", "ms", "reps", "");
    printf("| %-24s | %7s | %21s | %4s | %s\n", "------------------------", "-------", "---------------------", "----",
           "");
    stats(enc_ms, reps, &mean, &sd);
    snprintf(extra, sizeof extra, "%d patches, %d layers, %.1f GFLOP/s, cpu %.1f s", N, v->n_layer,
             flops / (mean * 1e6), enc_cpu / reps);
    row("image encode", n_threads, mean, sd, reps, extra);
    stats(pf_ms, reps, &mean, &sd);
    snprintf(extra, sizeof extra, "%.1f tokens/s, cpu %.2f s", T / (mean * 1e-3), pf_cpu / reps);
    char name[48];
    snprintf(name, sizeof name, "image prefill (%d tok)", T);
    row(name, n_threads, mean, sd, reps, extra);
    printf("encoder weights %.1f MiB, activation peak %.1f MiB (%d threads)\n", wmib, amib, n_threads);
    json_t *o = row_json("image_encode", n_threads, enc_ms, reps);
    json_object_set_new(o, "gflops", json_real(flops / 1e9));
    json_object_set_new(o, "cpu_s_mean", json_real(enc_cpu / reps));
    json_array_append_new(results, o);
    o = row_json("image_prefill", n_threads, pf_ms, reps);
    json_object_set_new(o, "n_tokens", json_integer(T));
    json_object_set_new(o, "cpu_s_mean", json_real(pf_cpu / reps));
    json_array_append_new(results, o);
    o = json_object();
    json_object_set_new(o, "test", json_string("image_memory"));
    json_object_set_new(o, "weight_bytes", json_integer((json_int_t)ig_vision_weight_bytes(v)));
    json_object_set_new(o, "activation_peak_bytes", json_integer((json_int_t)ig_vision_act_bytes(v, n_threads)));
    json_array_append_new(results, o);
    rc = 0;
done:
    ig_context_free(ctx);
    ig_image_free(img);
    free(px);
    free(embd);
    free(enc_ms);
    free(pf_ms);
    free(tok);
    free(pos);
    free(seq);
    free(im);
    free(ep);
    free(want);
    return rc;
}
