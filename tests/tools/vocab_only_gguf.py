#!/usr/bin/env python3
"""Writes a GGUF that holds only a model's tokenizer: general.architecture
and every tokenizer.* key (pieces, scores, types, special ids, the chat
template), byte for byte, and no tensors. For `ignis synth --vocab-from`,
which copies exactly those keys, so a synthetic model of any size gets the
real vocabulary without carrying the real weights (the Gemma 3 vocabulary
is about 6 MiB).

    vocab_only_gguf.py IN.gguf OUT.gguf

    tests/tools/vocab_only_gguf.py ~/.cache/ignis/gemma-3-270m-q4_k_m.gguf /tmp/vocab.gguf
    ignis synth --size 27b --type q4_k_m --vocab-from /tmp/vocab.gguf -o /tmp/s27.gguf

The metadata is walked directly (standard library only, under a second; the
gguf package's reader takes minutes for a 262144-piece vocabulary on a busy
machine). GGUF version 2 or 3 in, version 3 out. The output is written to
OUT.tmp and renamed, so an interrupted run leaves no partial OUT.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

# bytes of the scalar value types (GGUF spec); 8 = string, 9 = array
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def read_kv(data: bytes) -> list[tuple[str, bytes]]:
    """(key, the entry's raw bytes: key length, key, type, value) in file order."""
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    version = struct.unpack_from("<I", data, 4)[0]
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (2 or 3 expected)")
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos, out = 24, []

    def skip(t: int, pos: int, n: int = 1) -> int:
        if t == STRING:
            for _ in range(n):
                pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            return pos
        if t not in SIZES:
            raise ValueError(f"value type {t} at byte {pos}")
        return pos + SIZES[t] * n

    for _ in range(n_kv):
        start = pos
        klen = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8: pos + 8 + klen].decode()
        pos += 8 + klen
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if t == ARRAY:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos = skip(et, pos + 12, n)
        else:
            pos = skip(t, pos)
        if pos > len(data):
            raise ValueError("metadata runs past the end of the file")
        out.append((key, data[start:pos]))
    return out


def vocab_only(src: Path, dst: Path) -> int:
    """Writes dst; returns the number of tokenizer keys copied."""
    with open(src, "rb") as f:
        data = f.read(64 << 20)  # the metadata (tensors follow it)
    kv = read_kv(data)
    keep = [(k, raw) for k, raw in kv if k == "general.architecture" or k.startswith("tokenizer.")]
    if not any(k == "general.architecture" for k, _ in keep):
        raise ValueError(f"{src}: no general.architecture")
    if not any(k == "tokenizer.ggml.tokens" for k, _ in keep):
        raise ValueError(f"{src}: no tokenizer.ggml.tokens")
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(keep)))
        for _, raw in keep:
            f.write(raw)
    os.replace(tmp, dst)
    return len(keep) - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    a = ap.parse_args(argv)
    if not a.src.is_file():
        print(f"vocab_only_gguf: {a.src}: no such file", file=sys.stderr)
        return 1
    try:
        n = vocab_only(a.src, a.dst)
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        print(f"vocab_only_gguf: {a.src}: {e}", file=sys.stderr)
        return 1
    print(f"{a.dst}: {n} tokenizer keys, {a.dst.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
