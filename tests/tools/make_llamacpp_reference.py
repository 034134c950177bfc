#!/usr/bin/env python3
"""Makes the llama.cpp reference data for the real Gemma 3 270M Q4_K_M GGUF:

  tests/data/llamacpp-gemma3-270m.json        tokenizations, greedy runs, metadata
  tests/data/llamacpp-gemma3-270m.logits.f16  every position's logits of one
                                              fixed sequence, float16 LE,
                                              row-major [positions][vocab]

llama.cpp is built by scripts/build-llamacpp.sh (from the llama-cpp-python
sdist, outside the repo); tests/tools/llamacpp_driver.c is compiled against
its libllama into ~/.cache/ignis/llamacpp/driver. Settings: CPU, f32 KV cache,
flash attention off, n_ctx 512, prompt decoded as one batch, then one token
per step; greedy = llama.cpp's own greedy sampler.

Usage: make_llamacpp_reference.py [--model PATH] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ignis_ref as R  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "<start_of_turn>user\nWrite a short poem about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "Die Hauptstadt von Deutschland ist",
    "日本の首都は",
]
N_GEN = 32
# the fixed sequence for full logits: BOS + a short sentence (~10 tokens)
LOGITS_TEXT = "The quick brown fox jumps over the lazy dog"
DEQ_POSITIONS = 4  # positions (the last ones) kept of the F32-dequantized run


def dumps(x, ind: str = "") -> str:
    """JSON with objects indented and lists on one line."""
    if isinstance(x, dict):
        inner = ind + " "
        items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + ind + "}"
    if isinstance(x, list) and any(isinstance(v, dict) for v in x):
        inner = ind + " "
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in x) + "\n" + ind + "]"
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def same_tensors(a: Path, b: Path) -> bool:
    import gguf
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta = {t.name: t for t in ra.tensors}
    tb = {t.name: t for t in rb.tensors}
    return ta.keys() == tb.keys() and all(
        ta[k].tensor_type == tb[k].tensor_type == 0 and np.array_equal(ta[k].data, tb[k].data) for k in ta)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=R.REAL_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    bindir = subprocess.run([str(R.REPO / "scripts" / "build-llamacpp.sh")], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    drv = R.llamacpp_driver()
    assert drv is not None, "llama.cpp build not found"
    build = R.LLAMACPP_ROOT / "build"
    commit = (build / ".ignis-commit").read_text().strip()
    sdist = (R.LLAMACPP_ROOT / "src" / ".ignis-version").read_text().strip()
    model = a.model
    t = ["-t", str(a.threads)]

    def tokenize(text: str) -> list[int]:
        r = subprocess.run([str(drv), str(model), "tokenize"], input=text.encode(), check=True,
                           capture_output=True)
        return [int(x) for x in r.stdout.decode().strip().split(",")]

    prompts = []
    for text in PROMPTS:
        ids = tokenize(text)
        assert ids[0] == 2, "llama.cpp should add BOS"
        r = R.llamacpp_run([*t, model, "generate", N_GEN, ",".join(map(str, ids))])
        steps = [line.split() for line in r.stdout.strip().splitlines()]
        gen = [int(s[0]) for s in steps]
        eog = [bool(int(s[1])) for s in steps]
        top5 = [[[int(s[i]), round(float(s[i + 1]), 5)] for i in range(2, 12, 2)] for s in steps]
        assert all(t[0][0] == g for t, g in zip(top5, gen))
        gap = [float(s[3]) - float(s[5]) for s in steps]
        prompts.append({"text": text, "tokens": ids, "greedy": gen, "is_eog": eog,
                        "second_token": [t[1][0] for t in top5], "top2_gap": gap, "top5": top5})
        print(f"{text!r}: {len(ids)} tokens, min gap {min(gap):.4g}", file=sys.stderr)

    seq = tokenize(LOGITS_TEXT)
    tmp = R.LLAMACPP_ROOT / "tmp"
    tmp.mkdir(exist_ok=True)
    lg = R.llamacpp_all_logits(model, seq, tmp / "batch.f32", threads=a.threads)
    lg1 = R.llamacpp_all_logits(model, seq, tmp / "t1.f32", threads=1)
    lgi = R.llamacpp_all_logits(model, seq, tmp / "inc.f32", threads=a.threads, incremental=True)
    lgh = R.llamacpp_all_logits(model, seq, tmp / "f16kv.f32", threads=a.threads, kv="f16")
    f16 = lg.astype("<f2")
    name = "llamacpp-gemma3-270m.logits.f16"
    R.DATA.mkdir(parents=True, exist_ok=True)
    f16.tofile(R.DATA / name)

    # The same weights dequantized to F32 by llama.cpp's own llama-quantize:
    # llama.cpp's logits for them, without its 8-bit activation rounding.
    deq = tmp / "gemma-3-270m-f32-llamacpp.gguf"
    if not deq.exists():
        subprocess.run([str(Path(bindir) / "llama-quantize"), "--allow-requantize", str(model), str(deq),
                        "F32", str(a.threads)], check=True, capture_output=True)
    pydeq = R.dequantized_real_model(model)
    same = same_tensors(deq, pydeq)
    assert same, "gguf-py and llama.cpp dequantize differently"
    lgd = R.llamacpp_all_logits(deq, seq, tmp / "deq.f32", threads=a.threads)
    keep = list(range(len(seq) - DEQ_POSITIONS, len(seq)))
    dname = "llamacpp-gemma3-270m-f32dequant.logits.f16"
    lgd[keep].astype("<f2").tofile(R.DATA / dname)

    def errs(x, y):
        e = R.rel_errs_per_position(x, y)
        return {"max": max(e), "mean": float(np.mean(e))}

    srt = np.sort(lg, axis=1)
    second = [int(np.where(np.arange(row.size) == row.argmax(), -np.inf, row).argmax()) for row in lg]
    out = {
        "about": "llama.cpp reference for the real Gemma 3 270M Q4_K_M GGUF; made by "
                 "tests/tools/make_llamacpp_reference.py",
        "llama_cpp": {"source": f"PyPI llama-cpp-python=={sdist} sdist (vendor/llama.cpp)",
                      "commit": commit, "backend": "CPU", "bin_dir": bindir},
        "model": {"file": model.name, "sha256": R.sha256(model), "size": model.stat().st_size},
        "settings": {"kv_cache": "f32", "flash_attn": False, "n_ctx": 512, "threads": a.threads,
                     "add_bos": True, "parse_special": True,
                     "greedy": "llama_sampler_init_greedy; prompt as one batch, then one token per decode; "
                               "generation does not stop at end-of-generation tokens (is_eog marks them)"},
        "prompts": prompts,
        "logits": {
            "text": LOGITS_TEXT, "tokens": seq, "file": name, "dtype": "float16", "byteorder": "little",
            "shape": [len(seq), int(lg.shape[1])],
            "top1": [int(x) for x in lg.argmax(axis=1)],
            "second": second,
            "top5": [[[int(i), round(float(row[i]), 5)] for i in np.argsort(-row, kind="stable")[:5]] for row in lg],
            "top2_gap": [float(x) for x in srt[:, -1] - srt[:, -2]],
        },
        "logits_f32_dequantized": {
            "about": "llama.cpp on the same weights dequantized to F32 by llama-quantize (tensor data "
                     "identical to tests/tools/dequantize_gguf.py's output); same tokens, only these positions",
            "positions": keep, "file": dname, "dtype": "float16", "byteorder": "little",
            "shape": [len(keep), int(lg.shape[1])],
            "top1": [int(x) for x in lgd[keep].argmax(axis=1)],
        },
        "calibration": {
            "about": "relative L2 errors per position (max, mean) between llama.cpp runs of the same "
                     "sequence; the model amplifies small numeric differences a lot",
            "float16_storage": errs(f16.astype(np.float32), lg),
            "threads_1_vs_n": errs(lg1, lg),
            "incremental_vs_batch": errs(lgi, lg),
            "kv_f16_vs_f32": errs(lgh, lg),
            "q4_k_m_vs_f32_dequantized": errs(lg, lgd),
            "f32_dequantized_float16_storage": errs(lgd[keep].astype("<f2").astype(np.float32), lgd[keep]),
        },
    }
    R.LLAMACPP_JSON.write_text(dumps(out) + "\n")
    print(json.dumps(out["calibration"], indent=1), file=sys.stderr)
    print(f"wrote {R.LLAMACPP_JSON} and {R.DATA / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
