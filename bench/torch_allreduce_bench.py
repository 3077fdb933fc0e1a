#!/usr/bin/env python3
"""torch.distributed all_reduce (float32 sum) with backend="accl" against torch's
own gloo and against the same ACCL group called directly from C++ (the C++ level:
a blocking SDK call on the calling thread, no torch Work, future or dispatcher), in
the same processes on the same tensors. For each size the three paths run in rounds
of one block each (~--block-ms of calls). Every block starts after a barrier, so that
no rank's lag from the block before falls into it; accl and C++ take turns at
running first, and gloo runs last in every round, so that neither of the two is
timed more often right after gloo. A path's time is the median of its blocks
(the slowest rank's time of each block), and accl/C++ is the median of the
per-round ratios (their spread is printed beside it).
One process per rank with the torchrun environment (accl-run and torchrun set it):

    accl-run -n 2 /usr/bin/python3 bench/torch_allreduce_bench.py --min 8 --max 128M

Prints on rank 0: bytes, time of each, time ratio gloo/accl (>1: accl faster),
busbw of each, busbw ratios accl/gloo and accl/C++ (1.00: the adapter costs
nothing) with the range of the per-round accl/C++ ratios; `wrong` counts result
mismatches (a sum of ones checked on every path after the timing)."""
import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def size_arg(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1].upper()]) if s[-1].upper() in m else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", type=size_arg, default=8)
    p.add_argument("--max", type=size_arg, default=128 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=15, help="at least this many rounds per size")
    p.add_argument("--block-ms", type=float, default=3.0, help="milliseconds per block (sets iterations)")
    p.add_argument("--time-budget", type=float, default=1.0, help="seconds of rounds per size, at least")
    a = p.parse_args()
    import torch_accl  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("accl", init_method="env://", timeout=timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    sdk = dist.distributed_c10d._get_default_group()
    if hasattr(sdk, "_get_backend"):  # torch 2.x: the accl Backend behind the ProcessGroup
        sdk = sdk._get_backend(torch.device("cpu"))

    def run(t, name, iters):
        if name == "cxx":
            for _ in range(iters):
                sdk._sdk_all_reduce(t, True)
        else:
            grp = gloo if name == "gloo" else None
            for _ in range(iters):
                dist.all_reduce(t, group=grp)

    def block(t, name, iters):
        """Seconds per call over `iters` calls, as this rank saw them."""
        dist.barrier()
        t0 = time.perf_counter()
        run(t, name, iters)
        return (time.perf_counter() - t0) / iters

    names = ("gloo", "accl", "cxx")
    if rank == 0:
        print(f"# torch all_reduce float32 sum, {n} ranks, torch {torch.__version__}; median of "
              f"interleaved blocks (~{a.block_ms:g} ms each, each after a barrier, >= {a.rounds} rounds); "
              f"C++ = the blocking SDK call; vs_cxx = median of paired block ratios [min, max]")
        print(f"# {'bytes':>10} {'gloo_us':>10} {'accl_us':>10} {'cxx_us':>10} {'t_ratio':>8} {'gloo_busbw':>11} "
              f"{'accl_busbw':>11} {'cxx_busbw':>10} {'bw_ratio':>8} {'vs_cxx':>7} {'vs_cxx_range':>13} {'wrong':>5}")
    b = a.min
    while b <= a.max:
        count = max(b // 4, 1)
        t = torch.empty(count, dtype=torch.float32)
        t.fill_(1.0)
        # Iterations per block from a probe of each path, agreed by all ranks (the
        # slowest rank's probe), so that every rank runs the same number of calls.
        iters = {}
        for name in names:
            run(t, name, 2)
            probe = torch.tensor([block(t, name, 3)], dtype=torch.float64)
            dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=gloo)
            iters[name] = max(1, min(5000, int(a.block_ms * 1e-3 / max(probe.item(), 1e-7))))
        # Rounds: each runs one block of every path, so that drift in the machine's
        # load falls on all paths alike: accl and C++ in turn first, gloo last. Each
        # rank keeps its own block times; the slowest rank's time of each block is
        # the block's time.
        samples = {k: [] for k in names}
        t_end = time.perf_counter() + a.time_budget
        r = 0
        while True:
            order = ("accl", "cxx", "gloo") if r % 2 == 0 else ("cxx", "accl", "gloo")
            for name in order:
                samples[name].append(block(t, name, iters[name]))
            r += 1
            stop = torch.tensor([1.0 if (r >= a.rounds and time.perf_counter() > t_end) or r >= 400 else 0.0])
            dist.all_reduce(stop, op=dist.ReduceOp.MIN, group=gloo)
            if stop.item() > 0:
                break
        times = torch.tensor([samples[k] for k in names], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=gloo)
        med = {k: times[i].median().item() for i, k in enumerate(names)}
        pair = times[1] / times[2]  # accl / C++ time per round: > 1 means torch slower
        vs_cxx = 1.0 / pair.median().item()
        lo, hi = 1.0 / pair.max().item(), 1.0 / pair.min().item()
        # A sum of ones is the group size on every element.
        wrong = 0
        for name in names:
            x = torch.full((count,), 1.0)
            run(x, name, 1)
            wrong += int((x != n).sum().item())
        if rank == 0:
            bw = {k: count * 4 / v / 1e9 * 2 * (n - 1) / n for k, v in med.items()}
            print(f"  {count * 4:>10} {med['gloo'] * 1e6:>10.2f} {med['accl'] * 1e6:>10.2f} "
                  f"{med['cxx'] * 1e6:>10.2f} {med['gloo'] / med['accl']:>8.2f} {bw['gloo']:>11.3f} "
                  f"{bw['accl']:>11.3f} {bw['cxx']:>10.3f} {bw['accl'] / bw['gloo']:>8.2f} "
                  f"{vs_cxx:>7.2f} {f'[{lo:.2f},{hi:.2f}]':>13} {wrong:>5}", flush=True)
        b *= a.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
