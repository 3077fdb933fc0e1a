#!/bin/bash
# Runs INSIDE the soft-RoCE guest (tests/rdma/run.sh boots it) as root.
# Usage: in_guest.sh BUILD_DIR OUT_DIR STAGE...
# Stages: unit conformance fault memlock perf (default: all).
# Brings up an rxe device on a guest-only dummy interface and runs the accl
# backend over verbs for real; exits non-zero if any check fails.
set -u
B=$1; OUT=$2; shift 2
# Settings from the host (run.sh writes them: the guest starts with a clean environment).
[ -f "$OUT/settings.sh" ] && . "$OUT/settings.sh"
STAGES=${*:-unit conformance fault memlock perf}
mkdir -p "$OUT"
export PATH="$B/bin:$PATH" ACCL_TIMEOUT=300
fail=0; pass=0
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "PASS $2"; else fail=$((fail+1)); echo "FAIL $2 (rc=$1)"; fi; }
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
t() { date +%s; }

# --- soft-RoCE on a dummy netdev with an address that exists only in here
ip link add dummy0 type dummy 2>/dev/null
ip addr add 192.0.2.1/24 dev dummy0; ip link set dummy0 mtu 9000 up   # RoCE MTU 4096
rdma link add rxe0 type rxe netdev dummy0; ok $? "rdma link add rxe0 on dummy0"
for i in $(seq 50); do ibv_devinfo -v -d rxe0 2>/dev/null | grep -q '::ffff:192.0.2.1' && break; sleep 0.1; done
G=$(ibv_devinfo -v -d rxe0 | sed -n 's/.*GID\[ *\([0-9]*\)\]:.*::ffff:192\.0\.2\.1.*/\1/p' | head -1)
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu|link_layer'
chmod 666 /dev/infiniband/* 2>/dev/null   # for the unprivileged (memlock) check
export ACCL_SOCKET_IFNAME==dummy0

# Ranks of "host k" = RANK / PER: each simulated host gets its own host id, so
# ranks on one host use shared memory and ranks on different hosts use verbs.
cat > /tmp/as_hosts.sh <<'EOS'
#!/bin/bash
export ACCL_HOSTID="guesthost$(( RANK / ${PER:-1} ))"
exec "$@"
EOS
chmod +x /tmp/as_hosts.sh

if has unit; then
  s=$(t)
  # The transport's fault tests (late frames, a peer that exits) run ACCL_FAULT_REPEAT rounds.
  { accl_verbs_tests; accl_net_tests --gtest_filter='*/ib' --gtest_repeat="${ACCL_FAULT_REPEAT:-3}"; } 2>&1 | tee "$OUT/unit.log" | grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|peer gone"
  r=${PIPESTATUS[0]}
  grep -q "FAILED" "$OUT/unit.log" && r=1
  grep -q "SKIPPED" "$OUT/unit.log" && { echo "verbs unit tests skipped inside the guest"; r=1; }
  ok $r "verbs unit tests on rxe0 ($(( $(t) - s )) s)"
fi

if has conformance; then
  # (1) every rank its own host, verbs only (no tcp fallback), messages up to 16 MiB
  s=$(t)
  ACCL_TRANSPORTS=ib ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT \
    accl-run -n 2 accl_conformance --backend accl --large "${CONF_LARGE_BYTES:-16777216}" \
      --count-bytes "${CONF_COUNT_BYTES:-1048576}" >"$OUT/conf_ib_np2.log" 2>&1
  r=$?; tail -3 "$OUT/conf_ib_np2.log"
  grep -q "ib (verbs rxe0.*zero-copy from registered user buffers" "$OUT/conf_ib_np2.log" || { echo "no verbs zero-copy INFO line"; r=1; }
  ok $r "conformance accl np2, ACCL_TRANSPORTS=ib, up to $(( ${CONF_LARGE_BYTES:-16777216} >> 20 )) MiB ($(( $(t) - s )) s)"
  # (2) 2 simulated hosts x 2 ranks: shm within, verbs between (default transports), sub-groups too
  s=$(t)
  PER=2 ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT \
    accl-run -n 4 /tmp/as_hosts.sh accl_conformance --backend accl --count-bytes "${CONF_COUNT_BYTES:-1048576}" \
      >"$OUT/conf_hosts_np4.log" 2>&1
  r=$?; tail -3 "$OUT/conf_hosts_np4.log"
  grep -q "shm (.*ib (verbs rxe0" "$OUT/conf_hosts_np4.log" || { echo "no shm+verbs INFO line"; r=1; }
  ok $r "conformance accl np4 = 2 hosts x 2 ranks (shm + verbs) ($(( $(t) - s )) s)"
  s=$(t)
  # (3) sub-groups from split across the hosts (both at once); a few dtypes keep it short
  PER=2 accl-run -n 4 /tmp/as_hosts.sh accl_conformance --backend accl --split --count-bytes "${CONF_COUNT_BYTES:-1048576}" \
    --gtest_filter='*float32*:*int64*:*bfloat16*:Barrier*:Async*' >"$OUT/conf_hosts_split_np4.log" 2>&1
  r=$?; tail -2 "$OUT/conf_hosts_split_np4.log"
  ok $r "conformance accl --split np4 over 2 hosts, float32/int64/bfloat16 ($(( $(t) - s )) s)"
fi

