#!/bin/sh
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) with clang in
# their own build directory and runs each for FUZZ_SECONDS (default 60), one
# after another, on a scratch copy of its seed corpus (the repository's
# corpus never grows by itself). Fails when any target finds a crash, leak,
# hang (FUZZ_TIMEOUT seconds for one input, default 30) or sanitizer report;
# the inputs that did so are kept under BUILD_DIR/artifacts/TARGET/.
# Installs Debian's clang when it is missing.
#   scripts/fuzz.sh [TARGET...]        (default: all of them)
#   env: FUZZ_SECONDS, FUZZ_TIMEOUT, FUZZ_BUILD (default build-fuzz), FUZZ_JOBS
set -e
cd "$(dirname "$0")/.."
if ! command -v clang >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    echo "installing clang"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang >/dev/null
fi
b="${FUZZ_BUILD:-build-fuzz}"
secs="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
CC=clang cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
    -DIGNIS_FUZZ=ON -DIGNIS_VULKAN=OFF >/dev/null
cmake --build "$b" -j "$jobs" --target ignis_fuzz >/dev/null
targets="$*"
[ -n "$targets" ] || targets="json gguf hf tokenizer_json tokenize chat request image grammar"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ignis-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cat tests/fuzz/json.dict tests/fuzz/gbnf.dict >"$scratch/grammar.dict"
failed=""
for t in $targets; do
    case $t in
    json | request | tokenizer_json | hf) dict="-dict=tests/fuzz/json.dict" ;;
    grammar) dict="-dict=$scratch/grammar.dict" ;;
    *) dict="" ;;
    esac
    mkdir -p "$scratch/$t" "$b/artifacts/$t"
    cp tests/fuzz/corpus/"$t"/* "$scratch/$t/"
    echo "fuzz_$t: ${secs}s"
    if ! "$b/fuzz_$t" $dict -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-30}" \
        -print_final_stats=1 -artifact_prefix="$b/artifacts/$t/" "$scratch/$t" \
        >"$scratch/$t.log" 2>&1; then
        tail -n 60 "$scratch/$t.log"
        failed="$failed $t"
    fi
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$scratch/$t.log" | tail -n 2 || true
done
if [ -n "$failed" ]; then
    echo "fuzzing found problems in:$failed (inputs under $b/artifacts/)"
    exit 1
fi
echo "fuzzing: no crash in $targets (${secs}s each)"
