#!/bin/sh
# Runs a command that exits 77 (CTest's skip) when its fixtures are absent, and makes that a
# failure when DT_REQUIRE_FIXTURES is set to anything but 0 (CI sets it: a machine that lost
# its fixtures must not pass having checked nothing).
# Usage: require_fixtures.sh COMMAND [ARGS...]
"$@"
rc=$?
if [ "$rc" -eq 77 ] && [ -n "${DT_REQUIRE_FIXTURES:-}" ] && [ "$DT_REQUIRE_FIXTURES" != 0 ]; then
  echo "FAILED (DT_REQUIRE_FIXTURES is set): $1 skipped, its fixtures are absent" >&2
  exit 1
fi
exit "$rc"
