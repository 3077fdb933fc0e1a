import subprocess
import sys


def test_check_module_reports_and_self_tests():
    out = subprocess.run([sys.executable, "-m", "torch_accl.check"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for want in ("torch          :", "C++11 ABI", "ACCL backends  :", "accl   usable", "self-test", "passed"):
        assert want in out.stdout, out.stdout
