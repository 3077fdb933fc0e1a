#!/usr/bin/env python3
"""Markdown tables from several runs of accl-vs-mpi (same ranks, same sizes):
per op, one row per size with each run's ratio and the worst of them.
Up to --time-max bytes the ratio is ACCL's time over MPI's (<= 1: ACCL as fast
or faster); above, ACCL's busbw over MPI's (>= 1: ACCL as fast or faster).

    python3 bench/vs_mpi_report.py run1.txt run2.txt run3.txt [--time-max 2048] [--summary]

--summary prints one row per op instead: the worst ratio of all runs in each size
band (time up to --time-max; busbw in 4-64 KiB, 128 KiB-4 MiB and 8-128 MiB).
"""
import argparse
import sys


def parse(path):
    """{op: {bytes: (t_ratio, bw_ratio, wrong)}}"""
    out = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) != 9 or line.startswith("#"):
                continue
            try:
                op, b, t, bw, wrong = p[0], int(p[1]), float(p[4]), float(p[7]), int(p[8])
            except ValueError:
                continue
            out.setdefault(op, {})[b] = (t, bw, wrong)
    return out


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--time-max", type=int, default=2048, help="largest size judged by time (bytes)")
    ap.add_argument("--summary", action="store_true", help="worst ratio per op and size band")
    a = ap.parse_args()
    runs = [parse(p) for p in a.runs]
    ops = [op for op in runs[0] if all(op in r for r in runs)]
    if a.summary:
        bands = [(0, a.time_max), (a.time_max + 1, 64 << 10), ((64 << 10) + 1, 4 << 20), ((4 << 20) + 1, 1 << 62)]
        print(f"| op | time ACCL/MPI, 8 B - {human(a.time_max)} (worst) | busbw ACCL/MPI, 4-64 KiB (worst) | "
              "128 KiB - 4 MiB | 8-128 MiB |")
        print("|---|---:|---:|---:|---:|")
        for op in ops:
            sizes = set.intersection(*(set(r[op]) for r in runs))
            cells = []
            for i, (lo, hi) in enumerate(bands):
                vals = [r[op][b][0] if i == 0 else r[op][b][1] for r in runs for b in sizes if lo <= b <= hi]
                if not vals:
                    cells.append("-")
                    continue
                w = max(vals) if i == 0 else min(vals)
                best = min(vals) if i == 0 else max(vals)
                cells.append(f"{w:.2f} (best {best:.2f})")
            print(f"| {op} | " + " | ".join(cells) + " |")
        return 0
    misses = 0
    for op in ops:
        sizes = sorted(set.intersection(*(set(r[op]) for r in runs)))
        print(f"\n#### {op}\n")
        print("| size | measure | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | worst |")
        print("|---:|---|" + "---:|" * (len(runs) + 1))
        for b in sizes:
            by_time = b <= a.time_max
            vals = [r[op][b][0] if by_time else r[op][b][1] for r in runs]
            worst = max(vals) if by_time else min(vals)
            bad = worst > 1.2 if by_time else worst < 1.0
            misses += bad
            wrong = sum(r[op][b][2] for r in runs)
            cells = " | ".join(f"{v:.2f}" for v in vals)
            mark = " **(below target)**" if bad else ""
            measure = "time ACCL/MPI" if by_time else "busbw ACCL/MPI"
            print(f"| {human(b)} | {measure} | {cells} | {worst:.2f}{mark}{' wrong ' + str(wrong) if wrong else ''} |")
    print(f"\n{misses} of the op x size cells miss the target (time <= 1.2x MPI's up to "
          f"{human(a.time_max)}, busbw >= 1.0x above).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
