#!/bin/sh
# Installs the Debian packages ignis needs to build and test, if missing.
set -e
# Vulkan: headers + glslc to build the GPU backend, Mesa's lavapipe to test it on
# any machine (the backend loads libvulkan at run time and is optional).
pkgs="build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev python3 python3-venv python3-pip unzip libvulkan-dev glslc mesa-vulkan-drivers"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing >/dev/null
