#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool, with .devbin carried): the CUDA op
# tests and the conformance suite on the GPU. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.devbin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
rc=0
for t in tachyon_cuda_tests tachyon_conformance_tests; do
  [ -x ".devbin/$t" ] || continue
  echo "== $t"
  ".devbin/$t" --gtest_brief=1 "$@" 2>&1 | tee "$OUT/$t.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit $rc
