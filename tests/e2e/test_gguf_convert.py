"""tests/tools/hf_to_gguf.py: the GGUF files it writes from the fixture HF
checkpoints open in the `gguf` package's reader and follow llama.cpp's gemma3
conventions (names, shapes, types, metadata, +1 folded into the norms). When
llama.cpp is built (scripts/build-llamacpp.sh), llama.cpp itself runs the
converted files and must reproduce the fixtures' Hugging Face logits, which
checks the conventions against an implementation this project did not write."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402
import hf_to_gguf  # noqa: E402

import gguf  # noqa: E402

MODELS = R.hf_models()
TYPES = ["f32", "f16", "bf16", "q8_0"]
MATRIX_TYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}
PER_LAYER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
             "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"]

pytestmark = pytest.mark.skipif(not MODELS, reason=f"no fixtures in {R.HF_FIXTURES}")


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf")


def field(r: gguf.GGUFReader, key: str):
    f = r.get_field(key)
    return None if f is None else f.contents()


def hf_cfg(model: Path) -> dict:
    return json.loads((model / "f32" / "config.json").read_text())


@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_converted_gguf_structure(model: Path, typ: str, gguf_dir: Path):
    path = R.converted_gguf(model, typ, gguf_dir)
    r = gguf.GGUFReader(path)
    cfg = hf_cfg(model)
    L, H, F = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv, hd, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"]

    assert field(r, "general.architecture") == "gemma3"
    assert field(r, "general.file_type") == FILE_TYPE[typ]
    assert field(r, "general.quantization_version") == 2
    expect = {
        "gemma3.context_length": cfg["max_position_embeddings"],
        "gemma3.embedding_length": H,
        "gemma3.block_count": L,
        "gemma3.feed_forward_length": F,
        "gemma3.attention.head_count": nh,
        "gemma3.attention.head_count_kv": nkv,
        "gemma3.attention.key_length": hd,
        "gemma3.attention.value_length": hd,
        "gemma3.attention.sliding_window": cfg["sliding_window"],
    }
    for k, v in expect.items():
        assert field(r, k) == v, k
    assert field(r, "gemma3.attention.layer_norm_rms_epsilon") == pytest.approx(cfg["rms_norm_eps"], rel=1e-6)
    rp = cfg["rope_parameters"]
    assert field(r, "gemma3.rope.freq_base") == rp["full_attention"]["rope_theta"]
    assert field(r, "gemma3.rope.freq_base_swa") == rp["sliding_attention"]["rope_theta"]
    if rp["full_attention"].get("rope_type") == "linear":
        assert field(r, "gemma3.rope.scaling.type") == "linear"
        assert field(r, "gemma3.rope.scaling.factor") == rp["full_attention"]["factor"]
    else:
        assert field(r, "gemma3.rope.scaling.type") is None
    # query_pre_attn_scalar: explicit scale key only where llama.cpp's rule
    # (1/sqrt(key_length) unless 62 layers) gives a different value
    qpas = cfg["query_pre_attn_scalar"]
    if qpas != hd:
        assert field(r, "gemma3.attention.scale") == pytest.approx(qpas ** -0.5, rel=1e-7)
    else:
        assert field(r, "gemma3.attention.scale") is None
    # layer pattern: both fixtures follow llama.cpp's default period 6
    sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
    assert sliding == [i % 6 < 5 for i in range(L)]
    assert field(r, "gemma3.attention.sliding_window_pattern") is None
    assert field(r, "tokenizer.ggml.model") is None  # no tokenizer block

    # tensors: 13 per layer + token_embd + output_norm, no output.weight
    tensors = {t.name: t for t in r.tensors}
    want = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{n}.weight" for i in range(L) for n in PER_LAYER}
    assert set(tensors) == want
    assert len(tensors) == 13 * L + 2
    shapes = {"token_embd": [H, V], "output_norm": [H], "attn_norm": [H], "attn_q": [H, nh * hd],
              "attn_k": [H, nkv * hd], "attn_v": [H, nkv * hd], "attn_output": [nh * hd, H],
              "attn_q_norm": [hd], "attn_k_norm": [hd], "post_attention_norm": [H], "ffn_norm": [H],
              "ffn_gate": [H, F], "ffn_up": [H, F], "ffn_down": [F, H], "post_ffw_norm": [H]}
    align = field(r, "general.alignment") or 32
    for name, t in tensors.items():
        kind = name.split(".")[-2]
        assert [int(x) for x in t.shape] == shapes[kind], name
        want_type = "F32" if len(shapes[kind]) == 1 else MATRIX_TYPE[typ]
        assert t.tensor_type.name == want_type, name
        assert t.data_offset % align == 0, name


@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_converted_gguf_values(model: Path, typ: str, gguf_dir: Path):
    """Dequantized tensors equal the HF weights (+1 on norms) up to the
    rounding of the storage type."""
    path = R.converted_gguf(model, typ, gguf_dir)
    r = gguf.GGUFReader(path)
    hf = hf_to_gguf.load_tensors(model / "f32")
    inv = {v: k for k, v in hf_to_gguf.LAYER_MAP.items()}
    tol = {"f32": 0.0, "f16": 2 ** -11, "bf16": 2 ** -8, "q8_0": 0.57 / 127}
    for t in r.tensors:
        if t.name == "token_embd.weight":
            src = hf["model.embed_tokens.weight"]
        elif t.name == "output_norm.weight":
            src = hf["model.norm.weight"] + 1
        else:
            _, i, kind, _ = t.name.split(".")
            src = hf[f"model.layers.{i}.{inv[kind]}.weight"]
            if kind.endswith("norm"):
                src = src + 1
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(src.shape)
        if src.ndim == 1 or typ == "f32":
            np.testing.assert_array_equal(got, src.astype(np.float32), err_msg=t.name)
        elif typ == "q8_0":
            # per block of 32: d = amax/127, |err| <= d/2 + 127*|d - f16(d)| <= 0.57 d
            blocks = src.reshape(-1, 32)
            amax = np.abs(blocks).max(axis=1, keepdims=True)
            err = np.abs(got.reshape(-1, 32) - blocks)
            assert np.all(err <= amax * tol[typ] + 1e-7), t.name
        else:
            # atol: f16 subnormals
            np.testing.assert_allclose(got, src, rtol=tol[typ], atol=6e-8, err_msg=t.name)


def test_swa_pattern_variants(gguf_dir: Path):
    model = MODELS[0]
    L = hf_cfg(model)["num_hidden_layers"]
    arr = R.converted_gguf(model, "f32", gguf_dir, swa_pattern="array")
    per = R.converted_gguf(model, "f32", gguf_dir, swa_pattern="period")
    assert list(field(gguf.GGUFReader(arr), "gemma3.attention.sliding_window_pattern")) == \
        [i % 6 < 5 for i in range(L)]
    assert field(gguf.GGUFReader(per), "gemma3.attention.sliding_window_pattern") == 6


# --- llama.cpp runs the converted files ------------------------------------------

needs_llamacpp = pytest.mark.skipif(R.llamacpp_bin_dir() is None,
                                    reason="llama.cpp not built (scripts/build-llamacpp.sh)")

# Bounds for llama.cpp itself on our conversions vs the HF f32 logits. Its CPU
# backend is not exact even on F32 files (GELU through an fp16 lookup table),
# and it rounds the activations to the weight type for the dot products
# (F16/BF16/Q8_0), so it is looser than ignis must be. Observed (llama.cpp
# 0c1e57098, 2026-11): f32 1.2e-4, f16 5.5e-4, bf16 4.2e-3, q8_0 1.5e-2,
# while a convention mistake is far off (the wrong attention scale alone: 3.5e-2).
LLAMACPP_BOUND = {"f32": 3e-4, "f16": 2e-3, "bf16": 1e-2, "q8_0": 3e-2}


@needs_llamacpp
@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_llamacpp_reproduces_hf_on_converted(model: Path, typ: str, gguf_dir: Path, tmp_path: Path):
    """llama.cpp (which ignores gemma3.attention.scale) on our GGUF, with the
    scale folded into attn_q_norm where it differs from llama.cpp's rule, vs
    the fixtures' transformers logits."""
    path = R.converted_gguf(model, typ, gguf_dir, vocab_none=True, fold_scale_into_q_norm=True)
    ref = R.hf_reference(model)
    for s in ref["sequences"]:
        want = np.array(s["logits"], dtype=np.float32)
        got = R.llamacpp_all_logits(path, s["tokens"], tmp_path / "l.f32")
        errs = R.rel_errs_per_position(got, want)
        assert max(errs) <= LLAMACPP_BOUND[typ], (typ, [f"{e:.2e}" for e in errs])
        if typ != "bf16":
            assert (got.argmax(1) == want.argmax(1)).all()


