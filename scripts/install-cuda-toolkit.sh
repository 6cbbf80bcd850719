#!/usr/bin/env bash
# Finds a CUDA 13.0 toolkit for the CUDA build (-DDT_WITH_CUDA=ON), installing one when there
# is none, and prints the CMake flags that use it (the last line of its output).
#
#   nvcc on PATH or /usr/local/cuda   used as it is
#   neither                           NVIDIA's 13.0-series wheels from PyPI (nvcc, runtime, crt,
#                                     nvvm, cccl, cuBLAS, NCCL) pip-installed into .cuda-toolkit/
#                                     (ignored by git), laid out as one toolkit: nvidia/cu13/
#
# Usage: bash scripts/install-cuda-toolkit.sh [--print-flags-only]
#   eval "cmake -S . -B build-cuda -DDT_WITH_CUDA=ON $(bash scripts/install-cuda-toolkit.sh | tail -1)"
# The wheels' nvcc compiles and links on machines without a GPU; programs then find no device
# and the CUDA tests skip. Needs python3 with pip and network access for the wheels.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
series="13.0.*"

flags_for() { # the toolkit's root folder (holding bin/nvcc)
  echo "-DCMAKE_CUDA_COMPILER=$1/bin/nvcc -DCUDAToolkit_ROOT=$1"
}

if command -v nvcc > /dev/null 2>&1; then
  nvcc=$(command -v nvcc)
  echo "install-cuda-toolkit: using $nvcc ($("$nvcc" --version | tail -1))" >&2
  flags_for "$(cd "$(dirname "$nvcc")/.." && pwd)"
  exit 0
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-cuda-toolkit: using /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -1))" >&2
  flags_for /usr/local/cuda
  exit 0
fi

dest="$root/.cuda-toolkit"
toolkit="$dest/nvidia/cu13"
if [ ! -x "$toolkit/bin/nvcc" ]; then
  echo "install-cuda-toolkit: no nvcc here; installing NVIDIA's CUDA $series wheels into $dest" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --target "$dest" \
    "nvidia-cuda-nvcc==$series" "nvidia-cuda-runtime==$series" "nvidia-cuda-crt==$series" \
    "nvidia-nvvm==$series" "nvidia-cuda-cccl==$series" "nvidia-cublas==13.0.*" \
    "nvidia-nccl-cu13"
fi
if [ ! -x "$toolkit/bin/nvcc" ]; then
  echo "install-cuda-toolkit: the wheels did not provide $toolkit/bin/nvcc" >&2
  exit 1
fi
# The wheels ship versioned shared libraries only: the linker and CMake's FindCUDAToolkit look
# for the unversioned names.
for lib in "$toolkit"/lib/lib*.so.*; do
  [ -e "$lib" ] || continue
  base=$(basename "$lib")
  link="$toolkit/lib/${base%%.so.*}.so"
  [ -e "$link" ] || ln -s "$base" "$link"
done
# NCCL's wheel has its own folder: link its header and library into the toolkit's.
nccl="$dest/nvidia/nccl"
if [ -d "$nccl" ]; then
  for f in "$nccl"/include/*.h; do [ -e "$toolkit/include/$(basename "$f")" ] || ln -s "$f" "$toolkit/include/"; done
  for f in "$nccl"/lib/libnccl.so*; do [ -e "$toolkit/lib/$(basename "$f")" ] || ln -s "$f" "$toolkit/lib/"; done
  [ -e "$toolkit/lib/libnccl.so" ] || ln -s "$(basename "$(ls "$toolkit"/lib/libnccl.so.* | head -1)")" "$toolkit/lib/libnccl.so"
fi
echo "install-cuda-toolkit: $("$toolkit/bin/nvcc" --version | tail -1) in $toolkit" >&2
echo "install-cuda-toolkit: run programs with LD_LIBRARY_PATH=$toolkit/lib" >&2
flags_for "$toolkit"
