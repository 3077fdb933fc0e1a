"""The BERT example on 2 ranks with backend="accl": the loss falls, and a run
resumed from a checkpoint continues from its step."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "examples", "bert", "pretrain.py")


def run(args, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [os.environ["TEST_ACCL_RUN"], "-n", "2", sys.executable, SCRIPT, "--config", "tiny", "--backend", "accl",
           "--seq-len", "64", "--batch-size", "4", "--warmup", "5", "--log-every", "10",
           "--data-dir", str(tmp_path)] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_tiny_loss_falls_and_resume_continues(tmp_path):
    ck = str(tmp_path / "ck.pt")
    out = run(["--steps", "40", "--checkpoint", ck, "--save-every", "20"], tmp_path)
    first, last = map(float, re.search(r"done: first loss ([\d.]+), last loss ([\d.]+)", out).groups())
    assert last < first - 0.5, out  # from ~9.7 (uniform over 8000 tokens) clearly down
    assert "comm" in out and "samples/s" in out
    out2 = run(["--steps", "50", "--checkpoint", ck, "--resume"], tmp_path)
    assert "resumed from" in out2 and "at step 40" in out2, out2
    assert re.search(r"step +50/50", out2), out2
