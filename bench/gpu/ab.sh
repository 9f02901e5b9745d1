#!/usr/bin/env bash
# A/B in one call on the GPU machine, of builds (this one against STAGE/old) and of
# environment settings: the tests, then the attention rates and the 8 x 1024 / 1 x 1024
# prefill steps once per build and setting, alternated round by round (boards drift
# within a call), the
# kernel bench if asked for, then the flash kernel's diagnostic build's per-phase records
# if one was staged. Everything it writes goes into one archive, $OUT/ab.txz (the device
# tool brings back only a few files).
#
# Build here first:
#   STAGE=.devbin GPU_TARGETS="tachyon_cuda_tests tachyon_gpu_bench tachyon_kernel_bench" \
#     scripts/gpu_build.sh
#   (optional) PROBE=1 STAGE=/tmp/probe GPU_TARGETS=tachyon_gpu_bench scripts/gpu_build.sh
#              && mkdir -p .devbin/probe && cp /tmp/probe/bins.txz .devbin/probe/
#   (optional) a second build to compare against, its bins.txz in .devbin/old/
# On the GPU machine, from the repository root, with .devbin carried:
#   bash bench/gpu/ab.sh .devbin
# SETTINGS are the settings the prefill steps compare, space-separated, each a
# comma-separated list of VAR=value or as-built (the default: no variable set);
# ATTN_SETTINGS those the attention rates and the probe compare (default: as-built);
# ROUNDS (2) the rounds; TEST_FILTER
# the tests (default: attention, models, graphs, overlap, the wgmma GEMM's epilogues and
# the folded norms) and TESTS_TIMEOUT their limit in seconds (360); SKIP_TESTS=1 skips
# them, SKIP_ATTN=1 the attention rates, SKIP_STEPS=1 the prefill steps, SKIP_PROBE=1 the
# probe; KERNEL_ARGS (e.g. "--only epilogue --m 2048,8192") runs tachyon_kernel_bench
# with them, once as built and once with each of KERNEL_SETTINGS (default: none). Every
# run has a time limit, so a hung kernel costs one run.
# Time: the tests ~200 s, an attention run ~25 s, a step run ~30 s (the first also writes
# the 16 GB checkpoint, ~20 s), a probe run ~25 s, the epilogue kernel bench ~30 s: run
# SKIP_STEPS=1 (with KERNEL_ARGS) in one call and SKIP_TESTS=1 SKIP_ATTN=1 in the next to
# stay within 600 s a call. A build in STAGE/old (its bins.txz) runs beside the new one in
# the sweeps, with the first setting only.
set -uo pipefail
ROOT=$(pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${1:?usage: ab.sh STAGE_DIR}" && pwd)
OUT=${OUT:-/tmp/out}
R=$(mktemp -d)
for d in "$BIN" "$BIN/old" "$BIN/probe"; do
  if [ -f "$d/bins.txz" ] && [ ! -x "$d/tachyon_gpu_bench" ]; then (cd "$d" && tar xJf bins.txz); fi
done
export LD_LIBRARY_PATH=$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The tests read their data through the source path compiled into them.
SRC_DIR=${SRC_DIR:-/work/main}
if [ "$SRC_DIR" != "$ROOT" ] && [ ! -e "$SRC_DIR" ]; then
  mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$ROOT" "$SRC_DIR"
fi
CONFIG=$HERE/llama3_8b_config.json
ATTN_SETTINGS=${ATTN_SETTINGS:-as-built}
SETTINGS=${SETTINGS:-as-built}
KERNEL_SETTINGS=${KERNEL_SETTINGS-}
ROUNDS=${ROUNDS:-2}
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >"$R/smi.txt"
finish() {
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >>"$R/smi.txt"
  mkdir -p "$OUT" && (cd "$R" && tar cJf "$OUT/ab.txz" .)
}
trap finish EXIT

if [ -z "${SKIP_TESTS:-}" ]; then
  F='*Prefill*:*Flash*:*MixedBatch*:*GroupRatios*:*SlidingWindow*:*Bidirectional*:CudaModel*:CudaGraph*:*Overlap*:*Wgmma*:*FoldedNorms*'
  timeout "${TESTS_TIMEOUT:-360}" "$BIN/tachyon_cuda_tests" --gtest_filter="${TEST_FILTER:-$F}" >"$R/tests.log" 2>&1
  echo "tests rc=$? $(grep -cE '^\[       OK' "$R/tests.log") ok; $(grep -E '^\[  (PASSED|FAILED)' "$R/tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure' "$R/tests.log" | head -20
fi

bins() {  # the builds to time: tag binary
  echo "new $BIN/tachyon_gpu_bench"
  [ -x "$BIN/old/tachyon_gpu_bench" ] && echo "old $BIN/old/tachyon_gpu_bench"
}
# shellcheck disable=SC2086 # a setting's VAR=value words are split on purpose
attn() {  # tag binary env
  local e=${3#as-built}
  timeout 120 env ${e//,/ } "$2" --config "$CONFIG" --dir /tmp/w --attn-only >"$R/attn_$1.log" 2>&1
  echo "attn $1 [$3]: $(grep -E 'RESULT attn_flash_(1x1024|8x1024|1x4096)' "$R/attn_$1.log" |
    awk '{print $2 "=" $3}' | tr '\n' ' ')"
}
# shellcheck disable=SC2086
step() {  # tag binary env
  local e=${3#as-built}
  timeout 150 env ${e//,/ } "$2" --config "$CONFIG" --dir /tmp/w --keep-model --prefill 8x1024,1x1024 \
    --decode 1 --ctx 1024 --no-ops >"$R/step_$1.log" 2>&1
  echo "step $1 [$3]: $(grep -E 'RESULT prefill' "$R/step_$1.log" | awk '{print $2 "=" $3}' | tr '\n' ' ')"
}
sweep() {  # fn settings: fn TAG BINARY SETTING for every round, build and setting, nested so
  local round tag bin s i
  for round in $(seq 1 "$ROUNDS"); do
    while read -r tag bin; do
      i=0
      for s in $2; do
        [ "$tag" = old ] && [ "$i" -gt 0 ] && break  # the older build: its first setting only
        "$1" "${tag}_s${i}_r$round" "$bin" "$s"
        i=$((i + 1))
      done
    done < <(bins)
  done
}
[ -n "${SKIP_ATTN:-}" ] || sweep attn "$ATTN_SETTINGS"
[ -n "${SKIP_STEPS:-}" ] || sweep step "$SETTINGS"
if [ -n "${KERNEL_ARGS:-}" ]; then
  i=0
  for s in "" $KERNEL_SETTINGS; do
    # shellcheck disable=SC2086 # the arguments and a setting's words are split on purpose
    timeout 120 env ${s//,/ } "$BIN/tachyon_kernel_bench" --config "$CONFIG" $KERNEL_ARGS \
      >"$R/kernels_s$i.log" 2>&1
    echo "kernels [${s:-as built}] rc=$?:"
    grep -E '^RESULT' "$R/kernels_s$i.log" | head -60
    i=$((i + 1))
  done
fi
if [ -z "${SKIP_PROBE:-}" ] && [ -x "$BIN/probe/tachyon_gpu_bench" ]; then
  i=0
  for s in $ATTN_SETTINGS; do
    mkdir -p "$R/probe_s$i"
    e=${s#as-built}
    # shellcheck disable=SC2086
    env ${e//,/ } TACHYON_FLASH_PROBE="$R/probe_s$i/rec" "$BIN/probe/tachyon_gpu_bench" \
      --config "$CONFIG" --dir /tmp/w --attn-only >"$R/probe_s$i/attn.log" 2>&1
    echo "probe [$s]: $(grep -E 'RESULT attn_flash_(1x1024|8x1024|1x4096)' "$R/probe_s$i/attn.log" |
      awk '{print $2 "=" $3}' | tr '\n' ' ')"
    python3 "$HERE/flash_probe.py" "$R"/probe_s$i/rec.* | tee "$R/probe_s$i/report.txt"
    rm -f "$R"/probe_s$i/rec.*
    i=$((i + 1))
  done
fi
