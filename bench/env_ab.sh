#!/bin/bash
# One build, two settings side by side: accl-perf with environment A and with
# environment B, alternating (A B A B ...), same flags; prints per size the
# median time of each and the ratio B/A. For the cost of a feature that a
# variable turns on, e.g. the flight recorder:
#   bench/env_ab.sh build ACCL_TRACE_BUFFER=0 ACCL_TRACE_BUFFER=2000 7 -- --op allreduce -b 8 -e 8 -n 20000
# AB_RANKS (2) ranks; other environment (ACCL_TRANSPORTS=tcp, ...) applies to both.
set -euo pipefail
build=$(realpath "$1"); envA=$2; envB=$3; shift 3
rounds=5
if [ "${1:-}" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
np=${AB_RANKS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 0; i < rounds; i++)); do
  for side in A B; do
    e=$envA; [ $side = B ] && e=$envB
    env $e "$build/bin/accl-run" -n "$np" "$build/bin/accl-perf" --backend accl "$@" -J "$tmp/$side.$i.json" \
      >"$tmp/$side.$i.log" 2>&1 || { echo "accl-perf with $e failed:"; tail -20 "$tmp/$side.$i.log"; exit 1; }
  done
done
python3 - "$tmp" "$rounds" "$envA" "$envB" <<'PY'
import json, statistics, sys
tmp, rounds, ea, eb = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(side):
    return [json.load(open(f"{tmp}/{side}.{i}.json")) for i in range(rounds)]
A, B = load("A"), load("B")
print(f"{A[0]['op']} {A[0]['dtype']}, {A[0]['ranks']} ranks, {rounds} rounds each (alternating); A: {ea}, B: {eb}")
print(f"{'bytes':>12} {'A us':>10} {'B us':>10} {'B/A':>6}   (medians; per-round B/A)")
for k, row in enumerate(A[0]["results"]):
    ta = [r["results"][k]["out_of_place"]["time_us"] for r in A]
    tb = [r["results"][k]["out_of_place"]["time_us"] for r in B]
    per = " ".join(f"{b / a:.2f}" for a, b in zip(ta, tb))
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"{row['size']:>12} {ma:>10.2f} {mb:>10.2f} {mb / ma:>6.3f}   {per}")
PY
