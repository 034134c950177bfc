/* The GGUF metadata of a Hugging Face Gemma 3 checkpoint, as llama.cpp's
 * convert_hf_to_gguf.py (class Gemma3Model) writes it for the text model:
 * general.{architecture, type, name, size_label}, gemma3.{block_count,
 * context_length, embedding_length, feed_forward_length,
 * attention.head_count, attention.head_count_kv, attention.key_length,
 * attention.value_length, attention.layer_norm_rms_epsilon,
 * attention.sliding_window, rope.freq_base, rope.freq_base_swa,
 * rope.scaling.type/factor (linear scaling only), final_logit_softcapping}
 * and tokenizer.chat_template. Two keys where the converter's cannot express
 * the checkpoint (the same as tests/tools/hf_to_gguf.py):
 * gemma3.attention.scale when query_pre_attn_scalar differs from what
 * llama.cpp derives, and gemma3.attention.sliding_window_pattern when the
 * layer types are not llama.cpp's default period of 6.
 *
 * Tokenizer: from tokenizer.model (SentencePiece) as the converter's
 * _set_vocab_sentencepiece: tokenizer.ggml.model "llama", pre "default",
 * tokens / scores / token_type padded to config.json's vocab_size with
 * [PAD<i>] (UNUSED, -10000), tokenizer_config.json's added_tokens_decoder
 * applied (special -> CONTROL, score -1000), the ids of its bos/eos/unk/
 * sep/pad/cls/mask tokens and its add_bos_token / add_eos_token, and
 * add_space_prefix false. Without tokenizer.model, from tokenizer.json
 * (a SentencePiece-converted BPE; the converter would write a GPT-2 style
 * vocabulary): the same keys from ignis's reading of it, each piece scored
 * minus the rank of its first merge. Without either, the vocabulary is not
 * converted: tokenizer.ggml.model = "none" with gemma3.vocab_size, which
 * llama.cpp needs to open the file (token ids in, logits out).
 *
 * Tensors keep hf_model's GGUF names; the writer of the tensor data adds 1
 * to every norm weight (hf_gguf_is_norm), the GGUF convention for Gemma. */
#ifndef IG_HF_GGUF_H
#define IG_HF_GGUF_H

#include "model/gguf_write.h"
#include "model/hf.h"

/* Adds the keys above to w; dir is the checkpoint's folder (tokenizer
 * files; its last component is general.name when config.json has none). */
ig_status hf_gguf_add_metadata(const hf_model *m, const char *dir, gguf_writer *w);

/* True for the norm weights, which GGUF stores as 1 + w (Gemma3RMSNorm). */
bool hf_gguf_is_norm(const char *gguf_name);

#endif
