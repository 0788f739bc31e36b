"""prep chunk reads DGL's chunked graph format exactly as DGL's own tools write it (issue 16).

Fixtures are written at test time by a faithful copy of DGL's writer (tests/dgl_writer.py):
the graph comes from ``dgl.heterograph`` (its type order and ``g.edges``; dgl is in the test
extra, and without it these tests are skipped, naming why). Every test compares every edge,
data row, dtype and shape of ``prep chunk``'s output with the in-memory source arrays.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import edge_data_of, edges_of, node_data_of
from dgl_writer import dgl_chunk_graph, dgl_write_parquet
from graphprep.formats import EdgeType, load_chunked_graph

# ------------------------------------------------------------------ the source graph

def source_graph(seed=0, extra_paper_data=None):
    """A mini MAG240M: three node types (institution has fewer nodes than chunks), five edge
    types (affiliated_with has fewer edges than chunks: 0-edge chunks), node and edge data.
    Types in DGL's order, edges as ``dgl.heterograph`` returns them."""
    rng = np.random.default_rng(seed)
    num_nodes = {"author": 30, "institution": 3, "paper": 40}
    spec = {("paper", "cites", "paper"): 120, ("author", "writes", "paper"): 60,
            ("author", "affiliated_with", "institution"): 2,
            ("institution", "writes", "paper"): 7, ("paper", "rev_writes", "author"): 60}
    coo = {et: (rng.integers(0, num_nodes[et[0]], m), rng.integers(0, num_nodes[et[2]], m))
           for et, m in spec.items()}
    ntypes, etypes, edges = _dgl_order(num_nodes, coo)
    ndata = {"paper": {"feat": rng.standard_normal((40, 3)).astype(np.float32),
                       "label": rng.integers(0, 4, 40), "train_mask": rng.random(40) < 0.5,
                       **(extra_paper_data or {})},
             "author": {"train_mask": rng.random(30) < 0.5},
             "institution": {"emb": rng.standard_normal((3, 2))}}
    edata = {("paper", "cites", "paper"): {"count": rng.integers(0, 10, 120)},
             ("author", "writes", "paper"): {"year": rng.integers(1990, 2022, 60).astype(np.int32)}}
    return {"ntypes": ntypes, "etypes": etypes, "num_nodes": num_nodes, "edges": edges,
            "ndata": ndata, "edata": edata}


def _dgl_order(num_nodes, coo):
    """(ntypes, canonical etypes, {etype: int64 [E, 2]}) as DGL orders and returns them. DGL
    itself must say (a stand-in would compare the fixture writer with itself): without it the
    test is skipped, naming why."""
    dgl = pytest.importorskip("dgl", reason="dgl is not installed (pip install -e '.[test]')")
    import torch
    g = dgl.heterograph({et: (torch.from_numpy(s), torch.from_numpy(d)) for et, (s, d) in
                         coo.items()}, num_nodes_dict=num_nodes)
    edges = {et: torch.stack(g.edges(etype=et), 1).numpy() for et in g.canonical_etypes}
    return list(g.ntypes), list(g.canonical_etypes), edges


# ------------------------------------------------------------------ comparison

def assert_read_exactly(out, graph):
    """Every edge (in order), data row, dtype and shape of chunked graph ``out`` equals
    ``graph``'s arrays."""
    g = load_chunked_graph(str(out))
    assert g.node_types == tuple(graph["ntypes"])
    assert g.num_nodes == graph["num_nodes"]
    assert [tuple(str(et).split(":")) for et in g.edge_types] == graph["etypes"]
    for et, srcdst in graph["edges"].items():
        s, d = edges_of(out, ":".join(et))
        assert np.array_equal(s, srcdst[:, 0]) and np.array_equal(d, srcdst[:, 1]), et
    for t, fields in graph["ndata"].items():
        assert set(g.node_data.get(t, {})) == set(fields), t
        for name, want in fields.items():
            _same(node_data_of(out, t, name), want, f"{t}.{name}")
    for et, fields in graph["edata"].items():
        assert set(g.edge_data[EdgeType(*et)]) == set(fields), et
        for name, want in fields.items():
            _same(edge_data_of(out, ":".join(et), name), want, f"{et}.{name}")


def _same(got, want, what):
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), what


def chunk(prep, graph, tmp_path, *args, code=0, **writer):
    """DGL-write ``graph`` (4 chunks) under tmp_path/dgl, ``prep chunk`` it to tmp_path/out."""
    root = dgl_chunk_graph(graph, tmp_path / "dgl", 4, **writer)
    return prep("chunk", root, tmp_path / "out", "--chunk-size", 50, *args, code=code)


