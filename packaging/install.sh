#!/usr/bin/env bash
# ACCL's one-command installer for an existing container or host (Debian or
# Ubuntu, e.g. an NGC PyTorch container):
#
#   packaging/install.sh --packages DIR [--wheels DIR] [--source DIR] [--python PY] [--venv DIR]
#
# 1. detects the python, its torch (version, C++ ABI, CUDA), the CUDA driver
#    and rdma-core;
# 2. installs ACCL's .deb packages from DIR with apt (the runtime, the tools,
#    the development files, the gloo and mpi backend modules, verbs support
#    when rdma-core's libibverbs is present, the nccl module when NCCL is);
# 3. installs the torch_accl wheel that matches this python and torch from
#    --wheels, or builds it from --source when none matches;
# 4. runs `python -m torch_accl.check` and prints how long it all took.
#
# Every refusal says what is missing and how to get it. --dry-run prints what
# would be done. Run as root (or with sudo available).
set -euo pipefail

PACKAGES="" WHEELS="" SOURCE="" PY="" VENV="" DRY=0 NO_TORCH=0 BREAK_SYSTEM=0
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
refuse() { echo "install.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --packages) PACKAGES=${2:?--packages needs a directory}; shift 2 ;;
    --wheels) WHEELS=${2:?--wheels needs a directory}; shift 2 ;;
    --source) SOURCE=${2:?--source needs the ACCL source directory}; shift 2 ;;
    --python) PY=${2:?--python needs an interpreter}; shift 2 ;;
    --venv) VENV=${2:?--venv needs a directory}; shift 2 ;;
    --no-torch) NO_TORCH=1; shift ;;
    --break-system-packages) BREAK_SYSTEM=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; refuse "unknown option '$1'" ;;
  esac
