#!/usr/bin/env bash
# Packaging tests in clean Debian 12 roots (packaging/tests/cleanroom.sh):
#
#   package_test.sh debs         BUILD_DIR SOURCE_DIR WHEEL_DIR
#   package_test.sh install-sh   BUILD_DIR SOURCE_DIR WHEEL_DIR
#   package_test.sh build-inside BUILD_DIR SOURCE_DIR
#
# debs:         cpack's .deb packages installed with apt, and the torch_accl
#               wheel into a venv with the root's torch; accl-info, a 2-rank
#               accl-run of the C++ example built in the root with
#               find_package(ACCL) and with pkg-config, python -m
#               torch_accl.check; then everything uninstalled and nothing of
#               ACCL left. No LD_LIBRARY_PATH anywhere.
# install-sh:   packaging/install.sh in a second root, timed.
# build-inside: packaging/docker/build-inside.sh (the Dockerfiles' build
#               stage) on a copy of the source, timed; its packages and wheel
#               are then installed with install.sh in the same root.
# Needs root (chroot, mounts) and debootstrap; exits 77 (skipped) without them.
set -euo pipefail
mode=${1:?mode} BUILD=$(cd "${2:?build dir}" && pwd) SRC=$(cd "${3:?source dir}" && pwd) WHEELS=${4:-}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (chroot and mounts)"; exit 77; }
command -v debootstrap >/dev/null || { echo "SKIP: debootstrap is missing (scripts/setup.sh installs it)"; exit 77; }
unshare -m sh -c 'mount -t tmpfs none /mnt' 2>/dev/null || { echo "SKIP: this machine does not let root mount (chroot needs /proc and /dev)"; exit 77; }
source "$SRC/packaging/tests/cleanroom.sh"
fail() { echo "FAIL: $*"; exit 1; }

cleanroom_ensure_base
root=""
trap 'cleanroom_destroy "$root"' EXIT

