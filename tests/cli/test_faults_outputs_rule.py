"""The output rule (``graphprep.formats.guard.check_output``) on the commands that write outside the
``prep`` steps: ``prep report --out``, the trainer's ``--metrics-out`` and ``--checkpoint-dir``,
``trainer embed --out``; and ``trainer embed``'s checks before inference (``pytest -m faults``).

Every refusal is asserted the same way: the exit code, one line naming the culprit, no
traceback, and the bytes of every input and previous output unchanged (checksums), with no
``.partial`` left behind. A small synth graph is dispatched and trained once for the module
(node and link checkpoints); each case works in its own sandbox of copies.
"""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import dispatched, run_prep
from faultkit import assert_clean_exit, prep_fails, run_cli, tree_hash

pytestmark = pytest.mark.faults

FAST = ("--fanouts", "5,5", "--batch-size", 128, "--threads", 1, "--no-progress",
        "--rpc-timeout", 10)


@pytest.fixture(scope="module")
def made(scheduler, tmp_path_factory):
    """Built once: graph G (node task) dispatched to D, a 1-epoch checkpoint CK with its
    metrics M; the same graph split for links (LD) with its checkpoint LCK; and D7, G
    dispatched from another partition (another graph to a checkpoint)."""
    root = tmp_path_factory.mktemp("rule")
    run_prep(scheduler, "synth", root / "G", "--nodes", 3000, "--edges", 20000, "--seed", 5)
    d = dispatched(scheduler, root / "G", root / "D", 2)
    d7 = dispatched(scheduler, root / "G", root / "D7", 2, "--seed", 7)
    run_prep(scheduler, "split-edges", root / "G", root / "S", "--etype", "_N:_E:_N")
    ld = dispatched(scheduler, root / "S", root / "LD", 2)
    for graph, ck, extra in ((d, root / "CK", ("--metrics-out", root / "M.json")),
                             (ld, root / "LCK", ("--task", "link"))):
        proc = run_cli("--graph", graph, *FAST, "--epochs", 1, "--checkpoint-dir", ck, *extra,
                       trainer=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "D": os.path.dirname(d), "D7": os.path.dirname(d7),
            "LD": os.path.dirname(ld), "CK": str(root / "CK"), "LCK": str(root / "LCK"),
            "M": str(root / "M.json")}


@pytest.fixture
def sbx(made, tmp_path):
    """A sandbox holding copies: parts/ (graph D), ck/ (its checkpoint), m.json (its
    metrics), notes.txt (a user's file)."""
    shutil.copytree(made["D"], tmp_path / "parts")
    shutil.copytree(made["CK"], tmp_path / "ck")
    shutil.copyfile(made["M"], tmp_path / "m.json")
    (tmp_path / "notes.txt").write_text("a user's notes\n")
    return tmp_path


def one_line_error(text: str) -> str:
    """The single ``Error:`` line of a refusal (asserting there is exactly one)."""
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Usage:" not in text, text[-3000:]
    return errors[0]


def no_partials(folder) -> None:
    left = [os.path.join(d, n) for d, ds, fs in os.walk(folder) for n in ds + fs
            if n.endswith(".partial")]
    assert not left, left


def embed(graph, ckpt, out, *args, cwd=None):
    return run_cli("embed", "--graph", graph, "--checkpoint", ckpt, "--out", out,
                   "--no-progress", "--threads", 1, *args, trainer=True, timeout=120, cwd=cwd)


def train(graph, *args):
    return run_cli("--graph", graph, *FAST, "--epochs", 1, *args, trainer=True, timeout=120)


# --- trainer embed --out ---------------------------------------------------------------------

@pytest.mark.parametrize("out, says", [
    (".", "--out contains the input"),              # the sandbox holding graph and checkpoint
    ("parts", "--out is the input"),
    ("parts/part-0/emb", "--out lies inside the input"),
    ("ck", "--out contains the input ck/best.pt"),
    ("notes.txt", "--out is a file"),
])
def test_embed_out_never_touches_inputs(sbx, out, says):
    before = tree_hash(sbx)
    proc = embed("parts/graph.json", "ck", out, cwd=sbx)
    line = one_line_error(assert_clean_exit(proc, 2, [says]))
    assert out in line
    assert tree_hash(sbx) == before
    no_partials(sbx)


