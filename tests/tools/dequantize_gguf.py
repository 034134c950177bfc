#!/usr/bin/env python3
"""Writes a copy of a GGUF file with every tensor dequantized to F32 by the
`gguf` package (the format's reference), all metadata kept except
general.file_type (0 = all F32). The reference tests use it to run the real
270M's exact weights without quantized arithmetic, against llama.cpp on the
file its own `llama-quantize ... F32` makes (make_llamacpp_reference.py
checks that both files hold the same floats).

Usage: dequantize_gguf.py IN.gguf OUT.gguf
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import gguf


def dequantize_file(src: Path, dst: Path) -> None:
    r = gguf.GGUFReader(src)
    arch = r.get_field("general.architecture").contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name in ("general.architecture", "general.file_type",
                                                     "general.alignment"):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    dequantize_file(Path(sys.argv[1]), Path(sys.argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
