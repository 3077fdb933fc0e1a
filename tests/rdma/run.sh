#!/bin/bash
# The verbs transport for real: boots a QEMU guest with soft-RoCE (rdma_rxe;
# Debian 12's stock kernel, software emulation, no KVM needed) and runs
# in_guest.sh there against BUILD_DIR's binaries.
#   tests/rdma/run.sh BUILD_DIR [STAGE...]     (stages: see in_guest.sh)
# ACCL_FAULT_REPEAT: rounds of the fault suite over verbs (default 3).
# CI=true: smaller conformance messages (see below).
# Needs root: the first run installs QEMU and rdma-core and builds the guest
# (kernel package + a small initramfs) into ACCL_RDMA_CACHE
# (/var/tmp/accl-softroce). Results and logs: BUILD_DIR/rdma-results/.
# Exit 77 (skipped) without root.
set -euo pipefail
B=$(realpath "${1:?usage: run.sh BUILD_DIR [STAGE...]}"); shift
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${ACCL_RDMA_CACHE:-/var/tmp/accl-softroce}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the soft-RoCE guest needs root (it installs QEMU and rdma-core)"
  exit 77
fi
start=$(date +%s)
bash "$here/softroce-vm.sh" prepare "$CACHE"
OUT="$B/rdma-results"
rm -rf "$OUT"
mkdir -p "$OUT"
# The guest mounts fresh tmpfs on /tmp, /var/tmp, /run and /root: a checkout
# there is hidden from it, so the guest script runs from the (mounted) build dir.
cp "$here/in_guest.sh" "$OUT/in_guest.sh"
# The fault-matrix scripts, in their tree layout (they import tests/scenario_main.py).
mkdir -p "$OUT/tests/accl" "$OUT/tests/diag"
cp "$here/../scenario_main.py" "$OUT/tests/"
cp "$here/../accl/fault_matrix.py" "$OUT/tests/accl/"
cp "$here/../diag/diag_test.py" "$OUT/tests/diag/"
echo "ACCL_FAULT_REPEAT=${ACCL_FAULT_REPEAT:-3}" >"$OUT/settings.sh"
# CI (CI=true) trims the conformance sizes, not its ops: a large count of
# 256 KiB (two verbs chunks and more) instead of 1 MiB, and --large 4 MiB
# instead of 16 MiB. The guest emulates the CPU, so sizes dominate its time.
if [ "${CI:-}" = true ]; then
  printf 'CONF_COUNT_BYTES=262144\nCONF_LARGE_BYTES=4194304\n' >>"$OUT/settings.sh"
fi
set +e
bash "$here/softroce-vm.sh" run "$CACHE" -w "$B" -t "${ACCL_RDMA_TIMEOUT:-2700}" "$OUT/in_guest.sh" "$B" "$OUT" "$@"
rc=$?
echo "rdma: guest finished with rc=$rc after $(( $(date +%s) - start )) s; logs in $OUT"
exit $rc
