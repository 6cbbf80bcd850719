#!/usr/bin/env bash
# The folder-level check of docs/design.md's "Layers": every dependency between files of src/
# (an include, or a use of a function or variable another file defines: the edges of
# scripts/check-includes.sh) goes from a layer to the same layer or one below it. Prints every
# edge that goes up and fails if there is any, or if a folder of src/ has no layer.
# Usage: scripts/check-layers.sh [src-dir].
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="${1:-$here/../src}"
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
DT_EDGES_OUT="$edges" bash "$here/check-includes.sh" "$src" > /dev/null || true

# Bottom to top: the first column of docs/design.md's "Layers" table, read from the document
# itself so that the two cannot disagree (DT_LAYERS overrides it, for tests of the script).
design="$here/../docs/design.md"
layers=${DT_LAYERS:-$(awk '/^## Layers/ { on = 1; next } /^## / { on = 0 }
  on && /^\| [a-z]+ \| `src\// { print $2 }' "$design" | tr '\n' ' ')}
if [ -z "$layers" ]; then
  echo "check-layers: no layer table found in $design"
  exit 1
fi

# A file's layer: its top folder, except the per-device kernel tables and a device's op
# adapters (kernels/<device>/op_*: they read the op's call record, as the CPU's adapters in
# src/ops/ do), which live in their device's folder (a device is one folder) but index the op
# list or read its calls: they rank with ops.
layer_of() {
  case "$1" in
    kernels/kernel_table.h | kernels/registry.c | kernels/*/*_table.c | kernels/*/op_*) echo ops ;;
    *) echo "${1%%/*}" ;;
  esac
}

rank_of() {
  local r=0
  for l in $layers; do
    [ "$l" = "$1" ] && { echo "$r"; return; }
    r=$((r + 1))
  done
  echo -1
}

status=0
for dir in $(cd "$src" && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\./||' | sort); do
  if [ "$(rank_of "$dir")" -lt 0 ]; then
    echo "src/$dir/ has no layer: add it to docs/design.md's table and to this script"
    status=1
  fi
done

declare -A rank
for l in $layers; do rank[$l]=$(rank_of "$l"); done
up=0
n=0
while read -r from to why; do
  lf=$(layer_of "$from")
  lt=$(layer_of "$to")
  [ "$lf" = "$lt" ] && continue
  n=$((n + 1))
  rf=${rank[$lf]:--1}
  rt=${rank[$lt]:--1}
  if [ "$rf" -lt 0 ] || [ "$rt" -lt 0 ]; then continue; fi
  if [ "$rt" -gt "$rf" ]; then
    echo "up: $from ($lf) -> $to ($lt): $why"
    up=$((up + 1))
  fi
done < "$edges"
if [ "$up" -gt 0 ]; then
  echo "$up edge(s) go up the layers (docs/design.md \"Layers\"): a folder uses only layers below it"
  status=1
fi
[ "$status" -eq 0 ] && echo "layers: all $n edges between layers go down ($layers)"
exit $status
