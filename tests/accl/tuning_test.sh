#!/usr/bin/env bash
# The cost model end to end: accl-perf --calibrate writes a tuning file;
# accl-info --plan reads it; 4 ranks that are each their own host
# (ACCL_HOSTID per rank: every op goes between "hosts" over TCP) run ops with
# ACCL_TUNING_FILE, chosen by the model, results checked; a malformed file
# fails the job with an error that names it, in bounded time.
#   tuning_test.sh BUILD_DIR
set -u
b=${1:?build dir}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export MASTER_ADDR=127.0.0.1

echo "== calibrate (2 ranks)"
timeout 120 "$b/bin/accl-run" -n 2 "$b/bin/accl-perf" --backend accl --calibrate "$tmp/t.json" > "$tmp/cal.log" 2>&1 ||
  fail "accl-perf --calibrate exited $?: $(tail -5 "$tmp/cal.log")"
cat "$tmp/cal.log"
python3 - "$tmp/t.json" <<'PY' || fail "the tuning file is not what the backend reads"
import json, sys
j = json.load(open(sys.argv[1]))
l = j["link"]
assert j["version"] == 1 and j["transport"] == "tcp", j
assert l["alpha_us"] > 0 and l["beta_us_per_byte"] > 0 and l["gamma_us_per_byte"] > 0 and l["overhead_us"] >= 0, l
pp = j["measured"]["link"]["ping_pong"]
assert j["local"]["beta_us_per_byte"] > 0, j  # one host: the same link
assert [p["bytes"] for p in pp] == sorted(p["bytes"] for p in pp) and all(p["one_way_us"] > 0 for p in pp), pp
# One-way time grows with size: 16 MiB takes longer than 8 B.
assert pp[-1]["one_way_us"] > pp[0]["one_way_us"], pp
# Both ranks share the host: the segment's allreduce was measured, and 16 MiB
# takes longer than 8 B there too.
s, seg = j["segment"], j["measured"]["segment"]["allreduce"]
assert j["segment_ranks"] == 2 and s["alpha_us"] > 0 and s["beta_us_per_byte"] > 0, j
assert seg[-1]["allreduce_us"] > seg[0]["allreduce_us"], seg
# The model reads the segment's time at each size: the curve is the measured points (8 B - 64 MiB).
cv = j["segment_curve"]
assert [p["bytes"] for p in cv] == [p["bytes"] for p in seg] and cv[-1]["bytes"] == 64 << 20, (cv, seg)
assert [p["allreduce_us"] for p in cv] == [p["allreduce_us"] for p in seg], (cv, seg)
# The CPUs: one machine, one host of 2 ranks: all the machine's CPUs are the
# host's; with a CPU per rank the per-message CPU figures are the overheads.
c, mc = j["cpu"], j["measured"]["cpu"]
assert mc["machine_ranks"] == 2 and mc["machine_hosts"] == 1 and mc["machine_cpus"] >= 1, mc
assert c["machine_cpus"] == mc["machine_cpus"] and c["hosts_per_machine"] == 1, (c, mc)
if mc["machine_cpus"] >= 2:
    assert c["us_per_message"] == l["overhead_us"] and c["us_per_local_message"] == j["local"]["overhead_us"], (c, j)
print("tuning file ok:", l, "segment:", s, "cpu:", c)
PY

echo "== accl-info --plan with it"
ACCL_TUNING_FILE=$tmp/t.json "$b/bin/accl-info" --plan --ranks 4 --hosts 4 > "$tmp/plan.log" 2>&1 || fail "accl-info --plan exited $?"
grep -q "Selection: by this model (ACCL_TUNING_FILE)" "$tmp/plan.log" || fail "--plan does not say the model chooses"
grep -qE "^allreduce +8 +recursive_doubling" "$tmp/plan.log" || fail "--plan: 8 B allreduce between 4 hosts should be recursive doubling"
head -12 "$tmp/plan.log"
ACCL_TUNING_FILE=$tmp/t.json "$b/bin/accl-info" --plan --ranks 2 --hosts 1 > "$tmp/plan1.log" 2>&1 || fail "accl-info --plan (one host) exited $?"
grep -q "shared segment: .*measured with 2 ranks" "$tmp/plan1.log" || fail "--plan does not show the measured segment"
grep -qE "shared segment by size \(its measured curve, 6 points\): GB/s of the vector at 1 MiB [0-9.]+, 16 MiB" "$tmp/plan1.log" ||
  fail "--plan does not show the segment's rate by size"
grep -qE "^allreduce +8 +shm " "$tmp/plan1.log" || fail "--plan: one host should run on the segment"

echo "== calibrate 2 hosts x 2 ranks (ACCL_HOSTID): the link also with both pairs crossing it at once"
timeout 300 "$b/bin/accl-run" -n 4 sh -c 'ACCL_HOSTID=h$((RANK / 2)) exec "$0" "$@"' \
  "$b/bin/accl-perf" --backend accl --calibrate "$tmp/t4.json" > "$tmp/cal4.log" 2>&1 ||
  fail "accl-perf --calibrate (2 x 2) exited $?: $(tail -5 "$tmp/cal4.log")"
