"""A user's first day with their own model, run from a folder of their own (not the repository):
the shipped examples by name (``graphprep.trainer.examples.NAME:build``), their own model by file path
(``models/my_model.py:build``, importing the modules beside it); a model that takes dense
inputs on a wide sparse feature is warned once, by rank 0, what densifying costs and what to
do; the sparse-aware example keeps the feature sparse and learns; DDP's
``find_unused_parameters`` warning does not appear for a module whose parameters are all used;
the trainer says where it writes checkpoints, and refuses to replace another run's
checkpoint (another model, other options) without ``--overwrite``.

Cora is dispatched into 2 parts and its 1,433-word bag of words made sparse (CSR) once; the
two trainings run side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import dispatched
from faultkit import ROOT, assert_clean_exit
from test_sparse_trainer import make_sparse

RUN = ("--fanouts", "5,5", "--batch-size", 32, "--lr", 0.01, "--threads", 1, "--no-progress")
CHANCE = 0.319          # Cora's majority class, on the test nodes

USER_MODEL = '''
    """A user's first model: an MLP on the seeds' features (dense)."""
    import torch

    from helpers import width      # a module beside this file


    class MLP(torch.nn.Module):
        def __init__(self, spec):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(spec.in_dim, width(spec)),
                                           torch.nn.ReLU(),
                                           torch.nn.Linear(width(spec), spec.out_dim))

        def forward(self, batch):
            return self.net(batch.x[:batch.batch_size])


    def build(spec):
        return MLP(spec)
'''
HELPERS = '''
    def width(spec):
        return spec.hidden // 2
'''
DDP_WARNING = "find_unused_parameters=True was specified"
DENSIFY = "are densified on every batch for this model"


def trainer(*args, cwd, timeout=120):
    """``python -m graphprep.trainer`` from ``cwd`` with the environment as it is (the installed
    trainer: nothing puts the repository on the path)."""
    return subprocess.run([sys.executable, "-m", "graphprep.trainer", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def day(scheduler, cora_chunked, tmp_path_factory):
    """The user's folder (outside the repository) with sparse Cora in it (``parts/``) and
    their model (``models/``); the sparse example and the user's model trained from there,
    side by side: per run its folder and CompletedProcess."""
    home = tmp_path_factory.mktemp("user-home")
    graph = dispatched(scheduler, cora_chunked, tmp_path_factory.mktemp("cora") / "d", 2)
    shutil.copytree(os.path.dirname(graph), home / "parts")
    make_sparse(str(home / "parts" / "graph.json"))
    (home / "models").mkdir()
    (home / "models" / "my_model.py").write_text(textwrap.dedent(USER_MODEL).lstrip())
    (home / "models" / "helpers.py").write_text(textwrap.dedent(HELPERS).lstrip())
    assert not str(home).startswith(ROOT)
    runs = {"example": ("--model", "graphprep.trainer.examples.sparse_sage:build", "--epochs", 5),
            "mine": ("--model", "models/my_model.py:build", "--epochs", 2)}
    procs = {}
    for name, args in runs.items():
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "graphprep.trainer", "--graph", "parts/graph.json", *map(str, RUN),
             "--checkpoint-dir", f"ck-{name}", "--metrics-out", f"{name}.json",
             *map(str, args)],
            cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=400)
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return home, out


def metrics(home, name) -> dict:
    return json.loads((home / f"{name}.json").read_text())


# --- item 3: the examples by name anywhere, a model file by path, the sparse example --------

@pytest.mark.timeout(500)
def test_the_sparse_example_trains_by_name_from_any_folder_and_keeps_input_sparse(day):
    home, runs = day
    proc = runs["example"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = metrics(home, "example")["summary"]
    assert summary["test_acc"] > CHANCE + 0.2, summary       # measured 0.72-0.78
    assert DENSIFY not in proc.stderr          # it declared sparse_input: nothing densified
    assert DDP_WARNING not in proc.stderr


@pytest.mark.timeout(500)
def test_a_model_file_by_path_trains_and_its_densified_input_is_warned_once(day):
    home, runs = day
    proc = runs["mine"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = f"{home / 'models' / 'my_model.py'}:build"
    assert metrics(home, "mine")["config"]["model"] == model     # recorded absolute
    warned = [line for line in proc.stderr.splitlines() if DENSIFY in line]
    assert len(warned) == 1, proc.stderr[-3000:]                  # rank 0, once
    line = warned[0]
    assert "[rank 0] WARNING" in line and "_N: 1433 columns" in line
    assert " per batch instead of " in line and "sparse_input = True" in line
    assert "graphprep.trainer.sparse_matmul" in line and "graphprep.trainer.examples.sparse_sage" in line
    assert line.endswith(f"--model {model}"), line
    assert DDP_WARNING not in proc.stderr


@pytest.mark.timeout(500)
def test_the_trainer_logs_where_it_writes_checkpoints(day):
    home, runs = day
    for name, proc in runs.items():
        assert (f"checkpoints go to {home / f'ck-{name}'}: checkpoint.pt after every epoch"
                in proc.stderr), proc.stderr[-3000:]


@pytest.mark.timeout(500)
def test_the_repository_path_of_an_example_outside_the_repository_names_the_installed_one(
        day):
    home, _ = day
    proc = trainer("--graph", "parts/graph.json", *RUN, "--epochs", 1, "--model",
                   "examples.models.pyg_gcn:build", "--checkpoint-dir", "ck-x", cwd=home)
    assert_clean_exit(proc, 2, ["does not import",
                                "import from any folder as graphprep.trainer.examples.pyg_gcn"])


@pytest.mark.timeout(500)
def test_a_model_file_that_does_not_exist_is_refused_naming_it(day):
    home, _ = day
    proc = trainer("--graph", "parts/graph.json", *RUN, "--epochs", 1, "--model",
                   "models/my_modle.py:build", "--checkpoint-dir", "ck-x", cwd=home)
    text = assert_clean_exit(proc, 2, [f"{home / 'models' / 'my_modle.py'} does not exist"])
    assert "launching" not in text


# --- item 7: another run's checkpoint is not replaced without --overwrite --------------------

@pytest.mark.timeout(500)
def test_another_model_in_the_same_checkpoint_dir_is_refused_without_overwrite(day):
    home, runs = day
    assert runs["mine"].returncode == 0
    checkpoint = home / "ck-mine" / "checkpoint.pt"
    before = checkpoint.read_bytes()
    proc = trainer("--graph", "parts/graph.json", *RUN, "--epochs", 2, "--model", "sage",
                   "--checkpoint-dir", "ck-mine", cwd=home)
    text = assert_clean_exit(proc, 2, [
        "--checkpoint-dir: ck-mine/checkpoint.pt holds another run's checkpoint",
        f"--model: checkpoint '{home / 'models' / 'my_model.py'}:build', now 'sage'",
        "pass --overwrite to replace it, --resume to continue it"])
    assert "launching" not in text and ", now " in text and text.count(", now ") == 1
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1
    assert checkpoint.read_bytes() == before


@pytest.mark.timeout(500)
def test_the_same_run_again_may_start_afresh_in_its_checkpoint_dir(day):
    """What the refusal compares (graph and the options --resume compares): the same run,
    the model named by a relative path from another folder, passes; another --epochs too."""
    from graphprep.formats.partitioned import load_partitioned
    from graphprep.trainer.config import TrainConfig, task_target
    from graphprep.trainer.models.registry import canonical
    from graphprep.trainer.runtime.checkpoint import CheckpointInfo, CheckpointRefused, check_fresh
    home, _ = day
    meta = load_partitioned(str(home / "parts" / "graph.json"))

    def info(**options):
        cfg = TrainConfig(graph=str(home / "parts"), fanouts=[5, 5], batch_size=32, lr=0.01,
                          **options)
        return CheckpointInfo.of(cfg, meta, task_target(meta, cfg))
    old = os.getcwd()
    try:
        os.chdir(home / "models")          # the file by a path relative to another folder
        same = info(model=canonical("my_model.py:build"), epochs=7)
    finally:
        os.chdir(old)
    check_fresh(str(home / "ck-mine"), same)
    with pytest.raises(CheckpointRefused, match=r"--hidden: checkpoint 128, now 64"):
        check_fresh(str(home / "ck-mine"),
                    info(model=same.options["model"], hidden=64))
