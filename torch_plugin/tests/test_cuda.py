"""CUDA tensors on backend="accl" (CTest label gpu). Where they go is
ACCL_TORCH_CUDA's choice: ACCL's nccl backend (like cpu:gloo,cuda:nccl) or
staged through host memory. The first tests run on any host (the choice and
its reasons); the rest need a GPU, two for NCCL (which refuses two ranks on
one GPU), and skip with the reason elsewhere."""
import os

import pytest
import torch
import torch.distributed as dist

from cluster import Cluster, spawn

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def nccl_usable():
    # Asked inside a test, never at import: spawned ranks import this module
    # before they set their environment, and ACCL reads it once.
    import torch_accl
    return any(b["name"] == "nccl" and b["usable"] for b in torch_accl.backends())
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="no CUDA device on this host (torch.cuda.is_available() is False)")
needs_2_gpus = pytest.mark.skipif(GPUS < 2, reason=f"{GPUS} CUDA device(s) here; NCCL refuses two ranks on one "
                                                   "GPU, so the nccl path needs two")


def _path(rank, world_size, port):
    import datetime
    import torch_accl  # noqa: F401
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=30))
    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu")) if hasattr(pg, "_get_backend") else pg  # torch 2.x / 1.13
    try:
        return backend.cuda_path
    except RuntimeError as e:
        return "error: " + str(e)
    finally:
        dist.destroy_process_group()


def path_with(env):
    res = spawn(2, _path, env=env, timeout=60)
    assert all(code == 0 for code, _ in res), res
    return res[0][1]


def test_without_a_usable_nccl_device_tensors_are_staged_and_the_reason_given():
    if nccl_usable():
        pytest.skip("this host can run the nccl path")
    p = path_with({})
    assert p.startswith("stage (ACCL's nccl backend is not usable here: "), p


def test_stage_is_chosen_by_the_variable():
    assert path_with({"ACCL_TORCH_CUDA": "stage"}) == "stage (ACCL_TORCH_CUDA=stage)"


def test_nccl_demanded_where_it_cannot_run_says_what_is_accepted():
    if nccl_usable():
        pytest.skip("this host can run the nccl path")
    p = path_with({"ACCL_TORCH_CUDA": "NCCL"})
    assert p.startswith("error: ") and "ACCL_TORCH_CUDA=nccl, but ACCL's nccl backend is not usable here" in p, p
    assert "accepted here: ACCL_TORCH_CUDA=stage" in p, p


@needs_2_gpus
def test_an_sdk_backend_of_device_memory_takes_device_tensors_directly():
    assert path_with({"ACCL_TORCH_BACKEND": "nccl"}).startswith("direct ("), "ACCL_TORCH_BACKEND=nccl"


def _bad_value(rank, world_size, port):
    import datetime
    import torch_accl  # noqa: F401
    try:
        dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=20))
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "initialized"


def test_an_invalid_value_is_refused_at_init_naming_the_accepted_ones():
    res = spawn(1, _bad_value, env={"ACCL_TORCH_CUDA": "gpu"}, timeout=60)
    msg = res[0][1]
    assert "ACCL_TORCH_CUDA" in msg and "gpu" in msg and "auto, nccl, stage" in msg, msg


# ---------------------------------------------------------------- on a GPU

def _device_ops(ctx):
    dev = torch.device("cuda", ctx.rank % GPUS)
    torch.cuda.set_device(dev)
    side = torch.cuda.Stream(dev)
    out = {}
    with torch.cuda.stream(side):
        # Work queued on a non-default stream just before the op: the op must
        # see its result (it is ordered after the current stream).
        a = torch.randn(2048, 2048, device=dev)
        x = (a @ a).sum(dim=0)
        x.fill_(ctx.rank + 1.0)
        dist.all_reduce(x)
        out["after_side_stream"] = x.cpu()
        w = dist.all_reduce(torch.full((5,), float(ctx.rank), device=dev), async_op=True)
        fut = w.get_future()
        out["future_devices"] = [str(t.device) for t in fut.wait()]
        y = torch.arange(6, device=dev, dtype=torch.float32) * (ctx.rank + 1)
        gathered = [torch.empty_like(y) for _ in range(ctx.world_size)]
        dist.all_gather(gathered, y)
        out["all_gather"] = [g.cpu() for g in gathered]
    torch.cuda.synchronize(dev)
    # A leaf that requires grad: the staged result goes back without autograd.
    p = torch.ones(3, device=dev, requires_grad=True)
    with torch.no_grad():
        dist.all_reduce(p)
    out["leaf"] = p.detach().cpu()
    return out


