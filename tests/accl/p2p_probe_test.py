#!/usr/bin/env python3
"""The point-to-point probe where a host's ranks share CPUs (ACCL_SHM_CMA=auto).

3 ranks on one CPU (taskset): when the group is made, the local ranks time a
ring of sendrecvs through the shared-memory rings and by single copy at 16 and
32 KiB, and send by single copy from the smallest probed size from which
single copy was faster at every probed size, else from 64 KiB. Checked here
against the probe's own figures, which the INFO log prints: every rank prints
the same figures and verdict (the batches' times are agreed on), the verdict
is the one the printed ratios call for, the group's point-to-point line names
the same size, and sendrecv is right at 4 KiB - 128 KiB. A group made again by
the same processes takes the first one's verdict without measuring. Under
ACCL_SHM_CMA=on or off, and where the ranks have a CPU each, nothing is
probed. Exit 77: skipped.

    p2p_probe_test.py BUILD_DIR
"""
import os
import re
import shutil
import subprocess
import sys

build = sys.argv[1]
run = os.path.join(build, "bin", "accl-run")
perf = os.path.join(build, "bin", "accl-perf")
soak = os.path.join(build, "bin", "accl_soak")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}
PROBES = [16 << 10, 32 << 10]
DEFAULT = 64 << 10
fails = []

if not shutil.which("taskset"):
    print("skip: no taskset to put the ranks on one CPU")
    sys.exit(77)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def size_of(text):
    n, u = text.split()
    return int(n) * UNITS[u]


def job(cma, ranks, cmd, one_cpu=True):
    env = dict(os.environ, ACCL_SHM_CMA=cma, ACCL_DEBUG="INFO", ACCL_DEBUG_SUBSYS="INIT")
    pre = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if one_cpu else []
    p = subprocess.run(pre + [run, "-n", str(ranks)] + cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


PROBE_RE = re.compile(r"INIT: point-to-point probe \(single copy's time / the rings', (\d+) local ranks sharing "
                      r"CPUs\): 16 KiB (\d+\.\d+)x, 32 KiB (\d+\.\d+)x; point-to-point by single copy from "
                      r"(\d+ [KM]iB) \(the probe took \d+\.\d+ ms\)")
EARLIER_RE = re.compile(r"INIT: point-to-point by single copy from (\d+ [KM]iB) \(the point-to-point probe of an "
                        r"earlier group of these processes\)")
P2P_LINE_RE = re.compile(r"point-to-point with ranks [\d,\- ]+ over shared-memory rings of \d+ KiB, single copy "
                         r"from ([^;]+);")


def allowed(ratios):
    # The sizes the rule allows: single copy from the smallest probed size
    # from which its ratio is below 1 at every probed size, else the default;
    # a ratio printed as 1.00 may have been either side of 1.
    outs = set()
    for mask in range(1 << len(ratios)):
        wins = []
        ok = True
        for i, r in enumerate(ratios):
            w = bool(mask >> i & 1)
            if f"{r:.2f}" != "1.00" and w != (r < 1.0):
                ok = False
            wins.append(w)
        if not ok:
            continue
        first = len(wins)
        while first > 0 and wins[first - 1]:
            first -= 1
        outs.add(PROBES[first] if first < len(PROBES) else DEFAULT)
    return outs


# auto, 3 ranks on one CPU: the probe, its verdict, and sendrecv across it.
rc, out = job("auto", 3, [perf, "--backend", "accl", "--op", "sendrecv", "-b", "4K", "-e", "128K", "-f", "2",
                          "-n", "5", "-w", "2"])
print(out[-2500:])
if "process_vm_readv from local rank" in out:
    print("skip: single copy is not permitted between the ranks here")
    sys.exit(77)
check(rc == 0, "auto: the job ran")
probes = PROBE_RE.findall(out)
check(len(probes) == 3, f"auto: every rank prints the probe ({len(probes)} lines)")
check(len({p for p in probes}) == 1, "auto: every rank prints the same figures and verdict")
if probes:
    ranks, r16, r32, verdict = probes[0]
    ratios = [float(r16), float(r32)]
    check(ranks == "3", "auto: the probe names the 3 local ranks")
    check(all(r > 0.01 for r in ratios), f"auto: the ratios are timings: {ratios}")
    want = allowed(ratios)
    check(size_of(verdict) in want, f"auto: single copy from {verdict}, as the ratios {ratios} call for "
                                    f"({sorted(want)})")
    lines = P2P_LINE_RE.findall(out)
    check(lines == [verdict] * 3, f"auto: each rank's point-to-point line names single copy from {verdict}: {lines}")
rows = [l.split() for l in out.splitlines() if re.match(r"^(\[\d\] )?\s+\d+\s+\d+\s+\w+", l)]
check(len(rows) >= 6 and all(r[-1] == "0" for r in rows), f"auto: sendrecv right at 4 KiB - 128 KiB ({len(rows)} rows)")

# Groups made again by the same processes (accl_soak on 4 ranks: the world
# group from two threads per rank, then halves and pairs, other sets of
# processes): each set of processes measures once, and its other groups name
# the verdict of the earlier probe.
rc, out = job("auto", 4, [soak, "--backend", "accl", "--seconds", "2", "--report", "3"])
check(rc == 0 and len(re.findall(r" 0 wrong;", out)) == 4, "auto: accl_soak on 4 ranks sharing a CPU, results right")
world = [m for m in PROBE_RE.findall(out) if m[0] == "4"]
earlier = EARLIER_RE.findall(out)
check(len(world) == 4 and len(set(world)) == 1, f"auto: the world's probe, once per rank ({len(world)} lines)")
check(len(earlier) >= 4 and world and set(earlier) == {world[0][3]},
      f"auto: the world's other groups take its verdict ({len(earlier)} lines: {sorted(set(earlier))})")

# off and on: fixed thresholds, nothing probed.
for cma, size in (("off", None), ("on", "16 KiB")):
    rc, out = job(cma, 3, [perf, "--backend", "accl", "--op", "sendrecv", "-b", "32K", "-e", "32K", "-n", "2",
                           "-w", "1"])
    if cma == "on" and rc != 0 and "ACCL_SHM_CMA=on but process_vm_readv" in out:
        print("skip on: single copy is not permitted here")
        continue
    check(rc == 0, f"{cma}: the job ran")
    check(not PROBE_RE.findall(out) and not EARLIER_RE.findall(out), f"{cma}: no point-to-point probe")
    lines = P2P_LINE_RE.findall(out)
    check(lines == ([size] * 3 if size else []), f"{cma}: point-to-point single copy {size or 'never'}: {lines}")

# A CPU each: no probe (the threshold follows the collectives' probe).
if len(os.sched_getaffinity(0)) >= 2:
    rc, out = job("auto", 2, [perf, "--backend", "accl", "--op", "sendrecv", "-b", "8", "-e", "8", "-n", "1",
                              "-w", "0"], one_cpu=False)
    if "local ranks share" not in out:
        check(rc == 0 and not PROBE_RE.findall(out), "auto, a CPU per rank: no point-to-point probe")

if fails:
    print(f"FAIL: {len(fails)} check(s)")
    sys.exit(1)
print("PASS")
