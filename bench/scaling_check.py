#!/usr/bin/env python3
"""Checks `accl-perf --predict` against what runs here: 1 to 4 simulated hosts
(network namespaces, bench/netns.sh) whose links are shaped (tbf rate on each
host's egress, and a delay each way by an NFQUEUE rule served by
accl_nfq_delay), as bench/model_check.py shapes its two.

  1. accl-perf --calibrate between hosts 0 and 1 writes a tuning file;
  2. for each layout (hosts x ranks per host), accl-perf times allreduce at
     each size with that tuning file (the accl backend choosing by the model);
  3. accl-perf --predict host --tuning FILE --nodes H --ranks-per-node R
     predicts the same sizes.

It prints, per layout and size, the measured and predicted times and their
ratio (target 0.75 - 1.25), then how many are within it. 25 MiB is one DDP
bucket: a step's gradient traffic is its buckets one after another, so the
bucket's time is what a step prediction rests on. Sizes from 32 KiB to 1 MiB
are left out by default: tbf lets a burst of 256 KB pass at the veth's speed,
which the model (a rate) does not describe. A benchmark: figures, not a
pass/fail test (exit 1 only when a run failed or results were wrong).

  bench/scaling_check.py BUILD_DIR [--link 1gbit:0] [--layouts 1x2,2x1,3x1,4x1,2x2]
                         [--sizes 8,4M,25M] [--iters 5]

--iters is the least number of timed ops per size (20x that up to 32 KiB); each size runs
at least about 0.2 s of ops by the prediction (at most 1000 ops).

With a delay, every packet passes through a user-space queue: on a 2-core machine four
hosts of it cost the link half its rate, so the default shapes the rate alone.

Needs root, tc's tbf qdisc, iptables and accl_nfq_delay (tests/netns/nfq_delay.c).
Uses namespaces acclm0..acclm3 on 10.76.0.0/24 (as model_check.py: not both at once).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_check as mc  # noqa: E402  (the shaped namespace hosts and the accl-perf runner)


def layout_arg(s):
    out = []
    for tok in s.split(","):
        try:
            h, r = (int(x) for x in tok.split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"a layout is HOSTSxRANKS like 2x1, not '{tok}'")
        if not 1 <= h <= 4 or r < 1 or h * r < 2:
            raise argparse.ArgumentTypeError(f"'{tok}': 1-4 hosts, at least 2 ranks in all")
        out.append((h, r))
    return out


def predict(build, tuning, hosts, rpn, size):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([os.path.join(build, "bin", "accl-perf"), "--predict", "host", "--tuning", tuning, "--nodes",
                        str(hosts), "--ranks-per-node", str(rpn), "--predict-ops", "allreduce", "-b", str(size),
                        "-e", str(size), "-J", out.name], check=True, stdout=subprocess.DEVNULL)
        rows = [r for r in json.load(open(out.name))["ops"] if r["nodes"] == hosts and r["bytes"] == size]
    return rows[0]["time_us"], rows[0]["plan"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--link", default="1gbit:0", help="RATE:DELAY_MS (tc rate, or none; delay each way)")
    ap.add_argument("--layouts", type=layout_arg, default=layout_arg("1x2,2x1,3x1,4x1,2x2"))
    ap.add_argument("--sizes", default="8,4M,25M")
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sizes = [mc.size_arg(s) for s in a.sizes.split(",")]
    ipt = shutil.which("iptables-legacy") or shutil.which("iptables")
    if os.geteuid() != 0 or not ipt or not os.access(os.path.join(build, "bin", "accl_nfq_delay"), os.X_OK):
        print("scaling_check.py: needs root, iptables and accl_nfq_delay (scripts/setup.sh installs them)")
        return 2
    rate, delay = a.link.split(":")
    nhosts = max(max(h for h, _ in a.layouts), 2)
    tmp = tempfile.mkdtemp()
    rows, failed = [], False
    mc.netns("down", 4)
    mc.netns("up", nhosts)
    link = mc.Link(build, rate, float(delay), ipt, nhosts)
    try:
        tuning = os.path.join(tmp, "tuning.json")
        print(f"## link {rate}, {delay} ms each way on every host; calibrated on hosts 0 and 1, 2 ranks each")
        mc.calibrate(build, tuning, ranks_per_host=2)
        print(f"\n{'layout':>7} {'ranks':>5} {'bytes':>10} {'measured':>10} {'predicted':>10} {'pred/meas':>9}  plan")
        for hosts, rpn in a.layouts:
            ranks = hosts * rpn
            for size in sizes:
                pred, plan = predict(build, tuning, hosts, rpn, size)
                # At least about 0.2 s of ops per size (at most 1000 of them): 5 ops of 4 MiB on one host
                # take 2-4 ms, which one descheduling of a rank doubles on a shared machine.
                iters = max(a.iters * (20 if size <= 32768 else 1), min(1000, int(0.2e6 / max(pred, 1e-3))))
                meas = mc.perf(build, {"ACCL_TUNING_FILE": tuning}, "allreduce", size, a.iters, ranks, hosts,
                               passes=[(size, size, iters)])[size]
                rows.append((hosts, rpn, size, meas, pred))
                print(f"{hosts:>5}x{rpn:<1} {ranks:>5} {size:>10} {meas:>10.1f} {pred:>10.1f} {pred / meas:>9.2f}  {plan}",
                      flush=True)
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"FAILED: {e}")
        failed = True
    finally:
        link.close()
        mc.netns("down", 4)
        shutil.rmtree(tmp, ignore_errors=True)
    if rows:
        close = sum(1 for r in rows if 0.75 <= r[4] / r[3] <= 1.25)
        print(f"\nsummary: prediction within +-25 % of the measured time in {close} of {len(rows)}; worst: " +
              "; ".join(f"{h}x{r} {s} {p / m:.2f}" for h, r, s, m, p in sorted(rows, key=lambda x: -abs(x[4] / x[3] - 1))[:3]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
