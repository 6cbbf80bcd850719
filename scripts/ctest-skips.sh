#!/usr/bin/env bash
# After ctest: how many tests skipped and why, from the JUnit report ctest wrote
# (ctest --output-junit FILE). ctest itself lists only the names. A test that skips prints its
# reason on a line beginning "SKIPPED" (tests/fixture_main.h, tests/cli_models.sh) or
# "skipped:" (the examples); without one the report's message is shown (SKIP_RETURN_CODE=77,
# or "Unable to find executable" for a test that was not built).
# Usage: ctest-skips.sh JUNIT_FILE
set -euo pipefail
report="${1:?usage: ctest-skips.sh JUNIT_FILE}"
if [ ! -f "$report" ]; then
  echo "ctest-skips.sh: no $report (run ctest --output-junit first)" >&2
  exit 1
fi
awk '
  function attr(text, key,    at, s) {
    at = index(text, " " key "=\"")
    if (at == 0) return ""
    s = substr(text, at + length(key) + 3)
    return substr(s, 1, index(s, "\"") - 1)
  }
  /<testcase / { name = attr($0, "name"); skipped = 0; reason = ""; why = "" }
  /<skipped/ { skipped = 1; why = attr($0, "message") }
  { line = $0; sub(/^[ \t]*<system-out>/, "", line) }
  skipped && reason == "" && (line ~ /^SKIPPED/ || line ~ /^skipped:/) { reason = line }
  /<\/testcase>/ && skipped {
    n++
    lines[n] = "  " name ": " (reason != "" ? reason : why)
    skipped = 0
  }
  END {
    if (n == 0) { print "0 tests skipped"; exit }
    print n " test" (n > 1 ? "s" : "") " skipped (DT_REQUIRE_FIXTURES=1 makes a fixture skip fail):"
    for (i = 1; i <= n; i++) print lines[i]
  }
' "$report"