def test_embed_out_of_another_tool_needs_overwrite(sbx):
    (sbx / "theirs").mkdir()
    (sbx / "theirs" / "data.csv").write_text("1,2\n")
    before = tree_hash(sbx)
    proc = embed("parts", "ck", "theirs", cwd=sbx)
    assert_clean_exit(proc, 2, ["theirs: --out exists and is not an output of trainer embed",
                                "--overwrite"])
    assert tree_hash(sbx) == before
    proc = embed("parts", "ck", "theirs", "--overwrite", cwd=sbx)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(sbx / "theirs")) == ["_N", "embed.json"]
    # its own earlier output is replaced without --overwrite
    proc = embed("parts", "ck", "theirs", cwd=sbx)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_partials(sbx)


# --- trainer embed: training's checks before inference -----------------------------------

def test_embed_checkpoint_of_another_graph_names_the_differences(sbx, made):
    before = tree_hash(sbx)
    proc = embed(made["D7"], "ck", "emb", cwd=sbx)
    line = one_line_error(assert_clean_exit(proc, 2, ["trained on another graph or task",
                                                      "graph dispatch_id: checkpoint"]))
    assert "ck/best.pt" in line
    assert tree_hash(sbx) == before and not os.path.exists(sbx / "emb")


def test_embed_link_checkpoint_on_a_node_graph(sbx, made):
    proc = embed("parts", made["LCK"], "emb", cwd=sbx)
    one_line_error(assert_clean_exit(proc, 2, ["--task 'link'", "no edge type has train_mask"]))
    assert not os.path.exists(sbx / "emb")


def test_embed_checkpoint_of_random_bytes(sbx):
    (sbx / "junk.pt").write_bytes(os.urandom(4096))
    proc = embed("parts", "junk.pt", "emb", cwd=sbx)
    one_line_error(assert_clean_exit(proc, 2, ["junk.pt is unreadable, not a checkpoint"]))
    assert not os.path.exists(sbx / "emb")


def test_embed_checkpoint_that_is_not_the_trainers(sbx):
    import torch
    torch.save({"weights": torch.zeros(3)}, sbx / "other.pt")
    proc = embed("parts", "other.pt", "emb", cwd=sbx)
    one_line_error(assert_clean_exit(proc, 2, ["not a checkpoint of this trainer",
                                               "no model, optimizer, history, config"]))


def test_embed_damaged_part_exits_1_naming_rank_part_and_file(sbx):
    import numpy as np
    feat = np.load(sbx / "parts/part-1/node_feats/_N/feat.npy", mmap_mode="r+")
    feat[:] = 0
    feat.flush()
    del feat
    os.makedirs(sbx / "emb")                        # an earlier output of embed stands in
    (sbx / "emb" / "embed.json").write_text("{}")
    before = tree_hash(sbx / "emb")
    proc = embed("parts", "ck", "emb", cwd=sbx)
    assert_clean_exit(proc, 1, ["rank 1 failed: part 1", "part-1/node_feats/_N/feat.npy"])
    assert tree_hash(sbx / "emb") == before
    no_partials(sbx)


# --- prep report --out -----------------------------------------------------------------------

@pytest.mark.parametrize("paths, out, says", [
    (["m.json"], "m.json", "--out is the input"),
    (["parts"], "parts/graph.json", "--out lies inside the input"),
    (["parts/graph.json"], "parts/report.html", "--out lies inside the input"),
    (["m.json"], "notes.txt", "--out exists and is not a report written by prep report"),
    (["m.json"], "ck", "--out is a folder"),
    (["m.json"], "notes.txt/r.html", "is a file, so nothing can be written under it"),
])
def test_report_out_is_checked_before_any_work(scheduler, sbx, paths, out, says):
    before = tree_hash(sbx)
    text = prep_fails(scheduler, "report", *[sbx / p for p in paths], "--out", sbx / out,
                      code=2, names=[says])
    one_line_error(text)
    assert tree_hash(sbx) == before
    no_partials(sbx)


def test_report_replaces_only_its_own_page(scheduler, sbx):
    out = sbx / "r.html"
    prep_fails(scheduler, "report", sbx / "m.json", "--out", out, code=0)
    first = out.read_bytes()
    assert b'name="generator" content="graphprep prep report"' in first[:512]
    prep_fails(scheduler, "report", sbx / "m.json", "--out", out, code=0)   # its own: replaced
    prep_fails(scheduler, "report", sbx / "m.json", "--out", sbx / "notes.txt", "--overwrite",
               code=0)
    assert (sbx / "notes.txt").read_bytes().startswith(b"<!DOCTYPE html>")


