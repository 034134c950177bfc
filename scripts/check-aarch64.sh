#!/bin/sh
# Cross-compiles the library for aarch64 (the NEON kernels included; without
# the image decoders, whose arm64 libraries a build machine rarely has) with the
# project's warnings-as-errors, so the ARM path keeps compiling on machines
# where no ARM processor runs the tests. Installs Debian's
# gcc-aarch64-linux-gnu when it is missing.
#   scripts/check-aarch64.sh [BUILD_DIR]   (default build-aarch64)
set -e
cc=aarch64-linux-gnu-gcc
if ! command -v "$cc" >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    echo "installing gcc-aarch64-linux-gnu"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
fi
b="${1:-build-aarch64}"
cmake -S . -B "$b" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER="$cc" \
    -DIGNIS_VULKAN=OFF -DIGNIS_IMAGES=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$b" -j "$(nproc 2>/dev/null || echo 2)" --target ignis_obj >/dev/null
echo "aarch64 cross-build of the library (NEON kernels included): ok"