done
start=$(date +%s)
run() { if [ $DRY -eq 1 ]; then echo "would run: $*"; else "$@"; fi; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || refuse "run as root, or install sudo: the packages go in with apt-get"
  SUDO=sudo
fi

# ---------------------------------------------------------------- the host
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  refuse "apt-get and dpkg are needed (Debian or Ubuntu, as NGC containers are); elsewhere unpack accl-*-Linux-x86_64.tar.gz and install the wheel with pip"
arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || refuse "ACCL's packages are built for amd64; this is $arch. Build from source: scripts/build.sh"
[ -n "$PACKAGES" ] || refuse "--packages DIR is needed: the folder with ACCL's .deb files (from 'cpack' in a build directory, or a release)"
[ -d "$PACKAGES" ] || refuse "--packages $PACKAGES is not a folder"
PACKAGES=$(cd "$PACKAGES" && pwd)
deb() { ls "$PACKAGES"/"$1"_*_"$2".deb 2>/dev/null | sort -V | tail -1; }
runtime=$(deb libaccl0 "$arch")
[ -n "$runtime" ] || refuse "no libaccl0_*_$arch.deb in $PACKAGES (expected: libaccl0, accl-tools, libaccl-dev, libaccl0-gloo, ...)"

has_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
rdma=no
has_lib 'libibverbs.so.1 ' && rdma=yes
nccl=no
has_lib 'libnccl.so.2 ' && nccl=yes
driver=none
if has_lib 'libcuda.so.1 '; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  [ -n "$driver" ] || driver="libcuda present, no GPU visible"
fi

# ---------------------------------------------------------------- python and torch
if [ $NO_TORCH -eq 0 ]; then
  if [ -z "$PY" ]; then
    PY=$(command -v python3 || true)
    [ -n "$PY" ] || refuse "no python3 on PATH: pass --python /path/to/python, or --no-torch for the C++ library only"
  fi
  tinfo=$("$PY" -c 'import sys, torch
print(sys.version_info[0], sys.version_info[1], torch.__version__.split("+")[0], int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.version.cuda or "none")' 2>/dev/null) ||
    refuse "$PY cannot import torch: install torch first (pip install torch==<version>), pass --python for the interpreter that has it, or --no-torch"
  read -r pymaj pymin torchver abi tcuda <<<"$tinfo"
  torchshort=$(echo "$torchver" | cut -d. -f1-2)
  echo "install.sh: python $pymaj.$pymin ($PY), torch $torchver (C++11 ABI $abi, CUDA $tcuda), CUDA driver: $driver, rdma-core: $rdma, NCCL: $nccl"
  # Where the wheel goes: the venv asked for, or the interpreter itself unless
  # its distribution manages it (PEP 668, e.g. Debian's python3).
  if [ -n "$VENV" ]; then
    if [ ! -x "$VENV/bin/python" ]; then
      run "$PY" -m venv --system-site-packages "$VENV" ||
        refuse "cannot make a venv at $VENV: install python3-venv (apt-get install python3-venv)"
    fi
    PIP_PY=$VENV/bin/python
  else
    PIP_PY=$PY
    managed=$("$PY" -c 'import sys, sysconfig, os
print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED"))))')
    if [ "$managed" = 1 ] && [ $BREAK_SYSTEM -eq 0 ]; then
      refuse "$PY is managed by the distribution (PEP 668), so pip may not install into it: pass --venv DIR (a venv that sees this torch) or --break-system-packages"
    fi
  fi
else
  echo "install.sh: C++ library only (--no-torch); CUDA driver: $driver, rdma-core: $rdma, NCCL: $nccl"
fi

# ---------------------------------------------------------------- packages
debs=("$runtime")
for p in accl-tools libaccl-dev libaccl0-gloo libaccl0-mpi; do
  f=$(deb "$p" "$arch")
  [ -n "$f" ] && debs+=("$f") || echo "install.sh: $p is not in $PACKAGES; left out"
done
if [ $rdma = yes ]; then
  f=$(deb libaccl0-verbs all)
  [ -n "$f" ] && debs+=("$f")
else
  echo "install.sh: no libibverbs.so.1 on this host: verbs left out (apt-get install libibverbs1 ibverbs-providers, then rerun, for RDMA)"
fi
if [ $nccl = yes ]; then
  f=$(deb libaccl0-nccl "$arch")
  [ -n "$f" ] && debs+=("$f")
else
  echo "install.sh: no libnccl.so.2 on this host: the nccl backend module is left out"
fi
echo "install.sh: installing ${debs[*]##*/}"
# apt resolves the packages' dependencies (gloo, Open MPI, hwloc) from the
# configured repositories; only the lists' age decides whether it must update.
if [ $DRY -eq 0 ] && ! $SUDO apt-get install -y -q --no-install-recommends "${debs[@]}" >/tmp/accl-install-apt.log 2>&1; then
  $SUDO apt-get update -q >/dev/null 2>&1 || true
  $SUDO apt-get install -y -q --no-install-recommends "${debs[@]}" >/tmp/accl-install-apt.log 2>&1 ||
    { tail -15 /tmp/accl-install-apt.log >&2; refuse "apt-get could not install ACCL's packages (log above; /tmp/accl-install-apt.log)"; }
fi
[ $DRY -eq 1 ] && echo "would run: apt-get install -y ${debs[*]}"

# ---------------------------------------------------------------- torch_accl
if [ $NO_TORCH -eq 0 ]; then
  whl=""
  if [ -n "$WHEELS" ]; then
    # A wheel for this python (cpXY) whose metadata requires this torch minor.
    for f in "$WHEELS"/torch_accl-*-cp$pymaj$pymin-cp$pymaj$pymin*-linux_x86_64.whl; do
      [ -f "$f" ] || continue
      req=$("$PY" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
m = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0]
print("".join(l.split(":", 1)[1].strip().replace(" ", "").replace("(", "").replace(")", "")
              for l in z.read(m).decode().splitlines() if l.startswith("Requires-Dist: torch")))' "$f")
      if [ "$req" = "torch==$torchshort.*" ]; then whl=$f; break; fi
      echo "install.sh: $(basename "$f") requires $req, not torch $torchshort; skipped"
    done
  fi
  if [ -z "$whl" ]; then
    [ -n "$SOURCE" ] || refuse "no torch_accl wheel for python $pymaj.$pymin and torch $torchshort in ${WHEELS:-(no --wheels)}: pass --source <ACCL source> to build one (needs a compiler, cmake and torch's headers)"
    echo "install.sh: building the torch_accl wheel for torch $torchver from $SOURCE"
    # The compiler, cmake and headers it needs, as the Dockerfiles' build stage installs them.
    run $SUDO bash "$SOURCE/packaging/docker/build-inside.sh" --deps-only "$SOURCE" "$PY" ||
      refuse "the build dependencies could not be installed (output above)"
    mkdir -p /tmp/accl-wheel
    run "$PY" -m pip wheel -q --no-build-isolation --no-deps -w /tmp/accl-wheel "$SOURCE/torch_plugin" ||
      refuse "building the wheel failed: it needs g++, cmake, patchelf and torch's C++ headers (pip's torch has them; Debian: libtorch-dev)"
    whl=$(ls -t /tmp/accl-wheel/torch_accl-*.whl 2>/dev/null | head -1)
  fi
  echo "install.sh: installing $(basename "${whl:-torch_accl}")"
  pipargs=(-m pip install -q --disable-pip-version-check --no-deps --force-reinstall)
  [ $BREAK_SYSTEM -eq 1 ] && [ -z "$VENV" ] && pipargs+=(--break-system-packages)
  run "$PIP_PY" "${pipargs[@]}" "$whl" || refuse "pip could not install $whl into $PIP_PY"
  echo "install.sh: checking: $PIP_PY -m torch_accl.check"
  (cd / && run "$PIP_PY" -m torch_accl.check) || refuse "python -m torch_accl.check failed (output above)"
else
  run accl-info --backends
fi
echo "install.sh: done in $(($(date +%s) - start)) s"