def test_a_failed_report_leaves_the_previous_page(scheduler, sbx):
    out = sbx / "r.html"
    prep_fails(scheduler, "report", sbx / "m.json", "--out", out, code=0)
    before = tree_hash(out)
    (sbx / "bad.json").write_text('{"epochs": [], "summary"')       # truncated metrics
    prep_fails(scheduler, "report", sbx / "m.json", sbx / "bad.json", "--out", out, code=2,
               names=["bad.json"])
    assert tree_hash(out) == before
    no_partials(sbx)


# --- python -m graphprep.trainer --metrics-out / --checkpoint-dir --------------------------------------

@pytest.mark.parametrize("args, says", [
    (("--metrics-out", "parts/graph.json"), "--metrics-out lies inside the input"),
    (("--metrics-out", "parts/part-1/m.json"), "--metrics-out lies inside the input"),
    (("--metrics-out", "ck"), "--metrics-out is a folder"),
    (("--metrics-out", "notes.txt"), "--metrics-out exists and is not a metrics file"),
    (("--metrics-out", "ck/checkpoint.pt"), "--metrics-out is a file --checkpoint-dir writes"),
    (("--metrics-out", "ck/best.pt"), "--metrics-out is a file --checkpoint-dir writes"),
    (("--checkpoint-dir", "parts"), "--checkpoint-dir is the input"),
    (("--checkpoint-dir", "parts/ck"), "--checkpoint-dir lies inside the input"),
    (("--checkpoint-dir", "."), "--checkpoint-dir contains the input"),
    (("--checkpoint-dir", "notes.txt"), "--checkpoint-dir is a file"),
])
def test_trainer_outputs_are_checked_before_ranks_start(sbx, args, says):
    before = tree_hash(sbx)
    proc = run_cli("--graph", "parts/graph.json", *FAST, "--checkpoint-dir", "ck", *args,
                   trainer=True, timeout=60, cwd=sbx)
    text = assert_clean_exit(proc, 2, [says])
    one_line_error(text)
    assert "launching" not in text               # refused by the launcher, before any rank
    assert tree_hash(sbx) == before
    no_partials(sbx)


def test_checkpoint_dir_of_another_tool_needs_overwrite(sbx):
    (sbx / "theirs").mkdir()
    (sbx / "theirs" / "model.bin").write_bytes(b"weights")
    before = tree_hash(sbx)
    proc = train(sbx / "parts", "--checkpoint-dir", sbx / "theirs")
    one_line_error(assert_clean_exit(proc, 2, ["--checkpoint-dir exists and is not a "
                                               "checkpoint folder", "--overwrite"]))
    assert tree_hash(sbx) == before
    proc = train(sbx / "parts", "--checkpoint-dir", sbx / "theirs", "--overwrite")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sbx / "theirs" / "model.bin").read_bytes() == b"weights"   # only ours replaced
    assert {"checkpoint.pt", "best.pt"} <= set(os.listdir(sbx / "theirs"))


def test_a_failed_run_leaves_no_partial_files(sbx):
    proc = train(sbx / "parts", "--checkpoint-dir", sbx / "ck", "--metrics-out",
                 sbx / "m.json", "--epochs", 2, "--fail-rank", 0, "--fail-epoch", 1)
    assert proc.returncode == 1, proc.stderr[-3000:]
    no_partials(sbx)
    from graphprep.trainer.runtime.outputs import is_checkpoint_folder, is_metrics_file
    assert is_metrics_file(sbx / "m.json") and is_checkpoint_folder(sbx / "ck")


# --- the prep steps share the rule ------------------------------------------------------------

@pytest.mark.parametrize("step, says", [
    (("dispatch", "{G}", "{A}", "{notes}"), "OUT is a file; give the path of a folder"),
    (("dispatch", "{G}", "{A}", "{notes}", "--overwrite"), "OUT is a file; give the path"),
    (("partition", "{G}", "{notes}/A", "-p", 2), "is a file, so nothing can be written under"),
    (("split-edges", "{G}", "{notes}/S", "--etype", "_N:_E:_N"), "is a file, so nothing"),
])
def test_prep_steps_apply_the_same_rule(scheduler, made, sbx, step, says):
    fill = {"G": made["root"] / "G", "A": made["D"] + "-a", "notes": sbx / "notes.txt"}
    before = tree_hash(sbx)
    text = prep_fails(scheduler, *[str(a).format(**fill) for a in step], code=2, names=[says])
    one_line_error(text)
    assert tree_hash(sbx) == before
    no_partials(sbx)
