"""`ignis synth --mmproj`: a synthetic Gemma 3 vision tower in llama.cpp's
mmproj layout, and the image rows of `ignis bench` (slow tier: the bench and llama.cpp).

A 1-layer 270M text model (the real model's vocabulary, plus
<image_soft_token>) with a small tower (image 112, 2 layers, the released
width): the file carries llama.cpp's clip keys and tensor names and types
(f16, and q8_0 with ffn_down left f16 as its rows are not whole blocks);
`ignis info --mmproj` describes it; `ignis bench --image` prints the encode
and image-prefill rows and the encoder's memory; llama.cpp's mtmd CLI (when
built) loads the pair and encodes an image.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

REAL = Path(os.environ.get("IGNIS_MODEL") or
            Path.home() / ".cache" / "ignis" / "gemma-3-270m-q4_k_m.gguf")
pytestmark = pytest.mark.skipif(not REAL.is_file(), reason=f"no model {REAL}")
IMAGE = R.FIXTURES / "vision" / "tiny-vlm" / "exact.png"


def ignis(build: Path, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "ignis"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module", params=["f16", "q8_0"])
def pair(request, ignis_build: Path, tmp_path_factory) -> tuple[Path, Path, str]:
    d = tmp_path_factory.mktemp("vsynth")
    text, mm = d / "text.gguf", d / f"mmproj-{request.param}.gguf"
    r = ignis(ignis_build, "synth", "--size", "270m", "--layers", "1", "--type", "q8_0",
              "--vocab-from", REAL, "-o", text, "--mmproj", mm, "--mmproj-type", request.param,
              "--vision-layers", "2", "--image-size", "112", "--quiet")
    assert r.returncode == 0, r.stderr
    return text, mm, request.param


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]


def test_mmproj_layout(pair):
    text, mm, typ = pair
    r = gguf.GGUFReader(mm)
    assert field(r, "general.architecture") == "clip"
    assert field(r, "clip.projector_type") == "gemma3"
    assert field(r, "clip.vision.image_size") == 112
    assert field(r, "clip.vision.patch_size") == 14
    assert field(r, "clip.vision.embedding_length") == 1152
    assert field(r, "clip.vision.feed_forward_length") == 4304
    assert field(r, "clip.vision.block_count") == 2
    assert field(r, "clip.vision.attention.head_count") == 16
    assert field(r, "clip.vision.projection_dim") == 640
    assert field(r, "clip.vision.projector.scale_factor") == 4
    assert field(r, "general.file_type") == (1 if typ == "f16" else 7)
    t = {x.name: x for x in r.tensors}
    assert len(t) == 5 + 2 * 16 + 2
    mat = Q.F16 if typ == "f16" else Q.Q8_0
    for name in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up"):
        assert t[f"v.blk.1.{name}.weight"].tensor_type == mat, name
    assert t["v.blk.0.ffn_down.weight"].tensor_type == Q.F16  # 4304 is not a whole number of blocks
    assert t["v.blk.0.ffn_up.weight"].shape.tolist() == [1152, 4304]
    assert t["v.patch_embd.weight"].shape.tolist() == [14, 14, 3, 1152]
    assert t["v.patch_embd.weight"].tensor_type == Q.F16
    assert t["v.position_embd.weight"].shape.tolist() == [1152, 64]
    assert t["mm.input_projection.weight"].shape.tolist() == [640, 1152]
    assert t["v.post_ln.weight"].tensor_type == Q.F32
    # the text model has the image placeholder
    tr = gguf.GGUFReader(text)
    toks = tr.fields["tokenizer.ggml.tokens"]
    assert bytes(toks.parts[toks.data[262144]]).decode() == "<image_soft_token>"
    assert any(x.name == "token_embd.weight" and x.shape.tolist() == [640, 262145] for x in tr.tensors)


@pytest.mark.slow
def test_info_and_bench(pair, ignis_build: Path, tmp_path: Path):
    text, mm, typ = pair
    r = ignis(ignis_build, "info", text, "--mmproj", mm)
    assert r.returncode == 0, r.stderr
    assert "SigLIP (mmproj), image 112x112, patch 14 (64 patches), width 1152, mlp 4304, 2 layers, 16 heads" \
        in r.stdout
    assert "4 per image" in r.stdout and "image 262144" in r.stdout
    out = tmp_path / "b.json"
    r = ignis(ignis_build, "bench", text, "--mmproj", mm, "--image", IMAGE, "-p", "0", "-n", "0",
              "-r", "1", "-t", "2", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "image encode" in r.stdout and "image prefill (4 tok)" in r.stdout
    rows = {x["test"]: x for x in json.loads(out.read_text())["results"]}
    assert rows["image_encode"]["ms_mean"] > 0 and rows["image_prefill"]["ms_mean"] > 0
    assert rows["image_prefill"]["n_tokens"] == 4
    mem = rows["image_memory"]
    # weights: 2 layers of 4 x 1152^2 + 2 x 1152 x 4304 matrices, f16 or mostly q8_0
    mats = 2 * (4 * 1152 * 1152 + 1152 * 4304)
    per = 2 if typ == "f16" else 34 / 32
    want = mats * per + 2 * 1152 * 4304 * 2
    assert want <= mem["weight_bytes"] <= want + (8 << 20)
    assert mem["activation_peak_bytes"] > 5 * 64 * 1152 * 4


def test_synth_mmproj_arguments(ignis_build: Path, tmp_path: Path):
    r = ignis(ignis_build, "synth", "--size", "270m", "--layers", "1", "--type", "q8_0",
              "-o", tmp_path / "t.gguf", "--mmproj", tmp_path / "m.gguf")
    assert r.returncode == 2 and "--vocab-from" in r.stderr
    r = ignis(ignis_build, "synth", "--size", "270m", "--layers", "1", "--type", "q8_0",
              "--vocab-from", REAL, "-o", tmp_path / "t.gguf", "--mmproj", tmp_path / "m.gguf",
              "--image-size", "100")
    assert r.returncode == 2 and "multiple" in r.stderr
    r = ignis(ignis_build, "synth", "--size", "270m", "--layers", "1", "--type", "q8_0",
              "--vocab-from", REAL, "-o", tmp_path / "t.gguf", "--mmproj", tmp_path / "m.gguf",
              "--mmproj-type", "q4_k")
    assert r.returncode == 2 and "--mmproj-type" in r.stderr
    assert not (tmp_path / "t.gguf").exists()


@pytest.mark.slow
@pytest.mark.skipif(R.llamacpp_bin_dir() is None or not (R.llamacpp_bin_dir() / "llama-mtmd-cli").exists(),
                    reason="llama-mtmd-cli not built (scripts/build-llamacpp.sh)")
def test_llamacpp_mtmd_loads(pair):
    text, mm, _ = pair
    b = R.llamacpp_bin_dir()
    env = dict(os.environ, LD_LIBRARY_PATH=str(b))
    r = subprocess.run([str(b / "llama-mtmd-cli"), "-m", str(text), "--mmproj", str(mm), "--image", str(IMAGE),
                        "-p", "describe", "-n", "1", "-t", "2", "--chat-template", "gemma", "-v"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    log = r.stdout + r.stderr
    assert "mtmd batch encoding done" in log and "image decoded (batch 1/1)" in log
