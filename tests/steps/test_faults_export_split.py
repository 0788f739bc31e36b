"""Fault injection on `prep split-edges` of 0-edge types and on `prep export` of damaged parts.

- A 0-edge type carries no edge data (FORMATS.md §1: a field needs a chunk file), so
  `prep split-edges` writes no masks for a 0-edge split type or twin, with a warning; the
  output validates, partitions, dispatches and verifies, and the trainer's link task refuses a
  0-edge type in one line.
- `prep export --to pyg|dgl` checks every part as the trainer does (formats/part_checks.py)
  before it writes: a part whose orig_ids were edited in place (same size, same header) to
  hold out-of-range IDs exits 2 naming the file, with no traceback, no output and the input
  bytes unchanged.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import edge_data_of, synth_partitioned
from faultkit import assert_clean_exit, prep_fails, private_copies, run_cli, tree_hash

pytestmark = pytest.mark.faults

MASKS = ("train_mask", "val_mask", "test_mask")
ET = "_N:_E:_N"


def pipeline_after_split(prep, split, root, parts=2):
    """validate -> partition -> dispatch -> verify of ``split`` (each exit 0); graph.json."""
    assert "valid" in prep("validate", split).output
    prep("partition", split, root / "A", "-p", parts)
    prep("dispatch", split, root / "A", root / "D")
    verified = prep("verify", split, root / "D").output
    assert "verified" in verified, verified
    return json.loads((root / "D" / "graph.json").read_text()), verified


def link_training_refused(graph_json, tmp_path, *args, names):
    """`python -m graphprep.trainer --task link` on ``graph_json`` ends in one clear line (exit 2, a
    usage error), before any rank starts."""
    proc = run_cli("--graph", graph_json, "--task", "link", "--epochs", 1, "--checkpoint-dir",
                   tmp_path / "ckpt", *args, trainer=True, timeout=120)
    text = assert_clean_exit(proc, 2, names)
    errors = [line for line in text.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, text
    assert not os.path.exists(tmp_path / "ckpt")


# ------------------------------------------------------------ split-edges of 0-edge types

def test_split_edges_of_a_0_edge_graph_end_to_end(prep, tmp_path):
    (tmp_path / "z").mkdir()
    np.save(tmp_path / "z" / "src.npy", np.zeros(0, np.int64))
    np.save(tmp_path / "z" / "dst.npy", np.zeros(0, np.int64))
    prep("chunk", tmp_path / "z", tmp_path / "Z0", "--num-nodes", 10)
    before = tree_hash(tmp_path / "Z0")
    out = prep("split-edges", tmp_path / "Z0", tmp_path / "S", "--etype", ET).output
    assert tree_hash(tmp_path / "Z0") == before
    assert f"split {ET}: train 0, val 0, test 0 (0 edges: no masks written)" in out, out
    assert f"WARNING graphprep.pipeline.split_edges: edge type '{ET}' has 0 edges: no split masks" in out
    meta = json.loads((tmp_path / "S" / "metadata.json").read_text())
    assert meta["num_edges_per_type"] == [0] and meta["num_edges_per_chunk"] == [[]]
    assert meta["edge_data"] == {}                  # no mask fields: 0 rows, no chunk to hold
    assert meta["num_nodes_per_type"] == [10]

    graph, verified = pipeline_after_split(prep, tmp_path / "S", tmp_path)
    assert "0 edges and 10 nodes" in verified
    assert graph["num_edges"] == {ET: 0} and not graph["edge_feats"].get(ET)
    assert not os.path.exists(tmp_path / "D" / "part-0" / "edge_feats")
    # the trainer's link task: a clear line, not a crash on a type with nothing to predict
    graph_json = tmp_path / "D" / "graph.json"
    link_training_refused(graph_json, tmp_path, names=[ET, "0-edge", "no links to predict"])
    link_training_refused(graph_json, tmp_path, "--target-etype", ET,
                          names=[f"edge type {ET} has 0 edges", "no links to predict"])


@pytest.fixture
def hetero(prep, tmp_path):
    """authors write papers (4 edges), papers cite papers (6); the twin paper:rev-writes:author
    and field:has:paper have 0 edges. The chunked graph H."""
    edges = tmp_path / "in" / "edges"
    edges.mkdir(parents=True)
    (edges / "paper__cites__paper.csv").write_text("0,1\n1,2\n2,0\n3,4\n0,4\n2,3\n")
    (edges / "author__writes__paper.csv").write_text("0,0\n1,1\n1,2\n0,3\n")
    (edges / "paper__rev-writes__author.csv").write_text("")
    (edges / "field__has__paper.csv").write_text("")
    prep("chunk", tmp_path / "in", tmp_path / "H", "--num-nodes", "field=3")
    return tmp_path / "H"


@pytest.mark.parametrize("etype, rows, empty_twin", [
    ("author:writes:paper", 4, "paper:rev-writes:author"),   # its twin is empty
    ("paper:cites:paper", 6, None),                           # another type is empty
])
def test_split_edges_of_hetero_graph_with_empty_types(prep, tmp_path, hetero, etype, rows,
                                                      empty_twin):
    from graphprep.formats.partitioned import load_partitioned
    from graphprep.trainer.config import target_etype

    before = tree_hash(hetero)
    out = prep("split-edges", hetero, tmp_path / "S", "--etype", etype, "--val", 0.25,
               "--test", 0.25).output
    assert tree_hash(hetero) == before
    meta = json.loads((tmp_path / "S" / "metadata.json").read_text())
    assert list(meta["edge_data"]) == [etype]       # no masks on 0-edge types
    assert sorted(meta["edge_data"][etype]) == sorted(MASKS)
    masks = np.stack([edge_data_of(tmp_path / "S", etype, m) for m in MASKS])
    assert masks.dtype == np.bool_ and masks.shape == (3, rows)
    assert (masks.sum(axis=0) == 1).all()           # every edge in exactly one split
    counts = [int(c) for c in masks.sum(axis=1)]
    assert f"split {etype}: train {counts[0]}, val {counts[1]}, test {counts[2]}" in out, out
    if empty_twin:
        assert f"split {empty_twin}: train 0, val 0, test 0 (0 edges: no masks written)" in out

    graph, _ = pipeline_after_split(prep, tmp_path / "S", tmp_path)
    assert {e for e, f in graph["edge_feats"].items() if f} == {etype}
    assert graph["num_edges"]["field:has:paper"] == 0
    parts = load_partitioned(str(tmp_path / "D"))
    assert str(target_etype(parts, None)) == etype  # what --task link trains on
    with pytest.raises(ValueError, match="field:has:paper has 0 edges: no links to predict"):
        target_etype(parts, "field:has:paper")


def test_split_edges_of_the_empty_type_of_a_hetero_graph(prep, tmp_path, hetero):
    """The split type itself is the empty one (it has no twin: author:writes:paper is not
    named rev-rev-writes): nothing is masked, every later step passes, training refuses."""
    out = prep("split-edges", hetero, tmp_path / "S", "--etype", "paper:rev-writes:author")
    assert "split paper:rev-writes:author: train 0, val 0, test 0 (0 edges" in out.output
    assert json.loads((tmp_path / "S" / "metadata.json").read_text())["edge_data"] == {}
    pipeline_after_split(prep, tmp_path / "S", tmp_path)
    link_training_refused(tmp_path / "D" / "graph.json", tmp_path, "--target-etype",
                          "rev-writes", names=["paper:rev-writes:author has 0 edges"])


# ------------------------------------------------------------ export of damaged parts

@pytest.fixture(scope="module")
def base(scheduler, tmp_path_factory):
    """A synth graph G (300 nodes, 2000 edges), its 2-part assignment A and dispatch D."""
    return synth_partitioned(scheduler, tmp_path_factory.mktemp("faults-export"), "--nodes",
                             300, "--edges", 2000, "--seed", 7, "--num-classes", 3)


@pytest.fixture
def work(base, tmp_path):
    return private_copies(base, tmp_path, names=("D",))


def _edit_in_place(path, row, value):
    """Write ``value`` at ``row`` of a .npy through a memory map: same size, same header."""
    size, head = os.path.getsize(path), open(path, "rb").read(128)
    arr = np.load(path, mmap_mode="r+")
    arr[row] = value
    arr.flush()
    del arr
    assert os.path.getsize(path) == size and open(path, "rb").read(128) == head


DAMAGE = {
    # the last owned node ID of part 0 set to N: still increasing, only out of range
    "node orig_ids": (0, "nodes/_N/orig_ids.npy", -1, lambda g: g["num_nodes"]["_N"],
                      "value {v} outside [0, {n})"),
    # an edge of part 1 given an original ID past the type's count
    "edge orig_ids": (1, "edges/_N___E___N/orig_ids.npy", 5,
                      lambda g: g["num_edges"][ET] + 1000, "original edge ID {v} outside [0, {n})"),
}


@pytest.mark.parametrize("to", ["pyg", "dgl"])
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_export_of_a_damaged_part_names_the_file(scheduler, work, to, case):
    if to == "dgl":
        pytest.importorskip("dgl")
    p, rel, row, bad, says = DAMAGE[case]
    graph = json.loads((work / "D" / "graph.json").read_text())
    value = bad(graph)
    _edit_in_place(work / "D" / f"part-{p}" / rel, row, value)
    before = tree_hash(work / "D")
    limit = graph["num_nodes"]["_N"] if case.startswith("node") else graph["num_edges"][ET]
    text = prep_fails(scheduler, "export", work / "D", work / "X", "--to", to, code=2,
                      names=[f"part-{p}/{rel}", says.format(v=value, n=limit)])
    assert len(text.strip().splitlines()) == 1, text
    assert tree_hash(work / "D") == before
    assert not os.path.exists(work / "X")
    assert not [n for n in os.listdir(work) if n.endswith((".partial", ".old", ".lock"))]


def test_export_of_undamaged_parts_still_works(scheduler, work):
    """The check passes a clean dispatch (and reads, never writes, it)."""
    before = tree_hash(work / "D")
    prep_fails(scheduler, "export", work / "D", work / "X", "--to", "pyg", code=0)
    assert tree_hash(work / "D") == before
    assert os.path.exists(work / "X" / "synth-partitions" / "META.json")
