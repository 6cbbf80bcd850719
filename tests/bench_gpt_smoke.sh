#!/bin/sh
# dtensor bench train --size and dtensor bench ops at the small size: the step trains (the
# second step's loss below the first's, both finite), the parameter count and the FLOPs of a
# step equal the ones worked out by hand for the small model (vocab 1024, d_model 128,
# 2 layers, seq 64, batch 4: 2*1024*128 + 64*128 + 2*(12*128^2 + 13*128) + 2*128 = 667136
# parameters; 3 * (2 * (2*256*12*128^2 + 4*4*64^2*128) + 2*256*128*1024) = 855638016 FLOPs),
# bench ops prints a forward and a forward+backward line for an op, and bad options fail.
# --attention sdpa (the fused causal scaled_dot_product_attention in every block) trains from
# the same weights and data as the explicit attention: every step's loss within 1e-5 relative.
# Usage: bench_gpt_smoke.sh PATH/TO/dtensor
set -u
tool=$1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

line=$("$tool" bench train --size small --steps 1 --threads 1 --json | grep '"name":"gpt_step"')
[ -n "$line" ] || fail "bench train --size small printed no gpt_step line"
field() { echo "$line" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
[ "$(field params)" = 667136 ] || fail "params $(field params), expected 667136"
[ "$(field gflop_per_step)" = 0.86 ] || fail "gflop_per_step $(field gflop_per_step), expected 0.86"
awk -v a="$(field first_loss)" -v b="$(field loss)" 'BEGIN { exit !(a > 0 && b > 0 && b < a && a < 100) }' ||
  fail "losses $(field first_loss) -> $(field loss): expected finite, decreasing"

losses() { sed -n 's/.*"losses":\[\([^]]*\)\].*/\1/p'; }
explicit=$("$tool" bench train --size small --steps 2 --threads 1 --json | grep '"name":"gpt_step"' | losses)
sdpa=$("$tool" bench train --size small --steps 2 --threads 1 --attention sdpa --json |
  grep '"name":"gpt_step"' | grep '"attention":"sdpa"' | losses)
echo "explicit: $explicit"
echo "sdpa:     $sdpa"
awk -v a="$explicit" -v b="$sdpa" 'BEGIN {
  n = split(a, x, ","); m = split(b, y, ",");
  if (n != 3 || m != 3) exit 1;
  for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (!(d <= 1e-5 * x[i])) exit 1 }
}' || fail "--attention sdpa losses [$sdpa] differ from the explicit attention's [$explicit]"

ops=$("$tool" bench ops --size small --iters 1 --only layer_norm --json | grep -c '"op":"layer_norm"')
[ "$ops" = 2 ] || fail "bench ops --only layer_norm printed $ops lines, expected 2 (fwd, fwd+bwd)"

for bad in "--size huge" "--heads 3 --size small" "--steps 0 --size small" "--size small --clock x" \
  "--size small --attention flash" "--size small --attention sdpa --tp 2" "--size small --tp 2abc" \
  "--size small --steps 2x" "--size small --threads 4x" \
  "--size small --attention"; do
  # shellcheck disable=SC2086
  "$tool" bench train $bad >/dev/null 2>&1
  [ $? -eq 2 ] || fail "'bench train $bad' did not exit 2"
done
"$tool" bench ops --size small --dmodel 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "'bench ops --dmodel 0' did not exit 2"
# Integer options are read whole (atoi took "1x" as 1 and ran), the bad one named.
err=$("$tool" bench ops --size small --iters 1x 2>&1 >/dev/null)
[ $? -eq 2 ] || fail "'bench ops --iters 1x' did not exit 2"
case "$err" in *'--iters "1x" is not an integer'*) ;; *) fail "bench ops --iters 1x: $err" ;; esac
# The same in bench models (and its --attention-memory) and bench train without --size; an
# attention case whose [B, H, T, T] scores cannot fit is refused before it allocates.
for bad in "models --batch 1e3" "models --reps 2x" "models --attention-memory --seq 2x" \
  "models --attention-memory --seq 100000" "train --iters 3x" "train --params 0x10"; do
  # shellcheck disable=SC2086
  err=$("$tool" bench $bad 2>&1 >/dev/null)
  [ $? -eq 2 ] || fail "'bench $bad' did not exit 2"
  case "$err" in *"is not an integer"* | *"over 2^30"*) ;; *) fail "bench $bad: $err" ;; esac
done
# Sizes whose counts overflow int64 (d_model^2 x layers = 2^90) or need terabytes, and an
# --only that names no case, are refused before anything runs.
for bad in "--dmodel 1073741824 --heads 1 --layers 1073741824" "--vocab 1073741824 --seq 1073741824" \
  "--size small --only no_such_op"; do
  # shellcheck disable=SC2086
  "$tool" bench ops $bad >/dev/null 2>&1
  [ $? -eq 2 ] || fail "'bench ops $bad' did not exit 2"
done
# --gemm-dtype names its values when refused; bfloat16 GEMM lines measure no error (null in
# JSON, not a 0 that reads as exact), float32 lines do.
err=$("$tool" bench ops --size small --only gemm --gemm-dtype f16 2>&1 >/dev/null)
[ $? -eq 2 ] || fail "'bench ops --gemm-dtype f16' did not exit 2"
case "$err" in *'--gemm-dtype f16: f32 or bf16'*) ;; *) fail "bench ops --gemm-dtype f16: $err" ;; esac
line=$("$tool" bench ops --size small --iters 1 --only gemm --gemm-dtype bf16 --json | grep '"call":"qkv"')
case "$line" in *'"dtype":"bfloat16"'*'"ours_max_err":null,"cblas_max_err":null'*) ;;
*) fail "bench ops --gemm-dtype bf16 --json: $line" ;; esac
line=$("$tool" bench ops --size small --iters 1 --only gemm --json | grep '"call":"qkv"')
case "$line" in *'"ours_max_err":null'* | '') fail "bench ops --only gemm --json: $line" ;; esac
"$tool" bench train --dmodel 1073741824 --heads 1 --layers 1073741824 >/dev/null 2>&1
[ $? -eq 2 ] || fail "'bench train --dmodel 2^30 --layers 2^30' did not exit 2"

[ $failures -eq 0 ] && echo "bench_gpt_smoke: ok"
exit $failures
