#!/usr/bin/env bash
# The device check (issue 24): on a bare machine with an NVIDIA GPU, nvcc and no network, from
# the repository root, builds the CUDA variant and runs the `cuda` tests (the differential
# sweep among them, when it exists), then `dtensor bench cuda` when the tool has it, and
# writes one summary, device-check.json, into $OUT (or device-check-out/). Under 6 minutes on
# 16 cores: the library, the tool and the CUDA tests only, for the GPU's own architecture.
#
# What the machine lacks travels as Debian packages in .device-pack/ (scripts/device-pack.sh,
# run on a CPU machine; name .device-pack in the device tool's `carry`): they are unpacked
# into a private prefix (dpkg-deb -x into /tmp, never into /), found through PKG_CONFIG_PATH,
# CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
#
# Without a GPU (or without a driver) it still configures, builds and runs the tests, which
# skip, and reports "status": "no_gpu". Exit status: 0 when everything that ran passed.
#
# Environment: DT_CHECK_JOBS (build jobs, default 16), DT_CHECK_BUILD (build folder, default
# build-device), DT_CHECK_ARCH (CMAKE_CUDA_ARCHITECTURES; default: the GPU's, else the
# project's default), DT_CHECK_BUILD_TIMEOUT (default 240 s), DT_CHECK_BENCH_SECONDS (90).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
start=$(date +%s)
out="${OUT:-$root/device-check-out}"
mkdir -p "$out"
jobs="${DT_CHECK_JOBS:-16}"
build="${DT_CHECK_BUILD:-build-device}"
log="$out/device-check.log"
: > "$log"
notes=()
say() { echo "device-check: $*" | tee -a "$log"; }
elapsed() { echo $(($(date +%s) - start)); }

# ---- The machine ----------------------------------------------------------------------------
gpu_name="" gpu_driver="" gpu_memory="" gpu_cc=""
if command -v nvidia-smi > /dev/null 2>&1 &&
  line=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2> /dev/null | head -1) && [ -n "$line" ]; then
  IFS=',' read -r gpu_name gpu_driver gpu_memory gpu_cc <<< "$line"
  gpu_name=$(echo "$gpu_name" | sed 's/^ *//; s/ *$//')
  gpu_driver=$(echo "$gpu_driver" | tr -d ' ')
  gpu_memory=$(echo "$gpu_memory" | sed 's/^ *//')
  gpu_cc=$(echo "$gpu_cc" | tr -d ' ')
  say "GPU: $gpu_name, driver $gpu_driver, $gpu_memory, compute capability $gpu_cc"
else
  say "no GPU: nvidia-smi is absent or lists no device; the cuda tests will skip"
  notes+=("no GPU: nvidia-smi is absent or lists no device")
fi
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
nvcc_version=""
[ -n "$nvcc" ] && nvcc_version=$("$nvcc" --version | tail -1)

# ---- The packages that travelled --------------------------------------------------------------
prefix=""
pkg_config=$(command -v pkg-config || true)
if ls .device-pack/*.deb > /dev/null 2>&1; then
  # One fixed path, so that a second run's compile flags are the same (ccache, make).
  prefix=/tmp/dt-device-prefix
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .device-pack/*.deb; do dpkg-deb -x "$deb" "$prefix" || notes+=("cannot unpack $deb"); done
  # Their .pc files name /usr: point them at the prefix. Criterion's Requires.private and
  # Libs.private name -dev packages not carried (the tests link its shared library).
  while IFS= read -r pc; do
    sed -i "s|=/usr|=$prefix/usr|g" "$pc"
    case "$pc" in */criterion.pc) sed -i '/^Requires.private/d; /^Libs.private/d' "$pc" ;; esac
  done < <(find "$prefix" -name '*.pc')
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  export PKG_CONFIG_PATH="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  pkg_config=$(command -v pkg-config || echo "$prefix/usr/bin/pkgconf")
  say "unpacked $(ls .device-pack/*.deb | wc -l) packages into $prefix"
else
  say "no .device-pack/: using the machine's own OpenBLAS, cJSON and pkg-config"
  notes+=("no .device-pack: the machine's own packages were used")
fi

# ---- Configure and build ----------------------------------------------------------------------
configure_rc=-1 build_rc=-1 build_s=0 tests_json="null" diff_json="null" bench_json="null"
arch="${DT_CHECK_ARCH:-}"
[ -z "$arch" ] && [ -n "$gpu_cc" ] && arch="$(echo "$gpu_cc" | tr -d .)-real"
if [ -z "$nvcc" ]; then
  say "no nvcc on PATH or in /usr/local/cuda: nothing to build"
  notes+=("no nvcc")
