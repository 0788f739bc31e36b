"""Fault injection on data: steps check what they read (ID ranges, dtypes and shapes, NaN/inf,
format versions), partition methods refuse parts they cannot fill, verify names damaged part
files, and obscure input errors (truncated .csv.gz, IDs beyond int64, 0-edge graphs, a
heterogeneous folder starting with paper__cites__paper) end in one clear line.

Every CLI case checks the exit code, that the message names the culprit (file, field, row or
part), no traceback, the inputs' bytes unchanged and no output left behind.
"""

from __future__ import annotations

import gzip
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_prep, synth_partitioned
from faultkit import hashes, prep_fails, private_copies, tree_hash

pytestmark = pytest.mark.faults

EDGE_CHUNK = "edges/_N___E___N/part-00003.parquet"   # the 4th of 10 chunks of 20 edges
FEAT_1 = "node_data/_N/feat/part-00001.npy"             # the 2nd of 2 chunks of 20 rows


@pytest.fixture(scope="module")
def base(scheduler, tmp_path_factory):
    """A small synth graph G (40 nodes, 200 edges, chunks of 20 rows), its 2-part random
    assignment A and dispatch D (read-only: tests work on copies)."""
    return synth_partitioned(scheduler, tmp_path_factory.mktemp("faults-data"), "--nodes", 40,
                             "--edges", 200, "--seed", 5, "--num-classes", 2, "--feat-dim", 4,
                             "--chunk-size", 20)


@pytest.fixture
def work(base, tmp_path):
    """Private copies of G, A and D."""
    return private_copies(base, tmp_path)


def nothing_written(folder, out):
    """``out`` was not created, and no side folder or lock of any output is left in
    ``folder`` (dispatch keeps ``.OUT.partial`` only after a kill, to resume it)."""
    assert not os.path.exists(out), f"{out} appeared after a failure"
    left = [n for n in os.listdir(folder) if n.endswith((".partial", ".old", ".lock"))]
    assert not left, left


def set_edge(graph_dir, rel, column, row, value):
    """Rewrite one node ID of a Parquet edge chunk (the file keeps its row count)."""
    path = graph_dir / rel
    table = pq.read_table(path)
    ids = table.column(column).to_numpy().copy()
    ids[row] = value
    pq.write_table(table.set_column(table.column_names.index(column), column, pa.array(ids)),
                   path)


def fails(scheduler, work, *args, code, names, out=None, inputs=("G", "A")):
    """Run ``prep *args`` expecting failure; inputs unchanged, nothing written."""
    before = hashes(*(work / i for i in inputs))
    text = prep_fails(scheduler, *args, code=code, names=names)
    assert hashes(*(work / i for i in inputs)) == before
    if out is not None:
        nothing_written(work, out)
    return text


# ------------------------------------------------------------ edge IDs out of range

@pytest.mark.parametrize("column, value", [("dst", -1), ("src", 40)])
def test_bad_edge_id_stops_metis_partition(scheduler, work, column, value):
    set_edge(work / "G", EDGE_CHUNK, column, 5, value)
    fails(scheduler, work, "partition", work / "G", work / "P", "-p", 2, "--method", "metis",
          code=2, names=["part-00003.parquet", f"field '{column}'", "row 5", f"node ID {value}"],
          out=work / "P", inputs=("G",))


def test_bad_edge_id_stops_random_partition_statistics(scheduler, work):
    set_edge(work / "G", EDGE_CHUNK, "dst", 7, -1)
    fails(scheduler, work, "partition", work / "G", work / "P", "-p", 2, code=2,
          names=["part-00003.parquet", "field 'dst'", "row 7", "out of range [0, 40)"],
          out=work / "P", inputs=("G",))


@pytest.mark.parametrize("column, value", [("dst", -1), ("src", 40), ("dst", 2**62)])
def test_bad_edge_id_stops_dispatch(scheduler, work, column, value):
    set_edge(work / "G", EDGE_CHUNK, column, 11, value)
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["part-00003.parquet", f"field '{column}'", "row 11", f"node ID {value}"],
          out=work / "O")


def test_edge_chunk_with_other_row_count_than_declared_stops_dispatch(scheduler, work):
    path = work / "G" / EDGE_CHUNK
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 15), path)
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["part-00003.parquet", "declared 20 rows", "found 15"], out=work / "O")


# ------------------------------------------------------------ node data: NaN, dtype, shape, rows

