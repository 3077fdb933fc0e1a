"""Several processes that stay up across tests: each joins a torch.distributed
world with backend="accl" and a gloo group over the same ranks, then runs
the functions the test sends it. run() returns each rank's result or raises
with every failing rank's traceback."""
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
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


def _die_with_parent():
    """Ends this rank when the test process dies (a killed pytest, a stopped CI
    run): a rank waits for its next task or its peers, and would outlive it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the line above
        os._exit(1)


def _worker(rank, world_size, port, env, timeout_s, tasks, results):
    _die_with_parent()
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


def describe_exit(code):
    """'exit code 3' or 'killed by SIGSEGV' for a process's exitcode."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


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
        """Every rank's answer; fails at once, naming it, when a rank dies
        without answering (a crash), else after `timeout` seconds."""
        out, errors, pending = [None] * self.world_size, [], set(range(self.world_size))
        deadline = time.monotonic() + timeout
        while pending:
            try:
                rank, ok, val = self.results.get(timeout=1)
            except queue.Empty:
                dead = [r for r in sorted(pending) if self.procs[r].exitcode is not None]
                if dead:
                    try:  # an answer may still be in the queue's pipe
                        rank, ok, val = self.results.get(timeout=2)
                    except queue.Empty:
                        raise AssertionError("ranks died without answering: " + ", ".join(
                            f"rank {r} ({describe_exit(self.procs[r].exitcode)})" for r in dead)) from None
                elif time.monotonic() > deadline:
                    raise AssertionError(f"no answer within {timeout} s from ranks {sorted(pending)}") from None
                else:
                    continue
            pending.discard(rank)
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
    deadline = time.time() + timeout
    while len(res) < world_size and time.time() < deadline:
        try:
            r, val = q.get(timeout=0.5)
            res[r] = val
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=max(1, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join()
    return [(procs[r].exitcode, res.get(r)) for r in range(world_size)]


def _oneoff(fn, rank, world_size, port, args, env, q):
    _die_with_parent()
    os.environ.update(env)
    try:
        q.put((rank, fn(rank, world_size, port, *args)))
    except BaseException:
        q.put((rank, "raised: " + traceback.format_exc()))
