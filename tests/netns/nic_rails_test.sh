#!/usr/bin/env bash
# NIC selection per rank (multi-rail): two simulated hosts, each with two
# network interfaces rail0 and rail1 (veth pairs between the two namespaces,
# one subnet per rail), two ranks per host. Local rank i of host A exchanges
# data with local rank i of host B; the interfaces' byte counters show which
# rail carried which rank:
#   1. the live topology: local rank 0 on rail0, local rank 1 on rail1;
#   2. ACCL_SOCKET_IFNAME=rail0 overrides it: everything on rail0;
#   3. ACCL_TOPO_FILE (two sockets, mlx5_0/rail1 on NUMA 0, mlx5_1/rail0 on
#      NUMA 1): the file's assignment, crossed: local rank 0 on rail1;
#   4. ACCL_IB_HCA=mlx5_1 with that file: both ranks on mlx5_1, i.e. rail0;
#   5. ACCL_IB_HCA naming no device: a clear error on every rank, no hang.
# Each case also checks the INFO line that says which NIC each rank uses.
# Creates and removes its own namespaces. Exit 77 = skipped (needs root).
#   nic_rails_test.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}
src=${2:?source dir}
A=acclr0 B=acclr1
. "$(dirname "$0")/lib.sh"
netns_require_root
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; true; }
trap cleanup EXIT
cleanup
ip netns add $A && ip netns add $B || exit 1
for i in 0 1; do
  ip link add rail$i netns $A type veth peer name rail$i netns $B || exit 1
  ip -n $A addr add 10.74.$i.1/24 dev rail$i
  ip -n $B addr add 10.74.$i.2/24 dev rail$i
  ip -n $A link set rail$i up
  ip -n $B link set rail$i up
done
ip -n $A link set lo up
ip -n $B link set lo up
sleep 1

MiB=$((1024 * 1024))
bytes=$((32 * MiB))
run="$build/bin/accl-run -n 4 --netns $A,$B --master-addr 10.74.0.1 $build/bin/accl_rail_pairs $bytes"
export ACCL_TIMEOUT=120 ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT
fails=0
tx() { ip netns exec $A cat /sys/class/net/$1/statistics/tx_bytes; }

# case NAME RAIL0_MIN_MIB RAIL1_MIN_MIB RAIL0_MAX_MIB RAIL1_MAX_MIB LOG_LINE...
case_() {
  local name=$1 min0=$2 min1=$3 max0=$4 max1=$5
  shift 5
  local t0 t1 log rc d0 d1
  t0=$(tx rail0) t1=$(tx rail1)
  log=$($run 2>&1)
  rc=$?
  d0=$((($(tx rail0) - t0) / MiB)) d1=$((($(tx rail1) - t1) / MiB))
  echo "== $name: host A sent $d0 MiB on rail0, $d1 MiB on rail1 (exit $rc)"
  echo "$log" | grep "network:" | sed 's/^/   /'
  if [ $rc -ne 0 ] || [ "$(echo "$log" | grep -c ' correct$')" -ne 4 ]; then
    echo "FAIL: $name: the exchange did not complete correctly"
    echo "$log" | tail -5
    fails=$((fails + 1))
  fi
  if [ $d0 -lt $min0 ] || [ $d1 -lt $min1 ] || [ $d0 -gt $max0 ] || [ $d1 -gt $max1 ]; then
    echo "FAIL: $name: expected rail0 in [$min0, $max0] MiB and rail1 in [$min1, $max1] MiB"
    fails=$((fails + 1))
  fi
  for want in "$@"; do
    echo "$log" | grep -qF -- "$want" || { echo "FAIL: $name: the INFO log lacks: $want"; fails=$((fails + 1)); }
  done
}

# Each rank sends 32 MiB to its partner; host A's two local ranks send 64 MiB.
case_ "live topology: one rail per local rank" 32 32 40 40 \
  "[rank 0/4] ACCL INFO INIT: network: local rank 0/2: NIC0 rail0 assigned by the topology (live)" \
  "[rank 1/4] ACCL INFO INIT: network: local rank 1/2: NIC1 rail1 assigned by the topology (live)" \
  "tcp over its netdev rail1"
ACCL_SOCKET_IFNAME=rail0 case_ "ACCL_SOCKET_IFNAME=rail0 overrides the topology" 64 0 72 4 \
  "local rank 1/2: NIC1 rail1 assigned by the topology (live)" "tcp interface from ACCL_SOCKET_IFNAME=rail0"
file=$src/tests/fixtures/topologies/hand-two-rails.xml
ACCL_TOPO_FILE=$file case_ "ACCL_TOPO_FILE: the file's NUMA-local NICs" 32 32 40 40 \
  "local rank 0/2: NIC0 mlx5_0 (RDMA) assigned by the topology (hwloc:$file), NUMA 0 CPUs 0; tcp over its netdev rail1" \
  "local rank 1/2: NIC1 mlx5_1 (RDMA) assigned by the topology (hwloc:$file), NUMA 1 CPUs 1; tcp over its netdev rail0"
ACCL_TOPO_FILE=$file ACCL_IB_HCA=mlx5_1 case_ "ACCL_IB_HCA=mlx5_1 overrides the assignment" 64 0 72 4 \
  "local rank 0/2: NIC1 mlx5_1 (RDMA) assigned by the topology (hwloc:$file, ACCL_IB_HCA=mlx5_1)" \
  "local rank 1/2: NIC1 mlx5_1 (RDMA) assigned by the topology (hwloc:$file, ACCL_IB_HCA=mlx5_1)"

echo "== ACCL_IB_HCA=mlx5_7: no such device"
start=$(date +%s)
log=$(ACCL_TOPO_FILE=$file ACCL_IB_HCA=mlx5_7 $run 2>&1)
rc=$?
echo "$log" | grep "InvalidArgument" | head -1 | sed 's/^/   /'
want="ACCL_IB_HCA='mlx5_7' matches no RDMA device; RDMA devices of this host (hwloc:$file): mlx5_0, mlx5_1; accepted:"
[ $rc -ne 0 ] || { echo "FAIL: a job with ACCL_IB_HCA=mlx5_7 succeeded"; fails=$((fails + 1)); }
echo "$log" | grep -qF -- "$want" || { echo "FAIL: the error lacks: $want"; echo "$log" | tail -8; fails=$((fails + 1)); }
[ $(($(date +%s) - start)) -lt 60 ] || { echo "FAIL: the error took more than 60 s"; fails=$((fails + 1)); }

[ $fails -eq 0 ] && echo "nic_rails: all cases passed"
exit $fails
