"""`prep split-edges`: deterministic, leak-free held-out edges, carried through dispatch."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import edge_data_of, edges_of, rerecord, run_prep
from faultkit import prep_fails, tree_hash

ET = "_N:_E:_N"


def masks(folder, etype=ET):
    return np.stack([edge_data_of(folder, etype, m) for m in ("train_mask", "val_mask",
                                                               "test_mask")])


@pytest.fixture(scope="module")
def graph(scheduler, tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    run_prep(scheduler, "synth", root / "g", "--nodes", 5000, "--edges", 40000, "--seed", 2)
    run_prep(scheduler, "split-edges", root / "g", root / "s", "--etype", ET, "--val", 0.05,
             "--test", 0.1, "--seed", 4)
    return root


def test_fractions_and_exactly_one_split_per_edge(graph):
    m = masks(graph / "s")
    assert m.dtype == bool and (m.sum(axis=0) == 1).all()
    val, test = m[1].mean(), m[2].mean()
    assert abs(val - 0.05) < 0.006 and abs(test - 0.10) < 0.008, (val, test)


def test_same_split_for_any_chunking_and_worker_count(scheduler, graph, prep):
    run_prep(scheduler, "chunk", graph / "g", graph / "g-small-chunks", "--chunk-size", 7000)
    prep("split-edges", graph / "g-small-chunks", graph / "s2", "--etype", ET, "--val", 0.05,
         "--test", 0.1, "--seed", 4, "--workers", 1, cluster=False)
    assert len(os.listdir(graph / "s2" / "edges" / "_N___E___N")) > 1
    np.testing.assert_array_equal(edges_of(graph / "s2"), edges_of(graph / "s"))
    np.testing.assert_array_equal(masks(graph / "s2"), masks(graph / "s"))
    prep("split-edges", graph / "g", graph / "s3", "--etype", ET, "--seed", 5)
    assert not np.array_equal(masks(graph / "s3"), masks(graph / "s"))      # the seed matters


def test_both_directions_and_duplicates_share_a_split(graph):
    src, dst = edges_of(graph / "s")
    code = masks(graph / "s").argmax(axis=0)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    order = np.lexsort((hi, lo))
    same = (lo[order][1:] == lo[order][:-1]) & (hi[order][1:] == hi[order][:-1])
    assert same.sum() > 100                    # the synth graph has both directions of many
    np.testing.assert_array_equal(code[order][1:][same], code[order][:-1][same])


def test_twin_type_is_held_out_with_its_edges(scheduler, tmp_path, prep):
    folder = tmp_path / "in"
    (folder / "edges").mkdir(parents=True)
    rng = np.random.default_rng(0)
    a, p = rng.integers(0, 300, 4000), rng.integers(0, 500, 4000)
    np.savetxt(folder / "edges" / "author__writes__paper.csv", np.stack([a, p], 1), fmt="%d",
               delimiter=",", header="src,dst", comments="")
    run_prep(scheduler, "chunk", folder, tmp_path / "g", "--add-reverse-edges")
    prep("split-edges", tmp_path / "g", tmp_path / "s", "--etype", "author:writes:paper")
    fwd = masks(tmp_path / "s", "author:writes:paper").argmax(axis=0)
    rev = masks(tmp_path / "s", "paper:rev-writes:author").argmax(axis=0)
    fs, fd = edges_of(tmp_path / "s", "author:writes:paper")
    rs, rd = edges_of(tmp_path / "s", "paper:rev-writes:author")
    forward = {(int(s), int(d)): int(c) for s, d, c in zip(fs, fd, fwd)}
    assert all(forward[(int(d), int(s))] == c for s, d, c in zip(rs, rd, rev))
    assert (fwd > 0).sum() > 300


@pytest.fixture(scope="module")
def parts(scheduler, graph):
    """The split graph in 3 random parts: the dispatch folder."""
    run_prep(scheduler, "partition", graph / "s", graph / "a", "-p", 3)
    run_prep(scheduler, "dispatch", graph / "s", graph / "a", graph / "d")
    return graph / "d"


def test_masks_survive_dispatch_and_verify(graph, parts, prep):
    prep("verify", graph / "s", parts)                  # compares edge data by edge ID
    part = np.load(parts / "part-0" / "edge_feats" / "_N___E___N" / "val_mask.npy")
    assert part.dtype == bool and 0 < part.sum() < len(part)


def test_held_out_edges_stored_last_per_destination(graph, parts):
    """Each destination's validation and test in-edges come after its others, from its
    message_end.npy row on (what lets training serve the head without copying the CSC);
    within each group, edges keep their edge ID order."""
    assert json.loads((parts / "graph.json").read_text())["held_out_last"] == [ET]
    split = masks(graph / "s")
    held_of_edge = split[1] | split[2]
    tails = 0
    for p in range(3):
        folder = parts / f"part-{p}" / "edges" / "_N___E___N"
        indptr, ends = np.load(folder / "indptr.npy"), np.load(folder / "message_end.npy")
        eids = np.load(folder / "orig_ids.npy")
        held = held_of_edge[eids]
        np.testing.assert_array_equal(held, np.arange(len(eids)) >=
                                      np.repeat(ends, np.diff(indptr)))
        group = np.repeat(np.arange(len(ends)), np.diff(indptr)) * 2 + held
        same = group[1:] == group[:-1]
        assert (eids[1:][same] > eids[:-1][same]).all()        # edge ID order in a group
        tails += int((ends < indptr[1:]).sum())
    assert tails > 100                       # many destinations have held-out in-edges


def test_verify_names_a_message_end_that_lets_a_held_out_edge_carry_messages(
        scheduler, graph, parts, tmp_path):
    copy = tmp_path / "d"
    shutil.copytree(parts, copy)
    folder = copy / "part-1" / "edges" / "_N___E___N"
    indptr, ends = np.load(folder / "indptr.npy"), np.load(folder / "message_end.npy")
    v = int(np.flatnonzero(ends < indptr[1:])[0])
    eid = int(np.load(folder / "orig_ids.npy")[ends[v]])   # v's first held-out edge ...
    ends[v] += 1                                           # ... now among its messages
    np.save(folder / "message_end.npy", ends)
    rerecord(str(copy), 1, "edges/_N___E___N/message_end.npy")
    prep_fails(scheduler, "verify", graph / "s", copy, code=1,
               names=["part 1", "message_end.npy", f"original ID {eid}", "held out but before"])


@pytest.mark.faults
@pytest.mark.parametrize("args, culprit", [
    (("--etype", "_N:_X:_N"), "--etype"),
    (("--etype", "nonsense"), "--etype"),
    (("--etype", ET, "--val", 0.6, "--test", 0.5), "--val"),
    (("--etype", ET, "--twin", "_N:_E2:_N"), "--twin"),
])
def test_bad_values_exit_2(scheduler, graph, tmp_path, args, culprit):
    before = tree_hash(graph / "g")
    prep_fails(scheduler, "split-edges", graph / "g", tmp_path / "o", *args, code=2,
               names=[culprit])
    assert tree_hash(graph / "g") == before and not os.path.exists(tmp_path / "o")
