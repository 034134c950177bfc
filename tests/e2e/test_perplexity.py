"""`ignis perplexity`: perplexity and KL divergence of the real Gemma 3 270M
Q4_K_M against the exact model, per evaluation path.

Reference: tests/data/kl-ref-gemma3-270m-f32-ctx256.bin, the log-probs of the
exact model (the Q4_K_M dequantized to F32) at every scored position of two
windows of 256 tokens of the KJV text (scripts/fetch-text.sh), the 32 most
likely tokens per position (layout: src/cli/kl_ref.h). Made with

    ignis perplexity gemma-3-270m-q4_k_m-dequant-f32.gguf -f kjv.txt \
        --ctx 256 --chunks 2 --kl-top-k 32 --kl-divergence-base FILE

(the dequant is tests/tools/ignis_ref.py's dequantized_real_model()). The
windows are stored in the file, so the test needs neither the text nor the
F32 model.

A path's mean KL may not grow by more than 10 % over the value recorded
below for the kernels it runs on (MEAN_KL): the CPU kernels are pinned
(IGNIS_CPU) to the widest this machine has, with 2 threads, since each
kernel set computes its own (invariant) numbers. The sets differ from one
another by about their standard error (±0.002 over 254 positions), so each
has its own record; lower is fine.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

REF = R.DATA / "kl-ref-gemma3-270m-f32-ctx256.bin"

# Mean KL(exact || Q4_K_M) per kernel set and path over the reference's 254
# positions (ignis perplexity ... -t 2, KV f16).
MEAN_KL = {
    "avx512": {"prefill": 0.012560, "incremental": 0.012560, "prefix-decode": 0.012560, "batched": 0.012560},
    "avx2": {"prefill": 0.011705, "incremental": 0.011705, "prefix-decode": 0.011705, "batched": 0.011705},
    "scalar": {"prefill": 0.014054, "incremental": 0.014054, "prefix-decode": 0.014054, "batched": 0.014054},
}
REGRESSION = 1.10


@pytest.fixture(scope="module")
def real_model() -> Path:
    if not R.REAL_MODEL.is_file():
        if os.environ.get("IGNIS_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"{R.REAL_MODEL} missing (IGNIS_ALLOW_MISSING_MODEL=1)")
        pytest.fail(f"{R.REAL_MODEL} missing: run scripts/fetch-model.sh")
    return R.REAL_MODEL


def cpu_kernels() -> str:
    """The widest kernel set ignis would pick here."""
    return R.cpu_kernel_sets()[-1]


def parse(out: str) -> dict[str, float]:
    keys = {
        "ppl": r"Final estimate: PPL = ([0-9.]+)",
        "ppl_ref": r"PPL\(reference\): ([0-9.]+)",
        "ratio": r"PPL ratio: ([0-9.]+)",
        "kl": r"mean KL: ([-0-9.e]+)",
        "kl99": r"99th percentile KL: ([-0-9.e]+)",
        "top1": r"top-1 agreement: ([0-9.]+) %",
        "dlp": r"mean \|delta logprob\| of the reference top token: ([0-9.]+)",
        "scored": r"(\d+) scored",
    }
    vals = {}
    for k, rx in keys.items():
        m = re.search(rx, out)
        assert m, f"no {k} in the output:\n{out}"
        vals[k] = float(m.group(1))
    return vals


def test_reference_file_layout():
    data = REF.read_bytes()
    assert data[:8] == b"IGKLREF1"
    n_ctx, n_vocab, n_chunks, first, top_k, reserved = struct.unpack_from("<6I", data, 8)
    assert (n_ctx, n_chunks, first, top_k, reserved) == (256, 2, 128, 32, 0)
    n_rec = n_chunks * (n_ctx - 1 - first)
    assert len(data) == 32 + 4 * n_chunks * n_ctx + n_rec * (12 + 4 + 8 * top_k)
    tokens = struct.unpack_from(f"<{n_chunks * n_ctx}i", data, 32)
    assert tokens[0] == tokens[n_ctx] == 2  # each window starts with BOS


@pytest.mark.parametrize("path", list(MEAN_KL["avx2"]))
def test_kl_divergence_per_path(real_model, path):
    isa = cpu_kernels()
    r = subprocess.run([str(R.ignis_bin()), "perplexity", str(real_model), "--kl-divergence", str(REF),
                        "--path", path, "-t", "2"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "IGNIS_CPU": isa})
    assert r.returncode == 0, r.stderr
    v = parse(r.stdout)
    assert v["scored"] == 254
    recorded = MEAN_KL[isa][path]
    assert 0.0 < v["kl"] <= recorded * REGRESSION, (
        f"{path} ({isa} kernels): mean KL {v['kl']:.6f}, recorded {recorded:.6f} (+10 % allowed)")
    # Sanity of the rest: the quantized model mostly agrees with the exact one.
    assert v["kl99"] >= v["kl"]
    assert v["top1"] >= 85.0
    assert 0.9 < v["ratio"] < 1.1
    assert abs(v["ppl"] / v["ppl_ref"] - v["ratio"]) < 1e-3


def test_kl_of_the_reference_against_itself_is_zero(real_model, tmp_path):
    """A model compared with its own saved log-probs: KL ~ 0, full agreement.
    Uses a whole-distribution reference of one short window."""
    text = tmp_path / "t.txt"
    text.write_text("In the beginning God created the heaven and the earth. " * 20)
    base = tmp_path / "base.bin"
    for top_k in ("0", "16"):
        r = R.run_ignis(["perplexity", real_model, "-f", text, "--ctx", "64", "--chunks", "1",
                         "--kl-top-k", top_k, "--kl-divergence-base", base])
        assert r.returncode == 0, r.stderr
        r = R.run_ignis(["perplexity", real_model, "--kl-divergence", base])
        assert r.returncode == 0, r.stderr
        v = parse(r.stdout)
        assert v["scored"] == 31
        assert abs(v["kl"]) < 1e-4
        assert v["top1"] == 100.0
        assert v["dlp"] < 1e-5
        assert abs(v["ratio"] - 1.0) < 1e-5


def test_bad_reference_is_refused(real_model, tmp_path):
    bad = tmp_path / "bad.bin"
    data = bytearray(REF.read_bytes())
    bad.write_bytes(bytes(data[:-1]))  # truncated
    r = R.run_ignis(["perplexity", real_model, "--kl-divergence", bad])
    assert r.returncode == 1 and "bytes" in r.stderr
    struct.pack_into("<I", data, 12, 1000)  # another vocabulary
    bad.write_bytes(bytes(data))
    r = R.run_ignis(["perplexity", real_model, "--kl-divergence", bad])
    assert r.returncode == 1 and "vocabulary" in r.stderr
    data = bytearray(REF.read_bytes())
    struct.pack_into("<i", data, 32 + 4 * 7, 1 << 30)  # a token id out of range
    bad.write_bytes(bytes(data))
    r = R.run_ignis(["perplexity", real_model, "--kl-divergence", bad])
    assert r.returncode == 1 and "token id 1073741824" in r.stderr
    bad.write_bytes(b"IGKLREF1" + b"\xff" * 24)
    r = R.run_ignis(["perplexity", real_model, "--kl-divergence", bad])
    assert r.returncode == 1 and "header" in r.stderr
