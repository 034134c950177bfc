"""`ignis quantize IN.gguf OUT.gguf --type T` on GGUF conversions of the tiny
fixture checkpoints (tests/tools/hf_to_gguf.py): every block is byte-exact
with the `gguf` package's reference quantizers (gguf.quants.quantize, the
same rules as llama.cpp's quantize_row_*_ref), the norms stay F32, the
metadata is copied (general.file_type set), ignis loads the result, and an
existing output is only replaced with --force."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

import gguf  # noqa: E402
import gguf.utility  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

MODELS = R.hf_models()
pytestmark = pytest.mark.skipif(not MODELS, reason=f"no fixtures in {R.HF_FIXTURES}")

TYPES = {"f16": (Q.F16, 1), "bf16": (Q.BF16, 32), "q8_0": (Q.Q8_0, 7), "q4_0": (Q.Q4_0, 2),
         "q5_0": (Q.Q5_0, 8), "q5_1": (Q.Q5_1, 9)}


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


# ---- K-quant mixes against llama-quantize --------------------------------
# The real 270M, dequantized to F32 (tests/tools/dequantize_gguf.py), through
# `ignis quantize` and `llama-quantize` (scripts/build-llamacpp.sh --cpu):
# every tensor must get the same type and the same bytes.

LLAMA_QUANTIZE = Path(os.environ.get("IGNIS_LLAMA_QUANTIZE")
                      or R.CACHE / "llamacpp" / "build" / "bin" / "llama-quantize")
F32_270M = Path(os.environ.get("IGNIS_MODEL_F32")
                or R.CACHE / "gemma-3-270m-q4_k_m-dequant-f32.gguf")
# (ignis --type, llama-quantize type, --pure, general.file_type)
# The Q4_K_M mix (Q4_K, Q6_K, Q5_0 and Q8_0 tensors) in the main tier; the
# others (about a minute each) in the slow one.
K_CASES = [("q4_k_m", "Q4_K_M", False, 15), ("q6_k", "Q6_K", True, 18), ("q4_k", "Q4_K", True, 15),
           ("q6_k", "Q6_K", False, 18), ("q5_k_m", "Q5_K_M", False, 17), ("q5_k", "Q5_K", True, 17)]
K_PARAMS = [pytest.param(*c, id=f"{c[0]}{'-pure' if c[2] else ''}",
                         marks=[] if c[0] == "q4_k_m" else [pytest.mark.slow]) for c in K_CASES]


def tensor_bytes(t) -> np.ndarray:
    return np.asarray(t.data).view(np.uint8).reshape(-1)


@pytest.mark.parametrize("typ,ltyp,pure,ftype", K_PARAMS)
def test_k_quant_matches_llama_quantize(typ: str, ltyp: str, pure: bool, ftype: int, tmp_path: Path):
    if not LLAMA_QUANTIZE.exists():
        pytest.skip(f"no llama-quantize at {LLAMA_QUANTIZE} (scripts/build-llamacpp.sh --cpu)")
    if not F32_270M.exists():
        pytest.skip(f"no {F32_270M} (tests/tools/dequantize_gguf.py makes it)")
    flag = ["--pure"] if pure else []
    ours, theirs = tmp_path / "ignis.gguf", tmp_path / "llama.gguf"
    r = R.run_ignis(["quantize", F32_270M, ours, "--type", typ, *flag], timeout=900)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(LLAMA_QUANTIZE), *flag, str(F32_270M), str(theirs), ltyp, "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = R.gguf_reader(ours), R.gguf_reader(theirs)
    assert a.fields["general.file_type"].contents() == b.fields["general.file_type"].contents() == ftype
    kinds = R.gguf_same_tensors(a, b)
    # the mix really has K-quant tensors and the fallbacks of the 640-wide rows
    k, fallback = {"q4": (Q.Q4_K, Q.Q5_0), "q5": (Q.Q5_K, Q.Q5_1), "q6": (Q.Q6_K, Q.Q8_0)}[typ[:2]]
    assert k in kinds and fallback in kinds
    if typ in ("q4_k_m", "q5_k_m"):
        assert Q.Q6_K in kinds and Q.Q8_0 in kinds


@pytest.mark.parametrize("typ", ["q4_k_m", "q5_k_m", "q6_k"])
def test_k_quant_on_fixture(src: Path, typ: str, tmp_path: Path):
    # Every row of the tiny fixture falls back (Q5_0 / Q5_1 / Q8_0, or F16 where not
    # whole 32-blocks); the blocks are the reference ones and ignis runs it.
    out = tmp_path / f"{typ}.gguf"
    for flag in ([], ["--pure"]):
        r = R.run_ignis(["quantize", src, out, "--type", typ, "--force", *flag])
        assert r.returncode == 0, r.stderr
        a, b = gguf.GGUFReader(src), gguf.GGUFReader(out)
        assert b.fields["general.file_type"].contents() == {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}[typ]
        for ta, tb in zip(a.tensors, b.tensors):
            want = tb.tensor_type
            if len(ta.shape) < 2 or ta.name.endswith("_norm.weight"):
                assert want == Q.F32, ta.name
            elif ta.shape[0] % 256 == 0:
                assert want in (Q.Q4_K, Q.Q5_K, Q.Q6_K), ta.name
                continue
            else:
                assert want in (Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.F16), (ta.name, want)
            x = np.asarray(ta.data, dtype=np.float32)
            ref = gguf.quants.quantize(x, want) if want != Q.F32 else x
            assert np.array_equal(tensor_bytes(tb), np.asarray(ref).view(np.uint8).reshape(-1)), ta.name
        r = R.run_ignis(["logits", out, "--tokens", "2,10,20"])
        assert r.returncode == 0, r.stderr


# ---- Hugging Face checkpoints as input -------------------------------------
# `ignis quantize HF_DIR OUT --type T` writes what tests/tools/hf_to_gguf.py
# (llama.cpp's gemma3 conventions, tokenizer "none") writes, tensor for
# tensor, plus the general.* keys of llama.cpp's converter; ignis computes
# the same logits from the file as from the checkpoint; llama.cpp runs it.

CONVERTER_ONLY_KEYS = {"general.type", "general.size_label"}  # gguf.Metadata's, not hf_to_gguf.py's


@pytest.mark.parametrize("typ", ["f32", "q8_0"])
@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_hf_input_matches_converter(model: Path, typ: str, tmp_path: Path):
    out = tmp_path / f"hf-{typ}.gguf"
    r = R.run_ignis(["quantize", model / "f32", out, "--type", typ])
    assert r.returncode == 0, r.stderr
    ref = R.converted_gguf(model, typ, tmp_path, vocab_none=True)
    a, b = gguf.GGUFReader(out), gguf.GGUFReader(ref)
    fa, fb = fields(a), fields(b)
    assert set(fa) - CONVERTER_ONLY_KEYS == set(fb), set(fa) ^ set(fb)
    for k, v in fb.items():
        if k != "general.name":
            assert fa[k] == v, k
    assert fa["general.type"] == "model" and fa["general.name"] == "f32"
    n_params = sum(int(np.prod(t.shape)) for t in b.tensors)
    assert fa["general.size_label"] == gguf.utility.size_label(n_params, 0, 0, 0)
    R.gguf_same_tensors(a, b)
    # the same logits as the checkpoint itself (f32: bit for bit)
    toks = R.hf_reference(model)["sequences"][0]["tokens"]
    want = R.ignis_logits(model / "f32", toks, tmp_path / "hf.f32")
    got = R.ignis_logits(out, toks, tmp_path / "gguf.f32")
    if typ == "f32":
        assert np.array_equal(got, want)
    else:
        assert R.rel_err(got, want) < 3e-2


def test_hf_input_k_mix_and_bf16(tmp_path: Path):
    # BF16 safetensors in, a K mix out: the fallback blocks (Q5_1, Q8_0) are
    # the reference quantizers' on the BF16 values (gguf-py has no K-quant
    # quantizer; those are checked against llama-quantize above).
    model = MODELS[0]
    out = tmp_path / "hf-q5km.gguf"
    r = R.run_ignis(["quantize", model / "bf16", out, "--type", "q5_k_m"])
    assert r.returncode == 0, r.stderr
    ref = R.converted_gguf(model, "f32", tmp_path, source="bf16", vocab_none=True)
    a, b = gguf.GGUFReader(out), gguf.GGUFReader(ref)
    assert a.fields["general.file_type"].contents() == 17
    tb = {t.name: t for t in b.tensors}
    kinds = set()
    for t in a.tensors:
        kinds.add(t.tensor_type)
        if t.tensor_type in (Q.Q5_K, Q.Q6_K):
            continue
        x = np.asarray(tb[t.name].data, dtype=np.float32)
        want = gguf.quants.quantize(x, t.tensor_type) if t.tensor_type != Q.F32 else x
        assert np.array_equal(tensor_bytes(t), np.asarray(want).view(np.uint8).reshape(-1)), t.name
    assert Q.Q5_1 in kinds
    r = R.run_ignis(["logits", out, "--tokens", "2,10,20"])
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(R.llamacpp_bin_dir() is None, reason="llama.cpp not built (scripts/build-llamacpp.sh)")
def test_hf_input_runs_in_llamacpp(tmp_path: Path):
    # llama.cpp ignores gemma3.attention.scale: a fixture whose scale is its rule's
    model = next(m for m in MODELS
                 if json.loads((m / "f32" / "config.json").read_text()).get("query_pre_attn_scalar", 256)
                 == json.loads((m / "f32" / "config.json").read_text()).get("head_dim", 256))
    out = tmp_path / "hf-f32.gguf"
    assert R.run_ignis(["quantize", model / "f32", out, "--type", "f32"]).returncode == 0
    for s in R.hf_reference(model)["sequences"]:
        want = np.array(s["logits"], dtype=np.float32)
        got = R.llamacpp_all_logits(out, s["tokens"], tmp_path / "l.f32")
        assert max(R.rel_errs_per_position(got, want)) <= 3e-4  # test_gguf_convert.py's f32 bound
        assert (got.argmax(1) == want.argmax(1)).all()


# ---- the tokenizer of a checkpoint (tokenizer.model) -----------------------
# A SentencePiece model made of pieces of the real 270M's vocabulary (control,
# byte and short normal pieces, renumbered), a fixture's weights with a
# tokenizer_config.json: the GGUF gets the keys llama.cpp's converter writes
# (_set_vocab_sentencepiece + SpecialVocab, emulated below from its source),
# and ignis and llama.cpp tokenize text the same way with it.

GGUF_270M = R.CACHE / "gemma-3-270m-q8_0.gguf"
LLAMA_TOKENIZE = LLAMA_QUANTIZE.parent / "llama-tokenize"


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _sp_model(pieces: list[tuple[bytes, float, int]]) -> bytes:
    import struct
    out = b""
    for text, score, typ in pieces:
        p = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", score)
        if typ != 1:
            p += b"\x18" + _varint(typ)
        out += b"\x0a" + _varint(len(p)) + p
    spec = b"\x0a\x08identity"  # a normalizer_spec, which the reader skips
    return out + b"\x1a" + _varint(len(spec)) + spec


@pytest.fixture(scope="module")
def tok_checkpoint(tmp_path_factory) -> tuple[Path, dict]:
    if not GGUF_270M.exists():
        pytest.skip(f"no {GGUF_270M}")
    model = MODELS[0]
    cfg = json.loads((model / "f32" / "config.json").read_text())
    n_vocab = cfg["vocab_size"]
    r = gguf.GGUFReader(GGUF_270M)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    scores = r.fields["tokenizer.ggml.scores"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    keep = [i for i in range(len(toks)) if types[i] == 6 or i < 4]
    normal = sorted((i for i in range(len(toks)) if types[i] == 1 and len(toks[i]) <= 3),
                    key=lambda i: -scores[i])
    keep += normal[:n_vocab - 4 - len(keep)]  # 4 ids left for [PAD<i>]
    pieces = [(toks[i].encode(), float(scores[i]), int(types[i])) for i in keep]
    pieces[len(pieces) - 1] = (b"<user>", 0.0, 4)  # a user-defined piece: NORMAL for the converter
    d = tmp_path_factory.mktemp("hftok") / "tiny-tok"
    d.mkdir()
    for f in (model / "f32").iterdir():
        (d / f.name).symlink_to(f)
    (d / "tokenizer.model").write_bytes(_sp_model(pieces))
    tcfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>",
            "eos_token": {"content": "<eos>"}, "unk_token": "<unk>", "pad_token": "<pad>",
            "added_tokens_decoder": {"0": {"content": "<pad>", "special": True},
                                     "2": {"content": "<bos>", "special": True},
                                     "9": {"content": "<unused7>", "special": False},
                                     "10": {"content": "\u2581hi", "special": False}},
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    (d / "tokenizer_config.json").write_text(json.dumps(tcfg))
    # what the converter writes (conversion/base.py, _create_vocab_sentencepiece)
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    sc = [-10000.0] * n_vocab
    ty = [5] * n_vocab
    for i, (t, s, k) in enumerate(pieces):
        tokens[i], sc[i], ty[i] = t.decode(), s, k if k in (2, 3, 5, 6) else 1
    for k, v in tcfg["added_tokens_decoder"].items():
        i, c = int(k), v["content"]
        if v["special"] or c.startswith("<unused"):
            ty[i] = 3
        else:
            c, ty[i] = c.replace("\u2581", " "), 4
        tokens[i], sc[i] = c, -1000.0
    want = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": sc, "tokenizer.ggml.token_type": ty,
            "tokenizer.ggml.bos_token_id": tokens.index("<bos>"), "tokenizer.ggml.eos_token_id": tokens.index("<eos>"),
            "tokenizer.ggml.unknown_token_id": tokens.index("<unk>"), "tokenizer.ggml.padding_token_id": 0,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
            "tokenizer.ggml.add_space_prefix": False, "tokenizer.chat_template": tcfg["chat_template"]}
    return d, want


@pytest.mark.slow  # reading the 270M's vocabulary takes ~20 s
def test_hf_tokenizer_keys(tok_checkpoint, tmp_path: Path):
    d, want = tok_checkpoint
    out = tmp_path / "tok.gguf"
    r = R.run_ignis(["quantize", d, out, "--type", "q8_0"])
    assert r.returncode == 0, r.stderr
    f = fields(gguf.GGUFReader(out))
    got = {k: v for k, v in f.items() if k.startswith("tokenizer.")}
    assert set(got) == set(want), set(got) ^ set(want)
    for k, v in want.items():
        if k == "tokenizer.ggml.scores":
            assert np.array_equal(np.float32(got[k]), np.float32(v)), k
        else:
            assert got[k] == v, k
    assert "gemma3.vocab_size" not in f and f["general.name"] == "tiny-tok"


@pytest.mark.slow
@pytest.mark.skipif(not LLAMA_TOKENIZE.exists(), reason="no llama-tokenize")
def test_hf_tokenizer_matches_llamacpp(tok_checkpoint, tmp_path: Path):
    d, _ = tok_checkpoint
    out = tmp_path / "tok.gguf"
    assert R.run_ignis(["quantize", d, out, "--type", "f16"]).returncode == 0
    for text in ["Hello world, the end.", "hi there <unused7> x\u00e9\u4e2d\n\n  spaces"]:
        r = R.run_ignis(["tokenize", out, text, "--bos"])
        assert r.returncode == 0, r.stderr
        ours = json.loads(r.stdout)
        r = subprocess.run([str(LLAMA_TOKENIZE), "-m", str(out), "-p", text, "--ids", "--log-disable"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        assert ours == theirs, (text, ours, theirs)
        assert len(ours) > 3 and ours[0] == 2
        print(text, ours)


# ---- --quant: weights quantized at load ------------------------------------

@pytest.mark.parametrize("typ", ["q8_0", "q4_0", "q4_k"])
def test_quant_at_load_matches_file(src: Path, typ: str, tmp_path: Path):
    # HF BF16 checkpoint and F32 GGUF in, logits bit-equal to the file
    # `ignis quantize --type T --pure` writes
    model = MODELS[0]
    toks = R.hf_reference(model)["sequences"][0]["tokens"]
    for inp in (model / "bf16", src):
        f = tmp_path / "q.gguf"
        r = R.run_ignis(["quantize", inp, f, "--type", typ, "--pure", "--force"])
        assert r.returncode == 0, r.stderr
        want = R.ignis_logits(f, toks, tmp_path / "file.f32")
        got = R.ignis_logits(inp, toks, tmp_path / "load.f32", extra=["--quant", typ])
        assert np.array_equal(got, want), (inp, typ)
        plain = R.ignis_logits(inp, toks, tmp_path / "plain.f32")
        assert not np.array_equal(got, plain)  # the weights really were quantized


def test_quant_at_load_refuses_quantized_weights(tmp_path: Path):
    q8 = tmp_path / "q8.gguf"
    assert R.run_ignis(["quantize", MODELS[0] / "f32", q8, "--type", "q8_0"]).returncode == 0
    r = R.run_ignis(["logits", q8, "--tokens", "2,10", "--quant", "q4_0"])
    assert r.returncode != 0 and "F32, F16 or BF16" in r.stderr
    r = R.run_ignis(["logits", q8, "--tokens", "2,10", "--quant", "q3_k"])
    assert r.returncode == 2 and "--quant expects" in r.stderr


def test_hf_multimodal_checkpoint_text_tower(tmp_path: Path):
    # Gemma3ForConditionalGeneration (tests/fixtures/vision/tiny-vlm): the
    # text model only, the same text logits as the checkpoint
    vlm = R.FIXTURES / "vision" / "tiny-vlm"
    if not (vlm / "config.json").exists():
        pytest.skip("no tiny-vlm fixture")
    out = tmp_path / "vlm.gguf"
    r = R.run_ignis(["quantize", vlm, out, "--type", "f32"])
    assert r.returncode == 0, r.stderr
    names = [t.name for t in gguf.GGUFReader(out).tensors]
    assert all(n.startswith("blk.") or n in ("token_embd.weight", "output_norm.weight") for n in names)
    toks = [2, 10, 20, 30]
    want = R.ignis_logits(vlm, toks, tmp_path / "a.f32")
    got = R.ignis_logits(out, toks, tmp_path / "b.f32")
    assert np.array_equal(got, want)


# ---- a checkpoint with tokenizer.json alone ---------------------------------
# A subset of the real Gemma 3 tokenizer.json (the special pieces, the 256
# byte pieces, some single characters and the pieces their first merges
# make, with every merge among the kept pieces, renumbered) next to a
# fixture's weights, without tokenizer.model: the GGUF gets a SentencePiece
# vocabulary (tokenizer.ggml.model "llama") built from it, and ignis
# tokenizes every golden string the same way from the GGUF as from the
# checkpoint's tokenizer.json.

def _tokenizer_json_subset(n_vocab: int) -> dict:
    bdir = R.ignis_bin().parent
    src = bdir / "fixtures" / "tokenizer" / "gemma3" / "tokenizer.json"
    if not src.exists():
        pytest.skip(f"no {src} (the build unpacks it)")
    tj = json.loads(src.read_text())
    vocab, merges = tj["model"]["vocab"], tj["model"]["merges"]
    by_id = {i: p for p, i in vocab.items()}
    keep = [by_id[i] for i in range(4)] + [f"<0x{b:02X}>" for b in range(256)]
    keep += list("\u2581etaoinshrdlucmfwypvbgkqjxz,.'!?:()[]{}0123456789\n")
    kept = set(keep)
    for a, b in merges:  # pieces made by the merges of kept pieces, in rank order
        if len(keep) >= n_vocab:
            break
        if a in kept and b in kept and a + b not in kept and vocab.get(a + b) is not None:
            keep.append(a + b)
            kept.add(a + b)
    ids = {p: i for i, p in enumerate(keep)}
    tj["model"]["vocab"] = ids
    tj["model"]["merges"] = [[a, b] for a, b in merges if a in kept and b in kept and a + b in kept]
    tj["added_tokens"] = [dict(t, id=ids[t["content"]]) for t in tj["added_tokens"] if t["content"] in kept]
    return tj


def test_hf_tokenizer_json_only(tmp_path: Path):
    model = MODELS[0]
    n_vocab = json.loads((model / "f32" / "config.json").read_text())["vocab_size"]
    tj = _tokenizer_json_subset(n_vocab)
    d = tmp_path / "tok-json"
    d.mkdir()
    for f in (model / "f32").iterdir():
        (d / f.name).symlink_to(f)
    (d / "tokenizer.json").write_text(json.dumps(tj))
    out = tmp_path / "tok.gguf"
    r = R.run_ignis(["quantize", d, out, "--type", "f32"])
    assert r.returncode == 0, r.stderr
    f = fields(gguf.GGUFReader(out))
    assert f["tokenizer.ggml.model"] == "llama" and "gemma3.vocab_size" not in f
    pieces = sorted(tj["model"]["vocab"], key=tj["model"]["vocab"].get)
    assert f["tokenizer.ggml.tokens"][:len(pieces)] == pieces
    assert f["tokenizer.ggml.token_type"][4] == 6 and f["tokenizer.ggml.token_type"][2] == 3  # byte, control
    assert f["tokenizer.ggml.bos_token_id"] == 2 and f["tokenizer.ggml.add_bos_token"] is True
    golden = json.loads((R.FIXTURES / "tokenizer" / "gemma3" / "golden.json").read_text())
    n_merged = 0
    for g in golden:
        a = R.run_ignis(["tokenize", d, g["text"], "--bos"])
        b = R.run_ignis(["tokenize", out, g["text"], "--bos"])
        assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
        ids = json.loads(a.stdout)
        assert json.loads(b.stdout) == ids, g["text"]
        n_merged += sum(i >= 4 + 256 + 47 for i in ids)
    assert n_merged > 50  # the merges were exercised, not only bytes and single characters