def test_nan_feature_stops_dispatch(scheduler, work):
    feat = np.load(work / "G" / FEAT_1)
    feat[13, 2] = np.nan
    np.save(work / "G" / FEAT_1, feat)
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["part-00001.npy", "field 'node_data._N.feat'", "row 13", "NaN or inf"],
          out=work / "O")


@pytest.mark.parametrize("bad, shown", [(lambda f: f.astype(np.float64), "float64[4]"),
                                        (lambda f: f[:, :3], "float32[3]")])
def test_feature_chunk_unlike_the_first_stops_dispatch(scheduler, work, bad, shown):
    np.save(work / "G" / FEAT_1, np.ascontiguousarray(bad(np.load(work / "G" / FEAT_1))))
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["part-00001.npy", "field 'node_data._N.feat'", shown, "float32[4]"],
          out=work / "O")


def test_label_chunk_with_wrong_row_count_stops_dispatch(scheduler, work):
    rel = "node_data/_N/label/part-00001.npy"
    np.save(work / "G" / rel, np.load(work / "G" / rel)[:19])
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["label/part-00001.npy", "field 'node_data._N.label'", "has 19 rows"],
          out=work / "O")


def test_nan_policy_of_the_dispatch_plan(work, caplog):
    """"error" (the default) names file, field and row; "warn" logs it and keeps the rows;
    "ignore" says nothing."""
    from graphprep.formats import FormatError, load_chunked_graph
    from graphprep.dispatch.plan import DispatchPlan

    feat = np.load(work / "G" / FEAT_1)
    feat[4, 0] = np.inf
    np.save(work / "G" / FEAT_1, feat)
    graph = load_chunked_graph(str(work / "G"))
    with pytest.raises(FormatError, match=r"part-00001.npy, field 'node_data._N.feat', row 4"):
        DispatchPlan(graph, None, "").node_fields["_N"]["feat"].read(0, 40)
    with caplog.at_level(logging.WARNING, logger="graphprep.pipeline.convert.sources"):
        rows = DispatchPlan(graph, None, "", nan_policy="warn").node_fields["_N"]["feat"].read(
            0, 40)
    assert np.isinf(rows[24, 0]) and "row 4: NaN or inf" in caplog.text
    caplog.clear()
    rows = DispatchPlan(graph, None, "", nan_policy="ignore").node_fields["_N"]["feat"].read(
        0, 40)
    assert np.isinf(rows[24, 0]) and not caplog.text


# ------------------------------------------------------------ format versions

def test_unknown_format_version_of_the_chunked_graph(scheduler, work):
    meta = json.loads((work / "G" / "metadata.json").read_text())
    meta["format_version"] = 2
    (work / "G" / "metadata.json").write_text(json.dumps(meta))
    for args, out in ((("partition", work / "G", work / "P", "-p", 2), work / "P"),
                      (("dispatch", work / "G", work / "A", work / "O"), work / "O"),
                      (("verify", work / "G", work / "D"), None)):
        fails(scheduler, work, *args, code=2, inputs=("G", "A", "D"), out=out,
              names=["metadata.json", "field 'format_version'", "unsupported format_version 2"])


def test_unknown_format_version_of_the_assignment(scheduler, work):
    meta = json.loads((work / "A" / "partition_meta.json").read_text())
    meta["format_version"] = "1"
    (work / "A" / "partition_meta.json").write_text(json.dumps(meta))
    fails(scheduler, work, "dispatch", work / "G", work / "A", work / "O", code=2,
          names=["partition_meta.json", "field 'format_version'", "'1'"], out=work / "O")


# ------------------------------------------------------------ partitions that cannot be filled

@pytest.mark.parametrize("method", ["random", "metis"])
def test_more_parts_than_nodes_is_refused(scheduler, tmp_path, method):
    run_prep(scheduler, "synth", tmp_path / "S", "--nodes", 16, "--edges", 60,
             "--num-classes", 2)
    fails(scheduler, tmp_path, "partition", tmp_path / "S", tmp_path / "P", "-p", 20,
          "--method", method, code=2, inputs=("S",), out=tmp_path / "P",
          names=["20 parts", "16 nodes", "empty", "--num-parts"])


