/* The Vulkan tuning table (vk_tuning.c): what it gives each class of device,
 * its "name=value" overrides, and their checks. The table needs no device;
 * the last test creates one (skipped without). */
#include "test.h"

#ifdef IGNIS_HAVE_VULKAN

#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_tuning.h"
#include "model/model.h"

#include <string.h>

static ig_vk_device_info info_of(const char *type, uint32_t vendor, uint32_t subgroup, uint64_t local_gib,
                                 uint32_t max_wg) {
    ig_vk_device_info i;
    memset(&i, 0, sizeof i);
    i.type = type;
    i.vendor_id = vendor;
    i.subgroup_size = subgroup;
    i.max_wg_invocations = max_wg;
    i.n_heaps = 2;
    i.heaps[0].size = 1ull << 30; /* a host heap larger than nothing */
    i.heaps[1].size = local_gib << 30;
    i.heaps[1].device_local = true;
    return i;
}

/* A large NVIDIA GPU: the defaults, with the L2 prefetch. */
IG_TEST(vulkan_tuning_nvidia_80g) {
    const ig_vk_device_info i = info_of("discrete", 0x10DE, 32, 80, 1024);
    ig_vk_tuning t;
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    CHECK_EQ_INT(t.mv_wg, 128);
    CHECK_EQ_INT(t.mv_nr1, 1);
    CHECK_EQ_INT(t.mv_nrn, 2);
    CHECK_EQ_INT(t.mv_tpr, 64);
    CHECK_EQ_INT(t.mv_unroll, 1);
    CHECK_EQ_INT(t.mv_unrolln, 1);
    CHECK(t.mv_nrn_min == 3072);
    CHECK_EQ_INT(t.mv_long_tpr, 128);
    CHECK_EQ_INT(t.mv_long_unroll, 4);
    CHECK_EQ_INT(t.head_tail_nr, 2);
    CHECK_EQ_INT(t.norm_wg, 1024);
    CHECK(t.prefetch_stage == 4096u << 10);
    CHECK(t.prefetch_ahead == 32u << 20);
    CHECK_EQ_INT(t.prefetch_max_tokens, 1);
    CHECK_EQ_INT(t.cm_min_tokens_int8, 9);
    CHECK_EQ_INT(t.cm_min_tokens_f32, 5);
    CHECK_EQ_INT(t.cm_min_tokens_f16, 8);
    CHECK_EQ_INT(t.attn_merge_max, 512);
    CHECK(t.int8 && t.coopmat && t.fuse && t.x8_producers);
    CHECK(ig_vk_prefetch_default(&i));
    REQUIRE_OK(ig_vk_tuning_check(&t, &i));
}

/* No prefetch on smaller or other GPUs; wave64 keeps a row group per
 * subgroup; a device of 256-invocation workgroups narrower norms. */
IG_TEST(vulkan_tuning_other_gpus) {
    ig_vk_tuning t;
    ig_vk_device_info i = info_of("discrete", 0x10DE, 32, 24, 1024);
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    CHECK(t.prefetch_stage == 0);
    CHECK(!ig_vk_prefetch_default(&i));
    i = info_of("discrete", 0x1002, 64, 192, 1024);
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    CHECK(t.prefetch_stage == 0);
    CHECK_EQ_INT(t.mv_tpr, 64);
    i = info_of("integrated", 0x8086, 32, 4, 256);
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    CHECK_EQ_INT(t.norm_wg, 256);
    CHECK_EQ_INT(t.mv_wg, 128);
}

/* CPU devices (lavapipe): small mat-vec groups of several rows. */
IG_TEST(vulkan_tuning_cpu) {
    const ig_vk_device_info i = info_of("cpu", 0x10005, 8, 2, 1024);
    ig_vk_tuning t;
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    CHECK_EQ_INT(t.mv_wg, 32);
    CHECK_EQ_INT(t.mv_nr1, 4);
    CHECK_EQ_INT(t.mv_nrn, 1);
    CHECK_EQ_INT(t.mv_tpr, 32);
    CHECK_EQ_INT(t.mv_unroll, 2);
    CHECK_EQ_INT(t.mv_unrolln, 2);
    CHECK_EQ_INT(t.mv_long_tpr, 0);
    CHECK_EQ_INT(t.head_tail_nr, 4);
    CHECK_EQ_INT(t.norm_wg, 128);
    REQUIRE_OK(ig_vk_tuning_check(&t, &i));
}

