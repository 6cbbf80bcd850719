#!/bin/sh
# dtensor bench train --size small --tp 2 / --fsdp 2: the GPT-2-like model on 2 rank threads
# (Megatron tensor parallelism with the vocabulary-parallel loss; FSDP over the module tree)
# trains from the same weights and data as the 1-rank run, so every step's loss (the warm-up
# step and two timed AdamW steps) equals the 1-rank run's within 1e-5 relative, on both ranks;
# each rank's collectives in one step are the ones worked out by hand (below); bad parallel
# options fail with exit code 2.
#
# Bytes per rank and step (the comm ledger: the larger buffer of each collective), small size
# (vocab 1024, d_model 128, 2 layers, seq 64, batch 4; one activation [4, 64, 128] float32 =
# 131072 B):
#   tp    per layer 2 forward all_reduces (out, fc2) and 4 backward ones (the input gradients
#         of the colwise q, k, v, fc1), the head's input gradient, and the vocabulary-parallel
#         loss's two reductions ([256, 1] max, [256, 2] terms: 3072 B):
#         2 * 6 * 131072 + 131072 + 3072 = 1707008 B in 15 calls
#   fsdp  every parameter all-gathered in forward, again in backward, its gradient
#         reduce-scattered (667136 params * 4 B each time, 37 tensors), and the loss's
#         Partial sum reduced: 3 * 2668544 + 4 = 8005636 B in 3 * 37 + 1 = 112 calls
# Usage: bench_gpt_parallel.sh PATH/TO/dtensor
set -u
tool=$1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
losses() { sed -n 's/.*"losses":\[\([^]]*\)\].*/\1/p'; }
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }

one=$("$tool" bench train --size small --steps 2 --threads 1 --json | grep '"name":"gpt_step"' | losses)
[ -n "$one" ] || fail "the 1-rank run printed no losses"
echo "1 rank: $one"
for mode in tp fsdp; do
  expect="1707008 15"
  [ $mode = fsdp ] && expect="8005636 112"
  all=$("$tool" bench train --size small --steps 2 --$mode 2 --json)
  rc=$?
  [ $rc -eq 0 ] || fail "--$mode 2 exited with $rc"
  out=$(echo "$all" | grep '"name":"gpt_step"')
  n=$(echo "$out" | grep -c '"parallel":"'$mode'"')
  [ "$n" = 2 ] || fail "--$mode 2 printed $n gpt_step lines, expected 2 (one per rank)"
  result=$(echo "$out" | while IFS= read -r line; do
    l=$(echo "$line" | losses)
    rank=$(echo "$line" | field rank)
    echo "--$mode 2 rank $rank: $l"
    awk -v a="$one" -v b="$l" 'BEGIN {
      n = split(a, x, ","); m = split(b, y, ",")
      if (n != 3 || m != 3) exit 1
      for (i = 1; i <= n; i++) {
        d = x[i] - y[i]; if (d < 0) d = -d
        if (!(x[i] > 0) || d > 1e-5 * x[i]) exit 1
      }
    }' || echo "MISMATCH"
    got="$(echo "$line" | field comm_bytes) $(echo "$line" | field comm_calls)"
    [ "$got" = "$expect" ] || echo "MISMATCH collectives: $got, expected $expect"
  done)
  echo "$result"
  case "$result" in
  *MISMATCH*) fail "--$mode 2: losses differ from the 1-rank run's by more than 1e-5 relative, or other collectives" ;;
  esac
done

for bad in "--size small --tp 3" "--size small --fsdp 3" "--size small --tp 0" \
  "--size small --tp 2 --fsdp 2" "--size small --tp 2 --forward"; do
  # shellcheck disable=SC2086
  "$tool" bench train $bad >/dev/null 2>&1
  [ $? -eq 2 ] || fail "'bench train $bad' did not exit 2"
done

[ $failures -eq 0 ] && echo "bench_gpt_parallel: ok"
exit $failures