def test_metis_leaves_no_part_empty():
    """The fix-up after METIS: every empty part takes the lowest-degree node of the largest."""
    from graphprep.pipeline.partition.graph_ops import fill_empty_parts

    xadj = np.array([0, 3, 4, 6, 7, 7, 9])       # degrees 3, 1, 2, 1, 0, 2
    parts = np.array([0, 0, 0, 0, 1, 1])
    filled = fill_empty_parts(parts, xadj, 4)
    assert (np.bincount(filled, minlength=4) > 0).all()
    assert sorted(np.flatnonzero(filled != parts)) == [1, 3]   # degree-1 nodes of part 0
    assert (fill_empty_parts(filled, xadj, 4) == filled).all()


# ------------------------------------------------------------ verify on damaged parts

def _damage_missing(d):
    os.remove(d / "part-1" / "node_feats" / "_N" / "label.npy")
    return ["part 1", "node type _N", "label.npy", "missing"]


def _damage_truncated(d):
    path = d / "part-0" / "edges" / "_N___E___N" / "indices.npy"
    os.truncate(path, os.path.getsize(path) - 8)
    return ["part 0", "edge type _N:_E:_N", "indices.npy", "truncated"]


def _damage_dtype(d):
    path = d / "part-1" / "node_feats" / "_N" / "feat.npy"
    np.save(path, np.load(path).astype(np.float64))
    return ["part 1", "feat.npy", "float64", "expected float32"]


def _damage_swapped_edge(d):
    path = d / "part-0" / "edges" / "_N___E___N" / "indices.npy"
    idx = np.load(path)
    j = int(np.flatnonzero(idx != idx[0])[0])
    idx[[0, j]] = idx[[j, 0]]
    np.save(path, idx)
    return ["part 0", "edge type _N:_E:_N", "original ID", "endpoints"]


@pytest.mark.parametrize("damage", [_damage_missing, _damage_truncated, _damage_dtype,
                                    _damage_swapped_edge])
def test_verify_names_the_damaged_part(scheduler, work, damage):
    names = damage(work / "D")
    text = fails(scheduler, work, "verify", work / "G", work / "D", code=1,
                 names=["verify failed", *names], inputs=("G", "D"))
    assert len(text.strip().splitlines()) == 1, text


def test_verify_checks_feature_specs_in_graph_json(scheduler, work):
    meta = json.loads((work / "D" / "graph.json").read_text())
    meta["node_feats"]["_N"]["feat"]["shape"] = [5]
    (work / "D" / "graph.json").write_text(json.dumps(meta))
    fails(scheduler, work, "verify", work / "G", work / "D", code=1, inputs=("G", "D"),
          names=["graph.json node_feats", "'feat'", "float32[4]"])


# ------------------------------------------------------------ obscure input errors

