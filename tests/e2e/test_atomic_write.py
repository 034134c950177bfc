"""GGUF files written by `ignis synth` and `ignis quantize` appear whole or
not at all: the bytes go to a temporary file in the output's directory,
which is renamed onto the final name only once complete. A write that fails
midway (here: the file size limit, RLIMIT_FSIZE, which makes write() fail
with EFBIG) leaves neither a partial file under the final name nor the
temporary file, and an existing output keeps its old content."""
from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = REPO_ROOT / "tests" / "fuzz" / "corpus" / "gguf" / "tiny_f32.gguf"
# one layer at 270M's widths with the tiny file's 12-piece vocabulary: ~5 MB
SYNTH = ["synth", "--size", "270m", "--type", "q8_0", "--layers", "1", "--vocab-from", TINY,
         "--quiet"]


def run(ignis_build: Path, args: list, fsize: int | None = None) -> subprocess.CompletedProcess:
    def limit():
        if fsize is not None:
            # EFBIG from write() rather than death by SIGXFSZ
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    binary = ignis_build / "ignis"
    if not binary.is_file():
        pytest.fail(f"{binary} not found: build the ignis_cli target first")
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=600, preexec_fn=limit)


def test_quantize_success_leaves_only_the_output(ignis_build: Path, tmp_path: Path):
    out = tmp_path / "q8.gguf"
    r = run(ignis_build, ["quantize", TINY, out, "--type", "q8_0"])
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]
    assert out.read_bytes()[:4] == b"GGUF"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_quantize_failing_write_leaves_nothing(ignis_build: Path, tmp_path: Path):
    out = tmp_path / "q8.gguf"
    r = run(ignis_build, ["quantize", TINY, out, "--type", "q8_0"], fsize=1024)
    assert r.returncode == 1
    assert "cannot write" in r.stderr or "File too large" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_quantize_failing_write_keeps_the_old_output(ignis_build: Path, tmp_path: Path):
    out = tmp_path / "q8.gguf"
    out.write_bytes(b"old content")
    r = run(ignis_build, ["quantize", TINY, out, "--type", "q8_0", "--force"], fsize=1024)
    assert r.returncode == 1, r.stderr
    assert out.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]


def test_synth_failing_write_leaves_nothing_and_keeps_the_old_output(ignis_build: Path,
                                                                     tmp_path: Path):
    args = [*SYNTH, "-o"]
    out = tmp_path / "s.gguf"
    r = run(ignis_build, [*args, out], fsize=1 << 18)
    assert r.returncode == 1, r.stderr
    assert list(tmp_path.iterdir()) == []

    out.write_bytes(b"old content")
    r = run(ignis_build, [*args, out], fsize=1 << 18)
    assert r.returncode == 1, r.stderr
    assert out.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.gguf"]


def test_synth_writes_through_a_link_to_its_target(ignis_build: Path, tmp_path: Path):
    target = tmp_path / "real.gguf"
    target.write_bytes(b"old")
    link = tmp_path / "link.gguf"
    link.symlink_to(target)
    r = run(ignis_build, [*SYNTH, "-o", link])
    assert r.returncode == 0, r.stderr
    assert link.is_symlink()
    assert target.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.gguf", "real.gguf"]
