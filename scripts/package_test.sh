#!/usr/bin/env bash
# Builds the packages (cmake --build <build> --target package), installs the .deb and
# runs the installed copy: `tachyon serve --help` and one generation on the demo model
# it carries, from a directory that holds no model. As root (CI) the .deb is installed
# into the system with dpkg -i (its declared dependencies checked) and removed after;
# otherwise, or with TACHYON_PACKAGE_INSTALL=extract, it is unpacked with dpkg -x into
# a temporary root.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TACHYON_BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target package >/dev/null
# Outputs are captured whole and matched afterwards: a `producer | grep -q` pipe under
# pipefail fails with SIGPIPE whenever grep stops reading before the producer is done.
deb=$(ls -t "$BUILD_DIR"/tachyon_*.deb)
deb=${deb%%$'\n'*}
tgz=$(ls -t "$BUILD_DIR"/tachyon-*.tar.gz)
tgz=${tgz%%$'\n'*}
listing=$(tar -tzf "$tgz")
grep -q '/bin/tachyon$' <<<"$listing" || { echo "package: $tgz holds no bin/tachyon" >&2; exit 1; }
depends=$(dpkg-deb -f "$deb" Depends)
[[ $depends == *libfmt* ]] || { echo "package: $deb declares no dependencies (Depends: $depends)" >&2; exit 1; }

work=$(mktemp -d)
installed=""
cleanup() {
  if [ -n "$installed" ]; then dpkg -r tachyon >/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
mode=${TACHYON_PACKAGE_INSTALL:-}
if [ -z "$mode" ]; then
  if [ "$(id -u)" -eq 0 ] && ! dpkg-query -W tachyon >/dev/null 2>&1; then mode=install; else mode=extract; fi
fi
if [ "$mode" = install ]; then
  dpkg -i "$deb" >/dev/null
  installed=1
  bin=/usr/bin/tachyon
else
  dpkg -x "$deb" "$work/root"
  bin="$work/root/usr/bin/tachyon"
fi
cd "$work"
help=$("$bin" serve --help)
[[ $help == *--max-num-seqs* ]] || { echo "package: serve --help lists no --max-num-seqs" >&2; exit 1; }
out=$(TACHYON_DEVICE=cpu "$bin" generate --prompt "In the beginning" --max-new-tokens 8 --json)
[[ $out == *'"output_ids"'* ]] || { echo "package: generate printed: $out" >&2; exit 1; }
echo "package: $(basename "$deb") ($mode) serves --help and generates: ok"