# ------------------------------------------------------------------ the tests

def test_parquet_edges_named_0_1(tmp_path, prep):
    """DGL's Parquet edge chunks (columns "0"/"1", shape metadata) and Parquet data."""
    graph = source_graph(1)
    chunk(prep, graph, tmp_path, edges_fmt="parquet", data_fmt="parquet")
    first = json.loads((tmp_path / "dgl" / "metadata.json").read_text())["edges"]
    assert pq.read_schema(first["paper:cites:paper"]["data"][0]).names == ["0", "1"]
    assert_read_exactly(tmp_path / "out", graph)


def test_vector_rows_list_columns(tmp_path, prep):
    """DGL's vector_rows: 2-D data as one list column per file (a 0-row one included)."""
    graph = source_graph(2)
    chunk(prep, graph, tmp_path, data_fmt="parquet", vector_rows=True)
    meta = json.loads((tmp_path / "dgl" / "metadata.json").read_text())
    schema = pq.read_schema(meta["node_data"]["paper"]["feat"]["data"][0])
    assert schema.names == ["vector"] and pa.types.is_list(schema.types[0])
    assert_read_exactly(tmp_path / "out", as_vector_rows(graph))


def as_vector_rows(graph):
    """``graph`` as its vector-rows files hold it: DGL writes ``pa.array(a.tolist())``, so 2-D
    float32 rows are stored (and read back by DGL) as float64."""
    def held(a):
        return np.array(a.tolist()) if a.ndim == 2 and a.shape[1] > 1 else a
    return {**graph, "ndata": {t: {k: held(a) for k, a in f.items()}
                               for t, f in graph["ndata"].items()}}


