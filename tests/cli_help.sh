#!/bin/sh
# Every command, subcommand and bench suite of the dtensor tool prints its usage on --help and
# exits 0, without running; unknown names exit non-zero. The names come from the tool's own
# lists (`dtensor --help`, `dtensor bench --help`, ...), so a new row is checked without
# editing this file; the names listed below must be among them.
# Usage: cli_help.sh PATH/TO/dtensor
set -u
tool=$1
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The names a group's --help lists: the indented lines under "<noun>s:".
names_of() {
  "$tool" "$@" --help | awk '/^[a-z]+s:$/ { in_list = 1; next } /^$/ { in_list = 0 } in_list && /^  [a-z]/ { print $1 }'
}

# A usage on stdout starting with "usage: dtensor ARGS", exit status 0, nothing on stderr.
check_help() {
  out=$("$tool" "$@" 2>/tmp/cli_help_err.$$)
  status=$?
  if [ $status -ne 0 ]; then fail "'dtensor $* ' exited $status"; fi
  case "$out" in
  "usage: dtensor "*) ;;
  *) fail "'dtensor $*' printed no usage: $out" ;;
  esac
  if [ -s /tmp/cli_help_err.$$ ]; then fail "'dtensor $*' wrote to stderr: $(cat /tmp/cli_help_err.$$)"; fi
  rm -f /tmp/cli_help_err.$$
}

check_error() {
  "$tool" "$@" >/dev/null 2>&1
  status=$?
  if [ $status -eq 0 ]; then fail "'dtensor $*' exited 0, expected an error"; fi
}

require() {
  list=$1
  shift
  for name in "$@"; do
    echo "$list" | grep -qx "$name" || fail "'$name' is missing from the list: $list"
  done
}

commands=$(names_of)
require "$commands" demo info bench trace
suites=$(names_of bench)
require "$suites" kernels dispatch instructions collectives profile tp
trace_commands=$(names_of trace)
require "$trace_commands" stats plot

check_help --help
check_help -h
for c in $commands; do
  check_help "$c" --help
done
for s in $suites; do
  check_help bench "$s" --help
  # --help after other options still only prints usage (no benchmark runs).
  check_help bench "$s" --json --help
done
for t in $trace_commands; do
  check_help trace "$t" --help
  check_help trace "$t" some.json --help
done

# The usage of a suite names its own options, not another suite's.
"$tool" bench tp --help | grep -q -- "--iters" || fail "'dtensor bench tp --help' lacks --iters"

check_error
check_error no-such-command
check_error no-such-command --help
check_error bench
check_error bench no-such-suite
check_error bench no-such-suite --help
check_error trace no-such-command
check_error info --no-such-option

# --json prints one JSON document on stdout: info --ops an object holding the op list (one op
# a line, commas between), demo tp its summary alone (the walkthrough goes to stderr).
ops_json=$("$tool" info --ops --json)
n_ops=$("$tool" info --json | sed -n 's/.*"ops":\([0-9]*\).*/\1/p')
[ "$(echo "$ops_json" | head -1)" = "{\"version\":\"$("$tool" info --json | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')\",\"ops\":[" ] ||
  fail "info --ops --json: first line $(echo "$ops_json" | head -1)"
[ "$(echo "$ops_json" | tail -1)" = "]}" ] || fail "info --ops --json: last line $(echo "$ops_json" | tail -1)"
[ "$(echo "$ops_json" | grep -c '^{"op":"[^"]*","sharding_rule":\(true\|false\)},$')" -eq $((n_ops - 1)) ] ||
  fail "info --ops --json: not $((n_ops - 1)) op lines ending in a comma"
[ "$(echo "$ops_json" | grep -c '^{"op":"[^"]*","sharding_rule":\(true\|false\)}$')" -eq 1 ] ||
  fail "info --ops --json: the last op line"
tmp_json=$(mktemp -d)
tp_json=$(cd "$tmp_json" && "$tool" demo tp --world 2 --json 2>/dev/null)
rm -rf "$tmp_json"
[ "$(echo "$tp_json" | wc -l)" -eq 1 ] && echo "$tp_json" | grep -q '^{"world":2,.*}$' ||
  fail "demo tp --json: stdout is not one JSON object: $tp_json"
if command -v python3 >/dev/null 2>&1; then
  echo "$ops_json" | python3 -m json.tool >/dev/null || fail "info --ops --json does not parse"
  echo "$tp_json" | python3 -m json.tool >/dev/null || fail "demo tp --json does not parse"
fi

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "cli_help: $(echo $commands | wc -w) commands, $(echo $suites | wc -w) suites, $(echo $trace_commands | wc -w) trace commands: ok"
