#!/bin/sh
# The main job's smoke test: `dtensor demo --steps 20` trains on 4 ranks (threads) and on 1,
# exits 0 (every step's loss matches the 1-rank run), the loss decreases, and the Chrome
# trace and the SVG loss curve are written. Runs in a scratch folder: the demo writes its
# files into the current directory.
# With a second and third argument, `dtensor demo --mesh MESH` (e.g. dp=2,pp=2,tp=2, 8 ranks)
# and the mesh's label in the 1-rank check line (2x2x2).
set -eu
tool=$1
mesh=${2:-}
label=${3:-2x2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$tool" demo --steps 20 ${mesh:+--mesh "$mesh"} > out.txt 2>&1 || { cat out.txt; echo "FAIL: dtensor demo exited $?"; exit 1; }
cat out.txt
# "  loss 3.5950 -> 2.9598 (uniform guess ...": the first and the last step's loss.
first=$(sed -n 's/^  loss \([0-9.]*\) -> \([0-9.]*\) .*/\1/p' out.txt)
last=$(sed -n 's/^  loss \([0-9.]*\) -> \([0-9.]*\) .*/\2/p' out.txt)
[ -n "$first" ] && [ -n "$last" ] || { echo "FAIL: no loss line"; exit 1; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }' ||
  { echo "FAIL: the loss did not decrease: $first -> $last"; exit 1; }
grep -q '^  step   20  loss' out.txt || { echo "FAIL: no progress line for step 20"; exit 1; }
grep -q "max |loss($label) - loss(1 rank)| over 20 steps = .* (<= " out.txt ||
  { echo "FAIL: the 1-rank check is missing or failed"; exit 1; }
[ -s dtensor_demo_trace.json ] || { echo "FAIL: no dtensor_demo_trace.json"; exit 1; }
grep -q '<polyline' dtensor_demo_loss.svg || { echo "FAIL: no loss curve in dtensor_demo_loss.svg"; exit 1; }
# Without --device-label the label comes from the trace: ours say CPU.
"$tool" trace stats dtensor_demo_trace.json > stats.txt || { echo "FAIL: the trace does not read back"; exit 1; }
grep -q "labelled 'CPU'" stats.txt || { echo "FAIL: trace stats did not pick the trace's CPU label"; exit 1; }
echo "OK: loss $first -> $last"
