"""Fault injection for `python -m graphprep.trainer` (``pytest -m faults``): damaged parts are refused
naming rank, part and file; a NaN loss ends the job; ``--resume`` refuses another graph or
incompatible options; the checkpoint folder is checked before epoch 0; signals to the launcher
reach every rank; a stopped rank is named; bad options fail in one line.

Cora is dispatched into 2 parts once for the module; every damage case works on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from conftest import dispatched, rerecord
from faultkit import ROOT, assert_clean_exit, run_cli, tree_hash
from graphprep.formats.errors import FormatError
from graphprep.formats.integrity import sample_spans
from graphprep.formats.partitioned import load_partitioned
from graphprep.formats.part_checks import check_part

pytestmark = pytest.mark.faults

FAST = ("--fanouts", "5,5", "--batch-size", 64, "--threads", 1, "--no-progress",
        "--rpc-timeout", 5)
EDGES = "edges/_N___E___N"


@pytest.fixture(scope="module")
def cora2(scheduler, cora_chunked, tmp_path_factory):
    """Cora in 2 parts (random partition): the folder holding graph.json."""
    root = tmp_path_factory.mktemp("faults-train")
    return os.path.dirname(dispatched(scheduler, cora_chunked, root / "d", 2))


@pytest.fixture(scope="module")
def other_cora(scheduler, cora_chunked, tmp_path_factory):
    """Another graph of the same name: Cora partitioned with another seed (as every synth
    graph is named `synth`)."""
    root = tmp_path_factory.mktemp("faults-other")
    return os.path.dirname(dispatched(scheduler, cora_chunked, root / "d", 2, "--seed", 7))


@pytest.fixture
def copy(cora2, tmp_path):
    """A private copy of the dispatched graph, to damage."""
    return shutil.copytree(cora2, tmp_path / "g")


def train(folder, ckpt, *args, timeout=90):
    return run_cli("--graph", os.path.join(folder, "graph.json"), *FAST, "--checkpoint-dir",
                   ckpt, *args, trainer=True, timeout=timeout)


def edit(folder, p, rel, change):
    """Change a part's .npy in place (same header, same size): ``change(array)``."""
    arr = np.lib.format.open_memmap(os.path.join(folder, f"part-{p}", rel), mode="r+")
    change(arr)
    arr.flush()
    del arr


def zero(a):
    a[:] = 0


def halve(a):
    a[:] //= 2


def set_label(a):
    a[5] = 99                                    # Cora has 7 classes


def set_nan(a):
    a[3, 7] = np.nan


def swap_first_two(a):
    a[[0, 1]] = a[[1, 0]]


