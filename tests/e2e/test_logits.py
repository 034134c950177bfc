"""Engine acceptance: ignis's logits against references this project did not
write.

Interface assumed (src/cli/cmd_logits.c):
    ignis logits MODEL --tokens 2,10,20 [--all] [--incremental] [--kv f32|f16] --out FILE
writes float32 little-endian logits, every position with --all (row-major
positions x vocab). MODEL is a GGUF file or a Hugging Face directory
(config.json + model.safetensors). The binary is $IGNIS_BUILD/ignis
(default build/ignis).

References:
- fixtures/hf/tiny-*/reference.json (transformers, float32 eager):
  f32/ vs `logits`, bf16/ vs `logits_bf16_weights`;
- the same f32 weights converted to GGUF (F32, F16, Q8_0) by
  tests/tools/hf_to_gguf.py vs `logits`;
- the real Gemma 3 270M Q4_K_M vs llama.cpp (tests/data/llamacpp-gemma3-270m.*,
  made by tests/tools/make_llamacpp_reference.py).

Measure: per position, ||out - ref|| / ||ref|| (L2 over the vocab).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

MODELS = R.hf_models()

# ||out - ref|| / ||ref|| bounds per position, by KV-cache type: f32 is the
# same arithmetic as the reference up to summation order (a float64 numpy
# evaluation, tests/tools/np_gemma3.py, is 3e-7 away); f16 KV rounds K and V
# to 11 significant bits (<= 2^-12 relative each), which moved llama.cpp's
# logits on the F32 conversions by 0.5e-4..1e-4 (from 0.9e-4..1.2e-4 with f32 KV
# to 1.5e-4..2.2e-4); 2e-3 is 10x that.
KV_BOUND = {"f32": 1e-4, "f16": 2e-3}

# GGUF conversions of the f32 weights, vs the f32 reference (KV f32):
# - F32: lossless, same bound as the HF f32 checkpoint;
# - F16: each weight rounded to 11 significant bits (<= 2^-12 relative);
#   bf16 rounding (3 fewer bits, 8x the error) moves these logits by
#   2.5e-3..3.4e-3 (reference.json logits vs logits_bf16_weights), so F16
#   should land near 3.4e-3 / 8 = 4e-4: measured 4.0e-4 (exact float64
#   arithmetic on the F16 weights) and 5.5e-4 (llama.cpp, which also rounds
#   the activations to f16). 2e-3 leaves 4-5x headroom and still fails a
#   result as coarse as bf16 weights;
# - Q8_0: measured 1.0e-2 (exact arithmetic on the Q8_0 weights) and 1.5e-2
#   (llama.cpp, which also rounds activations to Q8_0): 3e-2 leaves 2-3x.
#   The fixtures' top-two logit gaps are >= 25 (logits up to 150), far
#   beyond that noise, so top-1 must match everywhere.
GGUF_BOUND = {"f32": 1e-4, "f16": 2e-3, "q8_0": 3e-2}

# Real 270M Q4_K_M vs llama.cpp. This model amplifies tiny numeric
# differences: llama.cpp against itself moves the logits by up to 8.4e-2
# (incremental vs batch) and 9.1e-2 (KV f16 vs f32), and its Q4_K_M result
# is 1.1e-1 (mean 6.7e-2) from the exact result for the same weights (its
# 8-bit activation rounding; tests/data/llamacpp-gemma3-270m.json
# "calibration"). The amplifier is that rounding: an activation element that
# lands on the other side of a rounding boundary moves by a whole 8-bit step,
# and the later layers blow that up. Measured in ignis: multiplying the GEGLU
# output by 1 + u, |u| <= 5e-8 (at most one ulp, most elements unchanged),
# moves ignis's own logits of this sequence by up to 1.05e-1 (mean 3.5e-2;
# positions 0-2 unchanged, the jumps start at position 3). So two
# implementations that do not evaluate every float operation in the same
# order differ by about that much, and the 2e-2 cannot be met at
# every position without copying llama.cpp's summation orders (SIMD dots,
# repacked Q4_K gemm, non-flash attention, its expf). What ignis does match
# bit for bit is the activation quantization of llama.cpp's x86 CPU backend:
# Q8_K as quantize_row_q8_K_ref, Q8_0 as its AVX quantize_row_q8_0 (127/amax,
# round half to even; ig_quantize_row_q8_0_act). With that, the one remaining
# systematic difference is llama.cpp's GELU, which goes through a table of
# fp16 inputs and outputs: emulating it (an experiment, not in ignis: it costs
# accuracy against float64) brings position 0 (BOS alone) to 2.0e-4, the fp16
# storage floor of the reference, and the whole sequence to 9.4e-2 max /
# 4.0e-2 mean; without it position 0 is 1.2e-2 and the sequence 1.6e-1 max /
# 8.1e-2 mean (batch; 1.5e-1 / 7.7e-2 one token at a time), against 1.7e-1 /
# 9.0e-2 with the reference Q8_0 rounding (2026-11-23). A 2e-2 bound would
# fail llama.cpp itself, so this comparison is loose (it still catches a
# broken model: a 4-token window gives 1.5, norms without the +1 1.6; a
# wrong global RoPE base alone gives only 2.0e-1 max / 9.7e-2 mean), and the
# tight check is on the dequantized weights instead: ignis on them vs
# llama.cpp on them (F32 arithmetic; llama.cpp is 1.2e-3 from an exact
# float64 evaluation there since its GELU goes through an fp16 table; ignis
# measured 1.2e-3 against llama.cpp and 3.4e-6 against float64).
REAL_BOUND_MAX, REAL_BOUND_MEAN = 3e-1, 1.2e-1
# Position 0 (BOS alone) has no attention mixing and moves by 0 under the
# one-ulp perturbation above and between ignis's scalar/AVX2/AVX-512 kernels,
# so the 2e-2 does apply there (measured 1.2e-2, all of it the GELU
# table).
REAL_BOUND_POS0 = 2e-2
DEQUANT_BOUND = 5e-3
# logits closer than this may swap order under such noise: llama.cpp's own
# variants (KV f16, dequantized weights) change the argmax at top-two gaps
# up to 0.35, sometimes to the third-best token
GAP = 0.5
TF_MAX_MISMATCH = 15  # of 6 x 32 teacher-forced greedy steps (llama.cpp variants: 5-11)

pytestmark = pytest.mark.skipif(not MODELS, reason=f"no fixtures in {R.HF_FIXTURES}")


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf")


def check_sequences(model: Path | str, ref: dict, key: str, tmp: Path, bound: float, *,
                    kv: str = "f32", incremental: bool = False, top1: bool = False) -> None:
    for si, s in enumerate(ref["sequences"]):
        want = np.asarray(s[key], dtype=np.float32)
        got = R.ignis_logits(model, s["tokens"], tmp / f"seq{si}.f32", all_positions=True,
                             incremental=incremental, kv=kv, n_vocab=want.shape[1])
        assert got.shape == want.shape
        assert np.isfinite(got).all(), "non-finite logits"
        errs = R.rel_errs_per_position(got, want)
        worst = int(np.argmax(errs))
        assert errs[worst] <= bound, (
            f"sequence {si} ({len(s['tokens'])} tokens): position {worst} rel err {errs[worst]:.3e} > "
            f"{bound:g}; all: {' '.join(f'{e:.1e}' for e in errs)}")
        if top1:
            bad = [p for p in range(len(want)) if got[p].argmax() != want[p].argmax()]
            assert not bad, f"sequence {si}: top-1 differs at positions {bad}"


@pytest.mark.parametrize("incremental", [False, True], ids=["batch", "incremental"])
@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_hf_checkpoint_logits(model: Path, weights: str, kv: str, incremental: bool, tmp_path: Path):
    """safetensors checkpoint (f32 or bf16 weights) vs transformers, every position."""
    key = "logits" if weights == "f32" else "logits_bf16_weights"
    check_sequences(model / weights, R.hf_reference(model), key, tmp_path, KV_BOUND[kv],
                    kv=kv, incremental=incremental)


@pytest.mark.parametrize("incremental", [False, True], ids=["batch", "incremental"])
@pytest.mark.parametrize("typ", ["f32", "f16", "q8_0"])
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_gguf_conversion_logits(model: Path, typ: str, incremental: bool, gguf_dir: Path, tmp_path: Path):
    """hf_to_gguf.py conversions of the f32 weights vs the f32 transformers logits."""
    path = R.converted_gguf(model, typ, gguf_dir)
    check_sequences(path, R.hf_reference(model), "logits", tmp_path, GGUF_BOUND[typ],
                    kv="f32", incremental=incremental, top1=(typ != "f32"))


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_gguf_bf16_from_bf16_checkpoint(model: Path, gguf_dir: Path, tmp_path: Path):
    """bf16/ weights stored as BF16 GGUF (norms F32 with +1 folded, exact) vs
    the transformers logits of the bf16 weights."""
    path = R.converted_gguf(model, "bf16", gguf_dir, source="bf16")
    check_sequences(path, R.hf_reference(model), "logits_bf16_weights", tmp_path, KV_BOUND["f32"])


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_last_position_only(model: Path, tmp_path: Path):
    """Without --all only the last position's row is written."""
    s = R.hf_reference(model)["sequences"][-1]
    got = R.ignis_logits(model / "f32", s["tokens"], tmp_path / "last.f32", all_positions=False)
    want = np.asarray(s["logits"][-1], dtype=np.float32)
    assert got.shape == (1, want.size)
    assert R.rel_err(got[0], want) <= KV_BOUND["f32"]


