#!/bin/sh
# The dtensor tool says what it ignores or cannot do (issue 35 item 11): library warnings about
# DT_* variables reach stderr through the tool's log callback; bench ckpt refuses a --size with
# a stray suffix and names a --dir it cannot use with the reason; a library message quoting a
# file's string is printed escaped.
# Usage: cli_tool_reports.sh PATH/TO/dtensor
set -u
tool=$1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A command that runs kernels (the thread pool reads DT_NUM_THREADS) on 2 ranks (the threads
# backend reads DT_COMM_TIMEOUT_MS).
err=$(DT_NUM_THREADS=abc DT_COMM_TIMEOUT_MS=5s "$tool" demo tp --world 2 2>&1 >/dev/null)
echo "$err" | grep -q 'dtensor: warning: DT_NUM_THREADS="abc" is not an integer' ||
  fail "no DT_NUM_THREADS warning: $err"
echo "$err" | grep -q 'dtensor: warning: DT_COMM_TIMEOUT_MS="5s"' ||
  fail "no DT_COMM_TIMEOUT_MS warning: $err"
# The warning quotes the variable's value: a terminal escape in it is shown, not obeyed.
esc=$(printf '\033]0;x')
err=$(DT_NUM_THREADS="$esc" "$tool" demo tp --world 2 2>&1 >/dev/null)
printf '%s\n' "$err" | grep -qF 'DT_NUM_THREADS="\x1b]0;x"' || fail "the value is not escaped: $err"
case "$err" in *"$esc"*) fail "a raw ESC reached stderr" ;; esac

for size in 1X 12KB 5mm -1 ''; do
  err=$("$tool" bench ckpt --size "$size" --dir "$tmp" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "--size '$size': exit $rc"
  echo "$err" | grep -q -- "--size wants bytes" || fail "--size '$size': $err"
done
err=$("$tool" bench ckpt --dir "$tmp/missing" 2>&1)
[ $? -eq 2 ] || fail "a missing --dir ran"
echo "$err" | grep -q -- "--dir $tmp/missing: No such file or directory" || fail "missing: $err"
: >"$tmp/file"
err=$("$tool" bench ckpt --dir "$tmp/file" 2>&1)
[ $? -eq 2 ] || fail "a file as --dir ran"
echo "$err" | grep -q -- "--dir $tmp/file: Not a directory" || fail "file: $err"

# ckpt inspect of a file whose name holds an escape, missing and then not a safetensors file
# (the library's message quotes the name): each message shows it.
for what in missing garbage; do
  [ $what = garbage ] && echo "not safetensors" >"$tmp/a${esc}b.safetensors"
  err=$("$tool" ckpt inspect "$tmp/a${esc}b.safetensors" 2>&1)
  case "$err" in *"$esc"*) fail "ckpt inspect ($what) printed a raw ESC: $err" ;; esac
  printf '%s\n' "$err" | grep -qF 'a\x1b]0;xb' || fail "ckpt inspect ($what): $err"
done

# The library escapes the file texts it quotes; the tool prints its messages as they are but for
# control characters, so an escape shows once (a\x1b, not a\\x1b) and no echo reinterprets it.
printf '%s' '{"format":"dtensor-checkpoint","version":2,"generation":1,"files":[],"tensors":[
{"name":"w\u001b[2J\\","dtype":"F32","shape":[4],"blocks":[]}]}' >"$tmp/metadata.json"
err=$("$tool" ckpt inspect "$tmp" 2>&1)
printf '%s\n' "$err" | grep -qF 'tensor `w\x1b[2J\\`: the blocks cover 0 of its 4 elements' ||
  fail "ckpt inspect of an escaped name: $err"
rm "$tmp/metadata.json"

# ckpt inspect of metadata whose placement a save never writes ("S(99)" used to be printed as
# if valid; one holding an escape is shown escaped): refused, naming the tensor and placement.
mkdir "$tmp/ck"
for plc in 'S(99)' 'P(sum)' 'S(\u001b[2J)'; do
  printf '%s' '{"format":"dtensor-checkpoint","version":2,"generation":1,"files":[{"name":"f",
"bytes":1000,"generation":1,"rank":0,"crc32c":7}],"tensors":[{"name":"w","dtype":"F32",
"shape":[4,2],"mesh":[2],"placements":["'"$plc"'"],"blocks":[{"file":0,"offsets":[0,0],
"lengths":[4,2],"byte_range":[0,32]}]}]}' >"$tmp/ck/metadata.json"
  err=$("$tool" ckpt inspect "$tmp/ck" 2>&1)
  [ $? -ne 0 ] || fail "ckpt inspect showed placement $plc: $err"
  shown=$(printf '%s' "$plc" | sed 's/\\u001b/\\x1b/')
  printf '%s\n' "$err" | grep -qF "tensor \`w\`: placement 0 \"$shown\" is not one a save writes" ||
    fail "ckpt inspect ($plc): $err"
  case "$err" in *"$(printf '\033')"*) fail "ckpt inspect ($plc) printed a raw ESC" ;; esac
done
exit $failures
