#!/usr/bin/env bash
# Simulated hosts on one machine: network namespaces accl-h0..accl-h{N-1}, each
# with a veth into a bridge in the root namespace. Host i has 10.77.0.(i+1)/24.
#   bench/netns.sh up N      create (idempotent)
#   bench/netns.sh down N    remove
# Then: accl-run -n 4 --netns accl-h0,accl-h1 --master-addr 10.77.0.1 PROGRAM
# Needs root. Only these private addresses are used.
# ACCL_NETNS_PREFIX (default accl-h) and ACCL_NETNS_SUBNET (default 10.77.0) let
# several sets coexist (tests use their own).
set -euo pipefail
cmd=${1:?up|down}
n=${2:-2}
p=${ACCL_NETNS_PREFIX:-accl-h}
net=${ACCL_NETNS_SUBNET:-10.77.0}
br=${p}br
if [ "$cmd" = up ]; then
  # Another interface with our subnet would steal the routes: refuse, say which.
  other=$(ip -o -4 addr show | awk -v a="$net.254/24" -v b="$br" '$4 == a && $2 != b {print $2}')
  if [ -n "$other" ]; then
    echo "netns: $net.254/24 is already on interface $other; remove it or choose ACCL_NETNS_SUBNET" >&2
    exit 1
  fi
  ip link show $br >/dev/null 2>&1 || { ip link add $br type bridge; ip addr add $net.254/24 dev $br; }
  ip link set $br up
  for i in $(seq 0 $((n - 1))); do
    ns=$p$i
    ip netns list | grep -qw $ns || ip netns add $ns
    if ! ip link show ${p}v$i >/dev/null 2>&1; then
      ip link add ${p}v$i type veth peer name eth0 netns $ns
      ip link set ${p}v$i master $br up
      ip -n $ns addr add $net.$((i + 1))/24 dev eth0
    fi
    ip -n $ns link set eth0 up
    ip -n $ns link set lo up
  done
  sleep 1  # let the new links settle before anyone connects
  for i in $(seq 0 $((n - 1))); do
    ip -n $p$i -4 addr show eth0 | grep -q "$net.$((i + 1))" || { echo "netns: $p$i has no address"; exit 1; }
  done
  echo "netns: $n hosts ${p}0.. up ($net.1 .. $net.$n)"
elif [ "$cmd" = down ]; then
  for i in $(seq 0 $((n - 1))); do
    ip link del ${p}v$i 2>/dev/null || true
    ip netns del $p$i 2>/dev/null || true
  done
  ip link del $br 2>/dev/null || true
else
  echo "usage: $0 up|down N" >&2
  exit 2
fi
