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
