#!/usr/bin/env bash
# The build stage of packaging/docker/Dockerfile*, as one script (a Dockerfile's
# RUN steps cannot be tested without a Docker engine; this script can, in any
# Debian or Ubuntu root):
#
#   build-inside.sh SOURCE_DIR OUT_DIR [PYTHON]
#   build-inside.sh --deps-only SOURCE_DIR [PYTHON]   (what packaging/install.sh --source uses)
#
# Installs the build dependencies with apt (optional ones only where the
# distribution has them), builds ACCL in Release against the container's own
# torch (PYTHON, default python3), and writes OUT_DIR/packages (the .deb
# packages and the .tgz) and OUT_DIR/wheels (the torch_accl wheel). Prints
# how long the build took.
set -euo pipefail
DEPS_ONLY=0
if [ "${1:-}" = --deps-only ]; then
  DEPS_ONLY=1
  shift
  set -- "$1" "" "${2:-python3}"
fi
SRC=$(cd "${1:?source dir}" && pwd)
OUT=${2:-}
PY=${3:-python3}
[ $DEPS_ONLY -eq 1 ] || [ -n "$OUT" ] || { echo "usage: build-inside.sh SOURCE_DIR OUT_DIR [PYTHON]"; exit 2; }
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)

need=(build-essential cmake pkg-config patchelf dpkg-dev file libhwloc-dev libpugixml-dev nlohmann-json3-dev libcli11-dev)
# Optional: each enables one backend or transport. NGC images bring their own
# MPI, UCX and rdma-core under /opt/hpcx; the distribution's are used otherwise.
optional=(libgloo-dev libopenmpi-dev libibverbs-dev libucx-dev)
apt_has() { apt-cache show "$1" >/dev/null 2>&1; }
missing=()
for p in "${need[@]}" "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  apt_has "$p" || { [[ " ${optional[*]} " == *" $p "* ]] && { echo "build-inside: $p not available; its backend is left out"; continue; }; }
  missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-inside: installing ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/accl-build-apt.log 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/accl-build-apt.log 2>&1 ||
      { tail -20 /tmp/accl-build-apt.log; exit 1; }
  }
fi
# The extension's headers: torch's C++ headers and pybind11 (pip's and NGC's
# torch carry both; Debian's python3-torch neither: libtorch-dev and
# pybind11-dev have them) and Python.h (python3-dev).
hdr=()
"$PY" -c "import os, sys; from torch.utils.cpp_extension import include_paths as i
sys.exit(not any(os.path.exists(os.path.join(d, 'torch/csrc/distributed/c10d/Store.hpp')) for d in i()))" 2>/dev/null ||
  hdr+=(libtorch-dev)
"$PY" -c "import os, sys; from torch.utils.cpp_extension import include_paths as i
sys.exit(not any(os.path.exists(os.path.join(d, 'pybind11/pybind11.h')) for d in i() + ['/usr/include']))" 2>/dev/null ||
  hdr+=(pybind11-dev)
"$PY" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" ||
  hdr+=(python3-dev)
if [ ${#hdr[@]} -gt 0 ]; then
  for p in "${hdr[@]}"; do apt_has "$p" || { echo "build-inside: the torch_accl extension needs $p, which apt does not have"; exit 1; }; done
  echo "build-inside: installing ${hdr[*]} (headers of the torch_accl extension)"
  apt-get install -y -q --no-install-recommends "${hdr[@]}" >/tmp/accl-build-apt.log 2>&1 || { tail -20 /tmp/accl-build-apt.log; exit 1; }
fi
deps_done=$(date +%s)
if [ $DEPS_ONLY -eq 1 ]; then
  echo "build-inside: build dependencies present ($((deps_done - start)) s)"
  exit 0
fi

build=$OUT/build
mkdir -p "$OUT/packages" "$OUT/wheels"
"$PY" -c "import torch" 2>/dev/null || { echo "build-inside: $PY has no torch: the wheel needs the container's torch"; exit 1; }
cmake -S "$SRC" -B "$build" -DCMAKE_BUILD_TYPE=Release -DACCL_BUILD_TESTS=OFF -DACCL_PYTHON="$(command -v "$PY")" \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
grep -E "^-- ACCL|^--   " "$OUT/configure.log" | head -30 || true
cmake --build "$build" -j"$(nproc)" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
(cd "$build" && cpack -B "$OUT/packages" >"$OUT/cpack.log" 2>&1) || { tail -30 "$OUT/cpack.log"; exit 1; }
rm -rf "$OUT/packages/_CPack_Packages"
# The wheel reuses this build (ACCL_BUILD_DIR): nothing is compiled twice.
ACCL_BUILD_DIR=$build "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$OUT/wheels" "$SRC/torch_plugin"
end=$(date +%s)
ls -1 "$OUT/packages" "$OUT/wheels"
echo "build-inside: dependencies $((deps_done - start)) s, build, packages and wheel $((end - deps_done)) s (on $(nproc) cores)"
