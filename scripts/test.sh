#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_tokenizers.sh "${TACHYON_BUILD_DIR:-build}/tokenizers"
bash scripts/make_js_reference.sh "${TACHYON_BUILD_DIR:-build}/tokenizers"
cd "${TACHYON_BUILD_DIR:-build}"
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
