#!/bin/sh
# Builds the safetensors reader fuzzer outside CMake and runs it.
#   fuzz/run_safetensors.sh [SECONDS]   (default 600; one job; corpus and crashes under
#   fuzz/build/safetensors/). SECONDS=0 only builds (the CI build check).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out="$here/build/safetensors"
mkdir -p "$out/corpus" "$out/crashes"
# The reader creates tensors (tensor module) and the writer's output file lives in profile;
# the whole library is linked, as for the graph parser fuzzer.
clang -std=c11 -D_POSIX_C_SOURCE=200809L -DDT_BUILDING_LIBRARY -g -O1 \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$here/fuzz_safetensors.c" $(find "$root/src" -name '*.c' ! -path '*/comm/mpi/*') \
  $(pkg-config --cflags --libs openblas) -lpthread -lm -o "$out/fuzz_safetensors"
if [ "${1:-600}" = 0 ]; then exit 0; fi
# Seeds: the reference library's files from the shared fixtures (used in place, never
# copied into the project; DT_FIXTURES_DIR overrides ../shared/fixtures).
fixtures="${DT_FIXTURES_DIR:-$root/../shared/fixtures}"
for f in "$fixtures"/safetensors/*.safetensors; do
  [ -f "$f" ] && cp -n "$f" "$out/corpus/" 2>/dev/null || true
done
exec "$out/fuzz_safetensors" "$out/corpus" -dict="$here/safetensors.dict" \
  -max_total_time="${1:-600}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1
