"""`ignis synth` end to end: random-weight Gemma 3 GGUFs at the real shapes.

Interface (src/cli/cmd_synth.c):
    ignis synth --size 270m|1b|4b|12b|27b --type f16|q8_0|q4_k_m -o OUT.gguf
                [--vocab-from MODEL.gguf] [--seed S] [--layers N] [--exact] [--quiet]

The 270M at 2 layers, in each type, with the real model's vocabulary: the
file opens in gguf-py's GGUFReader with llama.cpp's gemma3 keys, tensor
names, shapes and (Q4_K_M) the llama_tensor_get_type recipe re-derived here;
`ignis info` prints its hyper-parameters; bad arguments and I/O errors fail
cleanly. When llama.cpp is built (scripts/build-llamacpp.sh) it must load the
files and agree with ignis's logits.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

REAL = Path(os.environ.get("IGNIS_MODEL") or
            Path.home() / ".cache" / "ignis" / "gemma-3-270m-q4_k_m.gguf")
pytestmark = pytest.mark.skipif(not REAL.is_file(), reason=f"no model {REAL}")

TYPES = ["f16", "q8_0", "q4_k_m"]
FILE_TYPE = {"f16": 1, "q8_0": 7, "q4_k_m": 15}
H, F, NH, NKV, HD, L, V = 640, 2048, 4, 1, 256, 2, 262144
SEED = 11


def ignis(build: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = build / "ignis"
    if not exe.is_file():
        pytest.fail(f"{exe} not found: build the `ignis_cli` target first")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_type(typ: str, name: str, ne0: int) -> Q:
    """llama.cpp: convert_hf_to_gguf (f16, q8_0) / llama-quantize Q4_K_M."""
    if name.endswith("norm.weight"):
        return Q.F32
    if typ == "f16":
        return Q.F16
    if typ == "q8_0":
        return Q.Q8_0
    t = Q.Q4_K
    if name == "token_embd.weight":
        t = Q.Q6_K  # tied: treated as the output tensor
    elif name.endswith(("attn_v.weight", "ffn_down.weight")) and \
            use_more_bits(int(name.split(".")[1]), L):
        t = Q.Q6_K
    if ne0 % 256:
        t = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}[t]
    return t


def expected_tensors() -> dict[str, list[int]]:
    shapes = {"token_embd.weight": [H, V], "output_norm.weight": [H]}
    for i in range(L):
        b = f"blk.{i}."
        shapes.update({
            b + "attn_norm.weight": [H], b + "attn_q.weight": [H, NH * HD],
            b + "attn_k.weight": [H, NKV * HD], b + "attn_v.weight": [H, NKV * HD],
            b + "attn_q_norm.weight": [HD], b + "attn_k_norm.weight": [HD],
            b + "attn_output.weight": [NH * HD, H], b + "post_attention_norm.weight": [H],
            b + "ffn_norm.weight": [H], b + "ffn_gate.weight": [H, F], b + "ffn_up.weight": [H, F],
            b + "ffn_down.weight": [F, H], b + "post_ffw_norm.weight": [H]})
    return shapes


@pytest.fixture(scope="module")
def synth_files(ignis_build: Path, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    d = tmp_path_factory.mktemp("synth")
    out = {}
    for typ in TYPES:
        path = d / f"s270m-{typ}.gguf"
        p = ignis(ignis_build, "synth", "--size", "270m", "--type", typ, "--layers", str(L),
                  "--seed", str(SEED), "--vocab-from", REAL, "-o", path)
        assert p.returncode == 0, p.stderr
        out[typ] = (path, p.stderr)
    return out


def raw_kv(path: Path) -> dict[str, tuple[int, bytes]]:
    """Key -> (type id, the value's bytes) of a GGUF's metadata, by a direct
    walk of the header (gguf-py's reader needs seconds for a 262144-token
    vocabulary; this is for the byte-for-byte comparisons)."""
    data = path.read_bytes()[: 64 << 20]
    assert data[:4] == b"GGUF"
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos, out = 24, {}

    def skip(t: int, pos: int, n: int = 1) -> int:
        if t == 8:
            for _ in range(n):
                pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            return pos
        return pos + sizes[t] * n

    for _ in range(n_kv):
        klen = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8: pos + 8 + klen].decode()
        pos += 8 + klen
        t = struct.unpack_from("<I", data, pos)[0]
        start = pos = pos + 4
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos = skip(et, pos + 12, n)
        else:
            pos = skip(t, pos)
        out[key] = (t, data[start:pos])
    return out


@pytest.fixture(scope="module")
def readers(synth_files) -> dict[str, object]:
    """One GGUFReader per synthesized file, shared by the tests."""
    return {typ: R.gguf_reader(path) for typ, (path, _) in synth_files.items()}


def value(r, key):
    f = r.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]].tolist()


@pytest.mark.asan
@pytest.mark.parametrize("typ", TYPES)
def test_synth_file_layout(synth_files, readers, typ: str):
    path, stderr = synth_files[typ]
    size = path.stat().st_size
    # progress and the size on stderr (not a tty: one line per 10%)
    assert "100%" in stderr and f"wrote {path}: {size} bytes" in stderr, stderr

    r = readers[typ]
    want = {
        "general.architecture": "gemma3",
        "general.file_type": FILE_TYPE[typ],
        "general.quantization_version": 2,
        "gemma3.context_length": 32768,
        "gemma3.embedding_length": H,
        "gemma3.block_count": L,
        "gemma3.feed_forward_length": F,
        "gemma3.attention.head_count": NH,
        "gemma3.attention.head_count_kv": NKV,
        "gemma3.attention.key_length": HD,
        "gemma3.attention.value_length": HD,
        "gemma3.attention.sliding_window": 512,
        "gemma3.rope.freq_base": 1e6,
    }
    for k, v in want.items():
        assert value(r, k) == pytest.approx(v) if isinstance(v, float) else value(r, k) == v, k
    assert value(r, "gemma3.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert "gemma3.rope.scaling.type" not in r.fields  # 270M: no RoPE scaling
    assert r.alignment == 32

    # every tokenizer.* key of the source, byte for byte, and nothing else from it
    src, dst = raw_kv(REAL), raw_kv(path)
    assert sorted(dst) == sorted(k for k in r.fields if not k.startswith("GGUF."))
    tok_keys = sorted(k for k in src if k.startswith("tokenizer."))
    assert "tokenizer.ggml.tokens" in tok_keys
    assert sorted(k for k in dst if k.startswith("tokenizer.")) == tok_keys
    for k in tok_keys:
        assert dst[k] == src[k], k
    assert len(r.fields["tokenizer.ggml.tokens"].data) == V
    assert "general.license" in src and "general.license" not in dst

    shapes = expected_tensors()
    got = {t.name: t for t in r.tensors}
    assert sorted(got) == sorted(shapes)
    assert "output.weight" not in got  # tied embedding
    for name, ne in shapes.items():
        t = got[name]
        assert list(map(int, t.shape)) == ne, name
        assert t.tensor_type == expected_type(typ, name, ne[0]), (name, t.tensor_type.name)
        assert t.data_offset % 32 == 0
    if typ == "q4_k_m":  # 640-wide rows fall back; layer 1 = 7*2//8 gets the extra bits
        assert got["token_embd.weight"].tensor_type == Q.Q8_0
        assert got["blk.0.attn_v.weight"].tensor_type == Q.Q5_0
        assert got["blk.1.attn_v.weight"].tensor_type == Q.Q8_0
        assert got["blk.1.ffn_down.weight"].tensor_type == Q.Q6_K
        assert got["blk.0.ffn_down.weight"].tensor_type == Q.Q4_K
        assert got["blk.0.attn_output.weight"].tensor_type == Q.Q4_K

    # sane weights: norms stored as 1 + w, matrices ~ N(0, 1/fan_in)
    norm = np.asarray(got["blk.1.post_ffw_norm.weight"].data)
    assert abs(norm.mean() - 1) < 0.05 and 0.05 < norm.std() < 0.15
    w = gguf.quants.dequantize(got["blk.0.ffn_down.weight"].data,
                               got["blk.0.ffn_down.weight"].tensor_type)
    assert np.isfinite(w).all()
    assert abs(float(w.std()) * np.sqrt(F) - 1) < 0.05


@pytest.mark.asan
def test_synth_info(ignis_build: Path, synth_files):
    path, _ = synth_files["q4_k_m"]
    p = ignis(ignis_build, "info", path)
    assert p.returncode == 0, p.stderr
    for line in ["architecture:     gemma3", "name:             Gemma 3 270M synthetic Q4_K_M",
                 f"vocab:            {V} (real tokens {V})", f"embedding:        {H}",
                 f"feed-forward:     {F}", f"layers:           {L}",
                 f"heads:            {NH} query, {NKV} key/value",
                 f"head dim:         {HD} (value {HD})", "context (train):  32768",
                 "sliding window:   512", "global layers:    none",
                 "rope theta:       1e+06 global, 10000 local",
                 "rope scaling:     linear x1 global, x1 local", "attention scale:  0.0625",
                 "special tokens:   bos 2, eos 1, end_of_turn 106, pad 0",
                 "tokenizer:        yes"]:
        assert line in p.stdout, (line, p.stdout)
    has_template = "tokenizer.chat_template" in raw_kv(REAL)
    assert f"chat template:    {'yes' if has_template else 'none'}" in p.stdout
    assert f"in {13 * L + 2} tensors" in p.stdout
    assert "tensor types:     F32 x13 Q5_0 x9 Q8_0 x2 Q4_K x3 Q6_K x1" in p.stdout


@pytest.mark.asan
def test_synth_bad_arguments(ignis_build: Path, synth_files, tmp_path: Path):
    out = tmp_path / "x.gguf"
    cases = [
        ([], "required"),
        (["--size", "3b", "--type", "f16", "-o", out], "unknown --size"),
        (["--size", "270m", "--type", "q4_0", "-o", out], "unknown --type"),
        (["--size", "270m", "--type", "f16", "--layers", "0", "-o", out], "--layers"),
        (["--size", "270m", "--type", "f16", "--layers", "129", "-o", out], "--layers"),
        (["--size", "270m", "--type", "f16", "--seed", "-1", "-o", out], "--seed"),
        (["--size", "270m", "--type", "f16", "--seed", "x", "-o", out], "--seed"),
        (["--size", "270m", "--type", "f16", "-o"], "needs a value"),
        (["--size", "270m", "--type", "f16", "--bogus", "-o", out], "unexpected argument"),
    ]
    for args, msg in cases:
        p = ignis(ignis_build, "synth", *args)
        assert p.returncode == 2, (args, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
    assert not out.exists()

    # the vocabulary file itself as the output: refused before anything is written
    src, _ = synth_files["q8_0"]
    before = src.stat().st_size
    p = ignis(ignis_build, "synth", "--size", "270m", "--type", "q8_0", "--layers", "1",
              "--vocab-from", src, "-o", src)
    assert p.returncode == 2 and "--vocab-from file" in p.stderr, p.stderr
    assert src.stat().st_size == before

    # I/O errors: a missing vocabulary, a missing directory, a full disk
    p = ignis(ignis_build, "synth", "--size", "270m", "--type", "q8_0", "--layers", "1",
              "--vocab-from", tmp_path / "nope.gguf", "-o", out)
    assert p.returncode == 1 and "nope.gguf" in p.stderr, p.stderr
    assert not out.exists()
    p = ignis(ignis_build, "synth", "--size", "270m", "--type", "q8_0", "--layers", "1",
              "-o", tmp_path / "no" / "such" / "dir.gguf")
    assert p.returncode == 1 and "cannot create" in p.stderr, p.stderr
    if Path("/dev/full").exists():
        # through a symlink, so that a broken cleanup could only remove the link
        full = tmp_path / "full.gguf"
        full.symlink_to("/dev/full")
        p = ignis(ignis_build, "synth", "--size", "270m", "--type", "q4_k_m", "--layers", "1",
                  "-o", full)
        assert p.returncode == 1 and "No space left on device" in p.stderr, p.stderr
        assert full.is_symlink() and Path("/dev/full").exists()  # a device is never removed


needs_llamacpp = pytest.mark.skipif(R.llamacpp_bin_dir() is None,
                                    reason="llama.cpp not built (scripts/build-llamacpp.sh)")


@needs_llamacpp
def test_synth_llamacpp_agrees(ignis_build: Path, synth_files, tmp_path: Path):
    """llama.cpp loads the Q4_K_M file (every block type of the recipe:
    Q4_K, Q5_0, Q6_K, Q8_0), tokenizes like the real model, and its logits
    match ignis's (it rounds activations to 8 bits for these types: 5e-2)."""
    path, _ = synth_files["q4_k_m"]
    text = "Hello, synthetic world! <start_of_turn>user\n"
    ids_real = R.llamacpp_run([REAL, "tokenize"], input=text).stdout.strip()
    ids = R.llamacpp_run([path, "tokenize"], input=text).stdout.strip()
    assert ids == ids_real
    tokens = [2, 105, 2364, 107, 9259, 1000, 50000]
    want = R.llamacpp_all_logits(path, tokens, tmp_path / "l.f32")
    out = tmp_path / "i.f32"
    p = ignis(ignis_build, "logits", path, "--tokens", ",".join(map(str, tokens)), "--all",
              "--kv", "f32", "--out", out)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)
    assert np.isfinite(got).all()
    errs = R.rel_errs_per_position(got, want)
    assert max(errs) <= 5e-2, [f"{e:.2e}" for e in errs]
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.slow
def test_vocab_only_file_feeds_synth_and_bench(ignis_build: Path, tmp_path: Path):
    """A GGUF with only the tokenizer metadata (tests/tools/vocab_only_gguf.py)
    is enough for --vocab-from: the synthetic model gets the real model's
    tokenizer keys byte for byte, and `bench --json-schema` runs on it."""
    vocab = tmp_path / "vocab.gguf"
    p = subprocess.run([sys.executable, str(Path(R.__file__).parent / "vocab_only_gguf.py"),
                        str(REAL), str(vocab)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert vocab.stat().st_size < 20 << 20
    head = vocab.read_bytes()[:24]
    assert struct.unpack_from("<IQQ", head, 4)[:2] == (3, 0)  # version 3, no tensors
    real_kv = raw_kv(REAL)
    want = {k: v for k, v in real_kv.items() if k.startswith("tokenizer.")}
    got = raw_kv(vocab)
    assert set(got) == set(want) | {"general.architecture"}
    assert all(got[k] == want[k] for k in want)
    out = tmp_path / "s.gguf"
    p = ignis(ignis_build, "synth", "--size", "270m", "--type", "q4_k_m", "--layers", "1",
              "--vocab-from", vocab, "-o", out, "--quiet")
    assert p.returncode == 0, p.stderr
    synth_kv = raw_kv(out)
    assert all(synth_kv[k] == want[k] for k in want)
    schema = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "person.json"
    js = tmp_path / "bench.json"
    p = ignis(ignis_build, "bench", out, "-p", "0", "-n", "4", "-r", "1", "--batch", "0",
              "-t", "2", "--json-schema", schema, "--prompt", "A person:", "--json", js)
    assert p.returncode == 0, p.stderr
    rows = {r["test"]: r for r in json.loads(js.read_text())["results"]}
    assert set(rows) >= {"tg4", "tg4 free", "tg4 schema"}
    assert rows["tg4 schema"]["mask_p50_ms"] > 0
    assert rows["tg4 schema"]["mask_p99_ms"] >= rows["tg4 schema"]["mask_p50_ms"]
    assert rows["tg4 schema"]["mask_p99_ms"] >= rows["tg4 schema"]["mask_mean_ms"] > 0
    # not a GGUF: a clear error
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 8)
    p = subprocess.run([sys.executable, str(Path(R.__file__).parent / "vocab_only_gguf.py"),
                        str(bad), str(tmp_path / "x.gguf")], capture_output=True, text=True)
    assert p.returncode == 1 and "not a GGUF" in p.stderr
