import os
import re
import subprocess
import sys


def test_check_module_reports_and_self_tests():
    out = subprocess.run([sys.executable, "-m", "torch_accl.check"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for want in ("torch          :", "C++11 ABI", "ACCL backends  :", "accl   usable", "self-test", "passed"):
        assert want in out.stdout, out.stdout


def test_call_cost_bench_runs_and_reports_both_paths():
    # bench/torch_call_cost.py (docs/performance.md): one rank, a short run; the
    # script itself checks that the 1-rank sum left its tensor at ones.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "torch_call_cost.py")
    cmd = [os.environ["TEST_ACCL_RUN"], "-n", "1", sys.executable, script, "--touch", "0,1", "--iters", "50",
           "--loops", "1", "--repeat", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = re.findall(r"touch (\d+) MiB per call: torch +([\d.]+) us, C\+\+ +([\d.]+) us", out.stdout)
    assert [m for m, _, _ in lines] == ["0", "1"], out.stdout
    for _, torch_us, cxx_us in lines:
        assert float(torch_us) > 0 and float(cxx_us) > 0, out.stdout
