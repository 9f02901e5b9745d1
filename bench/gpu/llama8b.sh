#!/usr/bin/env bash
# The Llama-3-8B figures of issue 7 in one call on the GPU machine: correctness first
# (the CUDA op/model/graph tests and the bf16 conformance fixtures on the GPU), then
# tachyon_gpu_bench on a random Llama-3-8B-shaped checkpoint (bench/gpu/
# llama3_8b_config.json, 16 GB written on the device) -- prefill 1x1024 and 8x1024,
# decode at batch 1 and 64 with 1024-token contexts (device sampling, graphs, eager),
# single-op GEMM and attention rates -- then transformers on the same shape
# (bench/gpu/hf_baseline.py), and one table: figure, ours, transformers, roofline,
# ratios (bench/gpu/llama8b_table.py). Logs go to $OUT.
#
# Build here first: STAGE=<dir> scripts/gpu_build.sh (stages the binaries in bins.txz).
# On the GPU machine, from the repository root, with <dir> carried:
#   SRC_DIR=<source path of the build> bash bench/gpu/llama8b.sh <dir>
# (the companion files -- llama3_8b_config.json, hf_baseline.py, llama8b_table.py,
# ncu_summary.py, smi_summary.py -- are read from this script's folder, so a copy of
# the six next to the binaries works too). SKIP_TESTS=1 skips the tests; SKIP_HF=1
# skips transformers; SKIP_BENCH=1 the step benchmark; SERVING=1 adds the serving
# benchmark; an nvidia-smi trace of clocks and power runs beside it all; CUDA_TEST_FILTER
# narrows the CUDA tests (a gtest filter); KERNELS=1 adds tachyon_kernel_bench (the
# matrix-vector kernel against cuBLASLt and row kernels at the model's shapes,
# event-timed); PROFILE=1 adds an ncu
# pass over one prefill and two decode steps (bench/gpu/ncu_summary.py prints it);
# VARIANTS="A=1 B=0,C=1" reruns the decode figures once per comma-separated set of
# environment settings (the checkpoint is written once and kept; VARIANT_ARGS replaces
# their figures, "--prefill 1x1024,8x1024 --decode 1,64 --ctx 1024"); CONFORMANCE_F32=1 also
# runs the conformance fixtures in f32 on the GPU.
set -uo pipefail
ROOT=$(pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:?usage: llama8b.sh STAGE_DIR}
BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -f "$BIN/bins.txz" ] && [ ! -x "$BIN/tachyon_gpu_bench" ]; then
  (cd "$BIN" && tar xJf bins.txz)
fi
export LD_LIBRARY_PATH=$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ -n "${SRC_DIR:-}" ] && [ "$SRC_DIR" != "$ROOT" ] && [ ! -e "$SRC_DIR" ]; then
  mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$ROOT" "$SRC_DIR"
fi
CONFIG=$HERE/llama3_8b_config.json
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
# Clocks and power beside the whole run (prefill and serving steps hold the board at its
# power limit, which lowers the SM clock; bench/gpu/smi_summary.py prints how much).
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 >"$OUT/smi.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
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
  run cuda_tests 360 "$BIN/tachyon_cuda_tests" ${CUDA_TEST_FILTER:+--gtest_filter=$CUDA_TEST_FILTER} ||
    FAIL=1
  if [ -d tests/conformance/fixtures ]; then  # (left out of trees sent without them)
    run conformance_bf16 90 env TACHYON_DEVICE=cuda "$BIN/tachyon_conformance_tests" || FAIL=1
    if [ -n "${CONFORMANCE_F32:-}" ]; then
      run conformance_f32 90 env TACHYON_DEVICE=cuda TACHYON_DTYPE=f32 \
        "$BIN/tachyon_conformance_tests" || FAIL=1
    fi
  fi
  grep -E '^  (f32|bf16): .*graph replays' "$OUT/cuda_tests.log"
  grep -E ' (decode|gemm|flash) ' "$OUT/cuda_tests.log" | sort -k5 -g | tail -3
fi
if [ -n "${KERNELS:-}" ] && [ -x "$BIN/tachyon_kernel_bench" ]; then
  # shellcheck disable=SC2086
  run kernels 240 "$BIN/tachyon_kernel_bench" --config "$CONFIG" ${KERNEL_ARGS:-}
  grep -vE '^RESULT' "$OUT/kernels.log"
