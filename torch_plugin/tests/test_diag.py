"""Diagnosis from torch: the stall warning names the late rank, torch_accl.dump_traces() writes the flight
recorder, and torch_accl.diag reads the dumps of all ranks."""
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

from cluster import spawn


def late_rank(rank, world_size, port, tmp):
    import torch
    import torch.distributed as dist
    import torch_accl
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))
    x = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(x)
    if rank == 1:
        time.sleep(5)  # the others wait in all_reduce #3 meanwhile, and warn
    dist.all_reduce(x)
    dist.barrier()
    path = torch_accl.dump_traces()
    dist.destroy_process_group()
    return path, x[0].item()


def test_stall_warning_dump_and_diag():
    tmp = tempfile.mkdtemp(prefix="accl-torch-diag-")
    env = {"ACCL_STALL_WARN": "1s", "ACCL_TRACE_DIR": os.path.join(tmp, "traces"),
           "ACCL_DEBUG_FILE": os.path.join(tmp, "log-%p.txt")}
    res = spawn(3, late_rank, tmp, env=env, timeout=120)
    paths = []
    for rank, (code, val) in enumerate(res):
        assert code == 0 and isinstance(val, tuple), (rank, val)
        path, value = val
        assert value == 3 ** 4, val  # four sums over 3 ranks of ones
        assert os.path.basename(path).startswith("accl-trace-"), path
        paths.append(path)
    assert len(set(paths)) == 3, paths  # one file per process
    # Ranks 0 and 2 waited 5 s for rank 1 in the 4th all_reduce (#3): one WARN each, naming rank 1.
    logs = ""
    for name in os.listdir(tmp):
        if name.startswith("log-"):
            with open(os.path.join(tmp, name)) as f:
                logs += f.read()
    warns = [line for line in logs.splitlines() if "WARN COLL" in line and "has waited" in line]
    assert {line.split("[rank ")[1][0] for line in warns} == {"0", "2"}, warns
    assert all("allreduce #3 " in line and "did not arrive: 1 (" in line for line in warns), warns
    # The dumps: every op with its collective number, and the stall in the entry of #3.
    for rank, path in enumerate(paths):
        with open(path) as f:
            d = json.load(f)
        assert d["format"] == "accl-trace/1" and d["reason"] == "on request"
        g = [g for g in d["groups"] if g["backend"] == "accl" and g["rank"] == rank][0]
        colls = {e["coll"]: e for e in g["entries"] if e["coll"] >= 0}
        assert [colls[c]["op"] for c in range(5)] == ["allreduce"] * 4 + ["barrier"], g["entries"]
        assert all(colls[c]["state"] == "done" and colls[c]["count"] == 1000 for c in range(4))
        if rank != 1:
            assert "did not arrive: 1 (" in colls[3].get("note", ""), colls[3]
    # torch_accl.diag on the dumps of all ranks: nothing in flight, nothing failed.
    r = subprocess.run([sys.executable, "-m", "torch_accl.diag", os.path.join(tmp, "traces")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    assert "3 dump(s)" in r.stdout and "no collective in flight; the last one (#4) completed" in r.stdout, r.stdout


def late_rank_asks_store(rank, world_size, port, tmp):
    import torch
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=90))
    x = torch.ones(10)
    for _ in range(3):
        dist.all_reduce(x)
    out = None
    if rank == 1:
        # The others wait in all_reduce #3 meanwhile. Ask the job through torch's own TCPStore (the init
        # method's): every process answers there, this one too (its watch is a thread of its own).
        time.sleep(1)
        r = subprocess.run([sys.executable, "-m", "torch_accl.diag", "--store", f"127.0.0.1:{port}",
                            "--store-kind", "torch", "--wait", "15", "--brief"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        out = (r.returncode, r.stdout)
    dist.all_reduce(x)
    value = x[0].item()
    dist.destroy_process_group()
    return out, value


def test_diag_asks_a_live_torch_job_through_its_tcpstore():
    tmp = tempfile.mkdtemp(prefix="accl-torch-diag-store-")
    env = {"ACCL_DIAG_POLL": "500ms", "ACCL_TRACE_DIR": os.path.join(tmp, "traces")}
    res = spawn(3, late_rank_asks_store, tmp, env=env, timeout=180)
    for rank, (code, val) in enumerate(res):
        assert code == 0 and isinstance(val, tuple), (rank, val)
        assert val[1] == 3 ** 4, val  # four sums over 3 ranks of ones: the query changed no result
    rc, out = res[1][1][0]
    print(out)
    assert rc == 0, out
    assert "3 dump(s)" in out, out  # every process answered, the asking one too
    verdict = [line.strip() for line in out.splitlines()]
    assert any(line.startswith("rank 1 ") and "never entered allreduce #3" in line for line in verdict), out
    assert any(line.startswith("ranks 0,2 ") and "wait in allreduce #3" in line for line in verdict), out
    assert "no answer" not in out, out


def stopped_rank_asks_store(rank, world_size, port, tmp):
    import signal
    import torch
    import torch.distributed as dist
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=90))
    x = torch.ones(10)
    for _ in range(3):
        dist.all_reduce(x)
    out = None
    pid_file = os.path.join(tmp, "stopped.pid")
    if rank == 2:
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops: this process cannot answer
    if rank == 1:
        while not os.path.exists(pid_file):
            time.sleep(0.05)
        time.sleep(1)
        r = subprocess.run([sys.executable, "-m", "torch_accl.diag", "--store", f"127.0.0.1:{port}",
                            "--store-kind", "torch", "--wait", "5", "--brief"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        with open(pid_file) as f:
            stopped = int(f.read())
        os.kill(stopped, signal.SIGCONT)
        out = (r.returncode, r.stdout, stopped)
    dist.all_reduce(x)
    value = x[0].item()
    dist.destroy_process_group()
    return out, value


def test_diag_through_the_tcpstore_names_a_stopped_process():
    tmp = tempfile.mkdtemp(prefix="accl-torch-diag-stop-")
    env = {"ACCL_DIAG_POLL": "500ms", "ACCL_TRACE_DIR": os.path.join(tmp, "traces")}
    res = spawn(3, stopped_rank_asks_store, tmp, env=env, timeout=180)
    for rank, (code, val) in enumerate(res):
        assert code == 0 and isinstance(val, tuple), (rank, val)
        assert val[1] == 3 ** 4, val
    rc, out, stopped = res[1][1][0]
    print(out)
    assert rc == 0, out
    assert "2 dump(s)" in out, out
    verdict = [line.strip() for line in out.splitlines()]
    assert any(line.startswith("rank 1 ") and "never entered allreduce #3" in line for line in verdict), out
    assert any(line.startswith(f"no answer through the store from process ") and f" pid {stopped} rank 2" in line
               for line in verdict), out
