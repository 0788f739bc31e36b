"""prep chunk: every converter round-trips (read back == input), transforms, errors, atomicity."""

import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from conftest import edge_data_of, edges_of, node_data_of, shared_data, sorted_pairs
from graphprep.formats import load_chunked_graph

RNG = np.random.default_rng(42)


def write_csv(path, src, dst, header="src,dst", delimiter=","):
    lines = [header] if header else []
    lines += [f"{a}{delimiter}{b}" for a, b in zip(src, dst)]
    text = "\n".join(lines) + "\n"
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)


def random_edges(n_nodes, n_edges):
    return RNG.integers(0, n_nodes, n_edges), RNG.integers(0, n_nodes, n_edges)


# ------------------------------------------------------------------ edge lists

def test_csv_round_trip_with_node_data(tmp_path, prep):
    src, dst = random_edges(500, 20000)
    write_csv(tmp_path / "e.csv", src, dst)
    feat = RNG.standard_normal((500, 3)).astype(np.float32)
    np.save(tmp_path / "feat.npy", feat)
    label = RNG.integers(0, 4, 500)
    (tmp_path / "label.csv").write_text("\n".join(map(str, label)) + "\n")
    prep("chunk", tmp_path / "e.csv", tmp_path / "out", "--chunk-size", 3000,
         "--node-data", f"feat={tmp_path / 'feat.npy'}",
         "--node-data", f"label={tmp_path / 'label.csv'}")
    g = load_chunked_graph(str(tmp_path / "out"))
    assert g.num_nodes == {"_N": 500} and len(g.edge_chunks[g.edge_types[0]]) >= 6
    s, d = edges_of(tmp_path / "out")
    assert np.array_equal(s, src) and np.array_equal(d, dst)   # order kept
    assert np.array_equal(node_data_of(tmp_path / "out"), feat)
    assert np.array_equal(node_data_of(tmp_path / "out", name="label"), label)
    assert g.node_chunks["_N"] == (500,)


@pytest.mark.parametrize("name, header, delimiter", [("e.tsv", None, "\t"),
                                                     ("e.csv.gz", "src,dst", ","),
                                                     ("e.txt", None, " ")])
def test_tsv_gz_and_space_delimited(tmp_path, prep, name, header, delimiter):
    src, dst = random_edges(300, 5000)
    write_csv(tmp_path / name, src, dst, header=header, delimiter=delimiter)
    extra = ["--delimiter", " "] if delimiter == " " else []
    prep("chunk", tmp_path / name, tmp_path / "out", "--chunk-size", 1000, *extra)
    s, d = edges_of(tmp_path / "out")
    assert np.array_equal(s, src) and np.array_equal(d, dst)
    assert load_chunked_graph(str(tmp_path / "out")).num_nodes["_N"] == max(src.max(), dst.max()) + 1


def test_named_columns_and_parquet_input(tmp_path, prep):
    src, dst = random_edges(100, 4000)
    w = RNG.random(4000)
    (tmp_path / "e.csv").write_text("weight,to,from\n" + "\n".join(
        f"{c},{b},{a}" for a, b, c in zip(src, dst, w)) + "\n")
    prep("chunk", tmp_path / "e.csv", tmp_path / "a", "--src-col", "from", "--dst-col", "to")
    pq.write_table(pa.table({"from": src, "to": dst}), tmp_path / "e.parquet", row_group_size=700)
    prep("chunk", tmp_path / "e.parquet", tmp_path / "b", "--src-col", "from", "--dst-col", "to",
         "--chunk-size", 1500)
    for out in ("a", "b"):
        s, d = edges_of(tmp_path / out)
        assert np.array_equal(s, src) and np.array_equal(d, dst)


