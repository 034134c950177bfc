"""`ignis quantize IN.gguf OUT.gguf --type T` on GGUF conversions of the tiny
fixture checkpoints (tests/tools/hf_to_gguf.py): every block is byte-exact
with the `gguf` package's reference quantizers (gguf.quants.quantize, the
same rules as llama.cpp's quantize_row_*_ref), the norms stay F32, the
metadata is copied (general.file_type set), ignis loads the result, and an
existing output is only replaced with --force."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

MODELS = R.hf_models()
pytestmark = pytest.mark.skipif(not MODELS, reason=f"no fixtures in {R.HF_FIXTURES}")

TYPES = {"f16": (Q.F16, 1), "bf16": (Q.BF16, 32), "q8_0": (Q.Q8_0, 7), "q4_0": (Q.Q4_0, 2),
         "q5_0": (Q.Q5_0, 8)}


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("quant")
    return R.converted_gguf(MODELS[0], "f32", d)


def fields(r: gguf.GGUFReader) -> dict:
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


@pytest.mark.parametrize("typ", list(TYPES))
def test_quantize_matches_gguf_reference(src: Path, typ: str, tmp_path: Path):
    out = tmp_path / f"out-{typ}.gguf"
    r = R.run_ignis(["quantize", src, out, "--type", typ])
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / f"out-{typ}.gguf.tmp").exists()
    qtype, ftype = TYPES[typ]
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(out)
    fa, fb = fields(a), fields(b)
    assert fb["general.file_type"] == ftype
    for k, v in fa.items():
        if k not in ("general.file_type", "general.quantization_version"):
            assert fb.get(k) == v, k
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    n_quant = 0
    for ta, tb in zip(a.tensors, b.tensors):
        x = np.asarray(ta.data, dtype=np.float32)
        blk = gguf.GGML_QUANT_SIZES[qtype][0]
        expect_type = qtype if len(ta.shape) >= 2 and ta.shape[0] % blk == 0 else Q.F32
        assert tb.tensor_type == expect_type, ta.name
        want = gguf.quants.quantize(x, expect_type) if expect_type != Q.F32 else x
        got = np.asarray(tb.data)
        assert np.array_equal(got.view(np.uint8).reshape(-1), np.asarray(want).view(np.uint8).reshape(-1)), ta.name
        n_quant += expect_type == qtype
    assert n_quant >= 7  # the embedding and the layers' matrices
    # ignis runs the result
    r = R.run_ignis(["logits", out, "--tokens", "2,10,20"])
    assert r.returncode == 0, r.stderr


def test_existing_output_needs_force(src: Path, tmp_path: Path):
    out = tmp_path / "o.gguf"
    out.write_bytes(b"keep")
    r = R.run_ignis(["quantize", src, out, "--type", "q8_0"])
    assert r.returncode == 1 and "--force" in r.stderr
    assert out.read_bytes() == b"keep"
    r = R.run_ignis(["quantize", src, out, "--type", "q8_0", "--force"])
    assert r.returncode == 0, r.stderr
    assert gguf.GGUFReader(out).fields["general.file_type"].contents() == 7


def test_bad_inputs_are_refused(src: Path, tmp_path: Path):
    q8 = tmp_path / "q8.gguf"
    assert R.run_ignis(["quantize", src, q8, "--type", "q8_0"]).returncode == 0
    r = R.run_ignis(["quantize", q8, tmp_path / "x.gguf", "--type", "q4_0"])
    assert r.returncode == 1 and "must be F32, F16 or BF16" in r.stderr
    assert not (tmp_path / "x.gguf").exists()
    r = R.run_ignis(["quantize", src, tmp_path / "x.gguf", "--type", "q3_k"])
    assert r.returncode == 2
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 60)
    r = R.run_ignis(["quantize", junk, tmp_path / "x.gguf", "--type", "q8_0"])
    assert r.returncode == 1
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "x.gguf.tmp").exists()
