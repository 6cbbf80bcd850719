#!/usr/bin/env bash
# No shell (issue 35 item 3): a call to system() or popen() hands a string to /bin/sh, so a
# quote in a path or an option runs a command. The library, the tool, the benchmarks, the
# examples and the tests call the functions they mean (unlinkat, nftw, posix_spawn with an
# argument vector) instead: the tests through tests/fs_helpers.h. Prints each use in src/
# tools/ bench/ examples/ tests/ and fails if there is any.
# Usage: scripts/check-no-shell.sh [root].
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
cd "$root"
dirs=""
for d in src tools bench examples tests; do [ -d "$d" ] && dirs="$dirs $d"; done
if [ -z "$dirs" ]; then
  echo "check-no-shell: none of src/ tools/ bench/ examples/ tests/ under $root"
  exit 1
fi
# A call: the name as a whole word followed by "(" (clang-format puts no space before it).
# shellcheck disable=SC2086
hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cc' \
  --include='*.cpp' '(^|[^A-Za-z0-9_])(system|popen)[[:space:]]*\(' $dirs || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-no-shell: system()/popen() above run a shell; call unlinkat, nftw or posix_spawn"
  exit 1
fi
echo "no-shell: no system() or popen() in$dirs"
