/* Which type each tensor of a GGUF gets under llama-quantize's K-quant file
 * types (Q4_K_M, Q5_K_M, Q6_K), without an importance matrix: the rules of
 * its llama_tensor_get_type for dense models such as Gemma 3. */
#ifndef IG_QUANT_MIX_H
#define IG_QUANT_MIX_H

#include "model/gguf.h"
#include "quant/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* llama.cpp's enum llama_ftype values of the mixes. */
#define IG_FTYPE_Q4_K_M 15u
#define IG_FTYPE_Q5_K_M 17u
#define IG_FTYPE_Q6_K 18u

/* Fills out[i] for each tensor of g (g->tensors.count entries) for the
 * mix `ftype` (one of the above), whose default type is Q4_K, Q5_K or
 * Q6_K:
 *  - tensors llama-quantize never quantizes (fewer than 2 dimensions,
 *    names not ending in "weight", norms) get IG_TYPE_F32;
 *  - with `pure`, every other tensor gets the default type;
 *  - otherwise the output matrix (and the token embedding when there is no
 *    output.weight: tied embeddings) gets Q6_K, or Q8_0 when its rows are
 *    not whole 256-blocks; for Q4_K_M and Q5_K_M, attn_v and ffn_down
 *    become Q6_K in the first and last eighth of the layers and in every
 *    third layer between (llama.cpp's use_more_bits, counted in its tensor
 *    order: by layer, then by name);
 *  - finally a K type whose rows are not whole 256-blocks falls back as
 *    llama-quantize's does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0 (F16
 *    when not whole 32-blocks either).
 * Returns false with a message in err (errlen bytes) on a failure. */
bool ig_quant_mix_types(const gguf_file *g, uint32_t ftype, bool pure, ig_dtype *out, char *err,
                        size_t errlen);
/* The same for a tensor table with GGUF names (e.g. a Hugging Face
 * checkpoint's) and its layer count (-1: one layer per ffn_down). */
bool ig_quant_mix_types_tt(const ig_tensor_table *tt, int64_t n_layer, uint32_t ftype, bool pure,
                           ig_dtype *out, char *err, size_t errlen);

/* The GGUF's <architecture>.block_count, or -1 when it has none. */
int64_t ig_quant_gguf_block_count(const gguf_file *g);

/* ignis quantize's type for every tensor of tt converted to `want`:
 * tensors of two or more dimensions whose rows are whole blocks of want get
 * want, the others F32; for a K mix (mix_ftype one of the IG_FTYPE_* above,
 * 0 for none), the types of ig_quant_mix_types_tt. */
bool ig_quant_plan(const ig_tensor_table *tt, int64_t n_layer, ig_dtype want, uint32_t mix_ftype, bool pure,
                   ig_dtype *out, char *err, size_t errlen);

#endif
