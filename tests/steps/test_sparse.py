"""Sparse (CSR) node features stay sparse from input to parts: tables with a list column of
active indices, PyG sparse tensors; chunk -> partition -> dispatch -> verify keeps every row's
entries by key; bad input is named by file, field and row; export densifies."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graphprep.formats import FormatError, load_chunked_graph
from graphprep.formats.arrays import read_array_chunk
from graphprep.formats.output import write_csr_parquet
from graphprep.formats.sparse import (CsrRows, concat_rows, csr_from_lists, load_csr,
                                      read_csr_parquet)
from graphprep.pipeline import api
from tests.conftest import run_prep

DIM = 300


def random_dense(rng, n, dim, density=0.05):
    a = rng.random((n, dim)).astype(np.float32)
    a[rng.random((n, dim)) > density] = 0
    return a


def test_csr_rows_index_like_dense():
    rng = np.random.default_rng(0)
    a = random_dense(rng, 200, 40)
    a[7] = 0                                     # an empty row
    rows = CsrRows.from_dense(a)
    pick = rng.integers(0, 200, 500)
    mask = rng.random(200) < 0.3
    assert np.array_equal(rows.to_dense(), a)
    assert np.array_equal(rows[pick].to_dense(), a[pick])
    assert np.array_equal(rows[mask].to_dense(), a[mask])
    assert np.array_equal(rows[13:91].to_dense(), a[13:91])
    assert np.array_equal(rows[::3].to_dense(), a[::3])
    assert np.array_equal(concat_rows([rows[:50], rows[50:50], rows[50:]]).to_dense(), a)
    assert rows[pick].shape == (500, 40) and rows.nnz == np.count_nonzero(a)


def test_csr_parquet_round_trip_and_bad_lists(tmp_path):
    rng = np.random.default_rng(1)
    a = random_dense(rng, 64, DIM)
    write_csr_parquet(str(tmp_path / "c.parquet"), CsrRows.from_dense(a))
    assert np.array_equal(read_csr_parquet(str(tmp_path / "c.parquet")).to_dense(), a)
    indices = pa.array([[1, 2], [3], [DIM]])
    with pytest.raises(FormatError) as err:
        csr_from_lists(indices, None, DIM, file="t.parquet", field="words", row0=10)
    assert (err.value.file, err.value.field, err.value.row) == ("t.parquet", "words", 12)
    assert f"active index {DIM} outside [0, {DIM})" in str(err.value)
    with pytest.raises(FormatError) as err:
        csr_from_lists(pa.array([[1, 2], [3]]), pa.array([[1.0, 2.0], [3.0, 4.0]]), DIM,
                       file="t.parquet", field="words")
    assert err.value.row == 1 and "differs in length" in str(err.value)
    with pytest.raises(FormatError) as err:
        csr_from_lists(pa.array([[1], None]), None, DIM, file="t.parquet", field="words")
    assert err.value.row == 1 and "null" in str(err.value)


def write_pages(root, n=2500, seed=0):
    """A node table keyed by strings with a list column of active word indices (and their
    weights), a label; an edge table between the keys. Returns the expected rows by key."""
    rng = np.random.default_rng(seed)
    keys = np.array([f"page-{i * 7919 % 100003:06d}" for i in range(n)])
    words = [np.unique(rng.integers(0, DIM, rng.integers(0, 25))) for _ in range(n)]
    weights = [rng.random(len(w)).astype(np.float32) + 0.5 for w in words]
    os.makedirs(root / "tables", exist_ok=True)
    table = pa.table({"key": keys, "words": [w.tolist() for w in words],
                      "weights": [w.tolist() for w in weights],
                      "kind": rng.choice(["a", "b", "c"], n)})
    pq.write_table(table, root / "tables" / "pages.parquet", row_group_size=600)
    src, dst = rng.integers(0, n, 20000), rng.integers(0, n, 20000)
    pq.write_table(pa.table({"a": keys[src], "b": keys[dst]}), root / "tables" / "links.parquet")
    config = {"name": "pages",
              "nodes": [{"type": "page", "files": "tables/pages.parquet", "key": "key",
                         "sparse": {"feat": {"indices": "words", "values": "weights",
                                             "dim": DIM}},
                         "label": "kind", "split": {"fractions": [0.6, 0.2, 0.2], "seed": 0}}],
              "edges": [{"type": ["page", "links", "page"], "files": "tables/links.parquet",
                         "src": "a", "dst": "b"}]}
    with open(root / "pages.json", "w") as f:
        json.dump(config, f)
    dense = np.zeros((n, DIM), np.float32)
    for i, (w, v) in enumerate(zip(words, weights)):
        dense[i, w] = v
    return dict(zip(keys, dense))


@pytest.fixture(scope="module")
def pages(scheduler, tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    expect = write_pages(root)
    api.chunk(str(root / "pages.json"), str(root / "g"), chunk_size=900, scheduler=scheduler)
    run_prep(scheduler, "partition", root / "g", root / "a", "-p", 2)
    run_prep(scheduler, "dispatch", root / "g", root / "a", root / "d")
    return root, expect, scheduler


def test_chunked_graph_keeps_sparse_rows_by_key(pages):
    root, expect, _ = pages
    g = load_chunked_graph(str(root / "g"))
    files = g.node_data["page"]["feat"]
    assert files.format == "csr" and files.dim == DIM
    assert all(f.endswith(".parquet") for f in files.files) and len(files.files) == 3
    rows = concat_rows([read_array_chunk(g.path(f), files) for f in files.files])
    keys = api.node_keys(str(root / "g"), "page", np.arange(len(rows))).to_pylist()
    got = rows.to_dense()
    assert np.array_equal(got, np.stack([expect[k] for k in keys]))


def test_parts_hold_every_sparse_row_once_by_key(pages):
    root, expect, _ = pages
    spec = json.load(open(root / "d" / "graph.json"))["node_feats"]["page"]["feat"]
    assert spec == {"dtype": "float32", "shape": [DIM], "format": "csr"}
    seen = {}
    for p in range(2):
        part = root / "d" / f"part-{p}"
        assert not os.path.exists(part / "node_feats" / "page" / "feat.npy")
        rows = load_csr(str(part / "node_feats" / "page" / "feat"), DIM).to_dense()
        orig = np.load(part / "nodes" / "page" / "orig_ids.npy")
        for key, row in zip(api.node_keys(str(root / "g"), "page", orig).to_pylist(), rows):
            assert key not in seen
            seen[key] = row
    assert seen.keys() == expect.keys()
    assert all(np.array_equal(seen[k], expect[k]) for k in expect)


def test_verify_passes_and_names_a_changed_sparse_value(pages, prep, tmp_path):
    root, _, _ = pages
    prep("verify", root / "g", root / "d")
    bad = tmp_path / "d"
    import shutil
    shutil.copytree(root / "d", bad)
    values = bad / "part-1" / "node_feats" / "page" / "feat.values.npy"
    v = np.load(values)
    v[len(v) // 2] += 1
    np.save(values, v)
    out = prep("verify", root / "g", bad, code=1).output
    assert "part 1, node type page" in out and "node data 'feat' differs" in out


def test_export_densifies_for_pyg(pages, prep, tmp_path):
    torch = pytest.importorskip("torch")
    root, expect, _ = pages
    prep("export", root / "d", tmp_path / "pyg", "--to", "pyg")
    folder = tmp_path / "pyg" / "pages-partitions"
    for p in range(2):
        feats = torch.load(folder / f"part_{p}" / "node_feats.pt", weights_only=False)
        x = feats["feats"]["x"].numpy()
        orig = np.load(root / "d" / f"part-{p}" / "nodes" / "page" / "orig_ids.npy")
        keys = api.node_keys(str(root / "g"), "page", orig).to_pylist()
        assert np.array_equal(x, np.stack([expect[k] for k in keys]))


def test_bad_sparse_column_names_file_field_row(scheduler, tmp_path):
    write_pages(tmp_path, n=300)
    table = pq.read_table(tmp_path / "tables" / "pages.parquet")
    words = table.column("words").to_pylist()
    words[217] = words[217] + [DIM + 5]
    weights = table.column("weights").to_pylist()
    weights[217] = weights[217] + [1.0]
    table = table.set_column(1, "words", pa.array(words)).set_column(2, "weights",
                                                                     pa.array(weights))
    pq.write_table(table, tmp_path / "tables" / "pages.parquet", row_group_size=100)
    with pytest.raises(FormatError) as err:
        api.chunk(str(tmp_path / "pages.json"), str(tmp_path / "g"), scheduler=scheduler)
    assert err.value.file.endswith("pages.parquet") and err.value.field == "words"
    assert err.value.row == 217
    assert not os.path.exists(tmp_path / "g")


def test_width_without_dim_is_the_largest_index_plus_one(scheduler, tmp_path):
    expected = write_pages(tmp_path, n=50)
    config = json.load(open(tmp_path / "pages.json"))
    del config["nodes"][0]["sparse"]["feat"]["dim"]
    with open(tmp_path / "pages.json", "w") as f:
        json.dump(config, f)
    api.chunk(str(tmp_path / "pages.json"), str(tmp_path / "g"), scheduler=scheduler)
    widest = max(int(np.flatnonzero(row).max()) for row in expected.values() if row.any())
    assert load_chunked_graph(str(tmp_path / "g")).node_data["page"]["feat"].dim == widest + 1


def test_pyg_sparse_x_stays_sparse(prep, tmp_path):
    torch = pytest.importorskip("torch")
    data_mod = pytest.importorskip("torch_geometric.data")
    rng = np.random.default_rng(2)
    x = random_dense(rng, 400, DIM)
    data = data_mod.Data(x=torch.from_numpy(x).to_sparse(),
                         edge_index=torch.from_numpy(rng.integers(0, 400, (2, 2000))),
                         y=torch.from_numpy(rng.integers(0, 3, 400)))
    torch.save(data, tmp_path / "g.pt")
    prep("chunk", tmp_path / "g.pt", tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    files = g.node_data["_N"]["feat"]
    assert files.format == "csr"
    rows = concat_rows([read_array_chunk(g.path(f), files) for f in files.files])
    assert np.array_equal(rows.to_dense(), x)
    prep("validate", tmp_path / "g")


def test_verify_tables_by_key(pages, prep, tmp_path):
    """``prep verify --tables``: the tables against the chunked graph, row by row by key; a
    changed value names the file, key and field; a lost edge row is counted."""
    import shutil
    root, _, _ = pages
    out = prep("verify", root / "g", root / "d", "--tables", root / "pages.json").output
    assert "tables: 2,500 node rows and 20,000 edges match the chunked graph by key" in out
    changed = tmp_path / "changed"
    shutil.copytree(root / "tables", changed / "tables")
    shutil.copy(root / "pages.json", changed / "pages.json")
    table = pq.read_table(changed / "tables" / "pages.parquet")
    weights = table.column("weights").to_pylist()
    row = next(i for i, w in enumerate(weights) if w)
    weights[row][0] += 1
    pq.write_table(table.set_column(2, "weights", pa.array(weights)),
                   changed / "tables" / "pages.parquet")
    out = prep("verify", root / "g", root / "d", "--tables", changed / "pages.json",
               code=1).output
    key = table.column("key")[row].as_py()
    assert f"key '{key}'" in out and "field 'feat' differs" in out
    shutil.copy(root / "tables" / "pages.parquet", changed / "tables" / "pages.parquet")
    links = pq.read_table(changed / "tables" / "links.parquet")
    pq.write_table(links.slice(1), changed / "tables" / "links.parquet")
    out = prep("verify", root / "g", root / "d", "--tables", changed / "pages.json",
               code=1).output
    assert "the tables hold 19,999 edges, the graph 20,000" in out


@pytest.mark.parametrize("kind", ["csr", "csc", "coo"])
def test_scipy_npz_node_data_stays_sparse(prep, tmp_path, kind):
    """``--node-data feat=feat.npz`` (``scipy.sparse.save_npz``): sparse in the chunked graph,
    every entry in place; written here with numpy in scipy's layout (scipy is not a dependency)."""
    rng = np.random.default_rng(3)
    x = random_dense(rng, 300, DIM)
    rows, cols = np.nonzero(x)
    if kind == "csr":
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=300))])
        arrays = {"indices": cols.astype(np.int32), "indptr": indptr.astype(np.int32),
                  "data": x[rows, cols]}
    elif kind == "csc":
        order = np.lexsort((rows, cols))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=DIM))])
        arrays = {"indices": rows[order].astype(np.int32), "indptr": indptr.astype(np.int32),
                  "data": x[rows, cols][order]}
    else:
        perm = rng.permutation(len(rows))
        arrays = {"row": rows[perm].astype(np.int32), "col": cols[perm].astype(np.int32),
                  "data": x[rows, cols][perm]}
    np.savez(tmp_path / "feat.npz", format=np.array(kind.encode()), shape=np.array([300, DIM]),
             **arrays)
    edges = rng.integers(0, 300, (2000, 2))
    np.savetxt(tmp_path / "edges.csv", edges, fmt="%d", delimiter=",")
    prep("chunk", tmp_path / "edges.csv", tmp_path / "g", "--node-data",
         f"feat={tmp_path / 'feat.npz'}", "--chunk-size", 128)
    g = load_chunked_graph(str(tmp_path / "g"))
    files = g.node_data["_N"]["feat"]
    assert files.format == "csr" and len(files.files) == 3
    got = concat_rows([read_array_chunk(g.path(f), files) for f in files.files])
    assert np.array_equal(got.to_dense(), x)


def test_verify_tables_names_a_changed_edge(pages, prep, tmp_path):
    """An edge whose destination key changed in the table is named by its keys."""
    import shutil
    root, _, _ = pages
    changed = tmp_path / "changed"
    shutil.copytree(root / "tables", changed / "tables")
    shutil.copy(root / "pages.json", changed / "pages.json")
    links = pq.read_table(changed / "tables" / "links.parquet")
    b = links.column("b").to_pylist()
    a = links.column("a").to_pylist()
    b[1234] = next(k for k in b if k != b[1234])
    pq.write_table(links.set_column(1, "b", pa.array(b)), changed / "tables" / "links.parquet")
    out = prep("verify", root / "g", root / "d", "--tables", changed / "pages.json",
               code=1).output
    assert f"the edge '{a[1234]}' -> '{b[1234]}' (edge 1234 of type page:links:page)" in out
    assert "its destination differs" in out
