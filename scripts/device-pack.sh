#!/usr/bin/env bash
# Run on a CPU machine (Debian, with network): downloads the Debian packages that a bare GPU
# machine may lack for scripts/device-check.sh — OpenBLAS, cJSON, DLPack's header, Criterion,
# pkg-config and their run-time libraries — into .device-pack/ (ignored by git), with a MANIFEST. The device
# tool carries that folder with the working tree (name it in `carry`); device-check.sh unpacks
# the packages into a private prefix there (dpkg-deb -x, never into /).
#
# Left out on purpose: what every Debian/Ubuntu system has (libc6, libgcc-s1, zlib1g, libssl3,
# libffi8, pcre2, krb5), and the -dev packages only Criterion's Requires.private names
# (libgit2-dev pulls libssl-dev and more): device-check.sh drops those lines from criterion.pc,
# since the tests link Criterion's shared library. The pack stays a few MiB (the device tool
# carries 64 MiB in all, the working tree included).
#
# Usage: bash scripts/device-pack.sh [folder]   (default: .device-pack in the repository)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="${1:-$root/.device-pack}"

packages=(
  pkg-config pkgconf pkgconf-bin libpkgconf3
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  libcjson-dev libcjson1
  libdlpack-dev
  libcriterion-dev libcriterion3 libboxfort-dev libgit2-1.5 libnanomsg5 libhttp-parser2.9
  libmbedtls14 libmbedx509-1 libmbedcrypto7 libssh2-1
)

mkdir -p "$dest"
rm -f "$dest"/*.deb "$dest/MANIFEST"
if ! (cd "$dest" && apt-get -o APT::Sandbox::User=root download "${packages[@]}" > /dev/null); then
  echo "device-pack: apt-get -o APT::Sandbox::User=root download failed; trying again after apt-get update" >&2
  apt-get update -qq
  (cd "$dest" && apt-get -o APT::Sandbox::User=root download "${packages[@]}" > /dev/null)
fi

# Every run-time dependency of a packed package is packed or is one a base system has.
base="libc6 libgcc-s1 gcc-12-base libstdc++6 zlib1g libssl3 libffi8 libpcre2-8-0 libgssapi-krb5-2
      libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libgomp1 pkg-config
      libopenblas0-openmp libopenblas0-serial libopenblas-openmp-dev libopenblas-serial-dev"
base=$(echo $base) # one line, single spaces
missing=()
for deb in "$dest"/*.deb; do
  deps=$( (dpkg-deb -f "$deb" Depends; dpkg-deb -f "$deb" Pre-Depends) | tr ',|' '\n\n' | sed 's/(.*)//; s/:any//; s/ //g' | grep -v '^$' || true)
  for d in $deps; do
    case " ${packages[*]} $base " in
      *" $d "*) ;;
      *) case "$d" in *-dev) ;; *) missing+=("$(dpkg-deb -f "$deb" Package) -> $d") ;; esac ;;
    esac
  done
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'device-pack: run-time dependency not packed: %s\n' "${missing[@]}" >&2
  exit 1
fi

{
  echo "# Debian packages for scripts/device-check.sh, downloaded $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# from $(. /etc/os-release && echo "$PRETTY_NAME"); package version size sha256"
  for deb in "$dest"/*.deb; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
      "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
  done
} > "$dest/MANIFEST"
count=$(ls "$dest"/*.deb | wc -l)
size=$(du -sb "$dest" | cut -f1)
echo "device-pack: $count packages, $((size / 1024)) KiB in $dest"
if [ "$size" -gt $((48 * 1024 * 1024)) ]; then
  echo "device-pack: over 48 MiB: the working tree and the pack must fit in 64 MiB" >&2
  exit 1
fi
