#!/usr/bin/env python3
"""A torch.distributed op (float32; all_reduce by default, --op for the others) with
backend="accl" against torch's own gloo and, for all_reduce, against the same ACCL
group called directly from C++ (the C++ level: a blocking SDK call on the calling
thread, no torch Work, future or dispatcher), in the same processes on the same
tensors. --op all runs every op that torch's gloo implements, one after another.
For each size the paths run in rounds of one block each (~--block-ms of calls).
Every block starts after a barrier, so that no rank's lag from the block before
falls into it; accl and C++ take turns at
running first, and gloo runs last in every round, so that neither of the two is
timed more often right after gloo. A path's time is the median of its blocks
(the slowest rank's time of each block), and accl/C++ is the median of the
per-round ratios (their spread is printed beside it).
One process per rank with the torchrun environment (accl-run and torchrun set it):

    accl-run -n 2 /usr/bin/python3 bench/torch_allreduce_bench.py --min 8 --max 128M
    ACCL_TORCH_BACKEND=gloo accl-run -n 2 python3 bench/torch_allreduce_bench.py --op all --max 64K

Sizes are nccl-tests': the whole buffer (allgather's and gather's output, scatter's,
reduce_scatter's and alltoall's input); sendrecv sends to rank+1 and receives from
rank-1 (isend and irecv, both waited for). Prints on rank 0: bytes, time of each,
time ratio gloo/accl (>1: accl faster), busbw of each (nccl-tests' factors), busbw
ratios accl/gloo and accl/C++ (1.00: the adapter costs nothing) with the range of
the per-round accl/C++ ratios; `wrong` counts result mismatches, checked on every
path after the timing against values computed here from every rank's input."""
import argparse
import os
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist


def size_arg(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1].upper()]) if s[-1].upper() in m else int(s)


# Ops: name -> busbw factor (nccl-tests'), as a function of the group size.
BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0,
       "allgather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "alltoall": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n,
       "scatter": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}