DAMAGE = {  # name: (part, file, change, what the message says)
    "indices_all_zero": (1, f"{EDGES}/indices.npy", zero, "sampled hash"),
    "indptr_halved": (1, f"{EDGES}/indptr.npy", halve, "edge_map gives this part"),
    "label_out_of_range": (0, "node_feats/_N/label.npy", set_label,
                           "label 99 outside [-1, 7)"),
    "nan_feature": (1, "node_feats/_N/feat.npy", set_nan, "row 3: NaN or inf"),
    "halo_shuffled": (0, "nodes/_N/halo_ids.npy", swap_first_two, "not strictly increasing"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_part_fails_naming_rank_part_and_file(copy, tmp_path, case):
    p, rel, change, says = DAMAGE[case]
    edit(copy, p, rel, change)
    before = tree_hash(copy)
    proc = train(copy, tmp_path / "ckpt")
    assert_clean_exit(proc, 1, [f"rank {p} failed: part {p}", f"part-{p}/{rel}", says,
                                f"rank {p} failed (exit code 1)"])
    assert "epoch 0" not in proc.stderr
    assert tree_hash(copy) == before                      # checks read, never write


@pytest.mark.parametrize("case", ["indptr_halved", "label_out_of_range", "nan_feature",
                                  "halo_shuffled"])
def test_structure_checks_catch_damage_the_manifest_agrees_with(copy, case):
    """Damage written before the manifest (a dispatch bug): the structure checks, not the
    hashes, must find it."""
    p, rel, change, says = DAMAGE[case]
    edit(copy, p, rel, change)
    rerecord(copy, p, rel)
    with pytest.raises(FormatError, match="row") as err:
        check_part(load_partitioned(str(copy)), p)
    assert err.value.file.endswith(rel) and says in str(err.value)


@pytest.mark.parametrize("rel,change,says", [
    (f"{EDGES}/indices.npy", lambda a: a.__setitem__(10, 100000), "local source index"),
    (f"{EDGES}/orig_ids.npy", lambda a: a.__setitem__(-1, 10**9), "original edge ID"),
    ("nodes/_N/halo_ids.npy", lambda a: a.__setitem__(0, 0), "owned by this part"),
    ("nodes/_N/orig_ids.npy", lambda a: a.__setitem__(1, a[0]), "not strictly increasing"),
])
def test_structure_checks_ranges(copy, rel, change, says):
    edit(copy, 0, rel, change)
    rerecord(copy, 0, rel)
    with pytest.raises(FormatError, match=says):
        check_part(load_partitioned(str(copy)), 0)


def test_indices_all_zero_pass_structure_but_not_the_sampled_hash(copy):
    """Why hashes are needed: zeroed indices are all in range."""
    edit(copy, 1, f"{EDGES}/indices.npy", zero)
    with pytest.raises(FormatError, match="sampled hash"):
        check_part(load_partitioned(str(copy)), 1)
    rerecord(copy, 1, f"{EDGES}/indices.npy")
    check_part(load_partitioned(str(copy)), 1)


@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_missing_or_truncated_file(copy, tmp_path, how):
    rel = f"{EDGES}/orig_ids.npy" if how == "missing" else "node_feats/_N/feat.npy"
    path = os.path.join(copy, "part-1", rel)
    if how == "missing":
        os.remove(path)
    else:
        os.truncate(path, os.path.getsize(path) - 1000)
    proc = train(copy, tmp_path / "ckpt")
    assert_clean_exit(proc, 1, ["rank 1 failed: part 1", f"part-1/{rel}", how])


def test_parts_swapped_in_graph_json(copy, tmp_path):
    path = os.path.join(copy, "graph.json")
    meta = json.loads(open(path).read())
    meta["parts"] = meta["parts"][::-1]                   # paths and manifests swapped
    with open(path, "w") as f:
        json.dump(meta, f)
    proc = train(copy, tmp_path / "ckpt")
    text = assert_clean_exit(proc, 1, ["part.json", "parts swapped or moved"])
    # both ranks fail; the launcher may end one before it reports: either names itself
    assert any(f"rank {p} failed: part {p}: " in text and f"part-{1 - p}/part.json" in text and
               f"holds part {1 - p}, graph.json lists it as part {p}" in text for p in (0, 1))


def test_part_from_another_dispatch(copy, other_cora):
    shutil.rmtree(os.path.join(copy, "part-1"))
    shutil.copytree(os.path.join(other_cora, "part-1"), os.path.join(copy, "part-1"))
    with pytest.raises(FormatError, match="another dispatch") as err:
        check_part(load_partitioned(str(copy)), 1)
    assert err.value.file.endswith("part-1/part.json")


def test_graph_json_without_manifest_warns_and_still_checks_structure(copy):
    """graph.json from before manifests: sizes and hashes cannot be checked (a warning says
    so), the structure still is."""
    path = os.path.join(copy, "graph.json")
    meta = json.loads(open(path).read())
    for part in meta["parts"]:
        del part["manifest"]
    del meta["dispatch_id"], meta["num_classes"]
    with open(path, "w") as f:
        json.dump(meta, f)
    report = check_part(load_partitioned(str(copy)), 0)
    assert any("no integrity manifest for part 0" in w for w in report.warnings)
    edit(copy, 0, "nodes/_N/halo_ids.npy", swap_first_two)
    with pytest.raises(FormatError, match="not strictly increasing"):
        check_part(load_partitioned(str(copy)), 0)


def test_fingerprint_ignores_the_folder_and_names_another_graph(cora2, copy, other_cora):
    from graphprep.trainer.runtime.checkpoint import CheckpointInfo, differences
    from graphprep.trainer.config import TrainConfig
    cfg = TrainConfig(graph="")
    here = CheckpointInfo.of(cfg, load_partitioned(str(cora2)), "_N")
    assert differences(here, CheckpointInfo.of(cfg, load_partitioned(str(copy)), "_N")) == []
    other = differences(here, CheckpointInfo.of(cfg, load_partitioned(str(other_cora)), "_N"))
    assert {d.split(":")[0] for d in other} == {"graph dispatch_id", "graph part 0",
                                                "graph part 1"}


def test_unknown_format_version_is_refused(copy, tmp_path):
    path = os.path.join(copy, "graph.json")
    meta = json.loads(open(path).read())
    meta["format_version"] = 99
    with open(path, "w") as f:
        json.dump(meta, f)
    proc = train(copy, tmp_path / "ckpt")
    assert_clean_exit(proc, 2, ["--graph", "graph.json", "format_version", "99"])


def test_verify_data_catches_a_change_the_sampled_hash_misses(copy, tmp_path):
    rel = "node_feats/_N/feat.npy"                        # ~7.7 MB: sampled, not read whole
    path = os.path.join(copy, "part-1", rel)
    size = os.path.getsize(path)
    sampled = np.zeros(size, bool)
    for offset, length in sample_spans(size):
        sampled[offset:offset + length] = True
    offset = size // 2 // 4 * 4
    while sampled[offset:offset + 4].any():               # a float no sampled block covers
        offset += 4
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.float32(0.5).tobytes())                # Cora's features are 0 or 1
    check_part(load_partitioned(str(copy)), 1)            # what every load checks: passes
    proc = train(copy, tmp_path / "ckpt", "--verify-data")
    assert_clean_exit(proc, 1, ["rank 1 failed: part 1", f"part-1/{rel}", "full hash"])


def test_nan_loss_ends_the_job_naming_epoch_and_batch(cora2, tmp_path):
    proc = train(cora2, tmp_path / "ckpt", "--epochs", 3, "--fail-rank", 1, "--fail-mode",
                 "nan")                                   # rank 1's first batch: NaN inputs
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:]
    assert "rank 1 failed: NonFiniteLoss: loss is nan at epoch 0, batch 0 (rank 1)" in text
    assert "epoch 0:" not in text                         # the epoch never completed
    assert not (tmp_path / "ckpt" / "checkpoint.pt").exists()


