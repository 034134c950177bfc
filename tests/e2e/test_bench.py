"""`ignis bench` on a tiny fixture model: it runs, prints llama-bench-style
rows, writes JSON with sane fields, and rejects bad arguments with a clear
message. Speed is never asserted (docs/benchmarking.md): only that the numbers
are present, finite and positive.

Interface (src/cli/cmd_bench.c):
    ignis bench [MODEL] [-p N] [-n N] [-r N] [-t N,...] [--batch B,...] [-d N] [--json FILE]
                [--draft M | --lookup | --draft-replay] [--verify-curve]
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("IGNIS_FIXTURES") or REPO / "tests" / "fixtures")
TINY = FIXTURES / "hf" / "tiny-1b-like" / "f32"

pytestmark = pytest.mark.skipif(not (TINY / "config.json").is_file(), reason=f"no fixture {TINY}")


def bench(ignis_build: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    exe = ignis_build / "ignis"
    if not exe.is_file():
        pytest.fail(f"{exe} not found: build the `ignis_cli` target first")
    return subprocess.run([str(exe), "bench", *args], capture_output=True, text=True,
                          timeout=timeout)


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.asan
def test_bench_tiny_json(ignis_build: Path, tmp_path: Path):
    out = tmp_path / "bench.json"
    p = bench(ignis_build, str(TINY), "-p", "16", "-n", "4", "-r", "1", "-t", "1",
              "--batch", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    # llama-bench-style table: a header and one row per test
    assert "| model" in p.stdout and "t/s" in p.stdout
    for test in ("pp16", "tg4", "tg4@b2"):
        assert f"| {test} " in p.stdout, p.stdout

    j = json.loads(out.read_text())
    assert j["backend"] == "cpu"
    m = j["model"]
    assert m["arch"] == "gemma3"
    assert m["type"] == "F32"
    assert positive(m["size_bytes"]) and positive(m["weight_bytes"])
    assert m["weight_bytes"] <= m["size_bytes"]
    assert positive(m["n_params"])
    # the F32 fixture: 4 bytes per parameter
    assert m["size_bytes"] == 4 * m["n_params"]
    assert 0 < m["layer_matrix_params"] + m["output_params"] <= m["n_params"]
    assert j["config"] == {**j["config"], "n_prompt": 16, "n_gen": 4, "repetitions": 1}

    (mc,) = j["machine"]
    assert mc["threads"] == 1
    assert positive(mc["mem_read_gbs"]) and positive(mc["fma_peak_gflops"])
    assert mc["mem_buffer_bytes"] >= 64 << 20
    assert mc["fma_isa"] in ("avx512", "avx2", "scalar")

    rows = {r["test"]: r for r in j["results"]}
    assert set(rows) == {"pp16", "tg4", "tg4@b2"}
    for name, r in rows.items():
        assert r["threads"] == 1
        assert len(r["samples_ts"]) == 1
        assert all(positive(x) for x in r["samples_ts"]), r
        assert positive(r["avg_ts"]) and r["stddev_ts"] == 0
        assert positive(r["bytes_per_token"]) and positive(r["flops_per_token"])
        assert positive(r["limit_ts"]) and positive(r["fraction_of_limit"])
        assert math.isclose(r["fraction_of_limit"], r["avg_ts"] / r["limit_ts"], rel_tol=1e-6)
        assert r["bound"] in ("bandwidth", "compute")
    assert rows["pp16"]["tokens"] == 16 and rows["pp16"]["n_seq"] == 1
    assert rows["tg4"]["tokens"] == 4 and rows["tg4"]["n_seq"] == 1
    assert rows["tg4@b2"]["tokens"] == 8 and rows["tg4@b2"]["n_seq"] == 2
    # decode reads every weight per step: at least the weights per token
    assert rows["tg4"]["bytes_per_token"] >= m["weight_bytes"]
    # two sequences share the weight reads
    assert rows["tg4@b2"]["bytes_per_token"] < rows["tg4"]["bytes_per_token"]
    # prefill: at least 2 flops per layer matrix parameter per token
    assert rows["pp16"]["flops_per_token"] >= 2 * m["layer_matrix_params"]


@pytest.mark.asan
def test_bench_depth(ignis_build: Path, tmp_path: Path):
    """-d N: every test runs after N tokens in each sequence's cache; the rows
    say so, and their floors count the longer cache reads."""
    rows = {}
    for depth in (0, 40):
        out = tmp_path / f"bench{depth}.json"
        p = bench(ignis_build, str(TINY), "-p", "8", "-n", "4", "-r", "2", "-t", "1", "--batch", "2",
                  "-d", str(depth), "--json", str(out))
        assert p.returncode == 0, p.stderr
        j = json.loads(out.read_text())
        assert j["config"]["n_depth"] == depth
        for r in j["results"]:
            assert r["depth"] == depth
            assert len(r["samples_ts"]) == 2 and all(positive(x) for x in r["samples_ts"]), r
            rows[r["test"]] = r
    assert {"pp8@d40", "tg4@d40", "tg4@b2@d40"} <= set(rows), set(rows)
    assert "| tg4@b2@d40 " in p.stdout, p.stdout
    for test in ("pp8", "tg4", "tg4@b2"):
        assert rows[f"{test}@d40"]["bytes_per_token"] > rows[test]["bytes_per_token"]
        assert rows[f"{test}@d40"]["flops_per_token"] > rows[test]["flops_per_token"]


def spec_rows(ignis_build: Path, tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "spec.json"
    p = bench(ignis_build, str(TINY), "-p", "0", "-n", "12", "-r", "2", "-t", "1", "--batch", "0",
              *args, "--json", str(out))
    assert p.returncode == 0, p.stderr
    return {r["test"]: r for r in json.loads(out.read_text())["results"]}, p.stdout


def check_spec_row(r: dict, drafter: str) -> None:
    assert r["drafter"] == drafter
    assert r["n_gen"] == 12 and r["repetitions"] == 2
    for k in ("plain_ts", "avg_ts", "speedup", "tokens_per_step"):
        assert positive(r[k]), (k, r)
    assert math.isclose(r["speedup"], r["avg_ts"] / r["plain_ts"], rel_tol=1e-6)
    assert 0 <= r["accepted"] <= r["drafted"]
    assert math.isclose(r["acceptance"], r["accepted"] / r["drafted"], rel_tol=1e-6)
    # at least one token per target step, at most every draft plus the bonus
    assert 1 <= r["tokens_per_step"] <= r["draft_max"] + 1


def test_bench_draft_replay_and_verify_curve(ignis_build: Path, tmp_path: Path):
    """--draft-replay drafts plain greedy's own tokens: every draft is
    accepted (the CPU kernels are batch-invariant), so each step emits K + 1
    tokens until the end. --verify-curve: one row per step size."""
    rows, out = spec_rows(ignis_build, tmp_path, "--draft-replay", "--draft-max", "4",
                          "--verify-curve", "-d", "20")
    r = rows["speculative"]
    check_spec_row(r, "replay")
    assert r["accepted"] == r["drafted"] > 0
    # 11 tokens after the prompt step's: steps of 5, 5 and 1 (4 drafts at most)
    assert math.isclose(r["tokens_per_step"], 11 / 3, rel_tol=1e-6)
    assert "replay (upper bound) K=4" in out
    curve = [rows[f"verify{n}"] for n in (1, 2, 4, 8, 16)]
    for n, c in zip((1, 2, 4, 8, 16), curve):
        assert c["n_tokens"] == n and c["n_depth"] == 20 and c["repetitions"] == 2
        assert positive(c["avg_ms"]) and positive(c["relative"])
        assert math.isclose(c["relative"], c["avg_ms"] / curve[0]["avg_ms"], rel_tol=1e-6)
    assert curve[0]["relative"] == 1.0
    assert "| 16 " in out


def test_bench_lookup_and_draft_rows(ignis_build: Path, tmp_path: Path):
    rows, _ = spec_rows(ignis_build, tmp_path, "--lookup", "--draft-max", "3")
    check_spec_row(rows["speculative"], "lookup")
    assert rows["speculative"]["draft_max"] == 3
    # the fixture drafting for itself agrees with itself on every draft
    rows, _ = spec_rows(ignis_build, tmp_path, "--draft", str(TINY))
    check_spec_row(rows["speculative"], "draft")
    assert rows["speculative"]["accepted"] == rows["speculative"]["drafted"] > 0


@pytest.mark.parametrize("args, message", [
    (["-d", "-1"], "-d expects an integer"),
    (["-p", "abc"], "-p expects an integer"),
    (["-p", "-5"], "-p expects an integer"),
    (["-r", "0"], "-r expects an integer"),
    (["-t", "1,x"], "-t expects an integer"),
    (["-t", ""], "-t expects a comma-separated list"),
    (["--batch", "2,,4"], "--batch expects an integer"),
    (["-n"], "-n needs a value"),
    (["--backend", "tpu"], "--backend expects cpu or vulkan"),
    (["--kv", "q8"], "--kv expects f16 or f32"),
    (["--frobnicate"], "unknown option --frobnicate"),
    (["-p", "0", "-n", "0"], "nothing to run"),
    (["--json"], "--json needs a file name"),
    ([str(TINY), "--lookup", "--draft-replay"], "exclusive"),
    ([str(TINY), str(TINY)], "more than one MODEL"),
])
def test_bench_bad_args(ignis_build: Path, args: list[str], message: str):
    p = bench(ignis_build, *args, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert message in p.stderr


def test_bench_missing_model(ignis_build: Path, tmp_path: Path):
    p = bench(ignis_build, str(tmp_path / "nope.gguf"), "-p", "8", "-n", "0", "-r", "1", timeout=60)
    assert p.returncode == 1
    assert "nope.gguf" in p.stderr


def test_bench_help(ignis_build: Path):
    p = bench(ignis_build, "--help", timeout=60)
    assert p.returncode == 0
    assert "usage: ignis bench" in p.stdout
