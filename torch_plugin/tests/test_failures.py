"""Failures surface as exceptions torch users catch, never as hangs."""
import os
import signal
import time
from datetime import timedelta

import pytest

from cluster import Cluster, spawn


def killed_rank(rank, world_size, port):
    import torch
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))
    x = torch.ones(1 << 20)
    dist.all_reduce(x)
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    try:
        for _ in range(100):
            dist.all_reduce(x)
    except RuntimeError as e:
        res = ("raised", str(e), time.time() - start, type(e).__name__)
        dist.destroy_process_group()  # tearing down a group after a peer died must not crash
        return res
    return ("no error", "", time.time() - start, "")


def test_killed_rank_raises_in_the_others():
    res = spawn(3, killed_rank, timeout=120)
    assert res[2][0] == -signal.SIGKILL
    for rank in (0, 1):
        code, val = res[rank]
        assert code == 0, (rank, val)
        kind, msg, secs, cls = val
        assert kind == "raised", val
        assert "rank 2" in msg, msg
        assert secs < 30, val  # well within the 60 s timeout
        # torch >= 2.1: a communication failure is dist.DistBackendError, as with torch's own backends.
        import torch.distributed as dist
        if hasattr(dist, "DistBackendError"):
            assert cls == "DistBackendError", val


def absent_rank(rank, world_size, port):
    import torch
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=3))
    dist.barrier()
    if rank == 1:
        time.sleep(12)  # never enters the all_reduce in time
        return ("slept", "", 0)
    start = time.time()
    try:
        dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        return ("raised", str(e), time.time() - start)
    return ("no error", "", time.time() - start)


def test_init_timeout_is_honoured():
    res = spawn(2, absent_rank, timeout=60)
    code, val = res[0]
    assert code == 0, val
    kind, msg, secs = val
    assert kind == "raised", val
    assert "allreduce" in msg and "did not arrive: 1" in msg, msg
    assert 2.5 < secs < 10, val  # the 3 s from init_process_group(timeout=...)


def wrong_backend_env(rank, world_size, port):
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    try:
        dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=10))
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_invalid_env_value_is_a_clear_error():
    res = spawn(1, wrong_backend_env, env={"ACCL_TORCH_BACKEND": "bogus"})
    msg = res[0][1]
    assert "ACCL_TORCH_BACKEND" in msg and "accl, gloo, mpi, nccl" in msg, msg


def registration(rank, world_size, port):
    import importlib
    import torch.distributed as dist
    import torch_accl
    torch_accl.register()
    importlib.reload(torch_accl)  # registering again is a no-op
    return dist.Backend("accl") == "accl" and "ACCL" in dist.Backend._plugins


def test_registration_is_idempotent():
    assert spawn(1, registration)[0] == (0, True)


def via_sdk_backend(rank, world_size, port, name):
    import torch
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=30))
    x = torch.ones(10) * (rank + 1)
    dist.all_reduce(x)
    pg = dist.distributed_c10d._get_default_group()
    return (pg.sdk_backend if hasattr(pg, "sdk_backend") else name, x[0].item())


def test_routes_through_the_sdk_gloo_backend():
    res = spawn(2, via_sdk_backend, "gloo", env={"ACCL_TORCH_BACKEND": "gloo"})
    assert [r[1] for r in res] == [("gloo", 3.0), ("gloo", 3.0)], res


# A script that leaves without destroy_process_group(), or with ops in flight,
# or that destroys its group with ops still queued: every rank must exit 0.
# The threads that complete accl ops hold torch Works (and tensors with Python
# objects); one that let go of them while the interpreter shut down was ended
# by Python mid-destructor (std::terminate, "terminate called without an
# active exception"), and a group destroyed with the GIL held while its worker
# needed the GIL to let go of a tensor would deadlock.
EXIT_SCRIPT = r'''
import sys
import torch
import torch.distributed as dist
import torch_accl  # noqa: F401
torch.set_num_threads(1)
dist.init_process_group("accl")
t = torch.ones(1 << 20)
for _ in range(30):
    dist.all_reduce(t, async_op=True).wait()  # completed on the group's worker thread
    dist.all_reduce(torch.ones(1 << 18))
pattern = sys.argv[1]
if pattern == "in-flight":
    works = [dist.all_reduce(torch.ones(1 << 20), async_op=True) for _ in range(6)]
elif pattern == "dropped":
    for _ in range(6):
        dist.all_reduce(torch.ones(1 << 20), async_op=True)  # Work and tensor dropped at once
elif pattern == "destroy-pending":
    for _ in range(6):
        dist.all_reduce(torch.ones(1 << 20), async_op=True)
    dist.destroy_process_group()
print("leaving", flush=True)
'''


def _run_exit_script(pattern, rounds):
    import subprocess
    import sys
    from cluster import free_port
    for i in range(rounds):
        port = free_port()
        procs = []
        for rank in range(2):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE="2", LOCAL_RANK=str(rank))
            procs.append(subprocess.Popen([sys.executable, "-c", EXIT_SCRIPT, pattern], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for rank, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError(f"{pattern}, round {i}: rank {rank} did not exit within 90 s")
            assert p.returncode == 0 and "leaving" in out, (pattern, i, rank, p.returncode, err[-2000:])
            assert "terminate called" not in err, (pattern, i, rank, err[-2000:])


def test_exit_without_destroy_or_with_ops_in_flight():
    for pattern in ("plain", "in-flight", "dropped", "destroy-pending"):
        _run_exit_script(pattern, int(os.environ.get("ACCL_EXIT_ROUNDS", "4")))


def _crash(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return ctx.rank


def test_a_crashed_rank_fails_the_test_at_once_with_its_signal():
    # The harness itself: a rank that dies without answering (a segfault in
    # the extension, say) is named with its signal within seconds, not after
    # the whole timeout.
    c = Cluster(2)
    try:
        t0 = time.monotonic()
        with pytest.raises(AssertionError, match=r"rank 1 \(killed by SIGSEGV\)"):
            c.run(_crash, timeout=120)
        assert time.monotonic() - t0 < 30
    finally:
        c.close()
