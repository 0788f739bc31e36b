"""`python -m graphprep.trainer` end to end: real ranks (processes), RPC and DDP over loopback.

Cora goes chunk -> partition metis -> dispatch; training must beat chance by a wide margin,
reproduce itself, survive uneven batch counts, resume exactly, and fail loudly and fast.
"""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import dispatched, node_data_of

from conftest import ROOT  # noqa: E402  (the repository)


@pytest.fixture(scope="module")
def cora(scheduler, cora_chunked, tmp_path_factory):
    """Cora dispatched into 1 part, 2 parts (METIS, train-balanced) and 3 parts (random)."""
    root = tmp_path_factory.mktemp("cora-train")
    return {1: dispatched(scheduler, cora_chunked, root / "d1", 1),
            2: dispatched(scheduler, cora_chunked, root / "d2", 2, "--method", "metis",
                          "--balance", "train"),
            3: dispatched(scheduler, cora_chunked, root / "d3", 3, "--method", "random")}


def majority_rate(chunked, ntype="_N") -> float:
    """Chance as a one-class predictor scores it: the majority class's share of the test set."""
    test = node_data_of(chunked, ntype, "test_mask").astype(bool)
    counts = np.bincount(node_data_of(chunked, ntype, "label")[test])
    return counts.max() / test.sum()


@pytest.fixture(scope="module")
def cora_chance(cora_chunked) -> float:
    """Cora's test majority-class rate: 0.319 (class 3, 319 of 1000)."""
    return majority_rate(cora_chunked)


# Short runs (2 epochs) must beat chance by this much. They reach 0.72-0.79 on Cora (seeds 0-2,
# all three configurations below), so chance + 0.3 = 0.62 holds with room, while a one-class
# predictor (0.319) or a model that barely learns fails.
SHORT_RUN_MARGIN = 0.3


def train(graph, tmp_path, *args, name="m", timeout=300):
    """Run the trainer; returns (process result, metrics JSON or None, seconds)."""
    metrics = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph, "--no-progress",
           "--metrics-out", str(metrics), "--checkpoint-dir", str(tmp_path / f"ckpt-{name}"),
           "--threads", "1", *map(str, args)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - start
    data = json.loads(metrics.read_text()) if metrics.exists() else None
    return proc, data, took


CORA = ("--fanouts", "10,10", "--batch-size", 32, "--epochs", 12, "--lr", 0.01)


def test_cora_two_parts_two_ranks_beats_075_and_reproduces(cora, tmp_path):
    first, m1, _ = train(cora[2], tmp_path, *CORA, name="a")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = m1["summary"]
    # Chance (cora_chance) is 0.319, so 0.75 is chance + 0.43; 12 epochs measured 0.803.
    assert summary["test_acc"] >= 0.75, summary
    assert "test accuracy" in first.stdout
    epoch = m1["epochs"][-1]
    assert epoch["train_nodes"] == 140 and epoch["test_nodes"] == 1000
    assert epoch["val_nodes"] == 500 and epoch["rpc_requests"] > 0
    assert set(epoch["time_per_rank_s"]) >= {"sample_local", "sample_remote", "feature_fetch",
                                             "forward_backward", "allreduce"}
    for phase, each in epoch["time_by_rank_s"].items():           # rank by rank, 2 ranks
        assert len(each) == 2
        assert sum(each) / 2 == pytest.approx(epoch["time_per_rank_s"][phase], abs=1e-3)
    second, m2, _ = train(cora[2], tmp_path, *CORA, name="b")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [e["test_acc"] for e in m2["epochs"]] == [e["test_acc"] for e in m1["epochs"]]
    assert [e["loss"] for e in m2["epochs"]] == [e["loss"] for e in m1["epochs"]]


def test_remote_store_trains_the_same_with_less_traffic(cora, tmp_path):
    """--remote-store changes where remote rows come from, not what they are: on 3 random
    parts with the halo cache off, the same losses and accuracies epoch by epoch as without
    it, while from the second epoch on the store serves rows and each epoch's training RPC
    bytes fall below the run without it; the store folder is left empty."""
    args = ("--fanouts", "5,5", "--batch-size", 32, "--epochs", 3, "--lr", 0.01,
            "--cache-mb", 0)
    plain, m_plain, _ = train(cora[3], tmp_path, *args, name="plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    kept, m_kept, _ = train(cora[3], tmp_path, *args, "--remote-store", tmp_path / "store",
                            name="kept")
    assert kept.returncode == 0, kept.stderr[-3000:]
    for key in ("loss", "val_acc", "test_acc"):
        assert [e[key] for e in m_kept["epochs"]] == [e[key] for e in m_plain["epochs"]], key
    for e_plain, e_kept in list(zip(m_plain["epochs"], m_kept["epochs"]))[1:]:
        assert e_plain["halo_store_hits"] == 0 < e_kept["halo_store_hits"]
        assert e_kept["train_rpc_bytes"] < e_plain["train_rpc_bytes"]
    assert not list((tmp_path / "store").iterdir())


