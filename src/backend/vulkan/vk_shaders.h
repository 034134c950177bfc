/* The embedded SPIR-V modules (generated at build time from shaders/). */
#ifndef IG_VK_SHADERS_H
#define IG_VK_SHADERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ig_vk_shader_entry {
    const char *name;
    const uint32_t *code;
    const size_t *words;
} ig_vk_shader_entry;

extern const ig_vk_shader_entry ig_vk_shader_table[];
extern const int ig_vk_shader_count;

#endif
