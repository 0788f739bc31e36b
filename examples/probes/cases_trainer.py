"""Misuse cases of ``python -m graphprep.trainer``: a new user's own model (a file, a factory, its
arguments, its output), the checkpoint folder and the metrics file, and options.

A tiny graph (600 nodes, 2 parts) is prepared once per probe run, and a 1-epoch checkpoint of
the built-in model trained on it, in a folder shared by the cases (beside theirs); a case that
damages the checkpoint works on its own copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from kit import BIN, Case, write

FAST = ["--fanouts", "5,5", "--batch-size", "64", "--epochs", "1", "--threads", "1",
        "--no-progress"]

MLP = textwrap.dedent('''
    import torch


    class MLP(torch.nn.Module):
        def __init__(self, spec):
            super().__init__()
            self.lin = torch.nn.Linear(spec.in_dim, spec.out_dim)

        def forward(self, batch):
            return self.lin(batch.x[:batch.batch_size])
''')


def _shared(folder: Path) -> Path:
    return folder.parent / "_trainer-shared"


def _once(target: Path, make) -> Path:
    """``target``, made by ``make(tmp)`` into a temporary sibling and renamed into place."""
    if not target.exists():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        make(tmp)
        tmp.rename(target)
    return target


def _prep(*args) -> None:
    subprocess.run([str(BIN / "prep"), *map(str, args), "--no-progress"], check=True,
                   capture_output=True)


def graph(folder: Path) -> str:
    """graph.json of the shared tiny graph (made on first use)."""
    def make(tmp: Path) -> None:
        _prep("synth", tmp / "G", "--nodes", 600, "--edges", 4000, "--seed", 4)
        _prep("partition", tmp / "G", tmp / "A", "-p", 2)
        _prep("dispatch", tmp / "G", tmp / "A", tmp / "D")
    return str(_once(_shared(folder) / "graph", make) / "D" / "graph.json")


def checkpoint(folder: Path) -> Path:
    """A copy, in ``folder/ck``, of the shared 1-epoch sage checkpoint of :func:`graph`."""
    g = graph(folder)

    def make(tmp: Path) -> None:
        subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph", g, *FAST,
                        "--checkpoint-dir", str(tmp / "ck")], check=True, capture_output=True,
                       cwd=tmp)
    shared = _once(_shared(folder) / "trained", make)
    shutil.copytree(shared / "ck", folder / "ck")
    return folder / "ck"


def train(folder: Path, *args) -> list[str]:
    return ["trainer", "--graph", graph(folder), *FAST, "--checkpoint-dir", "ck", *args]


def model_file(folder: Path, text: str, name: str = "mine.py") -> Path:
    return write(folder / name, textwrap.dedent(text).lstrip())


def with_model(text: str, *extra: str, name: str = "mine.py"):
    """A case setup: the file ``name`` holding ``text``, run as ``--model name:build``."""
    def setup(folder: Path) -> list[str]:
        model_file(folder, text, name)
        return train(folder, "--model", f"{name}:build", *extra)
    return setup


def _truncated(folder: Path) -> Path:
    ck = checkpoint(folder)
    path = ck / "checkpoint.pt"
    os.truncate(path, os.path.getsize(path) // 2)
    return ck


CASES: list[Case] = [
    # --- the model's file and factory ------------------------------------------------------
    Case("model-file-missing",
         lambda f: train(f, "--model", "mymodel.py:build"),
         names=("mymodel.py", "does not exist")),
    Case("model-file-is-a-folder",
         lambda f: (os.makedirs(f / "models", exist_ok=True),
                    train(f, "--model", "./models:build"))[1],
         names=("models", "is a folder")),
    Case("model-file-syntax-error",
         with_model("def build(spec)\n    return None\n", name="broken.py"),
         names=("broken.py", "does not import", "SyntaxError")),
    Case("model-file-without-the-factory",
         with_model(MLP + "\n\ndef make_model(spec):\n    return MLP(spec)\n"),
         names=("mine.py", "no callable 'build'")),
    Case("model-file-without-factory-name",
         lambda f: (model_file(f, MLP), train(f, "--model", "mine.py"))[1],
         names=("mine.py", "path/to/model.py:FACTORY")),
    Case("import-path-without-factory-name",
         lambda f: train(f, "--model", "graphprep.trainer.examples.pyg_gcn"),
         names=("graphprep.trainer.examples.pyg_gcn", "PKG.MODULE:FACTORY")),
    Case("factory-needs-an-argument-not-given",
         with_model(MLP + "\n\ndef build(spec, layers):\n    return MLP(spec)\n"),
         names=("TypeError", "layers", "mine.py:build")),
    Case("factory-forgets-to-return",
         with_model(MLP + "\n\ndef build(spec):\n    MLP(spec)\n"),
         names=("returned NoneType", "mine.py:build")),
    Case("factory-returns-the-class",
         with_model(MLP + "\n\ndef build(spec):\n    return MLP\n"),
         names=("returned type", "mine.py:build")),
    Case("factory-asks-for-input",
         with_model(MLP + "\n\ndef build(spec):\n    input('layers? ')\n    return MLP(spec)\n"),
         names=("EOFError", "mine.py:build")),
    Case("factory-wants-a-node-type-the-graph-lacks",
         with_model(MLP + "\n\ndef build(spec):\n    spec.in_dims['paper']\n"
                          "    return MLP(spec)\n"),
         names=("KeyError", "paper", "mine.py:build")),
    Case("model-imports-a-package-not-installed",
         with_model("import torch_scatter\n" + MLP + "\n\ndef build(spec):\n"
                    "    return MLP(spec)\n"),
         names=("does not import", "torch_scatter", "mine.py")),
    Case("factory-builds-half-precision",
         with_model(MLP + "\n\ndef build(spec):\n    return MLP(spec).half()\n"),
         names=("torch.float16", "mine.py:build")),
    Case("model-without-parameters",
         with_model('''
             import torch


             class Constant(torch.nn.Module):
                 def forward(self, batch):
                     return torch.zeros(batch.batch_size, 8)


             def build(spec):
                 return Constant()
             '''),
         names=("no parameters to train", "mine.py:build")),
    Case("repository-example-path-outside-the-repository",
         lambda f: train(f, "--model", "examples.models.pyg_gcn:build"),
         names=("does not import", "graphprep.trainer.examples.pyg_gcn")),

    # --- the factory's arguments -----------------------------------------------------------
    Case("model-args-as-key-equals-value",
         lambda f: train(f, "--model", "graphprep.trainer.examples.pyg_gat:build", "--model-args",
                         "heads=8"),
         names=("--model-args", "heads=8", "not JSON")),
    Case("model-args-a-bare-number",
         lambda f: train(f, "--model", "graphprep.trainer.examples.pyg_gat:build", "--model-args", "8"),
         names=("--model-args", "JSON object")),
    Case("model-args-the-example-does-not-take",
         lambda f: train(f, "--model", "graphprep.trainer.examples.pyg_gcn:build", "--model-args",
                         '{"layers": 3}'),
         names=("graphprep.trainer.examples.pyg_gcn:build", "TypeError", "layers")),
    Case("builtin-sage-given-model-args",
         lambda f: train(f, "--model", "sage", "--model-args", '{"heads": 8}'),
         names=("--model sage", "heads")),

    # --- the checkpoint folder and the metrics file ----------------------------------------
    Case("another-model-in-a-used-checkpoint-dir",
         lambda f: (checkpoint(f), train(f, "--model", "graphprep.trainer.examples.pyg_gcn:build"))[1],
         names=("holds another run's checkpoint", "--model: checkpoint 'sage'", "--overwrite",
                "ck")),
    Case("other-hidden-in-a-used-checkpoint-dir",
         lambda f: (checkpoint(f), train(f, "--hidden", "64"))[1],
         names=("holds another run's checkpoint", "--hidden: checkpoint 128, now 64")),
    Case("resume-with-other-fanouts",
         lambda f: (checkpoint(f), train(f, "--resume", "--fanouts", "10,10"))[1],
         names=("--resume", "--fanouts: checkpoint [5, 5], now [10, 10]")),
    Case("checkpoint-dir-is-the-checkpoint-file",
         lambda f: (checkpoint(f), train(f)[:-1] + ["ck/checkpoint.pt"])[1],
         names=("ck/checkpoint.pt", "--checkpoint-dir")),
    Case("half-written-checkpoint-in-the-dir",
         lambda f: (_truncated(f), train(f))[1],
         names=("--checkpoint-dir", "--overwrite")),
    Case("resume-from-a-half-written-checkpoint",
         lambda f: (_truncated(f), train(f, "--resume"))[1],
         names=("ck",)),
    Case("metrics-out-names-a-folder",
         lambda f: train(f, "--metrics-out", "results/"),
         names=("--metrics-out", "results/", "metrics.json")),
    Case("metrics-out-above-the-checkpoint-dir",
         lambda f: train(f)[:-1] + ["out/ck", "--metrics-out", "out"],
         names=("--metrics-out is --checkpoint-dir", "out")),

    # --- options ---------------------------------------------------------------------------
    Case("fanouts-with-spaces",
         lambda f: train(f, "--fanouts", "10 10"),
         names=("--fanouts", "comma-separated")),
    Case("target-names-an-edge-type",
         lambda f: train(f, "--target", "_E"),
         names=("--target _E",)),
    Case("link-task-without-split-edges",
         lambda f: train(f, "--task", "link"),
         names=("split-edges",)),
    Case("edge-feat-the-graph-does-not-have",
         lambda f: train(f, "--edge-feat", "weight"),
         names=("--edge-feat weight",)),

    # --- the model's forward, at the first batch (these launch the ranks) --------------------
    Case("forward-reads-a-field-the-batch-lacks",
         with_model('''
             import torch


             class MLP(torch.nn.Module):
                 def __init__(self, spec):
                     super().__init__()
                     self.lin = torch.nn.Linear(spec.in_dim, spec.out_dim)

                 def forward(self, batch):
                     return self.lin(batch.features[:batch.batch_size])


             def build(spec):
                 return MLP(spec)
             '''),
         names=("the model raised AttributeError", "features", "mine.py", "mine.py:build")),
    Case("forward-returns-a-tuple",
         with_model(MLP.replace("return self.lin(batch.x[:batch.batch_size])",
                                "h = self.lin(batch.x)\n"
                                "        return h[:batch.batch_size], h") +
                    "\n\ndef build(spec):\n    return MLP(spec)\n"),
         names=("returned tuple", "mine.py:build")),
]
