#!/usr/bin/python3
"""Side-by-side allreduce comparison of every ACCL backend and the anchors
(Open MPI's own MPI_Allreduce, torch.distributed's gloo), on this machine, in
one run:  (a) 2 ranks on one host, (b) 4 ranks on one host, (c) 2 namespace
hosts x 2 ranks over TCP. Writes a Markdown report with tables and PNG plots.

    bench/compare.py [--build build] [--out docs] [--quick] [--setups a,b,c]

Needs root for (c) (network namespaces). Uses only the standard library;
plots need gnuplot (Debian: gnuplot-nox)."""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = (8, 32768, 4)           # bytes: min, max, factor: 8 B .. 32 KiB
LARGE = (131072, 128 << 20, 4)  # 128 KiB .. 128 MiB


def sh(cmd, env=None, timeout=1800):
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


class Setup:
    def __init__(self, key, title, ranks, hosts):
        self.key, self.title, self.ranks, self.hosts = key, title, ranks, hosts

    def netns(self):
        return [f"accl-h{i}" for i in range(self.hosts)] if self.hosts > 1 else []

    def accl_run(self, b):
        cmd = [f"{b}/bin/accl-run", "-n", str(self.ranks), "--no-prefix"]
        if self.netns():
            cmd += ["--netns", ",".join(self.netns()), "--master-addr", "10.77.0.1"]
        return cmd

    def mpirun(self, tcp_only=False):
        if self.netns():
            per = self.ranks // self.hosts
            return [os.path.join(ROOT, "bench", "netns-mpirun"), str(self.ranks),
                    ",".join(f"{h}:{per}" for h in self.netns()), "10.77.0"]
        cmd = ["mpirun", "-n", str(self.ranks), "--oversubscribe"]
        if tcp_only:
            cmd += ["--mca", "btl", "self,tcp"]
        return cmd


def parse_lines(text):
    rows = []
    for line in text.splitlines():
        p = line.split()
        if len(p) == 4 and p[0].isdigit():
            rows.append({"bytes": int(p[0]), "time_us": float(p[1]), "busbw": float(p[3])})
    return rows


def run_accl_perf(b, setup, backend, quick):
    rows = []
    for (lo, hi, f), iters in ((SMALL, 30 if quick else 200), (LARGE, 3 if quick else 8)):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as j:
            path = j.name
        args = [f"{b}/bin/accl-perf", "--backend", backend, "-b", str(lo), "-e", str(hi), "-f", str(f),
                "-n", str(iters), "-w", "3", "-c", "1", "-J", path]
        launch = setup.mpirun() if backend == "mpi" else setup.accl_run(b)
        sh(launch + args)
        data = json.load(open(path))
        os.unlink(path)
        if data["wrong"]:
            raise RuntimeError(f"accl-perf {backend} reported {data['wrong']} wrong elements")
        for r in data["results"]:
            o = r["out_of_place"]
            rows.append({"bytes": r["size"], "time_us": o["time_us"], "busbw": o["busbw"]})
    return rows


def run_anchor_mpi(b, setup, quick):
    rows = []
    for (lo, hi, f), iters in ((SMALL, 30 if quick else 200), (LARGE, 3 if quick else 8)):
        rows += parse_lines(sh(setup.mpirun() + [f"{b}/bin/mpi-allreduce-bench", str(lo), str(hi), str(f), str(iters), "3"]))
    return rows


def run_anchor_mpi_tcp(b, setup, quick):
    rows = []
    for (lo, hi, f), iters in ((SMALL, 30 if quick else 200), (LARGE, 3 if quick else 8)):
        rows += parse_lines(sh(setup.mpirun(tcp_only=True) + [f"{b}/bin/mpi-allreduce-bench", str(lo), str(hi), str(f), str(iters), "3"]))
    return rows