def test_hetero_edge_folder(tmp_path, prep):
    root = tmp_path / "in"
    (root / "edges").mkdir(parents=True)
    (root / "nodes" / "paper").mkdir(parents=True)
    writes = random_edges(50, 2000)
    writes = (writes[0], writes[1] % 30)
    cites = random_edges(30, 1000)
    write_csv(root / "edges" / "author__writes__paper.csv", *writes)
    pq.write_table(pa.table({"src": cites[0], "dst": cites[1]}),
                   root / "edges" / "paper__cites__paper.parquet")
    feat = RNG.standard_normal((30, 5)).astype(np.float32)
    np.save(root / "nodes" / "paper" / "feat.npy", feat)
    prep("chunk", root, tmp_path / "out", "--num-nodes", "author=60", "--add-reverse-edges")
    g = load_chunked_graph(str(tmp_path / "out"))
    assert g.num_nodes == {"author": 60, "paper": 30}
    assert {str(e) for e in g.edge_types} == {"author:writes:paper", "paper:cites:paper",
                                              "paper:rev-writes:author", "paper:rev-cites:paper"}
    s, d = edges_of(tmp_path / "out", "author:writes:paper")
    assert np.array_equal(s, writes[0]) and np.array_equal(d, writes[1])
    rs, rd = edges_of(tmp_path / "out", "paper:rev-writes:author")
    assert np.array_equal(rs, writes[1]) and np.array_equal(rd, writes[0])
    assert np.array_equal(node_data_of(tmp_path / "out", "paper", "feat"), feat)


# ------------------------------------------------------------------ transforms

def test_reverse_dedupe_and_self_loops_homogeneous(tmp_path, prep):
    src, dst = random_edges(200, 6000)
    src[:50] = dst[:50]                       # self-loops
    write_csv(tmp_path / "e.csv", src, dst)
    prep("chunk", tmp_path / "e.csv", tmp_path / "out", "--chunk-size", 1000,
         "--add-reverse-edges", "--dedupe", "--drop-self-loops")
    s, d = edges_of(tmp_path / "out")
    keep = src != dst
    ref = np.unique(np.stack([np.concatenate([src[keep], dst[keep]]),
                              np.concatenate([dst[keep], src[keep]])]), axis=1)
    assert np.array_equal(sorted_pairs(s, d), ref)
    assert len(s) == ref.shape[1]             # each pair exactly once


# ------------------------------------------------------------------ arrays, PyG

def test_npz_and_npy_folder(tmp_path, prep):
    src, dst = random_edges(80, 3000)
    x = RNG.standard_normal((80, 6)).astype(np.float32)
    y = RNG.integers(0, 3, 80)
    train = RNG.random(80) < 0.5
    weight = RNG.random(3000).astype(np.float32)
    np.savez(tmp_path / "g.npz", edge_index=np.stack([src, dst]), x=x, y=y, train_mask=train,
             edge_weight=weight)
    prep("chunk", tmp_path / "g.npz", tmp_path / "a", "--chunk-size", 700)
    folder = tmp_path / "arrays"
    folder.mkdir()
    np.save(folder / "edge_index.npy", np.stack([src, dst], axis=1))   # [E, 2] layout
    np.save(folder / "feat.npy", x)
    prep("chunk", folder, tmp_path / "b", "--chunk-size", 700)
    for out in ("a", "b"):
        s, d = edges_of(tmp_path / out)
        assert np.array_equal(s, src) and np.array_equal(d, dst)
        assert np.array_equal(node_data_of(tmp_path / out, name="feat"), x)
    assert np.array_equal(node_data_of(tmp_path / "a", name="label"), y)
    assert np.array_equal(node_data_of(tmp_path / "a", name="train_mask"), train)
    assert np.array_equal(edge_data_of(tmp_path / "a", "_N:_E:_N", "weight"), weight)


