"""Every torch.distributed op on backend="accl", checked against a reference
computed from every rank's inputs and, where torch's gloo supports the op and
dtype, against gloo in the same processes."""
import time

import pytest
import torch
import torch.distributed as dist

from cluster import Cluster

WS = 3
R = dist.ReduceOp
# Reduce ops by name ("premul" is PREMUL_SUM with factor 2.5).
OPS = {"sum": R.SUM, "avg": R.AVG, "product": R.PRODUCT, "min": R.MIN, "max": R.MAX,
       "band": R.BAND, "bor": R.BOR, "bxor": R.BXOR}


def torch_op(name):
    return dist._make_nccl_premul_sum(2.5) if name == "premul" else OPS[name]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(WS)
    yield c
    c.close()


def make(rank, shape, dtype, seed, op=None):
    """Rank `rank`'s input: deterministic, so every rank can compute every other's."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        re = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
        im = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
        return torch.complex(re, im).to(dtype)
    if dtype.is_floating_point:
        if op == "product":
            return (0.75 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
    lo, hi = (0, 5) if op == "product" else ((0, 100) if dtype == torch.uint8 else (-50, 50))
    if op in ("band", "bor", "bxor"):
        lo, hi = 0, 100
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def reference(inputs, op, dtype, scale=None):
    wide = torch.float64 if (dtype.is_floating_point or dtype.is_complex) else torch.int64
    if dtype.is_complex:
        wide = torch.complex128
    xs = [x.to(wide) for x in inputs]
    if op in ("sum", "avg") or op == "premul":
        if dtype == torch.bool:
            out = torch.stack(xs).any(0)
        else:
            out = sum(xs[1:], xs[0].clone()) if op != "premul" else sum(x * scale for x in xs)
            if op == "avg":
                out = out / len(xs)
    elif op == "product":
        out = torch.stack(xs).prod(0) if dtype != torch.bool else torch.stack(xs).all(0)
    elif op == "min":
        out = torch.stack(xs).min(0).values
    elif op == "max":
        out = torch.stack(xs).max(0).values
    else:
        out = xs[0].clone()
        for x in xs[1:]:
            out = {"band": out & x, "bor": out | x, "bxor": out ^ x}[op]
    return out.to(dtype)


def close(got, want, dtype, n=WS):
    if dtype.is_floating_point or dtype.is_complex:
        tol = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5,
               torch.float64: 1e-12, torch.complex64: 1e-5, torch.complex128: 1e-12}[dtype] * n
        return torch.allclose(got.to(torch.complex128 if dtype.is_complex else torch.float64),
                              want.to(torch.complex128 if dtype.is_complex else torch.float64),
                              rtol=tol, atol=tol)
    return torch.equal(got, want)


def valid_ops(dtype):
    if dtype == torch.bool:
        return ["sum", "product", "min", "max", "band", "bor", "bxor"]
    if dtype.is_floating_point:
        return ["sum", "avg", "product", "min", "max", "premul"]
    return ["sum", "product", "min", "max", "band", "bor", "bxor"]


def gloo_dtype(dtype):
    """Whether torch's gloo carries this dtype (it has no bool, bfloat16 or complex)."""
    return dtype not in (torch.bool, torch.bfloat16) and not dtype.is_complex


def gloo_supports(op, dtype):
    return op not in ("avg", "premul") and gloo_dtype(dtype)


# ---------------------------------------------------------------- workers

def w_all_reduce(ctx, dtype, count):
    bad = []
    for i, op in enumerate(valid_ops(dtype)):
        seed = 100 + i
        x = make(ctx.rank, (count,), dtype, seed, op)
        want = reference([make(r, (count,), dtype, seed, op) for r in range(ctx.world_size)],
                         op, dtype, scale=2.5)
        y = x.clone()
        dist.all_reduce(y, op=torch_op(op))
        if not close(y, want, dtype):
            bad.append(f"{op}: max diff {(y.double() - want.double()).abs().max()}")
        if gloo_supports(op, dtype):
            z = x.clone()
            dist.all_reduce(z, op=torch_op(op), group=ctx.gloo)
            if not close(y, z, dtype):
                bad.append(f"{op}: differs from gloo")
    assert not bad, bad
    return True


def w_broadcast(ctx, dtype):
    for root in range(ctx.world_size):
        x = make(ctx.rank, (5, 7), dtype, root)
        want = make(root, (5, 7), dtype, root)
        y = x.clone()
        dist.broadcast(y, src=root)
        assert torch.equal(y, want)
        # Non-contiguous: a transposed view is written in place.
        base = make(ctx.rank, (7, 5), dtype, root + 10)
        view = base.t()
        dist.broadcast(view, src=root)
        assert torch.equal(base, make(root, (7, 5), dtype, root + 10))
        if gloo_dtype(dtype):
            g = x.clone()
            dist.broadcast(g, src=root, group=ctx.gloo)
            assert torch.equal(g, y)
    return True