else
  launcher=()
  command -v ccache > /dev/null 2>&1 &&
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  say "configure: $build (nvcc $nvcc_version, architectures ${arch:-default})"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDT_WITH_CUDA=ON -DDT_CUDA_TESTS_ONLY=ON \
    -DDT_WITH_MPI=OFF -DCMAKE_CUDA_COMPILER="$nvcc" ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} \
    ${pkg_config:+-DPKG_CONFIG_EXECUTABLE=$pkg_config} \
    "${launcher[@]}" >> "$log" 2>&1
  configure_rc=$?
  if [ $configure_rc -eq 0 ]; then
    b0=$(date +%s)
    timeout "${DT_CHECK_BUILD_TIMEOUT:-240}" cmake --build "$build" -j "$jobs" >> "$log" 2>&1
    build_rc=$?
    build_s=$(($(date +%s) - b0))
    say "build: exit $build_rc in ${build_s}s"
  else
    say "configure failed (exit $configure_rc): see $log"
  fi
fi

# ---- Tests: ctest -L cuda (the differential sweep is one of them) -----------------------------
count_of() { grep -c "$1" "$2" 2> /dev/null || true; }
if [ "$build_rc" -eq 0 ]; then
  tlog="$out/ctest-cuda.log"
  (cd "$build" && timeout 150 ctest -L cuda --output-on-failure --timeout 120 -j 2) > "$tlog" 2>&1
  tests_rc=$?
  passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$tlog")
  skipped=$(grep -cE "Test +#[0-9]+: .*Skipped" "$tlog")
  failed=$(grep -E "Test +#[0-9]+: " "$tlog" | grep -cvE " Passed|Skipped")
  tests_json="{\"exit\": $tests_rc, \"passed\": $passed, \"failed\": $failed, \"skipped\": $skipped}"
  say "ctest -L cuda: exit $tests_rc, $passed passed, $failed failed, $skipped skipped"
  if grep -q "test_cuda_differential" "$tlog"; then
    d=$(grep -E "Test +#[0-9]+: test_cuda_differential " "$tlog" | sed 's/.*test_cuda_differential *\.* *//; s/ .*//')
    diff_json="{\"result\": \"${d:-unknown}\"}"
  else
    notes+=("no differential sweep (test_cuda_differential) in this tree")
  fi
fi

# ---- dtensor bench cuda ------------------------------------------------------------------------
tool="$build/dtensor"
if [ "$build_rc" -eq 0 ] && [ -x "$tool" ]; then
  if "$tool" bench --help 2>&1 | grep -qw cuda; then
    if [ -n "$gpu_name" ]; then
      timeout "${DT_CHECK_BENCH_SECONDS:-90}" "$tool" bench cuda > "$out/bench-cuda.jsonl" 2>> "$log"
      bench_rc=$?
      bench_json="{\"exit\": $bench_rc, \"lines\": $(wc -l < "$out/bench-cuda.jsonl")}"
      say "dtensor bench cuda: exit $bench_rc"
    else
      notes+=("dtensor bench cuda not run: no GPU")
    fi
  else
    notes+=("the tool has no 'bench cuda' yet")
  fi
fi

# ---- Summary -----------------------------------------------------------------------------------
status="ok"
[ "$configure_rc" -ne 0 ] || [ "$build_rc" -ne 0 ] && status="failed"
[ "$tests_json" != "null" ] && [ "${tests_rc:-0}" -ne 0 ] && status="failed"
[ "$status" = "ok" ] && [ -z "$gpu_name" ] && status="no_gpu"
json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
notes_json=""
for n in "${notes[@]+"${notes[@]}"}"; do notes_json="${notes_json:+$notes_json, }$(json_string "$n")"; done
cat > "$out/device-check.json" << JSON
{"status": "$status", "elapsed_s": $(elapsed),
 "gpu": {"name": $(json_string "$gpu_name"), "driver": $(json_string "$gpu_driver"), "memory": $(json_string "$gpu_memory"), "compute_capability": $(json_string "$gpu_cc")},
 "nvcc": $(json_string "$nvcc_version"), "commit": $(json_string "$(git rev-parse --short HEAD 2> /dev/null || echo unknown)"),
 "configure_exit": $configure_rc, "build_exit": $build_rc, "build_s": $build_s, "architectures": $(json_string "${arch:-default}"),
 "cuda_tests": $tests_json, "differential": $diff_json, "bench_cuda": $bench_json,
 "notes": [$notes_json]}
JSON
say "status $status in $(elapsed)s; summary in $out/device-check.json"
[ -n "$prefix" ] && rm -rf "$prefix"
[ "$status" = "failed" ] && exit 1
exit 0
