#!/bin/sh
# Builds the trace reader fuzzer outside CMake and runs it.
#   fuzz/run.sh [SECONDS]   (default 600; one job; corpus and crashes under fuzz/build/)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out="$here/build"
mkdir -p "$out/corpus" "$out/crashes"
clang -std=c11 -D_POSIX_C_SOURCE=200809L -DDT_BUILDING_LIBRARY -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$here/fuzz_trace_reader.c" "$root"/src/core/*.c "$root"/src/profile/*.c \
  -lpthread -lm -o "$out/fuzz_trace_reader"
cp -n "$here"/seeds/* "$out/corpus/" 2>/dev/null || true
exec "$out/fuzz_trace_reader" "$out/corpus" -dict="$here/trace.dict" \
  -max_total_time="${1:-600}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1
