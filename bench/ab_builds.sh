#!/bin/bash
# Two builds side by side in one run: accl-perf of build A and of build B,
# alternating (A B A B ...), same flags; prints per size the median time of
# each and the ratio B/A. For checking that a change is within noise.
#   bench/ab_builds.sh BUILD_A BUILD_B [ROUNDS] -- ACCL-PERF FLAGS...
# Environment (ACCL_TRANSPORTS=tcp, ...) applies to both. Example, the
# network transport with every rank its own host:
#   ACCL_TRANSPORTS=tcp bench/ab_builds.sh old-build build 3 -- --op allreduce -b 8 -e 64M -n 20
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); shift 2
rounds=3
if [ "${1:-}" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
np=${AB_RANKS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 0; i < rounds; i++)); do
  for side in A B; do
    dir=$A; [ $side = B ] && dir=$B
    "$dir/bin/accl-run" -n "$np" "$dir/bin/accl-perf" --backend accl "$@" -J "$tmp/$side.$i.json" >"$tmp/$side.$i.log" 2>&1 ||
      { echo "accl-perf of $side failed:"; tail -20 "$tmp/$side.$i.log"; exit 1; }
  done
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def load(side):
    runs = [json.load(open(f"{tmp}/{side}.{i}.json")) for i in range(rounds)]
    wrong = sum(r["wrong"] for r in runs)
    sizes = [x["size"] for x in runs[0]["results"]]
    t = {s: [] for s in sizes}
    for r in runs:
        for x in r["results"]:
            t[x["size"]].append(x["out_of_place"]["time_us"])
    return runs[0], t, wrong
a, ta, wa = load("A")
_, tb, wb = load("B")
print(f"{a['op']} {a['dtype']}, {a['ranks']} ranks, {rounds} rounds each (alternating); wrong: A {wa}, B {wb}")
print(f"{'bytes':>12} {'A us':>10} {'B us':>10} {'B/A':>6}   (medians; per-round B/A)")
for s in ta:
    ma, mb = statistics.median(ta[s]), statistics.median(tb[s])
    per = " ".join(f"{b / x:.2f}" for x, b in zip(ta[s], tb[s]))
    print(f"{s:>12} {ma:>10.1f} {mb:>10.1f} {mb / ma:>6.2f}   {per}")
PY
