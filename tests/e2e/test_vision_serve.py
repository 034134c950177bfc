"""The vision path end to end through the CLI and the server, on the tiny
Gemma 3 VLM of tests/fixtures/vision/tiny-vlm (given a small synthetic
tokenizer): `ignis logits --image` against the transformers reference, and
an image_url chat request whose prompt holds the image."""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
VLM = REPO / "tests" / "fixtures" / "vision" / "tiny-vlm"


def _tokenizer():
    """512 pieces: specials, the 256 bytes, letters; the image tokens at the
    fixture's ids (500, 501, 502)."""
    special = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<start_of_turn>", 5: "<end_of_turn>",
               500: "<start_of_image>", 501: "<end_of_image>", 502: "<image_soft_token>"}
    vocab, nid = {}, 0
    pieces = []
    for i in range(512):
        if i in special:
            pieces.append(special[i])
        elif 6 <= i < 6 + 256:
            pieces.append("<0x%02X>" % (i - 6))
        else:
            pieces.append("<unused%d>" % i)
    vocab = {p: i for i, p in enumerate(pieces)}
    added = [{"id": i, "content": p, "special": True, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False} for i, p in special.items()]
    return {"version": "1.0", "added_tokens": added,
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "vocab": vocab, "merges": [], "byte_fallback": True, "unk_token": "<unk>"}}


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("vlm")
    for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
        shutil.copy(VLM / f, d / f)
    (d / "tokenizer.json").write_text(json.dumps(_tokenizer()))
    return d


def _ignis(ignis_build):
    return str(ignis_build / "ignis")


def test_logits_with_image_matches_reference(ignis_build, tmp_path):
    ref = json.loads((VLM / "reference.json").read_text())
    case = next(c for c in ref["cases"] if c["name"] == "one-exact")
    out = tmp_path / "l.f32"
    args = [_ignis(ignis_build), "logits", str(VLM), "--all", "--out", str(out), "-t", "2",
            "--tokens", ",".join(map(str, case["tokens"]))]
    for im in case["images"]:
        args += ["--image", str(VLM / im)]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    got = np.fromfile(out, dtype=np.float32).reshape(len(case["tokens"]), -1)
    want = np.array(case["logits"], dtype=np.float32)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel < 1e-4, rel
    # a mismatch between images and placeholder runs is an error
    r = subprocess.run(args[:-2], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "places for 1" in r.stderr


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("batch", [256, 3])
def test_serve_image_url(ignis_build, vlm_dir, batch):
    # --batch 3: an image (4 tokens) is larger than a step's budget and is
    # taken whole
    port = _free_port()
    p = subprocess.Popen([_ignis(ignis_build), "serve", str(vlm_dir), "--port", str(port), "-t", "1",
                          "--batch", str(batch), "--parallel", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        png = base64.b64encode((VLM / "exact.png").read_bytes()).decode()
        msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}},
                                           {"type": "text", "text": "hi"}]}
        st, r = _post(port, {"messages": [msg], "max_tokens": 2, "temperature": 0})
        assert st == 200, r
        text_only = {"role": "user", "content": "hi"}
        st2, r2 = _post(port, {"messages": [text_only], "max_tokens": 2, "temperature": 0})
        assert st2 == 200, r2
        # the image's tokens count as prompt tokens: <start_of_image>, 4 placeholders, <end_of_image>,
        # and "\n\n" (two bytes) on either side
        assert r["usage"]["prompt_tokens"] - r2["usage"]["prompt_tokens"] == 6 + 4
        # twice the same: the same answer (no stale prefix from another image)
        st3, r3 = _post(port, {"messages": [msg], "max_tokens": 2, "temperature": 0})
        assert st3 == 200 and r3["choices"][0]["message"] == r["choices"][0]["message"]
        bad = {"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()}}]}
        st4, r4 = _post(port, {"messages": [bad], "max_tokens": 2})
        assert st4 == 400 and "Image 1" in r4["error"]["message"]
        st5, r5 = _post(port, {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}], "max_tokens": 2})
        assert st5 == 400 and "data: URL" in r5["error"]["message"]
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_run_with_image_matches_logits(ignis_build, vlm_dir, tmp_path):
    """ignis run --image prefills the chat prompt with the image: its first
    greedy token is the argmax of ignis logits --image over the same ids,
    and those logits depend on the image."""
    ig = _ignis(ignis_build)
    r = subprocess.run([ig, "run", str(vlm_dir), "--chat", "--image", str(VLM / "exact.png"), "-p", "hi", "-n", "1",
                        "--temp", "0", "--print-ids", "-t", "2"], capture_output=True, text=True, timeout=120, check=True)
    first = int(r.stdout.strip().split(",")[0])
    t = subprocess.run([ig, "tokenize", str(vlm_dir),
                        "<bos><start_of_turn>user\n<start_of_image>hi<end_of_turn>\n<start_of_turn>model\n"],
                       capture_output=True, text=True, timeout=60, check=True)
    ids = json.loads(t.stdout)
    nl = json.loads(subprocess.run([ig, "tokenize", str(vlm_dir), "\n\n"], capture_output=True, text=True,
                                   timeout=60, check=True).stdout)
    i = ids.index(500)
    ids = ids[:i] + nl + [500] + [502] * 4 + [501] + nl + ids[i + 1:]
    rows = {}
    for name in ("exact.png", "resize.png"):
        out = tmp_path / (name + ".f32")
        subprocess.run([ig, "logits", str(vlm_dir), "--image", str(VLM / name), "--out", str(out), "-t", "2",
                        "--tokens", ",".join(map(str, ids))], check=True, capture_output=True, timeout=120)
        rows[name] = np.fromfile(out, dtype=np.float32)
    assert int(np.argmax(rows["exact.png"])) == first
    assert np.abs(rows["exact.png"] - rows["resize.png"]).max() > 1e-3
