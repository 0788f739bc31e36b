"""The key maps' ``keys/<type>/by_id/`` files, read as a folder by any reader (a Parquet
dataset, pandas), give the keys in ID order: table rows first, then the keys ``--dangling add``
added, with no help from metadata.json."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml

from graphprep.formats import EdgeType, load_chunked_graph, read_edge_chunk
from graphprep.pipeline import api

FOLLOWS = EdgeType("user", "follows", "user")


@pytest.fixture(scope="module")
def keyed(scheduler, tmp_path_factory):
    """Users (Parquet, 12 row groups: 12 table files) keyed by strings, and follows edges
    naming 300 more users than the table has (``dangling: add``: keys in several ``edges``
    files after the table's)."""
    root = tmp_path_factory.mktemp("order")
    rng = np.random.default_rng(7)
    users = np.array([f"u{i:05d}" for i in rng.permutation(1500)])
    table, extra = users[:1200], users[1200:]
    pq.write_table(pa.table({"uid": table}), root / "users.parquet", row_group_size=100)
    src = np.concatenate([table[rng.integers(0, 1200, 3000)], extra])
    dst = np.concatenate([extra[rng.integers(0, 300, 300)], table[rng.integers(0, 1200, 3000)]])
    pq.write_table(pa.table({"a": src, "b": dst}), root / "follows.parquet", row_group_size=400)
    (root / "g.yaml").write_text(yaml.safe_dump({
        "name": "order", "dangling": "add",
        "nodes": [{"type": "user", "files": "users.parquet", "key": "uid"}],
        "edges": [{"type": ["user", "follows", "user"], "files": "follows.parquet",
                   "src": "a", "dst": "b"}]}))
    api.chunk(str(root / "g.yaml"), str(root / "g"), chunk_size=100, scheduler=scheduler)
    return root, load_chunked_graph(str(root / "g")), table, src, dst


def test_by_id_folder_reads_in_id_order_with_any_reader(keyed):
    root, g, table, src, dst = keyed
    keymap = g.keys["user"]
    n = g.num_nodes["user"]
    assert n == 1500 and len(keymap.by_id) > 12          # table files and added keys' files
    listed = np.concatenate([pq.read_table(g.path(f)).column("key").to_numpy(
        zero_copy_only=False) for f in keymap.by_id]).astype(str)
    np.testing.assert_array_equal(listed[:1200], table)   # table rows: IDs 0..1199 in order
    folder = os.path.join(g.root, "keys", "user", "by_id")
    # metadata.json's list is the folder in name order: what every folder reader sees
    assert sorted(os.listdir(folder)) == [os.path.basename(f) for f in keymap.by_id]
    readers = {
        "pyarrow.dataset": lambda: ds.dataset(folder, format="parquet").to_table(),
        "pyarrow.parquet.read_table": lambda: pq.read_table(folder),
        "pyarrow.parquet.ParquetDataset": lambda: pq.ParquetDataset(folder).read()}
    try:
        import pandas as pd
        readers["pandas.read_parquet"] = lambda: pa.table(pd.read_parquet(folder))
    except ImportError:
        pass
    for name, read in readers.items():
        column = read().column("key")
        assert pa.types.is_large_string(column.type), (name, column.type)   # text, as given
        np.testing.assert_array_equal(column.to_numpy(zero_copy_only=False), listed,
                                      err_msg=name)
    # the key of ID i is row i of the folder: the edges come back by key
    et = g.edges[FOLLOWS]
    s, d = map(np.concatenate, zip(*[read_edge_chunk(g.path(f), et) for f in et.files]))
    assert sorted(zip(listed[s], listed[d])) == sorted(zip(src, dst))


def test_by_id_names_say_where_each_file_starts(keyed):
    _, g, _, _, _ = keyed
    keymap = g.keys["user"]
    first = np.concatenate([[0], np.cumsum(keymap.rows)[:-1]])
    for f, start in zip(keymap.by_id, first):
        stem = os.path.basename(f).removesuffix(".parquet")
        at, origin = stem.split("-")
        assert int(at) == start and len(at) == 12, f
        assert origin == ("table" if start < 1200 else "edges"), f
    assert all(r > 0 for r in keymap.rows)


def test_bytes_keys_anywhere_make_every_file_of_the_type_bytes(tmp_path):
    """Users' table keys are text, but an edge file names users by bytes: every by-ID file of
    the type holds bytes (one schema for the folder), still in ID order."""
    from graphprep.pipeline.keys.job import EdgeTable, NodeTable, map_keys
    from graphprep.pipeline.tables.parts import table_parts
    pq.write_table(pa.table({"uid": ["a", "b", "c"]}), tmp_path / "users.parquet")
    pq.write_table(pa.table({"s": pa.array([b"a", b"z", b"\xff"]),
                             "d": pa.array([b"b", b"c", b"a"])}), tmp_path / "e.parquet")
    out = str(tmp_path / "out")
    got = map_keys([NodeTable("user", tuple(table_parts(str(tmp_path / "users.parquet"),
                                                        ("uid",), 10)), "uid")],
                   [EdgeTable(FOLLOWS, tuple(table_parts(str(tmp_path / "e.parquet"),
                                                         ("s", "d"), 10)), "s", "d")],
                   out, os.path.join(out, "_staging"), lambda f, xs, desc=None: [f(x) for x in xs],
                   "add")
    folder = os.path.join(out, "keys", "user", "by_id")
    assert [os.path.join("keys", "user", "by_id", f) for f in sorted(os.listdir(folder))] \
        == list(got.maps["user"].by_id)
    keys = ds.dataset(folder, format="parquet").to_table().column("key")
    assert pa.types.is_large_binary(keys.type)
    assert keys.to_pylist()[:3] == [b"a", b"b", b"c"] and \
        sorted(keys.to_pylist()[3:]) == [b"z", b"\xff"]


def test_keyed_outputs_carry_each_rows_key_with_one_key_type(tmp_path):
    """``trainer embed``'s keyed files: row i of ``embeddings.npy`` is node ID i, and the Parquet
    files carry its key beside it. A type whose keys are bytes in one file and text in another
    (a graph chunked before keys were written as text) gets bytes throughout, not a writer
    error halfway."""
    from types import SimpleNamespace

    from graphprep.trainer.runtime.keyed_outputs import write_keyed_outputs
    graph_dir, out = tmp_path / "parts", tmp_path / "emb"
    (graph_dir / "keys").mkdir(parents=True)
    files = {"user": [("u0.parquet", pa.array(["ann", "bob"], pa.large_string())),
                      ("u1.parquet", pa.array(["cy"], pa.large_string()))],
             "blob": [("b0.parquet", pa.array([b"ok", b"fine"], pa.large_binary())),
                      ("b1.parquet", pa.array([b"\xff\xfe"], pa.large_binary()))]}
    keys = {}
    for t, parts in files.items():
        for name, column in parts:
            pq.write_table(pa.table({"key": column}), graph_dir / "keys" / name)
        keys[t] = {"kind": "string", "by_id": [f"keys/{n}" for n, _ in parts],
                   "rows_per_file": [len(c) for _, c in parts]}
    pq.write_table(pa.table({"value": ["cat", "dog"]}), graph_dir / "labels.parquet")
    graph = SimpleNamespace(root=str(graph_dir), keys=keys,
                            vocab={"user": {"label": "labels.parquet"}})
    rng = np.random.default_rng(0)
    for t in files:
        (out / t).mkdir(parents=True)
        np.save(out / t / "embeddings.npy", rng.random((3, 4), dtype=np.float32))
    np.save(out / "user" / "predictions.npy", np.array([1, 0, 1]))
    written = write_keyed_outputs(graph, str(out))
    assert sorted(written) == ["blob/embeddings.parquet", "user/embeddings.parquet",
                               "user/predictions.parquet"]
    for t, want in (("user", ["ann", "bob", "cy"]), ("blob", [b"ok", b"fine", b"\xff\xfe"])):
        table = pq.read_table(out / t / "embeddings.parquet")
        assert table["key"].to_pylist() == want
        np.testing.assert_array_equal(np.stack(table["embedding"].to_numpy(
            zero_copy_only=False)), np.load(out / t / "embeddings.npy"))
    pred = pq.read_table(out / "user" / "predictions.parquet")
    assert pred["key"].to_pylist() == ["ann", "bob", "cy"]
    assert pred["prediction"].to_pylist() == ["dog", "cat", "dog"]
