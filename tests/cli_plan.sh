#!/bin/sh
# dtensor plan: output placements and bytes of a few cases whose answers are worked out by hand,
# and its errors (exit 2 on bad input, 1 when the op itself fails).
# Usage: cli_plan.sh PATH/TO/dtensor
set -u
tool=$1
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect WORDS... -- the output of `dtensor plan WORDS` must contain each of the patterns after --.
expect() {
  args=""
  while [ "$1" != "--" ]; do args="$args $1"; shift; done
  shift
  # shellcheck disable=SC2086
  out=$("$tool" plan $args 2>&1)
  status=$?
  if [ $status -ne 0 ]; then fail "'dtensor plan$args' exited $status: $out"; return; fi
  for pattern in "$@"; do
    case "$out" in
    *"$pattern"*) ;;
    *) fail "'dtensor plan$args' lacks '$pattern': $out" ;;
    esac
  done
}

# [6, 4] Shard(1) flattened on 4 ranks: a strided shard (6 blocks of 4), nothing moves.
expect 4 flatten 6x4:S1 -- "output: [24] SS(0,6)" "collectives: 0, bytes: 0"
# mm of [8, 6] S(1) by [6, 4] S(0): each rank contracts its slice of k, a Partial(sum) result.
expect --json 4 mm 8x6:S1 6x4:S0 -- '"out_shape":[8,4]' '"out_placements":["P(sum)"]' '"bytes":0'
# A Partial(max) [7] added to a row-sharded [5, 7]: it must be reduced, one all_reduce of
# 7 floats = 28 bytes.
expect --json 4 add 5x7:S0 7:Pmax -- '"out_placements":["S(0)"]' '"all_reduce":{"calls":1,"bytes":28}'
# log_softmax over dim 1 of [8, 6] [S(1), R] on 2x2: one all_to_all on mesh dim 0 hands it
# the rows instead of the columns (S(1) -> S(0)): this rank's [8, 3] floats = 96 bytes, as
# many as gathering dim 1 after slicing dim 0 on the idle mesh dim 1, and no local step.
expect 2x2 log_softmax 8x6:S1,R dim=1 -- "output: [8,6] S(0),R" "all_to_all" "bytes: 96"
# Overloads by tensor count and attributes: one tensor makes `add` add.Scalar (other=), dim=
# makes `sum` sum.dim_IntList, and the ATen name picks it directly.
expect 4 add 8x6:S0 other=2 -- "output: [8,6] S(0)" "bytes: 0"
expect 4 sum 8x6:S0 dim=0 -- "output: [6] P(sum)" "bytes: 0"
expect 4 sum.dim_IntList 8x6:S1 dim=1 keepdim=true -- "output: [8,1] P(sum)"
# A StridedShard input (SS0/6: '/' since ',' separates placements): [24] SS(0,6) on 4 ranks
# viewed back as [6, 4] is Shard(1), moving nothing.
expect 4 view 24:SS0/6 size=6x4 -- "output: [6,4] S(1)" "bytes: 0"

