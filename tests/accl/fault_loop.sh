#!/bin/bash
# Runs the fault suite N times in a row (ACCL_FAULT_REPEAT, default 5): a
# fault test that passes only sometimes fails here. Any failed round fails it.
#   fault_loop.sh ACCL_FAULT_TESTS [GTEST_FILTER]
set -u
bin=$1; filter=${2:-*}
n=${ACCL_FAULT_REPEAT:-5}
case $n in ''|*[!0-9]*|0) echo "ACCL_FAULT_REPEAT='$n': expected a positive number of rounds" >&2; exit 2;; esac
start=$(date +%s)
"$bin" --gtest_filter="$filter" --gtest_repeat="$n" --gtest_brief=1 >fault_loop.log 2>&1
rc=$?
failed=$(grep -c '^\[  FAILED  \].*(' fault_loop.log)
echo "fault loop: $n rounds of '$filter' in $(( $(date +%s) - start )) s, $failed failed test runs (rc=$rc)"
[ "$rc" = 0 ] || grep -B5 -A20 'Failure\|FAILED' fault_loop.log | head -80
exit $rc