def test_pyg_data_and_heterodata(tmp_path, prep):
    torch = pytest.importorskip("torch")
    tg = pytest.importorskip("torch_geometric.data", reason="torch_geometric not installed")
    ei = torch.randint(0, 40, (2, 500))
    data = tg.Data(x=torch.randn(40, 4), y=torch.randint(0, 3, (40,)), edge_index=ei,
                   edge_attr=torch.randn(500, 2), train_mask=torch.rand(40) < 0.3)
    torch.save(data, tmp_path / "d.pt")
    prep("chunk", tmp_path / "d.pt", tmp_path / "a", "--chunk-size", 128)
    s, d = edges_of(tmp_path / "a")
    assert np.array_equal(np.stack([s, d]), ei.numpy())
    assert np.array_equal(node_data_of(tmp_path / "a", name="feat"), data.x.numpy())
    assert np.array_equal(node_data_of(tmp_path / "a", name="train_mask"), data.train_mask.numpy())
    assert np.array_equal(edge_data_of(tmp_path / "a", "_N:_E:_N", "feat"), data.edge_attr.numpy())

    h = tg.HeteroData()
    h["paper"].x = torch.randn(30, 3)
    h["paper"].y = torch.randint(0, 2, (30,))
    h["author"].num_nodes = 20
    h["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 20, (100,)), torch.randint(0, 30, (100,))])
    torch.save(h, tmp_path / "h.pt")
    prep("chunk", tmp_path / "h.pt", tmp_path / "b")
    g = load_chunked_graph(str(tmp_path / "b"))
    assert g.num_nodes == {"paper": 30, "author": 20}
    s, d = edges_of(tmp_path / "b", "author:writes:paper")
    assert np.array_equal(np.stack([s, d]), h["author", "writes", "paper"].edge_index.numpy())
    assert np.array_equal(node_data_of(tmp_path / "b", "paper", "label"), h["paper"].y.numpy())


# ------------------------------------------------------------------ real datasets

@pytest.mark.parametrize("name, nodes, edges, dim, classes, split", [
    ("cora", 2708, 10556, 1433, 7, (140, 500, 1000)),
    ("citeseer", 3327, 9104, 3703, 6, (120, 500, 1000))])
def test_planetoid_exact(tmp_path, prep, name, nodes, edges, dim, classes, split):
    prep("chunk", shared_data("planetoid"), tmp_path / name, "--name", name)
    g = load_chunked_graph(str(tmp_path / name))
    assert g.num_nodes == {"_N": nodes} and sum(g.num_edges.values()) == edges
    s, d = edges_of(tmp_path / name)
    assert not (s == d).any()
    assert len(np.unique(s * nodes + d)) == edges                 # deduplicated
    assert np.array_equal(sorted_pairs(s, d), sorted_pairs(d, s))  # both directions
    assert node_data_of(tmp_path / name).shape == (nodes, dim)
    assert len(np.unique(node_data_of(tmp_path / name, name="label"))) == classes
    got = tuple(int(node_data_of(tmp_path / name, name=m).sum())
                for m in ("train_mask", "val_mask", "test_mask"))
    assert got == split


@pytest.fixture
def arxiv_like(tmp_path):
    """ogbn-arxiv's real label/split/count files with synthetic edges and features made here
    in the same layout (the real ones are not available offline)."""
    real = shared_data("ogbn-arxiv-partial")
    root = tmp_path / "ogbn_arxiv"
    (root / "raw").mkdir(parents=True)
    for f in os.listdir(os.path.join(real, "raw")):
        os.symlink(os.path.join(real, "raw", f), root / "raw" / f)
    os.symlink(os.path.join(real, "split"), root / "split")
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 169343, 1166243), rng.integers(0, 169343, 1166243)
    with pa.CompressedOutputStream(str(root / "raw" / "edge.csv.gz"), "gzip") as f:
        pacsv.write_csv(pa.table({"a": src, "b": dst}), f,
                        pacsv.WriteOptions(include_header=False))
    feat = rng.standard_normal((169343, 4)).astype(np.float32).round(3)
    with pa.CompressedOutputStream(str(root / "raw" / "node-feat.csv.gz"), "gzip") as f:
        pacsv.write_csv(pa.table({f"f{i}": feat[:, i] for i in range(4)}), f,
                        pacsv.WriteOptions(include_header=False))
    return root, src, dst, feat


