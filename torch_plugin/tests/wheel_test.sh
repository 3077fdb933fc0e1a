#!/bin/sh
# The torch_accl wheel for one interpreter, built and installed as a user does:
#   wheel_test.sh PYTHON SOURCE_DIR WORK_DIR
# 1. `pip wheel ./torch_plugin` (a build directory of its own) gives one
#    platform-tagged wheel whose metadata requires this torch's minor version;
# 2. every ELF file in it finds its libraries through $ORIGIN only, and no file
#    holds a path of the source or build tree;
# 3. installed (with its dependencies) into a fresh venv that has this torch,
#    `python -m torch_accl.check` passes outside the source tree, without
#    PYTHONPATH or LD_LIBRARY_PATH, and the console scripts run.
py=$1 src=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
unset PYTHONPATH LD_LIBRARY_PATH
short=$("$py" -c "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))") || exit 1
start=$(date +%s)
ACCL_BUILD_DIR="$work/build" "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" "$src/torch_plugin" \
  || fail "pip wheel failed"
whl=$(ls "$work"/dist/*.whl)
echo "wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB, built in $(($(date +%s) - start)) s)"
case $(basename "$whl") in
  torch_accl-*-cp3*-cp3*-linux_x86_64.whl) ;;
  *) fail "not a platform wheel: $(basename "$whl")" ;;
esac
req=$(unzip -p "$whl" '*.dist-info/METADATA' | grep '^Requires-Dist: torch')
# Older setuptools write "torch (==1.13.*)".
[ "$(echo "$req" | tr -d ' ()')" = "Requires-Dist:torch==$short.*" ] || fail "metadata requires '$req', expected torch==$short.*"
echo "metadata: $req"

mkdir "$work/unpacked" && (cd "$work/unpacked" && unzip -q "$whl") || exit 1
n=0
for f in $(find "$work/unpacked" -type f); do
  head -c 4 "$f" | grep -q 'ELF' || continue
  n=$((n + 1))
  rp=$(readelf -d "$f" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  for p in $(echo "$rp" | tr ':' ' '); do
    case $p in '$ORIGIN'*) ;; *) fail "$f: run path entry $p is not relative to \$ORIGIN" ;; esac
  done
done
[ $n -ge 8 ] || fail "only $n ELF files in the wheel (extension, libaccl, backend modules, tools expected)"
for tree in "$src" "$work/build"; do
  hits=$(grep -rlF "$tree" "$work/unpacked" || true)
  [ -z "$hits" ] || fail "files holding the path $tree: $hits"
done
echo "files: $n ELF files, run paths only \$ORIGIN, no path of the source or build tree"

"$py" -m venv --system-site-packages "$work/venv" || exit 1
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$whl" || fail "pip install of the wheel failed"
cd / || exit 1
"$work/venv/bin/python" -m torch_accl.check || fail "python -m torch_accl.check failed"
loc=$("$work/venv/bin/python" -c "import torch_accl, os; print(os.path.dirname(torch_accl.__file__))")
case $loc in "$work/venv/"*) ;; *) fail "torch_accl imported from $loc, not from the venv" ;; esac
"$work/venv/bin/accl-info" | grep -q "accl" || fail "accl-info (console script) did not run"
"$work/venv/bin/accl-diag" --help | grep -q "flight recorder" || fail "accl-diag (console script) did not run"
echo "wheel_test: torch $short wheel installed into a fresh venv and checked"
