#!/usr/bin/env bash
# Builds the GPU binaries here for the lent H200 (sm_90a, static third-party
# libraries), strips them and stages them, compressed, with scripts/gpu_suite.sh and the
# shared libraries they need that the GPU machine lacks, in STAGE (default .devbin,
# git-ignored; the device tool sends /work/main's tree, so stage in
# /work/main/.devbin-cuda when building in a worktree). On the GPU machine, with STAGE
# carried:
#   cd STAGE && tar xJf bins.txz && cd .. && SRC_DIR=<this checkout> bash STAGE/gpu_suite.sh STAGE
# (SRC_DIR: the tests read data through the source path compiled into them.)
# Usage: [STAGE=dir] [GPU_TARGETS="t1 t2"] [PROBE=1] scripts/gpu_build.sh [extra ninja targets...]
#   GPU_TARGETS replaces the default target list (e.g. only the test binaries).
#   PROBE=1 builds the flash kernel's diagnostic form (src/backend/cuda/flash_probe.cuh;
#   only that file recompiles, and the next build without PROBE=1 switches it back).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-gpu
STAGE=${STAGE:-.devbin}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTACHYON_CUDA=ON \
    -DTACHYON_CUDA_ARCHS=90a -DTACHYON_STATIC_DEPS=ON >/dev/null
fi
PROBE_WANT=$([ "${PROBE:-0}" = 1 ] && echo ON || echo OFF)
PROBE_HAVE=$(grep -s '^TACHYON_FLASH_PROBE:BOOL=' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2 || true)
if [ "$PROBE_WANT" != "${PROBE_HAVE:-OFF}" ]; then
  cmake -S . -B "$BUILD_DIR" -DTACHYON_FLASH_PROBE="$PROBE_WANT" >/dev/null
fi
TARGETS=(tachyon tachyon_cuda_tests tachyon_conformance_tests tachyon_engine_tests
  tachyon_frontend_tests tachyon_gpu_bench tachyon_kernel_bench)
if [ -n "${GPU_TARGETS:-}" ]; then read -r -a TARGETS <<<"$GPU_TARGETS"; fi
TARGETS+=("$@")
# tachyon and the test binaries open the CUDA backend, libtachyon_cuda.so, from their
# own folder: built and staged with them.
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target "${TARGETS[@]}" tachyon_cuda
rm -rf "$STAGE" && mkdir -p "$STAGE/bin"
for t in "${TARGETS[@]}"; do
  f=$(find "$BUILD_DIR" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "gpu_build: $t not built" >&2; exit 1; }
  strip -o "$STAGE/bin/$t" "$f"
done
strip -o "$STAGE/bin/libtachyon_cuda.so" "$BUILD_DIR/libtachyon_cuda.so"
# Shared libraries from Debian that the binaries still need (no static archive, or a
# CMake package that names the shared one), and CUPTI for tachyon_gpu_bench --trace:
# copied beside them (found through $ORIGIN).
for b in "$STAGE"/bin/*; do
  ldd "$b" | awk '/lib(sentencepiece|simdjson|yaml-cpp|cupti)[^ ]*\.so/ && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$STAGE/bin/"; done
# xz at its largest dictionary compresses across the binaries (they share most of their
# code): about 7 MB for all of them instead of 31 MB with gzip.
(cd "$STAGE/bin" && tar cf - ./* | xz -9 -T2 >../bins.txz)
rm -rf "$STAGE/bin"
cp scripts/gpu_suite.sh bench/gpu/{llama8b.sh,llama3_8b_config.json,hf_baseline.py,llama8b_table.py,ncu_summary.py,smi_summary.py,flash_probe.py} "$STAGE/"
du -sh "$STAGE"
