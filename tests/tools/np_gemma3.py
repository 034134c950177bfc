#!/usr/bin/env python3
"""A slow, plain numpy (float64) Gemma 3 forward pass over a GGUF file, for
calibrating tolerances only: it dequantizes every tensor with the `gguf`
package and computes in float64, so on a quantized file it gives the logits
those dequantized weights define, without any activation rounding. It is
checked against the transformers fixtures (tests/e2e/test_gguf_convert.py),
and it is not a reference for ignis by itself.

Usage: np_gemma3.py MODEL.gguf --tokens 2,10,20 [--out FILE.f32]
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import gguf


def _field(r: gguf.GGUFReader, key: str, default=None):
    f = r.get_field(key)
    return default if f is None else f.contents()


def load(path: str):
    r = gguf.GGUFReader(path)
    a = "gemma3"
    hp = {
        "L": _field(r, f"{a}.block_count"),
        "H": _field(r, f"{a}.embedding_length"),
        "nh": _field(r, f"{a}.attention.head_count"),
        "nkv": _field(r, f"{a}.attention.head_count_kv"),
        "hd": _field(r, f"{a}.attention.key_length"),
        "eps": _field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-6),
        "base": _field(r, f"{a}.rope.freq_base", 1e6),
        "base_swa": _field(r, f"{a}.rope.freq_base_swa", 1e4),
        "scale_type": _field(r, f"{a}.rope.scaling.type"),
        "factor": _field(r, f"{a}.rope.scaling.factor", 1.0),
        "window": _field(r, f"{a}.attention.sliding_window", 0),
        "pattern": _field(r, f"{a}.attention.sliding_window_pattern", 6),
        "attn_scale": _field(r, f"{a}.attention.scale"),
    }
    L = hp["L"]
    if not hp["window"]:
        hp["sliding"] = [False] * L
    elif isinstance(hp["pattern"], list):
        hp["sliding"] = [bool(x) for x in hp["pattern"]]
    else:
        p = hp["pattern"]
        hp["sliding"] = [i % p < p - 1 for i in range(L)]
    if hp["attn_scale"] is None:
        hp["attn_scale"] = (1 / math.sqrt(hp["H"] / hp["nh"]) if L == 62 else 1 / math.sqrt(hp["hd"]))
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order [rows][ne0]
        w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
    return hp, w


def rms(x, wt, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * wt


def rope(x, pos, base, factor):
    # x [T, heads, hd], NeoX pairing (i, i + hd/2)
    hd = x.shape[-1]
    inv = base ** (-np.arange(0, hd // 2, dtype=np.float64) * 2 / hd)
    ang = (pos[:, None] / factor) * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(hp, w, tokens):
    T, H, nh, nkv, hd, eps = len(tokens), hp["H"], hp["nh"], hp["nkv"], hp["hd"], hp["eps"]
    E = w["token_embd.weight"]
    x = E[tokens] * np.float64(np.float32(math.sqrt(H)))
    pos = np.arange(T, dtype=np.float64)
    for l in range(hp["L"]):
        p = f"blk.{l}."
        h = rms(x, w[p + "attn_norm.weight"], eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, nh, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, nkv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, nkv, hd)
        q = rms(q, w[p + "attn_q_norm.weight"], eps)
        k = rms(k, w[p + "attn_k_norm.weight"], eps)
        sl = hp["sliding"][l]
        base = hp["base_swa"] if sl else hp["base"]
        factor = 1.0 if sl or hp["scale_type"] != "linear" else hp["factor"]
        q, k = rope(q, pos, base, factor), rope(k, pos, base, factor)
        q = q * hp["attn_scale"]
        rep = nh // nkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("ihd,jhd->hij", q, k)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = j > i
        if sl:
            mask |= (i - j) >= hp["window"]
        s = np.where(mask[None], -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hij,jhd->ihd", s, v).reshape(T, nh * hd)
        a = o @ w[p + "attn_output.weight"].T
        x = x + rms(a, w[p + "post_attention_norm.weight"], eps)
        h = rms(x, w[p + "ffn_norm.weight"], eps)
        f = (gelu(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        x = x + rms(f, w[p + "post_ffw_norm.weight"], eps)
    x = rms(x, w["output_norm.weight"], eps)
    out = w.get("output.weight", E)
    return x @ out.T


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    hp, w = load(a.model)
    lg = forward(hp, w, [int(t) for t in a.tokens.split(",")])
    if a.out:
        lg.astype("<f4").tofile(a.out)
    else:
        for p, row in enumerate(lg):
            top = np.argsort(-row)[:5]
            print(p, " ".join(f"{t}:{row[t]:.4f}" for t in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
