#!/usr/bin/env bash
# The device tool sends the checkout's working tree (tracked and untracked-not-ignored
# files) plus what a call carries, at most 64 MiB; the tracked tree alone is ~60 MiB.
# `hide PATH...` takes tracked paths a GPU call does not need out of the working tree
# (they are deleted, not moved: git has them; folders left empty go too) and notes them
# in .git/device_tree_hidden; `restore` brings the noted paths back from the index (a
# tracked file deleted for another reason stays deleted). `size` prints what would
# travel (without carried paths).
set -euo pipefail
cd "$(dirname "$0")/.."
NOTE=$(git rev-parse --git-dir)/device_tree_hidden
case "${1:-}" in
  hide)
    shift
    for p in "$@"; do
      git ls-files -z -- "$p" | xargs -0 -r rm -f --
      [ -d "$p" ] && find "$p" -depth -type d -empty -delete
      printf '%s\0' "$p" >>"$NOTE"
    done
    ;;
  restore)
    if [ -f "$NOTE" ]; then
      xargs -0 -r git checkout -- <"$NOTE"
      rm -f "$NOTE"
    fi
    ;;
  size)
    { git ls-files -z; git ls-files -z --others --exclude-standard; } |
      xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {printf "%.1f MiB\n", s / 1048576}'
    ;;
  *)
    echo "usage: scripts/device_tree.sh hide PATH... | restore | size" >&2
    exit 2
    ;;
esac
