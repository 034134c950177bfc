#!/usr/bin/env python3
"""Screenshots of the web page for the documentation: the chat after one
real exchange and the dashboard after a minute of load, in headless Chromium
at 1280x800 in the light theme, reduced to 256 colours.

    .venv/bin/python scripts/webui-screenshots.py [--build build] [--model M.gguf] [--out docs/images]

Needs chromium, chromedriver, selenium and Pillow (the test venv has them)."""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.keys import Keys

ROOT = Path(__file__).resolve().parents[1]


def post(port: int, body: dict) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    c.getresponse().read()
    c.close()


def wait(fn, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if fn():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def save(d, path: Path) -> None:
    raw = path.with_suffix(".raw.png")
    d.save_screenshot(str(raw))
    Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    raw.unlink()
    print(f"{path}: {path.stat().st_size} bytes")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=str(Path.home() / ".cache/ignis/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--out", default=str(ROOT / "docs/images"))
    ap.add_argument("--load-seconds", type=float, default=75)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([str(ROOT / a.build / "ignis"), "serve", a.model, "--port", str(port), "--parallel", "4",
                            "-t", "2", "--quiet"], stderr=subprocess.DEVNULL)
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for o in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800",
              "--force-device-scale-factor=1", "--no-first-run"):
        opts.add_argument(o)
    d = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 800, "deviceScaleFactor": 1,
                                                                  "mobile": False})
        base = f"http://127.0.0.1:{port}"
        wait(lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/health") or True,
             120, "the server")
        d.get(base + "/")
        d.execute_script("localStorage.clear(); localStorage.setItem('ignis.settings', arguments[0]);",
                         json.dumps({"temperature": "0", "max_tokens": "40"}))
        d.get(base + "/")
        wait(lambda: d.execute_script("return document.getElementById('conn').className") == "conn ok", 300,
             "the model")
        box = d.find_element("id", "input")
        box.send_keys("Explain what a prime number is, briefly.")
        box.send_keys(Keys.ENTER)
        wait(lambda: d.execute_script("return document.body.dataset.busy === '' && "
                                      "!!document.querySelector('.msg.assistant .stats').textContent"), 300, "the answer")
        d.find_element("css selector", "#settings summary").click()
        save(d, out / "webui-chat.png")

        # the dashboard: a minute of short requests from four clients
        d.find_element("id", "tab-dash").click()
        done = threading.Event()

        def client(k: int) -> None:
            i = 0
            while not done.is_set():
                post(port, {"prompt": f"Story {k}.{i}: once upon a time", "max_tokens": 24 + 8 * k,
                            "temperature": 0.8})
                i += 1
                time.sleep(0.5 * k)
        ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        time.sleep(a.load_seconds)
        save(d, out / "webui-dashboard.png")
        done.set()
        for t in ts:
            t.join()
    finally:
        d.quit()
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
