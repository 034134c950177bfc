/* What the stages of a decode step cost a Vulkan device, apart from the work.
 *
 *   build/ignis_vk_stage_probe [--shape 27b|1b|270m] [--loads N]
 *                              [--wgs N,N,...] [--device N] [--runs N]
 *
 * Streams the weight bytes of one decode step of a Gemma 3 shape (Q4_K_M
 * sizes: Q6_K where ignis synth's recipe puts it) in the engine's order, one
 * stage per op of the decode graph (8 per layer: q/k/v, attention, o, norm,
 * gate/up, quantization, down, norm; the ops that read no weights read
 * nothing), and times it three ways:
 *   - a dispatch per stage with a barrier after each (the engine's form);
 *   - the reading stages only, with and without barriers;
 *   - one persistent dispatch whose workgroups walk all stages with a grid
 *     barrier after each (shaders/grid.glsl), for each workgroup count,
 *     with barriers that watch the arrival counter or a flag the last
 *     arrival raises.
 * The reads go round a buffer of up to 4 GiB, so they come from memory, not
 * from the cache. Nothing is computed: the times are what the structure
 * alone costs, a ceiling for any kernels of that structure.
 * (docs/vulkan-backend.md, fifteenth session, has the H100's numbers.) */
#include "backend/vulkan/vk_internal.h"
#include "core/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STAGES 2048
#define MAX_WGS 64

/* A range read by one stage, or by part of one: a stage larger than the
 * buffer is several ranges with no barrier between them (as the engine's
 * weights split over bindings). */
#define RANGE_NO_SYNC 0x80000000u /* in n: no barrier after this range */
typedef struct {
    uint32_t off, n; /* vec4s */
} stage;

typedef struct {
    const char *name;
    long d, q_dim, kv_dim, ffn, layers, vocab;
} shape;

static const shape shapes[] = {
    {"27b", 5376, 4096, 2048, 21504, 62, 262144},
    {"1b", 1152, 1024, 256, 6912, 26, 262144},
    {"270m", 640, 1024, 256, 2048, 18, 262144},
};

static int usage(void) {
    fprintf(stderr, "usage: ignis_vk_stage_probe [--shape 27b|1b|270m] [--loads 1..8] [--wgs N,N,...] "
                    "[--device N] [--runs N]\n");
    return 2;
}

/* A positive integer argument, else -1. */
static long positive(const char *s, long max) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v <= max ? v : -1;
}

/* Bytes per stage of one decode step, in the engine's order. */
static int step_stages(const shape *s, uint64_t *bytes) {
    const double q4 = 144.0 / 256, q6 = 210.0 / 256; /* Q4_K, Q6_K bytes per weight */
    int n = 0;
    bytes[n++] = 0; /* embedding */
    bytes[n++] = 0; /* the first norm */
    for (long i = 0; i < s->layers; i++) {
        const long l8 = s->layers / 8;
        const bool more = i < l8 || i >= 7 * s->layers / 8 || (i - l8) % 3 == 2; /* synth.h's recipe */
        const double v = more ? q6 : q4;
        bytes[n++] = (uint64_t)((double)(s->q_dim + s->kv_dim) * s->d * q4 + (double)s->kv_dim * s->d * v);
        bytes[n++] = 0; /* attention */
        bytes[n++] = (uint64_t)((double)s->d * s->q_dim * q4);
        bytes[n++] = 0; /* norm */
        bytes[n++] = (uint64_t)(2.0 * s->ffn * s->d * q4);
        bytes[n++] = 0; /* int8 copy */
        bytes[n++] = (uint64_t)((double)s->d * s->ffn * v);
        bytes[n++] = 0; /* norm */
    }
    bytes[n++] = 0; /* final norm */
    bytes[n++] = (uint64_t)((double)s->vocab * s->d * q6); /* tied output */
    return n;
}

static void report(const char *what, double t, uint64_t bytes) {
    printf("%-44s %8.3f ms %8.1f steps/s %6.0f GB/s\n", what, t * 1e3, 1 / t, (double)bytes / t / 1e9);
}