@pytest.fixture(scope="module")
def trained(cora2, tmp_path_factory):
    """5 epochs at a high learning rate (validation peaks before the end): checkpoint folder
    and metrics."""
    root = tmp_path_factory.mktemp("faults-ckpt")
    proc = train(cora2, root / "ckpt", "--epochs", 5, "--lr", 0.05, "--metrics-out",
                 root / "m.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "ckpt", json.loads((root / "m.json").read_text())


def test_best_checkpoint_holds_the_best_validation_epoch(trained):
    import torch
    ckpt, metrics = trained
    best_epoch = metrics["summary"]["best_epoch"]
    assert best_epoch != metrics["epochs"][-1]["epoch"]   # else this test proves nothing
    best = torch.load(ckpt / "best.pt", weights_only=False)
    last = torch.load(ckpt / "checkpoint.pt", weights_only=False)
    assert best["history"][-1]["epoch"] == best_epoch
    assert best["history"][-1]["val_acc"] == max(e["val_acc"] for e in metrics["epochs"])
    assert len(last["history"]) == 5
    assert any(not torch.equal(best["model"][k], last["model"][k]) for k in last["model"])


def test_resume_on_another_graph_is_refused(trained, other_cora):
    ckpt, _ = trained
    before = tree_hash(ckpt)
    proc = train(other_cora, ckpt, "--epochs", 6, "--lr", 0.05, "--resume")
    text = assert_clean_exit(proc, 2, ["--resume", "belongs to another run",
                                       "graph dispatch_id: checkpoint"])
    assert "launching" not in text
    assert tree_hash(ckpt) == before


def test_resume_with_incompatible_options_is_refused(trained, cora2):
    ckpt, _ = trained
    proc = train(cora2, ckpt, "--epochs", 6, "--lr", 0.05, "--hidden", 64, "--resume")
    text = assert_clean_exit(proc, 2, ["--hidden: checkpoint 128, now 64"])
    assert "dispatch_id" not in text                      # the same graph: only hidden differs
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1


def test_unwritable_checkpoint_dir_fails_before_epoch_0(cora2, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")                                # root can write anywhere else
    proc = train(cora2, blocker / "ckpt", "--metrics-out", tmp_path / "m.json")
    text = assert_clean_exit(proc, 2, [f"{blocker / 'ckpt'}: --checkpoint-dir: {blocker} is "
                                       "a file, so nothing can be written under it"])
    assert "launching" not in text and "epoch" not in text
    assert not (tmp_path / "m.json").exists()


def launch(folder, tmp_path, *args):
    """Start the launcher in the background: (process, its log file)."""
    log = tmp_path / "launcher.log"
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", os.path.join(folder, "graph.json"),
           *map(str, FAST), "--checkpoint-dir", str(tmp_path / "ckpt"), "--epochs", "1000",
           *map(str, args)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def wait_for(log, text, proc, timeout=60.0):
    """Wait until ``text`` appears in the log (the job is that far)."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def alive(procs) -> list:
    """Those still running (zombies waiting for a reaper count as gone)."""
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(procs, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(procs)


def cleanup(proc, ranks):
    for p in [*alive(ranks)] + ([psutil.Process(proc.pid)] if proc.poll() is None else []):
        p.send_signal(signal.SIGCONT)
        p.kill()


# README: "ranks exit within a second when their launcher dies (even by SIGKILL)". Measured
# from the signal to the last rank gone, on a machine at load 13: SIGKILL 0.11-0.12 s (the
# kernel's PR_SET_PDEATHSIG; the watcher thread polls every 0.5 s behind it), SIGTERM 0.38-0.56 s
# (forwarded; ranks end on it at once, the 5 s grace is for one that does not). The bound is the
# claim plus a margin of 0.5 s for a loaded machine.
WITHIN_A_SECOND = 1.0 + 0.5


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGKILL])
def test_signal_to_the_launcher_ends_every_rank(cora2, tmp_path, signo):
    """SIGTERM to the launcher is passed on to every rank; SIGKILL leaves the ranks to
    notice their launcher is gone. Either way every rank is gone within a second."""
    proc, log = launch(cora2, tmp_path)
    ranks = []
    try:
        wait_for(log, "halo cache:", proc)                # every rank is up, RPC and gloo too
        ranks = psutil.Process(proc.pid).children()
        assert len(ranks) == 2
        start = time.monotonic()
        proc.send_signal(signo)
        code = proc.wait(timeout=15)
        assert wait_gone(ranks, 5) == [], log.read_text()[-3000:]
        took = time.monotonic() - start
        assert took < WITHIN_A_SECOND, (took, log.read_text()[-3000:])
        assert code == (128 + signo if signo == signal.SIGTERM else -signo)
        if signo == signal.SIGTERM:
            assert "received SIGTERM: passed on to every rank" in log.read_text()
        else:
            # PR_SET_PDEATHSIG ended them, not the slower watcher thread (which would log).
            assert "its launcher (pid" not in log.read_text()
    finally:
        cleanup(proc, ranks)


def test_stopped_rank_is_named_within_the_rpc_timeout(cora2, tmp_path):
    """A rank frozen by SIGSTOP: its peer times out, the launcher names the stopped rank as
    the cause and ends it; the job is over soon after --rpc-timeout."""
    proc, log = launch(cora2, tmp_path)
    ranks = []
    try:
        wait_for(log, "epoch 0:", proc)                   # training
        ranks = psutil.Process(proc.pid).children()
        rank1 = next(p for p in ranks if p.environ().get("RANK") == "1")
        start = time.monotonic()
        rank1.send_signal(signal.SIGSTOP)
        code = proc.wait(timeout=40)
        took = time.monotonic() - start
        text = log.read_text()
        assert code == 1, text[-3000:]
        # --rpc-timeout 5, then rank 0 fails and the launcher ends the stopped rank (SIGCONT,
        # SIGTERM): measured 5.4-5.8 s at load 10; the bound is the timeout plus 2 s.
        assert took < 5 + 2, took
        assert "rank 1 stopped answering (process stopped, state T)" in text, text[-3000:]
        assert alive(ranks) == []                         # reaped before the launcher exits
    finally:
        cleanup(proc, ranks)


@pytest.mark.parametrize("args,says", [
    (("--batch-size", 0), "--batch-size 0: must be at least 1"),
    (("--epochs", 0), "--epochs 0: must be at least 1"),
    (("--cache-mb", -1), "--cache-mb -1.0: must be >= 0"),
    (("--lr", 0), "--lr 0.0: must be positive"),
    (("--lr", "nan"), "--lr nan: must be positive"),
    (("--dropout", 1), "--dropout 1.0: must be in [0, 1)"),
    (("--target", "paper"), "--target paper: not a node type"),
    (("--fanouts", "5,0"), "fanouts are positive"),
    (("--eval-fanouts", "5"), "--eval-fanouts has 1 hops"),
    (("--epochs", "x"), "'x' is not a valid integer"),
])
def test_bad_option_values_exit_2_in_one_line(cora2, tmp_path, args, says):
    proc = train(cora2, tmp_path / "ckpt", *args)
    assert_clean_exit(proc, 2, [says])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
