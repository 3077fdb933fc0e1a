"""Anchor: torch.distributed's built-in gloo all_reduce (float32 sum), or sendrecv, timed like accl-perf.
Run one process per rank with the torchrun environment (accl-run sets it):
    accl-run -n 2 /usr/bin/python3 torch_gloo_bench.py MINBYTES MAXBYTES FACTOR ITERS WARMUP [cpu] [sendrecv]
Prints on rank 0: bytes time_us algbw_GBs busbw_GBs; with `cpu`, also the CPU time this process
spent per op, in user space and in the kernel (us, os.times(): all its threads, gloo's included).
With `sendrecv`, the op is isend to rank+1 and irecv from rank-1, both waited (busbw = algbw), in
processes with no other group: torch's gloo alone, as bench/torch_allreduce_bench.py --op sendrecv
times it beside ACCL's."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    minb, maxb = int(sys.argv[1]), int(sys.argv[2])
    factor, iters, warmup = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    cpu = "cpu" in sys.argv[6:]
    sendrecv = "sendrecv" in sys.argv[6:]
    # accl-run's MASTER_PORT is free: torch's own TCPStore takes it.
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()

    def op(t, out):
        if not sendrecv:
            dist.all_reduce(t)
            return
        s = dist.isend(t, (rank + 1) % size)
        r = dist.irecv(out, (rank - 1) % size)
        s.wait()
        r.wait()

    b = minb
    while b <= maxb:
        t = torch.ones(max(b // 4, 1), dtype=torch.float32)
        out = torch.empty_like(t)
        for _ in range(warmup):
            op(t, out)
        dist.barrier()
        c0 = os.times()
        t0 = time.perf_counter()
        for _ in range(iters):
            op(t, out)
        el = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        c1 = os.times()
        dist.all_reduce(el)
        avg = el.item() / size
        if rank == 0:
            alg = t.numel() * 4 / avg / 1e9
            extra = (f" {(c1.user - c0.user) / iters * 1e6:.1f} {(c1.system - c0.system) / iters * 1e6:.1f}"
                     if cpu else "")
            bus = alg if sendrecv else alg * 2 * (size - 1) / size
            print(f"{t.numel() * 4} {avg * 1e6:.3f} {alg:.4f} {bus:.4f}{extra}", flush=True)
        nb = int(b * factor)
        if nb <= b:
            break
        b = nb
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
