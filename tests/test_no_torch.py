"""`prep` never imports torch: every step runs in a process where importing torch fails."""

import subprocess
import sys

from faultkit import ROOT

BLOCKED = """
import sys
sys.modules["torch"] = None          # any `import torch` now raises ImportError
from click.testing import CliRunner
from pipeline.cli import prep
out = sys.argv[1]
for args in (["synth", f"{out}/g", "--nodes", "300", "--edges", "2000"],
             ["partition", f"{out}/g", f"{out}/a", "-p", "2", "--method", "metis"],
             ["dispatch", f"{out}/g", f"{out}/a", f"{out}/d"],
             ["verify", f"{out}/g", f"{out}/d"]):
    result = CliRunner().invoke(prep, args + ["--workers", "1", "--no-progress"])
    assert result.exit_code == 0, (args, result.output, result.exception)
assert "torch" not in {m for m, v in sys.modules.items() if v is not None}
print("ok")
"""


def test_prep_runs_with_torch_blocked(tmp_path):
    proc = subprocess.run([sys.executable, "-c", BLOCKED, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