def test_ogb_arxiv_layout(tmp_path, prep, arxiv_like):
    root, src, dst, feat = arxiv_like
    prep("chunk", root, tmp_path / "out", "--chunk-size", 300000)
    g = load_chunked_graph(str(tmp_path / "out"))
    assert g.num_nodes == {"_N": 169343} and sum(g.num_edges.values()) == 1166243
    s, d = edges_of(tmp_path / "out")
    assert np.array_equal(s, src) and np.array_equal(d, dst)
    assert np.allclose(node_data_of(tmp_path / "out"), feat)
    label = node_data_of(tmp_path / "out", name="label")
    assert label.shape == (169343,) and label.min() == 0 and label.max() == 39
    counts = [int(node_data_of(tmp_path / "out", name=m).sum())
              for m in ("train_mask", "val_mask", "test_mask")]
    assert counts == [90941, 29799, 48603]
    assert len(node_data_of(tmp_path / "out", name="year")) == 169343
    assert g.node_chunks["_N"] == (169343,)


def test_ogb_edge_count_mismatch(tmp_path, prep, arxiv_like):
    root = arxiv_like[0]
    with gzip.open(root / "raw" / "edge.csv.gz", "rt") as f:
        head = [next(f) for _ in range(1000)]
    with gzip.open(root / "raw" / "edge.csv.gz", "wt") as f:
        f.writelines(head)
    r = prep("chunk", root, tmp_path / "out", code=2)
    assert "num-edge-list.csv.gz" in r.output and "1166243" in r.output and "1000" in r.output
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ DGL in

def test_dgl_chunked_in_with_csv_edges_and_edge_data(tmp_path, prep):
    root = tmp_path / "dgl"
    (root / "edges").mkdir(parents=True)
    (root / "feat").mkdir()
    writes = [random_edges(40, 300) for _ in range(3)]
    for i, (s, d) in enumerate(writes):
        write_csv(root / "edges" / f"writes-{i}.csv", s, d % 25, header=None, delimiter=" ")
    feats = [RNG.standard_normal((n, 2)).astype(np.float32) for n in (10, 15)]
    for i, f in enumerate(feats):
        np.save(root / "feat" / f"paper-{i}.npy", f)
    ew = [RNG.random(450), RNG.random(450)]
    for i, w in enumerate(ew):
        np.save(root / "feat" / f"w-{i}.npy", w)
    meta = {"graph_name": "toy", "node_type": ["author", "paper"],
            "num_nodes_per_chunk": [[20, 20], [10, 15]],
            "edge_type": ["author:writes:paper"], "num_edges_per_chunk": [[300, 300, 300]],
            "edges": {"author:writes:paper": {"format": {"name": "csv", "delimiter": " "},
                                              "data": [f"edges/writes-{i}.csv" for i in range(3)]}},
            "node_data": {"paper": {"feat": {"format": {"name": "numpy"},
                                             "data": ["feat/paper-0.npy", "feat/paper-1.npy"]}}},
            "edge_data": {"author:writes:paper": {"w": {"format": {"name": "numpy"},
                                                        "data": ["feat/w-0.npy", "feat/w-1.npy"]}}}}
    (root / "metadata.json").write_text(json.dumps(meta))
    prep("chunk", root, tmp_path / "out", "--chunk-size", 400)
    g = load_chunked_graph(str(tmp_path / "out"))
    et = "author:writes:paper"
    assert g.edge_chunks[g.edge_types[0]] == (400, 400, 100)
    s, d = edges_of(tmp_path / "out", et)
    assert np.array_equal(s, np.concatenate([w[0] for w in writes]))
    assert np.array_equal(d, np.concatenate([w[1] % 25 for w in writes]))
    assert np.array_equal(edge_data_of(tmp_path / "out", et, "w"), np.concatenate(ew))
    assert np.array_equal(node_data_of(tmp_path / "out", "paper", "feat"), np.concatenate(feats))
    # our own output reads back as input too (DGL keys written both ways)
    out_meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert out_meta["num_nodes_per_type"] == [40, 25]
    prep("chunk", tmp_path / "out", tmp_path / "again", "--chunk-size", 1000)
    assert np.array_equal(edges_of(tmp_path / "again", et)[0], s)


