"""torch 2.x parallelism on backend="accl", 4 ranks: DeviceMesh and its
sub-meshes, the functional collectives (eager and under torch.compile),
split_group, monitored_barrier, and training parity with torch's gloo for
FSDP2 (fully_shard) and a 2-D mesh (replicate x shard). References are either
computed from every rank's inputs or the same training run over gloo groups in
the same processes. Each test skips, with the reason, on a torch without the API."""
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from cluster import Cluster

WS = 4
TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def needs(version, what):
    return pytest.mark.skipif(TORCH < version, reason=f"torch {torch.__version__}: {what} needs torch >= "
                                                      f"{version[0]}.{version[1]}")


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(WS)
    yield c
    c.close()


def data(rank, n, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed * 97 + rank))


# ---------------------------------------------------------------- DeviceMesh

def _mesh(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    out = {}
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        sub = mesh[dim]
        assert dist.get_backend(group) == "accl", dist.get_backend(group)
        assert sub.size() == 2 and sub.get_group() is group
        t = data(ctx.rank, 33, 1)
        dist.all_reduce(t, group=group)
        out[dim] = (t, dist.get_process_group_ranks(group))
    return out


@needs((2, 2), "init_device_mesh")
def test_device_mesh_sub_meshes_reduce_over_their_ranks(cluster):
    res = cluster.run(_mesh)
    for rank, out in enumerate(res):
        # Row-major 2x2 mesh: dp groups {0,2},{1,3}; tp groups {0,1},{2,3}.
        assert out["dp"][1] == sorted({rank % 2, rank % 2 + 2})
        assert out["tp"][1] == sorted({rank // 2 * 2, rank // 2 * 2 + 1})
        for dim in ("dp", "tp"):
            t, ranks = out[dim]
            ref = sum(data(r, 33, 1) for r in ranks)
            assert torch.allclose(t, ref, rtol=1e-6, atol=1e-6), dim


# ---------------------------------------------------------------- functional collectives

def _funcol(ctx, compiled):
    import torch.distributed._functional_collectives as funcol
    group = dist.group.WORLD

    def f(x):
        a = funcol.all_reduce(x * 2, "sum", group)
        g = funcol.all_gather_tensor(x, 0, group)
        r = funcol.reduce_scatter_tensor(g, "sum", 0, group)
        s = funcol.all_to_all_single(x, None, None, group)
        return a + 1, g, r, s

    x = data(ctx.rank, 8, 2)
    if compiled:
        torch._dynamo.reset()
        f = torch.compile(f, fullgraph=True)  # a graph break would raise
    return [t.clone() for t in f(x)]


@needs((2, 1), "the functional collectives")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch_compile"])
def test_functional_collectives(cluster, compiled):
    res = cluster.run(_funcol, compiled, timeout=600)
    xs = [data(r, 8, 2) for r in range(WS)]
    gathered = torch.cat(xs)
    for rank, (a, g, r, s) in enumerate(res):
        assert torch.allclose(a, sum(xs) * 2 + 1, rtol=1e-5, atol=1e-5)
        assert torch.equal(g, gathered)
        assert torch.allclose(r, gathered[rank * 8:(rank + 1) * 8] * WS, rtol=1e-5, atol=1e-5)
        assert torch.equal(s, torch.cat([xs[p][rank * 2:(rank + 1) * 2] for p in range(WS)]))


# ---------------------------------------------------------------- split

def _split(ctx):
    pg = dist.distributed_c10d._get_default_group()
    assert pg._get_backend(torch.device("cpu")).supports_splitting
    mine = [0, 3] if ctx.rank in (0, 3) else [1, 2]
    sub = pg.split_group(mine, timeout=timedelta(seconds=30), group_name=f"split-{mine[0]}{mine[1]}")
    t = data(ctx.rank, 17, 3)
    sub.allreduce([t]).wait()
    # A split that leaves this rank out gives no group.
    other = pg.split_group([0, 1], timeout=timedelta(seconds=30), group_name="split-01")
    return t, mine, sub.rank(), sub.size(), other is None


@needs((2, 8), "Backend.split")
def test_split_group_gives_working_sub_groups(cluster):
    res = cluster.run(_split)
    for rank, (t, mine, sub_rank, sub_size, left_out) in enumerate(res):
        assert (sub_rank, sub_size) == (mine.index(rank), 2)
        assert torch.allclose(t, sum(data(r, 17, 3) for r in mine), rtol=1e-6, atol=1e-6)
        assert left_out == (rank not in (0, 1))


# ---------------------------------------------------------------- monitored_barrier

def _monitored(ctx, late, wait_all):
    dist.monitored_barrier(timeout=timedelta(seconds=20))  # everyone on time
    if ctx.rank in late:
        time.sleep(3)
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=1.5), wait_all_ranks=wait_all)
        err = None
    except RuntimeError as e:
        err = str(e)
    # The group still works, and so does the next monitored_barrier (the late
    # ranks' reports of the failed call are not taken for this one).
    dist.monitored_barrier(timeout=timedelta(seconds=20))
    t = torch.ones(1)
    dist.all_reduce(t)
    return err, t.item()


@pytest.mark.parametrize("wait_all", [False, True], ids=["first_rank", "wait_all_ranks"])
def test_monitored_barrier_names_the_late_ranks(cluster, wait_all):
    res = cluster.run(_monitored, [1, 3], wait_all)
    err0 = res[0][0]
    assert err0 is not None
    if wait_all:
        assert "Ranks 1, 3 failed to pass monitoredBarrier in 1500 ms" in err0, err0
    else:
        assert "Rank 1 failed to pass monitoredBarrier in 1500 ms" in err0, err0
    assert "not released by rank 0" in res[2][0], res[2][0]
    assert all(r[1] == WS for r in res)


def _monitored_ok(ctx):
    for _ in range(3):
        dist.monitored_barrier(timeout=timedelta(seconds=20), wait_all_ranks=True)
    return True


def test_monitored_barrier_passes_when_all_arrive(cluster):
    assert cluster.run(_monitored_ok) == [True] * WS


# ---------------------------------------------------------------- FSDP2 parity

class Block(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.emb = nn.Embedding(50, dim)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0,
                                                               batch_first=True) for _ in range(2))
        self.out = nn.Linear(dim, 50)

    def forward(self, x):
        h = self.emb(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def _fsdp_train(mesh, steps, data_rank):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(7)
    model = Block()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + data_rank)
        x = torch.randint(0, 50, (4, 12), generator=g)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 50), x.roll(1, 1).reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def _fsdp(ctx, two_d):
    from torch.distributed.device_mesh import init_device_mesh
    shape, names = ((2, 2), ("dp", "shard")) if two_d else ((WS,), ("shard",))
    accl_mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    gloo_mesh = init_device_mesh("cpu", shape, mesh_dim_names=names,
                                 backend_override={n: "gloo" for n in names})
    assert dist.get_backend(accl_mesh.get_group(names[-1])) == "accl"
    assert dist.get_backend(gloo_mesh.get_group(names[-1])) == "gloo"
    a = _fsdp_train(accl_mesh, 6, ctx.rank)
    g = _fsdp_train(gloo_mesh, 6, ctx.rank)
    worst = max((x - y).abs().max().item() for x, y in zip(a, g))
    moved = max((x - y).abs().max().item() for x, y in zip(a, _initial()))
    return worst, moved, torch.cat([p.reshape(-1) for p in a])


def _initial():
    torch.manual_seed(7)
    return [p.detach() for p in Block().parameters()]


@needs((2, 6), "torch.distributed.fsdp.fully_shard")
@pytest.mark.parametrize("two_d", [False, True], ids=["fsdp2_4_ranks", "2d_mesh_dp2_x_shard2"])
def test_fsdp2_matches_gloo(cluster, two_d):
    res = cluster.run(_fsdp, two_d, timeout=600)
    for worst, moved, flat in res:
        # float32 sums in another order differ in the last bits (measured: up
        # to 2.2e-8 after 6 SGD steps); training itself moved the weights by 2e-2.
        assert worst < 1e-6, worst
        assert moved > 1e-2, moved
        assert torch.equal(flat, res[0][2])  # every rank ends with the same model
