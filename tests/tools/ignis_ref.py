"""Shared helpers for the reference-comparison tests (tests/e2e/test_logits.py,
test_generate_ref.py, test_gguf_convert.py) and the tools in tests/tools.

Import from a test with:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import ignis_ref as R
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
TOOLS = REPO / "tests" / "tools"
FIXTURES = Path(os.environ.get("IGNIS_FIXTURES") or REPO / "tests" / "fixtures")
HF_FIXTURES = FIXTURES / "hf"
CACHE = Path(os.environ.get("IGNIS_CACHE") or Path.home() / ".cache" / "ignis")
REAL_MODEL = Path(os.environ.get("IGNIS_MODEL") or CACHE / "gemma-3-270m-q4_k_m.gguf")
LLAMACPP_JSON = DATA / "llamacpp-gemma3-270m.json"


# --- this machine ---------------------------------------------------------------

def cpu_kernel_sets() -> list[str]:
    """The CPU kernel sets ($IGNIS_CPU) this machine can run, narrowest first;
    ignis picks the last (src/backend/cpu/matmul.c). A set the machine lacks
    falls back to the widest, so testing it would repeat that one."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    sets = ["scalar"]
    if {"avx2", "fma", "f16c"} <= flags:
        sets.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"} <= flags:
            sets.append("avx512")
    return sets


# --- GGUF reading -----------------------------------------------------------------

