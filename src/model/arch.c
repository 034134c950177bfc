/* The table of model families (see arch.h). */
#include "model/arch.h"

#include <string.h>

static const ig_arch archs[] = {
    {.name = "gemma3", .hf_types = {"gemma3", "gemma3_text"}, .build_graph = ig_gemma3_build_graph},
};

const ig_arch *ig_arch_find(const char *s, size_t len) {
    if (!s) return NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, s, len) == 0) return &archs[i];
    return NULL;
}

const ig_arch *ig_arch_find_hf(const char *model_type) {
    if (!model_type) return NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        for (int j = 0; j < 4 && archs[i].hf_types[j]; j++)
            if (strcmp(archs[i].hf_types[j], model_type) == 0) return &archs[i];
    return NULL;
}
