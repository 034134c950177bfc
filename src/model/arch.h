/* Model families. What differs between them is how the forward pass is
 * built from the loaded weights: one builder per family (model/gemma3.c),
 * found here by the architecture string of the file (GGUF
 * general.architecture, or a Hugging Face config's model_type). Adding a
 * family is one table entry, its builder, and any ops it needs. */
#ifndef IG_ARCH_H
#define IG_ARCH_H

#include "core/util.h"

#include <stddef.h>

struct ig_model;
struct ig_graph;

typedef struct ig_arch {
    const char *name;          /* GGUF general.architecture; also ig_hparams.arch */
    const char *hf_types[4];   /* config.json model_type values, NULL-terminated */
    /* The forward pass as an op list (engine/graph.h). */
    ig_status (*build_graph)(const struct ig_model *m, struct ig_graph *g);
} ig_arch;

/* The family named s (s[0..len), not NUL-terminated), or NULL. */
const ig_arch *ig_arch_find(const char *s, size_t len);
/* The family of a config.json model_type, or NULL. */
const ig_arch *ig_arch_find_hf(const char *model_type);

/* Builders (one file per family). */
ig_status ig_gemma3_build_graph(const struct ig_model *m, struct ig_graph *g);

#endif
