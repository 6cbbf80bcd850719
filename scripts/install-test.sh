#!/usr/bin/env bash
# Installs libdtensor into a scratch prefix and builds a tiny outside program against it,
# once through CMake's find_package(dtensor) and once through pkg-config, then runs both.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$root/$build" --prefix "$work/prefix" > /dev/null

mkdir -p "$work/app"
cat > "$work/app/main.c" <<'C'
#include <dtensor/dtensor.h>
#include <stdio.h>
/* Two in-process ranks all-reduce a tensor: pulls the comm layer (and MPI when built with
 * it) into a static link. */
static dt_status rank_main(dt_comm *world, void *arg) {
  (void)arg;
  dt_tensor *t = NULL;
  dt_status st = dt_ones(1, (int64_t[]){3}, DT_F32, &t);
  if (!st) st = dt_comm_all_reduce(world, t, DT_REDUCE_SUM);
  dt_tensor_release(t);
  return st;
}
int main(void) {
  if (dt_comm_spawn(2, rank_main, NULL)) {
    fprintf(stderr, "%s\n", dt_last_error());
    return 1;
  }
  int64_t shape[] = {2, 2};
  dt_tensor *a = NULL, *b = NULL;
  if (dt_ones(2, shape, DT_F32, &a) || dt_add(a, a, &b)) {
    fprintf(stderr, "%s\n", dt_last_error());
    return 1;
  }
  double v[4];
  dt_tensor_to_doubles(b, v, 4);
  dt_tensor_release(a);
  dt_tensor_release(b);
  printf("outside project: 1 + 1 = %g\n", v[0]);
  return v[0] == 2.0 ? 0 : 1;
}
C
cat > "$work/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(outside C)
find_package(dtensor REQUIRED)
add_executable(outside main.c)
target_link_libraries(outside PRIVATE dtensor::dtensor)
CM
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/app/build" > /dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/app/build/outside"

# A C++-only project (project(... CXX), no C language enabled) finds the package too, and
# the headers compile as C++ (extern "C", no C-only syntax).
mkdir -p "$work/appxx"
cat > "$work/appxx/main.cpp" <<'CXX'
#include <dtensor/dtensor.h>
#include <cstdio>
int main() {
  int64_t shape[] = {2, 2};
  dt_tensor *a = nullptr, *b = nullptr;
  if (dt_ones(2, shape, DT_F32, &a) || dt_add(a, a, &b)) {
    std::fprintf(stderr, "%s\n", dt_last_error());
    return 1;
  }
  double v[4];
  dt_tensor_to_doubles(b, v, 4);
  dt_tensor_release(a);
  dt_tensor_release(b);
  std::printf("outside C++ project: 1 + 1 = %g\n", v[0]);
  return v[0] == 2.0 ? 0 : 1;
}
CXX
cat > "$work/appxx/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(outsidexx CXX)
find_package(dtensor REQUIRED)
add_executable(outsidexx main.cpp)
target_compile_options(outsidexx PRIVATE -Wall -Wextra -pedantic -Werror)
target_link_libraries(outsidexx PRIVATE dtensor::dtensor)
CM
cmake -S "$work/appxx" -B "$work/appxx/build" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/appxx/build" > /dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/appxx/build/outsidexx"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
cc "$work/app/main.c" -o "$work/app/outside-pc" $(pkg-config --cflags --libs dtensor)
LD_LIBRARY_PATH="$work/prefix/lib" "$work/app/outside-pc"
cc "$work/app/main.c" -o "$work/app/outside-static" $(pkg-config --cflags dtensor) \
  "$work/prefix/lib/libdtensor.a" $(pkg-config --libs-only-l --static dtensor | sed 's/-ldtensor//')
"$work/app/outside-static"
echo "install-test: find_package (C and C++ projects) and pkg-config (shared and static) work"
