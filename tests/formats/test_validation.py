"""Validation: each malformed input gives exit 2 with a message naming file, field and row."""

import json
import os

import numpy as np
import pytest

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.output import write_array_chunk, write_edge_chunk, write_json

ET = EdgeType("a", "r", "b")


@pytest.fixture
def graph_dir(tmp_path):
    """A valid two-type graph: a (10 nodes, feat 2x[5,4] float32, label), b (6 nodes),
    a:r:b in two Parquet chunks of 5 edges."""
    root = tmp_path / "g"
    rng = np.random.default_rng(0)
    edge_files = []
    for i in range(2):
        rel = f"edges/a__r__b/part-{i:05d}.parquet"
        write_edge_chunk(str(root / rel), rng.integers(0, 10, 5), rng.integers(0, 6, 5))
        edge_files.append(rel)
    feat, label = [], []
    for i in range(2):
        feat.append(f"node_data/a/feat/part-{i:05d}.npy")
        write_array_chunk(str(root / feat[-1]), rng.standard_normal((5, 4)).astype(np.float32))
        label.append(f"node_data/a/label/part-{i:05d}.npy")
        write_array_chunk(str(root / label[-1]), rng.integers(0, 3, 5))
    g = ChunkedGraph(str(root), "t", ("a", "b"), {"a": 10, "b": 6}, {"a": (5, 5), "b": (6,)},
                     (ET,), {ET: (5, 5)}, {ET: ChunkFiles("parquet", tuple(edge_files))},
                     {"a": {"feat": ChunkFiles("numpy", tuple(feat)),
                            "label": ChunkFiles("numpy", tuple(label))}})
    write_json(str(root / "metadata.json"), g.to_json())
    return root


def edit_meta(root, fn):
    path = root / "metadata.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def check(prep, root, *expected, code=2, extra=()):
    result = prep("validate", root, *extra, code=code)
    for text in expected:
        assert text in result.output, result.output
    return result


def test_valid_graph_passes(prep, graph_dir):
    check(prep, graph_dir, "valid", code=0)


def test_missing_metadata(prep, graph_dir):
    os.remove(graph_dir / "metadata.json")
    check(prep, graph_dir, "metadata.json", "not found")


def test_invalid_json(prep, graph_dir):
    (graph_dir / "metadata.json").write_text('{"node_type": ["a",]')
    check(prep, graph_dir, "metadata.json", "invalid JSON", "line 1")


def test_unknown_format_name(prep, graph_dir):
    edit_meta(graph_dir, lambda m: m["edges"]["a:r:b"]["format"].update(name="orc"))
    check(prep, graph_dir, "metadata.json", "field 'edges.a:r:b.format.name'", "'orc'")


def test_missing_chunk_file(prep, graph_dir):
    os.remove(graph_dir / "edges/a__r__b/part-00001.parquet")
    check(prep, graph_dir, "field 'edges.a:r:b.data[1]'", "part-00001.parquet", "missing")


def test_declared_rows_differ_from_found(prep, graph_dir):
    def bump(m):
        m["num_edges_per_chunk"] = [[5, 6]]
        m["num_edges_per_type"] = [11]
    edit_meta(graph_dir, bump)
    check(prep, graph_dir, "part-00001.parquet", "field 'edges.a:r:b'", "declared 6 rows",
          "found 5")


def test_chunk_count_mismatch(prep, graph_dir):
    def one_chunk(m):
        m["num_edges_per_chunk"] = [[10]]
        m["num_edges_per_type"] = [10]
    edit_meta(graph_dir, one_chunk)
    check(prep, graph_dir, "field 'edges.a:r:b.data'", "lists 2 chunk files", "1 chunks")


@pytest.mark.parametrize("bad, shown", [(np.zeros((5, 4), np.float64), "float64[4]"),
                                        (np.zeros((5, 3), np.float32), "float32[3]")])
def test_dtype_or_shape_differs_between_chunks(prep, graph_dir, bad, shown):
    np.save(graph_dir / "node_data/a/feat/part-00001.npy", bad)
    check(prep, graph_dir, "part-00001.npy", "field 'node_data.a.feat'", shown, "float32[4]")


@pytest.mark.parametrize("column, value, message", [("dst", 6, "node ID 6 out of range [0, 6)"),
                                                    ("src", -1, "node ID -1 out of range")])
def test_node_id_out_of_range(prep, graph_dir, column, value, message):
    path = graph_dir / "edges/a__r__b/part-00001.parquet"
    src, dst = np.arange(5) % 10, np.arange(5) % 6
    (dst if column == "dst" else src)[3] = value
    write_edge_chunk(str(path), src, dst)
    check(prep, graph_dir, "part-00001.parquet", f"field '{column}'", "row 3", message)


