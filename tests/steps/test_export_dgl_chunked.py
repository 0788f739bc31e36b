"""``prep export --to dgl-chunked``: a chunked graph in DGL's chunked format.

- Round trip: ours -> DGL chunked -> ``prep chunk`` (same ``--chunk-size``) gives back every
  chunk file and ``metadata.json`` byte for byte; only ``manifest.json`` differs, as it must
  (it records the step that made the folder: ``synth`` or ``split-edges`` first, ``chunk``
  after, with their inputs and options).
- DGL's side: the export read the way DGL's own pipeline reads a chunked graph (the logic of
  ``tools/distpartitioning/dataset_utils.py``, ``array_readwriter/numpy_array.py``,
  ``data_shuffle.py`` and ``partition_algo/random_partition.py`` of dmlc/dgl, reproduced below:
  those tools are not in DGL's pip wheel) matches the original row by row.
- Wrong input kind: exit 2 naming the file the target needs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow
import pyarrow.csv
import pytest

from graphprep.formats import EdgeType, load_chunked_graph
from tests.conftest import edge_data_of, edges_of, node_data_of, run_prep

SYNTH = {"homo": ("--nodes", 5000, "--edges", 20000, "--chunk-size", 7000, "--seed", 2),
         "hetero": ("--hetero", "--nodes", 4000, "--edges", 20000, "--chunk-size", 1500,
                    "--seed", 4)}


def _chunk_size(args) -> int:
    return args[list(args).index("--chunk-size") + 1]


@pytest.fixture(scope="module", params=sorted(SYNTH))
def synth_graph(request, scheduler, tmp_path_factory):
    """A small synth graph with several chunks per type: (folder, its --chunk-size)."""
    out = tmp_path_factory.mktemp(f"dglc-{request.param}") / "g"
    run_prep(scheduler, "synth", out, *SYNTH[request.param])
    return out, _chunk_size(SYNTH[request.param])


@pytest.fixture(scope="module")
def split_graph(scheduler, cora_chunked, tmp_path_factory):
    """Cora with edge data (split-edges' edge masks), in one chunk per type."""
    out = tmp_path_factory.mktemp("dglc-split") / "s"
    run_prep(scheduler, "split-edges", cora_chunked, out, "--etype", "_N:_E:_N", "--val", 0.1,
             "--test", 0.1, "--seed", 1)
    return out


def _files(folder) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


def assert_round_trip(prep, original, tmp_path, chunk_size: int | None = None) -> str:
    """Export ``original``, chunk the export back; every file but manifest.json identical.
    Returns the export folder."""
    exported, back = tmp_path / "dglc", tmp_path / "back"
    prep("export", original, exported, "--to", "dgl-chunked")
    size = ("--chunk-size", chunk_size) if chunk_size else ()
    prep("chunk", exported, back, *size)
    before, after = _files(original), _files(back)
    assert sorted(before) == sorted(after)
    differ = sorted(name for name in before if before[name] != after[name])
    assert differ == ["manifest.json"]           # provenance: the step that made the folder
    manifest = json.loads(after["manifest.json"])
    assert manifest["step"] == "chunk" and manifest["options"]["from"] == "dgl"
    return str(exported)


def test_round_trip_of_synth_graphs_is_byte_identical(prep, synth_graph, tmp_path):
    original, chunk_size = synth_graph
    exported = assert_round_trip(prep, original, tmp_path, chunk_size)
    meta = json.load(open(os.path.join(exported, "metadata.json")))
    ours = json.load(open(os.path.join(original, "metadata.json")))
    # Our chunk boundaries, type names and order, canonical edge types, both count keys.
    for key in ("graph_name", "node_type", "num_nodes_per_type", "num_nodes_per_chunk",
                "edge_type", "num_edges_per_type", "num_edges_per_chunk"):
        assert meta[key] == ours[key], key
    for et, entry in meta["edges"].items():
        assert entry["format"] == {"name": "csv", "delimiter": " "}
        assert len(entry["data"]) == len(ours["edges"][et]["data"])
    for fields in meta["node_data"].values():
        assert all(f["format"] == {"name": "numpy"} for f in fields.values())
    if meta["node_type"] == ["_N"]:
        assert meta["edge_type"] == ["_N:_E:_N"]


def test_round_trip_keeps_edge_data(prep, split_graph, tmp_path):
    exported = assert_round_trip(prep, split_graph, tmp_path)
    meta = json.load(open(os.path.join(exported, "metadata.json")))
    masks = meta["edge_data"]["_N:_E:_N"]
    assert sorted(masks) == ["test_mask", "train_mask", "val_mask"]
    assert all(m["format"] == {"name": "numpy"} for m in masks.values())


def test_rerun_is_a_no_op_and_other_output_is_refused(prep, synth_graph, tmp_path):
    original, _ = synth_graph
    out = tmp_path / "x"
    prep("export", original, out, "--to", "dgl-chunked")
    stamp = os.stat(out / "metadata.json").st_mtime_ns
    assert "layout" not in prep("export", original, out, "--to", "dgl-chunked").output
    assert os.stat(out / "metadata.json").st_mtime_ns == stamp
    result = prep("export", original, out, "--to", "pyg", code=2)
    assert "graph.json" in result.output          # a chunked graph is not a partitioned one


# ------------------------------------------------------------ DGL's reader, reproduced
# dmlc/dgl tools/distpartitioning: what its pipeline does with a chunked graph's metadata.

DGL_DATA_DTYPES = ("float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64",
                   "bool")                        # utils.py DATA_TYPE_ID


def _dgl_path(input_dir: str, path: str) -> str:
    """dataset_utils.get_dataset: relative paths are joined to the input folder."""
    return path if os.path.isabs(path) else os.path.join(input_dir, path)


def dgl_read_edges(input_dir: str, schema: dict, etype: str):
    """dataset_utils.get_dataset's edge loop for one edge type: CSV files streamed with
    pyarrow (delimiter " " whatever the metadata says, generated column names f0/f1), 0-byte
    files skipped; Parquet files' first two columns."""
    info = schema["edges"][etype]
    src, dst = [], []
    for path in info["data"]:
        path = _dgl_path(input_dir, path)
        if info["format"]["name"] == "csv":
            if os.path.getsize(path) == 0:
                continue
            read = pyarrow.csv.ReadOptions(use_threads=True, block_size=4096,
                                           autogenerate_column_names=True)
            parse = pyarrow.csv.ParseOptions(delimiter=" ")
            with pyarrow.csv.open_csv(path, read_options=read, parse_options=parse) as reader:
                for batch in reader:
                    table = pyarrow.Table.from_batches([batch])
                    src.append(table["f0"].to_numpy())
                    dst.append(table["f1"].to_numpy())
        else:
            assert info["format"]["name"] == "parquet"
            import pyarrow.parquet as pq
            table = pq.read_table(path).rename_columns(["f0", "f1"])
            src.append(table["f0"].to_numpy())
            dst.append(table["f1"].to_numpy())
    return np.concatenate(src), np.concatenate(dst)


def dgl_read_data(input_dir: str, entry: dict) -> np.ndarray:
    """dataset_utils.get_dataset's feature loop: numpy (NumpyArrayParser.read: np.load with
    mmap_mode="r") or parquet only; chunks concatenated; _broadcast_shape's 1-D/2-D and dtype
    expectations."""
    assert entry["format"]["name"] in ("numpy", "parquet")
    assert entry["format"]["name"] == "numpy"     # what the export writes
    data = np.concatenate([np.load(_dgl_path(input_dir, p), mmap_mode="r")
                           for p in entry["data"]])
    assert data.ndim in (1, 2) and data.dtype.name in DGL_DATA_DTYPES
    return data


def dgl_type_offsets(schema: dict) -> dict[str, tuple[int, int]]:
    """utils.get_gid_offsets over get_ntype_counts_map(node_type, num_nodes_per_type), as
    data_shuffle.gen_dist_partitions computes the homogeneous ID range of each node type
    (random_partition.py reads the same two keys)."""
    counts = dict(zip(schema["node_type"], schema["num_nodes_per_type"]))
    ends = np.cumsum([counts[t] for t in schema["node_type"]])
    return {t: (int(e - counts[t]), int(e)) for t, e in zip(schema["node_type"], ends)}


def check_dgl_reads(exported: str, original) -> dict:
    """Read the export as DGL's pipeline does and compare with ``original`` row by row.
    Returns what was read: {"edges": {etype: (src, dst)}, "node_data": {(t, name): rows}}."""
    schema = json.load(open(os.path.join(exported, "metadata.json")))
    g = load_chunked_graph(str(original))
    for key in ("graph_name", "node_type", "num_nodes_per_chunk", "edge_type",
                "num_edges_per_chunk", "edges", "node_data", "edge_data"):
        assert key in schema, key                 # data_shuffle/dataset_utils index these
    assert sum(schema["num_nodes_per_type"]) == sum(g.num_nodes.values())
    assert sum(schema["num_edges_per_type"]) == sum(g.num_edges.values())
    offsets = dgl_type_offsets(schema)
    assert [offsets[t][1] - offsets[t][0] for t in g.node_types] == \
        [g.num_nodes[t] for t in g.node_types]
    read = {"edges": {}, "node_data": {}}
    for etype in schema["edge_type"]:
        assert len(etype.split(":")) == 3         # canonical, as get_dataset asserts
        for path in schema["edges"][etype]["data"]:
            assert not os.path.isabs(path) and os.path.exists(_dgl_path(exported, path))
        src, dst = dgl_read_edges(exported, schema, etype)
        want_src, want_dst = edges_of(original, etype)
        assert np.array_equal(src, want_src) and np.array_equal(dst, want_dst), etype
        read["edges"][etype] = (src, dst)
    for ntype, fields in schema["node_data"].items():
        for name, entry in fields.items():
            rows = dgl_read_data(exported, entry)
            want = node_data_of(original, ntype, name)
            assert rows.dtype == want.dtype and np.array_equal(rows, want), (ntype, name)
            read["node_data"][(ntype, name)] = rows
    for etype, fields in schema["edge_data"].items():
        for name, entry in fields.items():
            rows = dgl_read_data(exported, entry)
            want = edge_data_of(original, etype, name)
            assert rows.dtype == want.dtype and np.array_equal(rows, want), (etype, name)
    return read


def test_dgl_pipeline_reads_the_export_row_by_row(prep, synth_graph, split_graph, tmp_path):
    for i, original in enumerate((synth_graph[0], split_graph)):
        out = tmp_path / f"x{i}"
        prep("export", original, out, "--to", "dgl-chunked")
        read = check_dgl_reads(str(out), original)
        _check_with_dgl(read, original)


def _check_with_dgl(read: dict, original) -> None:
    """The graph DGL builds from what its pipeline read has the original's node counts, edges
    and node data. Without DGL (the test extra installs it) the test is skipped, naming why."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    dgl = pytest.importorskip("dgl", reason="dgl is not installed (pip install -e '.[test]')")
    import torch
    g = load_chunked_graph(str(original))
    graph = dgl.heterograph(
        {tuple(et.split(":")): (torch.from_numpy(s), torch.from_numpy(d))
         for et, (s, d) in read["edges"].items()},
        num_nodes_dict=dict(g.num_nodes))
    for (ntype, name), rows in read["node_data"].items():
        graph.nodes[ntype].data[name] = torch.from_numpy(np.array(rows))
    for et in g.edge_types:
        s, d = graph.edges(etype=(et.src, et.rel, et.dst))
        want_s, want_d = edges_of(original, str(et))
        assert np.array_equal(s.numpy(), want_s) and np.array_equal(d.numpy(), want_d)
    assert {t: graph.num_nodes(t) for t in graph.ntypes} == dict(g.num_nodes)
    for (ntype, name), rows in read["node_data"].items():
        assert np.array_equal(graph.nodes[ntype].data[name].numpy(), rows)


# ------------------------------------------------------------ errors

def test_partitioned_input_is_refused_naming_metadata_json(prep, tmp_path):
    parts = tmp_path / "d"                 # what the kind check sees of a partitioned graph
    parts.mkdir()
    (parts / "graph.json").write_text("{}")
    result = prep("export", parts, tmp_path / "x", "--to", "dgl-chunked", code=2)
    assert os.path.join(str(parts), "metadata.json") in result.output
    assert "partitioned graph" in result.output and "Traceback" not in result.output
    assert not os.path.exists(tmp_path / "x")


def test_damaged_chunk_is_named_and_nothing_is_written(prep, synth_graph, tmp_path):
    import shutil

    import pyarrow.parquet as pq

    original, _ = synth_graph
    bad = tmp_path / "bad"
    shutil.copytree(original, bad)
    g = load_chunked_graph(str(bad))
    et = g.edge_types[0]
    path = g.path(g.edges[et].files[-1])
    pq.write_table(pq.read_table(path).slice(0, 3), path)
    result = prep("export", bad, tmp_path / "x", "--to", "dgl-chunked", code=2)
    assert path in result.output and "num_edges_per_chunk" in result.output
    assert not os.path.exists(tmp_path / "x")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".x")]


@pytest.fixture
def with_empty_chunk(synth_graph, tmp_path):
    """The synth graph with a 0-edge chunk appended to its first edge type (legal in our
    format; DGL writes such chunks when a type has fewer edges than chunks)."""
    import shutil

    from graphprep.formats.output import write_edge_chunk

    folder = tmp_path / "empty-chunk"
    shutil.copytree(synth_graph[0], folder)
    meta = json.load(open(folder / "metadata.json"))
    et = meta["edge_type"][0]
    rel = f"edges/{EdgeType.parse(et).dirname}/part-99999.parquet"
    write_edge_chunk(str(folder / rel), np.empty(0, np.int64), np.empty(0, np.int64))
    meta["edges"][et]["data"].append(rel)
    meta["num_edges_per_chunk"][0].append(0)
    json.dump(meta, open(folder / "metadata.json", "w"))
    return folder, et


def test_empty_chunk_is_a_0_byte_file_that_dgl_skips(prep, with_empty_chunk, tmp_path):
    original, et = with_empty_chunk
    out = tmp_path / "x"
    prep("export", original, out, "--to", "dgl-chunked")
    meta = json.load(open(out / "metadata.json"))
    assert meta["num_edges_per_chunk"][0][-1] == 0
    assert os.path.getsize(out / meta["edges"][et]["data"][-1]) == 0
    check_dgl_reads(str(out), original)


def test_empty_chunk_reads_back(prep, with_empty_chunk, tmp_path):
    original, et = with_empty_chunk
    out = tmp_path / "x"
    prep("export", original, out, "--to", "dgl-chunked")
    prep("chunk", out, tmp_path / "back")
    assert np.array_equal(np.stack(edges_of(tmp_path / "back", et)),
                          np.stack(edges_of(original, et)))


# ------------------------------------------------------------ the Python API

@pytest.fixture(scope="module")
def client(scheduler):
    from distributed import Client

    with Client(scheduler) as c:
        yield c


def test_api_export_and_rerun(client, synth_graph, tmp_path):
    from graphprep.pipeline import api

    original, _ = synth_graph
    first = api.export(original, tmp_path / "x", to="dgl-chunked", client=client)
    assert first == api.ExportResult(str(tmp_path / "x"), "dgl-chunked", str(tmp_path / "x"))
    again = api.export(original, tmp_path / "x", to="dgl-chunked", client=client)
    assert again.reused and again.root == first.root


def test_field_dgl_cannot_carry_is_exported_with_a_warning(client, synth_graph, tmp_path,
                                                           caplog):
    """uint32 is not in DGL's pipeline's dtype list: the field is written, with a warning."""
    import shutil

    from graphprep.formats.output import write_array_chunk
    from graphprep.pipeline import api

    original, _ = synth_graph
    folder = tmp_path / "g"
    shutil.copytree(original, folder)
    meta = json.load(open(folder / "metadata.json"))
    ntype, count = meta["node_type"][0], meta["num_nodes_per_type"][0]
    rel = f"node_data/{ntype}/year/part-00000.npy"
    write_array_chunk(str(folder / rel), np.arange(count, dtype=np.uint32))
    meta["node_data"].setdefault(ntype, {})["year"] = {"format": {"name": "numpy"},
                                                       "data": [rel]}
    json.dump(meta, open(folder / "metadata.json", "w"))
    with caplog.at_level("WARNING", logger="graphprep.pipeline.export.dgl_chunked"):
        out = api.export(folder, tmp_path / "x", to="dgl-chunked", client=client).root
    assert any(f"node_data.{ntype}.year" in r.getMessage() for r in caplog.records)
    back = np.load(os.path.join(out, "node_data", ntype, "year", "part-00000.npy"))
    assert back.dtype == np.uint32 and np.array_equal(back, np.arange(count))
