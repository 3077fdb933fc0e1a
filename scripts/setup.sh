#!/usr/bin/env bash
# Installs what ACCL needs to build and test on Debian 12 (idempotent: only
# missing packages are installed). Run as root, or with sudo available.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  googletest libgtest-dev           # unit and conformance tests
  libgloo-dev                       # gloo backend
  libopenmpi-dev openmpi-bin        # mpi backend and mpirun
  libhwloc-dev libpugixml-dev       # topology probe, hwloc XML and NCCL topology files
  iproute2 procps                   # multi-host tests (network namespaces), process tools
  libibverbs-dev ibverbs-providers  # verbs transport (headers at build time; libibverbs1 loaded at run time)
  libucx-dev                        # UCX's memory hooks (libucm): invalidate verbs registrations of freed buffers
  python3-torch libtorch-dev        # torch_accl (c10d adapter), BERT example
  python3-dev pybind11-dev          # building the torch_accl extension
  python3-pytest python3-setuptools python3-pip   # torch_accl tests and pip install
  bible-kjv                         # the BERT example's default corpus (public-domain text)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
