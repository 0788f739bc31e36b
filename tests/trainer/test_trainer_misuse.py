"""A user's model factory or options that misbehave, and what the trainer does about it: every
rank and the launcher end once training ends or is stopped, whatever threads the factory
left; a factory that exits, or sets float64 as torch's default dtype, is refused before any
rank starts naming it; a model output of the wrong width, one row, or NaN ends the job with
one line naming the model last, as does an exception raised in the model's own code (with
its file and line); a factory whose module is half precision or has no parameters is refused
before launch; ``--checkpoint-dir X --metrics-out X`` and a ``--metrics-out`` naming a folder
are refused before launch; a model whose later batches leave parameters unused is named with
the fix.

Everything runs the real CLI on a tiny synth graph (600 nodes, 2 parts), made once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import synth_partitioned
from faultkit import ROOT, assert_clean_exit

pytestmark = pytest.mark.faults

FAST = ("--fanouts", "5,5", "--batch-size", 64, "--threads", 1, "--no-progress",
        "--rpc-timeout", 10)

MODULE = '''
    """Model factories that misbehave (tests/trainer/test_trainer_misuse.py)."""
    import os
    import sys
    import threading
    import time

    import torch


    class MLP(torch.nn.Module):
        def __init__(self, spec, width=None):
            super().__init__()
            self.lin = torch.nn.Linear(spec.in_dim, width or spec.out_dim)

        def forward(self, batch):
            return self.lin(batch.x[:batch.batch_size])


    def plain(spec):
        return MLP(spec)


    def with_thread(spec):
        # a background worker that never ends, not a daemon
        threading.Thread(target=lambda: time.sleep(10**6), name="user-worker").start()
        return MLP(spec)


    def calls_sys_exit(spec):
        sys.exit(0)


    def calls_os_exit(spec):
        os._exit(0)


    def sets_float64(spec):
        torch.set_default_dtype(torch.float64)
        return MLP(spec)


    def wrong_width(spec):
        return MLP(spec, spec.out_dim + 1)


    class OneRow(MLP):
        def forward(self, batch):
            return self.lin(batch.x[:1])


    def one_row(spec):
        return OneRow(spec)


    class NaNOut(MLP):
        def forward(self, batch):
            return self.lin(batch.x[:batch.batch_size]) * float("nan")


    def nan_output(spec):
        return NaNOut(spec)


    def half_precision(spec):
        return MLP(spec).half()


    class Constant(torch.nn.Module):
        def forward(self, batch):
            return torch.zeros(batch.batch_size, 8)


    def no_parameters(spec):
        return Constant()


    class ReadsAMissingField(MLP):
        def forward(self, batch):
            return self.lin(batch.features[:batch.batch_size])


    def reads_a_missing_field(spec):
        return ReadsAMissingField(spec)


    class FirstCallOnly(MLP):
        """Uses ``extra`` on its first call only: every parameter has a gradient then."""

        def __init__(self, spec):
            super().__init__(spec)
            self.extra = torch.nn.Linear(spec.in_dim, spec.out_dim)
            self.calls = 0

        def forward(self, batch):
            self.calls += 1
            out = self.lin(batch.x[:batch.batch_size])
            return out + self.extra(batch.x[:batch.batch_size]) if self.calls == 1 else out


    def first_call_only(spec):
        return FirstCallOnly(spec)
'''


@pytest.fixture(scope="module")
def tiny(scheduler, tmp_path_factory):
    """A 600-node synth graph in 2 parts: the folder holding graph.json."""
    root = tmp_path_factory.mktemp("misuse")
    synth_partitioned(scheduler, root, "--nodes", 600, "--edges", 4000, "--seed", 2)
    return str(root / "D")


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("misuse-mods")
    (folder / "badmods.py").write_text(textwrap.dedent(MODULE).lstrip())
    return folder


def env_with(modules) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(modules), env.get("PYTHONPATH")]))
    return env


def command(graph, folder, *args) -> list[str]:
    return [sys.executable, "-m", "graphprep.trainer", "--graph", graph, *map(str, FAST),
            "--checkpoint-dir", str(folder / "ckpt"), *map(str, args)]


def run(graph, folder, modules, *args, timeout=120):
    return subprocess.run(command(graph, folder, *args), cwd=ROOT, env=env_with(modules),
                          capture_output=True, text=True, timeout=timeout)


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def kill_tree(proc) -> None:
    """SIGKILL ``proc`` and every process it started (a hung job must not outlive its test)."""
    try:
        procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def gone(procs, timeout: float) -> list:
    """Those of ``procs`` still running (not zombies) after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


# --- a factory that leaves a non-daemon thread running --------------------------------------

# A 1-epoch run of this graph takes 15-25 s here under load; before the fix the job never ended.
ENDS_WITHIN = 150