/* The stages as dispatches: every stage with a barrier after it (mode 0),
 * the reading ones only without barriers (1) or with (2). */
static ig_status run_dispatches(ig_vk_device *dev, ig_vk_step *step, const stage *st, int n, uint32_t loads,
                                const ig_vk_part *const *parts, const ig_vk_buffer *dst, int mode, int runs,
                                double *t, ig_vk_graph_stats *stats) {
    VkPipeline pipe;
    IG_TRY(ig_vk_pipeline(dev, "probe_seg", 0, loads, &pipe));
    ig_vk_graph *g;
    IG_TRY(ig_vk_graph_begin(dev, step, 1, &g));
    ig_status rc = IG_OK;
    uint64_t part = 0; /* of the current stage's ranges */
    for (int i = 0; i < n && rc == IG_OK; i++) {
        const uint32_t n4 = st[i].n & ~RANGE_NO_SYNC;
        if (mode > 0 && n4 == 0) continue;
        if (mode != 1) {
            /* a stage's first range writes what the last stage's first
               wrote (a barrier), its others words of their own (none) */
            const ig_vk_bind w = {dst->parts, 16 * part, 16 * part + 16, true};
            rc = ig_vk_rec_hazards(g, &w, 1);
        }
        part = st[i].n & RANGE_NO_SYNC ? part + 1 : 0;
        const uint32_t pc[2] = {n4, st[i].off};
        uint64_t groups = ((uint64_t)n4 + 256ull * loads - 1) / (256ull * loads);
        if (groups < 1) groups = 1;
        if (groups > 65535) groups = 65535;
        if (rc == IG_OK) rc = ig_vk_rec_dispatch(g, pipe, parts, 4, pc, sizeof pc, (uint32_t)groups, 1, 1);
    }
    if (rc == IG_OK) rc = ig_vk_graph_end(g);
    if (rc == IG_OK) rc = ig_vk_graph_best_time(g, runs, t);
    *stats = ig_vk_graph_get_stats(g);
    ig_vk_graph_free(g);
    return rc;
}

/* A graph of one persistent dispatch of `wgs` workgroups over the stages;
 * check: each barrier verified (probe.comp). */
static ig_status persistent_graph(ig_vk_device *dev, ig_vk_step *step, const char *shader, int n_stages,
                                  uint32_t loads, uint32_t wgs, const ig_vk_part *const *parts,
                                  const ig_vk_buffer *dst, bool check, ig_vk_graph **out) {
    VkPipeline pipe;
    IG_TRY(ig_vk_pipeline(dev, shader, 0, loads, &pipe));
    ig_vk_graph *g;
    IG_TRY(ig_vk_graph_begin(dev, step, 1, &g));
    const ig_vk_bind b = {dst->parts, 0, 16, true};
    ig_status rc = ig_vk_rec_hazards(g, &b, 1);
    const uint32_t pc[3] = {(uint32_t)n_stages, 64, check}; /* stages, grid_join's polls, check */
    if (rc == IG_OK) rc = ig_vk_rec_dispatch(g, pipe, parts, 4, pc, sizeof pc, wgs, 1, 1);
    if (rc == IG_OK) rc = ig_vk_graph_end(g);
    if (rc != IG_OK) {
        ig_vk_graph_free(g);
        return rc;
    }
    *out = g;
    return IG_OK;
}

/* The persistent dispatch: once with its barriers checked, then timed;
 * *joined: how many workgroups took part (grid.glsl's discovery). */
static ig_status run_persistent(ig_vk_device *dev, ig_vk_step *step, const char *shader, int n_stages,
                                uint32_t loads, uint32_t wgs, const ig_vk_part *const *parts, ig_vk_buffer *dst,
                                int runs, double *t, uint32_t *joined) {
    ig_vk_graph *g;
    IG_TRY(ig_vk_buffer_zero(dst));
    IG_TRY(persistent_graph(dev, step, shader, n_stages, loads, wgs, parts, dst, true, &g));
    uint32_t broken = 0;
    ig_status rc = ig_vk_graph_run(g);
    if (rc == IG_OK) rc = ig_vk_buffer_read(dst, 1025 * 4, &broken, sizeof broken);
    ig_vk_graph_free(g);
    if (rc == IG_OK && broken)
        rc = ig_fail(IG_ERR_BACKEND, "stage probe: a grid barrier of %s let a workgroup through early", shader);
    if (rc == IG_OK) rc = persistent_graph(dev, step, shader, n_stages, loads, wgs, parts, dst, false, &g);
    if (rc != IG_OK) return rc;
    rc = ig_vk_graph_best_time(g, runs, t);
    if (rc == IG_OK) rc = ig_vk_buffer_read(dst, 0, joined, sizeof *joined);
    ig_vk_graph_free(g);
    return rc;
}