# --- the real Gemma 3 270M Q4_K_M vs llama.cpp ------------------------------------

def real_model() -> Path:
    if not R.REAL_MODEL.is_file():
        if os.environ.get("IGNIS_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"{R.REAL_MODEL} missing (IGNIS_ALLOW_MISSING_MODEL=1)")
        pytest.fail(f"{R.REAL_MODEL} missing: run scripts/fetch-model.sh")
    return R.REAL_MODEL


@pytest.fixture(scope="module")
def llamacpp_ref() -> dict:
    ref = R.llamacpp_reference()
    model = real_model()
    if model.stat().st_size != ref["model"]["size"] or R.sha256(model) != ref["model"]["sha256"]:
        pytest.fail(f"{model} is not the model the llama.cpp reference was made from")
    return ref


@pytest.mark.parametrize("incremental", [False, True], ids=["batch", "incremental"])
def test_real_model_logits_vs_llamacpp(llamacpp_ref: dict, incremental: bool, tmp_path: Path):
    """Q4_K_M, every position of a fixed 10-token sequence vs llama.cpp."""
    lg = llamacpp_ref["logits"]
    want = R.llamacpp_logits(llamacpp_ref)
    got = R.ignis_logits(real_model(), lg["tokens"], tmp_path / "real.f32", all_positions=True,
                         incremental=incremental, kv="f32", n_vocab=want.shape[1])
    assert np.isfinite(got).all()
    errs = R.rel_errs_per_position(got, want)
    msg = " ".join(f"{e:.2e}" for e in errs)
    assert max(errs) <= REAL_BOUND_MAX and np.mean(errs) <= REAL_BOUND_MEAN, msg
    assert errs[0] <= REAL_BOUND_POS0, msg
    for p in range(len(want)):
        g = int(got[p].argmax())
        if g != lg["top1"][p]:
            # only acceptable where llama.cpp's own logit for ignis's choice is
            # within GAP of its best (from its float32 logits, top5)
            assert R.near_top(lg["top5"][p], g, GAP), (
                f"position {p}: ignis top-1 {g}, llama.cpp top-5 {lg['top5'][p]}")


def test_real_model_dequantized_vs_llamacpp(llamacpp_ref: dict, tmp_path: Path):
    """The same weights dequantized to F32 (gguf-py; bit-identical to
    llama-quantize's F32 output): tight agreement with llama.cpp."""
    d = llamacpp_ref["logits_f32_dequantized"]
    want = R.llamacpp_dequant_logits(llamacpp_ref)
    model = R.dequantized_real_model(real_model())
    tokens = llamacpp_ref["logits"]["tokens"]
    got = R.ignis_logits(model, tokens, tmp_path / "deq.f32", all_positions=True, kv="f32",
                         n_vocab=want.shape[1])[d["positions"]]
    errs = R.rel_errs_per_position(got, want)
    assert max(errs) <= DEQUANT_BOUND, " ".join(f"{e:.2e}" for e in errs)
    assert [int(x) for x in got.argmax(1)] == d["top1"]


def test_real_model_teacher_forced_greedy(llamacpp_ref: dict, tmp_path: Path):
    """Each prompt + llama.cpp's greedy continuation, fed as one sequence: at
    every generated position ignis's argmax is llama.cpp's greedy token,
    except at near-ties (a token llama.cpp scores within GAP of its best),
    and those are rare."""
    mismatches = []
    for i, p in enumerate(llamacpp_ref["prompts"]):
        seq = p["tokens"] + p["greedy"][:-1]
        got = R.ignis_logits(real_model(), seq, tmp_path / f"tf{i}.f32", all_positions=True, kv="f32")
        am = got.argmax(1)[len(p["tokens"]) - 1:]
        for k, (a, b) in enumerate(zip(am, p["greedy"])):
            if a != b:
                mismatches.append((p["text"][:24], k, int(a), p["top5"][k]))
    confident = [m for m in mismatches if not R.near_top(m[3], m[2], GAP)]
    assert not confident, f"argmax differs where llama.cpp is confident: {confident}"
    assert len(mismatches) <= TF_MAX_MISMATCH, mismatches
