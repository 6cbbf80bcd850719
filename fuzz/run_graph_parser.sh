#!/bin/sh
# Builds the graph parser fuzzer outside CMake and runs it.
#   fuzz/run_graph_parser.sh [SECONDS]   (default 600; one job; corpus and crashes under
#   fuzz/build/graph/)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out="$here/build/graph"
mkdir -p "$out/corpus" "$out/crashes"
# The parser checks every call node with the op's own shape inference, so it links the
# whole library (and OpenBLAS for the kernels it never runs).
clang -std=c11 -D_POSIX_C_SOURCE=200809L -DDT_BUILDING_LIBRARY -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$here/fuzz_graph_parser.c" $(find "$root/src" -name '*.c') \
  $(pkg-config --cflags --libs openblas) -lpthread -lm -o "$out/fuzz_graph_parser"
cp -n "$here"/seeds_graph/* "$out/corpus/" 2>/dev/null || true
exec "$out/fuzz_graph_parser" "$out/corpus" -dict="$here/graph.dict" \
  -max_total_time="${1:-600}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1
