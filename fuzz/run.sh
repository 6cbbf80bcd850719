#!/bin/sh
# Builds one libFuzzer target (clang, ASan + UBSan) outside CMake and runs it.
#   fuzz/run.sh TARGET [SECONDS]
#     TARGET   trace_reader | graph_parser | safetensors | checkpoint_meta
#     SECONDS  default 600; 0 only builds (CI keeps every target building this way)
# One job; corpus and crashes under fuzz/build/TARGET/. The corpus starts from the target's
# seeds (and, for safetensors, the reference library's files in the shared fixtures).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
target=${1:-}
seconds=${2:-600}
case "$target" in
trace_reader) seeds="$here/seeds" dict="$here/trace.dict" ;;
graph_parser) seeds="$here/seeds_graph" dict="$here/graph.dict" ;;
safetensors) seeds="" dict="$here/safetensors.dict" ;;
checkpoint_meta) seeds="$here/seeds_checkpoint" dict="$here/checkpoint_meta.dict" ;;
*)
  echo "usage: fuzz/run.sh trace_reader|graph_parser|safetensors|checkpoint_meta [SECONDS]" >&2
  exit 2
  ;;
esac
out="$here/build/$target"
mkdir -p "$out/corpus" "$out/crashes"
# The library as the CPU build of CMakeLists.txt lists it: no MPI backend (the fuzzers need no
# MPI), no NCCL backend, none of the CUDA sources but the three plain-C ones the CPU build keeps.
sources=$(find "$root/src" -name '*.c' ! -path '*/comm/mpi/*' ! -path '*/comm/nccl/*' \
  ! -path '*/kernels/cuda/*' ! -name '*_cuda.c')
sources="$sources $root/src/kernels/cuda/cuda_absent.c $root/src/kernels/cuda/caching_allocator.c"
sources="$sources $root/src/kernels/cuda/gemm_plan.c"
clang -std=c11 -D_POSIX_C_SOURCE=200809L -DDT_BUILDING_LIBRARY -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$here/fuzz_$target.c" $sources \
  $(pkg-config --cflags --libs openblas) -lpthread -lm -o "$out/fuzz_$target"
if [ "$seconds" = 0 ]; then exit 0; fi
if [ -n "$seeds" ]; then cp -n "$seeds"/* "$out/corpus/" 2>/dev/null || true; fi
if [ "$target" = safetensors ]; then
  fixtures="${DT_FIXTURES_DIR:-$root/../shared/fixtures}"
  for f in "$fixtures"/safetensors/*.safetensors; do
    if [ -f "$f" ]; then cp -n "$f" "$out/corpus/" 2>/dev/null || true; fi
  done
fi
exec "$out/fuzz_$target" "$out/corpus" -dict="$dict" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1
