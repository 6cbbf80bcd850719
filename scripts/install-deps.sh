#!/usr/bin/env bash
# Installs the Debian packages libdtensor needs to build, test and benchmark.
# Idempotent: it asks apt only for what is missing, so a second run takes well under a second.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  libcjson-dev
  libdlpack-dev
  libcriterion-dev
  valgrind
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
