#!/bin/bash
# The verbs transport for real: boots a QEMU guest with soft-RoCE (rdma_rxe;
# Debian 12's stock kernel, software emulation, no KVM needed) and runs
# in_guest.sh there against BUILD_DIR's binaries.
#   tests/rdma/run.sh BUILD_DIR [STAGE...]     (stages: see in_guest.sh, and pair)
# pair boots two guests joined by a wire (a QEMU socket netdev on the host's
# loopback), each its own verbs host, and runs in_guest_pair.sh in both: loss,
# delay and a cut wire between two verbs hosts. Default: every stage, then pair.
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
cp "$here/in_guest.sh" "$here/in_guest_pair.sh" "$OUT/"
# The fault-matrix scripts, in their tree layout (they import tests/scenario_main.py).
mkdir -p "$OUT/tests/accl" "$OUT/tests/diag"
cp "$here/../scenario_main.py" "$OUT/tests/"
cp "$here/../accl/fault_matrix.py" "$OUT/tests/accl/"
cp "$here/../diag/diag_test.py" "$OUT/tests/diag/"
echo "ACCL_FAULT_REPEAT=${ACCL_FAULT_REPEAT:-3}" >"$OUT/settings.sh"
# The pair stage's knobs (in_guest_pair.sh), where set.
for v in PAIR_LOSS PAIR_DELAY_MS PAIR_SHORT_JOBS PAIR_SHORT_LOSS; do
  [ -z "${!v:-}" ] || echo "$v=${!v}" >>"$OUT/settings.sh"
done
# CI (CI=true) trims the conformance sizes, not its ops: a large count of
# 256 KiB (two verbs chunks and more) instead of 1 MiB, and --large 4 MiB
# instead of 16 MiB. The guest emulates the CPU, so sizes dominate its time.
if [ "${CI:-}" = true ]; then
  printf 'CONF_COUNT_BYTES=262144\nCONF_LARGE_BYTES=4194304\n' >>"$OUT/settings.sh"
fi
single=() pair=0
[ $# -gt 0 ] || pair=1
for s in "$@"; do if [ "$s" = pair ]; then pair=1; else single+=("$s"); fi; done
set +e
rc=0
if [ $# -eq 0 ] || [ ${#single[@]} -gt 0 ]; then
  bash "$here/softroce-vm.sh" run "$CACHE" -w "$B" -t "${ACCL_RDMA_TIMEOUT:-2700}" "$OUT/in_guest.sh" "$B" "$OUT" "${single[@]}"
  rc=$?
fi
if [ $pair = 1 ]; then
  s=$(date +%s)
  mkdir -p "$OUT/sync"
  # QEMU's socket netdev: guest 0 listens on a free loopback port, guest 1 connects.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  GUEST_CPUS=${GUEST_CPUS:-1} bash "$here/softroce-vm.sh" run "$CACHE" -w "$B" -t "${ACCL_RDMA_PAIR_TIMEOUT:-900}" \
    -n "socket,listen=127.0.0.1:$port" -a 52:54:00:78:00:01 "$OUT/in_guest_pair.sh" "$B" "$OUT" 0 >"$OUT/pair0.console" 2>&1 &
  g0=$!
  for _ in $(seq 300); do ss -ltn "sport = :$port" | grep -q LISTEN && break; sleep 0.1; done
  # Guest 1's cable: the guests ask for it to be pulled or put back by a file
  # in sync/ (wire-off-NAME, wire-on-NAME), and this loop does it through
  # QEMU's monitor (set_link), answering with NAME.done.
  mon=$(mktemp -d /tmp/accl-pair.XXXXXX)/monitor
  GUEST_CPUS=${GUEST_CPUS:-1} bash "$here/softroce-vm.sh" run "$CACHE" -w "$B" -t "${ACCL_RDMA_PAIR_TIMEOUT:-900}" \
    -n "socket,connect=127.0.0.1:$port" -a 52:54:00:78:00:02 -m "$mon" "$OUT/in_guest_pair.sh" "$B" "$OUT" 1 \
    >"$OUT/pair1.console" 2>&1 &
  g1=$!
  while kill -0 $g1 2>/dev/null; do
    for f in "$OUT"/sync/wire-o*; do
      case $f in *.done|*'*') continue;; esac
      [ -e "$f.done" ] && continue
      state=$(basename "$f" | cut -d- -f2)
      python3 - "$mon" "$state" <<'EOP' && touch "$f.done"
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(5)
s.recv(4096)  # the monitor's banner
s.sendall(f"set_link n0 {sys.argv[2]}\n".encode())
time.sleep(0.3)
s.close()
EOP
    done
    sleep 0.1
  done
  wait $g1; r1=$?
  rm -rf "$(dirname "$mon")"
  wait $g0; r0=$?
  for g in 0 1; do echo "== guest $g (verbs host 10.78.0.$((g + 1)))"; grep -v "^INIT\|^\s*$" "$OUT/pair$g.console"; done
  echo "rdma: two guests finished with rc=$r0 and rc=$r1 after $(( $(date +%s) - s )) s"
  [ $r0 = 0 ] && [ $r1 = 0 ] || rc=1
fi
echo "rdma: guest finished with rc=$rc after $(( $(date +%s) - start )) s; logs in $OUT"
exit $rc
