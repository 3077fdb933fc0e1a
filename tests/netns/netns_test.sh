#!/usr/bin/env bash
# Several hosts on one machine: 2 network namespaces x 2 ranks, TCP between
# them. Runs part of the conformance suite across the hosts with the gloo
# backend (accl-run --netns) and the mpi backend (mpirun through namespaces,
# btl self,tcp). Creates and removes its own namespaces. Exit 77 = skipped.
#   netns_test.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}
src=${2:?source dir}
export ACCL_NETNS_PREFIX=acclt ACCL_NETNS_SUBNET=10.78.0
. "$(dirname "$0")/lib.sh"
netns_hosts_up "$src" 2
filter='*allreduce_float32*:*allreduce_int64*:*alltoallv_*:*allgatherv_bfloat16*:*reduce_scatter_float16*:*PointToPoint*:*Barrier*:*Async*'
fails=0
echo "== gloo, 2 hosts x 2 ranks"
ACCL_TIMEOUT=300 "$build/bin/accl-run" -n 4 --netns acclt0,acclt1 --master-addr 10.78.0.1 \
  "$build/bin/accl_conformance" --backend gloo --gtest_filter="$filter" --gtest_brief=1 || fails=$((fails + 1))
if [ -x "$build/lib/libaccl-backend-mpi.so" ] || [ -e "$build/lib/libaccl-backend-mpi.so" ]; then
  echo "== mpi, 2 hosts x 2 ranks (btl self,tcp)"
  # Under ASan (scripts/test.sh --sanitize address), no leak check for ranks under
  # mpirun: Open MPI unloads its components at exit, leaving unattributable reports.
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" ACCL_TIMEOUT=300 "$src/bench/netns-mpirun" 4 acclt0:2,acclt1:2 10.78.0 \
    "$build/bin/accl_conformance" --backend mpi --gtest_filter="$filter" --gtest_brief=1 || fails=$((fails + 1))
fi
exit $fails