@needs_llamacpp
def test_llamacpp_ignores_attention_scale(gguf_dir: Path, tmp_path: Path):
    """Documents why the scale key exists: llama.cpp's gemma3 loader derives
    the scale from key_length, so on tiny-27b-like (query_pre_attn_scalar 48,
    head_dim 32) the file with only gemma3.attention.scale is off."""
    model = next((m for m in MODELS if hf_cfg(m)["query_pre_attn_scalar"] != hf_cfg(m)["head_dim"]), None)
    if model is None:
        pytest.skip("no fixture with query_pre_attn_scalar != head_dim")
    path = R.converted_gguf(model, "f32", gguf_dir, vocab_none=True)
    s = R.hf_reference(model)["sequences"][0]
    got = R.llamacpp_all_logits(path, s["tokens"], tmp_path / "l.f32")
    assert R.rel_err(got, np.array(s["logits"])) > 1e-3
    assert math.isclose(field(gguf.GGUFReader(path), "gemma3.attention.scale"), 48 ** -0.5, rel_tol=1e-7)


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_float64_evaluation_of_converted_file(model: Path, gguf_dir: Path):
    """tests/tools/np_gemma3.py (float64, reads gemma3.attention.scale) on the
    F32 conversion reproduces the transformers logits: the file alone,
    including the explicit scale key, defines the model."""
    import np_gemma3
    hp, w = np_gemma3.load(str(R.converted_gguf(model, "f32", gguf_dir)))
    for s in R.hf_reference(model)["sequences"]:
        got = np_gemma3.forward(hp, w, s["tokens"])
        assert max(R.rel_errs_per_position(got, np.array(s["logits"]))) <= 1e-6
