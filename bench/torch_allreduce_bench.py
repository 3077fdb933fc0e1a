#!/usr/bin/env python3
"""torch.distributed all_reduce (float32 sum) with backend="accl" against torch's
own gloo and against the same ACCL group called directly (the C++ level, what
accl-perf measures: no torch Work, future or dispatcher), in the same processes
on the same tensors, sizes interleaved (best of --reps runs). One process per rank with the torchrun
environment (accl-run and torchrun set it):

    accl-run -n 2 /usr/bin/python3 bench/torch_allreduce_bench.py --min 8 --max 128M

Prints on rank 0: bytes, time of each, time ratio gloo/accl (>1: accl faster),
busbw of each, busbw ratios accl/gloo and accl/C++ (1.00: the adapter costs
nothing); `wrong` counts result mismatches."""
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
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--time-budget", type=float, default=0.2, help="seconds per measurement (sets iterations)")
    a = p.parse_args()
    import torch_accl  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("accl", init_method="env://", timeout=timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    sdk = dist.distributed_c10d._get_default_group()
    if hasattr(sdk, "_get_backend"):  # torch 2.x: the accl Backend behind the ProcessGroup
        sdk = sdk._get_backend(torch.device("cpu"))

    def timed(t, group, iters):
        dist.barrier(group=group if group != "sdk" else None)
        t0 = time.perf_counter()
        if group == "sdk":
            for _ in range(iters):
                sdk._sdk_all_reduce(t)
        else:
            for _ in range(iters):
                dist.all_reduce(t, group=group)
        el = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(el, op=dist.ReduceOp.MAX, group=group if group != "sdk" else None)
        return el.item() / iters

    if rank == 0:
        print(f"# torch all_reduce float32 sum, {n} ranks, torch {torch.__version__}; best of {a.reps}")
        print(f"# {'bytes':>10} {'gloo_us':>10} {'accl_us':>10} {'cxx_us':>10} {'t_ratio':>8} {'gloo_busbw':>11} "
              f"{'accl_busbw':>11} {'cxx_busbw':>10} {'bw_ratio':>8} {'vs_cxx':>7} {'wrong':>5}")
    b = a.min
    while b <= a.max:
        count = max(b // 4, 1)
        t = torch.empty(count, dtype=torch.float32)
        # Iterations from a quick gloo probe, the same for both.
        t.fill_(1.0)
        probe = timed(t, gloo, 2)
        iters = max(3, min(2000, int(a.time_budget / max(probe, 1e-7))))
        best = {"gloo": float("inf"), "accl": float("inf"), "cxx": float("inf")}
        wrong = 0
        for _ in range(a.reps):
            for name, grp in (("gloo", gloo), ("accl", None), ("cxx", "sdk")):
                t.fill_(1.0)
                best[name] = min(best[name], timed(t, grp, iters))
                # A sum of ones is the group size on every element.
                x = torch.full((count,), 1.0)
                if grp == "sdk":
                    sdk._sdk_all_reduce(x)
                else:
                    dist.all_reduce(x, group=grp)
                wrong += int((x != n).sum().item())
        if rank == 0:
            bw = {k: count * 4 / v / 1e9 * 2 * (n - 1) / n for k, v in best.items()}
            print(f"  {count * 4:>10} {best['gloo'] * 1e6:>10.2f} {best['accl'] * 1e6:>10.2f} "
                  f"{best['cxx'] * 1e6:>10.2f} {best['gloo'] / best['accl']:>8.2f} {bw['gloo']:>11.3f} "
                  f"{bw['accl']:>11.3f} {bw['cxx']:>10.3f} {bw['accl'] / bw['gloo']:>8.2f} "
                  f"{bw['accl'] / bw['cxx']:>7.2f} {wrong:>5}", flush=True)
        b *= a.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
