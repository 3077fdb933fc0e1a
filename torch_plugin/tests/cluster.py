"""Several processes that stay up across tests: each joins a torch.distributed
world with backend="accl" and a gloo group over the same ranks, then runs
the functions the test sends it. run() returns each rank's result or raises
with every failing rank's traceback."""
import multiprocessing as mp
import os
import socket
import traceback
from datetime import timedelta


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ctx:
    def __init__(self, rank, world_size, gloo):
        self.rank = rank
        self.world_size = world_size
        self.gloo = gloo  # torch's own gloo over the same ranks: the reference


def _worker(rank, world_size, port, env, timeout_s, tasks, results):
    os.environ.update(env)
    try:
        import torch
        import torch.distributed as dist
        import torch_accl  # noqa: F401  registers backend "accl"
        torch.set_num_threads(1)
        dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout_s))
        gloo = dist.new_group(backend="gloo")
        ctx = Ctx(rank, world_size, gloo)
        results.put((rank, True, "ready"))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
        return
    while True:
        task = tasks.get()
        if task is None:
            break
        fn, args = task
        try:
            results.put((rank, True, fn(ctx, *args)))
        except BaseException:
            results.put((rank, False, traceback.format_exc()))
    try:
        dist.destroy_process_group()
    except BaseException:
        pass


class Cluster:
    def __init__(self, world_size, env=None, timeout_s=60):
        self.world_size = world_size
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(world_size)]
        port = free_port()
        self.procs = [ctx.Process(target=_worker, args=(r, world_size, port, dict(env or {}), timeout_s,
                                                        self.tasks[r], self.results), daemon=True)
                      for r in range(world_size)]
        for p in self.procs:
            p.start()
        self._collect(120)

    def _collect(self, timeout):
        out, errors = [None] * self.world_size, []
        for _ in range(self.world_size):
            try:
                rank, ok, val = self.results.get(timeout=timeout)
            except Exception:
                dead = [r for r, p in enumerate(self.procs) if not p.is_alive()]
                raise AssertionError(f"no answer within {timeout} s (ranks not running: {dead})")
            if ok:
                out[rank] = val
            else:
                errors.append(f"rank {rank}:\n{val}")
        if errors:
            raise AssertionError("\n".join(errors))
        return out

    def run(self, fn, *args, timeout=300):
        for q in self.tasks:
            q.put((fn, args))
        return self._collect(timeout)

    def close(self):
        for q in self.tasks:
            q.put(None)
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def spawn(world_size, fn, *args, env=None, timeout=120):
    """One-off processes (fresh worlds, e.g. for failure tests): fn(rank, world_size, port, *args)
    in each; returns per-rank (exitcode, result or traceback)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_oneoff, args=(fn, r, world_size, port, args, dict(env or {}), q))
             for r in range(world_size)]
    for p in procs:
        p.start()
    res = {}
    import queue as _q
    import time
    deadline = time.time() + timeout
    while len(res) < world_size and time.time() < deadline:
        try:
            r, val = q.get(timeout=0.5)
            res[r] = val
        except _q.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=max(1, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join()
    return [(procs[r].exitcode, res.get(r)) for r in range(world_size)]


def _oneoff(fn, rank, world_size, port, args, env, q):
    os.environ.update(env)
    try:
        q.put((rank, fn(rank, world_size, port, *args)))
    except BaseException:
        q.put((rank, "raised: " + traceback.format_exc()))