def test_list_column_reader_needs_nothing_else_imported(tmp_path):
    """graphprep.formats.arrays reads list columns in a fresh process (on the session cluster an
    earlier task may have imported pyarrow.compute already and hidden a missing import)."""
    import subprocess
    import sys

    dgl_write_parquet(tmp_path / "v.parquet", np.arange(6.0).reshape(3, 2), vector_rows=True)
    code = ("import sys; from graphprep.formats.arrays import read_array_chunk; "
            "from graphprep.formats import ChunkFiles; a = read_array_chunk(sys.argv[1], ChunkFiles('parquet', ())); "
            "print(a.shape, a.dtype)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "v.parquet")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "(3, 2) float64", done.stderr


def test_empty_csv_edge_chunk(tmp_path, prep):
    """An edge type with fewer edges than chunks: DGL writes 0-byte CSV chunks; 0 edges."""
    graph = source_graph(3)
    chunk(prep, graph, tmp_path)
    meta = json.loads((tmp_path / "dgl" / "metadata.json").read_text())
    files = meta["edges"]["author:affiliated_with:institution"]["data"]
    assert [os.path.getsize(f) == 0 for f in files] == [False, False, True, True]
    assert_read_exactly(tmp_path / "out", graph)


def test_parquet_shape_metadata(tmp_path, prep):
    """The 'shape' schema metadata of DGL's Parquet writer: (n, 1) stays (n, 1), (n, 2, 3)
    stays (n, 2, 3), with or without vector rows around them."""
    rng = np.random.default_rng(4)
    extra = {"col": rng.standard_normal((40, 1)).astype(np.float32),
             "cube": rng.integers(0, 100, (40, 2, 3)), "flag": rng.random((40, 1)) < 0.5}
    graph = source_graph(4, extra)
    chunk(prep, graph, tmp_path, data_fmt="parquet")
    meta = json.loads((tmp_path / "dgl" / "metadata.json").read_text())
    cube = pq.read_schema(meta["node_data"]["paper"]["cube"]["data"][0])
    assert cube.metadata[b"shape"] == b"(10, 2, 3)" and len(cube.names) == 6
    assert_read_exactly(tmp_path / "out", graph)


def test_missing_delimiter_means_space_and_a_wrong_one_is_named(tmp_path, prep):
    """No "delimiter" key for CSV edges: DGL's " ". A wrong one: the error asks about it."""
    graph = source_graph(5)
    root = dgl_chunk_graph(graph, tmp_path / "dgl", 4)
    meta = json.loads((root / "metadata.json").read_text())
    for entry in meta["edges"].values():
        del entry["format"]["delimiter"]
    (root / "metadata.json").write_text(json.dumps(meta))
    prep("chunk", root, tmp_path / "out", "--chunk-size", 50)
    assert_read_exactly(tmp_path / "out", graph)
    meta["edges"]["paper:cites:paper"]["format"]["delimiter"] = ","
    (root / "metadata.json").write_text(json.dumps(meta))
    r = prep("chunk", root, tmp_path / "bad", code=2)
    assert "paper:cites:paper0.txt" in r.output and "row 0" in r.output
    assert "found 1 column: is the delimiter ',' right?" in r.output


def test_nan_labels_refused_with_advice_then_kept_with_nan_ignore(tmp_path, prep):
    """MAG240M's float labels with NaN for unlabelled nodes: refused by default with advice
    (--nan ignore; what the trainer does), read exactly (NaN kept) with --nan ignore."""
    graph = source_graph(6)
    label = np.arange(40, dtype=np.float64) % 4
    label[[3, 17, 25]] = np.nan
    graph["ndata"]["paper"]["label"] = label
    r = chunk(prep, graph, tmp_path, data_fmt="parquet", code=2)
    assert "label-0.parquet" in r.output and "field 'node_data.paper.label'" in r.output
    assert "row 3" in r.output and "--nan ignore" in r.output
    assert "unlabelled" in r.output and "training seeds" in r.output
    prep("chunk", tmp_path / "dgl", tmp_path / "out", "--chunk-size", 50, "--nan", "ignore")
    assert_read_exactly(tmp_path / "out", graph)


# A fault planted in the session cluster's workers: validating a data chunk whose path holds
# "planted" raises AttributeError, as the missing pyarrow.compute import did.
PLANT = """
import graphprep.formats.validate as v
def array_info(path, files, _real=getattr(v.array_info, "real", v.array_info)):
    if "planted" in path:
        raise AttributeError("module 'pyarrow' has no attribute 'planted'")
    return _real(path, files)
array_info.real = getattr(v.array_info, "real", v.array_info)
v.array_info = array_info
"""
UNPLANT = """
import graphprep.formats.validate as v
v.array_info = getattr(v.array_info, "real", v.array_info)
"""


def test_task_exception_reaches_the_terminal(tmp_path, prep, scheduler):
    """A task that raises an unexpected error (AttributeError) fails the step with that error:
    its type, message, the chunk file and the line that raised it; never 'cancelled'."""
    from distributed import Client

    graph = source_graph(7)
    graph["ndata"]["paper"]["planted"] = np.zeros(40)
    with Client(scheduler) as client:
        client.run(exec, PLANT, {})
        try:
            r = chunk(prep, graph, tmp_path, code=1)
        finally:
            client.run(exec, UNPLANT, {})
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("Error: AttributeError: module 'pyarrow' has no attribute 'planted'")
    # whichever of the four planted chunks failed first
    assert re.search(r"on \S+/planted-\d\.npy, raised at formats/validate\.py:\d+", line), line
    assert "cancelled" not in r.output.lower() and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edges_fmt", ["csv", "parquet"])
def test_dgl_input_partitions_and_verifies(tmp_path, prep, edges_fmt):
    """What prep chunk made of DGL's files goes through partition, dispatch and verify."""
    graph = source_graph(8)
    chunk(prep, graph, tmp_path, edges_fmt=edges_fmt, data_fmt="parquet", vector_rows=True)
    assert_read_exactly(tmp_path / "out", as_vector_rows(graph))
    prep("partition", tmp_path / "out", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "out", tmp_path / "a", tmp_path / "d")
    prep("verify", tmp_path / "out", tmp_path / "d")


def test_zero_edge_type_is_kept_without_its_empty_data(tmp_path, prep):
    """An edge type with 0 edges (DGL: 0-byte chunks and 0-row data files) stays a type with
    no chunks; its data fields, which hold no rows, are not carried (a warning says so)."""
    graph = source_graph(9)
    et = ("paper", "cites", "paper")
    graph["edges"][et] = np.empty((0, 2), np.int64)
    graph["edata"][et] = {"count": np.empty(0, np.int64)}
    r = chunk(prep, graph, tmp_path)
    assert "'paper:cites:paper' has 0 edges" in r.output and "(count)" in r.output
    graph["edata"].pop(et)
    assert_read_exactly(tmp_path / "out", graph)
    assert EdgeType(*et) not in load_chunked_graph(str(tmp_path / "out")).edge_data
