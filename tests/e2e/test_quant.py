"""src/quant against gguf-py (the `gguf` package, ggml's own Python port):
ig_dequantize_row must equal gguf.quants.dequantize bit for bit on random
blocks, ig_quantize_row must equal gguf.quants.quantize byte for byte where
the package implements the quantizer, and the K-quant bytes ig_quantize_row
writes must read back through gguf-py's dequantizer close to the input."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf import quants

BLOCK_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]
ALL_TYPES = [Q.F32, Q.F16, Q.BF16, *BLOCK_TYPES]
# Byte offsets of the fp16 scale fields inside one block (ggml-common.h).
F16_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
# Types whose quantizer gguf-py implements (ggml's quantize_row_*_ref).
GGUF_QUANTIZERS = [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q5_1]


@pytest.fixture(scope="module")
def lib(libignis):
    L = libignis
    L.ig_dequantize_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ig_dequantize_row.restype = None
    L.ig_quantize_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ig_quantize_row.restype = None
    L.ig_vec_dot_ref.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ig_vec_dot_ref.restype = ctypes.c_float
    for fn in (L.ig_dtype_block_elems, L.ig_dtype_block_bytes):
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_size_t
    L.ig_dtype_name.argtypes = [ctypes.c_int]
    L.ig_dtype_name.restype = ctypes.c_char_p
    return L


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    assert a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.c_void_p)


def ig_dequantize(lib, qtype: Q, data: np.ndarray) -> np.ndarray:
    elems, size = GGML_QUANT_SIZES[qtype]
    n = data.size // size * elems
    out = np.full(n, np.nan, dtype=np.float32)
    lib.ig_dequantize_row(int(qtype), ptr(data), ptr(out), n)
    return out


def ig_quantize(lib, qtype: Q, x: np.ndarray) -> np.ndarray:
    elems, size = GGML_QUANT_SIZES[qtype]
    out = np.zeros(x.size // elems * size, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    lib.ig_quantize_row(int(qtype), ptr(x), ptr(out), x.size)
    return out


def random_finite_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random fp16 bit patterns over the whole finite range (subnormals and
    both signs included): any pattern whose exponent is not all ones."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    inf_nan = (h & 0x7C00) == 0x7C00
    h[inf_nan] &= np.uint16(0xBFFF)
    return h


def random_blocks(rng: np.random.Generator, qtype: Q, n_blocks: int) -> np.ndarray:
    _, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        scales = random_finite_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        blocks[:, off:off + 2] = scales
    return blocks.reshape(-1)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got_u, want_u = got.view(np.uint32), want.view(np.uint32)
    bad = np.flatnonzero(got_u != want_u)
    if bad.size:
        i = bad[0]
        pytest.fail(f"{what}: {bad.size} of {got.size} differ; first at {i}: "
                    f"ignis {got[i]!r} (0x{got_u[i]:08x}) vs gguf {want[i]!r} (0x{want_u[i]:08x})")


def test_type_table_matches_gguf(lib):
    for qtype in ALL_TYPES:
        elems, size = GGML_QUANT_SIZES[qtype]
        assert lib.ig_dtype_block_elems(int(qtype)) == elems, qtype.name
        assert lib.ig_dtype_block_bytes(int(qtype)) == size, qtype.name
        assert lib.ig_dtype_name(int(qtype)).decode() == qtype.name


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda t: t.name)
def test_dequantize_bit_exact(lib, qtype: Q):
    rng = np.random.default_rng(1000 + int(qtype))
    data = random_blocks(rng, qtype, 4096)
    want = quants.dequantize(data, qtype).reshape(-1)
    got = ig_dequantize(lib, qtype, data)
    assert want.dtype == np.float32 and got.shape == want.shape
    assert np.isfinite(want).all()
    assert_bits_equal(got, want, f"dequantize {qtype.name}")


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16], ids=lambda t: t.name)
def test_dequantize_half_all_patterns(lib, qtype: Q):
    """Every one of the 65536 patterns, NaN payloads and subnormals included."""
    data = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.uint8)
    want = quants.dequantize(data, qtype).reshape(-1).astype(np.float32, copy=False)
    got = ig_dequantize(lib, qtype, data)
    assert_bits_equal(got, want, f"dequantize {qtype.name}")


def test_dequantize_f32_is_a_copy(lib):
    x = np.random.default_rng(7).standard_normal(96).astype(np.float32)
    assert_bits_equal(ig_dequantize(lib, Q.F32, x.view(np.uint8)), x, "F32")


def weights_like(rng: np.random.Generator, n: int, block: int) -> np.ndarray:
    """Blocks of very different magnitudes (2^-30 .. 2^10), some offset, some
    all zero, plus blocks that hit exact halves of the quantization grid."""
    x = rng.standard_normal(n).astype(np.float32).reshape(-1, block)
    nb = x.shape[0]
    x *= np.exp2(rng.integers(-30, 11, size=(nb, 1))).astype(np.float32)
    x[1::7] += np.abs(x[1::7]).max(axis=1, keepdims=True)
    x[2::11] = 0.0
    # amax 127 (Q8_0 d = 1) with values on exact halves: ties of roundf.
    halves = np.arange(block, dtype=np.float32) - block / 2 + 0.5
    x[3::13] = halves
    x[3::13, 0] = 127.0
    return x.reshape(-1)


@pytest.mark.parametrize("qtype", GGUF_QUANTIZERS, ids=lambda t: t.name)
def test_quantize_bit_exact(lib, qtype: Q):
    rng = np.random.default_rng(2000 + int(qtype))
    block = max(GGML_QUANT_SIZES[qtype][0], 32)
    x = weights_like(rng, 4096 * 32, block)
    if qtype in (Q.F16, Q.BF16):
        # Also raw binary32 patterns: overflow, subnormals, infinities, NaNs.
        raw = rng.integers(0, 1 << 32, size=65536, dtype=np.uint64).astype(np.uint32)
        raw = raw.view(np.float32)
        x = np.concatenate([x, raw, np.float32([65504, 65519.99, 65520, 2**-25, 3 * 2**-25, -0.0])])
    with np.errstate(over="ignore", invalid="ignore"):  # f16 overflow to inf is intended
        want = np.asarray(quants.quantize(x, qtype)).view(np.uint8).reshape(-1)
    got = ig_quantize(lib, qtype, x)
    assert got.size == want.size
    if qtype == Q.F16:
        # numpy's f32 -> f16 keeps NaN payloads (as ignis does) only on its
        # software path; compare NaNs by sign and NaN-ness alone.
        g, w = got.view(np.uint16), want.view(np.uint16)
        nan = np.isnan(x)
        assert (g[~nan] == w[~nan]).all(), np.flatnonzero(g[~nan] != w[~nan])[:5]
        assert np.isnan(g[nan].view(np.float16)).all() and (((g[nan] ^ w[nan]) & 0x8000) == 0).all()
    else:
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{qtype.name}: {bad.size} bytes differ, first at byte {bad[0]}"


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda t: t.name)
def test_k_quantizer_reads_back_through_gguf(lib, qtype: Q):
    """ggml's own dequantizer decodes what ig_quantize_row writes to within
    half a quantization step of the (sub-)block range (plus the scale's
    own rounding): a wrong bit layout would be off by whole ranges."""
    rng = np.random.default_rng(3000 + int(qtype))
    x = weights_like(rng, 256 * 512, 256)
    data = ig_quantize(lib, qtype, x)
    back = quants.dequantize(data, qtype).reshape(-1)
    levels = {Q.Q4_K: 15, Q.Q5_K: 31, Q.Q6_K: 62}[qtype]
    sub = 16 if qtype == Q.Q6_K else 32
    xs = x.reshape(-1, sub).astype(np.float64)
    err = np.abs(back.reshape(-1, sub) - xs).max(axis=1)
    if qtype == Q.Q6_K:
        sub_range = 2 * np.abs(xs).max(axis=1)
    else:
        sub_range = xs.max(axis=1) - np.minimum(xs.min(axis=1), 0)
    blk = x.reshape(-1, 256).astype(np.float64)
    blk_range = np.repeat(blk.max(axis=1) - np.minimum(blk.min(axis=1), 0), 256 // sub)
    step = sub_range / levels + 3 * blk_range / (63 * levels)
    bound = 0.5 * step + 2**-24 + 1e-6 * blk_range
    worst = np.argmax(err / bound)
    assert (err <= bound).all(), f"sub-block {worst}: err {err[worst]:.3g} > {bound[worst]:.3g}"


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_vec_dot_ref_matches_gguf_dequantize(lib, qtype: Q):
    rng = np.random.default_rng(4000 + int(qtype))
    elems, size = GGML_QUANT_SIZES[qtype]
    n = 2304 if elems == 256 else 1152
    if qtype in F16_FIELDS:
        data = random_blocks(rng, qtype, n // elems)
    else:
        data = ig_quantize(lib, qtype, rng.standard_normal(n).astype(np.float32))
    x = rng.standard_normal(n).astype(np.float32)
    w = quants.dequantize(data, qtype).reshape(-1).astype(np.float64)
    want = float(w @ x.astype(np.float64))
    got = lib.ig_vec_dot_ref(int(qtype), ptr(data), ptr(x), n)
    assert got == pytest.approx(want, rel=0, abs=1e-6 * float(np.abs(w) @ np.abs(x)))
