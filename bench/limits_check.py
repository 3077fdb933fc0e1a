#!/usr/bin/env python3
"""How close the accl backend comes to this machine's limits, each measured in
the same run:

  within a host   allreduce of 2 ranks (16 - 128 MiB) against the memory-bandwidth
                  limit derived from accl-memcpy-bench's two-thread copy rate;
  between hosts   sendrecv and allreduce (16 - 128 MiB) between 2 namespace hosts
                  (bench/netns.sh, TCP over a veth pair) against iperf3's rate
                  between the same namespaces.

The memory limit of a 2-rank allreduce of n bytes: each rank reduces one half
(reads its own and the peer's input of that half and writes the result into its
output: 3 x n/2) and copies the other half of the result from the peer's output
(reads and writes n/2: 2 x n/2), 2.5 n per rank and 5 n in all. The two cores'
memory traffic is at most 2 bytes per byte copied at the two-thread copy rate,
so limit = 2 x copy rate / 5 (GB/s of the vector, which is busbw for 2 ranks).
That counts the copy of the result half as memory traffic. Where the result
crosses between the ranks through cache (the shared segment's slots, the
default), memory sees only both inputs read and both outputs written, 4 n: the
tighter bound 2 x copy rate / 4 is printed beside it.

iperf3's rate is one TCP stream for --seconds, one way, and each way with a stream
in both directions at once (--bidir: with 2 ranks, sendrecv and every allreduce
step send both ways at once); ACCL's busbw is nccl-tests' (sendrecv: bytes /
time, allreduce: 2(n-1)/n x bytes / time). A benchmark:
figures, not a pass/fail test; --runs repeats the whole in one invocation.

Each cell is paired with its own reference, because this kind of machine changes
speed within a minute: every size runs alone, between two measurements of its
limit (the copy rate within a host; iperf3 each way between hosts), for about as
long as one of them (--seconds), and its ratio is to the mean of the two. The two
references of a cell are printed beside it: where they differ by more than the
target's margin, the machine changed speed during the cell.

    bench/limits_check.py BUILD_DIR [--runs 3] [--seconds 2] [--host-only]

Needs root and iperf3 (scripts/setup.sh installs it). Uses namespaces accll0/1 on 10.74.0.0/24.
--host-only measures within a host alone, and needs neither (a machine without iperf3, or
a user without root).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_check as mc  # noqa: E402  (the namespace hosts)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX, SUBNET = "accll", "10.74.0"


def netns(cmd):
    mc.netns(cmd, 2, PREFIX, SUBNET)


def memcpy_rate(build):
    """Two-thread copy rate (GB/s) of 64 MiB, the last line accl-memcpy-bench prints for 2 threads."""
    out = subprocess.run([os.path.join(build, "bin", "accl-memcpy-bench")], capture_output=True, text=True,
                         check=True).stdout
    rates = {int(l.split()[0]): float(l.split()[2]) for l in out.splitlines() if len(l.split()) == 3}
    return rates[1], rates[2]


def perf(build, op, hosts, size, iters):
    """busbw (GB/s) of `op` at `size` bytes, 2 ranks (on one host, or one per namespace host),
    out of place, results checked."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [os.path.join(build, "bin", "accl-run"), "-n", "2"]
        if hosts == 2:
            cmd += ["--netns", f"{PREFIX}0,{PREFIX}1", "--master-addr", f"{SUBNET}.1"]
        cmd += [os.path.join(build, "bin", "accl-perf"), "--backend", "accl", "--op", op, "-b", str(size), "-e",
                str(size), "-n", str(iters), "-w", "2", "-c", "1", "-J", out.name]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if r.returncode != 0:
            raise RuntimeError(f"accl-perf {op}: exit {r.returncode}: {r.stdout[-1500:]}{r.stderr[-500:]}")
        j = json.load(open(out.name))
    if j["wrong"]:
        raise RuntimeError(f"accl-perf {op}: {j['wrong']} wrong elements")
    return j["results"][0]["out_of_place"]["busbw"]


def iters_for(seconds, rate_gbs, size):
    """Iterations that take about `seconds` at `rate_gbs` (at least 5)."""
    return max(5, int(seconds * rate_gbs * 1e9 / size))


