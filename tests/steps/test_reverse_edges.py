"""Reversed edges (issue 48): ``--add-reverse-edges`` and a table's ``reverse: true`` add
every edge that is not a self loop reversed (a self loop is its own reverse, left single and
counted in the log), and the chunked graph records how it was made (``chunked`` in
metadata.json; graphs without it still load)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import yaml

from graphprep.formats import EdgeType, FormatError, load_chunked_graph

from conftest import edge_data_of, edges_of, sorted_pairs
from faultkit import assert_clean_exit, prep_fails, run_cli


def _edge_list(path, n=50, m=400, loops=20, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    dst[:loops] = src[:loops]
    np.savetxt(path, np.stack([src, dst], 1), fmt="%d", delimiter=",", header="src,dst",
               comments="")
    return src, dst


def test_self_loops_stay_single_and_are_logged(tmp_path, scheduler):
    """--add-reverse-edges on a homogeneous edge list: each non-loop edge both ways, each self
    loop once (it doubled them silently); the count left single is logged."""
    from graphprep.formats.schema import ChunkRecord
    src, dst = _edge_list(tmp_path / "e.csv")
    proc = run_cli("chunk", tmp_path / "e.csv", tmp_path / "g", "--add-reverse-edges",
                   "--chunk-size", 64, "--scheduler", scheduler, "--no-progress")
    text = assert_clean_exit(proc, 0)
    loop = src == dst
    assert f"{loop.sum()} self loops left single" in text
    s, d = edges_of(tmp_path / "g")
    want = sorted_pairs(np.concatenate([src, dst[~loop]]), np.concatenate([dst, src[~loop]]))
    assert np.array_equal(sorted_pairs(s, d), want)
    # the type's own edges first, in input order; then the reversed ones in the same order
    assert np.array_equal(s[:len(src)], src) and np.array_equal(d[:len(src)], dst)
    assert np.array_equal(s[len(src):], dst[~loop])
    made = load_chunked_graph(str(tmp_path / "g")).made
    et = EdgeType("_N", "_E", "_N")
    assert made == ChunkRecord({et: et}, None, {}, {}, False, False)


def test_hetero_reverse_type_leaves_self_loops_single(tmp_path, prep):
    """Heterogeneous: the rev-<rel> type of a paper->paper type has no copy of a self loop."""
    root = tmp_path / "in"
    (root / "edges").mkdir(parents=True)
    src, dst = _edge_list(root / "edges" / "paper__cites__paper.csv", loops=7)
    a, p = _edge_list(root / "edges" / "author__writes__paper.csv", loops=0, seed=1)
    prep("chunk", root, tmp_path / "g", "--add-reverse-edges")
    loop = src == dst
    rs, rd = edges_of(tmp_path / "g", "paper:rev-cites:paper")
    assert np.array_equal(rs, dst[~loop]) and np.array_equal(rd, src[~loop])
    ws, wd = edges_of(tmp_path / "g", "paper:rev-writes:author")
    assert len(ws) == len(a)          # author->paper edges are never self loops
    made = load_chunked_graph(str(tmp_path / "g")).made
    assert made.reverse[EdgeType("paper", "cites", "paper")] == \
        EdgeType("paper", "rev-cites", "paper")


def test_record_of_a_keyed_graph_and_older_graphs_load(tmp_path, prep):
    """A tables config's ``reverse`` and ``--dangling add`` are recorded; a metadata.json
    without the record (older graphs) loads, one with a bad record names its field."""
    from graphprep.formats.schema import ChunkRecord
    pacsv.write_csv(pa.table({"id": ["x", "y", "z"]}), tmp_path / "n.csv")
    pacsv.write_csv(pa.table({"a": ["x", "y", "q", "z"], "b": ["y", "z", "x", "z"]}),
                    tmp_path / "e.csv")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({
        "nodes": [{"type": "n", "files": "n.csv", "key": "id"}],
        "edges": [{"type": "n:to:n", "files": "e.csv", "src": "a", "dst": "b",
                   "reverse": True}]}))
    prep("chunk", tmp_path / "g.yaml", tmp_path / "g", "--dangling", "add")
    graph = load_chunked_graph(str(tmp_path / "g"))
    et = EdgeType("n", "to", "n")
    assert graph.made == ChunkRecord({et: et}, "add", {"n": 1}, {}, False, False)
    assert graph.num_edges[et] == 4 + 3            # z -> z stays single
    meta = json.loads((tmp_path / "g" / "metadata.json").read_text())
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "g", old)
    (old / "metadata.json").write_text(json.dumps({k: v for k, v in meta.items()
                                                   if k != "chunked"}))
    assert load_chunked_graph(str(old)).made is None
    for key, value, field in [("dangling", "sometimes", "chunked.dangling"),
                              ("reverse", {"n:to:n": "n:from:n"}, "chunked.reverse.n:to:n"),
                              ("added_nodes", {"n": -1}, "chunked.added_nodes")]:
        bad = {**meta, "chunked": {**meta["chunked"], key: value}}
        (old / "metadata.json").write_text(json.dumps(bad))
        with pytest.raises(FormatError) as err:
            load_chunked_graph(str(old))
        assert err.value.field == field


EDGE = {"type": "a:r:b", "files": "e.csv", "src": "s", "dst": "d"}


@pytest.mark.parametrize("edges, field, words", [
    ([{**EDGE, "reverse": "yes"}], "edges[0].reverse", "true or false"),
    ([{**EDGE, "reverse_type": "back"}], "edges[0].reverse_type", "needs reverse: true"),
    ([{**EDGE, "reverse": True, "reverse_type": ["a", "back", "b"]}],
     "edges[0].reverse_type", "b:<rel>:a"),
    ([{**EDGE, "reverse": True, "reverse_type": "b:back"}], "edges[0].reverse_type",
     "canonical"),
    ([{**EDGE, "reverse": True, "reverse_type": 7}], "edges[0].reverse_type",
     "relation name"),
    ([{**EDGE, "reverse": True, "reverse_type": "back"},
      {**EDGE, "type": "b:back:a"}], "edges[0].reverse_type", "edges[1]"),
    ([{**EDGE, "reverse": True, "reverse_type": "back"},
      {**EDGE, "type": "a:r2:b", "reverse": True, "reverse_type": "back"}],
     "edges[1].reverse_type", "edges[0].reverse_type"),
    ([EDGE, {**EDGE, "src": "d", "dst": "s"}], "edges[1].type", "reverse: true"),
])
def test_bad_reverse_config_names_the_field(tmp_path, scheduler, edges, field, words):
    """A wrong ``reverse``/``reverse_type`` (or an undirected table given twice): exit 2
    naming the config and the field."""
    pacsv.write_csv(pa.table({"s": ["x"], "d": ["y"]}), tmp_path / "e.csv")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"edges": edges}))
    prep_fails(scheduler, "chunk", tmp_path / "g.yaml", tmp_path / "g", code=2,
               names=("g.yaml", f"field '{field}'", words))
    assert not (tmp_path / "g").exists()


def test_add_reverse_edges_into_an_input_type_is_refused(tmp_path, scheduler):
    """--add-reverse-edges where a table already is the dst:rev-<rel>:src type: refused (the
    two would write the same files)."""
    pacsv.write_csv(pa.table({"s": ["x"], "d": ["y"]}), tmp_path / "e.csv")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"edges": [
        EDGE, {**EDGE, "type": "b:rev-r:a"}]}))
    prep_fails(scheduler, "chunk", tmp_path / "g.yaml", tmp_path / "g", "--add-reverse-edges",
               code=2, names=("--add-reverse-edges", "b:rev-r:a"))
    assert not (tmp_path / "g").exists()


def test_split_edges_finds_a_named_reverse_type_from_the_record(tmp_path, prep):
    """A config's ``reverse_type: written_by`` is the twin ``prep split-edges`` holds out with
    the type, without ``--twin`` (only ``rev-<rel>`` names were found before)."""
    rng = np.random.default_rng(3)
    pairs = sorted({(f"a{a}", f"p{p}") for a, p in rng.integers(0, 30, (120, 2))})
    pacsv.write_csv(pa.table({"author": [a for a, _ in pairs], "paper": [p for _, p in pairs]}),
                    tmp_path / "writes.csv")
    config = {"name": "w", "edges": [{"type": ["author", "writes", "paper"],
                                      "files": "writes.csv", "src": "author", "dst": "paper",
                                      "reverse": True, "reverse_type": "written_by"}]}
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(config))
    prep("chunk", tmp_path / "w.yaml", tmp_path / "g")
    out = prep("split-edges", tmp_path / "g", tmp_path / "s", "--etype",
               "author:writes:paper").output
    forward, twin = EdgeType("author", "writes", "paper"), EdgeType("paper", "written_by",
                                                                    "author")
    held = {}
    for et in (forward, twin):
        s, d = edges_of(tmp_path / "s", str(et))
        ends = zip(s.tolist(), d.tolist()) if et == forward else zip(d.tolist(), s.tolist())
        test = edge_data_of(tmp_path / "s", str(et), "test_mask").astype(bool)
        held[et] = sorted(pair for pair, t in zip(ends, test) if t)
    assert held[forward] and held[twin] == held[forward], out
