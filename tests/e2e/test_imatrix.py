"""Importance matrices: `ignis quantize --imatrix FILE` gives llama-quantize
--imatrix's blocks, byte for byte, for every type with an importance-weighted
quantizer (on a fixture in the main tier, on the real 270M in the slow one),
reading the GGUF and the legacy .dat forms; bad imatrix files are refused
with no output left behind; and `ignis imatrix` on the real 270M computes
llama-imatrix's statistics (slow tier).

Needs llama.cpp's tools (scripts/build-llamacpp.sh --cpu); skipped without."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

BIN = Path(os.environ.get("IGNIS_LLAMA_BIN") or R.CACHE / "llamacpp" / "build" / "bin")
LLAMA_QUANTIZE, LLAMA_IMATRIX = BIN / "llama-quantize", BIN / "llama-imatrix"
F32_270M = Path(os.environ.get("IGNIS_MODEL_F32") or R.CACHE / "gemma-3-270m-q4_k_m-dequant-f32.gguf")
KJV = R.CACHE / "kjv.txt"
MODELS = R.hf_models()

need_quantize = pytest.mark.skipif(not LLAMA_QUANTIZE.exists(),
                                   reason=f"no {LLAMA_QUANTIZE} (scripts/build-llamacpp.sh --cpu)")


def tensor_bytes(t) -> np.ndarray:
    return np.asarray(t.data).view(np.uint8).reshape(-1)


def write_imatrix(path: Path, model: Path, seed: int = 1) -> dict[str, tuple[np.ndarray, int]]:
    """A GGUF imatrix as llama-imatrix writes it, for every blk.* matrix of
    model: sums of squares with a spread of magnitudes (some columns 1000x
    more important than others), counts of 512 tokens."""
    rng = np.random.default_rng(seed)
    entries = {}
    for t in gguf.GGUFReader(model).tensors:
        if t.name.startswith("blk.") and len(t.shape) >= 2:
            n = int(t.shape[0])
            entries[t.name] = ((rng.gamma(0.5, 1.0, n) * 10.0 ** rng.uniform(-1.5, 1.5, n) * 512).astype(np.float32),
                               512)
    w = gguf.GGUFWriter(str(path), arch="imatrix", use_temp_file=False)
    # llama-imatrix's keys: no general.architecture
    w.kv_data[0].pop("general.architecture", None)
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["fixture.txt"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for name in sorted(entries):
        s, c = entries[name]
        w.add_tensor(f"{name}.in_sum2", s)
        w.add_tensor(f"{name}.counts", np.array([c], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return entries


def write_legacy(path: Path, entries: dict[str, tuple[np.ndarray, int]], ncall: int = 3) -> None:
    """The same statistics in llama.cpp's legacy .dat form: per entry the mean
    square times the chunk count, and that count."""
    out = struct.pack("<i", len(entries))
    for name in sorted(entries):
        s, c = entries[name]
        out += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, len(s))
        out += ((s / np.float32(c)) * np.float32(ncall)).astype(np.float32).tobytes()
    out += struct.pack("<ii", ncall, 11) + b"fixture.txt"
    path.write_bytes(out)


def compare(ours: Path, theirs: Path) -> set:
    return R.gguf_same_tensors(gguf.GGUFReader(ours), gguf.GGUFReader(theirs))


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    if not MODELS:
        pytest.skip(f"no fixtures in {R.HF_FIXTURES}")
    return R.converted_gguf(MODELS[0], "f32", tmp_path_factory.mktemp("imatrix"))


# (ignis --type, llama-quantize type, --pure): the fixture's rows are 96 wide
# (Q5_0 / Q5_1 / Q8_0 fallbacks of the K mixes) and 256 wide (ffn_down: Q4_K,
# Q5_K, Q6_K), so these cover every importance-weighted quantizer.
FIXTURE_CASES = [("q4_0", "Q4_0", True), ("q5_0", "Q5_0", True), ("q5_1", "Q5_1", True),
                 ("q8_0", "Q8_0", True), ("q4_k_m", "Q4_K_M", False), ("q5_k_m", "Q5_K_M", False),
                 ("q6_k", "Q6_K", False), ("q4_k", "Q4_K", True)]


@need_quantize
@pytest.mark.parametrize("typ,ltyp,pure", FIXTURE_CASES, ids=[c[0] + ("-pure" if c[2] else "") for c in FIXTURE_CASES])
def test_imatrix_quantize_matches_llama_quantize(src: Path, typ: str, ltyp: str, pure: bool, tmp_path: Path):
    imat = tmp_path / "imatrix.gguf"
    write_imatrix(imat, src)
    flag = ["--pure"] if pure else []
    ours, theirs, plain = tmp_path / "ignis.gguf", tmp_path / "llama.gguf", tmp_path / "plain.gguf"
    r = R.run_ignis(["quantize", src, ours, "--type", typ, *flag, "--imatrix", imat])
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(LLAMA_QUANTIZE), *flag, "--imatrix", str(imat), str(src), str(theirs), ltyp, "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    kinds = compare(ours, theirs)
    fields = gguf.GGUFReader(ours).fields
    assert fields["quantize.imatrix.entries_count"].contents() == 42
    assert fields["quantize.imatrix.dataset"].contents() == "fixture.txt"
    # the imatrix changed the blocks (except for Q8_0, which ignores it)
    assert R.run_ignis(["quantize", src, plain, "--type", typ, *flag]).returncode == 0
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(plain)
    differ = [t.name for t, u in zip(a.tensors, b.tensors) if not np.array_equal(tensor_bytes(t), tensor_bytes(u))]
    assert (len(differ) == 0) == (typ == "q8_0"), differ
    if typ.startswith("q4_k"):
        assert Q.Q4_K in kinds and Q.Q5_0 in kinds


@need_quantize
def test_imatrix_legacy_form(src: Path, tmp_path: Path):
    entries = write_imatrix(tmp_path / "unused.gguf", src, seed=2)
    dat = tmp_path / "imatrix.dat"
    write_legacy(dat, entries)
    ours, theirs = tmp_path / "ignis.gguf", tmp_path / "llama.gguf"
    r = R.run_ignis(["quantize", src, ours, "--type", "q5_k_m", "--imatrix", dat])
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(LLAMA_QUANTIZE), "--imatrix", str(dat), str(src), str(theirs), "Q5_K_M", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    compare(ours, theirs)
    assert gguf.GGUFReader(ours).fields["quantize.imatrix.chunks_count"].contents() == 3


def test_bad_imatrix_is_refused(src: Path, tmp_path: Path):
    out = tmp_path / "o.gguf"
    cases = {"junk": b"\x07\x00\x00\x00garbage", "empty": b"", "gguf-junk": b"GGUF" + b"\xff" * 40}
    for name, data in cases.items():
        bad = tmp_path / f"{name}.imatrix"
        bad.write_bytes(data)
        r = R.run_ignis(["quantize", src, out, "--type", "q4_0", "--imatrix", bad])
        assert r.returncode == 1 and "imatrix" in r.stderr, (name, r.stderr)
        assert not out.exists() and not list(tmp_path.glob("o.gguf*")), name
    # an entry of the wrong width
    entries = write_imatrix(tmp_path / "good.gguf", src)
    name = next(iter(entries))
    s, c = entries[name]
    entries[name] = (s[:-32], c)
    w = gguf.GGUFWriter(str(tmp_path / "narrow.gguf"), arch="imatrix", use_temp_file=False)
    w.add_array("imatrix.datasets", ["x"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for n, (s, c) in sorted(entries.items()):
        w.add_tensor(f"{n}.in_sum2", s)
        w.add_tensor(f"{n}.counts", np.array([c], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = R.run_ignis(["quantize", src, out, "--type", "q4_0", "--imatrix", tmp_path / "narrow.gguf"])
    assert r.returncode == 1 and name in r.stderr, r.stderr
    assert not out.exists() and not list(tmp_path.glob("o.gguf*"))
    # a non-finite value
    s, c = entries[name]
    entries[name] = (np.concatenate([s, np.full(32, np.inf, np.float32)]), c)
    write_legacy(tmp_path / "inf.dat", entries)
    r = R.run_ignis(["quantize", src, out, "--type", "q4_0", "--imatrix", tmp_path / "inf.dat"])
    assert r.returncode == 1 and "non-finite" in r.stderr, r.stderr
    assert not out.exists()


# ---- `ignis imatrix` on the real 270M --------------------------------------

def test_imatrix_command(tmp_path: Path):
    if not R.REAL_MODEL.exists():
        pytest.skip(f"no {R.REAL_MODEL}")
    text = tmp_path / "t.txt"
    text.write_text("In the beginning God created the heaven and the earth. " * 12)
    out = tmp_path / "im.gguf"
    r = R.run_ignis(["imatrix", R.REAL_MODEL, "-f", text, "-o", out, "-c", "16", "--chunks", "3"])
    assert r.returncode == 0, r.stderr
    rd = gguf.GGUFReader(out)
    assert rd.fields["general.type"].contents() == "imatrix"
    assert rd.fields["imatrix.chunk_count"].contents() == 3 and rd.fields["imatrix.chunk_size"].contents() == 16
    assert rd.fields["imatrix.datasets"].contents() == [str(text)]
    t = {x.name: np.asarray(x.data, np.float64) for x in rd.tensors}
    assert len(t) == 2 * 7 * 18 and all(n.startswith("blk.") for n in t)
    assert t["blk.0.ffn_down.weight.in_sum2"].shape == (2048,)
    assert all(v.tolist() == [48.0] for n, v in t.items() if n.endswith(".counts"))
    for n, v in t.items():  # sums of squares; q, k and v share theirs
        # (a few ffn_norm weights of the 270M are zero: so are their channels)
        assert (v >= 0).all() and np.isfinite(v).all() and (v > 0).mean() > 0.99, n
    assert np.array_equal(t["blk.3.attn_q.weight.in_sum2"], t["blk.3.attn_v.weight.in_sum2"])
    # refusals: an existing output without --force, a text shorter than a chunk
    r = R.run_ignis(["imatrix", R.REAL_MODEL, "-f", text, "-o", out, "-c", "16"])
    assert r.returncode == 1 and "--force" in r.stderr
    short = tmp_path / "short.txt"
    short.write_text("Hi.")
    r = R.run_ignis(["imatrix", R.REAL_MODEL, "-f", short, "-o", tmp_path / "x.gguf", "-c", "16"])
    assert r.returncode == 1 and "no whole chunk" in r.stderr
    assert not list(tmp_path.glob("x.gguf*"))
    r = R.run_ignis(["imatrix", R.REAL_MODEL, "-f", text])
    assert r.returncode == 2


# ---- the real 270M (slow tier) --------------------------------------------

def need_real(*tools: Path):
    for t in tools:
        if not t.exists():
            pytest.skip(f"no {t} (scripts/build-llamacpp.sh --cpu)")
    if not F32_270M.exists() or not KJV.exists():
        pytest.skip(f"no {F32_270M} or {KJV}")


@pytest.fixture(scope="module")
def kjv_head(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("kjv") / "kjv-head.txt"
    if KJV.exists():
        p.write_bytes(KJV.read_bytes()[:60000])
    return p


@pytest.mark.slow  # ~40 s (quiet machine): llama-imatrix on the 270M
def test_imatrix_matches_llama_imatrix(kjv_head: Path, tmp_path: Path):
    need_real(LLAMA_IMATRIX)
    ours, theirs = tmp_path / "ignis.gguf", tmp_path / "llama.gguf"
    args = ["-f", kjv_head, "-c", "128", "--chunks", "4"]
    r = R.run_ignis(["imatrix", F32_270M, *args, "-o", ours], timeout=600)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(LLAMA_IMATRIX), "-m", str(F32_270M), *map(str, args), "-o", str(theirs), "--no-ppl"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
    fa = {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")}
    fb = {k: f.contents() for k, f in b.fields.items() if not k.startswith("GGUF.")}
    assert fa == fb
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    assert list(ta) == list(tb) and len(ta) == 2 * 7 * 18
    for name, t in tb.items():
        x, y = np.asarray(ta[name].data, np.float64), np.asarray(t.data, np.float64)
        if name.endswith(".counts"):
            assert x.tolist() == y.tolist() == [512.0], name
            continue
        # Both sum the squares of f32 activations of the same F32 weights;
        # they differ by the kernels' rounding (llama.cpp's F16 K*Q products,
        # other summation orders), which grows through the layers to ~3e-4
        # of the vector's norm by the last one. 2e-3 leaves room; a wrong
        # input (another buffer, another token) is off by tens of percent.
        rel = np.linalg.norm(x - y) / np.linalg.norm(y)
        assert rel < 2e-3, (name, rel)


@pytest.mark.slow  # minutes: the 270M through ignis imatrix, ignis quantize and llama-quantize
@pytest.mark.parametrize("typ,ltyp,pure", [("q4_k_m", "Q4_K_M", False), ("q4_0", "Q4_0", True)])
def test_imatrix_quantize_270m_matches_llama_quantize(kjv_head: Path, typ: str, ltyp: str, pure: bool,
                                                      tmp_path: Path):
    need_real(LLAMA_QUANTIZE)
    imat = tmp_path / "imatrix.gguf"
    r = R.run_ignis(["imatrix", F32_270M, "-f", kjv_head, "-c", "128", "--chunks", "4", "-o", imat], timeout=600)
    assert r.returncode == 0, r.stderr
    ours, theirs = tmp_path / "ignis.gguf", tmp_path / "llama.gguf"
    flag = ["--pure"] if pure else []
    r = R.run_ignis(["quantize", F32_270M, ours, "--type", typ, *flag, "--imatrix", imat], timeout=900)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(LLAMA_QUANTIZE), *flag, "--imatrix", str(imat), str(F32_270M), str(theirs), ltyp, "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    compare(ours, theirs)
