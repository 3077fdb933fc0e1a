"""DDP with backend="accl" trains to the same parameters as with torch's gloo,
in the same processes from the same initial weights and data."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from cluster import Cluster

WS = 3


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(WS)
    yield c
    c.close()


class Net(nn.Module):
    def __init__(self, unused_branch=False):
        super().__init__()
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 8)
        self.unused = nn.Linear(64, 8) if unused_branch else None

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def train(ctx, group, steps, find_unused=False, hook=None, no_sync_every=0, members=None, static_graph=False):
    torch.manual_seed(1234)
    model = Net(unused_branch=find_unused)
    ddp = DDP(model, process_group=group, find_unused_parameters=find_unused, bucket_cap_mb=0.01,
              static_graph=static_graph)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    me = members.index(ctx.rank) if members else ctx.rank
    for step in range(steps):
        g = torch.Generator().manual_seed(step * 100 + me)
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 8, generator=g)
        if no_sync_every and step % no_sync_every != no_sync_every - 1:
            with ddp.no_sync():  # accumulate locally, reduce on the next synced step
                nn.functional.mse_loss(ddp(x), y).backward()
            continue
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def compare(ctx, tol=(1e-5, 1e-6), **kw):
    """tol: (rtol, atol) between the accl and gloo runs; float32 sums in another
    order differ in the last bits."""
    members = kw.get("members")
    accl_group = kw.pop("accl_group", None)
    gloo_group = kw.pop("gloo_group", ctx.gloo)
    a = train(ctx, accl_group, 12, **kw)
    g = train(ctx, gloo_group, 12, **kw)
    assert len(a) == len(g)
    for pa, pg in zip(a, g):
        assert torch.allclose(pa, pg, rtol=tol[0], atol=tol[1]), (pa - pg).abs().max()
    # Replicas agree with each other (training actually synchronized).
    flat = torch.cat([p.reshape(-1) for p in a])
    grp = accl_group if accl_group is not None else None
    ref = flat.clone()
    dist.broadcast(ref, src=members[0] if members else 0, group=grp)
    assert torch.equal(flat, ref)
    return True


def w_plain(ctx):
    return compare(ctx)


def w_unused(ctx):
    return compare(ctx, find_unused=True)


def w_hook(ctx):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    # Gradients travel as float16 (unit roundoff 4.9e-4): summed in another order
    # they differ by about one float16 ulp per step.
    return compare(ctx, tol=(2e-3, 2e-4), hook=default_hooks.fp16_compress_hook)


def w_no_sync(ctx):
    return compare(ctx, no_sync_every=3)


def w_static(ctx):
    return compare(ctx, static_graph=True)


def w_subgroup(ctx):
    members = [0, 2]
    sub_accl = dist.new_group(members)
    sub_gloo = dist.new_group(members, backend="gloo")
    if ctx.rank in members:
        compare(ctx, accl_group=sub_accl, gloo_group=sub_gloo, members=members)
    dist.barrier()
    return True


@pytest.mark.parametrize("case", [w_plain, w_unused, w_hook, w_no_sync, w_static, w_subgroup],
                         ids=["plain", "find_unused_parameters", "fp16_comm_hook", "no_sync", "static_graph",
                              "subgroup"])
def test_ddp_matches_gloo(cluster, case):
    cluster.run(case)
