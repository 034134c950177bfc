"""Greedy generation against references this project did not write (issue #3).

Interface assumed (tentative; only tests/tools/ignis_ref.py:ignis_generate_ids
knows it): `ignis run MODEL --tokens-in 2,10,... -n N --temp 0 --kv f32 --print-ids`
prints the generated ids. Skipped while `ignis run` is the stub that says
"not available in this build yet".

- fixtures/hf/tiny-*/f32: transformers `generate(do_sample=False)` output
  (reference.json `greedy`), 24 new tokens;
- the real Gemma 3 270M Q4_K_M: llama.cpp's greedy 32-token continuations
  (tests/data/llamacpp-gemma3-270m.json). This base model often has close
  top-two logits (gaps of 0.01-0.2 in most prompts) and amplifies numeric
  noise (see test_logits.py): llama.cpp itself with an f16 KV cache diverges
  from its f32-KV run on 5 of the 6 prompts, as early as the 5th token, at
  gaps up to 0.50; on the dequantized F32 weights on 4 of 6. So exact
  continuations cannot be required (the issue's "at most one prompt diverges,
  after its 16th token, at a tie within 1e-3" fails llama.cpp itself). ignis
  (2026-11-23, AVX-512) matches 2 of the 6 prompts exactly and diverges on 4,
  at generated tokens 4, 11, 17 and 22 where llama.cpp's top two are 0.042,
  0.072, 0.033 and 0.006 apart (before the Q8_0 activation rounding matched
  llama.cpp's: 5 of 6, at gaps up to 0.45). Each prompt must match llama.cpp up to
  its first divergence, which must fall on a near-tie: ignis's token is one
  llama.cpp scores within GAP of its best; after it, the texts are
  different contexts and are not compared. (llama.cpp's variants also
  sometimes take the third-best token at such a step, so any token llama.cpp
  scores within GAP of its best is accepted.) The step-by-step check that does
  not compound is test_logits.py::test_real_model_teacher_forced_greedy.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

MODELS = R.hf_models()
GAP = 0.6


def generate(model: Path | str, prompt: list[int], n: int) -> list[int]:
    try:
        return R.ignis_generate_ids(model, prompt, n)
    except R.NotInThisBuild as e:
        pytest.skip(f"ignis run: {e}")


def until_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


@pytest.mark.skipif(not MODELS, reason=f"no fixtures in {R.HF_FIXTURES}")
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_fixture_greedy_matches_transformers(model: Path):
    g = R.hf_reference(model)["greedy"]
    prompt, want = g["prompt"], g["output"][len(g["prompt"]):]
    got = generate(model / "f32", prompt, len(want))
    # transformers stops at eos (1); an engine that stops there too is fine
    want = until_eos(want, {1})
    assert got[:len(want)] == want, f"got {got}\nwant {want}"


def test_real_model_greedy_matches_llamacpp():
    if not R.REAL_MODEL.is_file():
        if os.environ.get("IGNIS_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"{R.REAL_MODEL} missing")
        pytest.fail(f"{R.REAL_MODEL} missing: run scripts/fetch-model.sh")
    ref = R.llamacpp_reference()
    assert R.REAL_MODEL.stat().st_size == ref["model"]["size"]
    diverged = []
    for p in ref["prompts"]:
        want = p["greedy"]
        # compare up to and including llama.cpp's first end-of-generation
        # token (ignis may stop there; llama.cpp's reference kept going)
        n = next((i + 1 for i, e in enumerate(p["is_eog"]) if e), len(want))
        got = generate(R.REAL_MODEL, p["tokens"], len(want))[:n]
        want = want[:n]
        if got == want:
            continue
        k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        assert k < len(want), f"{p['text']!r}: ignis stopped after {len(got)} tokens, llama.cpp made {n}"
        assert R.near_top(p["top5"][k], got[k], GAP), (
            f"{p['text']!r}: diverges at generated token {k} (ignis {got[k]}, llama.cpp top-5 "
            f"{p['top5'][k]})\n got {got}\nwant {want}")
        diverged.append((p["text"], k))
    print(f"{len(diverged)} of {len(ref['prompts'])} prompts diverged, at near-ties: {diverged}")