def run_anchor_torch(b, setup, quick):
    rows = []
    script = os.path.join(ROOT, "bench", "torch_gloo_bench.py")
    for (lo, hi, f), iters in ((SMALL, 20 if quick else 100), (LARGE, 3 if quick else 5)):
        # torch's gloo binds to the address of the host name (127.0.0.1 here) unless told.
        env = {"GLOO_SOCKET_IFNAME": "eth0"} if setup.netns() else None
        rows += parse_lines(sh(setup.accl_run(b) + ["/usr/bin/python3", script, str(lo), str(hi), str(f), str(iters), "2"], env))
    return rows


def machine():
    model = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = int(open("/proc/meminfo").readline().split()[1]) // (1 << 20)
    return f"{model}, {os.cpu_count()} cores, {mem} GiB, Linux {platform.release()}"


def plot(out, setup, results, metric, ylabel, logy):
    if not shutil.which("gnuplot"):
        return None
    png = f"perf-{setup.key}-{metric}.png"
    tmp = tempfile.mkdtemp()
    lines = []
    for i, (name, rows) in enumerate(results.items()):
        dat = os.path.join(tmp, f"{i}.dat")
        with open(dat, "w") as f:
            for r in rows:
                f.write(f"{r['bytes']} {r[metric]}\n")
        lines.append(f"'{dat}' using 1:2 with linespoints lw 2 title '{name}' noenhanced")
    script = f"""set terminal pngcairo size 900,560 enhanced font 'Sans,11'
set output '{os.path.join(out, png)}'
set title '{setup.title}: float32 sum allreduce' noenhanced
set logscale x 2
set xtics ("8 B" 8, "128 B" 128, "2 KiB" 2048, "32 KiB" 32768, "512 KiB" 524288, "8 MiB" 8388608, "128 MiB" 134217728)
{'set logscale y' if logy else ''}
set xlabel 'message size (bytes)'
set ylabel '{ylabel}'
set key top left
set grid
plot {', '.join(lines)}
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return png


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--setups", default="a,b,c")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    os.makedirs(a.out, exist_ok=True)
    backends = [l.split()[0] for l in sh([f"{b}/bin/accl-info", "--backends"]).splitlines()
                if len(l.split()) > 1 and l.split()[1] == "usable"]
    setups = [s for s in (Setup("a", "2 ranks, one host", 2, 1), Setup("b", "4 ranks, one host (oversubscribed)", 4, 1),
                          Setup("c", "2 namespace hosts x 2 ranks, TCP", 4, 2)) if s.key in a.setups.split(",")]
    memcpy = {int(l.split()[0]): float(l.split()[2]) for l in sh([f"{b}/bin/accl-memcpy-bench"]).splitlines()}
    report = {}
    have_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    try:
        if any(s.hosts > 1 for s in setups):
            sh([os.path.join(ROOT, "bench", "netns.sh"), "up", "2"])
        for s in setups:
            res = {}
            for be in backends:
                print(f"[{s.key}] accl-perf --backend {be}", file=sys.stderr, flush=True)
                res[f"ACCL {be}"] = run_accl_perf(b, s, be, a.quick)
            if os.path.exists(f"{b}/bin/mpi-allreduce-bench"):
                print(f"[{s.key}] Open MPI MPI_Allreduce", file=sys.stderr, flush=True)
                res["Open MPI (MPI_Allreduce)"] = run_anchor_mpi(b, s, a.quick)
                if s.hosts == 1:
                    res["Open MPI, btl self,tcp"] = run_anchor_mpi_tcp(b, s, a.quick)
            if have_torch:
                print(f"[{s.key}] torch gloo", file=sys.stderr, flush=True)
                res["torch 1.13 gloo"] = run_anchor_torch(b, s, a.quick)
            report[s.key] = (s, res)
    finally:
        if any(s.hosts > 1 for s in setups):
            subprocess.run([os.path.join(ROOT, "bench", "netns.sh"), "down", "2"])

    md = ["# Performance", "",
          "Generated by `bench/compare.py` (" + ("quick run" if a.quick else "full run") + f") on {datetime.date.today()}.",
          "", f"Machine: {machine()}. This machine is shared and noisy: compare the columns of one",
          "table (same run), not absolute numbers across runs.", "",
          "Method: nccl-tests' definitions. float32 sum allreduce, out-of-place; time = average over",
          "ranks of the mean over the timed iterations (small sizes: 200, large: 8, after 3 warm-up);",
          "algbw = bytes / time; busbw = algbw x 2(n-1)/n. ACCL backends are measured with",
          "`accl-perf` (results checked, `#wrong` 0); anchors with `bench/mpi_allreduce_bench.c`",
          "(Open MPI's own `MPI_Allreduce`) and `bench/torch_gloo_bench.py` (`torch.distributed` gloo).",
          "Namespace hosts: `bench/netns.sh` (veth pairs on a bridge), ranks started with",
          "`accl-run --netns`, Open MPI with `bench/netns-mpirun` (`--mca btl self,tcp`).", "",
          f"Physical limit: memcpy {memcpy.get(1, 0):.2f} GB/s with one thread, {memcpy.get(2, 0):.2f} GB/s with two "
          "(`accl-memcpy-bench`, 64 MiB, same run).", "",
          "Reading the figures: the ACCL `mpi` backend runs MPI's non-blocking collectives",
          "(`MPI_Iallreduce`, Open MPI's libnbc) on a worker thread and polls them against the op's",
          "deadline, so that no op can hang; Open MPI's blocking `MPI_Allreduce` (coll/tuned) is",
          "faster, and the difference is the price of the timeout. The ACCL `gloo` backend and",
          "torch's gloo run the same library; their differences are mostly noise of this shared",
          "machine. ACCL's own backend (shared memory and TCP), which these figures are meant to",
          "judge, is not part of this version; when it is, it appears as one more column.", ""]
    for key, (s, res) in report.items():
        names = list(res)
        sizes = sorted({r["bytes"] for rows in res.values() for r in rows})
        by = {n: {r["bytes"]: r for r in res[n]} for n in names}
        md += [f"## ({s.key}) {s.title}", "", "busbw (GB/s):", "",
               "| size | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for z in sizes:
            md.append(f"| {z} | " + " | ".join(f"{by[n][z]['busbw']:.3f}" if z in by[n] else "-" for n in names) + " |")
        md += ["", "time (us):", "", "| size | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for z in sizes:
            md.append(f"| {z} | " + " | ".join(f"{by[n][z]['time_us']:.1f}" if z in by[n] else "-" for n in names) + " |")
        ref = "Open MPI (MPI_Allreduce)"
        if ref in by:
            md += ["", f"Ratios to {ref} (busbw ratio; >1 = faster):", "",
                   "| size | " + " | ".join(n for n in names if n != ref) + " |", "|---:|" + "---:|" * (len(names) - 1)]
            for z in sizes:
                cells = []
                for n in names:
                    if n == ref:
                        continue
                    x, y = by[n].get(z), by[ref].get(z)
                    cells.append(f"{x['busbw'] / y['busbw']:.2f}" if x and y and y["busbw"] > 0 else "-")
                md.append(f"| {z} | " + " | ".join(cells) + " |")
        big = max(sizes)
        md += ["", f"At {big} B, busbw as a fraction of one-thread memcpy: " +
               ", ".join(f"{n} {by[n][big]['busbw'] / memcpy[1]:.2f}" for n in names if big in by[n]) + ".", ""]
        for metric, label, logy in (("busbw", "bus bandwidth (GB/s)", False), ("time_us", "time per allreduce (us)", True)):
            png = plot(a.out, s, res, metric, label, logy)
            if png:
                md += [f"![{s.title}: {label}]({png})", ""]
    md += ["## Reproduce", "", "```sh", "scripts/build.sh", "bench/compare.py            # as root, writes docs/performance.md and docs/perf-*.png",
           "bench/compare.py --quick --setups a   # a one-minute smoke run", "```", ""]
    with open(os.path.join(a.out, "performance.md"), "w") as f:
        f.write("\n".join(md))
    print(f"wrote {os.path.join(a.out, 'performance.md')}", file=sys.stderr)


if __name__ == "__main__":
    main()