# Bad input: usage errors exit 2 with a message on stderr, nothing on stdout.
check_usage() {
  out=$("$tool" plan "$@" 2>/tmp/cli_plan_err.$$)
  status=$?
  if [ $status -ne 2 ]; then fail "'dtensor plan $*' exited $status, not 2"; fi
  if [ -n "$out" ]; then fail "'dtensor plan $*' printed on stdout: $out"; fi
  grep -q "dtensor plan: " /tmp/cli_plan_err.$$ || fail "'dtensor plan $*' gave no message"
  rm -f /tmp/cli_plan_err.$$
}
check_usage 4 mm 8x6:Q 6x4:R
check_usage 4 mm 8x6:S0
check_usage 2x2 relu 8x6:S0
check_usage 4 frobnicate 8x6:S0
check_usage 4 sum 8x6:S0 colour=blue
check_usage 4 relu 8x6:S2
# A separator with nothing after it is not a dim (it was read as "2" and "8").
check_usage 2x relu 8:R
check_usage 4 relu 8x:R
check_usage 4 layer_norm 8x4:S0 normalized_shape=99999999999999999999
# Arguments are the schema's: a name it lacks, a required one left out, a bad value.
check_usage 4 softmax 8x6:S0
check_usage 4 transpose 8x6:S0 dim0=0 dim1=x
check_usage 4 view 24:S0 shape=6x4
check_usage 4 relu 24:SS0/0
check_usage 4 relu 24:SS0
check_usage
# A bad value of an attribute an overload knows names that attribute, not "unknown attribute"
# from the overload tried first.
err=$("$tool" plan 4 sum 8x6:S0 dim=1.5 2>&1)
case "$err" in *"sum.dim_IntList"*"dim=1.5"*) ;; *) fail "sum dim=1.5: $err" ;; esac
# The op refuses its inputs: exit 1 and the library's message.
err=$("$tool" plan 4 mm 8x5:R 6x4:R 2>&1)
status=$?
if [ $status -ne 1 ]; then fail "mm of [8,5] by [6,4] exited $status, not 1"; fi
case "$err" in *"inner dims 5 and 6 differ"*) ;; *) fail "mm of [8,5] by [6,4]: $err" ;; esac

# Batch mode (when built with cJSON): one JSON line out per line in, ids kept, errors in-band.
if "$tool" plan --stdin </dev/null 2>/dev/null; then
  out=$(printf '%s\n' \
    '{"id":7,"mesh":[4],"op":"flatten","args":[{"shape":[6,4],"placements":["S1"]}]}' \
    '{"id":8,"mesh":[4],"op":"mm","args":[{"shape":[6,4],"placements":["Q"]}]}' |
    "$tool" plan --stdin)
  case "$out" in
  *'"id":7,"op":"flatten","mesh":[4],"ok":true,"out_shape":[24],"out_placements":["SS(0,6)"],"calls":0,"bytes":0'*) ;;
  *) fail "--stdin flatten: $out" ;;
  esac
  case "$out" in *'"id":8,"ok":false,"status":"usage"'*) ;; *) fail "--stdin bad case: $out" ;; esac
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] || fail "--stdin: not one line per case: $out"
  # Numbers that are not int64 whole numbers, attrs that are not an object, a dtype that is
  # not a string and separators inside a placement string are usage errors (they were
  # truncated, cast out of range, ignored or read as another placement or a dtype).
  for bad in '{"id":1,"mesh":[2.7],"op":"relu","args":[{"shape":[8],"placements":["R"]}]}' \
    '{"id":1,"mesh":[1e300],"op":"relu","args":[{"shape":[8],"placements":["R"]}]}' \
    '{"id":1,"mesh":[4],"op":"relu","args":[{"shape":[-1e30],"placements":["R"]}]}' \
    '{"id":1,"mesh":[4],"op":"sum","args":[{"shape":[8],"placements":["R"]}],"attrs":[0]}' \
    '{"id":1,"mesh":[4],"op":"relu","args":[{"shape":[8],"placements":["R"],"dtype":5}]}' \
    '{"id":1,"mesh":[4],"op":"relu","args":[{"shape":[8],"placements":["S0,R"]}]}' \
    '{"id":1,"mesh":[4],"op":"relu","args":[{"shape":[8],"placements":["R:i64"]}]}'; do
    out=$(printf '%s\n' "$bad" | "$tool" plan --stdin)
    case "$out" in *'"id":1,"ok":false,"status":"usage"'*) ;; *) fail "--stdin $bad: $out" ;; esac
  done
  # A message quoting 100 euro signs is cut at 200 bytes, mid-character: the line stays UTF-8
  # (the cut character is U+FFFD), so a reader decoding it does not fail.
  if command -v iconv >/dev/null 2>&1; then
    euros=$(i=0; while [ $i -lt 100 ]; do printf '\342\202\254'; i=$((i + 1)); done)
    line='{"id":1,"mesh":[4],"op":"relu","args":[{"shape":[8],"placements":["'$euros'"]}]}'
    printf '%s\n' "$line" | "$tool" plan --stdin | iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1 ||
      fail "--stdin: a truncated message is not valid UTF-8"
  fi
fi

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "cli_plan: all passed"
