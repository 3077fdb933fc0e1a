#!/usr/bin/env python3
"""all_reduce (float32 sum) of CUDA tensors with backend="accl" on its staged
path (ACCL_TORCH_CUDA=stage: copied to page-locked host memory, reduced by the
accl backend, copied back) against torch's own gloo on the same device tensors
(which stages them through pinned memory too), in the same processes. Beside
them, in the same process and run, the copies any staging needs: a device-to-host
and a host-to-device copy of the tensor, through page-locked and through pageable
host memory. One process per rank with the torchrun environment, rank r on GPU
r % (GPUs); ranks may share a GPU:

    ACCL_TORCH_CUDA=stage accl-run -n 2 python3 bench/torch_cuda_bench.py --min 64K --max 256M

For each size the paths take turns in rounds (each a barrier, then --iters calls
and a device synchronize); a path's time is the median over rounds of the
slowest rank's time. Prints on rank 0: bytes; time per call of accl and gloo;
their busbw; gloo/accl (>1: accl faster); the copy round trips (pinned and
pageable) of rank 0; and `wrong`, result mismatches of a sum of ones checked on
both paths after the timing. Needs a CUDA build of torch and a GPU."""
import argparse
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def size_arg(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1].upper()]) if s[-1].upper() in m else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", type=size_arg, default=64 << 10)
    p.add_argument("--max", type=size_arg, default=256 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=5, help="calls per round")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_cuda_bench.py: torch sees no GPU (a CUDA build of torch and a GPU are needed)")
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method="env://", timeout=timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if rank == 0:
        path = dist.distributed_c10d._get_default_group()
        if hasattr(path, "_get_backend"):
            path = path._get_backend(torch.device("cpu"))
        print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, {n} ranks on "
              f"{torch.cuda.device_count()} GPU(s); accl device tensors: {path.cuda_path}", flush=True)
        print(f"# {'bytes':>10} {'accl_us':>10} {'gloo_us':>10} {'accl_GB/s':>9} {'gloo_GB/s':>9} "
              f"{'gloo/accl':>9} {'pinned_us':>10} {'pageable_us':>11} {'wrong':>5}", flush=True)

    def timed(fn, iters):
        dist.barrier(group=gloo)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize(dev)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=gloo)  # the slowest rank's time
        return dt.item() / iters

    size = a.min
    while size <= a.max:
        t = torch.ones(size // 4, device=dev)
        pinned = torch.empty(t.shape, pin_memory=True)
        pageable = torch.empty(t.shape)

        def round_trip(h):
            h.copy_(t)
            t.copy_(h)

        paths = {"accl": lambda: dist.all_reduce(t), "gloo": lambda: dist.all_reduce(t, group=gloo),
                 "pinned": lambda: round_trip(pinned), "pageable": lambda: round_trip(pageable)}
        for f in paths.values():  # warm-up: buffers, connections, the host allocator's cache
            f()
        times = {k: [] for k in paths}
        for r in range(a.rounds):
            order = ["accl", "gloo"] if r % 2 == 0 else ["gloo", "accl"]
            for k in order + ["pinned", "pageable"]:
                times[k].append(timed(paths[k], a.iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        wrong = 0
        for grp in (None, gloo):
            x = torch.ones(size // 4, device=dev)
            dist.all_reduce(x, group=grp)
            wrong += int((x != n).sum().item())
        w = torch.tensor([wrong])
        dist.all_reduce(w, group=gloo)
        if rank == 0:
            bus = lambda s: 2 * (n - 1) / n * size / s / 1e9  # noqa: E731
            print(f"  {size:>10} {med['accl'] * 1e6:>10.1f} {med['gloo'] * 1e6:>10.1f} {bus(med['accl']):>9.2f} "
                  f"{bus(med['gloo']):>9.2f} {med['gloo'] / med['accl']:>9.2f} {med['pinned'] * 1e6:>10.1f} "
                  f"{med['pageable'] * 1e6:>11.1f} {int(w.item()):>5}", flush=True)
        size *= a.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
