#!/usr/bin/env python3
"""Writes a GGUF that holds only a model's tokenizer: general.architecture
and every tokenizer.* key (pieces, scores, types, special ids, the chat
template), no tensors. For `ignis synth --vocab-from`, which copies exactly
those keys, so a synthetic model of any size gets the real vocabulary
without carrying the real weights (the Gemma 3 vocabulary is about 6 MiB).

    vocab_only_gguf.py IN.gguf OUT.gguf

    tests/tools/vocab_only_gguf.py ~/.cache/ignis/gemma-3-270m-q4_k_m.gguf /tmp/vocab.gguf
    ignis synth --size 27b --type q4_k_m --vocab-from /tmp/vocab.gguf -o /tmp/s27.gguf

The output is written to OUT.tmp and renamed, so an interrupted run leaves
no partial OUT.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import gguf


def vocab_only(src: Path, dst: Path) -> int:
    """Writes dst; returns the number of tokenizer keys copied."""
    reader = gguf.GGUFReader(str(src))
    arch_field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise SystemExit(f"{src}: no general.architecture")
    if "tokenizer.ggml.tokens" not in reader.fields:
        raise SystemExit(f"{src}: no tokenizer.ggml.tokens")
    tmp = dst.with_name(dst.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch_field.contents())
    n = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
        n += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    a = ap.parse_args(argv)
    if not a.src.is_file():
        raise SystemExit(f"{a.src}: no such file")
    n = vocab_only(a.src, a.dst)
    print(f"{a.dst}: {n} tokenizer keys, {a.dst.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
