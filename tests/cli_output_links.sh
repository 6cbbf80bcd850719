#!/bin/sh
# No output of the tool follows a planted link (issue 35 item 2): with another user's links
# dtensor_demo_trace.json -> victim and dtensor_demo_loss.svg -> victim in the folder `dtensor
# demo` writes into, the demo replaces the links with its own regular files (mode 0666 less the
# umask) and the victims keep their bytes; so do `dtensor trace plot -o` and, when the hf
# fixtures are present, `dtensor finetune --out`.
# Usage: cli_output_links.sh PATH/TO/dtensor [FIXTURES_DIR]
set -u
tool=$1
hf=${2:-}/hf
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
dir=$(mktemp -d /tmp/dt_test_cli_links_XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
umask 027
printf precious > victim
chmod 644 victim

# A regular file of mode 640 (0666 less the umask), not a link.
expect_output() {
  [ -f "$1" ] && [ ! -L "$1" ] || fail "$1 is not a regular file: $(ls -l "$1" 2>&1)"
  mode=$(stat -c %a "$1")
  [ "$mode" = 640 ] || fail "$1 has mode $mode, want 640"
}
expect_victim() {
  [ "$(cat victim)" = precious ] || fail "$1 wrote through the link into victim"
  [ "$(stat -c %a victim)" = 644 ] || fail "$1 changed the victim's mode"
}

ln -s "$dir/victim" dtensor_demo_trace.json
ln -s "$dir/victim" dtensor_demo_loss.svg
"$tool" demo --steps 3 > demo.txt 2>&1 || fail "dtensor demo exited $?: $(cat demo.txt)"
expect_victim "dtensor demo"
expect_output dtensor_demo_trace.json
expect_output dtensor_demo_loss.svg
grep -q '<polyline' dtensor_demo_loss.svg || fail "no loss curve in dtensor_demo_loss.svg"
ls -A | grep -q '^\.dt-' && fail "a temporary was left: $(ls -A)"

ln -s "$dir/victim" plot.svg
"$tool" trace plot dtensor_demo_trace.json -o plot.svg > plot.txt 2>&1 ||
  fail "dtensor trace plot exited $?: $(cat plot.txt)"
expect_victim "dtensor trace plot"
expect_output plot.svg

if [ -f "$hf/llama_tiny/config.json" ]; then
  mkdir ft
  ln -s "$dir/victim" ft/config.json
  ln -s "$dir/victim" ft/model.safetensors
  "$tool" finetune --model "$hf/llama_tiny" --data "$hf/llama_tiny/io.safetensors" \
    --key ft_input_ids --steps 1 --out "$dir/ft" > ft.txt 2>&1 ||
    fail "dtensor finetune exited $?: $(cat ft.txt)"
  expect_victim "dtensor finetune --out"
  expect_output ft/config.json
  expect_output ft/model.safetensors
else
  echo "cli_output_links: the hf fixtures are absent ($hf): finetune --out not checked"
fi

[ "$failures" -eq 0 ] && echo "cli_output_links: all checks passed"
exit "$failures"
