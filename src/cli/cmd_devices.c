/* ignis devices: lists the Vulkan devices the backend can use (the index is
 * what --device takes) with the properties that matter for inference. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef IGNIS_HAVE_VULKAN
#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_tuning.h"

static void print_size(const char *label, uint64_t bytes) {
    if (bytes >= (1ull << 30)) printf("%s%.2f GiB", label, (double)bytes / (double)(1ull << 30));
    else printf("%s%.1f MiB", label, (double)bytes / (double)(1ull << 20));
}

static const char *yn(bool b) { return b ? "yes" : "no"; }

static void print_device(const ig_vk_device_info *d) {
    printf("device %d: %s (%s)\n", d->index, d->name, d->type);
    printf("  vulkan %u.%u.%u, vendor 0x%04x, device 0x%04x%s%s\n", d->api_version >> 22,
           (d->api_version >> 12) & 0x3ff, d->api_version & 0xfff, d->vendor_id, d->device_id,
           d->driver[0] ? ", driver " : "", d->driver);
    printf("  usable: %s%s%s\n", yn(d->usable), d->usable ? "" : " - ", d->usable ? "" : d->why_not);
    printf("  memory: %s\n", d->uma ? "unified (UMA: device memory is host-visible, no staging copies)"
                                    : "separate (uploads through staging)");
    for (int h = 0; h < d->n_heaps; h++) {
        printf("    heap %d: ", h);
        print_size("", d->heaps[h].size);
        printf("%s%s\n", d->heaps[h].device_local ? ", device-local" : ", host",
               d->heaps[h].host_visible ? ", host-visible" : "");
    }
    printf("  subgroup size: %u", d->subgroup_size);
    if (d->subgroup_min != d->subgroup_max) printf(" (%u..%u)", d->subgroup_min, d->subgroup_max);
    printf(", arithmetic: %s, size control: %s\n", yn(d->subgroup_arith), yn(d->subgroup_size_control));
    print_size("  maxStorageBufferRange: ", d->max_storage_buffer_range);
    print_size(", maxMemoryAllocationSize: ", d->max_memory_allocation_size);
    print_size(", maxBufferSize: ", d->max_buffer_size);
    printf("\n");
    printf("  shared memory: %u KiB, push constants: %u B, workgroup: %u invocations\n",
           d->max_shared_memory / 1024, d->max_push_constants, d->max_wg_invocations);
    printf("  fp16: %s, int8: %s, 16-bit storage: %s, 8-bit storage: %s\n", yn(d->fp16), yn(d->int8),
           yn(d->storage16), yn(d->storage8));
    printf("  integer dot product: %s%s\n", yn(d->int_dot),
           d->int_dot ? (d->int_dot_accel ? " (4x8 packed accelerated)" : " (not accelerated)") : "");
    printf("  cooperative matrix: KHR %s, NV %s%s%s\n", yn(d->coopmat_khr), yn(d->coopmat_nv),
           d->coopmat_shapes[0] ? "; " : "", d->coopmat_shapes);
    /* what ignis's tensor-core kernels will run on (by default) */
    const ig_vk_coopmat_choice c = ig_vk_coopmat_choose(
        d, ig_vk_compiler_coopmat_nv(), ig_vk_compiler_coopmat_khr(),
        (ig_vk_coopmat_wants){.any = true, .ext = IG_VK_COOPMAT_AUTO, .int8 = d->int_dot && ig_vk_compiler_int_dot(),
                              .attn = true});
    const char *f16 = c.nv && c.khr ? "KHR 16x16x16 for batches of up to 32, NV 16x8x16 above"
                      : c.khr       ? "KHR 16x16x16"
                      : c.nv        ? "NV 16x8x16"
                                    : "none (tiled f32 kernel)";
    printf("  tensor cores: matmul %s%s; int8 matmul %s; prefill attention %s\n", f16,
           c.sg32 ? " (subgroups of 32 required)" : "",
           c.i8_nv && c.i8_khr ? "KHR s8 16x16x32 for batches of up to 32, NV s8 16x8x32 above"
           : c.i8_khr          ? "KHR s8 16x16x32"
           : c.i8_nv           ? "NV s8 16x8x32"
                               : "none",
           c.attn_nv && c.attn_khr ? "KHR 16x16x16 for head dim 256, NV 16x8x16 for the others"
           : c.attn_khr            ? "KHR 16x16x16"
           : c.attn_nv             ? "NV 16x8x16"
                                   : "none");
    printf("  L2 prefetch of the weights in decode: %s\n", ig_vk_prefetch_default(d) ? "on" : "off");
    /* the tuning table's entries for this device (vk_tuning.c) */
    for (int i = 0; i < ig_vk_tuning_table_len; i++)
        if (ig_vk_tuning_matches(&ig_vk_tuning_table[i].match, d))
            printf("  tuning: %s (%s)\n", ig_vk_tuning_table[i].reason, ig_vk_tuning_table[i].values);
}

int cmd_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: ignis devices\n"
                   "Lists the Vulkan devices; pass the index to --device N.\n");
            return 0;
        }
        fprintf(stderr, "ignis devices: unknown argument '%s'\n", argv[i]);
        return 2;
    }
    ig_vk_device_info *infos = NULL;
    int n = 0;
    ig_status st = ig_vk_list_devices(&infos, &n);
    if (st != IG_OK) {
        fprintf(stderr, "ignis devices: %s\n", ig_last_error());
        return 1;
    }
    printf("shader compiler: cooperative matrix KHR %s, NV %s (each device's line \"tensor cores\" says what runs)\n",
           yn(ig_vk_compiler_coopmat_khr()), yn(ig_vk_compiler_coopmat_nv()));
    if (n == 0) printf("no Vulkan devices found (install a driver, e.g. mesa-vulkan-drivers)\n");
    for (int i = 0; i < n; i++) print_device(&infos[i]);
    free(infos);
    return 0;
}

#else

int cmd_devices(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ignis devices: this ignis was built without the Vulkan backend "
                    "(needs libvulkan-dev and glslc or glslang-tools at build time)\n");
    return 1;
}

#endif
