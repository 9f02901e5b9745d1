#!/usr/bin/env bash
# The Llama-3-8B figures of issue 7 in one call on the GPU machine: correctness first
# (the CUDA op/model/graph tests and the bf16 conformance fixtures on the GPU), then
# tachyon_gpu_bench on a random Llama-3-8B-shaped checkpoint (bench/gpu/
# llama3_8b_config.json, 16 GB written on the device) -- prefill 1x1024 and 8x1024,
# decode at batch 1 and 64 with 1024-token contexts (graphs on and off), single-op
# GEMM and attention rates -- then transformers on the same shape
# (bench/gpu/hf_baseline.py), and one table: figure, ours, transformers, roofline,
# ratios (bench/gpu/llama8b_table.py). Logs go to $OUT.
#
# Build here first: STAGE=<dir> scripts/gpu_build.sh (stages the binaries in bins.tgz).
# On the GPU machine, from the repository root, with <dir> carried:
#   SRC_DIR=<source path of the build> bash bench/gpu/llama8b.sh <dir>
# (the companion files -- llama3_8b_config.json, hf_baseline.py, llama8b_table.py --
# are read from this script's folder, so a copy of the four next to the binaries works
# too). SKIP_TESTS=1 skips the tests; SKIP_HF=1 skips transformers; SKIP_BENCH=1 the
# step benchmark; SERVING=1 adds the serving benchmark; CUDA_TEST_FILTER
# narrows the CUDA tests (a gtest filter).
set -uo pipefail
ROOT=$(pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:?usage: llama8b.sh STAGE_DIR}
BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -f "$BIN/bins.tgz" ] && [ ! -x "$BIN/tachyon_gpu_bench" ]; then
  (cd "$BIN" && tar xzf bins.tgz)
fi
export LD_LIBRARY_PATH=$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ -n "${SRC_DIR:-}" ] && [ "$SRC_DIR" != "$ROOT" ] && [ ! -e "$SRC_DIR" ]; then
  mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$ROOT" "$SRC_DIR"
fi
CONFIG=$HERE/llama3_8b_config.json
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
T0=$SECONDS
run() {  # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc ($((SECONDS - t)) s)"
  grep -E '^\[  PASSED|^\[  FAILED|tests ran|Failure$|error|what\(\)' "$OUT/$name.log" | head -20
  return $rc
}
FAIL=0
if [ -z "${SKIP_TESTS:-}" ]; then
  run cuda_tests 260 "$BIN/tachyon_cuda_tests" ${CUDA_TEST_FILTER:+--gtest_filter=$CUDA_TEST_FILTER} ||
    FAIL=1
  run conformance_bf16 90 env TACHYON_DEVICE=cuda "$BIN/tachyon_conformance_tests" || FAIL=1
  grep -E '^  (f32|bf16): .*graph replays' "$OUT/cuda_tests.log"
  grep -E ' (decode|gemm|flash) ' "$OUT/cuda_tests.log" | sort -k5 -g | tail -3
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  run bench8b 300 "$BIN/tachyon_gpu_bench" --config "$CONFIG" --dir /tmp/tachyon_8b \
    --prefill 1x1024,8x1024 --decode 1,64 --ctx 1024 || FAIL=1
  grep -vE '^RESULT' "$OUT/bench8b.log"
fi
if [ -z "${SKIP_HF:-}" ]; then
  run hf8b 240 env PYTHONUNBUFFERED=1 python3 "$HERE/hf_baseline.py" --config "$CONFIG" \
    --decode 1,64 --ctx 1024 --no-generate
  cat "$OUT/hf8b.log" | grep figure
fi
# Serving (SERVING=1): `tachyon bench` through the engine (device sampling, graphs),
# SERVING_REQUESTS requests (default 1000) of 1000 prompt and 1000 output tokens, all
# submitted at once.
if [ -n "${SERVING:-}" ]; then
  N=${SERVING_REQUESTS:-1000}
  run make8b 240 "$BIN/tachyon" make-random --config "$CONFIG" --out /tmp/tachyon_8b_serve ||
    FAIL=1
  run serving8b 420 "$BIN/tachyon" bench --model /tmp/tachyon_8b_serve --num-requests "$N" \
    --input-len 1000 --output-len 1000 --concurrency "$N" --max-num-seqs 512 \
    --max-batch-tokens 8192 || FAIL=1
  cat "$OUT/serving8b.log"
fi
[ -n "${SKIP_BENCH:-}" ] && { echo "total $((SECONDS - T0)) s, failures: $FAIL"; exit $FAIL; }
echo
python3 "$HERE/llama8b_table.py" "$CONFIG" "$OUT/bench8b.log" "$OUT/hf8b.log" | tee "$OUT/table.md"
echo "total $((SECONDS - T0)) s, failures: $FAIL"
exit $FAIL
