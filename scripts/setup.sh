#!/usr/bin/env bash
# Installs what ACCL needs to build and test on Debian 12 (idempotent: only
# missing packages are installed). Run as root, or with sudo available.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  patchelf                          # the torch_accl wheel: $ORIGIN run paths
  googletest libgtest-dev           # unit and conformance tests
  libgloo-dev                       # gloo backend
  libopenmpi-dev openmpi-bin        # mpi backend and mpirun
  libhwloc-dev libpugixml-dev       # topology probe, hwloc XML and NCCL topology files
  nlohmann-json3-dev libcli11-dev   # JSON output and command lines of the tools (headers only)
  iproute2 procps                   # multi-host tests (network namespaces), process tools
  iptables libnetfilter-queue-dev   # packet loss and delay between namespace hosts (the kernel may lack netem)
  libibverbs-dev ibverbs-providers  # verbs transport (headers at build time; libibverbs1 loaded at run time)
  libucx-dev                        # UCX's memory hooks (libucm): invalidate verbs registrations of freed buffers
  python3-torch libtorch-dev        # torch_accl (c10d adapter), BERT example
  python3-dev pybind11-dev          # building the torch_accl extension
  python3-pytest python3-setuptools python3-pip   # torch_accl tests and pip install
  python3-venv                      # the wheel test installs into a fresh venv
  bible-kjv                         # the BERT example's default corpus (public-domain text)
  dpkg-dev fakeroot lintian         # packaging/: .deb packages (dpkg-shlibdeps) and their checks
  debootstrap                       # packaging tests: clean Debian roots to install into
  clang libclang-rt-14-dev          # libFuzzer harnesses (bench/fuzz.sh, tests/fuzz)
  gnuplot-nox iperf3                # bench/: compare.py's plots, limits_check.py's raw link rate
)

# torch 2.x for torch_accl's second build and tests, pinned: an unpinned
# `pip install torch` pulls several GB of CUDA packages. It goes to the python3
# first on PATH; where that is Debian's own (which keeps torch 1.13), to a venv.
TORCH2=${ACCL_TORCH2_VERSION:-2.13.0}
TORCH2_VENV=${ACCL_TORCH2_VENV:-/var/tmp/accl-torch2-venv}
setup_torch2() {
  local py
  py=$(command -v python3 || true)
  if [ -z "$py" ] || [ "$("$py" -c 'import sys; print(sys.executable)')" = /usr/bin/python3 ]; then
    [ -x "$TORCH2_VENV/bin/python" ] || /usr/bin/python3 -m venv "$TORCH2_VENV"
    py=$TORCH2_VENV/bin/python
  fi
  if "$py" -c "import sys, torch, pytest; sys.exit(torch.__version__.split('+')[0] != '$TORCH2')" 2>/dev/null; then
    echo "setup: torch $TORCH2 present for $py"
  else
    echo "setup: installing torch==$TORCH2 (CPU) and pytest for $py"
    "$py" -m pip install -q --disable-pip-version-check "torch==$TORCH2" pytest
  fi
  setup_nccl "$py"
}

# NCCL's headers and library for compiling the nccl backend, where the CUDA
# toolkit is here but NCCL is not: PyPI's nvidia-nccl-cu13 (pinned), which the
# build finds in the same interpreter.
NCCL_WHEEL=${ACCL_NCCL_WHEEL_VERSION:-2.30.7}
setup_nccl() {
  local py=$1
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  for d in /usr/include /usr/local/cuda/include; do [ -f $d/nccl.h ] && return 0; done
  if "$py" -c "import nvidia.nccl" 2>/dev/null; then
    echo "setup: NCCL headers present (nvidia-nccl-cu13 for $py)"
    return
  fi
  echo "setup: installing nvidia-nccl-cu13==$NCCL_WHEEL for $py (NCCL headers for the nccl backend)"
  # Optional: without it the build leaves out only the nccl backend (and says so).
  "$py" -m pip install -q --disable-pip-version-check "nvidia-nccl-cu13==$NCCL_WHEEL" ||
    echo "setup: nvidia-nccl-cu13==$NCCL_WHEEL could not be installed; the nccl backend will not be built"
}

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
setup_torch2
