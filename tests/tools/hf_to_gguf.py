#!/usr/bin/env python3
"""Converts a Gemma 3 text checkpoint in Hugging Face layout (config.json +
model.safetensors, e.g. tests/fixtures/hf/tiny-*/f32) to GGUF with the
`gguf` package's GGUFWriter, following llama.cpp's gemma3 conventions
(`convert_hf_to_gguf.py` class Gemma3Model):

- tensor names token_embd / output_norm / blk.N.{attn_norm, attn_q, attn_k,
  attn_v, attn_q_norm, attn_k_norm, attn_output, post_attention_norm,
  ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm}; no output.weight
  (tied embedding);
- +1 folded into every norm weight (Gemma3RMSNorm multiplies by 1 + w);
- metadata: context_length, embedding_length, block_count,
  feed_forward_length, attention.head_count(_kv), attention.key_length /
  value_length (= head_dim), attention.layer_norm_rms_epsilon,
  attention.sliding_window, rope.freq_base (global layers), rope.freq_base_swa
  (local layers; written by this llama.cpp version's converter too),
  rope.scaling.type = linear + rope.scaling.factor when the global layers use
  linear scaling, general.file_type, general.quantization_version.

Two additions where llama.cpp's gemma3 metadata cannot express the model:
- `gemma3.attention.scale` (f32, the multiplier applied to q.k, the same
  meaning as for granite/gemma4 in llama.cpp) = query_pre_attn_scalar**-0.5,
  written only when it differs from what llama.cpp derives (1/sqrt(key_length),
  or 1/sqrt(n_embd/n_head) for 62 layers). llama.cpp's gemma3 loader ignores
  the key, so llama.cpp itself computes such a file with the wrong scale.
- `gemma3.attention.sliding_window_pattern` (bool per layer, true = sliding)
  written only when the layer types differ from llama.cpp's default period 6
  (or always with --swa-pattern array|period).

Types (--type): f32 (everything F32), f16 / bf16 (2-D matrices F16 / BF16,
norms F32), q8_0 (2-D matrices Q8_0 through gguf.quants.quantize, norms F32).
No tokenizer keys unless --llamacpp-vocab-none (tokenizer.ggml.model "none"
and gemma3.vocab_size, which llama.cpp needs to open the file at all).

Usage: hf_to_gguf.py HF_DIR OUT.gguf [--type f32|f16|bf16|q8_0]
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

import gguf

ARCH = "gemma3"

LAYER_MAP = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "post_feedforward_layernorm": "post_ffw_norm",
}

TYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Minimal safetensors reader (F32, F16, BF16 -> float32 arrays)."""
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[base + b:base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: unsupported dtype {dt}")
        out[name] = a.reshape(info["shape"]).astype(np.float32, copy=True)
    return out


def load_tensors(hf_dir: Path) -> dict[str, np.ndarray]:
    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        tensors = {}
        for f in files:
            tensors.update(read_safetensors(hf_dir / f))
        return tensors
    return read_safetensors(hf_dir / "model.safetensors")


def text_config(cfg: dict) -> dict:
    if "text_config" in cfg:
        return {**cfg, **cfg["text_config"]}
    return cfg


def layer_is_sliding(cfg: dict, n_layer: int) -> list[bool]:
    if cfg.get("layer_types"):
        return [t == "sliding_attention" for t in cfg["layer_types"]]
    period = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
    return [(i + 1) % period != 0 for i in range(n_layer)]


def rope_params(cfg: dict) -> tuple[dict, dict]:
    """(global, local) rope parameter dicts in transformers-5 style."""
    rp = cfg.get("rope_parameters")
    if rp and ("full_attention" in rp or "sliding_attention" in rp):
        return rp.get("full_attention", {}), rp.get("sliding_attention", {})
    glob = dict(rp or cfg.get("rope_scaling") or {})
    if "rope_type" not in glob and "type" in glob:
        glob["rope_type"] = glob["type"]
    glob.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
    loc = {"rope_theta": cfg.get("rope_local_base_freq", 10_000.0), "rope_type": "default"}
    return glob, loc


def convert(hf_dir: Path, out: Path, typ: str = "f32", swa_pattern: str = "auto",
            vocab_none: bool = False, fold_scale_into_q_norm: bool = False) -> None:
    cfg = text_config(json.loads((hf_dir / "config.json").read_text()))
    tensors = load_tensors(hf_dir)
    # accept the multimodal checkpoint prefixes (language_model.model.*)
    renamed = {}
    for k, v in tensors.items():
        for p in ("model.language_model.", "language_model.model.", "model."):
            if k.startswith(p):
                k = "model." + k[len(p):]
                break
        renamed[k] = v
    tensors = renamed

    n_layer = cfg["num_hidden_layers"]
    n_embd = cfg["hidden_size"]
    n_head = cfg.get("num_attention_heads", 8)
    n_head_kv = cfg.get("num_key_value_heads", 4)
    head_dim = cfg.get("head_dim", 256)
    qpas = cfg.get("query_pre_attn_scalar", 256)
    qtype, ftype = TYPES[typ]

    w = gguf.GGUFWriter(str(out), ARCH)
    w.add_name(hf_dir.parent.name if hf_dir.name in ("f32", "bf16") else hf_dir.name)
    w.add_block_count(n_layer)
    w.add_context_length(cfg.get("max_position_embeddings", 131072))
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    glob, loc = rope_params(cfg)
    if glob.get("rope_type") == "linear" and glob.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(glob["factor"]))
    elif glob.get("rope_type") not in (None, "default"):
        raise ValueError(f"unsupported global rope type {glob.get('rope_type')}")
    w.add_rope_freq_base(float(glob.get("rope_theta", 1_000_000.0)))
    if loc.get("rope_theta") is not None:
        w.add_rope_freq_base_swa(float(loc["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    sliding = layer_is_sliding(cfg, n_layer)
    if any(sliding):
        w.add_sliding_window(cfg["sliding_window"])
        default6 = [i % 6 < 5 for i in range(n_layer)]
        if swa_pattern == "array" or (swa_pattern == "auto" and sliding != default6):
            w.add_sliding_window_pattern(sliding)
        elif swa_pattern == "period":
            periods = [p for p in range(1, n_layer + 2)
                       if sliding == [i % p < p - 1 for i in range(n_layer)]]
            if not periods:
                raise ValueError("layer types are not periodic")
            w.add_sliding_window_pattern(periods[0])
    if cfg.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
    if cfg.get("attn_logit_softcapping") is not None:
        raise ValueError("Gemma 3 has no attention softcapping")

    # the attention scale llama.cpp derives vs. the model's
    derived = 1.0 / math.sqrt(n_embd / n_head) if n_layer == 62 else 1.0 / math.sqrt(head_dim)
    want = qpas ** -0.5
    q_norm_factor = 1.0
    if abs(want - derived) > 1e-7 * want:
        if fold_scale_into_q_norm:
            # debugging aid for llama.cpp only: q is RMS-normed then scaled by
            # the q_norm weight, and RoPE is linear, so scaling that weight by
            # want/derived reproduces the model's scale in an engine that
            # ignores attention.scale
            q_norm_factor = want / derived
        else:
            w.add_attention_scale(want)

    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    vocab = tensors["model.embed_tokens.weight"].shape[0]
    if vocab_none:
        w.add_tokenizer_model("none")
        w.add_vocab_size(vocab)

    def add(name: str, a: np.ndarray) -> None:
        if a.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, a.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(np.ascontiguousarray(a, dtype=np.float32), qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    used = set()
    add("token_embd.weight", tensors["model.embed_tokens.weight"])
    used.add("model.embed_tokens.weight")
    for i in range(n_layer):
        for hf, gg in LAYER_MAP.items():
            key = f"model.layers.{i}.{hf}.weight"
            a = tensors[key]
            used.add(key)
            if gg.endswith("norm"):
                a = a + np.float32(1.0)
                if gg == "attn_q_norm":
                    a = a * np.float32(q_norm_factor)
            add(f"blk.{i}.{gg}.weight", a)
    add("output_norm.weight", tensors["model.norm.weight"] + np.float32(1.0))
    used.add("model.norm.weight")
    extra = [k for k in tensors if k not in used and not k.startswith(("lm_head", "vision_tower", "multi_modal_projector"))]
    if extra:
        raise ValueError(f"unexpected tensors: {extra[:5]}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", choices=sorted(TYPES), default="f32")
    ap.add_argument("--swa-pattern", choices=["auto", "array", "period"], default="auto")
    ap.add_argument("--llamacpp-vocab-none", action="store_true",
                    help="write tokenizer.ggml.model=none + vocab_size so llama.cpp can load the file")
    ap.add_argument("--fold-scale-into-q-norm", action="store_true",
                    help="(llama.cpp cross-checks only) fold the attention scale into attn_q_norm")
    a = ap.parse_args(argv)
    convert(a.hf_dir, a.out, a.type, a.swa_pattern, a.llamacpp_vocab_none, a.fold_scale_into_q_norm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
