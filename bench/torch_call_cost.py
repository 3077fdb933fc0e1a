#!/usr/bin/env python3
"""What one torch.distributed.all_reduce call costs beyond the same ACCL op called from
C++, and how that cost grows when memory traffic between calls pushes torch's working
set out of the caches (as a large allreduce does).

Run on one rank (the op itself then does nothing: an in-place allreduce of a 2-element
tensor), so that only the call paths differ:

    accl-run -n 1 python3 bench/torch_call_cost.py --touch 0,1,2,4

Each arm runs --iters calls, best of --loops loops: `dist.all_reduce(t)` (torch's Python
API, dispatcher and Work, then the adapter and the SDK) against the C++ level
(`_sdk_all_reduce(t, True)`: a blocking SDK call, no torch Work or dispatcher). After
every call both arms copy --touch MiB from one tensor to another, the same in each arm,
so that the difference `torch - C++` is torch's own cost per call with its code and data
as cold as the copy leaves them. Prints one line per touch size and repeat."""
import argparse
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--touch", default="0,1,2,4", help="MiB copied after each call, comma-separated")
    p.add_argument("--iters", type=int, default=2000, help="calls per loop")
    p.add_argument("--loops", type=int, default=5, help="loops per arm (the best counts)")
    p.add_argument("--repeat", type=int, default=2, help="times each touch size is measured")
    a = p.parse_args()
    import torch_accl  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("accl")
    if dist.get_world_size() != 1:
        raise SystemExit("torch_call_cost.py: run it on one rank (accl-run -n 1): it times the call paths alone")
    group = dist.distributed_c10d._get_default_group()
    sdk = group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group
    t = torch.ones(2)
    print(f"# torch {torch.__version__}: per-call time, best of {a.loops} loops of {a.iters} calls")
    for mib in [int(x) for x in a.touch.split(",")]:
        n = mib * 256 * 1024
        src, dst = torch.ones(max(n, 1)), torch.empty(max(n, 1))

        def arm(call):
            best = float("inf")
            for _ in range(a.loops):
                t0 = time.perf_counter()
                for _ in range(a.iters):
                    call()
                    if n:
                        dst.copy_(src)
                best = min(best, (time.perf_counter() - t0) / a.iters)
            return best * 1e6

        for _ in range(a.repeat):
            tt = arm(lambda: dist.all_reduce(t))
            tc = arm(lambda: sdk._sdk_all_reduce(t, True))
            print(f"touch {mib} MiB per call: torch {tt:8.2f} us, C++ {tc:8.2f} us, torch - C++ {tt - tc:6.2f} us")
    if t.tolist() != [1.0, 1.0]:
        raise SystemExit(f"torch_call_cost.py: a 1-rank sum of ones gave {t.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
