#!/usr/bin/env python3
"""Re-quantizes a GGUF model: every 2-D weight matrix is dequantized to f32
(gguf-py's reference dequantizers) and written as Q8_0 or F16; 1-D tensors
(the norms) and all metadata are copied unchanged, except general.file_type,
which is set to the new type. Tensor names and order are kept.

    gguf_requant.py IN.gguf OUT.gguf --type q8_0|f16

Used by bench/vs-llamacpp to make Q8_0 and F16 versions of the Gemma 3 270M
Q4_K_M (the benchmark compares speed, so requantizing an already quantized
model is fine: the shapes and types are what matter). The output is written
to OUT.tmp and renamed, so an interrupted run leaves no partial OUT.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# llama.cpp's enum llama_ftype
FILE_TYPES = {"q8_0": (QT.Q8_0, 7), "f16": (QT.F16, 1)}


def requant(src: Path, dst: Path, typ: str) -> None:
    qtype, ftype = FILE_TYPES[typ]
    reader = gguf.GGUFReader(str(src))
    arch_field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise SystemExit(f"{src}: no general.architecture")
    arch = arch_field.contents()
    tmp = dst.with_name(dst.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)

    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(ftype)

    for t in reader.tensors:
        if len(t.shape) >= 2 and t.shape[1] > 1:
            w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
            # numpy order (rows, cols): the reverse of GGUF's ne
            w = w.reshape(tuple(int(x) for x in reversed(t.shape.tolist())))
            if qtype == QT.F16:
                writer.add_tensor(t.name, w.astype(np.float16))
            else:
                q = gguf.quants.quantize(w, qtype)
                writer.add_tensor(t.name, q, raw_dtype=qtype)
        else:
            data = np.asarray(t.data)
            if data.dtype == np.uint8:  # quantized: byte shape, type given
                writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
            else:
                writer.add_tensor(t.name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--type", required=True, choices=sorted(FILE_TYPES))
    a = ap.parse_args(argv)
    if not a.src.is_file():
        print(f"gguf_requant.py: {a.src} not found", file=sys.stderr)
        return 2
    requant(a.src, a.dst, a.type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