grep -E "^\[0\] (between|within|#)" "$tmp/cal4.log"
python3 - "$tmp/t4.json" <<'PY' || fail "the 2 x 2 tuning file lacks the shared link"
import json, sys
j = json.load(open(sys.argv[1]))
s, m = j["link_shared"], j["measured"]["link_shared"]
assert j["shared_ranks"] == 2 and m["pairs"] == 2, j
assert s["alpha_us"] > 0 and s["beta_us_per_byte"] > 0 and s["overhead_us"] == j["link"]["overhead_us"], s
# Rank 0 measured with the first rank of the other host (rank 2), rank 1 with rank 3 at the same time.
assert m["between_ranks"] == [0, 2], m
pp = m["ping_pong"]
assert pp[-1]["one_way_us"] > pp[0]["one_way_us"] > 0, pp
# Two hosts of one machine share its CPUs; where their 4 ranks outnumber
# them, what a message costs is measured (CPU time), else the overheads stand.
c, mc = j["cpu"], j["measured"]["cpu"]
assert mc["machine_ranks"] == 4 and mc["machine_hosts"] == 2, mc
assert c["machine_cpus"] == mc["machine_cpus"] and c["hosts_per_machine"] == 2, (c, mc)
if mc["machine_cpus"] < 4:
    assert "outnumber" in mc["method"] and c["us_per_message"] > 0 and c["us_per_local_message"] > 0, (c, mc)
else:
    assert c["us_per_message"] == j["link"]["overhead_us"], (c, j["link"])
print("shared link ok:", s, "cpu:", c)
PY
ACCL_TUNING_FILE=$tmp/t4.json "$b/bin/accl-info" --plan --ranks 4 --hosts 2 > "$tmp/plan4.log" 2>&1 || fail "accl-info --plan (2 x 2) exited $?"
for op in allgather reduce_scatter; do
  grep -qE "^$op +[0-9]+ +hierarchical\(shm\+(direct|ring|recursive_doubling)\) " "$tmp/plan4.log" ||
    fail "--plan (2 x 2) has no hierarchical $op rows: $(head -20 "$tmp/plan4.log")"
done
grep -q "between hosts with 2 pairs crossing at once" "$tmp/plan4.log" || fail "--plan (2 x 2) does not show the shared link"

echo "== 4 ranks, each its own host, ops chosen by the model, results checked"
for op in allreduce broadcast allgather reduce_scatter; do
  ACCL_TUNING_FILE=$tmp/t.json ACCL_DEBUG=INFO ACCL_DEBUG_SUBSYS=INIT timeout 300 "$b/bin/accl-run" -n 4 \
    sh -c 'ACCL_HOSTID=h$RANK exec "$0" "$@"' "$b/bin/accl-perf" --backend accl --op $op -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 \
    > "$tmp/$op.log" 2>&1 || fail "$op exited $?: $(tail -3 "$tmp/$op.log")"
  grep -q "chosen by the cost model of tuning file $tmp/t.json" "$tmp/$op.log" || fail "$op: the log does not say the model chose"
  grep -q "Out of bounds values : 0 OK" "$tmp/$op.log" || fail "$op: wrong results: $(grep -E '^\[0\] +[0-9]' "$tmp/$op.log")"
  echo "$op: $(grep -c -E '^\[0\] +[0-9]' "$tmp/$op.log") sizes, $(grep -o 'Out of bounds values : [0-9]* [A-Z]*' "$tmp/$op.log")"
done

echo "== 2 hosts x 2 ranks, allgather and reduce_scatter along the rails chosen by the model, results checked"
for op in allgather reduce_scatter; do
  ACCL_TUNING_FILE=$tmp/t4.json timeout 300 "$b/bin/accl-run" -n 4 sh -c 'ACCL_HOSTID=h$((RANK / 2)) exec "$0" "$@"' \
    "$b/bin/accl-perf" --backend accl --op $op -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 > "$tmp/$op.4.log" 2>&1 ||
    fail "$op (2 x 2) exited $?: $(tail -3 "$tmp/$op.4.log")"
  grep -q "Out of bounds values : 0 OK" "$tmp/$op.4.log" || fail "$op (2 x 2): wrong results: $(grep -E '^\[0\] +[0-9]' "$tmp/$op.4.log")"
  echo "$op (2 x 2): $(grep -c -E '^\[0\] +[0-9]' "$tmp/$op.4.log") sizes, $(grep -o 'Out of bounds values : [0-9]* [A-Z]*' "$tmp/$op.4.log")"
done

echo "== a malformed tuning file fails every rank, naming it"
echo '{"version": 1, "link": {"alpha_us": "fast"}}' > "$tmp/bad.json"
start=$(date +%s)
ACCL_TUNING_FILE=$tmp/bad.json timeout 60 "$b/bin/accl-run" -n 2 "$b/bin/accl-perf" --backend accl -b 8 -e 8 > "$tmp/bad.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a malformed file: exit $rc (expected a failure, not success or a hang)"
# The first rank to fail stops the job (accl-run), so a slower rank may be
# stopped before it reads the file: one rank's error must name it.
grep -q "^\[[01]\] .*ACCL_TUNING_FILE: tuning file $tmp/bad.json: link.alpha_us is missing or not a number" "$tmp/bad.log" ||
  fail "no rank names the file and field: $(cat "$tmp/bad.log")"
echo "malformed file: exit $rc after $(( $(date +%s) - start )) s"
[ "$fails" -eq 0 ] && echo "all checks passed"
exit "$fails"
