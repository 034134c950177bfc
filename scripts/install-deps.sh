#!/bin/sh
# Installs the Debian packages ignis needs to build and test, if missing.
set -e
# Vulkan: headers + glslc to build the GPU backend, Mesa's lavapipe to test it on
# any machine (the backend loads libvulkan at run time and is optional).
pkgs="build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev python3 python3-venv python3-pip unzip libpng-dev libjpeg62-turbo-dev libvulkan-dev glslc mesa-vulkan-drivers"
# headless Chromium and its WebDriver for the web page's browser tests
# (tests/e2e/test_webui.py)
pkgs="$pkgs chromium chromium-driver"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq $missing >/dev/null
fi
# glslang 13 for the KHR cooperative-matrix shaders (tensor cores on AMD and
# Intel GPUs; Debian 12's compiler cannot build them): a build tool from
# PyPI, optional (without it those shaders are left out)
"$(dirname "$0")/fetch-glslang.sh" || echo "note: no glslang 13; the KHR cooperative-matrix shaders will not be built" >&2
