"""What torch 2.x asks of a backend beyond the ops: coalescing
(_coalescing_manager, batch_isend_irecv), the *_tensor_coalesced ops, sequence
numbers, DistBackendError, profiler titles, object collectives and re-init
after destroy_process_group. Results are checked against torch's gloo in the
same processes or against a reference computed from every rank's inputs.
Skipped, with the reason, on torch < 2.1."""
import pytest
import torch
import torch.distributed as dist

from cluster import Cluster, spawn

WS = 3
TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(TORCH < (2, 1), reason=f"torch {torch.__version__}: these APIs are torch >= 2.1")


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(WS)
    yield c
    c.close()


def inputs(rank, n, k, seed):
    g = torch.Generator().manual_seed(seed * 101 + rank)
    return [torch.randn(n + i, generator=g) for i in range(k)]


def expected_sum(n, k, seed):
    per = [inputs(r, n, k, seed) for r in range(WS)]
    return [sum(per[r][i] for r in range(WS)) for i in range(k)]


def _coalesced_all_reduce(ctx):
    xs = inputs(ctx.rank, 1000, 4, 1)
    with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    return xs


def test_coalescing_manager_all_reduce(cluster):
    want = expected_sum(1000, 4, 1)
    for got in cluster.run(_coalesced_all_reduce):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _start_end_coalescing(ctx):
    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    xs = inputs(ctx.rank, 333, 3, 2)
    pg._start_coalescing(torch.device("cpu"))
    for x in xs:
        dist.all_reduce(x)
    work = pg._end_coalescing(torch.device("cpu"))
    work.wait()
    return xs, bool(getattr(backend, "supports_coalescing", True))


def test_start_end_coalescing_work_covers_every_op(cluster):
    want = expected_sum(333, 3, 2)
    for got, supports in cluster.run(_start_end_coalescing):
        assert supports
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _batch_isend_irecv(ctx):
    r, n = ctx.rank, ctx.world_size
    send = torch.full((1000,), float(r))
    recv_l, recv_r = torch.empty(1000), torch.empty(1000)
    ops = [dist.P2POp(dist.isend, send, (r + 1) % n), dist.P2POp(dist.irecv, recv_l, (r - 1) % n),
           dist.P2POp(dist.isend, send * 10, (r - 1) % n), dist.P2POp(dist.irecv, recv_r, (r + 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return recv_l[0].item(), recv_r[0].item(), recv_l.eq(recv_l[0]).all().item()


def test_batch_isend_irecv_ring(cluster):
    for r, (left, right, uniform) in enumerate(cluster.run(_batch_isend_irecv)):
        assert left == float((r - 1) % WS) and right == 10.0 * ((r + 1) % WS) and uniform


def _tensor_coalesced(ctx):
    pg = dist.distributed_c10d._get_default_group()
    ins = inputs(ctx.rank, 64, 3, 3)
    outs = [torch.empty(WS * x.numel()) for x in ins]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    # reduce_scatter_tensor_coalesced, compared with gloo's reduce_scatter_tensor per tensor
    big = [torch.randn(WS * 50 + 0, generator=torch.Generator().manual_seed(9 + ctx.rank + 10 * i))
           for i in range(2)]
    rs = [torch.empty(50) for _ in big]
    pg.reduce_scatter_tensor_coalesced(rs, [b.clone() for b in big], dist.ReduceScatterOptions()).wait()
    ref = []
    for b in big:
        per_rank = list(b.clone().chunk(WS))
        out = torch.empty(50)
        dist.reduce_scatter(out, per_rank, group=ctx.gloo)
        ref.append(out)
    return outs, rs, ref


def test_allgather_and_reduce_scatter_tensor_coalesced(cluster):
    per = [inputs(r, 64, 3, 3) for r in range(WS)]
    for outs, rs, ref in cluster.run(_tensor_coalesced):
        for i, out in enumerate(outs):
            torch.testing.assert_close(out, torch.cat([per[r][i] for r in range(WS)]))
        for g, w in zip(rs, ref):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _sequence_numbers(ctx):
    # torch's ProcessGroup forwards sequence numbers only for its own backend
    # types; a plugin's are on its Backend object.
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    a = backend._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(4))
    dist.barrier()
    return a, backend._get_sequence_number_for_group()


def test_sequence_numbers_agree_and_count_collectives(cluster):
    res = cluster.run(_sequence_numbers)
    assert len(set(res)) == 1, res  # the same on every rank
    a, b = res[0]
    assert b == a + 2, res


def _profiled(ctx):
    from torch.profiler import ProfilerActivity, profile
    x = torch.ones(4096)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        dist.all_reduce(x)
        dist.broadcast(x, 0)
    return [(e.key, e.count) for e in prof.key_averages()]


def test_profiler_shows_each_collective(cluster):
    for events in cluster.run(_profiled):
        names = dict(events)
        assert names.get("accl:all_reduce") == 1, sorted(names)
        assert names.get("accl:broadcast") == 1, sorted(names)


def _objects(ctx):
    got = [None] * ctx.world_size
    dist.all_gather_object(got, {"rank": ctx.rank, "text": "x" * ctx.rank})
    objs = [f"from {ctx.rank}", [1, 2]] if ctx.rank == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    return got, objs


def test_object_collectives(cluster):
    for got, objs in cluster.run(_objects):
        assert got == [{"rank": r, "text": "x" * r} for r in range(WS)]
        assert objs == ["from 0", [1, 2]]


def _reinit(rank, world_size, port):
    from datetime import timedelta
    import torch_accl  # noqa: F401
    out = []
    for round_ in range(2):
        # A fresh rendezvous per round (a file store named by this test's port).
        dist.init_process_group("accl", init_method=f"file:///tmp/accl-reinit-{port}-{round_}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=60))
        x = torch.full((100,), float(rank + round_))
        dist.all_reduce(x)
        out.append(x[0].item())
        dist.destroy_process_group()
    return out


def test_destroy_then_init_again_in_the_same_process():
    res = spawn(2, _reinit, timeout=120)
    for code, val in res:
        assert code == 0, val
        assert val == [0.0 + 1.0, 1.0 + 2.0], val