def paired(sizes, reference, cell):
    """Alternates reference(), cell(size, last reference), reference(), ...: returns the
    references (one more than the sizes) and the cells; cell i lies between references i and i + 1."""
    refs, cells = [reference()], []
    for size in sizes:
        cells.append(cell(size, refs[-1]))
        refs.append(reference())
    return refs, cells


def iperf(seconds, bidir=False):
    """GB/s of one TCP stream from host 1 to host 0 (iperf3's receiver figure); with `bidir`,
    of each direction while one stream runs each way (the mean of the two). The server runs
    in host 0 (see main); a try that fails (the server not listening yet, or busy) is repeated."""
    for _ in range(50):
        r = subprocess.run(["ip", "netns", "exec", f"{PREFIX}1", "iperf3", "-c", f"{SUBNET}.1", "-t",
                            str(seconds), "-J"] + (["--bidir"] if bidir else []), capture_output=True, text=True)
        j = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        end = j.get("end", {})
        if r.returncode == 0 and "sum_received" in end and not j.get("error"):
            bps = end["sum_received"]["bits_per_second"]
            if bidir:
                bps = (bps + end["sum_received_bidir_reverse"]["bits_per_second"]) / 2
            return bps / 8e9
        time.sleep(0.2)
    raise RuntimeError("iperf3 did not measure: " + r.stdout[-500:] + r.stderr[-500:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=2,
                    help="length of each iperf3 measurement, and about that of each ACCL cell")
    ap.add_argument("--host-only", action="store_true",
                    help="within a host alone (no namespaces, no iperf3, no root)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if not a.host_only and (os.geteuid() != 0 or not shutil.which("iperf3")):
        print("limits_check.py: needs root and iperf3 (scripts/setup.sh installs it); --host-only needs neither")
        return 2
    server = None
    if not a.host_only:
        netns("down")
        netns("up")
        server = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}0", "iperf3", "-s", "-B", f"{SUBNET}.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sizes = [16 << 20, 32 << 20, 64 << 20, 128 << 20]
    try:
        for run in range(1, a.runs + 1):
            # Within a host: copy rate, size, copy rate, size, ... (each cell between two).
            refs, cells = paired(sizes, lambda: memcpy_rate(build),
                                 lambda size, ref: perf(build, "allreduce", 1, size,
                                                        iters_for(a.seconds, 2 * ref[1] / 5, size)))
            print(f"\n## run {run}\nwithin a host: 2-thread copy {refs[0][1]:.2f} GB/s at the start "
                  f"(1 thread {refs[0][0]:.2f}); limit of a 2-rank allreduce = 2 x copy rate / 5 (tighter: / 4)")
            copy = [(refs[i][1] + refs[i + 1][1]) / 2 for i in range(len(sizes))]  # around each cell
            print("  allreduce busbw / limit | tighter, each against the copy rate measured just before and after "
                  "it: " + ", ".join(
                      f"{size >> 20} MiB {bw:.2f} GB/s = {bw / (2 * copy[i] / 5):.2f} | {bw / (2 * copy[i] / 4):.2f} "
                      f"(copy {refs[i][1]:.1f}, {refs[i + 1][1]:.1f})" for i, (size, bw) in enumerate(zip(sizes, cells))))
            sys.stdout.flush()
            if a.host_only:
                continue
            link = iperf(a.seconds)
            print(f"between 2 namespace hosts: iperf3 {link:.2f} GB/s ({link * 8:.1f} Gbit/s) one way at the start")
            # With 2 ranks, sendrecv and the allreduce's steps send both ways at once: the
            # reference is iperf3 each way with a stream in both directions, measured just
            # before and just after each cell.
            for op in ("sendrecv", "allreduce"):
                refs, cells = paired(sizes, lambda: iperf(a.seconds, bidir=True),
                                     lambda size, ref: perf(build, op, 2, size, iters_for(a.seconds, ref, size)))
                print(f"  {op} busbw / iperf3 each way, before and after it: " + ", ".join(
                    f"{size >> 20} MiB {bw:.2f} GB/s = {bw / ((refs[i] + refs[i + 1]) / 2):.2f} "
                    f"(iperf3 {refs[i]:.2f}, {refs[i + 1]:.2f})" for i, (size, bw) in enumerate(zip(sizes, cells))))
            sys.stdout.flush()
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        if server:
            server.kill()
            server.wait()
            netns("down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