def test_resume_continues_exactly(cora, tmp_path):
    args = ("--fanouts", "5,5", "--batch-size", 16, "--lr", 0.01)
    full, whole, _ = train(cora[2], tmp_path, *args, "--epochs", 4, name="whole")
    assert full.returncode == 0, full.stderr[-3000:]
    part, _, _ = train(cora[2], tmp_path, *args, "--epochs", 2, name="r")
    assert part.returncode == 0, part.stderr[-3000:]
    rest, resumed, _ = train(cora[2], tmp_path, *args, "--epochs", 4, "--resume", name="r")
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "resumed" in rest.stderr
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in whole["epochs"]]


def test_uneven_parts_and_ranks_per_part_complete_with_every_seed(cora, cora_chance, tmp_path):
    """3 random parts hold different train counts: with batch 7 ranks run different batch
    counts; DDP Join must neither hang nor drop a seed, and the model still learns (measured
    0.785 after 2 epochs)."""
    proc, metrics, _ = train(cora[3], tmp_path, "--fanouts", "5,5", "--batch-size", 7,
                             "--epochs", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    epoch = metrics["epochs"][-1]
    assert epoch["train_nodes"] == 140
    assert epoch["batches_total"] < 3 * epoch["batches_max_rank"]   # uneven across ranks
    assert metrics["summary"]["test_acc"] >= cora_chance + SHORT_RUN_MARGIN, metrics["summary"]


def test_two_ranks_share_one_part(cora, cora_chance, tmp_path):
    """Two ranks split one part's seeds: every seed trained once, and the model learns
    (measured 0.776 after 2 epochs)."""
    proc, metrics, _ = train(cora[1], tmp_path, "--ranks-per-part", 2,
                             "--fanouts", "5,5", "--batch-size", 16, "--epochs", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    epoch = metrics["epochs"][-1]
    assert epoch["train_nodes"] == 140 and len(epoch["time_by_rank_s"]["epoch_s"]) == 2
    assert metrics["summary"]["test_acc"] >= cora_chance + SHORT_RUN_MARGIN, metrics["summary"]


@pytest.mark.parametrize("mode", ["raise", "kill", "hang"])
def test_a_failing_rank_ends_the_job_loudly_within_60s(cora, tmp_path, mode):
    """Rank 1 raises, is SIGKILLed, or goes silent (its peer's all-reduce times out)."""
    proc, _, took = train(cora[2], tmp_path, *CORA, "--fail-rank", 1, "--fail-mode", mode,
                          "--rpc-timeout", 10, timeout=120)
    assert proc.returncode != 0
    assert took < 60
    if mode == "raise":
        assert "rank 1 failed: RuntimeError: injected failure on rank 1" in proc.stderr
    elif mode == "kill":
        assert "rank 1 failed (killed by SIGKILL)" in proc.stderr
    else:
        assert "rank 0: a collective or RPC got no answer within --rpc-timeout 10 s" \
            in proc.stderr


def test_heterogeneous_graph_trains_well_above_chance(mag_parts, tmp_path):
    """ogbn-mag-shaped synth (4 node types, featureless authors/institutions/fields): papers
    are classified from their features and all edge types into them."""
    proc, metrics, _ = train(mag_parts[1], tmp_path, "--epochs", 3,
                             "--fanouts", "10,5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    chance = majority_rate(mag_parts[0], "paper")                    # 8 classes
    # 0.1375 here; measured 0.81 after 3 epochs.
    assert chance < 0.2 and metrics["summary"]["test_acc"] >= chance + 0.4, metrics["summary"]


def test_bad_options_fail_before_launch(cora, tmp_path):
    proc, _, _ = train(cora[2], tmp_path, "--fanouts", "10,x")
    assert proc.returncode == 2 and "comma-separated integers" in proc.stderr
    proc, _, _ = train(str(tmp_path / "missing.json"), tmp_path)
    assert proc.returncode == 2 and "graph.json not found" in proc.stderr
    if not __import__("torch").cuda.is_available():
        proc, _, _ = train(cora[2], tmp_path, "--placement", "cuda")
        assert proc.returncode == 2 and "needs CUDA" in proc.stderr


def test_under_torchrun_matches_the_local_launcher(cora, tmp_path):
    """torchrun's env vars and agent-hosted store: the same run, the same numbers."""
    args = ("--fanouts", "5,5", "--batch-size", 32, "--epochs", 2)
    local, expect, _ = train(cora[2], tmp_path, *args, name="local")
    assert local.returncode == 0, local.stderr[-3000:]
    metrics = tmp_path / "torchrun.json"
    from graphprep.trainer.runtime.launch import free_port
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_port()), "-m", "graphprep.trainer", "--graph", cora[2],
           "--no-progress", "--metrics-out", str(metrics), "--threads", "1",
           "--checkpoint-dir", str(tmp_path / "ckpt-torchrun"), *map(str, args)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(metrics.read_text())
    assert [e["loss"] for e in got["epochs"]] == [e["loss"] for e in expect["epochs"]]
