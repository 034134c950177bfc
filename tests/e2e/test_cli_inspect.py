"""`ignis info` and `ignis logits` (top 10 without --out) on the real Gemma 3
270M GGUF, checked against the file's own metadata read with the `gguf`
package and against `ignis logits --out`; and the README's claim about which
commands take `--backend`."""
from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ignis_ref as R  # noqa: E402

MODEL = R.REAL_MODEL
REPO = Path(__file__).resolve().parents[2]


def ignis(*args, timeout=300):
    return subprocess.run([str(R.ignis_bin()), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def meta():
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} missing: run `make model`")
    r = R.gguf_reader(MODEL)
    kv = {k: f.contents() for k, f in r.fields.items()
          if not k.startswith("tokenizer.ggml.") or k.endswith("_id")}
    kv["n_vocab"] = len(r.fields["tokenizer.ggml.tokens"].data)
    kv["chat_template"] = "tokenizer.chat_template" in r.fields
    tensors = [(t.name, t.tensor_type.name, [int(d) for d in t.shape], int(t.n_bytes),
                int(t.n_elements)) for t in r.tensors]
    return kv, tensors


def human(b: float) -> str:  # the CLI's formatting
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while b >= 1024 and i < 4:
        b /= 1024
        i += 1
    return f"{b:.2f} {units[i]}"


def kv_bytes(kv: dict, n_ctx: int, n_seq: int, elem: int, n_batch: int = 512) -> int:
    """K and V rows for every layer: a global layer holds the whole context, a
    sliding-window layer only the window plus one batch of new tokens
    (window + n_batch - 1 rows; ignis info assumes the default batch 512),
    never more than the context."""
    a = "gemma3."
    n_layer, win = kv[a + "block_count"], kv[a + "attention.sliding_window"]
    row = kv[a + "attention.head_count_kv"] * (kv[a + "attention.key_length"] +
                                              kv[a + "attention.value_length"]) * elem
    total = 0
    for layer in range(n_layer):
        sliding = layer % 6 != 5  # llama.cpp's gemma3 pattern: every 6th layer is global
        cap = min(win + n_batch - 1, n_ctx) if sliding else n_ctx
        total += row * cap * n_seq
    return total


def test_info_shows_the_real_hyperparameters(meta):
    kv, tensors = meta
    r = ignis("info", MODEL, "--no-tensors")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    a = "gemma3."
    # the values this audit expects, and that they are what the file says
    assert (kv[a + "block_count"], kv[a + "embedding_length"], kv[a + "attention.head_count"],
            kv[a + "attention.head_count_kv"], kv[a + "attention.key_length"], kv["n_vocab"],
            kv[a + "attention.sliding_window"], kv[a + "context_length"]) == \
        (18, 640, 4, 1, 256, 262144, 512, 32768)
    n_layer = kv[a + "block_count"]
    glob = [str(i) for i in range(n_layer) if i % 6 == 5]
    want = [
        "format:           gguf",
        f"architecture:     {kv['general.architecture']}",
        f"name:             {kv['general.name']}",
        f"vocab:            {kv['n_vocab']} (real tokens {kv['n_vocab']})",
        f"embedding:        {kv[a + 'embedding_length']}",
        f"feed-forward:     {kv[a + 'feed_forward_length']}",
        f"layers:           {n_layer}",
        f"heads:            {kv[a + 'attention.head_count']} query, "
        f"{kv[a + 'attention.head_count_kv']} key/value",
        f"head dim:         {kv[a + 'attention.key_length']} (value {kv[a + 'attention.value_length']})",
        f"context (train):  {kv[a + 'context_length']}",
        f"sliding window:   {kv[a + 'attention.sliding_window']}",
        "global layers:    " + " ".join(glob),  # 5 11 17
        # the file has only the global base; 10000 is Gemma 3's local base
        f"rope theta:       {kv[a + 'rope.freq_base']:g} global, 10000 local",
        "rope scaling:     linear x1 global, x1 local",
        f"attention scale:  {kv[a + 'attention.key_length'] ** -0.5:.7g}",
        f"rms eps:          {kv[a + 'attention.layer_norm_rms_epsilon']:g}",
        f"special tokens:   bos {kv['tokenizer.ggml.bos_token_id']}, "
        f"eos {kv['tokenizer.ggml.eos_token_id']}, end_of_turn 106, "
        f"pad {kv['tokenizer.ggml.padding_token_id']}",
        "tokenizer:        yes",
        f"chat template:    {'yes' if kv['chat_template'] else 'none'}",
        f"parameters:       {sum(t[4] for t in tensors) / 1e6:.1f} M",
    ]
    lines = out.splitlines()
    for w in want:
        assert w in lines, (w, out)
    total = sum(t[3] for t in tensors)
    assert re.search(rf"^weights:          {re.escape(human(total))} in {len(tensors)} tensors ",
                     out, re.M), out
    counts = collections.Counter(t[1] for t in tensors)
    assert counts == {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}  # Q4_K_M recipe
    m = re.search(r"^tensor types:    ((?: \w+ x\d+)+)$", out, re.M)
    assert m, out
    shown = {name: int(n) for name, n in re.findall(r"(\w+) x(\d+)", m.group(1))}
    assert shown == dict(counts), (shown, counts)


@pytest.mark.parametrize("ctx,seq,kvt", [(4096, 1, "f16"), (32768, 1, "f16"), (256, 1, "f16"),
                                         (2048, 3, "f32")])
def test_info_kv_cache_memory(meta, ctx, seq, kvt):
    kv, _ = meta
    r = ignis("info", MODEL, "--no-tensors", "--ctx", ctx, "--seq", seq, "--kv", kvt)
    assert r.returncode == 0, r.stderr
    want = kv_bytes(kv, ctx, seq, 2 if kvt == "f16" else 4)
    line = f"KV cache:         {human(want)} at context {ctx} x {seq} sequence(s), {kvt}"
    assert line in r.stdout.splitlines(), (line, r.stdout)
    if (ctx, seq, kvt) == (32768, 1, "f16"):
        # 3 global layers x 32768 rows + 15 sliding layers x 1023 rows, 1 KiB a row
        assert want == (3 * 32768 + 15 * 1023) * 1024


def test_info_tensor_table(meta):
    _, tensors = meta
    r = ignis("info", MODEL)
    assert r.returncode == 0, r.stderr
    table = re.split(r"\n\ntensor +type +shape\n", r.stdout)[1].splitlines()
    rows = []
    for line in table:
        m = re.fullmatch(r"(\S+)\s+(\S+)\s+\[([0-9, ]+)\]", line)
        assert m, line
        rows.append((m.group(1), m.group(2), [int(x) for x in m.group(3).split(", ")]))
    assert rows == [(n, t, s) for n, t, s, _, _ in tensors]
    assert ("token_embd.weight", "Q8_0", [640, 262144]) in rows  # 640 is no multiple of 256


def test_logits_top10_matches_the_float_output(tmp_path):
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} missing: run `make model`")
    tokens = [2, 818, 5279, 529, 7001, 563, 9079, 236761]  # <bos>The capital of France is Paris.
    arg = ",".join(map(str, tokens))
    out = tmp_path / "l.bin"
    f = ignis("logits", MODEL, "--tokens", arg, "--all", "--out", out, "-t", "2")
    assert f.returncode == 0, f.stderr
    logits = np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)
    for extra in (["--all"], []):
        p = ignis("logits", MODEL, "--tokens", arg, *extra, "-t", "2")
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        positions = range(len(tokens)) if extra else [len(tokens) - 1]
        assert len(lines) == len(positions), p.stdout
        for pos, line in zip(positions, lines):
            m = re.fullmatch(rf"position {pos}:((?: \d+ \(-?[0-9.]+\)){{10}})", line)
            assert m, line
            pairs = [(int(i), float(v)) for i, v in re.findall(r"(\d+) \((-?[0-9.]+)\)", m.group(1))]
            row = logits[pos]
            assert pairs[0][0] == int(np.argmax(row)), (pos, pairs[0], int(np.argmax(row)))
            ids = [i for i, _ in pairs]
            assert ids == sorted(ids, key=lambda i: -row[i]) and len(set(ids)) == 10
            assert np.sort(row)[-10:].min() == pytest.approx(row[ids[-1]])  # the true top 10
            for i, v in pairs:
                assert v == pytest.approx(float(row[i]), abs=6e-5)


def test_readme_lists_the_commands_that_take_backend():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"((?:`\w+`(?:, | and ))+`\w+`) take `--backend vulkan`", readme)
    assert m, "README no longer says which commands take --backend vulkan"
    claimed = set(re.findall(r"`(\w+)`", m.group(1)))
    all_cmds = {"run", "chat", "serve", "bench", "info", "logits", "tokenize", "detokenize",
                "synth", "devices"}
    assert claimed <= all_cmds
    for cmd in sorted(all_cmds):
        h = ignis(cmd, "--help")
        assert h.returncode == 0, (cmd, h.stderr)
        assert ("--backend" in h.stdout) == (cmd in claimed), (cmd, h.stdout)
    # the others reject the option instead of silently ignoring it
    for cmd in sorted(all_cmds - claimed):
        model = [] if cmd in ("synth", "devices") else [MODEL]
        r = ignis(cmd, *model, "--backend", "vulkan")
        assert r.returncode == 2 and "--backend" in r.stderr, (cmd, r.returncode, r.stderr)
