#!/bin/sh
# A test whose fixtures are absent reports itself skipped to CTest (exit 77, a line saying why)
# and fails under DT_REQUIRE_FIXTURES=1, as CI runs: a Criterion test (test_safetensors, whose
# fixtures folder the DT_FIXTURES_DIR variable overrides), the shell test cli_models.sh, and an
# example through require_fixtures.sh; ctest-skips.sh counts the skips of a JUnit report.
# Usage: fixture_skips.sh TESTS_SOURCE_DIR test_safetensors dtensor example_hf_generate_tp
set -u
src=$1 criterion_test=$2 tool=$3 example=$4
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
absent=$tmp/no-fixtures

# expect RC REQUIRE COMMAND...: runs COMMAND with DT_REQUIRE_FIXTURES=REQUIRE, wants exit RC.
expect() {
  want=$1 require=$2
  shift 2
  DT_REQUIRE_FIXTURES=$require DT_FIXTURES_DIR=$absent "$@" >"$tmp/out" 2>&1
  rc=$?
  [ "$rc" -eq "$want" ] || fail "$* (DT_REQUIRE_FIXTURES=$require): exit $rc, want $want: $(cat "$tmp/out")"
}
expect 77 0 "$criterion_test" --jobs 2
grep -q "^SKIPPED: [0-9]* of [0-9]* cases skipped (first: .*fixture.*absent" "$tmp/out" ||
  fail "test_safetensors says no reason: $(cat "$tmp/out")"
expect 1 1 "$criterion_test" --jobs 2
grep -q "^FAILED (DT_REQUIRE_FIXTURES is set)" "$tmp/out" || fail "no FAILED line: $(cat "$tmp/out")"
# --list asks for no run: nothing skipped, exit 0 whatever the fixtures.
expect 0 1 "$criterion_test" --list

expect 77 0 sh "$src/cli_models.sh" "$tool" "$absent"
expect 1 1 sh "$src/cli_models.sh" "$tool" "$absent"
expect 77 0 sh "$src/require_fixtures.sh" "$example" "$absent/hf/llama_tiny"
expect 1 1 sh "$src/require_fixtures.sh" "$example" "$absent/hf/llama_tiny"

# The summary `make test` prints: one skipped test with its reason, one passed, one not built.
cat >"$tmp/junit.xml" <<'XML'
<testsuite name="(empty)" tests="3">
	<testcase name="test_models" classname="test_models" time="0.3" status="notrun">
		<skipped message="SKIP_RETURN_CODE=77"/>
		<system-out>[====] Synthesis: Tested: 7 | Passing: 7
SKIPPED: 11 of 18 cases skipped (first: models/x: the hf fixtures are absent (/x/hf))
</system-out>
	</testcase>
	<testcase name="test_copy" classname="test_copy" time="0.1" status="run">
		<system-out>SKIPPED is a word this passing test prints</system-out>
	</testcase>
	<testcase name="test_gone" classname="test_gone" time="0" status="notrun">
		<skipped message="Unable to find executable"/>
		<system-out>Unable to find executable: /x/test_gone</system-out>
	</testcase>
</testsuite>
XML
summary=$(bash "$src/../scripts/ctest-skips.sh" "$tmp/junit.xml")
want="2 tests skipped (DT_REQUIRE_FIXTURES=1 makes a fixture skip fail):
  test_models: SKIPPED: 11 of 18 cases skipped (first: models/x: the hf fixtures are absent (/x/hf))
  test_gone: Unable to find executable"
[ "$summary" = "$want" ] || fail "ctest-skips.sh printed: $summary"

[ "$failures" -eq 0 ] || exit 1
echo "fixture skips: all checks passed"
