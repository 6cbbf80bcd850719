#!/bin/sh
# The instruction gate of issue 43 item 5: `dtensor bench instructions` counts detach,
# collectives and the 2-D linear hit at or below 600, 47,084 and 3,912 (the values before the
# rebase of d11a835). Callgrind counts are deterministic for a binary, so this is no timing
# test; it runs on the Release build only (CMake registers it there) and is skipped (77)
# without valgrind.
set -eu
tool=$1
command -v valgrind > /dev/null 2>&1 || { echo "no valgrind: skipped"; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$tool" bench instructions --json > "$out"
status=0
for pair in dtensor_dispatch_detach:600 dtensor_dispatch_collectives:47084 \
            dtensor_dispatch_2d_linear_hit:3912; do
  name=${pair%%:*}
  limit=${pair#*:}
  got=$(sed -n "s/.*\"name\":\"$name\",\"metric\":\"instruction_count\",\"value\":\([0-9]*\).*/\1/p" "$out")
  if [ -z "$got" ]; then
    echo "no count for $name:"
    cat "$out"
    exit 1
  fi
  if [ "$got" -gt "$limit" ]; then
    echo "$name: $got instructions, the gate is $limit"
    status=1
  else
    echo "$name: $got instructions (gate $limit)"
  fi
done
exit $status
