#!/bin/sh
# Builds one libFuzzer target (clang, ASan + UBSan) outside CMake and runs it.
#   fuzz/run.sh TARGET [SECONDS]
#     TARGET   trace_reader | graph_parser | safetensors | checkpoint_meta, or lib (only the
#              library archive the targets link, fuzz/build/libdtensor_fuzz.a)
#     SECONDS  default 600; 0 only builds (CI keeps every target building this way)
# The library is compiled once into that archive (in parallel) and reused by every target while
# no file under src/ or include/ is newer than it.
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
lib) ;;
*)
  echo "usage: fuzz/run.sh trace_reader|graph_parser|safetensors|checkpoint_meta|lib [SECONDS]" >&2
  exit 2
  ;;
esac
flags="-std=c11 -D_POSIX_C_SOURCE=200809L -DDT_BUILDING_LIBRARY -g -O1"
flags="$flags -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
flags="$flags -I$root/include -I$root/src $(pkg-config --cflags openblas)"
lib="$here/build/libdtensor_fuzz.a"
if [ ! -f "$lib" ] || [ -n "$(find "$root/src" "$root/include" -newer "$lib" -print -quit)" ] ||
  [ "$target" = lib ]; then
  # The library as the CPU build of CMakeLists.txt lists it: no MPI backend (the fuzzers need
  # no MPI), no NCCL backend, none of the CUDA sources but the three plain-C ones the CPU build
  # keeps.
  objs="$here/build/objs"
  rm -rf "$objs" && mkdir -p "$objs"
  sources=$(find "$root/src" -name '*.c' ! -path '*/comm/mpi/*' ! -path '*/comm/nccl/*' \
    ! -path '*/kernels/cuda/*' ! -name '*_cuda.c')
  sources="$sources $root/src/kernels/cuda/cuda_absent.c $root/src/kernels/cuda/caching_allocator.c"
  sources="$sources $root/src/kernels/cuda/gemm_plan.c"
  # One object per source, named by its path under src/ (two files may share a base name).
  for f in $sources; do echo "$f"; done |
    xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c \
      'o=$(echo "${1#$2/src/}" | tr / _); exec clang $3 -c "$1" -o "$4/${o%.c}.o"' \
      sh {} "$root" "$flags" "$objs"
  rm -f "$lib.tmp" && ar rcs "$lib.tmp" "$objs"/*.o && mv "$lib.tmp" "$lib"
fi
if [ "$target" = lib ]; then exit 0; fi
out="$here/build/$target"
mkdir -p "$out/corpus" "$out/crashes"
clang $flags -fsanitize=fuzzer "$here/fuzz_$target.c" "$lib" \
  $(pkg-config --libs openblas) -lpthread -lm -o "$out/fuzz_$target"
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
