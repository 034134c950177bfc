#!/bin/sh
# Builds llama.cpp, the reference implementation, OUTSIDE the repository from
# the source vendored in the PyPI `llama-cpp-python` sdist (pinned below):
#
#   scripts/build-llamacpp.sh [--cpu|--vulkan|--cuda] [--lib] [--jobs N] [--force]
#
# Source:  $IGNIS_CACHE/llamacpp/src           (the extracted sdist;
#          llama.cpp itself is in src/vendor/llama.cpp)
# Build:   $IGNIS_CACHE/llamacpp/build         (CPU, Release, GGML_NATIVE=ON)
#          $IGNIS_CACHE/llamacpp/build-vulkan  (--vulkan)
#          $IGNIS_CACHE/llamacpp/build-cuda    (--cuda)
# IGNIS_CACHE defaults to ~/.cache/ignis. Idempotent: a finished build is
# skipped (--force rebuilds). The last line printed is the binary directory
# (llama-bench, llama-server, llama-cli, llama-simple, llama-speculative-simple,
# llama-lookup, llama-quantize, llama-imatrix, llama-mtmd-cli (images:
# encoder + projector), ... libllama.so, and libllama-common.so, whose JSON
# Schema to grammar converter bench/vs-llamacpp-grammar links).
# --lib builds libllama.so alone, all the tests need (a few minutes on two
# cores; CI builds it so); a later call without it adds the tools.
# Builds with nice and -j2 by default (JOBS env or --jobs overrides).
set -e

LLAMA_CPP_PYTHON_VERSION=0.3.36   # vendors ggml-org/llama.cpp@0c1e57098

backend=cpu
force=0
lib=0
jobs="${JOBS:-2}"
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) backend=cpu ;;
        --vulkan) backend=vulkan ;;
        --cuda) backend=cuda ;;
        --force) force=1 ;;
        --lib) lib=1 ;;
        --jobs) shift; jobs="$1" ;;
        --jobs=*) jobs="${1#--jobs=}" ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "build-llamacpp.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

cache="${IGNIS_CACHE:-$HOME/.cache/ignis}"
root="$cache/llamacpp"
src="$root/src"
case "$backend" in
    cpu) build="$root/build"; extra="" ;;
    vulkan) build="$root/build-vulkan"; extra="-DGGML_VULKAN=ON" ;;
    cuda) build="$root/build-cuda"; extra="-DGGML_CUDA=ON" ;;
esac
bin="$build/bin"
stamp="$build/.ignis-built"
want="llama-cpp-python $LLAMA_CPP_PYTHON_VERSION $backend no-amx"
targets="llama llama-common llama-bench llama-server llama-cli llama-simple llama-completion llama-tokenize llama-batched-bench llama-perplexity llama-quantize llama-imatrix llama-speculative-simple llama-lookup llama-mtmd-cli"
if [ "$lib" = 1 ]; then
    want="$want lib"
    targets="llama"
    # a full build serves too
    if [ "$force" = 0 ] && [ -f "$stamp" ] && [ -f "$bin/libllama.so" ] && grep -q "^llama-cpp-python $LLAMA_CPP_PYTHON_VERSION $backend no-amx" "$stamp"; then
        echo "$bin"
        exit 0
    fi
fi

if [ "$force" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-speculative-simple" ] \
        && [ -x "$bin/llama-lookup" ] && [ -x "$bin/llama-imatrix" ] && [ -x "$bin/llama-mtmd-cli" ] \
        && [ -f "$bin/libllama.so" ] && [ -f "$bin/libllama-common.so" ]; then
    echo "$bin"
    exit 0
fi

# 1. Source: the sdist, downloaded with pip (no install, no build).
if [ ! -f "$src/.ignis-version" ] || [ "$(cat "$src/.ignis-version")" != "$LLAMA_CPP_PYTHON_VERSION" ]; then
    dl="$root/dl"
    mkdir -p "$dl"
    sdist="$dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    if [ ! -f "$sdist" ]; then
        echo "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist" >&2
        python3 -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
            -d "$dl" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
    fi
    rm -rf "$src"
    mkdir -p "$src"
    tar -xzf "$sdist" -C "$src" --strip-components=1
    echo "$LLAMA_CPP_PYTHON_VERSION" > "$src/.ignis-version"
fi
lsrc="$src/vendor/llama.cpp"
[ -f "$lsrc/CMakeLists.txt" ] || { echo "no llama.cpp in $lsrc" >&2; exit 1; }

# The sdist has no git metadata: take the upstream commit from its changelog.
commit="$(sed -n "/^## \[$LLAMA_CPP_PYTHON_VERSION\]/,/^## \[/p" "$src/CHANGELOG.md" \
    | sed -n 's/.*llama\.cpp@\([0-9a-f]\{7,40\}\).*/\1/p' | head -n 1)"
[ -n "$commit" ] || commit=unknown

# 2. Configure and build (only the targets we use; no web UI download, no TLS).
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
start=$(date +%s)
# GGML_NATIVE turns on ggml's AMX kernels where the CPU lists AMX, but a VM
# may not grant the tile state: llama-bench then dies on its first
# `tilezero` (SIGILL, seen on this project's Xeon build machines). Explicit
# -mno-amx-* win over -march=native in GCC, so the rest stays native.
noamx=""
if grep -q amx_tile /proc/cpuinfo 2>/dev/null; then noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
# shellcheck disable=SC2086
cmake -S "$lsrc" -B "$build" $gen \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMIT="$commit" \
    -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" $extra >&2
# shellcheck disable=SC2086
nice -n 10 cmake --build "$build" -j "$jobs" --target $targets >&2
echo "llama.cpp ($commit, $backend) built in $(( $(date +%s) - start )) s" >&2
printf '%s\n' "$commit" > "$build/.ignis-commit"
printf '%s\n' "$want" > "$stamp"
echo "$bin"
