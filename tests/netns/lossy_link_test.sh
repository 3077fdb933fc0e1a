#!/usr/bin/env bash
# Packet loss and delay between two hosts (the fault matrix's loss/delay row):
# 2 network namespaces x 2 ranks of the accl backend, TCP between them. Each
# host's outgoing packets on its link are dropped at random (iptables'
# statistic match, LOSS percent) and the rest held back DELAY_MS milliseconds
# (an NFQUEUE rule served by accl_nfq_delay: the kernel has no netem qdisc).
# Then:
#   1. a part of the conformance suite: every result must be correct (TCP
#      recovers what was lost; nothing may fail, hang or come back wrong);
#   2. a job whose link then loses every packet: each rank must fail with a
#      named Timeout within its deadline.
# Exit 77 = skipped (needs root, iptables and the delay tool).
#   lossy_link_test.sh BUILD_DIR SOURCE_DIR [LOSS_PERCENT DELAY_MS]
set -u
build=${1:?build dir}
src=${2:?source dir}
loss=${3:-2}
delay=${4:-5}
delayer=$build/bin/accl_nfq_delay
prob=$(awk -v l="$loss" 'BEGIN { if (l !~ /^[0-9.]+$/ || l + 0 >= 100) exit 1; printf "%.4f", l / 100 }') ||
  { echo "lossy_link_test.sh: LOSS_PERCENT must be a number in 0..99, not '$loss'"; exit 2; }
ipt=$(command -v iptables-legacy || command -v iptables || true)
if [ ! -x "$delayer" ] || [ -z "$ipt" ]; then
  echo "SKIP: needs iptables and accl_nfq_delay (built where libnetfilter_queue is installed; scripts/setup.sh installs both)"
  exit 77
fi
export ACCL_NETNS_PREFIX=acclq ACCL_NETNS_SUBNET=10.75.0
. "$(dirname "$0")/lib.sh"
netns_require_root
pids=()
logdir=$(mktemp -d)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  for i in 0 1; do [ -s "$logdir/delay$i.log" ] && echo "host $i: $(tail -1 "$logdir/delay$i.log")"; done
  rm -rf "$logdir"
  "$src/bench/netns.sh" down 2
}
trap cleanup EXIT
# Hosts left by a run that was killed before its clean-up keep their rules, and
# rules appended after theirs would never see a packet: start from none.
"$src/bench/netns.sh" down 2
"$src/bench/netns.sh" up 2 || exit 1
for i in 0 1; do
  ns=acclq$i
  ip netns exec $ns "$delayer" $((40 + i)) "$delay" > "$logdir/delay$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do grep -q ready "$logdir/delay$i.log" && break; sleep 0.1; done
  grep -q ready "$logdir/delay$i.log" || { echo "FAIL: the delay tool did not start: $(cat "$logdir/delay$i.log")"; exit 1; }
  # Loss first, then the delay for what is left (the queue rule accepts nothing by itself).
  if ! ip netns exec $ns "$ipt" -A OUTPUT -o eth0 -m statistic --mode random --probability "$prob" -j DROP ||
     ! ip netns exec $ns "$ipt" -A OUTPUT -o eth0 -j NFQUEUE --queue-num $((40 + i)); then
    echo "SKIP: this kernel refuses the iptables statistic or NFQUEUE rules"
    exit 77
  fi
  n=$(ip netns exec $ns "$ipt" -S OUTPUT | grep -c '^-A OUTPUT')
  [ "$n" -eq 2 ] || { echo "FAIL: host $i's OUTPUT chain holds $n rules, not this test's 2:"; ip netns exec $ns "$ipt" -S OUTPUT; exit 1; }
done
run="$build/bin/accl-run -n 4 --netns acclq0,acclq1 --master-addr 10.75.0.1"
fails=0
# Sizes from one frame to several chunks: reductions, gathers, all-to-all, broadcast, point-to-point, barrier, async.
filter='*allreduce_float32*:*allreduce_int64*:*reduce_scatter_float16*:*allgatherv_bfloat16*:*alltoallv_*:*broadcast_*:*PointToPoint*:*Barrier*:*Async*'
echo "== accl, 2 hosts x 2 ranks, ${loss} % loss and ${delay} ms delay each way: conformance (correct results)"
start=$(date +%s)
ACCL_TIMEOUT=300 $run "$build/bin/accl_conformance" --backend accl --gtest_filter="$filter" --gtest_brief=1 ||
  fails=$((fails + 1))
echo "conformance under loss and delay: $(( $(date +%s) - start )) s"
for i in 0 1; do
  # Rule 1 is the statistic DROP rule added above.
  drops=$(ip netns exec acclq$i "$ipt" -L OUTPUT 1 -v -x -n | awk '{print $1; exit}')
  echo "host $i: $drops packets dropped on purpose"
  [ "${drops:-0}" -gt 0 ] || [ "$prob" = 0.0000 ] || { echo "FAIL: no packet was dropped on host $i"; fails=$((fails + 1)); }
done

echo "== the link then loses every packet mid-job: each rank fails with a named Timeout"
python3 "$src/tests/accl/fault_matrix.py" "$build" blackhole acclq0,acclq1,10.75.0.1,"$ipt" || fails=$((fails + 1))
exit $fails
