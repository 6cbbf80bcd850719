#!/usr/bin/env bash
# The device check (issues 24, 25 and 39): on a bare machine with an NVIDIA GPU, nvcc and no
# network, from the repository root, builds what it runs (--target dtensor_cli cuda_tests, for
# the GPU's architecture alone), runs every test under tests/cuda (ctest -L cuda), reruns a
# failing test alone with CUDA_LAUNCH_BLOCKING=1 and under compute-sanitizer so that the
# failing kernel is named, runs `dtensor bench cuda`, then the seeds and the demo on CUDA in a
# scratch folder. One prepared run inside DT_CHECK_BUDGET (360 s): a second run fits in the
# device tool's 15 minutes (--dry-run prints the accounting).
#
# What comes back (the device tool returns at most 8 files and the last 12,000 characters of
# output), five files in $OUT (or device-check-out/):
#   device-check.json   the summary, also printed last on stdout: exit statuses, the names of
#                       failed and skipped tests with the reason of each skip, what was used
#   device-check.log    configure, build, libraries, reruns, seed commands
#   ctest-cuda.log      every test's output (ctest -V)
#   bench-cuda.jsonl    the JSON lines of `bench cuda` and of the seeds that print them
#   seeds.tar.gz        the seeds' and the demo's outputs (the trace of a short demo)
#
# The seeds, each a `dtensor` command with --device cuda:
#   seed000  bench dispatch --device cuda --json     seed001  bench instructions ... --time --json
#   seed003  demo tp --device cuda (must refuse)     seed004  bench compile --device cuda --json
#   demo     demo --device cuda --steps 20           train    bench train --only demo ... --json
# Without a GPU each still runs once and must refuse at once.
#
# Libraries: the machine's NCCL and cuBLAS may be Python wheels (nvidia-nccl-cu13,
# nvidia-cublas) holding libnccl.so.2 and no libnccl.so: the script links the names CMake and
# the linker look for in a scratch folder, exports NCCL_HOME and LD_LIBRARY_PATH, and logs the
# headers, libraries and the NCCL version used. What the machine lacks otherwise (OpenBLAS,
# cJSON, DLPack's header, pkg-config) travels as Debian packages in .device-pack/
# (scripts/device-pack.sh; name .device-pack in the device tool's `carry`), unpacked into a
# private prefix. With a GPU, a missing NCCL, cuBLAS, DLPack header or OpenBLAS stops the check
# before the build, naming it; a test that skips because NCCL or DLPack was not found counts as
# failed, and so does any other skip except test_cuda_absent's (which skips on a GPU).
#
# Without a GPU it still configures, builds and runs the tests, which skip (each is named with
# its reason), and reports "status": "no_gpu". Exit status: 0 when everything that ran passed.
#
# Usage: scripts/device-check.sh [--dry-run]
#   --dry-run  prints the files it would write, each step's time limit and the device-time
#              accounting of a run and a rerun, writes the summary (status "dry_run") and runs
#              nothing else.
# Environment: DT_CHECK_JOBS (build jobs, default 16), DT_CHECK_BUILD (build folder, default
# build-device), DT_CHECK_ARCH (CMAKE_CUDA_ARCHITECTURES; default: the GPU's, else 90-real),
# DT_CHECK_BUDGET (default 360 s: no step starts past it, and each step's limit is cut to what
# is left of it), DT_CHECK_LABEL (a free text copied into the summary, escaped: which run it is).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
dry_run=false
for a in "$@"; do
  case "$a" in
    --dry-run) dry_run=true ;;
    *) echo "device-check: unknown argument '$a' (usage: $0 [--dry-run])" >&2; exit 2 ;;
  esac
done
start=$(date +%s)
out="${OUT:-$root/device-check-out}"
mkdir -p "$out"
jobs="${DT_CHECK_JOBS:-16}"
build="${DT_CHECK_BUILD:-build-device}"
budget="${DT_CHECK_BUDGET:-360}"
log="$out/device-check.log"
summary="$out/device-check.json"
: > "$log"
notes=()
say() { echo "device-check: $*" | tee -a "$log" >&2; }
note() { notes+=("$1"); say "$1"; }
elapsed() { echo $(($(date +%s) - start)); }

# JSON strings: backslash and quote escaped, newlines, tabs and every other control byte as
# escapes, invalid UTF-8 dropped, so that the summary stays valid whatever a tool printed.
ctl_sed=""
for b in $(seq 1 31); do
  case $b in 9 | 10 | 13) ;; *) ctl_sed+=$(printf 's/\\x%02x/\\\\u%04x/g;' "$b" "$b") ;; esac