def check_device_ops(res, ws):
    total = sum(r + 1.0 for r in range(ws))
    for out in res:
        assert torch.all(out["after_side_stream"] == total)
        assert all(d.startswith("cuda") for d in out["future_devices"])
        for r, g in enumerate(out["all_gather"]):
            assert torch.equal(g, torch.arange(6, dtype=torch.float32) * (r + 1))
        assert torch.all(out["leaf"] == ws)


def run_2_ranks(cuda_path, fn):
    """fn on 2 fresh ranks with ACCL_TORCH_CUDA=cuda_path; their results."""
    c = Cluster(2, env={"ACCL_TORCH_CUDA": cuda_path})
    try:
        return c.run(fn)
    finally:
        c.close()


@needs_gpu
def test_staged_device_tensors_follow_the_current_stream():
    check_device_ops(run_2_ranks("stage", _device_ops), 2)


@needs_2_gpus
def test_device_tensors_through_the_nccl_backend():
    check_device_ops(run_2_ranks("nccl", _device_ops), 2)


@needs_gpu
def test_device_tensors_through_the_nccl_backend_on_one_rank():
    # What a host with one GPU can check of the nccl path: the route, the
    # group's own store, the stream and the futures' devices.
    if not nccl_usable():
        pytest.skip("ACCL's nccl backend is not usable here (built without NCCL?)")
    c = Cluster(1, env={"ACCL_TORCH_CUDA": "nccl"})
    try:
        check_device_ops(c.run(_device_ops), 1)
    finally:
        c.close()


def _shared_gpu(ctx):
    torch.cuda.set_device(0)
    x = torch.full((8,), ctx.rank + 1.0, device="cuda:0")
    try:
        dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001
        return "error: " + str(e)
    return x.cpu().tolist()


@needs_gpu
def test_two_ranks_on_one_gpu_through_nccl_fail_clearly_or_reduce():
    # NCCL refuses two ranks of a communicator on one GPU: every rank must get
    # an error that says what to do, at once, not a hang or a crash. (An NCCL
    # that accepts it must reduce correctly.)
    if not nccl_usable():
        pytest.skip("ACCL's nccl backend is not usable here (built without NCCL?)")
    res = run_2_ranks("nccl", _shared_gpu)
    for out in res:
        if isinstance(out, str):
            assert "NCCL" in out and "one rank per GPU" in out and "LOCAL_RANK" in out, out
        else:
            assert out == [3.0] * 8, out


def _ddp_cuda(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP
    dev = torch.device("cuda", ctx.rank % GPUS)
    torch.cuda.set_device(dev)
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if GPUS > 1 else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(5):
        g = torch.Generator().manual_seed(step * 10 + ctx.rank)
        x = torch.randn(8, 32, generator=g).to(dev)
        ddp(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


@needs_gpu
def test_ddp_on_device_tensors_keeps_replicas_equal():
    res = run_2_ranks("nccl" if GPUS >= 2 else "stage", _ddp_cuda)
    assert torch.equal(res[0], res[1])


if os.environ.get("ACCL_REQUIRE_GPU") == "1" and GPUS < 1:  # a GPU host's CI: a skip would hide a failure
    raise RuntimeError("ACCL_REQUIRE_GPU=1 but torch sees no CUDA device")


def _bound_device(rank, world_size, port):
    import datetime
    import torch_accl  # noqa: F401
    from torch.distributed.device_mesh import init_device_mesh
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    # Bound to a device, torch creates sub-groups by splitting the default one.
    dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60), device_id=dev)
    try:
        sub = dist.new_group([0, 1])
        mesh = init_device_mesh("cuda", (world_size,), mesh_dim_names=("dp",))
        t = torch.full((4,), rank + 1.0, device=dev)
        dist.all_reduce(t, group=sub)
        u = torch.full((4,), rank + 1.0, device=dev)
        dist.all_reduce(u, group=mesh.get_group("dp"))
        return t.cpu().tolist(), u.cpu().tolist()
    finally:
        dist.destroy_process_group()


@needs_2_gpus
@pytest.mark.skipif(tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 8),
                    reason=f"torch {torch.__version__}: Backend.split needs torch >= 2.8")
def test_new_group_and_device_mesh_after_init_with_device_id():
    res = spawn(2, _bound_device, timeout=120)
    assert all(code == 0 for code, _ in res), res
    for _, (t, u) in res:
        assert t == [3.0] * 4 and u == [3.0] * 4
