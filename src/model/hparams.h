/* Reading Gemma 3 hyper-parameters from GGUF metadata or a HF config.json,
 * with the defaults and conventions both formats imply. */
#ifndef IG_HPARAMS_H
#define IG_HPARAMS_H

#include "model/gguf.h"

ig_status hparams_from_gguf(const gguf_file *f, ig_hparams *hp);
/* json: contents of config.json (NUL-terminated). Handles the
 * transformers-5 style (rope_parameters, layer_types), the hub style
 * (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern)
 * and Gemma3ForConditionalGeneration's sparse text_config. */
ig_status hparams_from_hf_config(const char *json, ig_hparams *hp);
/* Consistency checks shared by both paths (positive sizes, limits). */
ig_status hparams_validate(const ig_hparams *hp);

#endif
