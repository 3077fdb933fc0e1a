#!/usr/bin/env bash
# Every rank of a shared-memory job SIGKILLed (no destructor runs): nothing of
# the job is left in /dev/shm, because the segment is unlinked as soon as every
# local rank has mapped it. Rounds kill at different moments: while the ranks
# run ops, and right after start (set-up). Usage: shm_sigkill_test.sh ACCL_RUN ACCL_PERF [ROUNDS]
set -uo pipefail
RUN=$1 PERF=$2 ROUNDS=${3:-6}
fail() { echo "FAIL: $*"; exit 1; }
before=$(ls /dev/shm | grep '^accl-' | sort)
for r in $(seq 1 "$ROUNDS"); do
  log=$(mktemp)
  # Its own process group, so that every rank can be killed at once.
  setsid "$RUN" -n 4 stdbuf -oL "$PERF" --backend accl -b 32M -e 32M -n 100000 -w 0 -c 0 >"$log" 2>&1 &
  launcher=$!
  if [ $((r % 2)) -eq 0 ]; then
    sleep "0.$((r * 7 % 10))$((r % 10))"  # early: 0.0x-0.9x s, in rendezvous or segment set-up
    what="at $(sed -n '$=' "$log" 2>/dev/null || echo 0) lines of output (early)"
  else
    # Up to 60 s: an instrumented build (scripts/test.sh --sanitize) starts slowly.
    for _ in $(seq 1 1200); do grep -q "float32" "$log" && break; kill -0 "$launcher" 2>/dev/null || break; sleep 0.05; done
    grep -q "float32" "$log" || { cat "$log"; kill -9 -- -"$launcher"; fail "the job did not start"; }
    what="while running ops"
  fi
  kill -9 -- -"$launcher" 2>/dev/null
  wait "$launcher" 2>/dev/null
  sleep 0.2
  after=$(ls /dev/shm | grep '^accl-' | sort)
  left=$(comm -13 <(echo "$before") <(echo "$after"))
  echo "round $r: every rank SIGKILLed $what; left in /dev/shm: ${left:-nothing}"
  [ -z "$left" ] || { rm -f $(echo "$left" | sed 's|^|/dev/shm/|'); fail "segments left after SIGKILL: $left"; }
  rm -f "$log"
done
echo "PASS: $ROUNDS rounds, nothing left in /dev/shm"
