#!/bin/bash
# Two settings side by side in one run: accl-perf of build A with environment
# AB_ENV_A and of build B with AB_ENV_B, alternating (A B A B ...), same
# flags; prints per size the median time of each and the ratio B/A.
#   bench/ab_builds.sh BUILD_A BUILD_B [ROUNDS] -- ACCL-PERF FLAGS...
# Two builds, for checking that a change is within noise (the network
# transport with every rank its own host):
#   ACCL_TRANSPORTS=tcp bench/ab_builds.sh old-build build 3 -- --op allreduce -b 8 -e 64M -n 20
# One build, two settings, for the cost of what a variable turns on (the
# flight recorder):
#   AB_ENV_A=ACCL_TRACE_BUFFER=0 AB_ENV_B=ACCL_TRACE_BUFFER=2000 bench/ab_builds.sh build build 9 -- -b 8 -e 8 -n 20000
# AB_ENV_* hold space-separated NAME=VALUE pairs; other environment applies to
# both sides. AB_RANKS (2) ranks.
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
    dir=$A e=${AB_ENV_A:-}
    [ $side = B ] && dir=$B e=${AB_ENV_B:-}
    # shellcheck disable=SC2086  # e is a list of NAME=VALUE words
    env $e "$dir/bin/accl-run" -n "$np" "$dir/bin/accl-perf" --backend accl "$@" -J "$tmp/$side.$i.json" \
      >"$tmp/$side.$i.log" 2>&1 || { echo "accl-perf of $side ($e) failed:"; tail -20 "$tmp/$side.$i.log"; exit 1; }
  done
done
python3 - "$tmp" "$rounds" "${AB_ENV_A:-}" "${AB_ENV_B:-}" <<'PY'
import json, statistics, sys
tmp, rounds, ea, eb = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
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
if ea or eb:
    print(f"A: {ea or '(no extra environment)'}; B: {eb or '(no extra environment)'}")
print(f"{'bytes':>12} {'A us':>10} {'B us':>10} {'B/A':>6}   (medians; per-round B/A)")
for s in ta:
    ma, mb = statistics.median(ta[s]), statistics.median(tb[s])
    per = " ".join(f"{b / x:.2f}" for x, b in zip(ta[s], tb[s]))
    print(f"{s:>12} {ma:>10.2f} {mb:>10.2f} {mb / ma:>6.3f}   {per}")
PY
