#!/bin/bash
# Two local ranks that the scheduler runs on one CPU after their group was
# made, against the same ranks with a CPU each, and against ranks that share
# one CPU from the start (the group sees it in their affinity masks). Prints
# accl-perf's time per op (blocking, average over ranks) for each case:
#   free     the scheduler's choice (a CPU each on an idle host)
#   moved    every thread of both ranks pinned to the first allowed CPU
#            PIN_AFTER seconds (0.1) after the launch, while the ranks run
#            their untimed warm-up: the group was made with a CPU per rank
#            (set-up and the first ops took 0.07 s here), and the warm-up lasts
#            0.25 s or more where the ranks run free, so that every timed op
#            runs pinned
#   shared   both ranks started on that one CPU
#   bench/cpu_sharing.sh [BUILD] [OPS]     (BUILD: build, OPS: allreduce,sendrecv)
set -euo pipefail
build=${1:-build}
ops=${2:-allreduce,sendrecv}
pin_after=${PIN_AFTER:-0.1}
run=$build/bin/accl-run perf=$build/bin/accl-perf
[ -x "$run" ] && [ -x "$perf" ] || { echo "no $run or $perf: build first (scripts/build.sh)" >&2; exit 2; }
cpu=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# timed and warm-up iterations per size (the warm-up: 0.25 s or more free)
iters() { case $1 in 8) echo 100000 ;; 2048) echo 50000 ;; *) echo 4000 ;; esac; }
warmup() { case $1 in 8) echo 1000000 ;; 2048) echo 500000 ;; *) echo 10000 ;; esac; }

one() {  # case op size -> time in us
  local mode=$1 op=$2 size=$3 pre=() n
  n=$(iters "$size")
  [ "$mode" = shared ] && pre=(taskset -c "$cpu")
  "${pre[@]}" "$run" -n 2 "$perf" --backend accl --op "$op" -b "$size" -e "$size" -n "$n" -w "$(warmup "$size")" -c 0 -z 1 \
    >"$tmp/out" 2>&1 &
  local bg=$!
  if [ "$mode" = moved ]; then
    sleep "$pin_after"
    for p in $(pgrep -P "$bg" -f accl-perf || true); do taskset -a -p -c "$cpu" "$p" >/dev/null || true; done
  fi
  wait "$bg" || { echo "accl-perf failed:" >&2; tail -5 "$tmp/out" >&2; exit 1; }
  awk -v s="$size" '$1 ~ /^\[0\]$/ && $2 == s {print $7; exit}' "$tmp/out"
}

printf '%-10s %8s %10s %10s %10s %8s\n' op bytes free_us moved_us shared_us moved/free
for op in ${ops//,/ }; do
  for size in 8 2048 131072; do
    f=$(one free "$op" "$size"); m=$(one moved "$op" "$size"); s=$(one shared "$op" "$size")
    printf '%-10s %8s %10s %10s %10s %8.1f\n' "$op" "$size" "$f" "$m" "$s" "$(awk -v m="$m" -v f="$f" 'BEGIN {print m / f}')"
  done
done
