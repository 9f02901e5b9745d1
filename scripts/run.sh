#!/usr/bin/env bash
# Installs what is missing, builds, and serves the bundled demo model.
# Extra arguments are passed to `tachyon serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec build/tachyon serve --model models/tiny-kjv-chat "$@"
