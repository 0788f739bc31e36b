"""What README says of torch, exactly: ``prep`` never imports torch, in its own process or in
its Dask workers, except where it reads or writes torch's own files: ``prep chunk`` of PyG
inputs (``torch.load``) and ``prep export --to pyg|dgl`` (``torch.save``, DGL). Without torch,
those two exit in one line naming what to install.

One script runs every command in a process tree where torch, torch_geometric and dgl cannot
be imported (a ``sitecustomize`` on ``PYTHONPATH`` blocks them in the client and in every
worker its local cluster spawns) and finally asks each worker whether torch got in.
"""

import os
import subprocess
import sys

from faultkit import ROOT

BLOCKER = 'import sys\nfor name in ("torch", "torch_geometric", "dgl"):\n    sys.modules[name] = None\n'

SCRIPT = r"""
import os, sys
import numpy as np
from click.testing import CliRunner
from graphprep.pipeline.cli import prep
from graphprep.pipeline.core.cluster import local_cluster

out, data = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/csv")
with open(f"{out}/csv/edges.csv", "w") as f:
    f.write("src,dst\n0,1\n1,2\n2,0\n3,1\n")
os.makedirs(f"{out}/npy")
np.save(f"{out}/npy/src.npy", np.array([0, 1, 2, 3]))
np.save(f"{out}/npy/dst.npy", np.array([1, 2, 0, 1]))

def run(*args, code=0):
    result = CliRunner().invoke(prep, [*args, "--no-progress", "--scheduler", address]
                                if args[0] != "inspect" else list(args))
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.output

with local_cluster(1) as cluster:
    address = cluster.scheduler_address
    run("synth", f"{out}/g", "--nodes", "300", "--edges", "2000")
    run("validate", f"{out}/g")
    run("chunk", f"{out}/csv", f"{out}/c1")
    run("chunk", f"{out}/npy", f"{out}/c2")
    run("chunk", f"{data}/planetoid", f"{out}/cora", "--name", "cora")
    for method in ("random", "metis", "multilevel"):
        run("partition", f"{out}/g", f"{out}/a-{method}", "-p", "2", "--method", method)
    run("dispatch", f"{out}/g", f"{out}/a-metis", f"{out}/d")
    run("verify", f"{out}/g", f"{out}/d")
    run("split-edges", f"{out}/g", f"{out}/s", "--etype", "_N:_E:_N")
    run("export", f"{out}/g", f"{out}/dc", "--to", "dgl-chunked")
    run("chunk", f"{out}/dc", f"{out}/back", "--from", "dgl")
    for path in ("g", "a-metis", "d"):
        run("inspect", f"{out}/{path}")
    run("report", f"{out}/d", f"{out}/a-metis", "--out", f"{out}/r.html")
    # the two that need torch say so in one line
    text = run("export", f"{out}/d", f"{out}/pyg", "--to", "pyg", code=2)
    assert "torch" in text and len(text.strip().splitlines()) == 1, text
    text = run("export", f"{out}/d", f"{out}/dgl", "--to", "dgl", code=2)
    assert "dgl" in text.lower() and len(text.strip().splitlines()) == 1, text
    with open(f"{out}/data.pt", "wb") as f:
        f.write(b"PK")
    text = run("chunk", f"{out}/data.pt", f"{out}/pyg-in", "--from", "pyg", code=2)
    assert "torch" in text and len(text.strip().splitlines()) == 1, text
    from distributed import Client
    with Client(address) as client:
        loaded = client.run(lambda: sorted(m for m in ("torch", "torch_geometric", "dgl")
                                           if sys.modules.get(m) is not None))
assert all(v == [] for v in loaded.values()), loaded
assert not any(sys.modules.get(m) for m in ("torch", "torch_geometric", "dgl"))
print("ok")
"""


def test_prep_runs_every_command_with_torch_blocked(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), ROOT]))
    data = os.path.join(ROOT, "examples", "data")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out"), data],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        (proc.stdout[-2000:], proc.stderr[-3000:])


def test_the_blocker_blocks(tmp_path):
    """The test above proves nothing unless ``import torch`` really fails under it."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "import of torch halted" in proc.stderr, proc.stderr
