#!/usr/bin/env bash
# Behaviour of accl-run: environment, output prefixes, failure propagation,
# signal forwarding and escalation. Usage: accl_run_test.sh PATH/TO/accl-run
set -u
RUN=${1:?path to accl-run}
fails=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. torchrun environment and rank prefixes
"$RUN" -n 3 sh -c 'echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR ${MASTER_PORT:+port}"' >"$tmp/out" 2>&1
rc=$?
check "all ranks exit 0 -> exit 0" $rc
for r in 0 1 2; do
  grep -qx "\[$r\] env $r 3 $r 3 127.0.0.1 port" "$tmp/out"; check "rank $r sees the torchrun environment" $?
done

# 2. a failing rank stops the others and its exit code is returned
start=$(date +%s)
"$RUN" -n 3 sh -c 'if [ "$RANK" = 1 ]; then sleep 0.3; exit 3; fi; sleep 60' >"$tmp/out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 3 ]; check "exit code of the failed rank (got $rc)" $?
grep -q "rank 1 (pid [0-9]*) exited with code 3; stopping the other ranks" "$tmp/out"; check "names the failed rank and how" $?
[ $took -lt 20 ]; check "others stopped promptly (${took}s)" $?

# 3. a rank killed by a signal
"$RUN" -n 2 sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; sleep 60' >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 137 ]; check "killed rank -> 128+9 (got $rc)" $?
grep -q "rank 0 (pid [0-9]*) was killed by signal 9" "$tmp/out"; check "names the signal" $?

# 4. SIGTERM to accl-run is forwarded to every rank
"$RUN" -n 2 sh -c 'trap "echo got-term; exit 0" TERM; echo ready; while true; do sleep 0.1; done' >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 50); do [ "$(grep -c ready "$tmp/out")" -ge 2 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ]; check "exit 128+SIGTERM after forwarding (got $rc)" $?
[ "$(grep -c 'got-term' "$tmp/out")" -eq 2 ]; check "both ranks received SIGTERM" $?

# 4b. SIGUSR1 to accl-run reaches every rank and the job goes on (flight recorder dumps)
"$RUN" -n 2 sh -c 'n=0; trap "n=\$((n+1)); echo got-usr1" USR1; echo ready; while [ $n -lt 1 ]; do sleep 0.1; done; sleep 0.3; echo still-running' >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 50); do [ "$(grep -c ready "$tmp/out")" -ge 2 ] && break; sleep 0.1; done
kill -USR1 $pid
wait $pid
rc=$?
[ $rc -eq 0 ]; check "SIGUSR1 does not stop the job (got $rc)" $?
[ "$(grep -c 'got-usr1' "$tmp/out")" -eq 2 ] && [ "$(grep -c 'still-running' "$tmp/out")" -eq 2 ]
check "both ranks received SIGUSR1 and went on" $?

# 5. ranks that ignore SIGTERM are killed after the grace period
start=$(date +%s)
# (rank 0 fails only once rank 1 has installed its trap)
"$RUN" -n 2 --grace 1 sh -c 'trap "" TERM; if [ "$RANK" = 0 ]; then while [ ! -e "$0/trapped" ]; do sleep 0.05; done; exit 5; fi; touch "$0/trapped"; while true; do sleep 0.1; done' "$tmp" >"$tmp/out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 5 ]; check "first failure's code kept (got $rc)" $?
grep -q "sending SIGKILL" "$tmp/out"; check "escalates to SIGKILL" $?
[ $took -lt 15 ]; check "escalation is bounded (${took}s)" $?

# 6. usage errors
"$RUN" sh -c true >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q -- "-n N is required" "$tmp/out"; check "missing -n is a usage error" $?
"$RUN" -n 0 true >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "Value 0 not in range 1 to 1024" "$tmp/out"; check "invalid -n names accepted values" $?
"$RUN" -n 1 /nonexistent/program >"$tmp/out" 2>&1
[ $? -eq 127 ] && grep -q "cannot execute" "$tmp/out"; check "missing program -> 127 with a message" $?

# 7. partial last lines are not lost
"$RUN" -n 1 printf 'no newline' >"$tmp/out" 2>&1
grep -qx "\[0\] no newline" "$tmp/out"; check "unterminated output line is flushed" $?

# 8. standalone store server
"$RUN" --store-server 0 >"$tmp/srv" 2>&1 &
spid=$!
for _ in $(seq 50); do grep -q "listening on port" "$tmp/srv" && break; sleep 0.1; done
grep -q "listening on port [0-9]" "$tmp/srv"; check "store server prints its port" $?
kill -TERM $spid; wait $spid; rc=$?
[ $rc -eq 0 ] && grep -q "store server stopping" "$tmp/srv"; check "store server stops cleanly on SIGTERM" $?

[ $fails -eq 0 ] && echo "all accl-run checks passed" || echo "$fails accl-run checks failed"
exit $fails