class _NumpyInMemory:
    """numpy, except that memmap reads the whole file into a plain array:
    GGUFReader's parse of 262144 vocabulary strings is 2.5x faster without
    memmap's per-slice overhead (same parser, same bytes)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def memmap(path, mode="r"):
        return np.fromfile(path, dtype=np.uint8)


def gguf_reader(path: Path | str):
    """gguf-py's GGUFReader over the file read into memory (for files of a few
    hundred MB at most: the real 270M and the files made from it)."""
    import gguf
    import gguf.gguf_reader as gr
    saved = gr.np
    gr.np = _NumpyInMemory()
    try:
        return gguf.GGUFReader(str(path))
    finally:
        gr.np = saved


# --- ignis binary -------------------------------------------------------------


def gguf_same_tensors(ours, theirs) -> set:
    """Asserts that two GGUF readers hold the same tensors (names, types and
    bytes); returns the tensor types met."""
    import numpy as np
    ta, tb = {t.name: t for t in ours.tensors}, {t.name: t for t in theirs.tensors}
    assert sorted(ta) == sorted(tb)
    kinds = set()
    for name, t in tb.items():
        assert ta[name].tensor_type == t.tensor_type, (name, ta[name].tensor_type, t.tensor_type)
        assert np.array_equal(np.asarray(ta[name].data).view(np.uint8).reshape(-1),
                              np.asarray(t.data).view(np.uint8).reshape(-1)), name
        kinds.add(t.tensor_type)
    return kinds

def ignis_bin() -> Path:
    build = Path(os.environ.get("IGNIS_BUILD") or "build")
    if not build.is_absolute():
        build = REPO / build
    return build / "ignis"


def run_ignis(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    exe = ignis_bin()
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def ignis_logits(model: Path | str, tokens: list[int], out: Path, *, all_positions: bool = True,
                 incremental: bool = False, kv: str | None = None, n_vocab: int | None = None,
                 extra: list[str] | None = None) -> np.ndarray:
    """`ignis logits MODEL --tokens a,b,c [--all] [--incremental] [--kv K] --out FILE`;
    returns the float32 logits as [positions, vocab] (one row without --all)."""
    args = ["logits", str(model), "--tokens", ",".join(map(str, tokens)), "--out", str(out)]
    if all_positions:
        args.append("--all")
    if incremental:
        args.append("--incremental")
    if kv:
        args += ["--kv", kv]
    args += extra or []
    r = run_ignis(args)
    assert r.returncode == 0, f"ignis {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-4000:]}"
    a = np.fromfile(out, dtype="<f4")
    rows = len(tokens) if all_positions else 1
    assert a.size % rows == 0, f"{a.size} floats is not a multiple of {rows} rows"
    a = a.reshape(rows, -1)
    if n_vocab is not None:
        assert a.shape[1] == n_vocab, f"vocab {a.shape[1]} != {n_vocab}"
    return a


class NotInThisBuild(Exception):
    """The command is still a stub ("not available in this build yet")."""


def ignis_generate_ids(model: Path | str, prompt: list[int], n: int) -> list[int]:
    """Greedy generation of n tokens after prompt; returns only the new ids.
    The one place that knows the `ignis run` interface (issue #3, tentative):
    `ignis run MODEL --tokens-in 2,10,... -n N --temp 0 --kv f32 --print-ids` printing
    the generated ids (comma/space separated; the prompt echoed first is
    tolerated and stripped)."""
    args = ["run", str(model), "--tokens-in", ",".join(map(str, prompt)), "-n", str(n),
            "--temp", "0", "--kv", "f32", "--print-ids"]
    r = run_ignis(args)
    if r.returncode != 0 and "not available in this build" in r.stderr:
        raise NotInThisBuild(r.stderr.strip())
    assert r.returncode == 0, f"ignis {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-4000:]}"
    ids = [int(t) for t in r.stdout.replace(",", " ").split() if t.lstrip("-").isdigit()]
    if len(ids) > n and ids[:len(prompt)] == prompt:  # prompt echoed
        ids = ids[len(prompt):]
    return ids


# --- comparisons --------------------------------------------------------------

def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def rel_errs_per_position(out: np.ndarray, ref: np.ndarray) -> list[float]:
    return [rel_err(o, r) for o, r in zip(out, ref)]


# --- fixtures -----------------------------------------------------------------

def hf_models() -> list[Path]:
    """Every fixture model folder (tiny-*) under fixtures/hf."""
    if not HF_FIXTURES.is_dir():
        return []
    return sorted(p for p in HF_FIXTURES.iterdir() if (p / "reference.json").is_file())


def hf_reference(model_dir: Path) -> dict:
    return json.loads((model_dir / "reference.json").read_text())


def hf_vocab(model_dir: Path) -> int:
    return json.loads((model_dir / "f32" / "config.json").read_text())["vocab_size"]


# --- llama.cpp reference data ---------------------------------------------------

def llamacpp_reference() -> dict:
    return json.loads(LLAMACPP_JSON.read_text())


def llamacpp_logits(ref: dict) -> np.ndarray:
    lg = ref["logits"]
    a = np.fromfile(DATA / lg["file"], dtype="<f2").astype(np.float32)
    return a.reshape(lg["shape"])


def near_top(top5: list, token: int, gap: float) -> bool:
    """token is among llama.cpp's five best ([[id, logit], ...], best first)
    with a logit within gap of the best."""
    return any(t == token and l >= top5[0][1] - gap for t, l in top5)


def llamacpp_dequant_logits(ref: dict) -> np.ndarray:
    lg = ref["logits_f32_dequantized"]
    a = np.fromfile(DATA / lg["file"], dtype="<f2").astype(np.float32)
    return a.reshape(lg["shape"])


def dequantized_real_model(model: Path = REAL_MODEL) -> Path:
    """The real model with every tensor dequantized to F32 (tests/tools/
    dequantize_gguf.py, ~1.1 GB, cached next to the model)."""
    out = model.with_name(model.stem + "-dequant-f32.gguf")
    if not out.exists() or out.stat().st_mtime < model.stat().st_mtime:
        import sys
        sys.path.insert(0, str(TOOLS))
        import dequantize_gguf
        tmp = out.with_suffix(".tmp")
        dequantize_gguf.dequantize_file(model, tmp)
        tmp.rename(out)
    return out


def sha256(path: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- converted GGUF fixtures (cached by content) ----------------------------------

def converted_gguf(model_dir: Path, typ: str, out_dir: Path, source: str = "f32", **kw) -> Path:
    """Converts model_dir/SOURCE (f32 or bf16 weights) to GGUF of type typ
    (f32, f16, bf16, q8_0) with tests/tools/hf_to_gguf.py into out_dir (reused
    if it exists); kw go to hf_to_gguf.convert."""
    import sys
    sys.path.insert(0, str(TOOLS))
    import hf_to_gguf
    suffix = "".join(f"-{k}={v}" for k, v in sorted(kw.items()) if v)
    out = out_dir / f"{model_dir.name}-{source}-to-{typ}{suffix}.gguf"
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        hf_to_gguf.convert(model_dir / source, tmp, typ, **kw)
        tmp.rename(out)
    return out


# --- llama.cpp driver -------------------------------------------------------------

LLAMACPP_ROOT = CACHE / "llamacpp"


def llamacpp_bin_dir() -> Path | None:
    """The CPU build of llama.cpp made by scripts/build-llamacpp.sh, or None."""
    b = LLAMACPP_ROOT / "build" / "bin"
    return b if (b / "libllama.so").exists() and (LLAMACPP_ROOT / "build" / ".ignis-built").exists() else None


def llamacpp_driver(rebuild: bool = False) -> Path | None:
    """Compiles tests/tools/llamacpp_driver.c against the built libllama (into
    the cache, never the repo); None when llama.cpp is not built."""
    bindir = llamacpp_bin_dir()
    if bindir is None:
        return None
    src = TOOLS / "llamacpp_driver.c"
    exe = LLAMACPP_ROOT / "driver" / "llamacpp_driver"
    if rebuild or not exe.exists() or exe.stat().st_mtime < max(src.stat().st_mtime,
                                                                (bindir / "libllama.so").stat().st_mtime):
        exe.parent.mkdir(parents=True, exist_ok=True)
        lsrc = LLAMACPP_ROOT / "src" / "vendor" / "llama.cpp"
        cc = shutil.which("cc") or "gcc"
        subprocess.run([cc, "-O2", "-std=c11", "-Wall", "-o", str(exe), str(src),
                        f"-I{lsrc / 'include'}", f"-I{lsrc / 'ggml' / 'include'}",
                        f"-L{bindir}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bindir}"],
                       check=True)
    return exe


def llamacpp_run(args: list[str], **kw) -> subprocess.CompletedProcess:
    exe = llamacpp_driver()
    assert exe is not None, "llama.cpp is not built (scripts/build-llamacpp.sh)"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=True, **kw)


def llamacpp_all_logits(model: Path, tokens: list[int], out: Path, *, threads: int = 2,
                        incremental: bool = False, kv: str = "f32") -> np.ndarray:
    cmd = "logits-inc" if incremental else "logits"
    llamacpp_run(["-t", str(threads), "--kv", kv, model, cmd, out, ",".join(map(str, tokens))])
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)
