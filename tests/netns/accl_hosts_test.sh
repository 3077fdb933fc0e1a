#!/usr/bin/env bash
# The accl backend across simulated hosts: 3 network namespaces x 2 ranks
# (veth links into a bridge). Shared memory within a namespace, TCP between
# them; hierarchical algorithms. Runs the whole conformance suite, sub-groups
# included, then checks what the backend says it chose. Creates and removes
# its own namespaces. Exit 77 = skipped (needs root).
#   accl_hosts_test.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}
src=${2:?source dir}
export ACCL_NETNS_PREFIX=acclh ACCL_NETNS_SUBNET=10.76.0
. "$(dirname "$0")/lib.sh"
netns_hosts_up "$src" 3
run="$build/bin/accl-run -n 6 --netns acclh0,acclh1,acclh2 --master-addr 10.76.0.1"
fails=0
export ACCL_TIMEOUT=600
echo "== accl, 3 hosts x 2 ranks: conformance suite"
$run "$build/bin/accl_conformance" --backend accl --gtest_brief=1 || fails=$((fails + 1))
echo "== accl, 3 hosts x 2 ranks: sub-groups"
$run "$build/bin/accl_conformance" --backend accl --split --gtest_brief=1 || fails=$((fails + 1))
echo "== accl, 3 hosts x 2 ranks: what was chosen (ACCL_DEBUG=INFO)"
log=$(ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT $run "$build/bin/allreduce_example" accl 2>&1)
echo "$log" | grep -E "communicator|algorithms" | head -4
for want in "6 ranks on 3 host(s), 2 on this one" "tcp (eth0 10.76.0." "allreduce: <" "hierarchical(shm+"; do
  echo "$log" | grep -qF "$want" || { echo "FAIL: the INFO log lacks: $want"; fails=$((fails + 1)); }
done
# Shared memory within each namespace host, through the segment, with what
# its set-up probe measured where that ran (the hosts' ranks outnumber the
# machine's cores here, and they measure too).
want='shm \(copy through the segment(\)|[ ;].*\)\)) with ranks'
echo "$log" | grep -qE "$want" || { echo "FAIL: the INFO log lacks: $want"; fails=$((fails + 1)); }
exit $fails
