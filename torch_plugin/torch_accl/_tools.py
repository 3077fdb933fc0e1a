"""Console scripts of the wheel: accl-info, accl-perf, accl-run and accl-topo
run the binaries packaged in torch_accl/bin (libaccl and the backend modules
in torch_accl/lib, found through their run paths)."""
import os
import sys

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(tool):
    path = os.path.join(BIN, tool)
    if not os.access(path, os.X_OK):
        sys.exit(f"{tool}: not in this install of torch_accl ({BIN}); it is packaged in the wheel, "
                 "not in a source-tree build (use <build>/bin/" + tool + " there)")
    os.execv(path, [tool] + sys.argv[1:])


def accl_info():
    _exec("accl-info")


def accl_perf():
    _exec("accl-perf")


def accl_run():
    _exec("accl-run")


def accl_topo():
    _exec("accl-topo")
