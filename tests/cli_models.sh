#!/bin/sh
# dtensor generate and dtensor finetune on the hf fixtures (exit 77, skipped, when absent): greedy
# and sampled ids the same on 1 rank, TP 2 and FSDP 2 x TP 2; the five fine-tuning losses of
# transformers (expected.json) to 5 digits; the saved directory loads and generates; errors.
# Usage: cli_models.sh PATH/TO/dtensor FIXTURES_DIR
set -u
tool=$1
hf=$2/hf
# Without the fixtures: 77, CTest's skip, or a failure when DT_REQUIRE_FIXTURES is set (CI).
if [ ! -f "$hf/expected.json" ]; then
  if [ -n "${DT_REQUIRE_FIXTURES:-}" ] && [ "$DT_REQUIRE_FIXTURES" != 0 ]; then
    echo "FAILED (DT_REQUIRE_FIXTURES is set): no $hf/expected.json" >&2
    exit 1
  fi
  echo "SKIPPED: no $hf/expected.json"
  exit 77
fi
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ids() { "$tool" generate --model "$@" | sed -n 's/^ids: //p'; }
for m in llama_tiny gpt2_tiny; do
  one=$(ids "$hf/$m" --prompt-ids 5,9,3,7,1 --max-new 8)
  [ -n "$one" ] || fail "$m: no ids"
  [ "$(ids "$hf/$m" --prompt-ids 5,9,3,7,1 --max-new 8 --tp 2)" = "$one" ] || fail "$m: tp 2 differs"
  s1=$(ids "$hf/$m" --prompt-ids 5,9,3 --max-new 8 --temperature 0.9 --top-k 30 --top-p 0.95 --seed 7)
  s4=$(ids "$hf/$m" --prompt-ids 5,9,3 --max-new 8 --temperature 0.9 --top-k 30 --top-p 0.95 --seed 7 --tp 2 --fsdp 2)
  [ "$s1" = "$s4" ] || fail "$m: sampled ids differ between 1 rank ($s1) and 2x2 ($s4)"
done

out=$(cd "$tmp" && "$tool" finetune --model "$hf/llama_tiny" --data "$hf/llama_tiny/io.safetensors" \
  --key ft_input_ids --steps 5 --tp 2 --out "$tmp/ft")
for want in "step    1  loss 5.58765" "step    3  loss 5.17411" "step    5  loss 4.86764"; do
  echo "$out" | grep -q "$want" || fail "finetune: no '$want' in: $out"
done
[ -f "$tmp/ft/model.safetensors" ] && [ -f "$tmp/ft/config.json" ] || fail "finetune saved nothing"
[ -n "$(ids "$tmp/ft" --prompt-ids 1,2 --max-new 3)" ] || fail "the saved model does not load"

# The tool stops after any of config.json's eos ids, as transformers' generate does: a config
# whose eos list is [an id never generated, the 4th generated id] ends there; --ignore-eos
# runs to --max-new.
full=$(ids "$hf/llama_tiny" --prompt-ids 5,9,3 --max-new 8 --ignore-eos)
fourth=$(echo "$full" | cut -d, -f7)
mkdir "$tmp/eos"
ln -s "$hf/llama_tiny/model.safetensors" "$tmp/eos/model.safetensors"
sed "s/\"eos_token_id\": 2,/\"eos_token_id\": [255, $fourth],/" "$hf/llama_tiny/config.json" >"$tmp/eos/config.json"
grep -q "\[255, $fourth\]" "$tmp/eos/config.json" || fail "the eos list was not written"
want=$(echo "$full" | cut -d, -f1-7)
case ",$(echo "$full" | cut -d, -f4-6)," in *",255,"* | *",$fourth,"*) want=skip ;; esac
got=$(ids "$tmp/eos" --prompt-ids 5,9,3 --max-new 8)
[ "$want" = skip ] || [ "$got" = "$want" ] || fail "eos list: got $got, want $want (full $full)"
[ "$(ids "$tmp/eos" --prompt-ids 5,9,3 --max-new 8 --ignore-eos)" = "$full" ] ||
  fail "--ignore-eos did not run to --max-new"

# An int64 [0, 8] batch: no target positions. The loss was -nan, the tool exited 0 and saved.
hdr='{"input_ids":{"dtype":"I64","shape":[0,8],"data_offsets":[0,0]}}'
printf "$(printf '\\%03o' ${#hdr})\\000\\000\\000\\000\\000\\000\\000%s" "$hdr" >"$tmp/empty.safetensors"
err=$("$tool" finetune --model "$hf/llama_tiny" --data "$tmp/empty.safetensors" --steps 1 \
  --out "$tmp/ft_empty" 2>&1)
[ $? -ne 0 ] || fail "finetune on an empty batch exited 0: $err"
echo "$err" | grep -q "has no rows" || fail "finetune on an empty batch: $err"
[ ! -e "$tmp/ft_empty" ] || fail "finetune on an empty batch saved $tmp/ft_empty"

"$tool" generate --model "$hf/llama_tiny" --prompt-ids 1,x >/dev/null 2>&1 && fail "bad ids accepted"
"$tool" generate --model "$tmp/none" --prompt-ids 1 >/dev/null 2>&1 && fail "missing model accepted"
"$tool" finetune --model "$hf/llama_tiny" >/dev/null 2>&1 && fail "finetune without --data accepted"
exit $failures
