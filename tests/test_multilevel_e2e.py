"""prep partition --method multilevel end to end: a killed run reruns to the same bytes, and
its assignment dispatches, verifies and trains (split from test_multilevel.py: these start
processes and take ~45 s)."""

import os
import signal
import subprocess
import sys
import time


from faultkit import PREP, ROOT


def test_killed_run_reruns_to_identical_bytes(homo, tmp_path, prep):
    """A multilevel run SIGKILLed mid-hierarchy (embedded cluster: its workers die with it),
    then rerun, writes the bytes of an uninterrupted run."""
    opts = ["-p", "4", "--method", "multilevel", "--coarse-edges", "10000"]
    prep("partition", homo, tmp_path / "ref", *opts)
    out = tmp_path / "a"
    proc = subprocess.Popen([PREP, "partition", str(homo),
                             str(out), *opts, "--no-progress", "--workers", "2"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    scratch = tmp_path / ".a.partial" / ".multilevel"
    deadline = time.time() + 90
    while time.time() < deadline and not (scratch / "L01").exists() and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)          # killed during coarsening
    proc.wait()
    assert not (out / "_N.npy").exists()
    prep("partition", homo, out, *opts)
    assert (out / "_N.npy").read_bytes() == (tmp_path / "ref" / "_N.npy").read_bytes()


def test_dispatch_verify_and_train_on_multilevel(cora_chunked, tmp_path, prep):
    prep("partition", cora_chunked, tmp_path / "a", "-p", 2, "--method", "multilevel",
         "--coarse-edges", 1000, "--balance", "train")
    prep("dispatch", cora_chunked, tmp_path / "a", tmp_path / "d")
    r = prep("verify", cora_chunked, tmp_path / "d")
    assert "verified" in r.output, r.output
    proc = subprocess.run([sys.executable, "-m", "trainer", "--graph",
                           str(tmp_path / "d" / "graph.json"), "--epochs", "2", "--threads",
                           "1", "--no-progress", "--fanouts", "5,5", "--checkpoint-dir",
                           str(tmp_path / "ckpt")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

