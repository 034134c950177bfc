"""Connection abuse against `ignis serve`: idle sockets, headers and bodies
trickled a byte at a time (slowloris), a streaming client that never reads,
and more connections than the limits allow. Meanwhile a normal request must
still be answered promptly, idle connections must be closed after the idle
timeout (`--timeout-s`), and a generation that runs longer than that
timeout must not be cut by it."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from test_server import Server, open_stream, request, serve_checked, sse_lines

# a normal request must be answered within this many seconds while the
# abusive connections are open (generous: the machine may be shared)
PROMPT_S = 20


def start(ignis_build: Path, *args: str):
    binary = ignis_build / "ignis"
    if not binary.is_file():
        pytest.fail(f"{binary} not found: build the ignis_cli target first")
    return serve_checked(Server(binary, ["--parallel", "2", "--ctx", "256", "-t", "2", *args]))


@contextlib.contextmanager
def running(ignis_build: Path, *args: str):
    yield from start(ignis_build, *args)


def connect(srv: Server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def closed_by_server(s: socket.socket, within: float) -> bool:
    """Whether the server closes s (EOF or reset) within `within` seconds."""
    s.settimeout(within)
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def normal_request_is_prompt(srv: Server) -> None:
    t0 = time.time()
    r = request(srv.base, "GET", "/health", timeout=PROMPT_S)
    assert r.status_code == 200
    r = request(srv.base, "POST", "/v1/completions",
                {"prompt": "Hello", "max_tokens": 2, "temperature": 0}, timeout=PROMPT_S)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2
    assert time.time() - t0 < PROMPT_S


@pytest.fixture(scope="module")
def short_timeout(ignis_build: Path):
    yield from start(ignis_build, "--timeout-s", "2")


def test_idle_sockets_are_closed_after_the_timeout(short_timeout: Server):
    idle = [connect(short_timeout) for _ in range(32)]
    try:
        normal_request_is_prompt(short_timeout)
        # 2 s of idleness (MHD counts whole seconds): all closed well within 10 s
        t0 = time.time()
        assert all(closed_by_server(s, 10) for s in idle)
        assert time.time() - t0 < 10
    finally:
        for s in idle:
            s.close()


def test_keep_alive_connection_idle_after_a_request_is_closed(short_timeout: Server):
    s = connect(short_timeout)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
        assert data.startswith(b"HTTP/1.1 200")
        assert closed_by_server(s, 10)
    finally:
        s.close()


def trickle(socks: list[socket.socket], payload: bytes, stop: threading.Event, gap: float):
    """Sends payload one byte at a time on every socket, gap seconds apart."""
    for i in range(len(payload)):
        if stop.wait(gap):
            return
        for s in socks:
            try:
                s.sendall(payload[i:i + 1])
            except OSError:
                pass


@pytest.fixture(scope="module")
def slow_clients(ignis_build: Path):
    # an idle timeout longer than the test: the trickling clients stay open
    yield from start(ignis_build, "--timeout-s", "60")


def prompt_while_trickling(srv: Server, first: bytes, rest: bytes) -> None:
    """24 clients send `first` at once, then `rest` a byte at a time (every
    0.2 s); meanwhile a normal request must be answered promptly."""
    socks = [connect(srv) for _ in range(24)]
    for s in socks:
        s.sendall(first)
    stop = threading.Event()
    t = threading.Thread(target=trickle, args=(socks, rest, stop, 0.2))
    t.start()
    try:
        time.sleep(1)
        normal_request_is_prompt(srv)
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


def test_slow_headers_do_not_stall_other_clients(slow_clients: Server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 200 + b"\r\n"
    prompt_while_trickling(slow_clients, b"", head)


def test_slow_bodies_do_not_stall_other_clients(slow_clients: Server):
    body = json.dumps({"prompt": "x" * 300, "max_tokens": 1}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    prompt_while_trickling(slow_clients, head, body)


def test_a_stalled_body_is_closed_after_the_timeout(short_timeout: Server):
    s = connect(short_timeout)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")
        assert closed_by_server(s, 10)
    finally:
        s.close()


def test_a_client_that_never_reads_its_stream_does_not_stall_others(slow_clients: Server):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", slow_clients.port))
    body = json.dumps({"prompt": "Count: one, two,", "max_tokens": 200, "stream": True,
                       "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    try:
        time.sleep(1)  # the stream is running (and its client reads nothing)
        normal_request_is_prompt(slow_clients)
    finally:
        s.close()


def fill(srv: Server, n: int) -> list[socket.socket]:
    """n idle connections, all accepted (none closed by the server)."""
    time.sleep(1)  # the readiness checks' connections are gone
    socks = [connect(srv) for _ in range(n)]
    time.sleep(0.5)
    assert not any(closed_by_server(s, 0.1) for s in socks)
    return socks


def test_connection_limit(ignis_build: Path):
    with running(ignis_build, "--max-connections", "4", "--timeout-s", "2") as srv:
        idle = fill(srv, 4)
        try:
            with pytest.raises((ConnectionError, OSError)):
                request(srv.base, "GET", "/health", timeout=10)
        finally:
            for s in idle:
                s.close()
        time.sleep(0.5)  # their threads end
        assert request(srv.base, "GET", "/health", timeout=10).status_code == 200


def test_per_ip_connection_limit(ignis_build: Path):
    with running(ignis_build, "--max-connections-per-ip", "2") as srv:
        idle = fill(srv, 2)
        try:
            with pytest.raises((ConnectionError, OSError)):
                request(srv.base, "GET", "/health", timeout=10)
        finally:
            for s in idle:
                s.close()
        time.sleep(0.5)
        assert request(srv.base, "GET", "/health", timeout=10).status_code == 200


def test_generation_longer_than_the_idle_timeout_is_not_cut(ignis_build: Path):
    # each generation waits 3.5 s before it is submitted: longer than the
    # 1 s idle timeout, with no byte moving meanwhile
    with running(ignis_build, "--timeout-s", "1", "--debug-submit-delay-ms", "3500") as srv:
        r = request(srv.base, "POST", "/v1/completions",
                    {"prompt": "Hello", "max_tokens": 3, "temperature": 0}, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 3

        conn, resp = open_stream(srv.base, "/v1/completions",
                                 {"prompt": "Hello", "max_tokens": 3, "temperature": 0,
                                  "stream": True})
        lines = list(sse_lines(resp))
        conn.close()
        assert lines[-1] == "data: [DONE]", lines
        assert len([ln for ln in lines if ln.startswith("data: {")]) >= 3


def test_stream_waiting_for_a_slot_is_kept_alive(ignis_build: Path):
    # one slot: the second stream waits for the first to finish, longer than
    # the 1 s idle timeout; SSE comments keep it open
    with running(ignis_build, "--timeout-s", "1", "--parallel", "1") as srv:
        results: dict[str, list[str]] = {}

        def run(name: str, max_tokens: int) -> None:
            conn, resp = open_stream(srv.base, "/v1/completions",
                                     {"prompt": "One, two, three,", "max_tokens": max_tokens,
                                      "temperature": 0, "stream": True})
            results[name] = list(sse_lines(resp, comments=True))
            conn.close()

        first = threading.Thread(target=run, args=("first", 60))
        first.start()
        time.sleep(0.3)
        t0 = time.time()
        run("second", 4)
        waited = time.time() - t0
        first.join()
        assert results["first"] and results["first"][-1] == "data: [DONE]"
        assert results["second"] and results["second"][-1] == "data: [DONE]", results["second"]
        if waited > 3:  # it did wait past the timeout: the comments kept it open
            assert any(ln.startswith(": keep-alive") for ln in results["second"])
