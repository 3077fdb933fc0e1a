#!/usr/bin/env bash
# A 2-rank job on a host whose /dev/shm (1 MiB here, in a private mount
# namespace) cannot hold the shared segment: every rank fails at set-up with
# an error that gives the size needed and the way out, none dies of SIGBUS.
set -uo pipefail
RUN=$1 PERF=$2
[ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null || { echo "SKIP: needs root and unshare"; exit 77; }
out=$(unshare -m bash -c "mount -t tmpfs -o size=1m accl-small-shm /dev/shm &&
  '$RUN' -n 2 '$PERF' --backend accl -b 8 -e 8 -n 1 -w 0" 2>&1)
rc=$?
echo "$out"
[ $rc -ne 0 ] || { echo "FAIL: the job succeeded on a 1 MiB /dev/shm"; exit 1; }
echo "$out" | grep -q "signal" && { echo "FAIL: a rank died of a signal"; exit 1; }
echo "$out" | grep -q "cannot reserve [0-9]* KiB of shared memory for 2 ranks on this host" || { echo "FAIL: no size in the error"; exit 1; }
echo "$out" | grep -q "/dev/shm has [0-9]* KiB free" || { echo "FAIL: the free space is not given"; exit 1; }
echo "$out" | grep -q -- "--shm-size" || { echo "FAIL: the way out is not given"; exit 1; }
echo "PASS"
