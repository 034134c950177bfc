"""Hardware monitoring of `ignis serve`: /metrics' process, device, KV-cache,
rate and step-time series on the CPU backend and on Vulkan (lavapipe here;
skipped without a usable device), and /health's degraded state when the
slots and the queue are full."""
from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from test_webui import Serve, binary_of, http_req, wait_for

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(port: int) -> dict[str, float]:
    """/metrics as {name{labels}: value}; checks the text format on the way."""
    st, h, b = http_req(port, "GET", "/metrics")
    assert st == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
    out, typed = {}, set()
    for line in b.decode().splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, line
        base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
        assert m.group(1) in typed or base in typed, f"{m.group(1)} has no # TYPE"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def complete(port: int, n: int) -> dict:
    st, _, b = http_req(port, "POST", "/v1/completions",
                        {"prompt": "The capital of France is", "max_tokens": n, "temperature": 0}, timeout=300)
    assert st == 200, b
    return json.loads(b)


def check_common(m: dict[str, float], device: str, n_steps: int):
    assert 10e6 < m["process_resident_memory_bytes"] < 64e9
    assert m["ignis_process_peak_resident_memory_bytes"] >= m["process_resident_memory_bytes"]
    assert m["process_cpu_seconds_total"] > 0
    assert 3 <= m["process_open_fds"] < m.get("process_max_fds", 1e9)
    # the 270M Q4_K_M: 235 MiB of weights; --parallel 2 --ctx 256 of f16 KV
    assert 200e6 < m["ignis_model_weight_bytes"] < 300e6
    assert 1e6 < m["ignis_kv_cache_bytes"] < 100e6
    used = m[f'ignis_device_memory_used_bytes{{device="{device}"}}']
    budget = m[f'ignis_device_memory_budget_bytes{{device="{device}"}}']
    alloc = m[f'ignis_device_memory_allocated_bytes{{device="{device}"}}']
    assert budget > used > 0
    assert alloc >= m["ignis_model_weight_bytes"] + m["ignis_kv_cache_bytes"]
    assert m["ignis_device_lost"] == 0
    # every engine step is in one of the two histograms
    steps = m['ignis_engine_step_seconds_count{phase="decode"}'] + m['ignis_engine_step_seconds_count{phase="prefill"}']
    assert steps == m["ignis_decode_calls_total"] >= n_steps
    assert m['ignis_engine_step_seconds_count{phase="prefill"}'] >= 1
    assert m['ignis_engine_step_seconds_bucket{phase="decode",le="+Inf"}'] == \
        m['ignis_engine_step_seconds_count{phase="decode"}']
    # the rates cover the request (made just after the server started)
    assert m["ignis_rate_window_seconds"] > 0
    assert m["ignis_decode_tokens_per_second"] > 0 and m["ignis_prefill_tokens_per_second"] > 0
    assert m["ignis_kv_cache_sequences"] == 1
    return used, budget, alloc


@pytest.mark.asan
def test_metrics_cpu(ignis_build: Path):
    s = Serve(binary_of(ignis_build), ["--parallel", "2", "--ctx", "256", "-t", "2", "--quiet"]).wait()
    try:
        r = complete(s.port, 8)
        assert r["usage"]["completion_tokens"] == 8
        m = scrape(s.port)
        used, budget, alloc = check_common(m, "cpu", 8)
        # on the CPU the "device" is the host: weights + KV cache, of the RAM
        assert used == alloc == m["ignis_model_weight_bytes"] + m["ignis_kv_cache_bytes"]
        assert not any(k.startswith("ignis_device_busy") for k in m)
        # the rates: generated tokens over the window they cover
        assert m["ignis_decode_tokens_per_second"] == pytest.approx(
            8 / m["ignis_rate_window_seconds"], rel=0.05)
        st, _, b = http_req(s.port, "GET", "/health")
        assert st == 200 and json.loads(b) == {"status": "ok"}
    finally:
        assert s.stop() == 0


def vulkan_device_or_skip(ignis_build: Path):
    r = subprocess.run([str(binary_of(ignis_build)), "devices"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or "usable: yes" not in r.stdout:
        pytest.skip(f"no usable Vulkan device ({(r.stdout + r.stderr).strip()[:200]})")


def test_metrics_vulkan(ignis_build: Path):
    vulkan_device_or_skip(ignis_build)
    s = Serve(binary_of(ignis_build), ["--backend", "vulkan", "--parallel", "2", "--ctx", "256", "-t", "2",
                                       "--quiet"]).wait(timeout=300)
    try:
        m0 = scrape(s.port)
        assert m0['ignis_device_busy_seconds_total{device="vulkan"}'] == 0
        complete(s.port, 3)
        m = scrape(s.port)
        used, budget, alloc = check_common(m, "vulkan", 3)
        # the weights, the cache and the activations are device memory
        assert alloc > m["ignis_model_weight_bytes"] + m["ignis_kv_cache_bytes"]
        busy = m['ignis_device_busy_seconds_total{device="vulkan"}']
        ratio = m['ignis_device_busy_ratio{device="vulkan"}']
        assert busy > 0 and 0 < ratio <= 1
        # the GPU time fits in the time the steps took on the host
        assert busy <= m['ignis_engine_step_seconds_sum{phase="decode"}'] + \
            m['ignis_engine_step_seconds_sum{phase="prefill"}'] + 0.01
        st, _, b = http_req(s.port, "GET", "/v1/status")
        j = json.loads(b)
        assert j["device_memory"]["source"] in ("memory_budget", "heaps")
        assert j["device_memory"]["budget_bytes"] > j["device_memory"]["used_bytes"] > 0
        assert j["device_busy"]["seconds"] == pytest.approx(busy, rel=1e-6)  # no step since
    finally:
        assert s.stop() == 0


@pytest.mark.asan
def test_health_degraded_when_queue_full(ignis_build: Path):
    # one slot, no queue: while a request runs, the next would get 503
    s = Serve(binary_of(ignis_build), ["--parallel", "1", "--max-queue", "0", "--ctx", "512", "-t", "1",
                                       "--quiet"]).wait()
    try:
        st, _, b = http_req(s.port, "GET", "/health")
        assert st == 200 and json.loads(b) == {"status": "ok"}
        # a long streamed request, on a socket of our own to hang up later
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        try:
            wait_for(lambda: scrape(s.port)["ignis_requests_running"] == 1, 60, "the request to run")
            st, _, b = http_req(s.port, "GET", "/health")
            assert st == 200 and json.loads(b) == {"status": "degraded", "reason": "queue_full"}
            st, _, b = http_req(s.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
            assert st == 503  # what degraded announces
        finally:
            sock.close()  # the server cancels the sequence
        wait_for(lambda: json.loads(http_req(s.port, "GET", "/health")[2]) == {"status": "ok"}, 60,
                 "the slot to be free again")
    finally:
        assert s.stop() == 0