if has fault; then
  s=$(t)
  # ACCL_FAULT_REPEAT rounds in a row (run.sh passes it in; default 3).
  n=${ACCL_FAULT_REPEAT:-3}
  accl_fault_tests --gtest_filter='*/ib' --gtest_repeat="$n" 2>&1 | tee "$OUT/fault.log" | grep -E "^\[ +(FAILED|PASSED) +\]" | sort | uniq -c
  r=${PIPESTATUS[0]}
  grep -q "SKIPPED" "$OUT/fault.log" && { echo "verbs fault tests skipped inside the guest"; r=1; }
  ok $r "fault tests over verbs, $n rounds: killed rank, never-entered op, mismatch, garbage ($(( $(t) - s )) s)"
  # The fault matrix's process faults over verbs only (each rank its own peer
  # over ib): SIGKILL, exit(0) without destroying the group.
  for f in sigkill exit_without_destroy; do
    s=$(t)
    python3 "$OUT/tests/accl/fault_matrix.py" "$B" $f ib >"$OUT/matrix_$f.log" 2>&1
    r=$?; grep -E "^rank [0-9]:" "$OUT/matrix_$f.log"
    ok $r "fault matrix over verbs: $f ($(( $(t) - s )) s)"
  done
  # The link: rxe0's interface goes down mid-op (the guest's one link), then up again.
  s=$(t)
  python3 "$OUT/tests/accl/fault_matrix.py" "$B" ifdown ib,dummy0 >"$OUT/matrix_ifdown.log" 2>&1
  r=$?; grep -E "^rank [0-9]:" "$OUT/matrix_ifdown.log"
  for i in $(seq 100); do ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE && break; sleep 0.1; done
  ok $r "fault matrix over verbs: the link set down mid-op ($(( $(t) - s )) s)"
  # SIGSTOP of one of 4 ranks until the deadline: the others warn naming it,
  # accl-diag names it from the dumps, through SIGUSR1 and through the store.
  s=$(t)
  # Its deadline is 40 s here: the guest's emulated CPU takes over 12 s for the steps before it.
  ACCL_TEST_STALL_DEADLINE_S=40 python3 "$OUT/tests/diag/diag_test.py" "$B" stall ib >"$OUT/matrix_stall.log" 2>&1
  r=$?; grep -E "^rank [0-9] warned|^FAIL" "$OUT/matrix_stall.log" | cut -c1-240
  [ $r = 0 ] || grep -E "^rank [0-9] wrote: " "$OUT/matrix_stall.log" | cut -c1-1500
  ok $r "fault matrix over verbs: SIGSTOP until the deadline ($(( $(t) - s )) s)"
fi

if has memlock; then
  # An unprivileged rank whose locked-memory limit is too small for the rings.
  su_run() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
  ACCL_TRANSPORTS=ib su_run bash -c "ulimit -l 64; exec accl-run -n 2 accl-perf --backend accl --op allreduce -b 8 -e 8" \
    >"$OUT/memlock_ib.log" 2>&1
  r=$?; grep -m1 "RLIMIT_MEMLOCK" "$OUT/memlock_ib.log"
  [ $r != 0 ] && grep -q "ulimit -l unlimited" "$OUT/memlock_ib.log"; ok $? "ib only + 64 KiB memlock: clear error naming the limit"
  ACCL_TRANSPORTS=ib,tcp ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT su_run bash -c "ulimit -l 64; exec accl-run -n 2 accl-perf --backend accl --op allreduce -b 8 -e 1024" \
    >"$OUT/memlock_fallback.log" 2>&1
  r=$?; grep -m1 "falling back to tcp" "$OUT/memlock_fallback.log"
  [ $r = 0 ] && grep -q "falling back to tcp: .*RLIMIT_MEMLOCK" "$OUT/memlock_fallback.log"; ok $? "ib,tcp + 64 KiB memlock: logged fallback to tcp, run completes"
fi

if has perf; then
  # Same guest, same run: verbs (zero-copy sends, the default), verbs with
  # every payload copied, and TCP (2 ranks, each its own host). Emulated:
  # functional figures.
  for v in ib ibcopy tcp; do
    tr=${v%copy}; zc=16384; [ $v = ibcopy ] && zc=0
    for op in allreduce sendrecv; do
      ACCL_TRANSPORTS=$tr ACCL_IB_ZCOPY_BYTES=$zc ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT \
        accl-run -n 2 accl-perf --backend accl --op $op -b 4 -e 16M -f 4 -n 5 -w 2 -c 1 >"$OUT/perf_${op}_$v.log" 2>&1
      r=$?
      if [ $v = ib ]; then grep -q "zero-copy from registered user buffers" "$OUT/perf_${op}_$v.log" || { echo "zero-copy not on"; r=1; }; fi
      if [ $v = ibcopy ]; then grep -q "payloads copied into registered staging (ACCL_IB_ZCOPY_BYTES=0)" "$OUT/perf_${op}_$v.log" || { echo "copy mode not reported"; r=1; }; fi
      ok $r "accl-perf $op over $v"
    done
  done
  # The raw soft-RoCE write rate in this guest, the anchor for the figures above.
  # A fixed count of writes (a 3 s window completed none in one run under emulation).
  timeout 120 ib_write_bw -d rxe0 -x "$G" -F -n 20 -s 1048576 >/tmp/wbw_srv.log 2>&1 & sp=$!; sleep 1.5
  timeout 120 ib_write_bw -d rxe0 -x "$G" -F -n 20 -s 1048576 127.0.0.1 >"$OUT/ib_write_bw.log" 2>&1; r=$?
  wait $sp; ok $((r|$?)) "ib_write_bw 1 MiB (raw rxe anchor)"
  grep -A1 -E '^ #bytes' "$OUT/ib_write_bw.log" | tail -1
  for f in "$OUT"/perf_*.log; do echo "== $f"; grep -v '^\[.\] #' "$f" | tail -12; done
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
