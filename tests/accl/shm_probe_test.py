#!/usr/bin/env python3
"""ACCL_SHM_CMA on 2 ranks of one host: what the shared segment says it chose.

auto: with a CPU per rank, the group times single copy (process_vm_readv)
against the segment's slots at 64 KiB - 1 MiB when it is made and takes single
copy for the bands where it was faster. Checked here against the probe's own
figures, which the INFO log prints: the bands named are exactly those whose
ratio is below 1 (size S decides [S, 2S), the first also [S/2, S)), both ranks
name the same, and every op of accl-perf across the bands gives the right
result. off and on name their fixed paths. Exit 77: skipped.

    shm_probe_test.py BUILD_DIR
"""
import os
import re
import subprocess
import sys

build = sys.argv[1]
run = os.path.join(build, "bin", "accl-run")
perf = os.path.join(build, "bin", "accl-perf")
PROBES = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
fails = []


def size_text(b):
    for u in ("GiB", "MiB", "KiB"):
        if b >= UNITS[u] and b % UNITS[u] == 0:
            return f"{b // UNITS[u]} {u}"
    return f"{b} B"


def job(cma, *args):
    env = dict(os.environ, ACCL_SHM_CMA=cma, ACCL_DEBUG="INFO", ACCL_DEBUG_SUBSYS="INIT")
    p = subprocess.run([run, "-n", "2", perf, "--backend", "accl", *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def shm_descriptions(out):
    # "... communicator: 2 ranks on 1 host(s), 2 on this one; shm (DESC) with ranks 1; ..."
    return re.findall(r"communicator: .*?; shm \((.*)\) with ranks \d", out)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def wrong_cells(out):
    # accl-perf's rows: size count type redop root time algbw busbw #wrong
    rows = [l.split() for l in out.splitlines() if re.match(r"^(\[\d\] )?\s+\d+\s+\d+\s+\w+", l)]
    return [r for r in rows if r[-1] != "0"], len(rows)


# auto: the probe, and ops across its bands.
ops = ["broadcast", "allgather", "alltoall", "gather", "scatter", "reduce"]
rc, out = job("auto", "--op", "broadcast", "-b", "16K", "-e", "4M", "-f", "2", "-n", "3", "-w", "1")
print(out[-3000:])
check(rc == 0, "auto: the job ran")
descs = shm_descriptions(out)
check(len(descs) == 2, "auto: both ranks describe the segment")
check(len(set(descs)) == 1, "auto: both ranks name the same choice")
desc = descs[0] if descs else ""
if "share" in out and "CPUs" in out and "faster at start-up" not in desc:
    # Fewer CPUs than ranks: nothing is measured (waits yield; the slots stay).
    check(desc == "copy through the segment", "auto, ranks sharing CPUs: the segment, no probe")
elif "process_vm_readv from local rank" in out:
    check(desc == "copy through the segment", "auto, single copy not permitted: the segment")
else:
    m = re.search(r"faster at start-up:((?: \d+ [KM]iB \d+\.\d+x)+) the slots' time", desc)
    check(m is not None, "auto: the probe's ratios are given")
    if m:
        pairs = re.findall(r"(\d+) ([KM]iB) (\d+\.\d+)x", m.group(1))
        sizes = [int(n) * UNITS[u] for n, u, _ in pairs]
        ratios = [float(r) for _, _, r in pairs]
        check(sizes == PROBES, "auto: probed at 64 KiB - 1 MiB: " + ", ".join(size_text(s) for s in sizes))
        check(all(0.05 < r < 20 for r in ratios), f"auto: ratios are timings, not placeholders: {ratios}")
        # The bands the ratios call for, merged, as the description writes them.
        bands = []
        for i, (s, r) in enumerate(zip(sizes, ratios)):
            if r >= 1.0:
                continue
            lo, hi = (s // 2 if i == 0 else s), 2 * s
            if bands and bands[-1][1] == lo:
                bands[-1][1] = hi
            else:
                bands.append([lo, hi])
        if bands:
            want = ", ".join(f"{size_text(lo)} - {size_text(hi)}" for lo, hi in bands)
            check(f"scatter and reduce of {want} (faster at start-up:" in desc,
                  f"auto: single copy named for exactly the bands where it was faster ({want})")
        else:
            check(desc.startswith("copy through the segment (single copy was not faster at start-up:"),
                  "auto: no band was faster, the segment throughout")
    bad, n = wrong_cells(out)
    check(n > 0 and not bad, f"auto: broadcast right at 16 KiB - 4 MiB ({n} rows)")
    for op in ops[1:]:
        rc, o = job("auto", "--op", op, "-b", "16K", "-e", "4M", "-f", "2", "-n", "3", "-w", "1")
        bad, n = wrong_cells(o)
        check(rc == 0 and n > 0 and not bad, f"auto: {op} right at 16 KiB - 4 MiB ({n} rows)")

# off and on: fixed paths, nothing measured.
rc, out = job("off", "-b", "8", "-e", "8", "-n", "1", "-w", "0")
check(rc == 0 and shm_descriptions(out) == ["copy through the segment"] * 2, "off: the segment, no probe")
rc, out = job("on", "-b", "8", "-e", "8", "-n", "1", "-w", "0")
if rc != 0 and "ACCL_SHM_CMA=on but process_vm_readv" in out:
    print("skip on: single copy is not permitted here")
else:
    check(rc == 0 and shm_descriptions(out) == ["single-copy process_vm_readv"] * 2, "on: single copy, no probe")

if fails:
    print(f"FAIL: {len(fails)} check(s)")
    sys.exit(1)
print("PASS")
