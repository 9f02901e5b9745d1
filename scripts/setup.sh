#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent: prints
# nothing and changes nothing when all are present. Uses sudo when not root.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries
  nlohmann-json3-dev libfmt-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev
  libboost-dev libyaml-cpp-dev libsimdjson-dev
  # images in (src/media): decoders and the URL fetcher
  libjpeg62-turbo-dev libpng-dev libwebp-dev libcurl4-openssl-dev
  # tests and tools
  googletest libgtest-dev libgmock-dev libbenchmark-dev clang clang-format
  libclang-rt-14-dev curl ca-certificates python3 xz-utils
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node.js with npm (end-to-end tests, reference tokenizers): any install will do; Debian's
# packages only when there is none.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