done
utf8_clean() { if command -v iconv > /dev/null 2>&1; then iconv -c -f UTF-8 -t UTF-8; else LC_ALL=C tr -d '\200-\377'; fi; }
json_string() {
  printf '"%s"' "$(printf '%s' "$1" | utf8_clean |
    LC_ALL=C sed 's/\\/\\\\/g; s/"/\\"/g; s/\t/\\t/g; s/\r/\\r/g;'"$ctl_sed" |
    awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }')"
}
json_list() { # the arguments as a JSON array of strings
  local s="" x
  for x in "$@"; do s="${s:+$s, }$(json_string "$x")"; done
  printf '[%s]' "$s"
}

# ---- The budget: each step's limit, in the order the steps run ------------------------------
# The sum is the budget: a step that ends early leaves its time to the next ones.
step_names=(setup configure build ctest reruns bench seeds)
step_caps=(15 25 150 75 40 20 35)
test_timeout=60 # ctest --timeout and each test's TIMEOUT (DT_CUDA_TEST_TIMEOUT)
# The device tool's costs around a run (README.md of the device tool: a minute or more to
# start; 30 s warm after a call; the transfers), and its limit for a session.
device_start_s=90 device_transfer_s=15 device_idle_s=30 device_total_s=900
cap_of() { local i; for i in "${!step_names[@]}"; do [ "${step_names[$i]}" = "$1" ] && echo "${step_caps[$i]}"; done; }
# The limit for step $1: its cap, cut to what is left of the budget (0: no time left).
step_timeout() {
  local want left
  want=$(cap_of "$1")
  left=$((budget - $(elapsed)))
  [ "$left" -lt 5 ] && { echo 0; return; }
  [ "$want" -lt "$left" ] && echo "$want" || echo "$left"
}
out_files=(device-check.json device-check.log ctest-cuda.log bench-cuda.jsonl seeds.tar.gz)

# ---- The summary, written and printed last -------------------------------------------------
gpu_name="" gpu_driver="" gpu_memory="" gpu_cc="" nvcc="" nvcc_version="" arch=""
configure_rc=null build_rc=null build_s=0 tests_rc=null bench_rc=null
passed=0 failed_names=() skipped_json="" reruns_json="" seeds_json="" used_json="{}"
status=""
write_summary() {
  local nj files
  nj=$(json_list "${notes[@]+"${notes[@]}"}")
  files=$(cd "$out" && { ls; echo device-check.json; } | sort -u)
  cat > "$summary" << JSON
{"status": "$status", "label": $(json_string "${DT_CHECK_LABEL:-}"), "elapsed_s": $(elapsed), "budget_s": $budget,
 "gpu": {"name": $(json_string "$gpu_name"), "driver": $(json_string "$gpu_driver"), "memory": $(json_string "$gpu_memory"), "compute_capability": $(json_string "$gpu_cc")},
 "nvcc": $(json_string "$nvcc_version"), "commit": $(json_string "$(git rev-parse --short HEAD 2> /dev/null || echo unknown)"),
 "architectures": $(json_string "$arch"), "used": $used_json,
 "configure_exit": $configure_rc, "build_exit": $build_rc, "build_s": $build_s,
 "cuda_tests": {"exit": $tests_rc, "passed": $passed, "failed": $(json_list "${failed_names[@]+"${failed_names[@]}"}"), "skipped": [${skipped_json}]},
 "reruns": [${reruns_json}], "bench_cuda_exit": $bench_rc, "seeds": {${seeds_json}},
 "files": $(json_list $files),
 "notes": $nj}
JSON
  cat "$summary"
}
finish() { # $1: status; exit 1 unless ok, no_gpu or dry_run
  status=$1
  say "status $status in $(elapsed)s; summary in $summary"
  write_summary
  [ -n "${scratch:-}" ] && rm -rf "$scratch"
  case "$status" in ok | no_gpu | dry_run) exit 0 ;; *) exit 1 ;; esac
}

