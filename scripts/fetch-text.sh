#!/bin/sh
# Fetches the evaluation text for `ignis perplexity`: the King James Version
# of the Bible (public domain, ~790k words, ~1M Gemma 3 tokens), from the
# Debian packages bible-kjv (reader) and bible-kjv-text (compressed text):
#
#   scripts/fetch-text.sh [OUTPUT]   (default ~/.cache/ignis/kjv.txt)
#
# Needs apt-get (download only, nothing is installed) and dpkg-deb. The
# text is one verse per line, verse references removed; its SHA-256 is
# checked. Idempotent.
set -e
out="${1:-$HOME/.cache/ignis/kjv.txt}"
want=b5c4940bcfeee072c0935b5200d0f9d88a00a0199cb0961d16133458fcdfae5d
[ -f "$out" ] && exit 0
mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching the KJV text from the Debian packages bible-kjv, bible-kjv-text" >&2
(cd "$tmp" && apt-get download -q bible-kjv bible-kjv-text >/dev/null 2>&1) || {
    echo "apt-get download failed (run 'apt-get update' first?)" >&2
    exit 1
}
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
# One verse per line ("Ge1:1 In the beginning ..."); drop the reference.
"$tmp/root/usr/bin/bible" -p "$tmp/root/usr/lib" -f Gen1:1-Rev22:21 \
    | sed 's/^[^ ]*[0-9]:[0-9]* //' > "$out.tmp"
got="$(sha256sum "$out.tmp" | awk '{print $1}')"
if [ "$got" != "$want" ]; then
    rm -f "$out.tmp"
    echo "checksum mismatch for the text ($got, want $want)" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "text ready: $out" >&2