IG_TEST(vulkan_tuning_parse) {
    const ig_vk_device_info i = info_of("discrete", 0x10DE, 32, 80, 1024);
    ig_vk_tuning t;
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    REQUIRE_OK(ig_vk_tuning_parse(&t, "mv_wg=64,,int8=0,mv_nrn_min=0,prefetch_ahead=4294967296,"));
    CHECK_EQ_INT(t.mv_wg, 64);
    CHECK(!t.int8);
    CHECK(t.mv_nrn_min == 0);
    CHECK(t.prefetch_ahead == 4294967296ull);
    CHECK(t.busy_timestamps);
    REQUIRE_OK(ig_vk_tuning_parse(&t, "busy_timestamps=0"));
    CHECK(!t.busy_timestamps);
    REQUIRE_OK(ig_vk_tuning_parse(&t, NULL));
    REQUIRE_OK(ig_vk_tuning_parse(&t, ""));
    CHECK_STATUS(ig_vk_tuning_parse(&t, "nosuch=1"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wg"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wg="), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wg=-1"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wg=12x"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wg=4294967296"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "int8=2"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_nrn_min=99999999999999999999999"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_wgx=1"), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "mv_w=1"), IG_ERR_INVALID_ARG);
    /* checks after overrides: shapes the kernels cannot run */
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    REQUIRE_OK(ig_vk_tuning_parse(&t, "mv_tpr=256"));
    CHECK_STATUS(ig_vk_tuning_check(&t, &i), IG_ERR_INVALID_ARG);
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    REQUIRE_OK(ig_vk_tuning_parse(&t, "norm_wg=100"));
    CHECK_STATUS(ig_vk_tuning_check(&t, &i), IG_ERR_INVALID_ARG);
    REQUIRE_OK(ig_vk_tuning_for(&i, &t));
    REQUIRE_OK(ig_vk_tuning_parse(&t, "mv_max_tokens=4"));
    CHECK_STATUS(ig_vk_tuning_check(&t, &i), IG_ERR_INVALID_ARG);
    CHECK_STATUS(ig_vk_tuning_parse(&t, "nosuch=1"), IG_ERR_INVALID_ARG);
}

/* Overrides reach the device: from its params and from the model that
 * makes it; a bad one fails the creation. */
IG_TEST(vulkan_tuning_device_overrides) {
    ig_vk_device *d = NULL;
    if (ig_vk_device_create(NULL, &d) != IG_OK) return; /* no device */
    const bool int8 = ig_vk_device_int8(d);
    const int index = ig_vk_device_get_info(d)->index;
    ig_vk_device_free(d);
    ig_vk_device_params p = ig_vk_device_default_params();
    p.index = index;
    p.tuning = "mv_wg=7";
    CHECK_STATUS(ig_vk_device_create(&p, &d), IG_ERR_INVALID_ARG);
    CHECK(d == NULL);
    p.tuning = "nosuch=1";
    CHECK_STATUS(ig_vk_device_create(&p, &d), IG_ERR_INVALID_ARG);
    if (!int8) return;
    p.tuning = "int8=0";
    REQUIRE_OK(ig_vk_device_create(&p, &d));
    CHECK(!ig_vk_device_int8(d));
    ig_vk_device_free(d);
    /* a model's overrides reach the device its first context makes */
    ig_model *m = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/hf/tiny-1b-like/f32", ig_test_fixtures());
    ig_model_params mp = ig_model_default_params();
    mp.backend = IG_BACKEND_VULKAN;
    mp.device = index;
    REQUIRE_OK(ig_model_load(path, &mp, &m));
    ig_status st = ig_model_set_device_tuning(m, "int8=0");
    CHECK_STATUS(st, IG_OK);
    ig_context *ctx = NULL;
    ig_context_params cp = ig_context_default_params();
    cp.n_ctx = 32;
    if (st == IG_OK && ig_context_create(m, &cp, &ctx) == IG_OK) {
        CHECK(!ig_vk_device_int8(ig_vk_engine_device(m)));
        /* too late once the device exists */
        CHECK_STATUS(ig_model_set_device_tuning(m, "int8=1"), IG_ERR_INVALID_ARG);
    } else CHECK(false);
    ig_context_free(ctx);
    ig_model_free(m);
}

#else /* !IGNIS_HAVE_VULKAN */

IG_TEST(vulkan_tuning) { ig_test_skip("built without the Vulkan backend"); }

#endif
