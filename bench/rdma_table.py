#!/usr/bin/env python3
"""Markdown table of verbs vs TCP from the accl-perf logs of tests/rdma/run.sh.

usage: bench/rdma_table.py BUILD/rdma-results
Reads perf_<op>_ib.log (verbs, zero-copy sends), perf_<op>_ibcopy.log (verbs,
every payload copied) and perf_<op>_tcp.log (same guest, same run) and prints,
per op and size, the busbw of each and the time ratios copy/zero-copy and
tcp/zero-copy (>1: zero-copy verbs faster).
"""
import re
import sys
from pathlib import Path


def parse(path):
    rows = {}
    for line in Path(path).read_text().splitlines():
        line = re.sub(r"^\[\d+\]\s*", "", line)
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) < 9 or not f[0].isdigit():
            continue
        size = int(f[0])
        # out-of-place columns: time algbw busbw #wrong after size count type redop root
        rows[size] = (float(f[5]), float(f[7]), int(f[8]))
    return rows


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "build/rdma-results")
    for op in ("allreduce", "sendrecv"):
        logs = {v: d / f"perf_{op}_{v}.log" for v in ("ib", "ibcopy", "tcp")}
        if not all(p.exists() for p in logs.values()):
            continue
        a, c, b = (parse(logs[v]) for v in ("ib", "ibcopy", "tcp"))
        print(f"\n{op}, 2 ranks (each its own host), float32:\n")
        print("| size | verbs zero-copy busbw (MB/s) | verbs copy busbw (MB/s) | tcp busbw (MB/s) "
              "| copy/zero-copy time | tcp/zero-copy time | #wrong |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for s in sorted(set(a) & set(b) & set(c)):
            ta, _, wa = a[s]
            tc, _, wc = c[s]
            tb, _, wb = b[s]
            # 2 ranks: busbw = algbw = bytes / time (B/us = MB/s; the log's GB/s has 2 decimals)
            print(f"| {human(s)} | {s / ta:.1f} | {s / tc:.1f} | {s / tb:.1f} | "
                  f"{tc / ta:.2f} | {tb / ta:.2f} | {wa + wb + wc} |")

if __name__ == "__main__":
    main()
