"""End-to-end tests of `ignis serve` with the official openai client and raw
HTTP, against the real Gemma 3 270M model.

The server under test is IGNIS_BUILD/ignis (default: build). Generation is
slow on small machines, so every request asks for a handful of tokens.
Tests marked `asan` (bad input, no long generation) also run against the
sanitizer build (IGNIS_BUILD=build-asan IGNIS_ASAN=1); the fixture then
checks that the server exits cleanly without sanitizer reports."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import http.client
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "test-key-7f3a9c"
ASAN = os.environ.get("IGNIS_ASAN") == "1"
CTX = 512
MAX_BODY = 65536


def model_path() -> Path:
    env = os.environ.get("IGNIS_MODEL")
    p = Path(env) if env else Path.home() / ".cache/ignis/gemma-3-270m-q4_k_m.gguf"
    if not p.is_file():
        if os.environ.get("IGNIS_ALLOW_MISSING_MODEL") == "1":
            pytest.skip(f"model {p} missing")
        pytest.fail(f"model {p} missing: run `make model`")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `ignis serve` process on a free loopback port."""

    def __init__(self, binary: Path, args: list[str], env: dict[str, str] | None = None,
                 model: Path | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_file = tempfile.NamedTemporaryFile(prefix="ignis-serve-", suffix=".log",
                                                    delete=False)
        e = dict(os.environ)
        if ASAN:
            e["ASAN_OPTIONS"] = "detect_leaks=1"
            e["UBSAN_OPTIONS"] = "print_stacktrace=1"
        e.update(env or {})
        self.proc = subprocess.Popen(
            [str(binary), "serve", str(model or model_path()), "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL, stderr=self.log_file, env=e)

    def log(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log()}")
            try:
                if request(self.base, "GET", "/health", timeout=5).status_code == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"server did not stop within {timeout}s:\n{self.log()}")
        return self.proc.returncode

    def close(self) -> None:
        try:
            os.unlink(self.log_file.name)
        except OSError:
            pass


class Resp:
    """A finished raw HTTP exchange (stdlib http.client: no extra deps)."""

    def __init__(self, status: int, headers, body: bytes):
        self.status_code = status
        self.headers = {k.lower(): v for k, v in headers}
        self.content = body
        self.text = body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


def request(base: str, method: str, path: str, body=None, headers: dict | None = None,
            timeout: float = 120) -> Resp:
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        chunked = body is not None and not isinstance(body, (bytes, str))
        conn.request(method, path, body=body, headers=h, encode_chunked=chunked)
        r = conn.getresponse()
        return Resp(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def open_stream(base: str, path: str, body: dict, headers: dict | None = None):
    """POSTs body and returns (connection, response) for reading SSE lines."""
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def start_counting_stream(base: str, max_tokens: int) -> tuple[threading.Thread, list[str]]:
    """Starts a streamed completion in a thread that collects its SSE lines;
    returns once the first line has arrived."""
    lines: list[str] = []
    first = threading.Event()

    def run():
        body = {"prompt": "One, two, three,", "max_tokens": max_tokens, "temperature": 0,
                "stream": True}
        conn, resp = open_stream(base, "/v1/completions", body)
        for line in sse_lines(resp):
            lines.append(line)
            first.set()
        conn.close()

    t = threading.Thread(target=run)
    t.start()
    assert first.wait(120)
    return t, lines


def sse_lines(resp, comments: bool = False):
    """Non-empty lines of an SSE response, as they arrive; comment lines (":
    keep-alive", sent while a stream waits) only when asked for, since SSE
    clients ignore them."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\n")
        if line and (comments or not line.startswith(":")):
            yield line


def serve_checked(srv: "Server"):
    """Yields the server once ready; on teardown stops it and requires a clean
    exit: status 0 and no sanitizer report in its log."""
    try:
        srv.wait_ready()
        yield srv
    finally:
        rc = srv.stop()
        log = srv.log()
        srv.close()
        assert rc == 0, f"server exit status {rc}:\n{log[-4000:]}"
        assert "Sanitizer" not in log and "runtime error" not in log, log[-8000:]


@pytest.fixture(scope="module")
def server(ignis_build: Path):
    binary = ignis_build / "ignis"
    if not binary.is_file():
        pytest.fail(f"{binary} not found: build the ignis_cli target first")
    args = ["--api-key", API_KEY, "--parallel", "4", "--ctx", str(CTX), "--max-body", str(MAX_BODY),
            "--max-queue", "32", "-t", "2"]
    yield from serve_checked(Server(binary, args))


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=300)


@pytest.fixture(scope="module")
def model_id(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


def metrics(server: Server) -> dict[str, float]:
    """Flat {sample name{labels}: value} from /metrics, parsed by prometheus_client."""
    r = request(server.base, "GET", "/metrics", headers=auth())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


CHAT = [{"role": "user", "content": "Write one sentence about the sea."}]


# ---------------------------------------------------------------- happy path

def test_health_models_and_auth_free_health(server: Server, client: openai.OpenAI):
    r = request(server.base, "GET", "/health")  # no key needed
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = client.models.list()
    assert len(models.data) == 1
    assert models.data[0].id == "gemma-3-270m-q4_k_m"
    assert models.data[0].owned_by == "ignis"
    one = client.models.retrieve("gemma-3-270m-q4_k_m")
    assert one.id == "gemma-3-270m-q4_k_m"


def test_chat_completion_usage_and_length(client: openai.OpenAI, model_id: str):
    r = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=4,
                                       temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content != ""
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 4
    # max_completion_tokens is honoured too (the smaller of the two wins)
    r2 = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=9,
                                        max_completion_tokens=2, temperature=0)
    assert r2.usage.completion_tokens == 2
    assert c.message.content.startswith(r2.choices[0].message.content)


def test_content_parts_equal_string_content(client: openai.OpenAI, model_id: str):
    a = client.chat.completions.create(
        model=model_id, max_tokens=3, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}])
    b = client.chat.completions.create(
        model=model_id, max_tokens=3, temperature=0,
        messages=[{"role": "user", "content": "Name a colour."}])
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    # the second request reuses the first one's prompt from the KV cache
    assert b.usage.prompt_tokens_details.cached_tokens > 0


def test_chat_stream_matches_non_stream(client: openai.OpenAI, model_id: str):
    full = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=5,
                                          temperature=0)
    chunks = list(client.chat.completions.create(
        model=model_id, messages=CHAT, max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 5
    assert usage_chunk.usage.prompt_tokens == full.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-2] is finals[0]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content


def test_raw_sse_framing(server: Server, model_id: str):
    body = {"model": model_id, "messages": CHAT, "max_tokens": 2, "temperature": 0,
            "stream": True}
    r = request(server.base, "POST", "/v1/chat/completions", body, auth(), timeout=300)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    raw = r.text
    events = raw.split("\n\n")
    assert events[-1] == ""  # every event ends with a blank line
    events = [e for e in events[:-1] if not e.startswith(":")]  # keep-alive comments
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    assert payloads[-1]["choices"][0]["delta"] == {}
    assert all("usage" not in p for p in payloads)  # no include_usage: no usage key


def test_stop_strings(client: openai.OpenAI, model_id: str):
    prompt = "The capital of France is"
    free = client.completions.create(model=model_id, prompt=prompt, max_tokens=8,
                                     temperature=0)
    text = free.choices[0].text
    words = [w for w in text.split(" ") if len(w) >= 3]
    assert words, f"need a word to stop on in {text!r}"
    stop = words[len(words) // 2]
    cut = text[: text.index(stop)]
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=8, temperature=0,
                                  stop=["@@never@@", stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == cut
    # streamed: the stop string is held back, never sent
    parts = list(client.completions.create(model=model_id, prompt=prompt, max_tokens=8,
                                           temperature=0, stop=stop, stream=True))
    streamed = "".join(p.choices[0].text for p in parts if p.choices)
    assert streamed == cut
    assert parts[-1].choices[0].finish_reason == "stop"


def test_seed_reproducible(client: openai.OpenAI, model_id: str):
    kw = dict(model=model_id, messages=CHAT, max_tokens=6, temperature=1.0, top_p=1.0,
              seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_n_choices(client: openai.OpenAI, model_id: str):
    r = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=3, n=3,
                                       temperature=1.0, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.finish_reason in ("length", "stop") for c in r.choices)
    if all(c.finish_reason == "length" for c in r.choices):
        assert r.usage.completion_tokens == 9
    assert 3 <= r.usage.completion_tokens <= 9
    # same seed, same request: same three choices
    r2 = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=3, n=3,
                                        temperature=1.0, seed=7)
    assert [c.message.content for c in r2.choices] == [c.message.content for c in r.choices]


def test_logprobs(client: openai.OpenAI, model_id: str):
    r = client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == 3
    raw = b""
    for e in lp:
        assert e.logprob <= 0.0
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # greedy: the chosen token is the most likely one
        assert e.top_logprobs[0].token == e.token
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6
        raw += bytes(e.bytes)
    assert raw.decode("utf-8") == r.choices[0].message.content


def test_logprobs_stop_at_released_text(client: openai.OpenAI, model_id: str):
    """A stop string drops the logprob entries of the tokens it swallowed:
    logprobs describe exactly the returned text (streamed or not)."""
    kw = dict(model=model_id, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
              top_logprobs=1)
    free = client.chat.completions.create(**kw)
    toks = [e.token for e in free.choices[0].logprobs.content]
    text = free.choices[0].message.content
    assert "".join(toks) == text
    k = next((i for i in range(1, len(toks))
              if toks[i].strip() and text.find(toks[i]) == len("".join(toks[:i]))), None)
    assert k is not None, f"no token to stop on in {toks!r}"
    stop = toks[k]
    r = client.chat.completions.create(stop=stop, **kw)
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.message.content == "".join(toks[:k])
    assert [e.token for e in c.logprobs.content] == toks[:k]
    assert b"".join(bytes(e.bytes) for e in c.logprobs.content).decode() == c.message.content
    # streamed: the logprobs arrive with their text, never ahead of it
    text_s, lps = "", []
    for ch in client.chat.completions.create(stop=stop, stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0]
        text_s += d.delta.content or ""
        if d.logprobs and d.logprobs.content:
            lps += [e.token for e in d.logprobs.content]
        assert "".join(lps) == text_s
    assert text_s == c.message.content and lps == toks[:k]
    # legacy completions: the same cut
    p = "The capital of France is"
    full = client.completions.create(model=model_id, prompt=p, max_tokens=8, temperature=0,
                                     logprobs=1).choices[0]
    ltoks = full.logprobs.tokens
    k = next((i for i in range(1, len(ltoks))
              if ltoks[i].strip() and full.text.find(ltoks[i]) == len("".join(ltoks[:i]))), None)
    assert k is not None, ltoks
    cut = client.completions.create(model=model_id, prompt=p, max_tokens=8, temperature=0,
                                    logprobs=1, stop=ltoks[k]).choices[0]
    assert cut.text == "".join(ltoks[:k])
    assert cut.logprobs.tokens == ltoks[:k] and len(cut.logprobs.token_logprobs) == k


def test_logit_bias_forces_token(server: Server, client: openai.OpenAI, model_id: str):
    r = request(server.base, "POST", "/tokenize", {"content": " banana"}, auth())
    tid = r.json()["tokens"][-1]
    want = request(server.base, "POST", "/detokenize", {"tokens": [tid] * 3}, auth()).json()
    kw = dict(model=model_id, prompt="Once upon a time", max_tokens=3, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    forced = client.completions.create(logit_bias={str(tid): 100}, **kw).choices[0]
    assert forced.text == want["content"] != plain
    # a -100 bias bans the greedy choice
    first = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=1,
                                      temperature=0, logprobs=1).choices[0]
    top = request(server.base, "POST", "/tokenize", {"content": first.text}, auth()).json()
    banned = top["tokens"][-1]
    other = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=1,
                                      temperature=0, logit_bias={str(banned): -100})
    assert other.choices[0].text != first.text


def test_top_k_1_is_greedy(client: openai.OpenAI, model_id: str):
    kw = dict(model=model_id, messages=CHAT, max_tokens=6)
    greedy = client.chat.completions.create(temperature=0, **kw).choices[0].message.content
    for seed in (1, 2, 3):
        r = client.chat.completions.create(temperature=1.0, top_p=1.0, seed=seed,
                                           extra_body={"top_k": 1}, **kw)
        assert r.choices[0].message.content == greedy


def test_penalties_change_repetitive_text(client: openai.OpenAI, model_id: str):
    kw = dict(model=model_id, prompt="The cat sat on the mat. The cat sat on the",
              max_tokens=16, temperature=0)
    base = client.completions.create(**kw).choices[0].text
    assert base.count("cat sat") >= 2, base  # greedy just repeats the sentence
    for field in ("presence_penalty", "frequency_penalty"):
        pen = client.completions.create(**{field: 2.0}, **kw).choices[0].text
        assert pen != base, field
        assert pen.count("cat sat") < base.count("cat sat"), (field, pen)

    def most_repeated(text):
        words = text.replace(",", " ").split()
        return max(words.count(w) for w in words)

    # a negative penalty rewards repeating what was generated
    kw["prompt"] = "Once upon a time"
    base = client.completions.create(**kw).choices[0].text
    neg = client.completions.create(presence_penalty=-2.0, **kw).choices[0].text
    assert neg != base and most_repeated(neg) > most_repeated(base), (base, neg)


def test_stream_n_choices(client: openai.OpenAI, model_id: str):
    kw = dict(model=model_id, messages=CHAT, max_tokens=4, n=3, temperature=1.0, seed=11)
    full = client.chat.completions.create(**kw)
    texts, finish, roles = {}, {}, {}
    for ch in client.chat.completions.create(stream=True, **kw):
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.delta.role:
                roles[c.index] = c.delta.role
            if c.finish_reason:
                assert c.index not in finish
                finish[c.index] = c.finish_reason
    assert sorted(texts) == [0, 1, 2] and sorted(finish) == [0, 1, 2]
    assert roles == {0: "assistant", 1: "assistant", 2: "assistant"}
    assert [texts[i] for i in range(3)] == [c.message.content for c in full.choices]
    assert [finish[i] for i in range(3)] == [c.finish_reason for c in full.choices]


def test_stream_logprobs(client: openai.OpenAI, model_id: str):
    kw = dict(model=model_id, messages=CHAT, max_tokens=5, temperature=0, logprobs=True,
              top_logprobs=2)
    full = client.chat.completions.create(**kw).choices[0]
    text, entries = "", []
    for ch in client.chat.completions.create(stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            if ch.choices[0].logprobs and ch.choices[0].logprobs.content:
                entries += ch.choices[0].logprobs.content
    assert text == full.message.content
    assert len(entries) == 5
    assert [e.token for e in entries] == [e.token for e in full.logprobs.content]
    for a, b in zip(entries, full.logprobs.content):
        assert abs(a.logprob - b.logprob) < 1e-5
        assert len(a.top_logprobs) == 2 and a.top_logprobs[0].token == a.token
    assert b"".join(bytes(e.bytes) for e in entries).decode() == text
    # legacy completions stream their logprobs too
    parts = list(client.completions.create(model=model_id, prompt="Once upon a time",
                                           max_tokens=4, temperature=0, logprobs=2,
                                           stream=True))
    toks = [t for p in parts if p.choices and p.choices[0].logprobs
            for t in p.choices[0].logprobs.tokens]
    assert "".join(toks) == "".join(p.choices[0].text for p in parts if p.choices)
    assert len(toks) == 4


def test_completions_endpoint(client: openai.OpenAI, model_id: str):
    r = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=4,
                                  temperature=0, logprobs=2)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens == 5  # <bos> Once upon a time
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0


def test_cli_and_server_generate_alike(client: openai.OpenAI, model_id: str, ignis_build: Path):
    """`ignis run` and the server share one generation step: the same greedy
    text, cut at the same place by a stop string that ends inside a token.
    The prompt is used nowhere else, so no slot holds a prefix of it (a
    reused prefix is fed differently, which may flip a near tie)."""
    prompt = "The old lighthouse keeper climbed the stairs"

    def run(*extra):
        r = subprocess.run([str(ignis_build / "ignis"), "run", str(model_path()), "-p", prompt,
                            "-n", "24", "--temp", "0", "-t", "2", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r

    text = run().stdout.rstrip("\n")
    words = text.split()
    assert len(words) > 8, text
    stop = words[6][1:3]  # inside a word: inside a token too, most likely
    cut = text.index(stop)
    assert cut > 0
    cli = run("--stop", stop)
    assert cli.stdout.rstrip("\n") == text[:cut]
    assert "stopped at a stop string" in cli.stderr
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=24, temperature=0,
                                  stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[:cut]


def test_tokenize_detokenize(server: Server):
    r = request(server.base, "POST", "/tokenize", {"content": "Hello world", "add_special": True},
                auth())
    assert r.status_code == 200
    toks = r.json()["tokens"]
    assert toks[0] == 2 and len(toks) == 3  # <bos> Hello ▁world
    r = request(server.base, "POST", "/detokenize", {"tokens": toks[1:]}, auth())
    assert r.status_code == 200 and r.json()["content"] == "Hello world"


def test_concurrent_streams_match_solo(client: openai.OpenAI, model_id: str, server: Server):
    prompts = ["Tell me about cats.", "What is 2+2?", "Describe a forest.", "Say something."]
    kw = dict(model=model_id, max_tokens=6, temperature=0)

    def solo(p):
        return client.chat.completions.create(
            messages=[{"role": "user", "content": p}], **kw).choices[0].message.content

    def streamed(p):
        s = client.chat.completions.create(messages=[{"role": "user", "content": p}],
                                           stream=True, **kw)
        text, finish = "", None
        for ch in s:
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
        return text, finish

    want = {p: solo(p) for p in prompts}
    jobs = [prompts[i % 4] for i in range(16)]
    with ThreadPoolExecutor(16) as ex:
        got = list(ex.map(streamed, jobs))
    for p, (text, finish) in zip(jobs, got):
        assert finish == "length"
        assert text == want[p], f"{p!r}: concurrent {text!r} != alone {want[p]!r}"
    m = metrics(server)
    assert m["ignis_requests_running"] == 0
    assert m["ignis_requests_waiting"] == 0


def test_metrics_prometheus(server: Server, client: openai.OpenAI, model_id: str):
    client.chat.completions.create(model=model_id, messages=CHAT, max_tokens=2, temperature=0)
    m = metrics(server)
    assert m['ignis_http_requests_total{status="200"}'] >= 2
    assert m["ignis_prompt_tokens_total"] > 0
    assert m["ignis_generation_tokens_total"] >= 2
    assert m["ignis_time_to_first_token_seconds_count"] >= 1
    assert m['ignis_time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        m["ignis_time_to_first_token_seconds_count"]
    assert m["ignis_inter_token_latency_seconds_count"] >= 1
    assert m["ignis_slots_total"] == 4
    assert 0 < m["ignis_kv_cache_usage_ratio"] <= 1
    assert m["ignis_model_ready"] == 1


def test_client_disconnect_frees_slot(server: Server, model_id: str):
    before = metrics(server)
    body = {"model": model_id, "messages": CHAT, "max_tokens": 400, "temperature": 0,
            "stream": True}
    conn, resp = open_stream(server.base, "/v1/chat/completions", body, auth())
    assert resp.status == 200
    for line in sse_lines(resp):
        if '"delta":{"content"' in line:
            break  # got a real token: hang up
    conn.sock.close()
    conn.close()
    # the slot comes back at the next engine step
    deadline = time.time() + 30
    while time.time() < deadline:
        m = metrics(server)
        if m["ignis_requests_running"] == 0:
            break
        time.sleep(0.2)
    assert m["ignis_requests_running"] == 0
    cancelled = 'ignis_sequences_finished_total{reason="cancelled"}'
    assert m[cancelled] == before[cancelled] + 1
    assert m["ignis_generation_tokens_total"] - before["ignis_generation_tokens_total"] < 400


def test_client_disconnect_non_stream(server: Server, model_id: str):
    before = metrics(server)
    cancelled = 'ignis_sequences_finished_total{reason="cancelled"}'
    host, port = server.base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"model": model_id, "messages": CHAT, "max_tokens": 400, "temperature": 0}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", **auth()})
    deadline = time.time() + 60
    while time.time() < deadline and metrics(server)["ignis_requests_running"] < 1:
        time.sleep(0.1)
    conn.sock.close()
    conn.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        m = metrics(server)
        if m["ignis_requests_running"] == 0 and m[cancelled] > before[cancelled]:
            break
        time.sleep(0.2)
    assert m["ignis_requests_running"] == 0
    assert m[cancelled] == before[cancelled] + 1


def raw_post(server: Server, path: str, body: dict) -> bytes:
    hdr = {"Content-Type": "application/json", **auth()}
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in hdr.items()) + "\r\n"
    return head.encode() + data


def read_all(s: socket.socket) -> bytes:
    out = b""
    while True:
        data = s.recv(65536)
        if not data:
            return out
        out += data


@pytest.mark.parametrize("stream", [False, True])
def test_half_closed_client_still_answered(server: Server, model_id: str, stream: bool):
    """A client that shuts down its sending side (shutdown(SHUT_WR)) but keeps
    reading is not a client that went away: it gets its whole answer."""
    before = metrics(server)
    cancelled = 'ignis_sequences_finished_total{reason="cancelled"}'
    host, port = server.base.rsplit("/", 1)[-1].split(":")
    # a long prompt: the FIN arrives while the server still waits for the
    # first token (where a stream, too, checks on its client)
    body = {"model": model_id, "prompt": "word " * 300 + "One, two, three, four,",
            "max_tokens": 100, "temperature": 0, "stream": stream}
    with socket.create_connection((host, int(port)), timeout=120) as s:
        s.sendall(raw_post(server, "/v1/completions", body))
        time.sleep(0.1)
        s.shutdown(socket.SHUT_WR)
        raw = read_all(s)
    # an interim "100 Continue" may precede the answer (a liveness probe)
    while raw.startswith(b"HTTP/1.1 100 "):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    assert raw.startswith(b"HTTP/1.1 200 "), raw[:300]
    if stream:
        assert b"data: [DONE]" in raw
        assert b'"finish_reason":"length"' in raw or b'"finish_reason":"stop"' in raw
    else:
        ans = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        assert ans["choices"][0]["finish_reason"] in ("length", "stop")
        assert ans["usage"]["completion_tokens"] >= 1
    m = metrics(server)
    assert m[cancelled] == before[cancelled]


# ----------------------------------------------------------- continuous batching

@pytest.fixture(scope="module")
def batch_server(ignis_build: Path):
    """8 slots and small prefill chunks (--batch 32), no key."""
    args = ["--parallel", "8", "--ctx", str(CTX), "--batch", "32", "-t", "2", "--quiet"]
    yield from serve_checked(Server(ignis_build / "ignis", args))


def test_batching_shares_engine_steps(batch_server: Server):
    """8 concurrent requests are decoded together: the engine runs far fewer
    steps (ignis_decode_calls_total) than the tokens it generates."""
    client = openai.OpenAI(base_url=batch_server.base + "/v1", api_key="x", max_retries=0,
                           timeout=300)
    prompts = [f"Write a short story about animal number {i}." for i in range(8)]
    before = metrics(batch_server)

    def one(p):
        r = client.completions.create(model="gemma-3-270m-q4_k_m", prompt=p, max_tokens=16,
                                      temperature=0)
        return r.usage.completion_tokens

    with ThreadPoolExecutor(8) as ex:
        total = sum(ex.map(one, prompts))
    after = metrics(batch_server)
    steps = after["ignis_decode_calls_total"] - before["ignis_decode_calls_total"]
    gen = after["ignis_generation_tokens_total"] - before["ignis_generation_tokens_total"]
    assert gen == total >= 8 * 8
    # one request alone needs one step per token; 8 at once share them
    assert steps <= total / 2, (steps, total)


def test_long_prompt_does_not_stall_streams(batch_server: Server):
    """A ~420-token prompt arriving while 3 streams run is prefilled in
    --batch sized chunks inside the streams' steps: each step still gives
    every stream its next token, so the steps taken are about the streams'
    token count, not that plus the prefill steps (>= 14 here)."""
    n_tok = 40
    before = metrics(batch_server)
    arrivals: list[list[float]] = [[] for _ in range(3)]
    done_at = [0.0] * 3
    started = threading.Barrier(4)

    def stream(i):
        body = {"prompt": f"Count slowly, story {i}: one, two,", "max_tokens": n_tok,
                "temperature": 0, "stream": True}
        conn, resp = open_stream(batch_server.base, "/v1/completions", body)
        told = False
        for line in sse_lines(resp):
            if line.startswith("data: {"):
                arrivals[i].append(time.time())
                if len(arrivals[i]) == 3 and not told:
                    told = True
                    started.wait(120)
        done_at[i] = time.time()
        conn.close()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    started.wait(120)  # every stream has its first tokens
    long_prompt = "word " * 420
    r = request(batch_server.base, "POST", "/v1/completions",
                {"prompt": long_prompt, "max_tokens": 1, "temperature": 0})
    long_done = time.time()
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 400
    for t in threads:
        t.join(300)
    after = metrics(batch_server)
    # the long prompt was served while the streams were still running
    assert long_done < min(done_at)
    steps = after["ignis_decode_calls_total"] - before["ignis_decode_calls_total"]
    # n_tok steps for the longest stream, plus a few for staggered admission;
    # prefill steps that skipped the streams would add >= 420 / 32
    assert steps <= n_tok + 6, steps
    for a in arrivals:
        assert len(a) >= n_tok // 2
        gaps = [y - x for x, y in zip(a, a[1:])]
        assert max(gaps) < 10.0, max(gaps)  # loose: no stream froze


def test_roles_merge_and_head(server: Server, client: openai.OpenAI, model_id: str):
    """Consecutive same-role messages become one turn; developer == system."""
    msgs = [{"role": "developer", "content": "Be brief."},
            {"role": "system", "content": "Answer in English."},
            {"role": "user", "content": "Hi."}, {"role": "user", "content": "Name a fruit."}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=1,
                                       temperature=0)
    assert r.usage.completion_tokens == 1
    r = request(server.base, "HEAD", "/health")
    assert r.status_code == 200 and r.content == b""


def test_lifecycle_loading_overload_and_drain(ignis_build: Path):
    """503 while loading; 503 + Retry-After when slots and queue are full;
    SIGTERM lets the running stream finish, then the process exits 0."""
    srv = Server(ignis_build / "ignis", ["--parallel", "1", "--max-queue", "0", "--ctx", "256",
                                         "--grace", "120", "-t", "2", "--debug-load-delay-ms", "1500"])
    try:
        deadline = time.time() + 20
        r = None
        while time.time() < deadline:
            try:
                r = request(srv.base, "GET", "/health", timeout=5)
                break
            except OSError:
                time.sleep(0.05)
        assert r is not None and r.status_code == 503
        assert r.json()["error"]["type"] == "unavailable_error"
        r = request(srv.base, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and "loading" in r.json()["error"]["message"]
        srv.wait_ready()

        t, lines = start_counting_stream(srv.base, 10)
        r = request(srv.base, "POST", "/v1/completions", {"prompt": "y", "max_tokens": 1})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "overloaded"
        srv.proc.send_signal(signal.SIGTERM)
        t.join(300)
        assert lines[-1] == "data: [DONE]"
        last = json.loads(lines[-2][6:])
        assert last["choices"][0]["finish_reason"] == "length"
        assert srv.proc.wait(120) == 0  # exits by itself once drained
        log = srv.log()
        assert "SIGTERM received" in log and "stopped" in log
    finally:
        srv.stop()
        srv.close()


# ------------------------------------------------------------------ bad input

def post_raw(server: Server, path: str, content: bytes, headers: dict | None = None):
    h = {"Content-Type": "application/json", **auth(), **(headers or {})}
    return request(server.base, "POST", path, content, h)


def assert_error(r: Resp, status: int, code: str | None = None,
                 param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    return err


@pytest.mark.asan
def test_bad_json(server: Server):
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    for body in [b"", b"{", b"not json", b"[1,2]", b"null", b'{"messages": [}',
                 good[: len(good) // 2].encode(), good[:-1].encode(), b"[" * 30000,
                 b'{"messages":[{"role":"user","content":"\xff\xfe"}]}',
                 b'{"messages":[{"role":"user","content":"a\\u0000b"}]}']:
        err = assert_error(post_raw(server, "/v1/chat/completions", body), 400)
        assert err["type"] == "invalid_request_error"
    assert_error(post_raw(server, "/v1/completions", b'{"prompt": "x"'), 400)
    assert_error(post_raw(server, "/tokenize", b"{"), 400)
    assert_error(post_raw(server, "/detokenize", b"[]"), 400)


@pytest.mark.asan
def test_bad_types_and_ranges(server: Server):
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"messages": msgs, "max_tokens": "5"}, "max_tokens"),
        ({"messages": msgs, "max_tokens": -1}, "max_tokens"),
        ({"messages": msgs, "max_tokens": 0}, "max_tokens"),
        ({"messages": msgs, "max_tokens": 10**30}, None),
        ({"messages": msgs, "temperature": -1}, "temperature"),
        ({"messages": msgs, "temperature": "hot"}, "temperature"),
        ({"messages": msgs, "top_p": 7}, "top_p"),
        ({"messages": msgs, "top_k": -9}, "top_k"),
        ({"messages": msgs, "n": 0}, "n"),
        ({"messages": msgs, "n": 10**6}, "n"),
        ({"messages": msgs, "stop": 3}, "stop"),
        ({"messages": msgs, "stop": ["a"] * 100}, "stop"),
        ({"messages": msgs, "presence_penalty": 99}, "presence_penalty"),
        ({"messages": msgs, "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"messages": msgs, "logit_bias": {"99999999": 1}}, "logit_bias"),
        ({"messages": msgs, "logit_bias": {"5": 1000}}, "logit_bias"),
        ({"messages": msgs, "top_logprobs": 50, "logprobs": True}, "top_logprobs"),
        ({"messages": msgs, "stream": "yes"}, "stream"),
        ({"messages": msgs, "seed": "x"}, "seed"),
    ]
    for body, param in cases:
        assert_error(post_raw(server, "/v1/chat/completions", json.dumps(body).encode()), 400,
                     param=param)
    for body, param in [({"prompt": 5}, "prompt"), ({"prompt": [1, -2]}, "prompt"),
                        ({"prompt": [10**9]}, "prompt"), ({"prompt": "x", "logprobs": 99},
                                                          "logprobs")]:
        assert_error(post_raw(server, "/v1/completions", json.dumps(body).encode()), 400,
                     param=param)
    assert_error(post_raw(server, "/detokenize", b'{"tokens":[1, 999999999]}'), 400,
                 param="tokens")


@pytest.mark.asan
def test_context_length_exceeded(server: Server):
    """Refused before any engine work: no decode step runs and no prompt
    token is counted across these 400s."""
    before = metrics(server)
    long_text = "word " * (CTX * 2)
    r = post_raw(server, "/v1/chat/completions",
                 json.dumps({"messages": [{"role": "user", "content": long_text}]}).encode())
    err = assert_error(r, 400, code="context_length_exceeded", param="messages")
    assert f"maximum context length is {CTX} tokens" in err["message"]
    r = post_raw(server, "/v1/completions", json.dumps({"prompt": long_text}).encode())
    assert_error(r, 400, code="context_length_exceeded", param="prompt")
    # token ids one past the context
    r = post_raw(server, "/v1/completions", json.dumps({"prompt": [2] * CTX}).encode())
    assert_error(r, 400, code="context_length_exceeded", param="prompt")
    # far too long: refused from its byte length alone
    huge = "x" * (MAX_BODY - 1000)
    r = post_raw(server, "/v1/completions", json.dumps({"prompt": huge}).encode())
    assert_error(r, 400, code="context_length_exceeded", param="prompt")
    # prompt fits, but prompt + max_tokens does not
    r = post_raw(server, "/v1/completions",
                 json.dumps({"prompt": "hello", "max_tokens": CTX}).encode())
    assert_error(r, 400, code="context_length_exceeded", param="max_tokens")
    r = post_raw(server, "/v1/chat/completions",
                 json.dumps({"messages": [{"role": "user", "content": "hi"}],
                             "max_completion_tokens": CTX, "stream": True}).encode())
    assert_error(r, 400, code="context_length_exceeded", param="max_tokens")
    after = metrics(server)
    for name in ("ignis_decode_calls_total", "ignis_prompt_tokens_total",
                 "ignis_generation_tokens_total"):
        assert after[name] == before[name], name


@pytest.mark.asan
def test_body_limit(server: Server):
    big = json.dumps({"prompt": "a" * (MAX_BODY + 10)}).encode()
    err = assert_error(post_raw(server, "/v1/completions", big), 413)
    assert str(MAX_BODY) in err["message"]

    def chunks():
        for _ in range(MAX_BODY // 1024 + 4):
            yield b" " * 1024

    # chunked upload without Content-Length
    r = request(server.base, "POST", "/v1/completions", chunks(), auth())
    assert_error(r, 413)


def send_chunked_until_answer(server: Server, headers: dict, limit: int, seconds: float):
    """Streams an endless chunked body (16 KiB chunks) and reads the answer as
    soon as one comes. Returns (raw answer, bytes sent, seconds taken)."""
    host, port = server.base.rsplit("/", 1)[-1].split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" \
           "Content-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(head.encode())
    chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
    sent, t0, answer, pending = 0, time.time(), b"", b""
    try:
        s.setblocking(False)
        while sent < limit and time.time() - t0 < seconds:
            try:
                answer = s.recv(65536)
                break  # an answer, or the server closed
            except BlockingIOError:
                pass
            except OSError:
                break
            if not pending:
                pending = chunk
            try:
                n = s.send(pending)
                pending = pending[n:]
                sent += n
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                break  # the server closed: read what it answered
        s.setblocking(True)
        s.settimeout(10)
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                answer += data
        except OSError:
            pass
        return answer, sent, time.time() - t0
    finally:
        s.close()


@pytest.mark.asan
def test_chunked_body_over_limit_answered_at_once(server: Server):
    """A chunked upload (no Content-Length) that passes --max-body gets its
    413 while the client is still sending, and the connection ends: the
    server does not read on until the client gives up."""
    answer, sent, took = send_chunked_until_answer(server, auth(), limit=256 << 20, seconds=60)
    assert answer.startswith(b"HTTP/1.1 413 "), (answer[:200], sent, took)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    err = json.loads(body)["error"]
    assert err["code"] == "request_too_large" and str(MAX_BODY) in err["message"]
    # the answer came after little more than the limit (socket buffers aside),
    # not after the client's 256 MiB
    assert sent < 32 << 20, sent
    # without the key it is a 401, not a 413
    answer, _, _ = send_chunked_until_answer(server, {}, limit=256 << 20, seconds=60)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert request(server.base, "GET", "/health").status_code == 200


@pytest.mark.asan
def test_auth_routes_and_methods(server: Server):
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY},
                    {"Authorization": "Basic " + API_KEY}]:
        r = request(server.base, "POST", "/v1/completions", body, headers)
        err = assert_error(r, 401)
        assert err["type"] == "authentication_error"
    assert request(server.base, "GET", "/v1/models").status_code == 401
    assert request(server.base, "GET", "/metrics").status_code == 401
    assert request(server.base, "GET", "/health").status_code == 200
    err = assert_error(request(server.base, "GET", "/v1/nope", headers=auth()), 404)
    assert "/v1/nope" in err["message"]
    assert_error(request(server.base, "POST", "/v2/chat", b"{}", auth()), 404)
    assert_error(request(server.base, "GET", "/v1/models/other-model", headers=auth()), 404,
                 code="model_not_found")
    r = post_raw(server, "/v1/completions",
                 json.dumps({"model": "gpt-4", "prompt": "x", "max_tokens": 1}).encode())
    assert_error(r, 404, code="model_not_found", param="model")
    r = request(server.base, "GET", "/v1/chat/completions", headers=auth())
    assert_error(r, 405)
    assert r.headers["allow"] == "POST"
    r = request(server.base, "DELETE", "/v1/models", headers=auth())
    assert_error(r, 405)
    assert "GET" in r.headers["allow"]


@pytest.mark.asan
def test_openai_client_errors(server: Server):
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        good.chat.completions.create(model="gemma-3-270m-q4_k_m",
                                     messages=[{"role": "user", "content": "x"}],
                                     temperature=5)
    assert ei.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        good.chat.completions.create(model="nonexistent",
                                     messages=[{"role": "user", "content": "x"}])


@pytest.mark.asan
def test_still_serving_after_bad_input(server: Server):
    """After everything above, the server answers and generates."""
    assert request(server.base, "GET", "/health").status_code == 200
    r = post_raw(server, "/v1/completions",
                 json.dumps({"prompt": "Hi", "max_tokens": 1, "temperature": 0}).encode())
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1
    m = metrics(server)
    assert m['ignis_http_requests_total{status="400"}'] > 20
    assert m['ignis_http_requests_total{status="401"}'] >= 4


@pytest.mark.asan
def test_bad_model_file_fails_cleanly(ignis_build: Path, tmp_path: Path):
    """A corrupt GGUF: the port is bound, loading fails, /health says why,
    the process exits 1 without crashing or leaking."""
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    srv = Server(ignis_build / "ignis", [], model=bad)
    try:
        assert srv.proc.wait(60) == 1
        log = srv.log()
        assert "cannot load" in log and "broken.gguf" in log
        assert "Sanitizer" not in log and "runtime error" not in log, log
    finally:
        srv.stop()
        srv.close()


# ------------------------------------------------------------------ lifecycle

def check_clean_exit(srv: Server, rc: int) -> str:
    log = srv.log()
    assert rc == 0, f"exit status {rc}:\n{log[-6000:]}"
    assert "Sanitizer" not in log and "runtime error" not in log, log[-8000:]
    assert "stopped" in log
    return log


@pytest.mark.asan
def test_shutdown_while_a_generation_is_being_submitted(ignis_build: Path):
    """SIGTERM lands while a request has passed its checks but not yet reached
    the scheduler (held there by a test hook): it gets 503, and the scheduler
    is not freed under it."""
    srv = Server(ignis_build / "ignis", ["--parallel", "1", "--ctx", "256", "-t", "2",
                                         "--debug-submit-delay-ms", "2000"])
    try:
        srv.wait_ready()
        out = {}

        def go():
            out["r"] = request(srv.base, "POST", "/v1/completions",
                               {"prompt": "Hi", "max_tokens": 1})

        t = threading.Thread(target=go)
        t.start()
        time.sleep(0.7)  # the request now sleeps in the hook
        srv.proc.send_signal(signal.SIGTERM)
        t.join(120)
        r = out["r"]
        err = assert_error(r, 503)
        assert "shutting down" in err["message"]
        check_clean_exit(srv, srv.proc.wait(120))
    finally:
        srv.stop()
        srv.close()


@pytest.mark.asan
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_under_request_storm(ignis_build: Path, sig: int):
    """Requests keep coming (new and keep-alive connections, generations,
    streams, tokenize, bad input) while the signal arrives: every answer is
    a proper 200/400/503 or a refused connection, and the process exits 0
    without sanitizer reports."""
    srv = Server(ignis_build / "ignis", ["--parallel", "2", "--max-queue", "4", "--ctx", "256",
                                         "--grace", "3", "-t", "2", "--quiet"])
    stop = threading.Event()
    statuses: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    bodies = [
        ("/v1/completions", {"prompt": "Hello there", "max_tokens": 2, "temperature": 0}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                  "max_tokens": 2, "stream": True}),
        ("/tokenize", {"content": "some text to tokenize " * 20}),
        ("/v1/completions", {"prompt": "word " * 200, "max_tokens": 1}),
        ("/v1/completions", b'{"prompt": '),
    ]
    host, port = srv.base.rsplit("/", 1)[-1].split(":")

    def worker(k: int, keep_alive: bool):
        conn = None
        i = k
        while not stop.is_set():
            path, body = bodies[i % len(bodies)]
            i += 1
            try:
                if conn is None or not keep_alive:
                    conn = http.client.HTTPConnection(host, int(port), timeout=60)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                with lock:
                    statuses.append(r.status)
                if not keep_alive or r.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    errors.append(type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.01)
        if conn is not None:
            conn.close()

    threads = []
    try:
        srv.wait_ready()
        threads = [threading.Thread(target=worker, args=(k, k % 2 == 0)) for k in range(6)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            with lock:
                if statuses.count(200) >= 6:
                    break
            time.sleep(0.05)
        srv.proc.send_signal(sig)
        rc = srv.proc.wait(120)
        time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(60)
        log = check_clean_exit(srv, rc)
        name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
        assert f"{name} received" in log
        assert statuses.count(200) >= 6
        assert set(statuses) <= {200, 400, 503}, sorted(set(statuses))
        assert errors, "nothing was refused after the exit?"
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        srv.stop()
        srv.close()


@pytest.mark.asan
def test_sigint_drains_running_stream(ignis_build: Path):
    """SIGINT, like SIGTERM: new generations get 503, the running stream
    finishes, then the process exits 0."""
    srv = Server(ignis_build / "ignis", ["--parallel", "2", "--ctx", "256", "--grace", "120",
                                         "-t", "2"])
    try:
        srv.wait_ready()
        t, lines = start_counting_stream(srv.base, 12)
        srv.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        try:
            r = request(srv.base, "POST", "/v1/completions", {"prompt": "y", "max_tokens": 1},
                        timeout=10)
            assert r.status_code == 503  # a kept-open listener would still answer 503
        except OSError:
            pass  # the listening socket is already closed
        t.join(300)
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"
        log = check_clean_exit(srv, srv.proc.wait(120))
        assert "SIGINT received" in log
    finally:
        srv.stop()
        srv.close()


@pytest.mark.asan
def test_api_key_file(ignis_build: Path, tmp_path: Path):
    """--api-key-file: the first line, blanks and CR/LF trimmed, is the key."""
    kf = tmp_path / "key.txt"
    kf.write_bytes(b"  \tsk-file-key-42 \r\nsecond line is ignored\n")
    srv = Server(ignis_build / "ignis", ["--api-key-file", str(kf), "--ctx", "256", "-t", "2"])
    try:
        srv.wait_ready()
        assert "API key required" in srv.log()
        ok = request(srv.base, "GET", "/v1/models",
                     headers={"Authorization": "Bearer sk-file-key-42"})
        assert ok.status_code == 200
        for bad in ["Bearer second line is ignored", "Bearer sk-file-key-4",
                    "Bearer sk-file-key-42x", "Bearer sk-file-key-42\tsecond"]:
            assert_error(request(srv.base, "GET", "/v1/models",
                                 headers={"Authorization": bad}), 401)
        assert request(srv.base, "GET", "/health").status_code == 200
        check_clean_exit(srv, srv.stop())
    finally:
        srv.stop()
        srv.close()


@pytest.mark.asan
def test_api_key_file_rejected(ignis_build: Path, tmp_path: Path):
    """An empty or blank key file, a missing one, or both key options: the
    server refuses to start with a clear message (never runs open)."""
    binary = str(ignis_build / "ignis")
    env = dict(os.environ)
    if ASAN:
        env["ASAN_OPTIONS"] = "detect_leaks=1"
    cases = []
    for name, content in [("empty", b""), ("blank", b" \t \r\n"), ("blank-first", b"\nkey\n")]:
        f = tmp_path / name
        f.write_bytes(content)
        cases.append(([str(f)], 1, "is empty"))
    cases.append(([str(tmp_path / "missing")], 1, "cannot read --api-key-file"))
    for args, want_rc, msg in cases:
        p = subprocess.run([binary, "serve", str(model_path()), "--port", str(free_port()),
                            "--api-key-file", *args], capture_output=True, text=True,
                           timeout=60, env=env)
        assert p.returncode == want_rc, (args, p.returncode, p.stderr)
        assert msg in p.stderr, p.stderr
        assert "listening" not in p.stderr
        assert "Sanitizer" not in p.stderr
    kf = tmp_path / "k"
    kf.write_text("abc\n")
    p = subprocess.run([binary, "serve", str(model_path()), "--api-key", "x", "--api-key-file",
                        str(kf)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and "not both" in p.stderr


@pytest.mark.asan
def test_timeout_closes_idle_connections(ignis_build: Path):
    """--timeout S: a connection that sends nothing, or idles after its
    answer, is closed after about S seconds; the server keeps serving."""
    srv = Server(ignis_build / "ignis", ["--timeout", "1", "--ctx", "256", "-t", "2"])
    try:
        srv.wait_ready()
        host, port = srv.base.rsplit("/", 1)[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            t0 = time.time()
            assert s.recv(1) == b""  # closed by the server
            took = time.time() - t0
        assert 0.5 < took < 15, took
        # keep-alive connection idling after a full exchange
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200
        r.read()
        t0 = time.time()
        assert conn.sock.recv(1) == b""
        assert 0.5 < time.time() - t0 < 15
        conn.close()
        # a slow request that keeps sending stays open past the timeout
        with socket.create_connection((host, int(port)), timeout=30) as s:
            for b in [b"GET /hea", b"lth HTTP/1.1\r\n", b"Host: x\r\n"]:
                s.sendall(b)
                time.sleep(0.6)
            s.sendall(b"\r\n")
            assert read_until_status(s).startswith(b"HTTP/1.1 200")
        assert request(srv.base, "GET", "/health").status_code == 200
        check_clean_exit(srv, srv.stop())
    finally:
        srv.stop()
        srv.close()


def read_until_status(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n" not in data:
        got = s.recv(4096)
        if not got:
            break
        data += got
    return data