if $dry_run; then
  total=0
  say "dry run: writes ${#out_files[@]} files into \$OUT (the device tool returns 8): ${out_files[*]}"
  for i in "${!step_names[@]}"; do
    say "dry run: step ${step_names[$i]}: at most ${step_caps[$i]} s"
    total=$((total + step_caps[i]))
  done
  device=$((device_start_s + 2 * (budget + device_transfer_s) + device_idle_s))
  say "dry run: steps sum to ${total} s within a budget of ${budget} s"
  say "dry run: a run and a rerun at once: start ${device_start_s} s + 2 x (${budget} s +" \
    "${device_transfer_s} s transfers) + ${device_idle_s} s warm = ${device} s of ${device_total_s} s"
  [ "$total" -le "$budget" ] || note "the steps' limits (${total} s) exceed the budget (${budget} s)"
  [ "$device" -le "$device_total_s" ] || note "a run and a rerun (${device} s) exceed the device time (${device_total_s} s)"
  [ "${#out_files[@]}" -le 5 ] || note "more than 5 files"
  used_json="{\"files_planned\": ${#out_files[@]}, \"steps_s\": ${total}, \"run_and_rerun_device_s\": ${device}, \"device_total_s\": ${device_total_s}}"
  [ ${#notes[@]} -eq 0 ] && finish dry_run
  finish failed
fi
scratch=$(mktemp -d /tmp/dt-device-check.XXXXXX)

# ---- The machine ----------------------------------------------------------------------------
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
  note "no GPU: nvidia-smi is absent or lists no device; the cuda tests will skip"
fi
have_gpu=false
[ -n "$gpu_name" ] && have_gpu=true
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] && nvcc_version=$("$nvcc" --version | tail -1)
[ -z "$nvcc" ] && { note "missing: nvcc (neither on PATH nor in /usr/local/cuda)"; finish failed; }
toolkit=$(cd "$(dirname "$nvcc")/.." && pwd)
arch="${DT_CHECK_ARCH:-}"
[ -z "$arch" ] && [ -n "$gpu_cc" ] && arch="$(echo "$gpu_cc" | tr -d .)-real"
[ -z "$arch" ] && arch=90-real

# ---- The packages that travelled --------------------------------------------------------------
setup_t0=$(date +%s)
prefix=""
pkg_config=$(command -v pkg-config || true)
if ls .device-pack/*.deb > /dev/null 2>&1; then
  # One fixed path, so that a second run's compile flags are the same (ccache, make).
  prefix=/tmp/dt-device-prefix
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .device-pack/*.deb; do dpkg-deb -x "$deb" "$prefix" || note "cannot unpack $deb"; done
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
  note "no .device-pack/: using the machine's own OpenBLAS, cJSON, DLPack and pkg-config"
fi

# ---- NCCL, cuBLAS and DLPack: the toolkit's, the system's, or a Python wheel's -------------
# Link names for what ships only versioned (libnccl.so.2), at one fixed path so that a second
# run's flags are the same and the programs' run paths stay valid between runs.
libs=/tmp/dt-device-libs
rm -rf "$libs" && mkdir -p "$libs/include" "$libs/lib"
site_dirs=()
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" > /dev/null 2>&1 || continue
  while IFS= read -r d; do [ -d "$d/nvidia" ] && site_dirs+=("$d"); done < <(
    "$py" -c 'import sys; print("\n".join(p for p in sys.path if p))' 2> /dev/null)
done
# find_lib NAME: the first libNAME.so or libNAME.so.<n> in the toolkit, a wheel (the one
# PyTorch uses, built for this toolkit), or the system.
find_lib() {
  local d f
  for d in "$toolkit/lib64" "$toolkit/lib" "$toolkit/targets/x86_64-linux/lib" \
    "${site_dirs[@]/%//nvidia/nccl/lib}" "${site_dirs[@]/%//nvidia/cu13/lib}" \
    "${site_dirs[@]/%//nvidia/cublas/lib}" /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib; do
    for f in "$d/lib$1.so" "$d"/lib"$1".so.[0-9]*; do [ -e "$f" ] && { echo "$f"; return; }; done
  done
}
find_header() { # find_header FILE: the folder that holds FILE
  local d
  for d in "$toolkit/include" "$toolkit/targets/x86_64-linux/include" \
    "${site_dirs[@]/%//nvidia/nccl/include}" "${site_dirs[@]/%//nvidia/cu13/include}" \
    "${site_dirs[@]/%//nvidia/cublas/include}" /usr/include /usr/local/include \
    ${prefix:+"$prefix/usr/include"}; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
}
# link_lib NAME PATH: libNAME.so and PATH's own name in the scratch folder, pointing at PATH.
link_lib() {
  ln -sf "$(readlink -f "$2")" "$libs/lib/lib$1.so"
  ln -sf "$(readlink -f "$2")" "$libs/lib/$(basename "$2")"
}
missing=()
nccl_h=$(find_header nccl.h) nccl_lib=$(find_lib nccl)
cublas_h=$(find_header cublas_v2.h) cublas_lib=$(find_lib cublas) cublaslt_lib=$(find_lib cublasLt)
dlpack_h=$(find_header dlpack/dlpack.h)
cmake_libs=()
if [ -n "$nccl_h" ] && [ -n "$nccl_lib" ]; then
  ln -sf "$nccl_h/nccl.h" "$libs/include/nccl.h"
  link_lib nccl "$nccl_lib"
  export NCCL_HOME="$libs"
  # CMake is told, so that the NCCL it builds with is the one logged here.
  cmake_libs+=(-DDT_NCCL_INCLUDE_DIR="$libs/include" -DDT_NCCL_LIBRARY="$libs/lib/libnccl.so")
  nccl_version=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$nccl_h/nccl.h")
  say "NCCL $nccl_version: $nccl_h/nccl.h, $(readlink -f "$nccl_lib") (NCCL_HOME=$libs)"
else
  missing+=("NCCL (nccl.h: ${nccl_h:-not found}; libnccl: ${nccl_lib:-not found})")
fi
if [ -n "$cublas_lib" ] && [ -n "$cublaslt_lib" ] && [ -n "$cublas_h" ]; then
  case "$(readlink -f "$cublas_lib")" in
    "$(readlink -f "$toolkit")"/*) ;;
    *) # FindCUDAToolkit looks in the toolkit only: name the libraries and the header's folder.
      link_lib cublas "$cublas_lib"
      link_lib cublasLt "$cublaslt_lib"
      cmake_libs+=(-DCUDA_cublas_LIBRARY="$libs/lib/libcublas.so" -DCUDA_cublasLt_LIBRARY="$libs/lib/libcublasLt.so")
      export CPATH="$cublas_h${CPATH:+:$CPATH}" ;;
  esac
  say "cuBLAS: $cublas_h/cublas_v2.h, $(readlink -f "$cublas_lib"), $(readlink -f "$cublaslt_lib")"
else
  missing+=("cuBLAS (cublas_v2.h: ${cublas_h:-not found}; libcublas: ${cublas_lib:-not found}; libcublasLt: ${cublaslt_lib:-not found})")
fi
if [ -n "$dlpack_h" ]; then
  say "DLPack: $dlpack_h/dlpack/dlpack.h"
else
  missing+=("DLPack (dlpack/dlpack.h: not found; scripts/device-pack.sh packs libdlpack-dev)")
fi
blas_pc=""
[ -n "$pkg_config" ] && blas_pc=$("$pkg_config" --variable=libdir openblas 2> /dev/null)
[ -z "$blas_pc" ] && missing+=("OpenBLAS (pkg-config finds no openblas.pc; pack it with scripts/device-pack.sh)")
export LD_LIBRARY_PATH="$libs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
used_json="{\"nccl_version\": $(json_string "${nccl_version:-}"), \"nccl_h\": $(json_string "${nccl_h:+$nccl_h/nccl.h}"), \"nccl_lib\": $(json_string "${nccl_lib:+$(readlink -f "$nccl_lib")}"), \"cublas_lib\": $(json_string "${cublas_lib:+$(readlink -f "$cublas_lib")}"), \"dlpack_h\": $(json_string "${dlpack_h:+$dlpack_h/dlpack/dlpack.h}"), \"openblas_libdir\": $(json_string "$blas_pc"), \"pack\": $([ -n "$prefix" ] && echo true || echo false)}"
for m in "${missing[@]+"${missing[@]}"}"; do note "missing: $m"; done
# On a GPU a missing library would spend the lease on tests that skip: stop now.
if $have_gpu && [ ${#missing[@]} -gt 0 ]; then finish failed; fi
say "setup: $(($(date +%s) - setup_t0)) s"

# ---- Configure and build: the tool and the CUDA tests, one architecture ---------------------
launcher=()
command -v ccache > /dev/null 2>&1 &&
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
t=$(step_timeout configure)
say "configure: $build (nvcc $nvcc_version, architectures $arch, limit ${t}s)"
timeout "$((t > 0 ? t : 1))" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDT_WITH_CUDA=ON \
  -DDT_CUDA_TESTS_ONLY=ON -DDT_WITH_MPI=OFF -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DDT_CUDA_TEST_TIMEOUT="$test_timeout" \
  ${pkg_config:+-DPKG_CONFIG_EXECUTABLE=$pkg_config} "${cmake_libs[@]}" "${launcher[@]}" >> "$log" 2>&1
configure_rc=$?
[ "$configure_rc" -ne 0 ] && { note "configure failed (exit $configure_rc): see device-check.log"; finish failed; }
grep -q "dtensor: NCCL backend (" "$log" || { note "the build has no NCCL backend (see device-check.log)"; $have_gpu && finish failed; }
b0=$(date +%s)
t=$(step_timeout build)
timeout "$((t > 0 ? t : 1))" cmake --build "$build" -j "$jobs" --target dtensor_cli cuda_tests >> "$log" 2>&1
build_rc=$?
build_s=$(($(date +%s) - b0))
say "build: exit $build_rc in ${build_s}s (limit ${t}s)"
if [ "$build_rc" -ne 0 ]; then
  grep -m5 -E "error|Error" "$log" | cut -c1-300 > "$scratch/errors"
  note "build failed (exit $build_rc$([ "$build_rc" -eq 124 ] && echo ": out of time")): $(cat "$scratch/errors")"
  finish failed
fi

# ---- Tests: ctest -L cuda, every test's output; failures and skips by name -----------------
tlog="$out/ctest-cuda.log"
t=$(step_timeout ctest)
(cd "$build" && timeout "$((t > 0 ? t : 1))" ctest -L cuda -V --timeout "$test_timeout" -j 4) > "$tlog" 2>&1
tests_rc=$?
[ "$tests_rc" -eq 124 ] && note "ctest ran out of time (${t}s)"
passed=$(grep -cE "Test +#[0-9]+: .* Passed" "$tlog")
while IFS= read -r name; do
  [ -z "$name" ] && continue
  reason=$(grep -m1 -E "(^|: )$name: skipped: " "$tlog" | sed "s/.*$name: skipped: //" | cut -c1-200)
  [ -z "$reason" ] && reason="no reason printed"
  skipped_json="${skipped_json:+$skipped_json, }{\"name\": $(json_string "$name"), \"reason\": $(json_string "$reason")}"
  # On a GPU only test_cuda_absent may skip; anywhere, a skip for want of NCCL or DLPack fails.
  if { $have_gpu && [ "$name" != test_cuda_absent ]; } || echo "$reason" | grep -qiE "nccl|dlpack"; then
    failed_names+=("$name")
    say "$name skipped ($reason): counted as failed"
  fi
done < <(grep -E "Test +#[0-9]+: .*Skipped" "$tlog" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/')
real_failures=()
while IFS= read -r name; do
  [ -n "$name" ] && real_failures+=("$name") && failed_names+=("$name")
done < <(grep -E "Test +#[0-9]+: " "$tlog" | grep -vE " Passed|Skipped" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/')
say "ctest -L cuda: exit $tests_rc, $passed passed, failed: ${failed_names[*]:-none}"

# ---- A failing test alone, with CUDA_LAUNCH_BLOCKING=1 and under compute-sanitizer ----------
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x "$toolkit/bin/compute-sanitizer" ] && sanitizer="$toolkit/bin/compute-sanitizer"
rerun_t0=$(date +%s)
rerun_left() { echo $(($(cap_of reruns) - ($(date +%s) - rerun_t0))); }
for name in "${real_failures[@]+"${real_failures[@]}"}"; do
  exe=$(find "$build" -type f -name "$name" -perm -u+x | head -1)
  [ -z "$exe" ] && continue
  exe=$(readlink -f "$exe") # the reruns run in the scratch folder
  t=$(step_timeout reruns)
  [ "$(rerun_left)" -lt "$t" ] && t=$(rerun_left)
  if [ "$t" -lt 5 ]; then note "no time left to rerun $name"; break; fi
  say "rerun $name with CUDA_LAUNCH_BLOCKING=1 (limit ${t}s)"
  (cd "$scratch" && CUDA_LAUNCH_BLOCKING=1 timeout "$t" "$exe") >> "$log" 2>&1
  blocking_rc=$?
  sanitizer_rc=null first=""
  t=$(step_timeout reruns)
  [ "$(rerun_left)" -lt "$t" ] && t=$(rerun_left)
  if [ -z "$sanitizer" ]; then
    note "compute-sanitizer absent: $name not rerun under memcheck"
  elif [ "$t" -lt 5 ]; then
    note "no time left to run $name under compute-sanitizer"
  else
    say "rerun $name under compute-sanitizer --tool memcheck (limit ${t}s)"
    (cd "$scratch" && timeout "$t" "$sanitizer" --tool memcheck --print-limit 20 "$exe") > "$scratch/memcheck" 2>&1
    sanitizer_rc=$?
    cat "$scratch/memcheck" >> "$log"
    first=$(grep -m1 -E "=+ (Invalid|Program hit|ERROR|Error)" "$scratch/memcheck" | cut -c1-300)
  fi
  reruns_json="${reruns_json:+$reruns_json, }{\"name\": $(json_string "$name"), \"blocking_exit\": $blocking_rc, \"memcheck_exit\": $sanitizer_rc, \"memcheck_first\": $(json_string "$first")}"
done

# ---- dtensor bench cuda --------------------------------------------------------------------
tool="$root/$build/dtensor"
case "$build" in /*) tool="$build/dtensor" ;; esac
bench="$out/bench-cuda.jsonl"
: > "$bench"
if $have_gpu; then
  t=$(step_timeout bench)
  if [ "$t" -gt 0 ]; then
    timeout "$t" "$tool" bench cuda --json > "$scratch/bench" 2>> "$log"
    bench_rc=$?
    grep '^{' "$scratch/bench" >> "$bench"
    # Without a device the tool prints one line saying so and exits 0: on a GPU that fails.
    grep -q '"status":"no_cuda_device"' "$scratch/bench" && { bench_rc=1; note "bench cuda found no CUDA device"; }
    say "dtensor bench cuda: exit $bench_rc (limit ${t}s), $(grep -c '^{' "$scratch/bench") lines"
  else
    note "dtensor bench cuda not run: the budget is spent"
  fi
else
  note "dtensor bench cuda not run: no GPU"
fi

# ---- The seeds and the demo on CUDA, in a scratch folder -----------------------------------
seeds="$scratch/seeds"
mkdir -p "$seeds"
seeds_t0=$(date +%s)
seeds_ran_without_gpu=0 # commands that exited 0 without a GPU (each must refuse)
# run_seed NAME ARGS...: the tool with ARGS in the scratch folder, its output in NAME.out.
run_seed() {
  local name=$1 t rc first left
  shift
  t=$(step_timeout seeds)
  left=$(($(cap_of seeds) - ($(date +%s) - seeds_t0)))
  [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -lt 3 ]; then
    seeds_json="${seeds_json:+$seeds_json, }\"$name\": {\"exit\": null, \"note\": \"no time left\"}"
    say "$name: not run, the budget is spent"
    return
  fi
  (cd "$seeds" && timeout "$t" "$tool" "$@" > "$name.out" 2> "$name.err")
  rc=$?
  ! $have_gpu && [ "$rc" -eq 0 ] && seeds_ran_without_gpu=$((seeds_ran_without_gpu + 1))
  grep '^{' "$seeds/$name.out" | sed "s/^{/{\"seed\": \"$name\", /" >> "$bench"
  first=$(grep -m1 -iE "error|fail|refus|not (available|supported)|skipped" "$seeds/$name.err" | cut -c1-300)
  seeds_json="${seeds_json:+$seeds_json, }\"$name\": {\"exit\": $rc, \"seconds_limit\": $t, \"first_error\": $(json_string "$first")}"
  say "$name ($*): exit $rc${first:+: $first}"
}
run_seed seed003 demo tp --device cuda
run_seed seed000 bench dispatch --device cuda --json
run_seed seed001 bench instructions --device cuda --time --json
run_seed seed004 bench compile --device cuda --json
run_seed demo demo --device cuda --steps 20
run_seed train bench train --only demo --device cuda --json
# The demo's trace stays in the tarball only while small (the device tool returns 16 MiB).
find "$seeds" -type f -size +4M -printf '%f\n' | while IFS= read -r big; do
  echo "device-check: $big left out of seeds.tar.gz: over 4 MiB" >> "$log"
  rm -f "$seeds/$big"
done
tar -C "$scratch" -czf "$out/seeds.tar.gz" seeds
! $have_gpu && [ "$seeds_ran_without_gpu" -gt 0 ] &&
  note "$seeds_ran_without_gpu seed command(s) exited 0 without a GPU (each must refuse)"

# ---- Verdict -------------------------------------------------------------------------------
verdict=ok
[ "$tests_rc" -ne 0 ] || [ ${#failed_names[@]} -gt 0 ] && verdict=failed
[ "$seeds_ran_without_gpu" -gt 0 ] && verdict=failed
$have_gpu && [ "${bench_rc:-1}" != 0 ] && verdict=failed
[ "$verdict" = ok ] && ! $have_gpu && verdict=no_gpu
finish "$verdict"
