#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
small valid inputs, a few KB each, from which libFuzzer mutates. Run it
with the test virtual environment (it needs numpy, gguf and Pillow):

    .venv/bin/python tests/fuzz/make_corpus.py

The output is deterministic; the corpora are committed, so running it again
changes nothing unless this script changed.
"""
from __future__ import annotations

import io
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from PIL import Image

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"


def put(target: str, name: str, data: bytes | str) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


# ---- tiny Gemma 3 GGUF ------------------------------------------------------

VOCAB = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
         "\u2581", "a", "b", "ab", "\u2581a", "<0x0A>"]
TYPES = [3, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, 6]


def tiny_gguf(path: Path, qtype: str) -> None:
    e, ff, nh, nkv, hd, nl = 8, 16, 2, 1, 4, 1
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny")
    w.add_context_length(64)
    w.add_embedding_length(e)
    w.add_block_count(nl)
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(16)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("llama")
    w.add_token_list(VOCAB)
    w.add_token_scores([float(-i) for i in range(len(VOCAB))])
    w.add_token_types(TYPES)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_chat_template("{{ bos_token }}<start_of_turn>")
    rng = np.random.default_rng(0)

    def add(name: str, shape: tuple[int, ...], matrix: bool) -> None:
        a = rng.standard_normal(shape).astype(np.float32)
        if matrix and qtype == "f16":
            a = a.astype(np.float16)
        w.add_tensor(name, a)

    add("token_embd.weight", (len(VOCAB), e), True)
    add("output_norm.weight", (e,), False)
    for l in range(nl):
        p = f"blk.{l}."
        add(p + "attn_q.weight", (nh * hd, e), True)
        add(p + "attn_k.weight", (nkv * hd, e), True)
        add(p + "attn_v.weight", (nkv * hd, e), True)
        add(p + "attn_output.weight", (e, nh * hd), True)
        add(p + "ffn_gate.weight", (ff, e), True)
        add(p + "ffn_up.weight", (ff, e), True)
        add(p + "ffn_down.weight", (e, ff), True)
        for n, k in (("attn_norm", e), ("post_attention_norm", e), ("ffn_norm", e),
                     ("post_ffw_norm", e), ("attn_q_norm", hd), ("attn_k_norm", hd)):
            add(p + n + ".weight", (k,), False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def metadata_gguf(path: Path) -> None:
    """Every metadata type, one tensor, no model."""
    w = gguf.GGUFWriter(str(path), "test")
    w.add_uint8("k.u8", 200)
    w.add_int8("k.i8", -100)
    w.add_uint16("k.u16", 60000)
    w.add_int16("k.i16", -30000)
    w.add_uint32("k.u32", 4000000000)
    w.add_int32("k.i32", -2000000000)
    w.add_uint64("k.u64", 2**63)
    w.add_int64("k.i64", -(2**62))
    w.add_float32("k.f32", 1.5)
    w.add_float64("k.f64", -2.25)
    w.add_bool("k.bool", True)
    w.add_string("k.str", "hello")
    w.add_array("k.arr_i32", [1, -2, 3])
    w.add_array("k.arr_str", ["x", "yz"])
    w.add_array("k.arr_f32", [0.5, 1.5])
    w.add_tensor("t", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- safetensors --------------------------------------------------------------

def safetensors(tensors: dict[str, np.ndarray], meta: dict | None = None) -> bytes:
    header: dict = {}
    if meta:
        header["__metadata__"] = meta
    data = b""
    codes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    for name, a in tensors.items():
        raw = a.tobytes()
        header[name] = {"dtype": codes[a.dtype], "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


HF_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 1,
    "vocab_size": 12, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 16,
    "layer_types": ["full_attention"], "query_pre_attn_scalar": 4,
    "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
}


def hf_seed() -> bytes:
    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    t = {"model.embed_tokens.weight": f(12, 8), "model.norm.weight": f(8)}
    p = "model.layers.0."
    for n, s in (("self_attn.q_proj", (8, 8)), ("self_attn.k_proj", (4, 8)),
                 ("self_attn.v_proj", (4, 8)), ("self_attn.o_proj", (8, 8)),
                 ("mlp.gate_proj", (16, 8)), ("mlp.up_proj", (16, 8)),
                 ("mlp.down_proj", (8, 16))):
        t[p + n + ".weight"] = f(*s)
    for n, k in (("input_layernorm", 8), ("post_attention_layernorm", 8),
                 ("pre_feedforward_layernorm", 8), ("post_feedforward_layernorm", 8),
                 ("self_attn.q_norm", 4), ("self_attn.k_norm", 4)):
        t[p + n + ".weight"] = f(k)
    return json.dumps(HF_CONFIG, indent=1).encode() + b"\0" + safetensors(t, {"format": "pt"})


# ---- tokenizer.json -------------------------------------------------------------

def tokenizer_json(merges: list[str]) -> str:
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6,
             "ab": 7, "bc": 8, "\u2581": 9, "<0x0A>": 10, "abc": 11}
    return json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": 2, "content": "<bos>", "special": True},
                         {"id": 0, "content": "<pad>", "special": True}],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A"}}]},
        "decoder": None,
        "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>",
                  "vocab": vocab, "merges": merges},
    }, ensure_ascii=False)


# ---- images ------------------------------------------------------------------------

def image(fmt: str, mode: str, size: tuple[int, int]) -> bytes:
    img = Image.new(mode, size)
    px = img.load()
    for y in range(size[1]):
        for x in range(size[0]):
            v = (x * 37 + y * 11) % 256
            px[x, y] = {"RGB": (v, 255 - v, x * 9 % 256), "L": v, "RGBA": (v, v, 0, 128),
                        "P": v % 16, "LA": (v, 200)}[mode]
    b = io.BytesIO()
    img.save(b, fmt, **({"quality": 75} if fmt == "JPEG" else {}))
    return b.getvalue()


def main() -> int:
    # json
    put("json", "object", '{"a": [1, -2.5e3, true, false, null], "b": {"c": "d\\u00e9\\n"}}')
    put("json", "nested", '[[[{"x": [""]}]], 12345678901234567890, -0, 1E+2]')
    put("json", "escapes", '"\\ud83d\\ude00 \\t \\" \\\\ \\/"')
    put("json", "duplicate", '{"k": 1, "k": 2}')
    # gguf
    (CORPUS / "gguf").mkdir(parents=True, exist_ok=True)
    tiny_gguf(CORPUS / "gguf" / "tiny_f32.gguf", "f32")
    tiny_gguf(CORPUS / "gguf" / "tiny_f16.gguf", "f16")
    metadata_gguf(CORPUS / "gguf" / "metadata.gguf")
    # hf
    put("hf", "tiny", hf_seed())
    # tokenizer.json
    put("tokenizer_json", "bpe", tokenizer_json(["a b", "b c", "ab c"]))
    put("tokenizer_json", "bpe_pairs", tokenizer_json([["a", "b"], ["b", "c"]]))
    put("tokenizer_json", "minimal",
        '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []}}')
    # tokenize: a flags byte, then text (or ids)
    put("tokenize", "text", b"\x03<start_of_turn>user\nHello, world!  \t\xc3\xa9\xe2\x82\xac<end_of_turn>")
    put("tokenize", "bytes", b"\x00\xff\xfe abc \xf0\x9f\x98\x80\n\n\n    x")
    put("tokenize", "ids", b"\x04" + struct.pack("<6I", 2, 105, 2364, 107, 106, 1))
    # chat: a flags byte, then role\0content\0...
    put("chat", "turns", b"\x01system\0Be brief.\0user\0  Hi \0assistant\0Hello\0user\0Bye")
    put("chat", "model", b"\x00user\0x\0model\0y")
    # request: a route byte, then the body
    put("request", "chat", b"\x00" + json.dumps({
        "model": "m", "messages": [{"role": "system", "content": "s"},
                                   {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1,
        "seed": 3, "stop": ["\n", "END"], "n": 2, "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "logit_bias": {"17": -100}, "logprobs": True,
        "top_logprobs": 3, "stream": True, "stream_options": {"include_usage": True}}).encode())
    put("request", "tools", b"\x00" + json.dumps({
        "messages": [{"role": "user", "content": "weather?"},
                     {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "get", "arguments": "{\"city\":\"Paris\"}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "18 C"}],
        "tools": [{"type": "function", "function": {"name": "get", "description": "d",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}}}],
        "tool_choice": "required",
        "x": "```tool_call\n{\"name\": \"get\", \"arguments\": {\"city\": \"a\"}}\n```"}).encode())
    put("request", "schema", b"\x00" + json.dumps({
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}}}}}).encode())
    put("request", "completion", b"\x01" + json.dumps({
        "prompt": [2, 100, 200], "max_tokens": 4, "logprobs": 2, "grammar": "root ::= \"a\"+",
        "speculative": False}).encode())
    put("request", "completion_text", b"\x01" + json.dumps({
        "prompt": ["a", "b"], "response_format": {"type": "json_object"}}).encode())
    put("request", "tokenize", b"\x02" + json.dumps({
        "content": "hello <bos>", "add_special": True, "parse_special": False,
        "with_pieces": True}).encode())
    put("request", "detokenize", b"\x03" + json.dumps({"tokens": [2, 3, 262143]}).encode())
    # image
    put("image", "rgb.png", image("PNG", "RGB", (5, 3)))
    put("image", "grey_alpha.png", image("PNG", "LA", (4, 4)))
    put("image", "palette.png", image("PNG", "P", (6, 2)))
    put("image", "rgb.jpg", image("JPEG", "RGB", (9, 7)))
    put("image", "grey.jpg", image("JPEG", "L", (8, 8)))
    # grammar: a flags byte, the grammar, NUL, bytes for the matcher
    put("grammar", "gbnf", b"\x00root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"(\" root \")\" "
        b"| num\nnum ::= [0-9]{1,3} \"x\"?\n\0abc,(de),12x")
    # an ambiguous grammar whose live parses double with each "(": the
    # matcher must give up at IG_GRAMMAR_MAX_STACKS, not run for minutes
    put("grammar", "gbnf_ambiguous", b"\x00root ::= item (\",\" item)*\nitem ::= [a&-z]+ | "
        b"\"(\" root root | num\nnum ::= [0-9]{1,3} \"x\"?\n\0" + b"(" * 40)
    put("grammar", "gbnf_classes", b"\x00root ::= [^\\n\"] [\\x41-\\u00ff]* ( \"\\t\" | "
        b"\"\\\\\" )+\n\0a\xc3\xa9\t\\")
    put("grammar", "schema", b"\x03" + json.dumps({
        "type": "object", "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["x", "y", 3, None]}, "maxItems": 3},
            "when": {"type": "string", "format": "date-time"},
            "n": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "child": {"$ref": "#/$defs/c"}},
        "required": ["name"], "$defs": {"c": {"type": "boolean"}}}).encode()
        + b"\0{\"name\":\"ab\",\"age\":42}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
