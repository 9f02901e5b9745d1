#!/usr/bin/env bash
# Computes the expected ids of the tokenizer differential test with the JavaScript
# tokenizers of @lenml/tokenizers (fetched from npm, not committed) for every tokenizer
# under DIR (as fetched by fetch_tokenizers.sh), into DIR/js_reference/<name>.json.
# Usage: scripts/make_js_reference.sh DIR
set -euo pipefail
DIR=${1:?usage: make_js_reference.sh DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CORPUS="$ROOT/tests/tokenizer/data/multilingual_corpus.jsonl"
PKG="$DIR/_lenml/package"
if [ ! -f "$PKG/dist/main.global.js" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizers@3.7.2" >/dev/null 2>&1) || {
    echo "make_js_reference: npm pack @lenml/tokenizers@3.7.2 failed" >&2
    rm -rf "$tmp"
    exit 1
  }
  mkdir -p "$DIR/_lenml"
  tar -xzf "$tmp"/*.tgz -C "$DIR/_lenml"
  rm -rf "$tmp"
fi
stamp="$DIR/js_reference/.stamp"
if [ -f "$stamp" ] && [ "$stamp" -nt "$CORPUS" ]; then exit 0; fi
node "$ROOT/tests/tokenizer/js_reference.js" "$PKG" "$DIR" "$CORPUS" "$DIR/js_reference"
touch "$stamp"
