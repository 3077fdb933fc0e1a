#!/bin/sh
# The mpi backend's deadline on both kinds of collective. Rank 1 of 2 joins an
# 8-byte allreduce 30 s late, with ACCL_TIMEOUT=2s:
#   blocking     (ACCL_MPI_BLOCKING_BYTES default): MPI_Allreduce cannot be
#                interrupted; the guard names the op and aborts the job (MPI_Abort)
#                within a few seconds, long before rank 1 arrives;
#   nonblocking  (ACCL_MPI_BLOCKING_BYTES=0): the op fails with accl::Timeout,
#                which the program catches and prints.
# p2p_wait and p2p_poll: rank 0 receives what rank 1 sends 30 s late, waiting
# on the Work (its thread polls the request) or polling isCompleted() (the
# backend's progress thread polls it); either way the receive fails with
# accl::Timeout at its deadline. p2p_sendrecv: the same receive as half of a
# blocking sendrecv (its send completes), polled on the calling thread: the
# sendrecv fails with accl::Timeout naming both halves. p2p_blocking: the
# receive as a blocking call (RecvOptions::blocking), polled on the calling
# thread before recv() returns: the same Timeout.
# usage: timeout_test.sh MPIEXEC DIAG_DRIVER blocking|nonblocking|p2p_wait|p2p_poll|p2p_sendrecv|p2p_blocking
set -u
mpiexec=$1 driver=$2 mode=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bytes=65536
[ "$mode" = nonblocking ] && bytes=0
case $mode in
  blocking|nonblocking) args="late 30" ;;
  p2p_wait) args="p2plate 30 wait" ;;
  p2p_poll) args="p2plate 30 poll" ;;
  p2p_sendrecv) args="p2plate 30 sendrecv" ;;
  p2p_blocking) args="p2plate 30 blocking" ;;
  *) echo "FAILED: unknown mode $mode (blocking, nonblocking, p2p_wait, p2p_poll, p2p_sendrecv, p2p_blocking)"; exit 1 ;;
esac
start=$(date +%s)
ACCL_TIMEOUT=2s ACCL_MPI_BLOCKING_BYTES=$bytes ACCL_DIAG_BACKEND=mpi ACCL_TRACE_DIR=$tmp \
  timeout 60 "$mpiexec" -n 2 -x ACCL_TIMEOUT -x ACCL_MPI_BLOCKING_BYTES -x ACCL_DIAG_BACKEND -x ACCL_TRACE_DIR \
  "$driver" $args >"$tmp/out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$tmp/out"
echo "exit $rc after $elapsed s"
fail() { echo "FAILED: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung until timeout(1) killed it"
[ "$elapsed" -le 20 ] || fail "the job took $elapsed s; the deadline is 2 s and rank 1 arrives after 30 s"
grep -q "late: done" "$tmp/out" && fail "a rank completed the allreduce"
grep -q "p2plate: done" "$tmp/out" && fail "rank 0 completed the receive"
if [ "$mode" = p2p_sendrecv ]; then
  grep -q "error (Timeout): accl rank 0/2 mpi: sendrecv: send to rank 1 tag 6, recv from rank 1 tag 5: timed out after 2000 ms; some rank did not take part" "$tmp/out" ||
    fail "rank 0 does not catch an accl::Timeout naming both halves of the sendrecv, its peers, tags and deadline"
elif [ "${mode#p2p_}" != "$mode" ]; then
  grep -q "error (Timeout): accl rank 0/2 mpi: recv from rank 1 tag 5: timed out after 2000 ms; some rank did not take part" "$tmp/out" ||
    fail "rank 0 does not catch an accl::Timeout naming the receive, its peer, tag and deadline"
elif [ "$mode" = blocking ]; then
  grep -q "accl rank 0/2 mpi: allreduce #0 (2 elements): timed out after 2000 ms in MPI_Allreduce; some rank did not take part.*aborted (MPI_Abort, exit status 3)" "$tmp/out" ||
    fail "rank 0 does not name the op, its deadline and MPI_Allreduce before the abort"
  # mpirun passes on the guard's MPI_Abort status (its own banner about the
  # abort can be lost when the machine is loaded, so the status is what counts).
  [ "$rc" -eq 3 ] || fail "exit status $rc, not the guard's MPI_Abort status 3"
  ls "$tmp"/accl-trace-*.json >/dev/null 2>&1 || fail "no flight recorder dump in ACCL_TRACE_DIR"
  grep -q 'timed out after 2000 ms in MPI_Allreduce' "$tmp"/accl-trace-*.json || fail "the dump lacks the failure"
else
  grep -q "error (Timeout): accl rank 0/2 mpi: allreduce #0 (2 elements): timed out after 2000 ms; some rank did not take part" "$tmp/out" ||
    fail "rank 0 does not catch an accl::Timeout naming the op"
fi
echo "PASSED ($mode)"