int main(int argc, char **argv) {
    const shape *sh = &shapes[0];
    long loads = 1, device = -1, runs = 5;
    const char *wgs_arg = "132,264,528,1056";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(a, "--shape") == 0) {
            sh = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                if (strcmp(v, shapes[k].name) == 0) sh = &shapes[k];
            if (!sh) return usage();
        } else if (strcmp(a, "--loads") == 0) {
            if ((loads = positive(v, 8)) < 0) return usage();
        } else if (strcmp(a, "--device") == 0) { /* the index `ignis devices` lists */
            if (strcmp(v, "0") == 0) device = 0;
            else if ((device = positive(v, 64)) < 0) return usage();
        } else if (strcmp(a, "--runs") == 0) {
            if ((runs = positive(v, 1000)) < 0) return usage();
        } else if (strcmp(a, "--wgs") == 0) {
            wgs_arg = v;
        } else {
            return usage();
        }
        i++;
    }
    uint32_t wgs[MAX_WGS];
    int n_wgs = 0;
    for (const char *p = wgs_arg; *p;) {
        char *end;
        const long w = strtol(p, &end, 10);
        if (end == p || w <= 0 || w > 65535 || n_wgs == MAX_WGS || (*end && *end != ',')) return usage();
        wgs[n_wgs++] = (uint32_t)w;
        p = *end ? end + 1 : end;
    }

    uint64_t bytes[MAX_STAGES];
    const int n = step_stages(sh, bytes);
    ig_vk_device_params params = ig_vk_device_default_params();
    if (device >= 0) params.index = (int)device;
    ig_vk_device *dev = NULL;
    ig_status rc = ig_vk_device_create(&params, &dev);
    if (rc != IG_OK) {
        fprintf(stderr, "ignis_vk_stage_probe: %s\n", ig_last_error());
        return 1;
    }
    const ig_vk_device_info *info = ig_vk_device_get_info(dev);
    uint64_t size = 4ull << 30;
    if (size > info->max_storage_buffer_range) size = info->max_storage_buffer_range;
    if (size > info->max_memory_allocation_size) size = info->max_memory_allocation_size;
    size &= ~(uint64_t)255;

    /* stages laid round the buffer; one that does not fit where the last
       ended starts again at 0 */
    stage st[MAX_STAGES];
    uint64_t pos = 0, total = 0;
    int n_read = 0;
    const uint64_t cap4 = size / 16 / 2; /* the most vec4s of one range */
    int n_ranges = 0;
    for (int i = 0; i < n; i++) {
        uint64_t left = (bytes[i] + 15) / 16;
        total += left * 16;
        n_read += left > 0;
        do {
            const uint64_t v4 = left < cap4 ? left : cap4;
            if (n_ranges == MAX_STAGES) {
                fprintf(stderr, "ignis_vk_stage_probe: more than %d ranges\n", MAX_STAGES);
                ig_vk_device_free(dev);
                return 1;
            }
            if ((pos + v4) * 16 > size) pos = 0;
            left -= v4;
            st[n_ranges++] = (stage){(uint32_t)pos, (uint32_t)v4 | (left ? RANGE_NO_SYNC : 0)};
            pos += v4;
        } while (left);
    }
    stage st_read[MAX_STAGES];
    int n_read_ranges = 0;
    for (int i = 0; i < n_ranges; i++)
        if (st[i].n) st_read[n_read_ranges++] = st[i];

    ig_vk_buffer *src = NULL, *dst = NULL, *seg = NULL, *seg_read = NULL, *counters = NULL;
    ig_vk_step *step = NULL;
    rc = ig_vk_buffer_create(dev, IG_VK_MEM_DEVICE, size, &src);
    if (rc == IG_OK) rc = ig_vk_buffer_zero(src);
    if (rc == IG_OK) rc = ig_vk_buffer_create(dev, IG_VK_MEM_DEVICE, 4 * 1040, &dst);
    if (rc == IG_OK) rc = ig_vk_buffer_zero(dst);
    if (rc == IG_OK) rc = ig_vk_buffer_create(dev, IG_VK_MEM_DEVICE, 32, &counters);
    if (rc == IG_OK) rc = ig_vk_buffer_zero(counters);
    if (rc == IG_OK) rc = ig_vk_buffer_create(dev, IG_VK_MEM_DEVICE, sizeof(stage) * (uint64_t)n_ranges, &seg);
    if (rc == IG_OK) rc = ig_vk_buffer_write(seg, 0, st, sizeof(stage) * (uint64_t)n_ranges);
    if (rc == IG_OK)
        rc = ig_vk_buffer_create(dev, IG_VK_MEM_DEVICE, sizeof(stage) * (uint64_t)n_read_ranges, &seg_read);
    if (rc == IG_OK) rc = ig_vk_buffer_write(seg_read, 0, st_read, sizeof(stage) * (uint64_t)n_read_ranges);
    if (rc == IG_OK) rc = ig_vk_step_create(dev, 1, &step);
    if (rc == IG_OK) {
        printf("%s: shape %s, %d stages (%d reading), %.3f GB per step, buffer %.2f GiB, %ld loads in flight "
               "per invocation\n",
               info->name, sh->name, n, n_read, (double)total / 1e9, (double)size / 1073741824.0, loads);
        const ig_vk_part *parts[4] = {src->parts, seg->parts, counters->parts, dst->parts};
        static const char *names[] = {"a dispatch per stage", "reading stages only", "reading stages only"};
        for (int mode = 0; mode < 3 && rc == IG_OK; mode++) {
            double t = 0;
            ig_vk_graph_stats gs = {0, 0, 0};
            rc = run_dispatches(dev, step, st, n_ranges, (uint32_t)loads, parts, dst, mode, (int)runs, &t, &gs);
            char what[96];
            snprintf(what, sizeof what, "%s, %d barriers", names[mode], gs.n_barrier);
            if (rc == IG_OK) report(what, t, total);
        }
        /* grid barriers that watch the arrival counter, or a flag the last
           arrival raises (grid.glsl, GRID_FLAG) */
        static const char *const barrier_shader[2] = {"probe_persist", "probe_persist_flag"};
        static const char *const barrier_name[2] = {"counter", "flag"};
        for (int k = 0; k < n_wgs && rc == IG_OK; k++) {
            for (int f = 0; f < 2 && rc == IG_OK; f++) {
                for (int all = 1; all >= 0 && rc == IG_OK; all--) {
                    const ig_vk_part *pp[4] = {src->parts, all ? seg->parts : seg_read->parts, counters->parts,
                                               dst->parts};
                    double t = 0;
                    uint32_t joined = 0;
                    rc = run_persistent(dev, step, barrier_shader[f], all ? n_ranges : n_read_ranges,
                                        (uint32_t)loads, wgs[k], pp, dst, (int)runs, &t, &joined);
                    char what[96];
                    snprintf(what, sizeof what, "persistent, %u of %u joined, %d %s barriers", joined, wgs[k],
                             all ? n : n_read, barrier_name[f]);
                    if (rc == IG_OK) report(what, t, total);
                }
            }
        }
    }
    if (rc != IG_OK) fprintf(stderr, "ignis_vk_stage_probe: %s\n", ig_last_error());
    ig_vk_step_free(step);
    ig_vk_buffer_free(seg_read);
    ig_vk_buffer_free(seg);
    ig_vk_buffer_free(counters);
    ig_vk_buffer_free(dst);
    ig_vk_buffer_free(src);
    ig_vk_device_free(dev);
    return rc == IG_OK ? 0 : 1;
}