def test_edge_type_names_undeclared_node_type(prep, graph_dir):
    def rename(m):
        m["edge_type"] = ["a:r:c"]
        m["edges"] = {"a:r:c": m["edges"]["a:r:b"]}
    edit_meta(graph_dir, rename)
    check(prep, graph_dir, "field 'edge_type[0]'", "undeclared node type 'c'")


def test_bad_canonical_edge_type(prep, graph_dir):
    edit_meta(graph_dir, lambda m: m.update(edge_type=["a:r"]))
    check(prep, graph_dir, "field 'edge_type'", "'a:r' is not canonical")


def test_empty_node_type(prep, graph_dir):
    def empty(m):
        m["num_nodes_per_type"] = [10, 0]
        m["num_nodes_per_chunk"] = [[5, 5], [0]]
    edit_meta(graph_dir, empty)
    check(prep, graph_dir, "field 'num_nodes_per_type[1]'", "'b' is empty")


def test_feature_rows_differ_from_node_count(prep, graph_dir):
    np.save(graph_dir / "node_data/a/label/part-00001.npy", np.zeros(4, np.int64))
    check(prep, graph_dir, "metadata.json", "field 'node_data.a.label'", "has 9 rows",
          "10 nodes")


def test_nan_in_features_error_or_warning(prep, graph_dir):
    feat = np.load(graph_dir / "node_data/a/feat/part-00001.npy")
    feat[2, 1] = np.inf
    np.save(graph_dir / "node_data/a/feat/part-00001.npy", feat)
    check(prep, graph_dir, "part-00001.npy", "field 'node_data.a.feat'", "row 2", "NaN or inf")
    result = check(prep, graph_dir, "valid (1 warnings)", code=0, extra=("--nan", "warn"))
    check(prep, graph_dir, "valid (0 warnings)", code=0, extra=("--nan", "ignore"))
    assert result.exit_code == 0


def test_truncated_parquet(prep, graph_dir):
    path = graph_dir / "edges/a__r__b/part-00000.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    check(prep, graph_dir, "part-00000.parquet", "truncated Parquet")


def test_duplicate_type_names(prep, graph_dir):
    edit_meta(graph_dir, lambda m: m.update(node_type=["a", "a"]))
    check(prep, graph_dir, "field 'node_type'", "duplicate type name 'a'")


def test_parquet_without_dst_column(prep, graph_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"src": np.arange(5), "to": np.arange(5)}),
                   graph_dir / "edges/a__r__b/part-00001.parquet")
    check(prep, graph_dir, "part-00001.parquet", "field 'dst'", "missing")


def test_negative_counts_and_sum_mismatch_in_loader(graph_dir):
    edit_meta(graph_dir, lambda m: m.update(num_nodes_per_type=[10, 7]))
    with pytest.raises(FormatError, match=r"num_nodes_per_chunk\[1\].*sum to 6"):
        load_chunked_graph(str(graph_dir))


def test_dgl_variants_load(graph_dir):
    """DGL writes either num_nodes_per_chunk or num_nodes_per_type; both load the same."""
    base = load_chunked_graph(str(graph_dir))
    edit_meta(graph_dir, lambda m: m.pop("num_nodes_per_type"))
    assert load_chunked_graph(str(graph_dir)).num_nodes == base.num_nodes
    edit_meta(graph_dir, lambda m: (m.pop("num_nodes_per_chunk"),
                                    m.update(num_nodes_per_type=[10, 6])))
    assert load_chunked_graph(str(graph_dir)).num_nodes == base.num_nodes


def test_concurrent_swaps_into_place_leave_one_whole_output(tmp_path):
    """Two machines' commit tasks on one shared file system swap the same folder at once:
    exactly one moves it in, the other finds it done; nothing fails, nothing is left aside."""
    from concurrent.futures import ThreadPoolExecutor

    from graphprep.formats.output import side_paths, swap_into_place
    final = tmp_path / "OUT"
    partial = side_paths(str(final))[0]
    for i in range(40):
        os.makedirs(partial)
        (tmp_path / partial / "graph.json").write_text(str(i))
        with ThreadPoolExecutor(2) as pool:
            swapped = list(pool.map(lambda _: swap_into_place(partial, str(final)), range(2)))
        assert sorted(swapped) == [False, True]
        assert (final / "graph.json").read_text() == str(i)
        assert sorted(os.listdir(tmp_path)) == ["OUT"]
