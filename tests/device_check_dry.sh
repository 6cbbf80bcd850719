#!/bin/sh
# scripts/device-check.sh --dry-run (issue 39 item 1): exits 0, writes at most 5 files, prints
# the summary JSON last on stdout, valid (json_check: strict RFC 8259) with a label holding
# quotes, a backslash, a tab, a newline and an escape byte, and its budget accounting says a
# run plus a rerun fit in the device tool's 15 minutes.
# Usage: device_check_dry.sh REPO_ROOT PATH/TO/json_check SCRATCH_DIR
set -u
root=$1 check=$2 dir=$3
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
rm -rf "$dir" && mkdir -p "$dir/out"
label=$(printf 'a "quoted" back\\slash\ttab\nline \033[31mred\033[0m')
OUT="$dir/out" DT_CHECK_LABEL="$label" bash "$root/scripts/device-check.sh" --dry-run \
  > "$dir/stdout" 2> "$dir/stderr"
rc=$?
[ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$dir/stderr")"
n=$(ls "$dir/out" | wc -l)
[ "$n" -le 5 ] || fail "$n files in OUT: $(ls "$dir/out")"
grep -q "writes 5 files into" "$dir/stderr" || fail "no file count in: $(cat "$dir/stderr")"
# The summary is the whole of stdout, and the same as the file.
cmp -s "$dir/stdout" "$dir/out/device-check.json" || fail "stdout is not the summary"
"$check" "$dir/stdout" || fail "the summary is not valid JSON"
grep -q '"status": "dry_run"' "$dir/stdout" || fail "status is not dry_run"
grep -qF '\"quoted\" back\\slash\ttab\nline \u001b[31mred\u001b[0m' "$dir/stdout" ||
  fail "the label is not escaped: $(grep label "$dir/stdout")"
grep -q '"steps_s": 360,' "$dir/stdout" || fail "the steps do not sum to 360 s"
device=$(sed -n 's/.*"run_and_rerun_device_s": \([0-9]*\).*/\1/p' "$dir/stdout")
[ -n "$device" ] && [ "$device" -le 900 ] || fail "a run and a rerun need '${device}' s of 900"
# A budget the steps do not fit fails, saying so, and still prints valid JSON.
OUT="$dir/out" DT_CHECK_BUDGET=200 bash "$root/scripts/device-check.sh" --dry-run \
  > "$dir/stdout2" 2> /dev/null && fail "a 200 s budget passed the dry run"
grep -q "exceed the budget" "$dir/stdout2" || fail "no note of the budget: $(cat "$dir/stdout2")"
"$check" "$dir/stdout2" || fail "the failed dry run's summary is not valid JSON"
# The checker itself refuses what the escaping prevents.
printf '{"a": "raw\001byte"}' > "$dir/bad1" && "$check" "$dir/bad1" 2> /dev/null && fail "raw byte accepted"
printf '{"a": "x\\q"}' > "$dir/bad2" && "$check" "$dir/bad2" 2> /dev/null && fail "bad escape accepted"
printf '{"a": [1, 2,]}' > "$dir/bad3" && "$check" "$dir/bad3" 2> /dev/null && fail "trailing comma accepted"
printf '{"a": "\\u00e9 \303\251", "b": [-1.5e3, true, null]}' > "$dir/good" && "$check" "$dir/good" ||
  fail "valid JSON refused"
[ "$failures" -eq 0 ] && echo "device_check_dry: passed"
exit "$failures"