# The packages of this build (cpack: a few seconds, the build is done).
make_packages() {
  rm -rf "$BUILD/packages"
  (cd "$BUILD" && cpack >"$BUILD/cpack.log" 2>&1) || { tail -30 "$BUILD/cpack.log"; fail "cpack failed"; }
  ls "$BUILD"/packages/*.deb >/dev/null || fail "cpack made no .deb"
}
# The wheel for the root's torch (Debian's 1.13 for python 3.11), from the
# install.1.13.torch_accl_wheel test's build.
root_wheel() {
  ls "$WHEELS"/torch_accl-*-cp311-*.whl 2>/dev/null | head -1
}

case $mode in
debs)
  make_packages
  # Debian's checks: no errors allowed (warnings are listed in docs/install.md).
  if command -v lintian >/dev/null; then
    lint=$(lintian --tag-display-limit 0 "$BUILD"/packages/*.deb 2>&1 | grep -v "running with root privileges" || true)
    echo "$lint" | grep "^W:" | sed 's/^/lintian: /' || true
    errs=$(echo "$lint" | grep "^E:" || true)
    [ -z "$errs" ] || fail "lintian errors: $errs"
    echo "lintian: no errors in $(ls "$BUILD"/packages/*.deb | wc -l) packages"
  else
    fail "lintian is missing (scripts/setup.sh installs it)"
  fi
  whl=$(root_wheel)
  [ -n "$whl" ] || fail "no cp311 torch_accl wheel in $WHEELS (the install.1.13.torch_accl_wheel test makes it)"
  root=$(cleanroom_new debs)
  mkdir -p "$root/tmp/accl-test"
  cp "$BUILD"/packages/*.deb "$whl" "$root/tmp/accl-test/"
  cp -r "$SRC/examples/cpp/allreduce" "$root/tmp/accl-test/example"
  cat >"$root/tmp/accl-test/inside.sh" <<'INSIDE'
set -eu
cd /tmp/accl-test
fail() { echo "FAIL (in the root): $*"; exit 1; }
[ -z "${LD_LIBRARY_PATH:-}" ] || fail "LD_LIBRARY_PATH is set"
# The nccl module needs NVIDIA's libnccl2, which Debian's main archive lacks.
debs=$(ls *.deb | grep -v nccl)
start=$(date +%s)
apt-get install -y -q --no-install-recommends $(for d in $debs; do echo ./$d; done) >/tmp/apt.log 2>&1 ||
  { tail -20 /tmp/apt.log; fail "apt-get install of the packages failed"; }
echo "installed with apt in $(($(date +%s) - start)) s: $(echo $debs | tr '\n' ' ')"
accl-info > /tmp/info.txt || { cat /tmp/info.txt; fail "accl-info failed"; }
cat /tmp/info.txt | sed -n '1,/^Configuration/p'
grep -q "^  accl   usable" /tmp/info.txt || fail "the accl backend is not usable"
grep -Eq "module (/usr)?/lib/accl/libaccl-backend-accl.so" /tmp/info.txt || fail "the accl module is not loaded from /usr/lib/accl"
grep -q "^  gloo   usable" /tmp/info.txt || fail "the gloo backend is not usable"
grep -q "^  mpi    usable" /tmp/info.txt || fail "the mpi backend is not usable"
accl-perf --version | head -1
accl-diag --help >/dev/null || fail "accl-diag does not run"
# The C++ example, built here against the installed package: CMake, then pkg-config.
cmake -S example -B /tmp/example-build >/dev/null && cmake --build /tmp/example-build >/dev/null || fail "find_package(ACCL) build failed"
for b in accl gloo; do
  accl-run -n 2 /tmp/example-build/allreduce_example $b | tee /tmp/run.txt
  [ "$(grep -c "$b allreduce -> 3 (correct)" /tmp/run.txt)" = 2 ] || fail "2-rank $b allreduce (find_package build)"
done
c++ -o /tmp/pc_example example/main.cc $(pkg-config --cflags --libs accl) || fail "pkg-config build failed"
accl-run -n 2 /tmp/pc_example accl | tee /tmp/run.txt
[ "$(grep -c "accl allreduce -> 3 (correct)" /tmp/run.txt)" = 2 ] || fail "2-rank allreduce (pkg-config build)"
# torch_accl: the wheel in a venv that sees Debian's torch.
python3 -m venv --system-site-packages /opt/accl-venv
/opt/accl-venv/bin/python -m pip install -q --no-deps --disable-pip-version-check ./torch_accl-*.whl || fail "pip install of the wheel"
(cd / && /opt/accl-venv/bin/python -m torch_accl.check) || fail "python -m torch_accl.check"
# Uninstall: nothing of ACCL is left.
/opt/accl-venv/bin/python -m pip uninstall -q -y torch_accl
rm -rf /opt/accl-venv /tmp/example-build /tmp/pc_example
apt-get purge -y -q $(dpkg-query -W -f='${Package}\n' | grep -E '^(libaccl|accl-tools)') >/tmp/purge.log 2>&1 ||
  { tail /tmp/purge.log; fail "apt-get purge"; }
left=$(dpkg-query -W -f='${Package}\n' | grep -E 'accl' || true)
[ -z "$left" ] || fail "packages left: $left"
left=$(find / -xdev \( -iname '*accl*' -o -iname '*torch_accl*' \) -not -path '/tmp/accl-test*' -not -path '/proc/*' 2>/dev/null || true)
[ -z "$left" ] || fail "files left after uninstalling: $left"
echo "uninstalled: no package and no file of ACCL left"
INSIDE
  cleanroom_run "$root" bash /tmp/accl-test/inside.sh || fail "the .deb test failed in the clean root"
  echo "PASS: .deb packages and the wheel installed, run and uninstalled in a clean Debian 12 root"
  ;;
install-sh)
  make_packages
  whl=$(root_wheel)
  [ -n "$whl" ] || fail "no cp311 torch_accl wheel in $WHEELS"
  root=$(cleanroom_new install-sh)
  mkdir -p "$root/tmp/accl/packages" "$root/tmp/accl/wheels"
  cp "$BUILD"/packages/*.deb "$root/tmp/accl/packages/"
  cp "$whl" "$root/tmp/accl/wheels/"
  cp "$SRC/packaging/install.sh" "$root/tmp/accl/"
  # A refusal first: Debian's python3 is externally managed (PEP 668).
  out=$(cleanroom_run "$root" bash /tmp/accl/install.sh --packages /tmp/accl/packages --wheels /tmp/accl/wheels 2>&1) &&
    fail "install.sh installed into Debian's externally managed python3"
  echo "$out" | grep -q "pass --venv DIR" || fail "the PEP 668 refusal does not say what to do: $out"
  start=$(date +%s)
  cleanroom_run "$root" bash /tmp/accl/install.sh --packages /tmp/accl/packages --wheels /tmp/accl/wheels \
    --venv /opt/accl-venv | tee "$BUILD/install-sh.log" || fail "install.sh failed"
  secs=$(($(date +%s) - start))
  cleanroom_run "$root" accl-info --backends | grep -q "^  accl   usable" || fail "accl-info after install.sh"
  echo "install.sh: ${secs} s from a clean root with the packages cached (target: under 120 s)"
  [ "$secs" -lt 120 ] || echo "NOTE: install.sh took ${secs} s, over the 2-minute target"
  # No wheel for this torch at hand: install.sh builds one from the source.
  mkdir -p "$root/src" "$root/tmp/accl/no-wheels"
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$root/src"
  start=$(date +%s)
  cleanroom_run "$root" bash /tmp/accl/install.sh --packages /tmp/accl/packages --wheels /tmp/accl/no-wheels \
    --source /src --venv /opt/accl-venv-src 2>&1 | tee "$BUILD/install-sh-source.log" || fail "install.sh --source failed"
  grep -q "building the torch_accl wheel for torch" "$BUILD/install-sh-source.log" || fail "install.sh did not build the wheel"
  grep -q "self-test .*passed" "$BUILD/install-sh-source.log" || fail "the wheel install.sh built did not pass its check"
  echo "install.sh --source: $(($(date +%s) - start)) s, building the wheel in the clean root"
  echo "PASS: packaging/install.sh in a clean Debian 12 root"
  ;;
build-inside)
  root=$(cleanroom_new build-inside)
  mkdir -p "$root/src"
  # The source as a Docker build context would hold it: the tracked files.
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$root/src" 2>/dev/null ||
    (cd "$SRC" && tar --exclude=./build --exclude='./build-*' --exclude=./.git -cf - .) | tar -xf - -C "$root/src"
  start=$(date +%s)
  cleanroom_run "$root" bash /src/packaging/docker/build-inside.sh /src /out python3 | tee "$BUILD/build-inside.log" ||
    fail "build-inside.sh failed"
  secs=$(($(date +%s) - start))
  echo "build-inside.sh: ${secs} s in all (target for the build itself: under 300 s on 2 cores)"
  cleanroom_run "$root" bash /src/packaging/install.sh --packages /out/packages --wheels /out/wheels \
    --venv /opt/accl-venv || fail "install.sh of build-inside.sh's output failed"
  echo "PASS: the Dockerfiles' build stage built, packaged and installed ACCL in a clean Debian 12 root"
  ;;
*) fail "unknown mode $mode" ;;
esac
