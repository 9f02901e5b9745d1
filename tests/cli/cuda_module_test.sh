#!/usr/bin/env bash
# The `tachyon` binary of a CUDA build without the CUDA libraries: it links none of
# them, runs on the CPU with --device auto when its CUDA module cannot be found, fails
# --device cuda with one line naming what is missing, and a CPU serve maps no CUDA
# library. With the module beside it, --device cuda loads it (every symbol the module
# takes from the binary resolves) and either runs or finds no device.
# Usage: cuda_module_test.sh <build>/tachyon <source dir>
set -euo pipefail
BIN=$1
SRC=$2
MODEL="$SRC/models/tiny-kjv-chat"
GEN=(generate --model "$MODEL" --max-new-tokens 4 --prompt-ids 1,733,16289)
TMP=$(mktemp -d)
SERVE_PID=
cleanup() {
  if [ -n "$SERVE_PID" ]; then kill "$SERVE_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset LD_LIBRARY_PATH  # the module must not be found through it either

# Links no CUDA library.
if ldd "$BIN" | grep -E 'libcudart|libcublas|libcuda\.|tachyon_cuda'; then
  fail "$BIN links a CUDA library"
fi

# A copy of the binary without its module.
cp "$BIN" "$TMP/tachyon"
"$TMP/tachyon" "${GEN[@]}" --device auto >"$TMP/auto.out" 2>"$TMP/auto.err" ||
  fail "--device auto without the module: $(cat "$TMP/auto.err")"
[ -s "$TMP/auto.out" ] || fail "--device auto without the module printed no tokens"
if "$TMP/tachyon" "${GEN[@]}" --device cuda >"$TMP/cuda.out" 2>"$TMP/cuda.err"; then
  fail "--device cuda without the module succeeded"
fi
[ "$(wc -l <"$TMP/cuda.err")" -eq 1 ] || fail "--device cuda: not one line: $(cat "$TMP/cuda.err")"
grep -qx 'error: cuda: cannot load libtachyon_cuda.so: .*libtachyon_cuda.so: cannot open shared object file.*' \
  "$TMP/cuda.err" || fail "--device cuda: unexpected error: $(cat "$TMP/cuda.err")"

# The binary beside its module: loads it on --device cuda (unless the CUDA libraries
# the module needs are not installed here).
if ! "$BIN" "${GEN[@]}" --device cuda >"$TMP/mod.out" 2>"$TMP/mod.err"; then
  if grep -qx 'error: cuda: cannot load libtachyon_cuda.so: lib[^ ]*: cannot open shared object file.*'     "$TMP/mod.err" && ! grep -q 'libtachyon_cuda.so: cannot open' "$TMP/mod.err"; then
    echo "note: no CUDA libraries here: $(cat "$TMP/mod.err")"
  else
    grep -q "asked for, but 0 CUDA device(s) are visible" "$TMP/mod.err" ||
      fail "--device cuda with the module: $(cat "$TMP/mod.err")"
  fi
fi

# A CPU serve maps nothing of CUDA.
"$BIN" serve --port 0 --model "$MODEL" --device cpu 2>"$TMP/serve.err" &
SERVE_PID=$!
for _ in $(seq 600); do
  grep -q "ready:" "$TMP/serve.err" && break
  kill -0 "$SERVE_PID" 2>/dev/null || fail "serve exited: $(cat "$TMP/serve.err")"
  sleep 0.1
done
grep -q "ready:" "$TMP/serve.err" || fail "serve not ready in 60 s"
if grep -E 'libcuda|libcublas|libcudart|tachyon_cuda' "/proc/$SERVE_PID/maps"; then
  fail "a CPU serve maps CUDA libraries"
fi
echo "ok"
