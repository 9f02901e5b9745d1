#!/usr/bin/env bash
# The sm_90a machine code (SASS) of one CUDA source, read on this machine, with no GPU
# and no device time: whether the matrix instructions are HGMMA, where ptxas put the
# waits, what a loop issues per iteration, whether anything spills.
#
# The toolkit here (13.0) ships nvcc and ptxas but no disassembler. Debian's
# nvidia-cuda-toolkit (bookworm, non-free, 11.8) has nvdisasm; the first run downloads
# that one package (84 MB, no dependencies installed) into $SASS_TOOLS and keeps only
# nvdisasm. 11.8 reads sm_90 code but not the ELF header 13.0 writes (ABI version 8), so
# the cubin's header is rewritten to the older form (OS/ABI 0x33, ABI version 7, flags
# sm_90) before disassembly; the instruction stream is unchanged. A few encodings newer
# than 11.8 (about 3% of a kernel's instructions, mostly integer adds) are not decoded:
# they are printed as "<not decoded>" lines so the addresses stay continuous.
#
# Usage: scripts/sass.sh SOURCE.cu [OUT.sass] [extra nvcc flags...]
#   e.g. scripts/sass.sh src/backend/cuda/attention_flash_wgmma.cu /tmp/flash.sass
# Prints ptxas's resource report (registers, stack, spills per kernel) and writes the
# disassembly (default: /tmp/<source name>.sass).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?usage: scripts/sass.sh SOURCE.cu [OUT.sass] [nvcc flags...]}
OUT=${2:-/tmp/$(basename "${SRC%.cu}").sass}
shift $(($# >= 2 ? 2 : 1))
TOOLS=${SASS_TOOLS:-$HOME/.cache/tachyon-sass}
NVDISASM=$TOOLS/nvdisasm
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

if [ ! -x "$NVDISASM" ]; then
  mkdir -p "$TOOLS/lists/partial" "$TOOLS/deb"
  echo "deb http://deb.debian.org/debian bookworm non-free" >"$TOOLS/sources.list"
  APT=(-o "Dir::Etc::sourcelist=$TOOLS/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$TOOLS/lists" -o APT::Get::List-Cleanup=0)
  apt-get "${APT[@]}" update >/dev/null
  (cd "$TOOLS/deb" && apt-get "${APT[@]}" download nvidia-cuda-toolkit >/dev/null 2>&1)
  dpkg-deb --fsys-tarfile "$TOOLS"/deb/nvidia-cuda-toolkit_*.deb |
    tar -xO ./usr/bin/nvdisasm >"$NVDISASM"
  chmod +x "$NVDISASM"
  rm -rf "$TOOLS/deb" "$TOOLS/lists"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$NVCC" -DFMT_HEADER_ONLY=1 -DTACHYON_WITH_CUDA=1 -Isrc -O3 -DNDEBUG \
  -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++20 -cubin \
  -Xptxas -v "$@" -o "$WORK/k.cubin" "$SRC" 2>&1 |
  awk '/Compiling entry function/ {name = $7} /spill/ {print name ": " $0} /Used/ {print name ": " $0}' |
  sed -E "s/ptxas info +: //; s/'//g" | c++filt
# ELF64 header: e_ident[EI_OSABI] at 7, e_ident[EI_ABIVERSION] at 8, e_flags at 0x30.
python3 - "$WORK/k.cubin" "$WORK/k7.cubin" <<'EOF'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
d[7], d[8] = 0x33, 7
struct.pack_into("<I", d, 0x30, 0x5A055A)
open(sys.argv[2], "wb").write(d)
EOF
"$NVDISASM" -c "$WORK/k7.cubin" | python3 -c '
import re, sys
prev = None
for line in sys.stdin:
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/", line)
    if m:
        a = int(m.group(1), 16)
        if prev is not None and prev < a:
            for gap in range(prev + 16, a, 16):
                print("        /*%04x*/                   <not decoded>" % gap)
        prev = a
    elif line.startswith("//----"):
        prev = None
    sys.stdout.write(line)
' >"$OUT"
echo "sass: $OUT ($(grep -c '^ *\/\*[0-9a-f]*\*\/' "$OUT") instructions)"
