"""ACCL collectives as a torch.distributed backend.

    import torch_accl
    torch.distributed.init_process_group(backend="accl")

Importing registers the backend (once; importing again or calling
register() again does nothing). ACCL_TORCH_BACKEND=gloo|mpi|nccl runs the
same adapter over another ACCL backend, for comparisons.

torch.distributed.monitored_barrier accepts only gloo groups; register()
also lets it take "accl" groups (every other group goes to torch's own
function unchanged). torch_accl.monitored_barrier is the same function.
"""
import atexit
import ctypes
import inspect
import os

import torch
import torch.distributed as dist

__all__ = ["register", "backends", "version", "monitored_barrier", "BACKEND_NAME"]

BACKEND_NAME = "accl"


def _versions_hint():
    return (
        f"torch {torch.__version__} (C++11 ABI: {bool(torch._C._GLIBCXX_USE_CXX11_ABI)}); "
        "rebuild torch_accl against the torch you run: "
        "python3 -m pip install --no-build-isolation <ACCL source>/torch_plugin "
        "(or scripts/build.sh with ACCL_PYTHON pointing at this interpreter)"
    )


def _load_extension():
    # Installed package: libaccl and the backend modules sit in torch_accl/lib.
    libdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    if os.path.isdir(libdir):
        for name in sorted(os.listdir(libdir)):
            if name.startswith("libaccl.so"):
                ctypes.CDLL(os.path.join(libdir, name), mode=ctypes.RTLD_GLOBAL)
                break
    try:
        from . import _C
    except ImportError as e:
        raise ImportError(f"torch_accl: the extension does not load ({e}). It was built for another "
                          f"torch or C++ ABI than this process has: {_versions_hint()}") from e
    built = _C.torch_version.split("+")[0].split(".")[:2]
    running = torch.__version__.split("+")[0].split(".")[:2]
    if built != running or bool(_C.cxx11_abi) != bool(torch._C._GLIBCXX_USE_CXX11_ABI):
        raise ImportError(f"torch_accl was built for torch {_C.torch_version} (C++11 ABI: {bool(_C.cxx11_abi)}), "
                          f"but this process runs {_versions_hint()}")
    return _C


_C = _load_extension()
# Before the interpreter shuts down, completing ops stop touching torch objects
# (a thread that frees a tensor's Python object then would be ended mid-way),
# so that a script may exit without destroy_process_group() or with ops in flight.
atexit.register(_C._prepare_exit, 5.0)


_torch_monitored_barrier = dist.distributed_c10d.monitored_barrier


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, for "accl" groups too.

    Every rank reports to rank 0 within `timeout` (default: the group's);
    rank 0 raises naming the first rank that did not (every one with
    wait_all_ranks=True), the others raise when rank 0 does not release
    them. Groups of other backends go to torch's own function.
    """
    c10d = dist.distributed_c10d
    if group is not None and c10d._rank_not_in_group(group):
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    pg = group if group is not None else c10d._get_default_group()
    if dist.get_backend(pg) != BACKEND_NAME:
        return _torch_monitored_barrier(group, timeout, wait_all_ranks)
    if timeout is None:  # the binding's default (None, or a negative timedelta on 1.13): the group's
        return pg.monitored_barrier(wait_all_ranks=wait_all_ranks)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def register():
    """Registers backend "accl" with torch.distributed (idempotent)."""
    plugins = getattr(dist.Backend, "_plugins", {})
    if dist.monitored_barrier is _torch_monitored_barrier:
        dist.monitored_barrier = monitored_barrier
        dist.distributed_c10d.monitored_barrier = monitored_barrier
    if BACKEND_NAME.upper() in plugins:
        return
    kwargs = {}
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:  # torch >= 2.1: one backend object serves CPU and CUDA tensors
        kwargs["devices"] = ["cpu", "cuda"]
    if "extended_api" in params:  # sub-groups get their global ranks and name
        dist.Backend.register_backend(BACKEND_NAME, _C.create_extended, extended_api=True, **kwargs)
    else:
        dist.Backend.register_backend(BACKEND_NAME, _C.create, **kwargs)


def dump_traces(reason="on request"):
    """Writes the flight recorder of every ACCL group of this process (the last ACCL_TRACE_BUFFER
    collectives and as many point-to-point ops of each, with their state, algorithm and timing) to ACCL_TRACE_DIR/accl-trace-<host>-<pid>.json and
    returns the path ("" when ACCL_TRACE_BUFFER=0). Call it on every rank, e.g. from a watchdog, then
    run `accl-diag DIR` (or `python -m torch_accl.diag DIR`) on the files of all ranks."""
    return _C.dump_traces(reason)


def backends():
    """The ACCL backends of this install: dicts with name, description, usable, reason."""
    return _C.backends()


def version():
    return _C.accl_version


register()
