#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds examples/cpp/allreduce as a
# separate project with find_package(ACCL) (and once more with pkg-config), and
# runs it on 2 ranks with the installed accl-run.
set -eu
build=${1:?build dir}
src=${2:?source dir}
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/accl/process_group.h include/accl/store.h bin/accl-run bin/accl-info lib/libaccl.so \
         lib/cmake/ACCL/ACCLConfig.cmake lib/pkgconfig/accl.pc; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
[ ! -e "$prefix/include/accl/internal" ] || { echo "internal headers must not be installed"; exit 1; }
cmake -S "$src/examples/cpp/allreduce" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
backend=gloo
"$prefix/bin/accl-info" --backends | grep -q "gloo *usable" || backend=mpi
"$prefix/bin/accl-run" -n 2 "$work/cmake/allreduce_example" $backend
# pkg-config consumers
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" c++ -o "$work/pc_example" "$src/examples/cpp/allreduce/main.cc" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs accl) -Wl,-rpath,"$prefix/lib"
"$prefix/bin/accl-run" -n 2 "$work/pc_example" $backend
echo "install test passed"
