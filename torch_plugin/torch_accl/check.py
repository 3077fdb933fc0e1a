"""python -m torch_accl.check: versions, C++ ABI, the ACCL backends usable on
this host, and a 2-process self-test of backend="accl" (exit status 0 if it passed)."""
import multiprocessing as mp
import socket
import sys
import traceback
from datetime import timedelta


def _selftest(rank, world_size, port, q):
    try:
        import torch
        import torch.distributed as dist
        import torch_accl  # noqa: F401
        dist.init_process_group("accl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=60))
        n = 1 << 16
        x = torch.arange(n, dtype=torch.float32) * (rank + 1)
        dist.all_reduce(x)
        want = torch.arange(n, dtype=torch.float32) * sum(range(1, world_size + 1))
        ok = torch.equal(x, want)
        out = [torch.empty(3, dtype=torch.int64) for _ in range(world_size)]
        dist.all_gather(out, torch.full((3,), rank, dtype=torch.int64))
        ok = ok and all(torch.equal(o, torch.full((3,), r, dtype=torch.int64)) for r, o in enumerate(out))
        b = torch.full((5,), float(rank))
        dist.broadcast(b, src=world_size - 1)
        ok = ok and torch.equal(b, torch.full((5,), float(world_size - 1)))
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, ok, ""))
    except BaseException:
        q.put((rank, False, traceback.format_exc()))


def main():
    import torch
    try:
        import torch_accl
    except ImportError as e:
        print(f"torch_accl: cannot load: {e}")
        return 1
    print(f"torch          : {torch.__version__} (C++11 ABI: {bool(torch._C._GLIBCXX_USE_CXX11_ABI)})")
    print(f"torch_accl     : built for torch {torch_accl._C.torch_version} "
          f"(C++11 ABI: {bool(torch_accl._C.cxx11_abi)})")
    print(f"ACCL           : {torch_accl.version()}")
    print("ACCL backends  :")
    for b in torch_accl.backends():
        state = "usable" if b["usable"] else f"not usable: {b['reason']}"
        print(f"  {b['name']:<6} {state}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_selftest, args=(r, 2, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in procs:
            r, ok, err = q.get(timeout=120)
            results[r] = (ok, err)
    except Exception:
        pass
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    passed = len(results) == 2 and all(ok for ok, _ in results.values())
    print(f"self-test      : 2 processes, backend='accl': all_reduce, all_gather, broadcast, barrier: "
          f"{'passed' if passed else 'FAILED'}")
    for r, (ok, err) in sorted(results.items()):
        if not ok and err:
            print(f"rank {r}:\n{err}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