def test_truncated_csv_gz(scheduler, tmp_path):
    rng = np.random.default_rng(0)
    rows = "\n".join(f"{a},{b}" for a, b in rng.integers(0, 1000, (50000, 2))) + "\n"
    data = gzip.compress(rows.encode())
    (tmp_path / "e.csv.gz").write_bytes(data[: len(data) // 2])
    fails(scheduler, tmp_path, "chunk", tmp_path / "e.csv.gz", tmp_path / "C", code=2,
          inputs=("e.csv.gz",), out=tmp_path / "C",
          names=["e.csv.gz", "truncated or corrupt"])


@pytest.mark.parametrize("value, why", [(-4, "is negative"),
                                        (2**63 - 1, "is too large"),
                                        (2**64 - 1, "is too large"),
                                        (-2**64, "is negative")])
def test_node_id_beyond_int64_or_negative_in_csv(scheduler, tmp_path, value, why):
    (tmp_path / "e.csv").write_text(f"src,dst\n0,1\n1,{value}\n2,3\n")
    fails(scheduler, tmp_path, "chunk", tmp_path / "e.csv", tmp_path / "C", code=2,
          inputs=("e.csv",), out=tmp_path / "C",
          names=["e.csv", "field 'dst'", "row 1", f"node ID {value} {why}"])


def test_node_id_beyond_int64_in_parquet_and_npy(scheduler, tmp_path):
    pq.write_table(pa.table({"src": pa.array([0, 1, 2], pa.uint64()),
                             "dst": pa.array([1, 2, 2**63], pa.uint64())}), tmp_path / "e.parquet")
    fails(scheduler, tmp_path, "chunk", tmp_path / "e.parquet", tmp_path / "C", code=2,
          inputs=("e.parquet",), out=tmp_path / "C",
          names=["e.parquet", "field 'dst'", "row 2", f"node ID {2**63} is too large"])
    (tmp_path / "n").mkdir()
    np.save(tmp_path / "n" / "src.npy", np.array([0, -7, 2]))
    np.save(tmp_path / "n" / "dst.npy", np.array([1, 2, 0]))
    fails(scheduler, tmp_path, "chunk", tmp_path / "n", tmp_path / "C", code=2,
          inputs=("n",), out=tmp_path / "C",
          names=["field 'src'", "row 1", "node ID -7 is negative"])


@pytest.mark.parametrize("layout", ["npz", "npy folder"])
def test_truncated_numpy_input(scheduler, tmp_path, layout):
    edge_index = np.arange(2000).reshape(2, 1000) % 50
    if layout == "npz":
        np.savez(tmp_path / "g.npz", edge_index=edge_index)
        data = (tmp_path / "g.npz").read_bytes()
        (tmp_path / "g.npz").write_bytes(data[: len(data) // 2])
        given, culprit = tmp_path / "g.npz", "g.npz"
    else:
        (tmp_path / "g").mkdir()
        np.save(tmp_path / "g" / "src.npy", edge_index[0])
        np.save(tmp_path / "g" / "dst.npy", edge_index[1])
        os.truncate(tmp_path / "g" / "dst.npy", 1000)
        given, culprit = tmp_path / "g", "dst.npy"
    fails(scheduler, tmp_path, "chunk", given, tmp_path / "C", code=2, inputs=(given.name,),
          out=tmp_path / "C", names=[culprit, "truncated"])


def test_sparse_ids_implying_a_huge_graph(scheduler, tmp_path):
    (tmp_path / "e.csv").write_text(f"0,1\n1,{2**62}\n")
    fails(scheduler, tmp_path, "chunk", tmp_path / "e.csv", tmp_path / "C", code=2,
          inputs=("e.csv",), out=tmp_path / "C",
          names=["e.csv", "field 'dst'", f"node ID {2**62}", "dense"])


@pytest.mark.parametrize("method", ["random", "metis"])
def test_zero_edge_graph_end_to_end(scheduler, prep, tmp_path, method):
    """Isolated nodes are a valid graph: chunk -> partition -> dispatch -> verify, exit 0."""
    np.savez(tmp_path / "g.npz", edge_index=np.zeros((2, 0), np.int64),
             x=np.arange(30, dtype=np.float32).reshape(10, 3), y=np.arange(10) % 2)
    prep("chunk", tmp_path / "g.npz", tmp_path / "C")
    prep("partition", tmp_path / "C", tmp_path / "P", "-p", 2, "--method", method)
    prep("dispatch", tmp_path / "C", tmp_path / "P", tmp_path / "D")
    assert "0 edges and 10 nodes" in prep("verify", tmp_path / "C", tmp_path / "D").output
    meta = json.loads((tmp_path / "D" / "graph.json").read_text())
    assert meta["num_edges"] == {"_N:_E:_N": 0}
    indptr = [np.load(tmp_path / "D" / f"part-{p}" / "edges" / "_N___E___N" / "indptr.npy")
              for p in range(2)]
    assert [len(i) for i in indptr] == [r[1] - r[0] + 1 for r in meta["node_map"]["_N"]]
    assert all((i == 0).all() for i in indptr)


def test_hetero_folder_starting_with_paper_cites_paper(scheduler, prep, tmp_path):
    edges = tmp_path / "in" / "edges"
    edges.mkdir(parents=True)
    (edges / "paper__cites__paper.csv").write_text("0,1\n1,2\n2,0\n3,4\n")
    (edges / "paper__has_topic__field.csv").write_text("0,0\n4,1\n")
    (edges / "author__writes__paper.csv").write_text("")     # a type without edges
    before = tree_hash(tmp_path / "in")
    out = prep("chunk", tmp_path / "in", tmp_path / "C", "--num-nodes", "author=2").output
    assert tree_hash(tmp_path / "in") == before
    meta = json.loads((tmp_path / "C" / "metadata.json").read_text())
    assert meta["node_type"] == ["author", "paper", "field"]
    assert meta["num_nodes_per_type"] == [2, 5, 2]
    assert meta["num_edges_per_type"] == [0, 4, 2] and "paper:cites:paper" in out
    prep("partition", tmp_path / "C", tmp_path / "P", "-p", 2, "--method", "metis")
    prep("dispatch", tmp_path / "C", tmp_path / "P", tmp_path / "D")
    prep("verify", tmp_path / "C", tmp_path / "D")