fi
BENCH_ARGS=(--config "$CONFIG" --dir /tmp/tachyon_8b --keep-model)
if [ -z "${SKIP_BENCH:-}" ]; then
  run bench8b 300 "$BIN/tachyon_gpu_bench" "${BENCH_ARGS[@]}" \
    --prefill 1x1024,8x1024 --decode 1,64 --ctx 1024 || FAIL=1
  grep -vE '^RESULT' "$OUT/bench8b.log"
fi
if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
  run ncu 240 ncu --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv "$BIN/tachyon_gpu_bench" "${BENCH_ARGS[@]}" \
    --ctx 1024 --profile-steps
  python3 "$HERE/ncu_summary.py" "$OUT/ncu.log" | tee "$OUT/ncu_summary.txt" | head -90
fi
if [ -n "${VARIANTS:-}" ]; then
  IFS=',' read -r -a SETS <<<"$VARIANTS"
  for i in "${!SETS[@]}"; do
    echo "== variant ${SETS[$i]}"
    # shellcheck disable=SC2086
    run "variant$i" 200 env ${SETS[$i]} "$BIN/tachyon_gpu_bench" "${BENCH_ARGS[@]}" \
      ${VARIANT_ARGS:---prefill 1x1024,8x1024 --decode 1,64 --ctx 1024} --no-ops
    grep -E '^(prefill|decode)' "$OUT/variant$i.log"
  done
fi
if [ -z "${SKIP_HF:-}" ]; then
  run hf8b 240 env PYTHONUNBUFFERED=1 python3 "$HERE/hf_baseline.py" --config "$CONFIG" \
    --decode 1,64 --ctx 1024 --no-generate
  cat "$OUT/hf8b.log" | grep figure
fi
# The table (before serving, so that a call that runs out of time still has it).
if [ -z "${SKIP_BENCH:-}" ]; then
  echo
  python3 "$HERE/llama8b_table.py" "$CONFIG" "$OUT/bench8b.log" "$OUT/hf8b.log" | tee "$OUT/table.md"
fi
# Serving (SERVING=1): `tachyon bench` through the engine (device sampling, graphs),
# SERVING_REQUESTS requests (default 1000) of 1000 prompt and 1000 output tokens, all
# submitted at once; SERVING_SEQS sequences in flight (default 512), SERVING_ARGS more
# flags (e.g. "--kv-cache-dtype fp8"). SERVING_VARIANTS="FLAGS|FLAGS|..." runs it once
# per set of further flags, in that order (A/B runs in one call, e.g.
# "--overlap-steps off|--overlap-steps on"); logs serving8b.log, serving8b_1.log, ...
if [ -n "${SERVING:-}" ]; then
  N=${SERVING_REQUESTS:-1000}
  MODEL=/tmp/tachyon_8b/model  # the step benchmark's checkpoint when it kept one
  if [ ! -f "$MODEL/config.json" ]; then
    MODEL=/tmp/tachyon_8b_serve
    run make8b 240 "$BIN/tachyon" make-random --config "$CONFIG" --out "$MODEL" || FAIL=1
  fi
  IFS='|' read -r -a SV <<<"${SERVING_VARIANTS:-}"
  [ ${#SV[@]} -eq 0 ] && SV=("")
  for i in "${!SV[@]}"; do
    name=serving8b
    [ "$i" -gt 0 ] && name=serving8b_$i
    echo "== serving: ${SERVING_ARGS:-} ${SV[$i]}"
    # shellcheck disable=SC2086
    run "$name" 420 "$BIN/tachyon" bench --model "$MODEL" --num-requests "$N" \
      --input-len 1000 --output-len 1000 --concurrency "$N" \
      --max-num-seqs "${SERVING_SEQS:-512}" --max-batch-tokens 8192 ${SERVING_ARGS:-} \
      ${SV[$i]} || FAIL=1
    grep -vE '^I |^W ' "$OUT/$name.log"
  done
fi
kill $SMI 2>/dev/null
python3 "$HERE/smi_summary.py" "$OUT/smi.csv"
echo "total $((SECONDS - T0)) s, failures: $FAIL"
exit $FAIL
