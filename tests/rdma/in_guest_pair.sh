#!/bin/bash
# Runs INSIDE one of the two soft-RoCE guests of run.sh's "pair" stage, as root.
# Two guests, each with its own kernel and its own rxe device on its eth0, are
# joined by a QEMU socket netdev: the wire between two verbs hosts, which one
# guest cannot give (rxe sends to its own device through loopback, past netem
# and netfilter). One rank per guest, verbs only (ACCL_TRANSPORTS=ib).
# Usage: in_guest_pair.sh BUILD_DIR OUT_DIR ROLE   (ROLE 0 holds rank 0 and the store)
# Checks, each guest for its own rank:
#   1. loss and delay (netem on each eth0, LOSS % and DELAY ms each way): a part
#      of the conformance suite, every result correct (RC resends what was lost);
#   2. short jobs end under heavy loss (SHORT_LOSS %): each one passes, also
#      when its last write's acknowledgement is lost as the peer exits;
#   3. the wire then loses every packet mid-allreduce: a named error within the deadline;
#   4. guest 1's cable is pulled mid-allreduce (run.sh, QEMU's set_link): both ranks fail within the deadline.
# 3 and 4 run ACCL_FAULT_REPEAT rounds (run.sh passes it in; default 3).
set -u
B=$1; OUT=$2; ROLE=$3
[ -f "$OUT/settings.sh" ] && . "$OUT/settings.sh"
LOSS=${PAIR_LOSS:-2} DELAY=${PAIR_DELAY_MS:-5} SHORT_JOBS=${PAIR_SHORT_JOBS:-10} SHORT_LOSS=${PAIR_SHORT_LOSS:-10}
export PATH="$B/bin:$PATH"
SYNC=$OUT/sync
ME=10.78.0.$((ROLE + 1)) PEER=10.78.0.$((2 - ROLE))
fail=0; pass=0
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "PASS $2"; else fail=$((fail+1)); echo "FAIL $2 (rc=$1)"; fi; }
t() { date +%s; }
# Both guests reach NAME (files in a folder that both mount from the host).
meet() {
  touch "$SYNC/$1.$ROLE"
  for _ in $(seq 3000); do [ -e "$SYNC/$1.$((1 - ROLE))" ] && return 0; sleep 0.1; done
  echo "the other guest did not reach '$1' within 300 s"; return 1
}

ip link set eth0 mtu 9000 up && ip addr add "$ME/24" dev eth0; ok $? "eth0 $ME, mtu 9000"
rdma link add rxe0 type rxe netdev eth0; ok $? "rdma link add rxe0 on eth0"
for _ in $(seq 100); do ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && break; sleep 0.1; done
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu'
r=1; for _ in $(seq 120); do ping -c1 -W1 "$PEER" >/dev/null 2>&1 && { r=0; break; }; done
ok $r "the other guest ($PEER) answers on the wire"
[ $r = 0 ] || { echo "$pass passed, $fail failed"; exit 1; }
export ACCL_SOCKET_IFNAME==eth0 ACCL_TRANSPORTS=ib MASTER_ADDR=10.78.0.1 WORLD_SIZE=2 RANK=$ROLE \
  LOCAL_RANK=0 LOCAL_WORLD_SIZE=1

# 1. Loss and delay: correct results.
tc qdisc add dev eth0 root netem delay "${DELAY}ms" loss "${LOSS}%"; ok $? "netem on eth0: ${LOSS} % loss, ${DELAY} ms delay"
filter='*allreduce_float32*:*allreduce_int64*:*reduce_scatter_float16*:*allgatherv_bfloat16*:*alltoallv_*:*broadcast_*:*PointToPoint*:*Barrier*:*Async*'
meet loss-conformance
s=$(t)
MASTER_PORT=29601 ACCL_TIMEOUT=300 ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT accl_conformance --backend accl \
  --count-bytes "${CONF_COUNT_BYTES:-1048576}" --gtest_filter="$filter" --gtest_brief=1 >"$OUT/pair_loss$ROLE.log" 2>&1
r=$?; tail -3 "$OUT/pair_loss$ROLE.log"
grep -q "ib (verbs rxe0" "$OUT/pair_loss$ROLE.log" || { echo "no verbs INFO line: not over verbs?"; r=1; }
grep -q "PASSED" "$OUT/pair_loss$ROLE.log" || r=1
drops=$(tc -s qdisc show dev eth0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
echo "rank $ROLE: ${drops:-0} packets dropped by netem on $ME's eth0"
[ "${drops:-0}" -gt 0 ] || { echo "no packet was dropped"; r=1; }
ok $r "conformance over verbs between two guests under ${LOSS} % loss and ${DELAY} ms delay ($(( $(t) - s )) s)"
tc qdisc del dev eth0 root

# 2. Jobs that end under loss: SHORT_JOBS short jobs (a barrier, then the
# final barrier and exit) at SHORT_LOSS % loss. A job's last write often
# lands while its acknowledgement is lost, and the peer exits at once: the
# writer's op must still complete (the peer's farewell confirms the write).
tc qdisc add dev eth0 root netem loss "${SHORT_LOSS}%"
r=0; failed=; s=$(t)
for i in $(seq "$SHORT_JOBS"); do
  meet "short-$i" || { r=1; break; }
  MASTER_PORT=$((29700 + i)) ACCL_TIMEOUT=60 accl_conformance --backend accl --gtest_filter='Barrier.*' \
    --gtest_brief=1 >"$OUT/pair_short$ROLE.$i.log" 2>&1 || { r=1; failed="$failed $i"; tail -3 "$OUT/pair_short$ROLE.$i.log"; }
done
drops=$(tc -s qdisc show dev eth0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
tc qdisc del dev eth0 root
ok $r "$SHORT_JOBS short jobs ended under ${SHORT_LOSS} % loss, ${drops:-0} packets dropped here${failed:+; failed:$failed} ($(( $(t) - s )) s)"

# 3. and 4. The wire cut mid-allreduce (each guest prints its rank's line).
port=29610
for round in $(seq "${ACCL_FAULT_REPEAT:-3}"); do
  for how in loss down; do
    s=$(t); port=$((port + 1))
    python3 "$OUT/tests/accl/fault_matrix.py" "$B" pair_cut "$how$round,$ROLE,$SYNC,$port" \
      >"$OUT/pair_cut_$how${round}_$ROLE.log" 2>&1
    r=$?; grep -E "^rank [0-9]:|^FAIL" "$OUT/pair_cut_$how${round}_$ROLE.log" | cut -c1-300
    ok $r "round $round: the wire between the guests cut mid-allreduce ($how): rank $ROLE fails named in time ($(( $(t) - s )) s)"
    for _ in $(seq 100); do ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE && break; sleep 0.1; done
  done
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
