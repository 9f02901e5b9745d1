#!/usr/bin/env bash
# Resident memory of an idle `tachyon serve` of the demo model on the CPU: started, one
# request served, then `ps -o rss` (MB), and how much of it is the CUDA libraries'
# mappings (/proc/<pid>/smaps). Usage: scripts/idle_rss.sh [BINARY] [serve flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/tachyon}
shift || true
port=${TACHYON_RSS_PORT:-18391}
log=$(mktemp)
"$bin" serve --model models/tiny-kjv-chat --device cpu --port "$port" "$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 300); do
  grep -q "ready:" "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
grep -q "ready:" "$log" || { cat "$log" >&2; exit 1; }
curl -sf "localhost:$port/" -d '{"prompt": "In the beginning God created",
  "generate_config": {"max_new_tokens": 32}}' >/dev/null
sleep 1
rss_kb=$(ps -o rss= -p "$pid" | tr -d ' ')
cuda_kb=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {lib = ($6 ~ /libcu|libnv|cuda/)} /^Rss:/ && lib {s += $2} END {print s + 0}' "/proc/$pid/smaps")
grep "KV cache" "$log" | sed 's/^[A-Z]* [0-9:.]* //' || true
echo "rss ${rss_kb} kB ($((rss_kb / 1024)) MB), of which CUDA libraries ${cuda_kb} kB ($((cuda_kb / 1024)) MB)"