def w_reduce(ctx, dtype):
    for root in range(ctx.world_size):
        for op in valid_ops(dtype):
            if op == "premul":
                continue
            x = make(ctx.rank, (33,), dtype, 3, op)
            y = x.clone()
            dist.reduce(y, dst=root, op=torch_op(op))
            if ctx.rank == root:
                want = reference([make(r, (33,), dtype, 3, op) for r in range(ctx.world_size)], op, dtype)
                assert close(y, want, dtype), (root, op)
    return True


def w_gathers(ctx, dtype):
    n = ctx.world_size
    x = make(ctx.rank, (4, 3), dtype, 5)
    alls = [make(r, (4, 3), dtype, 5) for r in range(n)]
    out = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(out, x)
    assert all(torch.equal(a, b) for a, b in zip(out, alls))
    flat = torch.empty((n * 4, 3), dtype=dtype)
    dist.all_gather_into_tensor(flat, x)
    assert torch.equal(flat, torch.cat(alls))
    for root in range(n):
        g = [torch.empty_like(x) for _ in range(n)] if ctx.rank == root else None
        dist.gather(x, gather_list=g, dst=root)
        if ctx.rank == root:
            assert all(torch.equal(a, b) for a, b in zip(g, alls))
        s = torch.empty_like(x)
        chunks = [make(root, (4, 3), dtype, 50 + r) for r in range(n)] if ctx.rank == root else None
        dist.scatter(s, scatter_list=chunks, src=root)
        assert torch.equal(s, make(root, (4, 3), dtype, 50 + ctx.rank))
    if gloo_dtype(dtype):
        out2 = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(out2, x, group=ctx.gloo)
        assert all(torch.equal(a, b) for a, b in zip(out, out2))
    return True


def w_reduce_scatter(ctx, dtype):
    n = ctx.world_size
    for op in valid_ops(dtype):
        if op == "premul":
            continue
        ins = [make(ctx.rank, (6,), dtype, 60 + j, op) for j in range(n)]
        out = torch.empty((6,), dtype=dtype)
        dist.reduce_scatter(out, ins, op=torch_op(op))
        want = reference([make(r, (6,), dtype, 60 + ctx.rank, op) for r in range(n)], op, dtype)
        assert close(out, want, dtype), op
        big = torch.cat(ins)
        out2 = torch.empty((6,), dtype=dtype)
        dist.reduce_scatter_tensor(out2, big, op=torch_op(op))
        assert close(out2, want, dtype), op
    return True


def w_all_to_all(ctx, dtype):
    n, me = ctx.world_size, ctx.rank
    # Even splits.
    x = make(me, (n * 2, 3), dtype, 70)
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    want = torch.cat([make(r, (n * 2, 3), dtype, 70)[2 * me:2 * me + 2] for r in range(n)])
    assert torch.equal(y, want)
    if gloo_dtype(dtype):
        g = torch.empty_like(x)
        dist.all_to_all_single(g, x, group=ctx.gloo)
        assert torch.equal(g, y)

    # Uneven splits: rank s sends (s + d) % 3 + 1 rows to rank d.
    def rows(s, d):
        return (s + d) % 3 + 1
    ins = [rows(me, d) for d in range(n)]
    outs = [rows(s, me) for s in range(n)]
    x = make(me, (sum(ins), 2), dtype, 71)
    y = torch.empty((sum(outs), 2), dtype=dtype)
    dist.all_to_all_single(y, x, output_split_sizes=outs, input_split_sizes=ins)
    parts = []
    for s in range(n):
        xs = make(s, (sum(rows(s, d) for d in range(n)), 2), dtype, 71)
        off = sum(rows(s, d) for d in range(me))
        parts.append(xs[off:off + rows(s, me)])
    assert torch.equal(y, torch.cat(parts))
    # List form.
    il = [make(me, (d + 1,), dtype, 72 + d) for d in range(n)]
    ol = [torch.empty((me + 1,), dtype=dtype) for _ in range(n)]
    dist.all_to_all(ol, il)
    for s in range(n):
        assert torch.equal(ol[s], make(s, (me + 1,), dtype, 72 + me))
    return True


