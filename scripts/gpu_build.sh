#!/usr/bin/env bash
# Builds the GPU binaries here for the lent H200 (sm_90a, static third-party
# libraries), strips them and stages them in .devbin/ (git-ignored) with the shared
# libraries they need that the GPU machine lacks. Pass .devbin in the device tool's
# `carry` and run scripts/gpu_suite.sh there.
# Usage: scripts/gpu_build.sh [extra ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-gpu
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTACHYON_CUDA=ON \
    -DTACHYON_CUDA_ARCHS=90a -DTACHYON_STATIC_DEPS=ON >/dev/null
fi
TARGETS=(tachyon tachyon_cuda_tests "$@")
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target "${TARGETS[@]}"
rm -rf .devbin && mkdir -p .devbin
for t in "${TARGETS[@]}"; do
  f=$(find "$BUILD_DIR" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "gpu_build: $t not built" >&2; exit 1; }
  strip -o ".devbin/$t" "$f"
done
cp -L /usr/lib/x86_64-linux-gnu/libsentencepiece.so.0 .devbin/
du -sh .devbin
