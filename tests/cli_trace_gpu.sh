#!/bin/sh
# dtensor trace stats on a trace with GPU tracks (tests/traces/gpu_tracks.json, figures worked
# out by hand in tests/test_trace_gpu.c): GPU utilization as seed 002's compute_utilization.
# Usage: cli_trace_gpu.sh PATH/TO/dtensor PATH/TO/gpu_tracks.json
set -u
tool=$1
trace=$2
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
out=$("$tool" trace stats "$trace" --json 2>&1) || fail "exit $?: $out"
for want in '"events":5,' '"busy_us":90.000,' '"total_us":100.000,' '"utilization":0.900000,' \
  '"mm_fraction":0.700000,' '"comm_us":50.000,' '"overlap_fraction":0.600000,' \
  '"device_label":"GPU"' '"device_processes":1,'; do
  case "$out" in *"$want"*) ;; *) fail "--json lacks $want: $out" ;; esac
done
out=$("$tool" trace stats "$trace" --total-us 200 2>&1) || fail "exit $?: $out"
case "$out" in *"utilization  45.00%"*) ;; *) fail "--total-us 200: $out" ;; esac
[ $failures -eq 0 ] && echo "cli_trace_gpu: passed"
exit $failures