def w_p2p(ctx):
    n, me = ctx.world_size, ctx.rank
    nxt, prv = (me + 1) % n, (me - 1) % n
    x = torch.arange(10, dtype=torch.float32) + 100 * me
    y = torch.empty(10)
    s = dist.isend(x, nxt, tag=3)
    r = dist.irecv(y, prv, tag=3)
    s.wait()
    r.wait()
    assert torch.equal(y, torch.arange(10, dtype=torch.float32) + 100 * prv)
    # Blocking, and recv from any source (returns the sender).
    if me == 0:
        seen = set()
        for _ in range(n - 1):
            t = torch.empty(1, dtype=torch.int64)
            src = dist.recv(t, tag=5)  # own tag: later messages from faster ranks must not match
            assert t.item() == src * 11
            seen.add(src)
        assert seen == set(range(1, n))
    else:
        dist.send(torch.tensor([me * 11]), 0, tag=5)
    # batch_isend_irecv
    a = torch.full((4,), float(me))
    b = torch.empty(4)
    ops = [dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.irecv, b, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(b, torch.full((4,), float(prv)))
    return True


def w_objects(ctx):
    n, me = ctx.world_size, ctx.rank
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": me, "s": "x" * me})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(n)]
    lst = [("hello", 1), [2, 3]] if me == 1 else [None, None]
    dist.broadcast_object_list(lst, src=1)
    assert lst == [("hello", 1), [2, 3]]
    g = [None] * n if me == 0 else None
    dist.gather_object(me * 2, g, dst=0)
    if me == 0:
        assert g == [2 * r for r in range(n)]
    out = [None]
    dist.scatter_object_list(out, [f"to{r}" for r in range(n)] if me == 2 else None, src=2)
    assert out == [f"to{me}"]
    return True


def w_async(ctx):
    x = torch.ones(1000) * (ctx.rank + 1)
    w = dist.all_reduce(x, async_op=True)
    assert w.wait()
    assert w.is_completed()
    total = sum(range(1, ctx.world_size + 1))
    assert torch.all(x == total)
    fut = dist.all_reduce(torch.ones(5), async_op=True).get_future()
    res = fut.wait()
    assert torch.equal(res[0], torch.full((5,), float(ctx.world_size)))
    # then() chains like gloo's futures (what DDP comm hooks use).
    fut2 = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    assert torch.equal(fut2.wait(), torch.full((3,), 2.0 * ctx.world_size))
    # A future asked for while its op still waits (the message comes 0.3 s
    # later) completes when the op does; one asked for twice is the same.
    dist.barrier()
    if ctx.rank == 0:
        t = torch.zeros(4)
        w = dist.irecv(t, src=1)
        fut = w.get_future()
        assert not fut.done() and not w.is_completed()
        res = fut.wait()
        assert torch.equal(res[0], torch.arange(4.0)) and torch.equal(t, torch.arange(4.0))
        assert w.get_future().done()
    elif ctx.rank == 1:
        time.sleep(0.3)
        dist.send(torch.arange(4.0), dst=0)
    dist.barrier()
    return True


def w_subgroup(ctx):
    g = dist.new_group([0, 2])
    x = torch.ones(4) * (ctx.rank + 1)
    if ctx.rank in (0, 2):
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.full((4,), 4.0))
        assert dist.get_world_size(g) == 2
    dist.barrier()
    return True


def w_complex_and_bad_dtype(ctx):
    x = make(ctx.rank, (8,), torch.complex64, 90)
    dist.all_reduce(x)
    want = reference([make(r, (8,), torch.complex64, 90) for r in range(ctx.world_size)], "sum", torch.complex64)
    assert close(x, want, torch.complex64)
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
    except RuntimeError as e:
        assert "int16" in str(e).lower() or "short" in str(e).lower(), str(e)
        assert "accepted" in str(e), str(e)
    else:
        raise AssertionError("int16 all_reduce did not raise")
    try:
        dist.all_reduce(torch.ones(3), op=R.BAND)
    except RuntimeError as e:
        assert "band" in str(e).lower(), str(e)
    else:
        raise AssertionError("BAND on float32 did not raise")
    dist.barrier()  # the group still works
    return True


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("count", [1, 1000, 70001])
def test_all_reduce(cluster, dtype, count):
    cluster.run(w_all_reduce, dtype, count)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_broadcast(cluster, dtype):
    cluster.run(w_broadcast, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16], ids=str)
def test_reduce(cluster, dtype):
    cluster.run(w_reduce, dtype)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_gathers_and_scatter(cluster, dtype):
    cluster.run(w_gathers, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bool, torch.bfloat16], ids=str)
def test_reduce_scatter(cluster, dtype):
    cluster.run(w_reduce_scatter, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool, torch.bfloat16, torch.complex64], ids=str)
def test_all_to_all(cluster, dtype):
    cluster.run(w_all_to_all, dtype)


def test_point_to_point(cluster):
    cluster.run(w_p2p)


def test_object_collectives(cluster):
    cluster.run(w_objects)


def test_async_work_and_futures(cluster):
    cluster.run(w_async)


def test_new_group(cluster):
    cluster.run(w_subgroup)


def test_complex_and_refused_dtypes(cluster):
    cluster.run(w_complex_and_bad_dtype)