def test_dgl_input_is_validated_first(tmp_path, prep):
    root = tmp_path / "dgl"
    (root / "e").mkdir(parents=True)
    write_csv(root / "e" / "0.csv", [0, 1, 9], [1, 2, 0], header=None, delimiter=" ")
    meta = {"node_type": ["_N"], "num_nodes_per_type": [5], "edge_type": ["_N:_E:_N"],
            "num_edges_per_chunk": [[3]],
            "edges": {"_N:_E:_N": {"format": {"name": "csv"}, "data": ["e/0.csv"]}}}
    (root / "metadata.json").write_text(json.dumps(meta))
    r = prep("chunk", root, tmp_path / "out", code=2)
    assert "0.csv" in r.output and "field 'src'" in r.output and "row 2" in r.output


# ------------------------------------------------------------------ errors and atomicity

def test_bad_csv_row_is_named_and_nothing_written(tmp_path, prep):
    src, dst = random_edges(100, 30000)
    write_csv(tmp_path / "e.csv", src, dst)
    lines = (tmp_path / "e.csv").read_text().splitlines()
    lines[25001] = "7,x7"                     # data row 25000 (line 25002)
    (tmp_path / "e.csv").write_text("\n".join(lines) + "\n")
    r = prep("chunk", tmp_path / "e.csv", tmp_path / "out", "--chunk-size", 2000, code=2)
    assert "e.csv" in r.output and "field 'dst'" in r.output and "row 25000" in r.output
    assert "'x7'" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.csv"]   # no out, no .partial


def test_ids_beyond_declared_node_count(tmp_path, prep):
    write_csv(tmp_path / "e.csv", [0, 1, 2, 3], [1, 2, 3, 4])
    r = prep("chunk", tmp_path / "e.csv", tmp_path / "out", "--num-nodes", 4, code=2)
    assert "field 'dst'" in r.output and "row 3" in r.output and "[0, 4)" in r.output


def test_node_data_rows_must_match(tmp_path, prep):
    write_csv(tmp_path / "e.csv", [0, 1], [1, 2])
    np.save(tmp_path / "f.npy", np.zeros((4, 2)))
    r = prep("chunk", tmp_path / "e.csv", tmp_path / "out", "--num-nodes", 3,
             "--node-data", f"feat={tmp_path / 'f.npy'}", code=2)
    assert "f.npy" in r.output and "has 4 rows" in r.output


def test_rerun_after_failure_and_unknown_input(tmp_path, prep):
    (tmp_path / "x.weird").write_text("?")
    r = prep("chunk", tmp_path / "x.weird", tmp_path / "out", code=2)
    assert "--from" in r.output
    write_csv(tmp_path / "e.csv", [0, 1], [1, 2])
    prep("chunk", tmp_path / "e.csv", tmp_path / "out")
    r = prep("chunk", tmp_path / "e.csv", tmp_path / "out")          # up to date: no-op
    assert "_N" not in r.output


def test_parquet_null_id_row_is_exact(tmp_path, prep):
    src = pa.array(list(range(3000)), pa.int64())
    dst = pa.array([1] * 2500 + [None] + [2] * 499, pa.int64())
    pq.write_table(pa.table({"src": src, "dst": dst}), tmp_path / "e.parquet", row_group_size=1000)
    r = prep("chunk", tmp_path / "e.parquet", tmp_path / "out", "--chunk-size", 1000, code=2)
    assert "field 'dst'" in r.output and "row 2500" in r.output and "missing value" in r.output