@pytest.mark.timeout(ENDS_WITHIN + 60)
def test_a_factory_thread_does_not_keep_the_job_alive_once_training_ends(tiny, modules,
                                                                         tmp_path):
    proc = subprocess.Popen(command(tiny, tmp_path, "--model", "badmods:with_thread",
                                    "--epochs", 1),
                            cwd=ROOT, env=env_with(modules), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=ENDS_WITHIN)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        proc.communicate()
        pytest.fail(f"the job did not end within {ENDS_WITHIN} s after its one epoch")
    assert proc.returncode == 0, stderr[-3000:]
    assert "test accuracy" in stdout
    # the model is used whole on every batch: DDP is not asked to look for unused ones
    assert "find_unused_parameters=True was specified" not in stderr


@pytest.mark.timeout(200)
def test_sigterm_to_the_launcher_ends_every_rank_despite_a_factory_thread(tiny, modules,
                                                                          tmp_path):
    log = tmp_path / "job.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(command(tiny, tmp_path, "--model", "badmods:with_thread",
                                        "--epochs", 100000),
                                cwd=ROOT, env=env_with(modules), stdout=out,
                                stderr=subprocess.STDOUT)
    ranks = []
    try:
        deadline = time.monotonic() + 120
        while "epoch 0:" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        ranks = psutil.Process(proc.pid).children()
        assert len(ranks) == 2
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)      # the ranks end on SIGTERM; 5 s grace, then SIGKILL
        assert code == 128 + signal.SIGTERM, log.read_text()[-3000:]
        assert gone(ranks, 10) == []
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher did not exit within 30 s of SIGTERM")
    finally:
        kill_tree(proc)
        for p in ranks:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


# --- factories refused before any rank starts ---------------------------------------------------

@pytest.mark.parametrize("factory, says", [
    ("calls_sys_exit", "called sys.exit(0)"),
    ("calls_os_exit", "ended the process (exit code 0"),
    ("sets_float64", "set torch's default dtype to torch.float64"),
    ("half_precision", "the module's parameters are torch.float16"),
    ("no_parameters", "the module has no parameters to train"),
])
def test_a_factory_that_exits_or_changes_the_dtype_is_refused_naming_it(tiny, modules,
                                                                        tmp_path, factory,
                                                                        says):
    proc = run(tiny, tmp_path, modules, "--model", f"badmods:{factory}", "--epochs", 1)
    text = assert_clean_exit(proc, 2, [says])
    assert "launching" not in text
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert f"badmods:{factory}" in lines[0] and says in lines[0]
    assert not (tmp_path / "ckpt" / "checkpoint.pt").exists()


def test_checkpoint_dir_and_metrics_out_on_one_path_are_refused_before_launch(tiny, modules,
                                                                              tmp_path):
    same = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph", tiny, *map(str, FAST),
                           "--epochs", "1", "--checkpoint-dir", str(same), "--metrics-out",
                           str(same)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    text = assert_clean_exit(proc, 2, ["--metrics-out is --checkpoint-dir", str(same)])
    assert "launching" not in text and not same.exists()
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1


def test_metrics_out_naming_a_folder_is_refused_before_launch(tiny, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph", tiny, *map(str, FAST),
                           "--epochs", "1", "--checkpoint-dir", "ck", "--metrics-out",
                           "results/"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              filter(None, [ROOT, os.environ.get("PYTHONPATH")]))))
    text = assert_clean_exit(proc, 2, ["results/: --metrics-out names one JSON file, not a "
                                       "folder (e.g. results/metrics.json)"])
    assert "launching" not in text and not (tmp_path / "ck").exists()


# --- a model output that cannot serve: one line, the model last --------------------------------

OUTPUTS = {
    "wrong_width": "has shape [",
    "one_row": "has shape [1, ",
    "nan_output": "the model's output holds NaN or inf at epoch 0, batch 0",
    "first_call_only": "the model left parameters without gradients on a batch",
    "reads_a_missing_field": "the model raised AttributeError: 'Batch' object has no "
                             "attribute 'features' (at ",
}


@pytest.fixture(scope="module")
def output_runs(tiny, modules, tmp_path_factory):
    """Each misbehaving model trained (side by side): its CompletedProcess-like result."""
    root = tmp_path_factory.mktemp("outputs")
    procs = {}
    for name in OUTPUTS:
        folder = root / name
        folder.mkdir()
        extra = ("--batch-size", 16) if name == "first_call_only" else ()
        procs[name] = subprocess.Popen(command(tiny, folder, "--model", f"badmods:{name}",
                                               "--epochs", 2, *extra),
                                       cwd=ROOT, env=env_with(modules), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    out = {}
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            stdout, stderr = proc.communicate()
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_a_model_that_cannot_serve_ends_the_job_naming_it_last(output_runs, name):
    proc = output_runs[name]
    assert_clean_exit(proc, 2, [OUTPUTS[name]])
    line = last_line(proc.stdout + proc.stderr)
    assert OUTPUTS[name] in line and line.endswith(f"--model badmods:{name}"), line
