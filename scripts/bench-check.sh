#!/usr/bin/env bash
# The instruction-count gate, as PyTorch's check_results.py: a fresh `dtensor bench
# instructions` run against bench/expected_results.csv with a +-10 % band.
#   above the band -> REGRESSION; below it -> WIN (update the file); both exit non-zero.
# Instruction counts under callgrind are deterministic for a given binary, so this is not a
# timed test.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
expected="$root/bench/expected_results.csv"
fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT

"$root/$build/dtensor" bench instructions --results "$fresh" > /dev/null

status=0
while IFS=, read -r name metric value; do
  case "$name" in ''|'#'*|name) continue ;; esac
  got=$(awk -F, -v n="$name" -v m="$metric" '$1 == n && $2 == m { print $3 }' "$fresh")
  if [ -z "$got" ]; then
    echo "MISSING     $name: no fresh $metric"
    status=1
    continue
  fi
  low=$(( value * 90 / 100 )); high=$(( value * 110 / 100 ))
  if [ "$got" -gt "$high" ]; then
    echo "REGRESSION  $name: $got $metric, expected $value (+-10 %)"
    status=1
  elif [ "$got" -lt "$low" ]; then
    echo "WIN         $name: $got $metric, expected $value: update bench/expected_results.csv"
    status=1
  else
    echo "ok          $name: $got (expected $value)"
  fi
done < "$expected"
exit $status