class Op:
    """One op's buffers for `count` elements in all (nccl-tests' size), its call on a
    group, and a check of its result against values computed from every rank's input
    (rank r's input element i is r * 1000 + i % 997, exact in float32)."""

    def __init__(self, name, count, rank, n):
        self.name, self.rank, self.n = name, rank, n
        per = max(count // n, 1)
        whole = {"allgather", "reduce_scatter", "alltoall", "gather", "scatter"}
        self.count = per * n if name in whole else count
        c = self.count
        mk = lambda k: torch.empty(k, dtype=torch.float32)
        if name in ("allreduce", "broadcast", "reduce", "sendrecv"):
            self.inp = mk(c)
            self.out = mk(c) if name == "sendrecv" else self.inp
        elif name == "allgather":
            self.inp, self.out = mk(per), mk(c)
        elif name == "reduce_scatter":
            self.inp, self.out = mk(c), mk(per)
        elif name == "alltoall":
            self.inp, self.out = mk(c), mk(c)
        elif name == "gather":
            self.inp = mk(per)
            self.outs = [mk(per) for _ in range(n)] if rank == 0 else None
        elif name == "scatter":
            self.out = mk(per)
            self.ins = [mk(per) for _ in range(n)] if rank == 0 else None
        self.per = per
        self.fill()

    @staticmethod
    def ref(r, k, off=0):
        return (torch.arange(off, off + k, dtype=torch.int64) % 997 + r * 1000).to(torch.float32)

    def fill(self):
        r, n, per = self.rank, self.n, self.per
        if self.name == "scatter":
            if self.ins is not None:
                for j, x in enumerate(self.ins):
                    x.copy_(self.ref(j, per))
            self.out.zero_()
        elif self.name == "gather":
            self.inp.copy_(self.ref(r, per))
        else:
            self.inp.copy_(self.ref(r, self.inp.numel()))
            if self.out is not self.inp:
                self.out.zero_()

    def call(self, grp):
        r, n = self.rank, self.n
        if self.name == "allreduce":
            dist.all_reduce(self.inp, group=grp)
        elif self.name == "broadcast":
            dist.broadcast(self.inp, src=0, group=grp)
        elif self.name == "reduce":
            dist.reduce(self.inp, dst=0, group=grp)
        elif self.name == "allgather":
            dist.all_gather_into_tensor(self.out, self.inp, group=grp)
        elif self.name == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp, group=grp)
        elif self.name == "alltoall":
            dist.all_to_all_single(self.out, self.inp, group=grp)
        elif self.name == "gather":
            dist.gather(self.inp, self.outs, dst=0, group=grp)
        elif self.name == "scatter":
            dist.scatter(self.out, self.ins, src=0, group=grp)
        elif self.name == "sendrecv":
            s = dist.isend(self.inp, (r + 1) % n, group=grp)
            q = dist.irecv(self.out, (r - 1) % n, group=grp)
            s.wait()
            q.wait()

    def wrong(self):
        """Elements that differ from the reference after one call on fresh inputs."""
        r, n, per, nm = self.rank, self.n, self.per, self.name
        total = lambda k, off=0: sum(self.ref(j, k, off) for j in range(n))
        if nm == "allreduce":
            pairs = [(self.inp, total(self.inp.numel()))]
        elif nm == "broadcast":
            pairs = [(self.inp, self.ref(0, self.inp.numel()))]
        elif nm == "reduce":
            # Only the root's tensor is defined after a reduce (gloo's ring uses the others').
            pairs = [(self.inp, total(self.inp.numel()))] if r == 0 else []
        elif nm == "allgather":
            pairs = [(self.out, torch.cat([self.ref(j, per) for j in range(n)]))]
        elif nm == "reduce_scatter":
            pairs = [(self.out, total(per, r * per))]
        elif nm == "alltoall":
            pairs = [(self.out, torch.cat([self.ref(j, per, r * per) for j in range(n)]))]
        elif nm == "gather":
            pairs = [(x, self.ref(j, per)) for j, x in enumerate(self.outs)] if r == 0 else []
        elif nm == "scatter":
            pairs = [(self.out, self.ref(r, per))]
        elif nm == "sendrecv":
            pairs = [(self.out, self.ref((r - 1) % n, self.out.numel()))]
        return sum(int((x != y).sum().item()) for x, y in pairs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", default="allreduce", choices=sorted(BUS) + ["all"],
                   help="the op to time (all: every one, in turn)")
    p.add_argument("--min", type=size_arg, default=8)
    p.add_argument("--max", type=size_arg, default=128 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=15, help="at least this many rounds per size")
    p.add_argument("--block-ms", type=float, default=3.0, help="milliseconds per block (sets iterations)")
    p.add_argument("--time-budget", type=float, default=1.0, help="seconds of rounds per size, at least")
    a = p.parse_args()
    # torch 2.x warns on every all_gather_into_tensor / reduce_scatter_tensor call of this form.
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch_accl  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("accl", init_method="env://", timeout=timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    sdk = dist.distributed_c10d._get_default_group()
    if hasattr(sdk, "_get_backend"):  # torch 2.x: the accl Backend behind the ProcessGroup
        sdk = sdk._get_backend(torch.device("cpu"))

    def run(op, name, iters):
        if name == "cxx":
            for _ in range(iters):
                sdk._sdk_all_reduce(op.inp, True)
        else:
            grp = gloo if name == "gloo" else None
            for _ in range(iters):
                op.call(grp)

    def block(op, name, iters):
        """Seconds per call over `iters` calls, as this rank saw them."""
        dist.barrier()
        t0 = time.perf_counter()
        run(op, name, iters)
        return (time.perf_counter() - t0) / iters

    ops = list(BUS) if a.op == "all" else [a.op]
    for opname in ops:
        # The C++ level is the allreduce call alone.
        names = ("gloo", "accl", "cxx") if opname == "allreduce" else ("gloo", "accl")
        if rank == 0:
            print(f"# torch {opname} float32{' sum' if opname in ('allreduce', 'reduce', 'reduce_scatter') else ''}, "
                  f"{n} ranks, torch {torch.__version__}; median of "
                  f"interleaved blocks (~{a.block_ms:g} ms each, each after a barrier, >= {a.rounds} rounds); "
                  f"C++ = the blocking SDK call; vs_cxx = median of paired block ratios [min, max]")
            print(f"# {'bytes':>10} {'gloo_us':>10} {'accl_us':>10} {'cxx_us':>10} {'t_ratio':>8} {'gloo_busbw':>11} "
                  f"{'accl_busbw':>11} {'cxx_busbw':>10} {'bw_ratio':>8} {'vs_cxx':>7} {'vs_cxx_range':>13} "
                  f"{'wrong':>5}", flush=True)
        b = a.min
        while b <= a.max:
            op = Op(opname, max(b // 4, 1), rank, n)
            try:
                op.call(gloo)
            except (RuntimeError, ValueError) as e:  # an op this torch's gloo lacks: say so, go on
                if rank == 0:
                    print(f"# {opname}: torch's gloo refused it ({str(e).splitlines()[0]}); skipped", flush=True)
                break
            # Iterations per block from a probe of each path, agreed by all ranks (the
            # slowest rank's probe), so that every rank runs the same number of calls.
            iters = {}
            for name in names:
                run(op, name, 2)
                probe = torch.tensor([block(op, name, 3)], dtype=torch.float64)
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
                order = [k for k in (("accl", "cxx") if r % 2 == 0 else ("cxx", "accl")) if k in names] + ["gloo"]
                for name in order:
                    samples[name].append(block(op, name, iters[name]))
                r += 1
                stop = torch.tensor([1.0 if (r >= a.rounds and time.perf_counter() > t_end) or r >= 400 else 0.0])
                dist.all_reduce(stop, op=dist.ReduceOp.MIN, group=gloo)
                if stop.item() > 0:
                    break
            times = torch.tensor([samples[k] for k in names], dtype=torch.float64)
            dist.all_reduce(times, op=dist.ReduceOp.MAX, group=gloo)
            med = {k: times[i].median().item() for i, k in enumerate(names)}
            if "cxx" in names:
                pair = times[1] / times[2]  # accl / C++ time per round: > 1 means torch slower
                vs_cxx = f"{1.0 / pair.median().item():.2f}"
                rng = f"[{1.0 / pair.max().item():.2f},{1.0 / pair.min().item():.2f}]"
            else:
                vs_cxx, rng = "-", "-"
            # Every path's result after one call on fresh inputs, summed over the ranks.
            wrong = 0
            for name in names:
                op.fill()
                run(op, name, 1)
                wrong += op.wrong()
            w = torch.tensor([wrong], dtype=torch.float64)
            dist.all_reduce(w, group=gloo)
            if rank == 0:
                nbytes = op.count * 4
                bw = {k: nbytes / v / 1e9 * BUS[opname](n) for k, v in med.items()}
                cxx_us = f"{med['cxx'] * 1e6:.2f}" if "cxx" in med else "-"
                cxx_bw = f"{bw['cxx']:.3f}" if "cxx" in bw else "-"
                print(f"  {nbytes:>10} {med['gloo'] * 1e6:>10.2f} {med['accl'] * 1e6:>10.2f} "
                      f"{cxx_us:>10} {med['gloo'] / med['accl']:>8.2f} {bw['gloo']:>11.3f} "
                      f"{bw['accl']:>11.3f} {cxx_bw:>10} {bw['accl'] / bw['gloo']:>8.2f} "
                      f"{vs_cxx:>7} {rng:>13} {int(w.item()):>5}", flush=True)
            b *= a.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
