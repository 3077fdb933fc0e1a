"""What the scenario scripts of the tests share (tests/diag/diag_test.py, tests/accl/fault_matrix.py): named
checks that print ok/FAIL and count failures, and a main that runs one scenario in a temporary folder.
Exit 0: every check passed, 1: one failed; a scenario exits 77 itself when it must be skipped."""
import shutil
import sys
import tempfile

failures = []


def transports_for(param):
    """ACCL_TRANSPORTS for a scenario's transport argument: shm is shared memory between the ranks (tcp kept for
    the rest); tcp and ib are that transport alone (ib runs in the soft-RoCE guest, tests/rdma/in_guest.sh)."""
    return {"tcp": "tcp", "ib": "ib"}.get(param, "shm,tcp")


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(scenarios, name, prefix):
    if name not in scenarios:
        raise SystemExit(f"unknown scenario {name}; accepted: {', '.join(scenarios)}")
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        scenarios[name](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0
