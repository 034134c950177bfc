"""The server when the GPU fails (docs/server.md, "When the device fails"):
a test-only option makes one engine step's submission report
VK_ERROR_DEVICE_LOST or VK_ERROR_OUT_OF_DEVICE_MEMORY, as the driver would.
The requests of that step get 503. After a loss /health answers 503
device_lost, /metrics says ignis_device_lost 1, every new generation gets
503 and the rest of the API keeps answering; after an out-of-memory step
the server goes on serving. Runs on lavapipe (skipped without a usable
Vulkan device)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# two servers loading the real model on lavapipe: about a minute
pytestmark = pytest.mark.slow

REAL = Path(os.environ.get("IGNIS_MODEL") or Path.home() / ".cache/ignis/gemma-3-270m-q4_k_m.gguf")


def exe(ignis_build: Path) -> Path:
    p = ignis_build / "ignis"
    if not p.is_file():
        pytest.fail(f"{p} not found: build the `ignis_cli` target first")
    return p


@pytest.fixture(scope="module", autouse=True)
def vulkan_device(ignis_build: Path):
    p = subprocess.run([str(exe(ignis_build)), "devices"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or "usable: yes" not in p.stdout:
        pytest.skip("no usable Vulkan device")
    if not REAL.is_file():
        pytest.skip("real model not present")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base: str, path: str, body: dict | None = None, timeout: float = 300) -> tuple[int, dict | str, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, headers = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, status, headers = e.read(), e.code, dict(e.headers)
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw.decode(errors="replace"), headers


class Server:
    def __init__(self, ignis_build: Path, *extra: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.p = subprocess.Popen([str(exe(ignis_build)), "serve", str(REAL), "--port", str(self.port),
                                   "-np", "2", "--ctx", "128", "--backend", "vulkan", "--quiet", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        while True:
            try:
                if call(self.base, "/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert self.p.poll() is None, self.p.stdout.read()
            assert time.time() < deadline, "server not ready"
            time.sleep(0.3)

    def stop(self) -> tuple[int, str]:
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        return rc, self.p.stdout.read()


def metric(base: str, name: str) -> float:
    _, text, _ = call(base, "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}


def test_device_lost(ignis_build: Path):
    # step 1 is the first request's prompt; step 3 its second sampled token
    s = Server(ignis_build, "--debug-device-lost-step", "3")
    try:
        assert metric(s.base, "ignis_device_lost") == 0
        status, body, headers = call(s.base, "/v1/completions", COMPLETION)
        assert status == 503, body
        assert body["error"]["code"] == "device_lost"
        assert "VK_ERROR_DEVICE_LOST" in body["error"]["message"]
        assert headers.get("Retry-After") == "1"
        # the defined state: degraded health, metrics, 503 for generation
        status, body, _ = call(s.base, "/health")
        assert status == 503 and body["error"]["code"] == "device_lost"
        assert metric(s.base, "ignis_device_lost") == 1
        for path, req in (("/v1/completions", COMPLETION),
                          ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                    "max_tokens": 2, "stream": True})):
            status, body, _ = call(s.base, path, req)
            assert status == 503 and body["error"]["code"] == "device_lost", body
        assert call(s.base, "/v1/models")[0] == 200
        status, body, _ = call(s.base, "/tokenize", {"content": "Hello"})
        assert status == 200 and body["tokens"]
        assert metric(s.base, "ignis_requests_running") == 0
    finally:
        rc, log = s.stop()
    assert rc == 0, log
    assert "VK_ERROR_DEVICE_LOST" in log


def test_device_out_of_memory(ignis_build: Path):
    s = Server(ignis_build, "--debug-device-oom-step", "2")
    try:
        status, body, headers = call(s.base, "/v1/completions", COMPLETION)
        assert status == 503, body
        assert "VK_ERROR_OUT_OF_DEVICE_MEMORY" in body["error"]["message"]
        assert headers.get("Retry-After") == "1"
        # not lost: the next request is answered in full
        assert call(s.base, "/health")[0] == 200
        assert metric(s.base, "ignis_device_lost") == 0
        status, body, _ = call(s.base, "/v1/completions", COMPLETION)
        assert status == 200, body
        assert body["choices"][0]["finish_reason"] in ("stop", "length")
        assert body["usage"]["completion_tokens"] >= 1
    finally:
        rc, log = s.stop()
    assert rc == 0, log
