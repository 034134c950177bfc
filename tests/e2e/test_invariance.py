"""Batch invariance on the real Gemma 3 270M Q4_K_M: `ignis logits
--check-invariance` evaluates the same tokens all at once, one per step, in
chunks of 3 and 7, from a cached prefix and in steps shared with another
sequence, and must find every position's logits bit-identical, on each CPU
instruction set, with 1 and 2 threads and either KV-cache type; and on the
Vulkan backend where a device is usable (lavapipe on machines without a GPU).

Without invariance these differ by up to ~1 logit on this model (small
rounding differences flip activation-quantization roundings, and the model
amplifies them), so a broken kernel does not hide below any tolerance."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

MODEL = str(R.REAL_MODEL)
TEXT = ("The history of the city begins in the early Middle Ages, when a small settlement grew up "
        "around a river crossing. Merchants came from the surrounding villages to trade grain, "
        "wool and salt.")
MODES = ["one per step", "chunks of 3", "chunks of 7", "cached prefix + rest",
         "mixed with another sequence, chunks of 4", "mixed with another sequence, one per step"]


@pytest.fixture(scope="module", autouse=True)
def real_model():
    if not Path(MODEL).is_file():
        pytest.fail(f"{MODEL} missing: run `make model`")


def ignis(args, env_cpu=None, timeout=600):
    import os
    env = dict(os.environ)
    if env_cpu:
        env["IGNIS_CPU"] = env_cpu
    return subprocess.run([str(R.ignis_bin()), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def ids():
    r = ignis(["tokenize", MODEL, TEXT, "--bos"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out) > 30
    return ",".join(str(i) for i in out)


def assert_bit_identical(r) -> None:
    """`ignis logits --check-invariance` succeeded and every mode said 0."""
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for mode in MODES:
        line = next((ln for ln in lines if ln.startswith(mode)), None)
        assert line is not None, f"no line for {mode!r}: {r.stdout}"
        assert line.endswith("max |diff| 0 (bit-identical)"), line
    assert lines[-1] == "largest difference: 0"


@pytest.mark.parametrize("isa", R.cpu_kernel_sets())
@pytest.mark.parametrize("threads,kv", [(1, "f16"), (2, "f32")])
def test_logits_do_not_depend_on_chunking(ids, isa, threads, kv):
    # scalar is slow: the first 12 tokens are enough for it
    toks = ",".join(ids.split(",")[:12]) if isa == "scalar" else ids
    r = ignis(["logits", MODEL, "--tokens", toks, "--check-invariance", "-t", str(threads),
               "--kv", kv], env_cpu=isa)
    assert_bit_identical(r)


def vulkan_usable() -> bool:
    r = ignis(["devices"], timeout=120)
    return r.returncode == 0 and "usable: yes" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_vulkan_logits_do_not_depend_on_chunking(ids, kv):
    """The same on the Vulkan backend (batch-invariant with --deterministic): the
    one-token graph (mat-vecs with the q/k/v tails, decode attention) must
    give the bits of the multi-token ones. 12 tokens of the real model: minutes
    on lavapipe, hence the slow tier (the unit test vulkan_engine_invariance_tiny
    checks the same quickly on the tiny fixture)."""
    if not vulkan_usable():
        pytest.skip("no usable Vulkan device")
    toks = ",".join(ids.split(",")[:12])
    r = ignis(["logits", MODEL, "--tokens", toks, "--check-invariance", "--backend", "vulkan", "--deterministic",
               "--kv", kv], timeout=1800)
    assert_bit_identical(r)


def test_check_invariance_is_documented():
    r = ignis(["logits", "--help"])
    assert r.returncode == 0
    assert "--check-invariance" in r.stdout
    assert "exits with status 1" in r.stdout
