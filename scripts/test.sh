#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The CUDA backend is compiled (when nvcc is present) for one architecture here: the
# tests cannot run it without a GPU, and one architecture keeps CI short.
bash scripts/build.sh -DTACHYON_CUDA_ARCHS="${TACHYON_CUDA_ARCHS:-90a}"
bash scripts/fetch_tokenizers.sh "${TACHYON_BUILD_DIR:-build}/tokenizers"
bash scripts/make_js_reference.sh "${TACHYON_BUILD_DIR:-build}/tokenizers"
(cd "${TACHYON_BUILD_DIR:-build}" && ctest --output-on-failure --parallel "$(nproc)" --timeout 900)
# The .deb and .tar.gz, installed and run.
bash scripts/package_test.sh
