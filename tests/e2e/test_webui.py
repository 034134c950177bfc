"""The web page of `ignis serve` (chat and dashboard), driven in headless
Chromium through selenium, against the real Gemma 3 270M model; plus the
page's HTTP side (headers, --no-webui, CORS, /v1/status) over raw HTTP.

The browser tests skip, saying why, when chromium, chromedriver or selenium
is missing (scripts/install-deps.sh installs them). Screenshots of the chat
and the dashboard go to IGNIS_BUILD/webui-screenshots/."""
from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

API_KEY = "webui-key-51c2"
MODEL = Path(os.environ.get("IGNIS_MODEL") or Path.home() / ".cache/ignis/gemma-3-270m-q4_k_m.gguf")

# Model output a page must show as text, never as markup. Every payload that
# ran would leave a trace: an element in the message, or window.__pwned set.
HOSTILE = (
    "Here is <script>window.__pwned = 1</script> and <img src=x onerror=\"window.__pwned=2\">\n\n"
    "<b>bold html</b> [click me](javascript:window.__pwned=3) "
    "[data](data:text/html,<script>window.__pwned=4</script>) "
    "[fine](https://example.com/ok)\n\n"
    "```html\n<script>window.__pwned = 5</script><iframe src=\"javascript:1\"></iframe>\n```\n\n"
    "- item <svg onload=\"window.__pwned=6\">\n"
    "- `<img src=y onerror=window.__pwned=7>`\n\n"
    "**<a href=\"javascript:window.__pwned=8\">x</a>** _<style>body{display:none}</style>_"
)
# the literal strings that must appear as visible text
HOSTILE_TEXT = ["<script>window.__pwned = 1</script>", "<img src=x onerror=\"window.__pwned=2\">",
                "<b>bold html</b>", "[click me](javascript:window.__pwned=3)",
                "<iframe src=\"javascript:1\"></iframe>", "<svg onload=\"window.__pwned=6\">",
                "<img src=y onerror=window.__pwned=7>", "<style>body{display:none}</style>"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_req(port: int, method: str, path: str, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = dict(headers or {})
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


class Serve:
    """One `ignis serve` on a free loopback port."""

    def __init__(self, binary: Path, args: list[str], model: Path | None = None):
        if model is None and not MODEL.is_file():
            if os.environ.get("IGNIS_ALLOW_MISSING_MODEL") == "1":
                pytest.skip(f"model {MODEL} missing")
            pytest.fail(f"model {MODEL} missing: run `make model`")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="ignis-webui-", suffix=".log", delete=False)
        env = dict(os.environ)
        if os.environ.get("IGNIS_ASAN") == "1":
            env.update(ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
        self.proc = subprocess.Popen([str(binary), "serve", str(model or MODEL), "--port", str(self.port),
                                      *args], stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait(self, ready: bool = True, timeout: float = 120) -> "Serve":
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, f"server exited:\n{self.text()}"
            try:
                st, _, _ = http_req(self.port, "GET", "/health", timeout=5)
                if st == 200 or not ready:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready:\n{self.text()}")

    def stop(self) -> int:
        """Stops the server; its exit status (a sanitizer report fails)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        log = self.text()
        os.unlink(self.log.name)
        assert "Sanitizer" not in log and "runtime error" not in log, log[-8000:]
        return self.proc.returncode


def binary_of(ignis_build: Path) -> Path:
    b = ignis_build / "ignis"
    if not b.is_file():
        pytest.fail(f"{b} not found: build the ignis_cli target first")
    return b


@pytest.fixture(scope="module")
def srv(ignis_build: Path):
    s = Serve(binary_of(ignis_build), ["--parallel", "2", "--ctx", "1024", "-t", "2", "--quiet"])
    try:
        yield s.wait()
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------ HTTP side

@pytest.mark.asan
def test_page_is_served_with_security_headers(srv: Serve):
    st, h, body = http_req(srv.port, "GET", "/")
    assert st == 200
    assert h["content-type"] == "text/html; charset=utf-8"
    csp = h["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert h["x-content-type-options"] == "nosniff"
    page = body.decode()
    assert '<script src="/app.js"' in page and '<link rel="stylesheet" href="/app.css">' in page
    # nothing inline to run, nothing from elsewhere
    assert not re.search(r"<script(?![^>]*\bsrc=\"/app\.js\")", page)
    assert not re.search(r"\bon[a-z]+=", page)
    assert "//" not in page.replace("http://www.w3.org", "")
    sizes = {}
    for path, ctype in [("/app.js", "text/javascript; charset=utf-8"),
                        ("/app.css", "text/css; charset=utf-8"), ("/favicon.svg", "image/svg+xml")]:
        st, h, b = http_req(srv.port, "GET", path)
        assert st == 200 and h["content-type"] == ctype and h["x-content-type-options"] == "nosniff"
        assert len(b) > 100
        sizes[path] = len(b)
    assert "fetch('http" not in http_req(srv.port, "GET", "/app.js")[2].decode()
    st, h, b = http_req(srv.port, "HEAD", "/app.js")
    assert st == 200 and b == b"" and int(h["content-length"]) == sizes["/app.js"]
    st, h, _ = http_req(srv.port, "POST", "/", body=b"x")
    assert st == 405 and h["allow"] == "GET, HEAD"
    st, _, _ = http_req(srv.port, "GET", "/index.htm")
    assert st == 404
    assert "access-control-allow-origin" not in h  # CORS is off by default


@pytest.mark.asan
def test_status_document(srv: Serve):
    st, h, b = http_req(srv.port, "GET", "/v1/status")
    assert st == 200 and h["content-type"] == "application/json"
    s = json.loads(b)
    assert s["state"] == "ready" and s["model"]["id"] == "gemma-3-270m-q4_k_m"
    assert s["model"]["n_ctx"] == 1024 and s["engine"]["slots"] == 2
    assert s["engine"]["backend"] == "cpu" and s["engine"]["threads"] == 2
    assert isinstance(s["engine"]["device"], str) and s["engine"]["device"]
    # RSS: the mapped model alone is ~250 MB
    assert 50 << 20 < s["process"]["rss_bytes"] < 8 << 30
    assert s["process"]["cpu_seconds"] > 0
    assert s["kv_cache"]["capacity"] == 2048
    assert s["defaults"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                             "max_tokens": None, "seed": None}
    # the CPU backend: the weights and KV cache against the machine's memory
    dm = s["device_memory"]
    assert dm["source"] == "host" and dm["kv_bytes"] > 0 and 200 << 20 < dm["weight_bytes"] < 400 << 20
    assert dm["used_bytes"] == dm["allocated_bytes"] == dm["weight_bytes"] + dm["kv_bytes"]
    assert dm["budget_bytes"] > dm["used_bytes"]
    assert s["device_busy"] is None and s["device_lost"] is False
    assert s["model"]["vision"] is False
    assert s["process"]["peak_rss_bytes"] >= s["process"]["rss_bytes"] and s["process"]["open_fds"] > 3
    before = s["tokens"]
    st, _, b = http_req(srv.port, "POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 3,
                         "temperature": 0})
    assert st == 200
    usage = json.loads(b)["usage"]
    s2 = json.loads(http_req(srv.port, "GET", "/v1/status")[2])
    assert s2["tokens"]["generated"] - before["generated"] == usage["completion_tokens"] == 3
    assert s2["tokens"]["prompt"] - before["prompt"] == usage["prompt_tokens"]
    computed = usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
    # the prefill counter counts computed prompt tokens (all but the last,
    # which the first decode step feeds when the prompt is fully cached)
    assert s2["tokens"]["prefill"] - before["prefill"] in (computed, computed - 1)
    assert s2["time"] > s["time"] and s2["http"]["requests"] > s["http"]["requests"]
    st, _, b = http_req(srv.port, "GET", "/metrics")
    assert f"ignis_prefill_tokens_total {s2['tokens']['prefill']}" in b.decode()


@pytest.mark.asan
def test_no_webui_and_cors(ignis_build: Path):
    binary = binary_of(ignis_build)
    off = Serve(binary, ["--no-webui", "-t", "1", "--quiet"]).wait(ready=False)
    cors = Serve(binary, ["--api-key", API_KEY, "--cors-origin", "http://example.test", "-t", "1",
                          "--quiet"]).wait(ready=False)
    try:
        for path in ["/", "/app.js", "/app.css"]:
            st, h, b = http_req(off.port, "GET", path)
            assert st == 404 and json.loads(b)["error"]["code"] == "not_found"
        assert "chat and dashboard" not in off.text()
        assert f"chat and dashboard: http://127.0.0.1:{cors.port}/" in cors.text()
        # preflight: no key needed, the asked headers allowed
        st, h, b = http_req(cors.port, "OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://example.test", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
        assert st == 204 and b == b""
        assert h["access-control-allow-origin"] == "http://example.test"
        assert "POST" in h["access-control-allow-methods"]
        assert h["access-control-allow-headers"] == "authorization, content-type, x-stainless-os"
        assert h["vary"] == "Origin"
        st, h, _ = http_req(cors.port, "OPTIONS", "/v1/models", headers={
            "Origin": "http://example.test", "Access-Control-Request-Headers": "a\"<b"})
        assert st == 204 and h["access-control-allow-headers"] == "Authorization, Content-Type"
        # answers, errors included, carry the origin so the page can read them
        st, h, _ = http_req(cors.port, "GET", "/v1/models", headers={"Origin": "http://example.test"})
        assert st == 401 and h["access-control-allow-origin"] == "http://example.test"
        st, h, _ = http_req(cors.port, "GET", "/v1/models", headers={
            "Authorization": f"Bearer {API_KEY}"})
        assert st == 200 and h["access-control-allow-origin"] == "http://example.test"
        # the page itself needs no key (it asks for one); the API does
        st, _, _ = http_req(cors.port, "GET", "/")
        assert st == 200
        assert http_req(cors.port, "GET", "/v1/status")[0] == 401
        # without --cors-origin, OPTIONS is an ordinary 405 and no CORS header goes out
        st, h, _ = http_req(off.port, "OPTIONS", "/v1/models")
        assert st == 405 and "access-control-allow-origin" not in h
    finally:
        assert off.stop() == 0
        assert cors.stop() == 0


# ------------------------------------------------------------ browser

def chrome_or_skip():
    missing = [b for b in ("chromium", "chromedriver") if not shutil.which(b)]
    if missing:
        pytest.skip(f"browser tests need {' and '.join(missing)} "
                    "(apt-get install chromium chromium-driver; scripts/install-deps.sh)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("browser tests need selenium (pip install -r tests/requirements.txt)")


@pytest.fixture(scope="module")
def browser():
    chrome_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as ChromeService
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,860", "--force-device-scale-factor=1",
              "--disable-background-networking", "--no-first-run"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=opts, service=ChromeService(shutil.which("chromedriver")))
    d.set_script_timeout(30)
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture(scope="module")
def shots(ignis_build: Path) -> Path:
    p = ignis_build / "webui-screenshots"
    p.mkdir(exist_ok=True)
    return p


def wait_for(fn, timeout=60.0, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # the DOM changes under us while streaming
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def fresh(d, base: str, convs=None, settings=None, key=None):
    """Opens the page with the given localStorage contents."""
    d.get(base + "/")
    d.get_log("browser")  # what earlier pages logged is not this test's business
    d.execute_script("localStorage.clear();"
                     "for (const [k, v] of Object.entries(arguments[0])) localStorage.setItem(k, v);",
                     {k: v for k, v in {"ignis.conversations": convs and json.dumps(convs),
                                        "ignis.current": convs and json.dumps(convs[0]["id"]),
                                        "ignis.settings": settings and json.dumps(settings),
                                        "ignis.apiKey": key}.items() if v})
    d.get(base + "/")
    wait_for(lambda: d.execute_script("return document.getElementById('model').textContent"),
             30, "the model name from /v1/status")


def js(d, script, *args):
    return d.execute_script(script, *args)


def messages(d):
    return js(d, """return [...document.querySelectorAll('#messages .msg')].map(m => ({
        role: m.classList[1], text: m.querySelector('.body').innerText,
        stats: (m.querySelector('.stats') || {}).textContent || '',
        streaming: m.classList.contains('streaming')}));""")


def stored_conv(d):
    return json.loads(js(d, "return localStorage.getItem('ignis.conversations')"))[0]


def type_and_send(d, text):
    from selenium.webdriver.common.keys import Keys
    box = d.find_element("id", "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def wait_idle(d, timeout=60):
    wait_for(lambda: js(d, "return document.body.dataset.busy === ''"), timeout, "the answer to end")


STATS = re.compile(r"^(\d+) \+ (\d+) tokens · ([\d.]+) tok/s · [\d.]+ s to first token")


def no_console_errors(d):
    errs = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errs, errs


def test_chat_stream_stop_regenerate_edit(browser, srv: Serve, shots: Path):
    d = browser
    # a long greedy answer, so there is time to watch it and stop it
    fresh(d, srv.base, settings={"temperature": "0", "max_tokens": "400"})
    placeholders = js(d, "return ['temperature','top_p','top_k','min_p','max_tokens','seed']"
                         ".map(f => document.getElementById('s-' + f).placeholder)")
    assert placeholders == ["1", "1", "0 (off)", "0", "rest of context", "random"]
    type_and_send(d, "Count from 1 to 300, one number per line.")
    seen = []

    def growing():
        m = messages(d)
        if len(m) == 2 and m[1]["streaming"] and m[1]["text"].strip():
            if not seen or m[1]["text"] != seen[-1]:
                seen.append(m[1]["text"])
        # past the six tokens of the shorter answer below, so the two differ
        return len(seen) >= 3 and len(seen[-1]) > 40
    wait_for(growing, 90, "the answer to stream in")
    assert d.find_element("id", "stop").is_displayed()
    assert not d.find_element("id", "send").is_displayed()
    d.find_element("id", "stop").click()
    wait_idle(d, 10)
    m = messages(d)
    assert [x["role"] for x in m] == ["user", "assistant"]
    assert m[0]["text"] == "Count from 1 to 300, one number per line."
    assert "stopped" in m[1]["stats"] and m[1]["stats"].startswith("~")
    stopped_text = m[1]["text"]
    stopped_raw = stored_conv(d)["messages"][1]["content"]
    assert len(stopped_raw) > 0
    time.sleep(0.5)
    assert messages(d)[1]["text"] == stopped_text  # nothing arrives after Stop
    # the server let the sequence go
    wait_for(lambda: json.loads(http_req(srv.port, "GET", "/v1/status")[2])["sequences"]
             ["running"] == 0, 10, "the stopped sequence to leave its slot")

    # short answers from here on
    js(d, "document.getElementById('s-max_tokens').value = '6';"
          "document.getElementById('s-max_tokens').dispatchEvent(new Event('input'))")
    assert json.loads(js(d, "return localStorage.getItem('ignis.settings')"))["max_tokens"] == "6"
    d.find_element("css selector", ".msg.assistant .regen").click()
    wait_idle(d)
    m = messages(d)
    assert [x["role"] for x in m] == ["user", "assistant"]
    s = STATS.match(m[1]["stats"])
    assert s, m[1]["stats"]
    assert int(s.group(2)) == 6 and int(s.group(1)) > 10 and float(s.group(3)) > 0
    assert "length" in m[1]["stats"]
    first = m[1]["text"]
    first_raw = stored_conv(d)["messages"][1]["content"]
    assert first_raw.strip() and first_raw != stopped_raw
    d.find_element("css selector", ".msg.assistant .regen").click()
    wait_idle(d)
    assert messages(d)[1]["text"] == first  # temperature 0: the same answer again

    # edit the question and resend: the old answer is replaced
    d.find_element("css selector", ".msg.user .edit").click()
    ta = d.find_element("css selector", ".msg.user textarea")
    ta.clear()
    ta.send_keys("Name a colour.")
    d.find_element("css selector", ".msg.user .resend").click()
    wait_idle(d)
    m = messages(d)
    assert [x["role"] for x in m] == ["user", "assistant"]
    assert m[0]["text"] == "Name a colour."
    assert STATS.match(m[1]["stats"]) and m[1]["text"].strip()
    stored = json.loads(js(d, "return localStorage.getItem('ignis.conversations')"))
    assert len(stored) == 1 and stored[0]["title"] == "Name a colour."
    assert [x["content"] for x in stored[0]["messages"]][0] == "Name a colour."
    assert stored[0]["messages"][1]["stats"]["completion"] == 6
    no_console_errors(d)


def test_conversations_kept_across_reload(browser, srv: Serve, shots: Path):
    d = browser
    fresh(d, srv.base, settings={"temperature": "0", "max_tokens": "24"})
    js(d, "document.getElementById('system').value = 'You are terse.';"
          "document.getElementById('system').dispatchEvent(new Event('input'))")
    type_and_send(d, "Write a Python function that adds two numbers, in a code block.")
    wait_idle(d)
    d.find_element("id", "new-chat").click()
    type_and_send(d, "Say hello.")
    wait_idle(d)
    titles = js(d, "return [...document.querySelectorAll('#conv-list .title')].map(b => b.textContent)")
    assert titles == ["Say hello.",
                      "Write a Python function that adds two numbers, in a code block."[:60]]
    second = messages(d)
    d.find_element("css selector", "#conv-list li:nth-child(2) .title").click()
    first = messages(d)
    assert first[0]["text"].startswith("Write a Python function")
    assert len(first) == 2 and first[1]["text"].strip()
    d.refresh()
    wait_for(lambda: len(messages(d)) == 2, 10, "the conversation after reload")
    assert messages(d) == first  # the current conversation is kept, stats too
    d.find_element("css selector", "#conv-list li:nth-child(1) .title").click()
    assert messages(d) == second
    stored = json.loads(js(d, "return localStorage.getItem('ignis.conversations')"))
    assert {c["system"] for c in stored} == {"You are terse."}
    d.find_element("css selector", "#conv-list li:nth-child(2) .title").click()
    d.find_element("css selector", "#settings summary").click()
    d.save_screenshot(str(shots / "chat.png"))
    no_console_errors(d)
    # a phone in dark mode: the list folds away, the composer stays
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark"}]})
    d.set_window_size(390, 844)
    try:
        assert not d.find_element("id", "sidebar").is_displayed()
        assert d.find_element("id", "input").is_displayed()
        assert d.find_element("id", "menu").is_displayed()
        assert js(d, "return getComputedStyle(document.body).backgroundColor") == "rgb(20, 19, 18)"
        assert js(d, "return document.documentElement.scrollWidth") <= 390
        d.save_screenshot(str(shots / "chat-phone-dark.png"))
        d.find_element("id", "menu").click()
        assert d.find_element("id", "sidebar").is_displayed()
    finally:
        d.set_window_size(1280, 860)
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def assert_inert(d, where: str):
    """The hostile text shows as text: no element it describes exists."""
    got = js(d, """const box = document.querySelector(arguments[0]);
      return {
        text: box.innerText,
        bad: [...box.querySelectorAll('script,img,iframe,svg,style,b,object,embed')].length,
        hrefs: [...box.querySelectorAll('a')].map(a => a.getAttribute('href')),
        handlers: [...box.querySelectorAll('*')].filter(e => [...e.attributes].some(
          a => a.name.startsWith('on') || a.name === 'style')).length,
        pwned: window.__pwned === undefined ? null : window.__pwned,
        shown: getComputedStyle(document.body).display};""", where)
    assert got["pwned"] is None
    assert got["bad"] == 0 and got["handlers"] == 0 and got["shown"] == "flex"
    assert got["hrefs"] == ["https://example.com/ok"], got["hrefs"]
    for s in HOSTILE_TEXT:
        assert s in got["text"], (s, got["text"])
    return got


def test_hostile_output_is_text_when_stored(browser, srv: Serve):
    d = browser
    conv = {"id": "evil", "title": "<img src=x onerror=window.__pwned=9>", "system": "", "updated": 1,
            "messages": [{"role": "user", "content": "<script>window.__pwned=10</script>"},
                         {"role": "assistant", "content": HOSTILE,
                          "stats": {"completion": "<b>1</b>", "finish": "<img src=z onerror=x()>"}}]}
    fresh(d, srv.base, convs=[conv])
    assert_inert(d, "#messages .msg.assistant .body")
    assert_inert_all(d)
    # Markdown still works: code block, list, link, strong, em
    shape = js(d, """const b = document.querySelector('#messages .msg.assistant .body');
      return [b.querySelectorAll('pre code').length, b.querySelectorAll('li').length,
              b.querySelectorAll('strong').length, b.querySelectorAll('em').length,
              b.querySelector('pre code').textContent]""")
    assert shape[:4] == [1, 2, 1, 1]
    assert shape[4] == "<script>window.__pwned = 5</script><iframe src=\"javascript:1\"></iframe>"
    # the code block's copy button puts the code, as text, on the clipboard
    from selenium.webdriver.common.keys import Keys
    btn = d.find_element("css selector", ".msg.assistant pre .copy")
    btn.click()
    wait_for(lambda: btn.text == "Copied", 5, "the copy button to confirm")
    box = d.find_element("id", "input")
    box.click()
    box.send_keys(Keys.CONTROL, "v")
    assert box.get_attribute("value") == shape[4]
    assert_inert_all(d)


def assert_inert_all(d):
    got = js(d, """return {imgs: document.querySelectorAll('img,script:not([src])').length,
        title: document.querySelector('#conv-list .title').textContent,
        user: document.querySelector('.msg.user .body').innerText,
        pwned: window.__pwned === undefined ? null : window.__pwned}""")
    assert got == {"imgs": 0, "title": "<img src=x onerror=window.__pwned=9>",
                   "user": "<script>window.__pwned=10</script>", "pwned": None}


class HostileProxy:
    """Serves the page from ignis but answers chat completions with a stream
    of hostile text cut at awkward places (mid-tag, mid-fence)."""

    def __init__(self, upstream: int):
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                st, h, b = http_req(upstream, "GET", self.path)
                self.send_response(st)
                for k in ("content-type", "content-security-policy", "x-content-type-options"):
                    if k in h:
                        self.send_header(k, h[k])
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                pieces = [HOSTILE[i:i + 7] for i in range(0, len(HOSTILE), 7)]
                for p in pieces:
                    ev = {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
                    time.sleep(0.005)
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(pieces),
                                                  "total_tokens": 5 + len(pieces)}}
                for ev in (end, usage):
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                proxy.posts += 1

        self.posts = 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_hostile_output_is_text_when_streamed(browser, srv: Serve):
    d = browser
    px = HostileProxy(srv.port)
    try:
        fresh(d, px.base)
        type_and_send(d, "Say something nasty.")
        wait_idle(d, 20)
        assert px.posts == 1
        assert_inert(d, "#messages .msg.assistant .body")
        stats = messages(d)[1]["stats"]
        assert stats.startswith(f"5 + {len(range(0, len(HOSTILE), 7))} tokens"), stats
    finally:
        px.httpd.shutdown()
        px.httpd.server_close()


def test_dashboard_moves_under_load(browser, srv: Serve, shots: Path):
    d = browser
    fresh(d, srv.base)
    d.find_element("id", "tab-dash").click()
    assert js(d, "return location.hash") == "#dashboard"
    assert d.find_element("id", "cards").is_displayed()
    assert not d.find_element("id", "messages").is_displayed()

    def val(metric):
        return float(js(d, "return document.querySelector("
                           "'.card[data-metric=\"' + arguments[0] + '\"] .value').dataset.raw || 'NaN'",
                        metric))
    wait_for(lambda: val("rss") > 50, 10, "RSS on the dashboard")
    # the memory card: weights + KV cache (~0.25 GiB) of the machine's memory;
    # no GPU busy card on the CPU backend
    wait_for(lambda: 0.2 < val("dmem") < 0.5, 10, "device memory on the dashboard")
    dmem = js(d, "return document.querySelector('.card[data-metric=\"dmem\"]').innerText")
    assert "Weights + KV cache" in dmem and re.search(r"0\.\d\d / \d+\.\d", dmem), dmem
    assert not d.find_element("css selector", '.card[data-metric="busy"]').is_displayed()
    assert "memory card shows the weights" in d.find_element("id", "dash-note").text
    info = js(d, "return document.getElementById('dash-info').innerText")
    assert "gemma-3-270m-q4_k_m" in info and "cpu" in info and "1024 per slot" in info

    done = threading.Event()

    def load(k):  # short requests back to back until the dashboard has seen them
        i = 0
        while not done.is_set():
            http_req(srv.port, "POST", "/v1/completions",
                     {"prompt": f"Story {k}.{i}: once upon a time", "max_tokens": 16,
                      "temperature": 0})
            i += 1
    ts = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    try:
        wait_for(lambda: val("running") >= 1, 30, "running sequences on the dashboard")
        wait_for(lambda: val("decode") > 1, 30, "decode tokens/s on the dashboard")
        wait_for(lambda: val("kv") > 0, 30, "KV cache use on the dashboard")
        wait_for(lambda: val("cpu") > 0.1, 30, "CPU use on the dashboard")
        d.save_screenshot(str(shots / "dashboard.png"))
    finally:
        done.set()
        for t in ts:
            t.join()
    wait_for(lambda: val("running") == 0 and val("decode") == 0, 10, "the dashboard to calm down")
    # every shown card has a drawn plot
    drawn = js(d, """return [...document.querySelectorAll('.card:not([hidden]) canvas')].map(c => {
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) n++; return n; })""")
    assert len(drawn) == 7 and all(n > 50 for n in drawn), drawn
    no_console_errors(d)


def test_api_key_asked_once_and_kept(browser, ignis_build: Path):
    d = browser
    s = Serve(binary_of(ignis_build), ["--api-key", API_KEY, "-t", "1", "--quiet"]).wait()
    try:
        d.get(s.base + "/")
        js(d, "localStorage.clear()")
        d.get(s.base + "/")
        wait_for(lambda: d.find_element("id", "key-dialog").is_displayed(), 10, "the key dialog")
        d.find_element("id", "key-input").send_keys("wrong")
        d.find_element("id", "key-ok").click()
        wait_for(lambda: "refused" in d.find_element("id", "key-dialog").text, 10, "a refusal")
        d.find_element("id", "key-input").send_keys(API_KEY)
        d.find_element("id", "key-ok").click()
        wait_for(lambda: js(d, "return document.getElementById('model').textContent"), 10, "status")
        assert js(d, "return localStorage.getItem('ignis.apiKey')") == API_KEY
        d.refresh()
        wait_for(lambda: js(d, "return document.getElementById('model').textContent"), 10, "status")
        assert not d.find_element("id", "key-dialog").is_displayed()
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------ images

def test_image_control_hidden_without_vision(browser, srv: Serve):
    """A text-only model: no attach button, and pasted or dropped images are
    not taken."""
    d = browser
    fresh(d, srv.base)
    assert js(d, "return document.getElementById('attach').hidden") is True
    assert not d.find_element("id", "attach").is_displayed()
    js(d, """const dt = new DataTransfer();
        dt.items.add(new File([new Uint8Array([137, 80, 78, 71])], 'a.png', {type: 'image/png'}));
        document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true}));
        document.querySelector('.conversation').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));""")
    time.sleep(0.3)
    assert js(d, "return document.getElementById('attachments').hidden") is True
    assert js(d, "return document.querySelectorAll('#attachments img').length") == 0


@pytest.fixture(scope="module")
def vlm(ignis_build: Path, tmp_path_factory):
    """`ignis serve` of the tiny vision-language model of tests/fixtures."""
    from test_vision_serve import VLM, _tokenizer
    d = tmp_path_factory.mktemp("vlm-webui")
    for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
        shutil.copy(VLM / f, d / f)
    (d / "tokenizer.json").write_text(json.dumps(_tokenizer()))
    s = Serve(binary_of(ignis_build), ["--parallel", "1", "-t", "1", "--quiet"], model=d)
    try:
        yield s.wait()
    finally:
        assert s.stop() == 0


def test_image_attach_is_sent_as_a_content_part(browser, vlm: Serve, shots: Path):
    from test_vision_serve import VLM
    d = browser
    fresh(d, vlm.base, settings={"temperature": "0", "max_tokens": "4"})
    wait_for(lambda: d.find_element("id", "attach").is_displayed(), 10, "the attach button")
    # the request bodies the page sends
    js(d, """window.__bodies = [];
        const f = window.fetch;
        window.fetch = (u, o) => { if (o && o.body) window.__bodies.push(JSON.parse(o.body)); return f(u, o); };""")
    png = (VLM / "exact.png").read_bytes()
    d.find_element("id", "file").send_keys(str(VLM / "exact.png"))
    wait_for(lambda: js(d, "return document.querySelectorAll('#attachments .thumb img').length") == 1, 10,
             "the thumbnail of the attached image")
    # paste and drop take images too; a GIF is refused with a note; x removes
    js(d, """const dt = new DataTransfer();
        dt.items.add(new File([new Uint8Array([71, 73, 70, 56])], 'x.gif', {type: 'image/gif'}));
        document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true}));""")
    wait_for(lambda: "only PNG and JPEG" in d.find_element("id", "attachments").text, 10, "the refusal")
    js(d, """const dt = new DataTransfer();
        dt.items.add(new File([Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0))], 'p.png', {type: 'image/png'}));
        document.querySelector('.conversation').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));""",
       base64.b64encode(png).decode())
    wait_for(lambda: js(d, "return document.querySelectorAll('#attachments .thumb img').length") == 2, 10,
             "the dropped image")
    d.find_element("css selector", "#attachments .thumb:nth-child(2) .remove").click()
    assert js(d, "return document.querySelectorAll('#attachments .thumb img').length") == 1

    type_and_send(d, "hi")
    wait_idle(d, 60)
    m = messages(d)
    assert [x["role"] for x in m] == ["user", "assistant"], m
    # usage came with the stream, and text before it (the time to the first
    # token is measured on text chunks); the tiny model may be too quick for
    # a decode speed
    s = re.match(r"^(\d+) \+ (\d+) tokens · .*[\d.]+ s to first token", m[1]["stats"])
    assert s, m[1]["stats"]
    assert 1 <= int(s.group(2)) <= 4
    # the image shows in the question, decoded
    assert js(d, "const i = document.querySelector('.msg.user .thumb img'); return i && i.naturalWidth") > 0
    assert js(d, "return document.getElementById('attachments').hidden") is True
    # one request: the image as a data: URL part before the text
    bodies = js(d, "return window.__bodies")
    assert len(bodies) == 1
    content = bodies[0]["messages"][-1]["content"]
    assert content == [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
                       {"type": "text", "text": "hi"}]
    # the image's tokens were in the prompt: 4 placeholders, the markers and
    # "\n\n" on either side, against the same text alone
    st, _, b = http_req(vlm.port, "POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert st == 200
    assert int(s.group(1)) - json.loads(b)["usage"]["prompt_tokens"] == 10
    # kept with the conversation
    stored = stored_conv(d)["messages"][0]
    assert stored["images"] == [content[0]["image_url"]["url"]]
    d.refresh()
    wait_for(lambda: js(d, "return document.querySelectorAll('.msg.user .thumb img').length") == 1, 10,
             "the image after a reload")
    d.save_screenshot(str(shots / "chat-image.png"))
    no_console_errors(d)


def test_dashboard_gpu_cards_on_vulkan(browser, ignis_build: Path, shots: Path):
    """On a Vulkan device (lavapipe here): the device memory card shows
    used / budget, and the GPU busy card a share of the time while a
    request runs."""
    r = subprocess.run([str(binary_of(ignis_build)), "devices"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or "usable: yes" not in r.stdout:
        pytest.skip("no usable Vulkan device")
    s = Serve(binary_of(ignis_build), ["--backend", "vulkan", "--parallel", "1", "--ctx", "256", "-t", "2",
                                       "--quiet"]).wait(timeout=300)
    d = browser
    try:
        fresh(d, s.base)
        d.find_element("id", "tab-dash").click()

        def val(metric):
            return float(js(d, "return document.querySelector("
                               "'.card[data-metric=\"' + arguments[0] + '\"] .value').dataset.raw || 'NaN'", metric))
        wait_for(lambda: val("dmem") > 0.2, 10, "device memory on the dashboard")
        card = js(d, "return document.querySelector('.card[data-metric=\"dmem\"]').innerText")
        assert "Device memory used / budget" in card
        used, budget = map(float, re.search(r"([\d.]+) / ([\d.]+)", card).groups())
        assert 0.2 < used < budget  # GiB: weights, cache and activations of the 270M; lavapipe's 2 GiB heap
        assert d.find_element("css selector", '.card[data-metric="busy"]').is_displayed()
        t = threading.Thread(target=http_req, args=(s.port, "POST", "/v1/completions"),
                             kwargs={"body": {"prompt": "Once upon a time", "max_tokens": 3}, "timeout": 300})
        t.start()
        try:
            wait_for(lambda: 0 < val("busy") <= 100, 120, "GPU busy time on the dashboard")
            d.save_screenshot(str(shots / "dashboard-vulkan.png"))
        finally:
            t.join()
        no_console_errors(d)
    finally:
        assert s.stop() == 0
