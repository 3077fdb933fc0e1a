#!/usr/bin/env python3
"""accl-memcpy-bench: the default rows that bench/compare.py and bench/limits_check.py read, the
--cross-core rows (each message checked by its reader, the rates consistent with the times), and
clear errors for bad input.

    memcpy_bench_test.py PATH-TO-accl-memcpy-bench
"""
import os
import subprocess
import sys


def run(*args):
    p = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def fail(msg, out="", err=""):
    print(f"FAIL: {msg}\n--- stdout\n{out}\n--- stderr\n{err}")
    sys.exit(1)


def expect_error(args, text):
    rc, out, err = run(*args)
    if rc != 2 or text not in err:
        fail(f"{' '.join(args)}: expected exit 2 and '{text}', got exit {rc}", out, err)


BENCH = sys.argv[1]

# Default: "threads bytes GB/s" for 1 and 2 threads.
rc, out, err = run("1048576", "2")
rows = [l.split() for l in out.splitlines() if l.strip()]
if rc != 0 or [r[:2] for r in rows] != [["1", "1048576"], ["2", "1048576"]] or any(float(r[2]) <= 0 for r in rows):
    fail("the default rows", out, err)

allowed = sorted(os.sched_getaffinity(0))
if len(allowed) < 2:
    expect_error(["--cross-core"], "needs two CPUs")
    print("only one CPU here: checked the error --cross-core gives")
    sys.exit(0)

size = 65536
rc, out, err = run("--cross-core", str(size), "--seconds", "0", "--cpus", f"{allowed[0]},{allowed[1]}")
if rc != 0:
    fail("--cross-core exited non-zero", out, err)
header = [l for l in out.splitlines() if l.startswith("#")]
if not header or f"writer CPU {allowed[0]}, reader CPU {allowed[1]}" not in header[0]:
    fail("--cross-core's header names the CPUs", out, err)
rows = [l.split() for l in out.splitlines() if l.startswith("cross-core ")]
if [r[1] for r in rows] != ["plain", "streamed", "unchanged"]:
    fail("one round: a row per way, in order", out, err)
for r in rows:
    way, nbytes, per_msg, write_us, read_us, gbs, wrong = r[1], int(r[2]), *map(float, r[3:7]), int(r[7])
    if nbytes != size:
        fail(f"{way}: bytes {nbytes}, asked {size}", out, err)
    if wrong != 0:
        fail(f"{way}: {wrong} messages read before they were whole", out, err)
    if per_msg <= 0 or read_us <= 0 or gbs <= 0:
        fail(f"{way}: figures must be positive", out, err)
    # The rate is the bytes over the time per message (rounded to 0.01 us and 0.001 GB/s).
    if abs(gbs - size / (per_msg * 1e3)) > 0.02 * gbs + 0.002:
        fail(f"{way}: {gbs} GB/s does not match {size} bytes in {per_msg} us", out, err)
    # A message's write and read are parts of its time; the unchanged way writes nothing.
    if write_us + read_us > per_msg * 1.05 + 0.05 or (way == "unchanged") != (write_us == 0):
        fail(f"{way}: write {write_us} + read {read_us} us against {per_msg} us per message", out, err)

expect_error(["--cross-core", "--cpus", f"{allowed[0]},{allowed[0]}"], "two different CPU numbers")
expect_error(["--cross-core", "--cpus", "x"], "two different CPU numbers")
expect_error(["--cross-core", "8"], "at least 16 bytes")
expect_error(["0"], "must be positive")
outside = max(allowed) + 1
if outside < 1024:
    expect_error(["--cross-core", "--cpus", f"{allowed[0]},{outside}"], f"cannot run threads on CPUs {allowed[0]} and {outside}")
print("accl-memcpy-bench: default rows, --cross-core rows and errors as expected")
