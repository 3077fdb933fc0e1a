#!/usr/bin/env bash
# Configures and builds ACCL into ${BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# torch 2.x from scripts/setup.sh's venv, where python3 on PATH is Debian's.
extra=()
venv=${ACCL_TORCH2_VENV:-/var/tmp/accl-torch2-venv}
if [ -x "$venv/bin/python" ] && [ "$(command -v python3)" = /usr/bin/python3 ]; then
  extra+=("-DACCL_PYTHON_EXTRA=$venv/bin/python")
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "${extra[@]}" "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
