#!/usr/bin/env bash
# The device check (issues 24 and 25): on a bare machine with an NVIDIA GPU, nvcc and no
# network, from the repository root, builds the CUDA variant and runs every test under
# tests/cuda (ctest -L cuda: the differential sweep, the threads backend on GPU memory, CUDA
# meshes, GPU traces, NCCL at world size 1 when the build has NCCL), then `dtensor bench cuda`
# when the tool has it, then the seeds on CUDA and the demo on the GPU (below), and writes one
# summary, device-check.json, into $OUT (or device-check-out/). One prepared run, well under 10
# minutes on 16 cores: the library, the tool and the CUDA tests only, for the GPU's own
# architecture, and every later step bounded by what is left of DT_CHECK_BUDGET.
#
# The seeds and the main job on CUDA (issue 25 items 5 and 6), each a `dtensor` command with
# --device cuda, its output in $OUT/seeds/ (JSON lines where the command has them):
#   seed000  bench dispatch --device cuda --json     (a + a, 512x512 Shard(0), 4 ranks: miss/hit)
#   seed001  bench instructions --device cuda --time --json  (detach etc., fake world 256;
#            instruction counts too when valgrind is there)
#   seed003  demo tp --device cuda                   (refused: programs hold host parameters)
#   seed004  bench compile --device cuda --json      (the Replicate 202048x256 embedding)
#   demo     demo --device cuda --steps 100          (2 x 2 ranks sharing the GPU vs 1 rank)
#   train    bench train --only demo --device cuda --json
# Without a GPU each still runs once and must refuse at once naming the missing device; the
# summary records every exit status and the first error line.
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
# project's default), DT_CHECK_BUILD_TIMEOUT (default 240 s), DT_CHECK_BENCH_SECONDS (90),
# DT_CHECK_BUDGET (default 500 s: no step starts past it, and each step's timeout is cut to
# what is left of it).
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
json_string() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
budget="${DT_CHECK_BUDGET:-500}"
# The timeout for a step that wants $1 seconds: at most what is left of the budget (0: none).
step_timeout() {
  local left=$((budget - $(elapsed)))
  [ "$left" -lt 10 ] && { echo 0; return; }
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

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
  t=$(step_timeout 200)
  [ "$t" -eq 0 ] && t=1 # the budget is spent: ctest is cut at once, and fails
  (cd "$build" && timeout "$t" ctest -L cuda --output-on-failure --timeout 150 -j 4) > "$tlog" 2>&1
  tests_rc=$?
  passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$tlog")
  skipped=$(grep -cE "Test +#[0-9]+: .*Skipped" "$tlog")
  failed=$(grep -E "Test +#[0-9]+: " "$tlog" | grep -cvE " Passed|Skipped")
  tests_json="{\"exit\": $tests_rc, \"passed\": $passed, \"failed\": $failed, \"skipped\": $skipped}"
  say "ctest -L cuda: exit $tests_rc, $passed passed, $failed failed, $skipped skipped"
  if grep -q "test_cuda_differential" "$tlog"; then
    d=$(grep -E "Test +#[0-9]+: test_cuda_differential " "$tlog" | sed 's/.*test_cuda_differential *\.* *//; s/^\**//; s/ .*//')
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
      timeout "${DT_CHECK_BENCH_SECONDS:-90}" "$tool" bench cuda --json > "$out/bench-cuda.jsonl" 2>> "$log"
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

# ---- The seeds and the demo on CUDA ----------------------------------------------------------
seeds_json="null"
nccl_in_build=false # CMake's configure output says whether it found NCCL (test_cuda_nccl)
grep -q "dtensor: NCCL backend (" "$log" && nccl_in_build=true
[ "$nccl_in_build" = false ] && notes+=("no NCCL in the build: test_cuda_nccl and the NCCL cases skip")
if [ "$build_rc" -eq 0 ] && [ -x "$tool" ]; then
  mkdir -p "$out/seeds"
  seeds_json=""
  seeds_ran_without_gpu=0 # commands that exited 0 without a GPU (each must refuse)
  case "$tool" in /*) abs_tool=$tool ;; *) abs_tool="$root/$tool" ;; esac
  # run_seed NAME SECONDS ARGS...: the tool with ARGS, its output in seeds/NAME.out.
  run_seed() {
    local name=$1 want=$2 t rc first
    shift 2
    t=$(step_timeout "$want")
    if [ "$t" -eq 0 ]; then
      seeds_json="${seeds_json:+$seeds_json, }\"$name\": {\"exit\": null, \"note\": \"no time left\"}"
      say "$name: skipped, the budget is spent"
      return
    fi
    # In seeds/: the demo writes its trace and loss curve into the working directory.
    (cd "$out/seeds" && timeout "$t" "$abs_tool" "$@" > "$name.out" 2> "$name.err")
    rc=$?
    [ -z "$gpu_name" ] && [ "$rc" -eq 0 ] && seeds_ran_without_gpu=$((seeds_ran_without_gpu + 1))
    first=$(grep -m1 -iE "error|fail|refus|not (available|supported)|skipped" "$out/seeds/$name.err" |
      cut -c1-300)
    seeds_json="${seeds_json:+$seeds_json, }\"$name\": {\"exit\": $rc, \"seconds_limit\": $t, \"first_error\": $(json_string "$first")}"
    say "$name ($*): exit $rc${first:+: $first}"
  }
  run_seed seed000 90 bench dispatch --device cuda --json
  run_seed seed001 60 bench instructions --device cuda --time --json
  if command -v valgrind > /dev/null 2>&1 && [ -n "$gpu_name" ]; then
    run_seed seed001_instructions 120 bench instructions --device cuda --json
  else
    notes+=("seed 001 instruction counts not run: valgrind absent or no GPU")
  fi
  run_seed seed003 20 demo tp --device cuda
  run_seed seed004 90 bench compile --device cuda --json
  run_seed demo 120 demo --device cuda --steps 100
  run_seed train 90 bench train --only demo --device cuda --json
  seeds_json="{$seeds_json}"
  if [ -z "$gpu_name" ]; then
    notes+=("the seed commands ran without a GPU: each must refuse (exit != 0)")
    [ "$seeds_ran_without_gpu" -gt 0 ] &&
      notes+=("$seeds_ran_without_gpu seed command(s) exited 0 without a GPU")
  fi
fi

# ---- Summary -----------------------------------------------------------------------------------
status="ok"
[ "$configure_rc" -ne 0 ] || [ "$build_rc" -ne 0 ] && status="failed"
[ "$tests_json" != "null" ] && [ "${tests_rc:-0}" -ne 0 ] && status="failed"
[ "${seeds_ran_without_gpu:-0}" -gt 0 ] && status="failed"
[ "$status" = "ok" ] && [ -z "$gpu_name" ] && status="no_gpu"
notes_json=""
for n in "${notes[@]+"${notes[@]}"}"; do notes_json="${notes_json:+$notes_json, }$(json_string "$n")"; done
cat > "$out/device-check.json" << JSON
{"status": "$status", "elapsed_s": $(elapsed),
 "gpu": {"name": $(json_string "$gpu_name"), "driver": $(json_string "$gpu_driver"), "memory": $(json_string "$gpu_memory"), "compute_capability": $(json_string "$gpu_cc")},
 "nvcc": $(json_string "$nvcc_version"), "commit": $(json_string "$(git rev-parse --short HEAD 2> /dev/null || echo unknown)"),
 "configure_exit": $configure_rc, "build_exit": $build_rc, "build_s": $build_s, "architectures": $(json_string "${arch:-default}"),
 "cuda_tests": $tests_json, "differential": $diff_json, "bench_cuda": $bench_json,
 "nccl_in_build": $nccl_in_build, "seeds": $seeds_json,
 "notes": [$notes_json]}
JSON
say "status $status in $(elapsed)s; summary in $out/device-check.json"
[ -n "$prefix" ] && rm -rf "$prefix"
[ "$status" = "failed" ] && exit 1
exit 0
