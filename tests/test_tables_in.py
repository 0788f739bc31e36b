"""``prep chunk CONFIG.yaml``: node and edge tables keyed by strings come out as a chunked graph
whose every row, feature, category, label and edge matches the input by key."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from formats import EdgeType, FormatError, load_chunked_graph
from formats.arrays import read_array_chunk, read_edge_chunk
from pipeline import api

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "tables")
sys.path.insert(0, EXAMPLE)
import make_shop  # noqa: E402

BOUGHT = EdgeType("user", "bought", "item")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = tmp_path_factory.mktemp("shop")
    make_shop.make(str(root / "data"), users=1500, items=600, days=2)
    shutil.copy(os.path.join(EXAMPLE, "shop.yaml"), root / "shop.yaml")
    res = api.chunk(str(root / "shop.yaml"), str(root / "g"), chunk_size=700, workers=2)
    return root, load_chunked_graph(str(root / "g")), res


def keys(g, ntype) -> np.ndarray:
    return np.concatenate([pq.read_table(g.path(f)).column("key").to_numpy(
        zero_copy_only=False) for f in g.keys[ntype].by_id]).astype(str)


def field(g, owner, name) -> np.ndarray:
    files = (g.node_data[owner] if isinstance(owner, str) else g.edge_data[owner])[name]
    return np.concatenate([read_array_chunk(g.path(f), files) for f in files.files])


def edges(g, et):
    return map(np.concatenate, zip(*[read_edge_chunk(g.path(f), g.edges[et])
                                     for f in g.edges[et].files]))


def vocab(g, owner, name) -> list:
    return pq.read_table(g.path(g.vocab[owner][name])).column("value").to_pylist()


def test_node_rows_come_back_by_key(shop):
    root, g, _ = shop
    users = pacsv.read_csv(root / "data" / "users.csv")
    ids = keys(g, "user")
    np.testing.assert_array_equal(ids, users["user_id"].to_numpy(zero_copy_only=False))
    want = np.stack([users[c].to_numpy().astype(np.float32) for c in
                     ("age", "spend", "taste0", "taste1", "taste2", "taste3")], axis=1)
    np.testing.assert_allclose(field(g, "user", "feat"), want, rtol=1e-6)
    labels = np.array(vocab(g, "user", "label"))[field(g, "user", "label")]
    np.testing.assert_array_equal(labels, users["segment"].to_numpy(zero_copy_only=False))
    assert vocab(g, "user", "label") == sorted(make_shop.SEGMENTS)
    countries = np.array(vocab(g, "user", "country"))[field(g, "user", "country")]
    np.testing.assert_array_equal(countries, users["country"].to_numpy(zero_copy_only=False))
    masks = np.stack([field(g, "user", f"{s}_mask") for s in ("train", "val", "test")])
    assert (masks.sum(axis=0) == 1).all()
    assert abs(masks[0].mean() - 0.6) < 0.05 and abs(masks[1].mean() - 0.2) < 0.05

    items = pq.read_table(root / "data" / "items.parquet")
    order = {k: i for i, k in enumerate(items["asin"].to_pylist())}
    rows = np.array([order[k] for k in keys(g, "item")])
    assert sorted(rows.tolist()) == list(range(items.num_rows))
    feat = field(g, "item", "feat")
    np.testing.assert_allclose(feat[:, 0], items["price"].to_numpy()[rows], rtol=1e-6)
    np.testing.assert_allclose(feat[:, 1:], np.stack(items["embedding"].to_numpy(
        zero_copy_only=False))[rows], rtol=1e-6)
    onehot = field(g, "item", "category")
    assert onehot.shape == (items.num_rows, 4) and (onehot.sum(axis=1) == 1).all()
    np.testing.assert_array_equal(np.array(vocab(g, "item", "category"))[onehot.argmax(1)],
                                  items["category"].to_numpy(zero_copy_only=False)[rows])


def test_every_edge_and_its_data_come_back_by_key(shop):
    root, g, _ = shop
    src, dst = edges(g, BOUGHT)
    got = sorted(zip(keys(g, "user")[src], keys(g, "item")[dst],
                     np.round(field(g, BOUGHT, "amount")[:, 0], 2)))
    days = [pacsv.read_csv(root / "data" / "events" / f) for f in
            sorted(os.listdir(root / "data" / "events"))]
    want = sorted((u, i, round(a, 2)) for d in days for u, i, a in zip(
        d["user"].to_pylist(), d["item"].to_pylist(), d["amount"].to_pylist()))
    assert [(u, i) for u, i, _ in got] == [(u, i) for u, i, _ in want]
    np.testing.assert_allclose([a for *_, a in got], [a for *_, a in want], rtol=1e-6)
    masks = np.stack([field(g, BOUGHT, f"{s}_mask") for s in ("train", "val", "test")])
    assert (masks.sum(axis=0) == 1).all() and abs(masks[2].mean() - 0.1) < 0.03
    also = pq.read_table(root / "data" / "also_viewed.parquet")
    a, b = edges(g, EdgeType("item", "also_viewed", "item"))
    assert sorted(zip(keys(g, "item")[a], keys(g, "item")[b])) == sorted(
        zip(also["a"].to_pylist(), also["b"].to_pylist()))


def test_same_graph_for_any_chunk_size_and_worker_count(shop, tmp_path):
    root, g, _ = shop
    api.chunk(str(root / "shop.yaml"), str(tmp_path / "g"), chunk_size=5000, workers=1)
    h = load_chunked_graph(str(tmp_path / "g"))
    for t in ("user", "item"):
        np.testing.assert_array_equal(keys(g, t), keys(h, t))
        for name in g.node_data[t]:
            np.testing.assert_array_equal(field(g, t, name), field(h, t, name))
    for et in g.edge_types:
        for x, y in zip(edges(g, et), edges(h, et)):
            np.testing.assert_array_equal(x, y)


def config_with(root, tmp_path, **changes) -> str:
    raw = yaml.safe_load(open(root / "shop.yaml"))
    for where, value in changes.items():
        node = raw
        *path, last = where.split("__")
        for p in path:
            node = node[int(p)] if p.isdigit() else node[p]
        node[last] = value
    for spec in raw["nodes"] + raw["edges"]:      # the tables stay where they are
        spec["files"] = str(root / spec["files"])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_dangling_edge_key_and_unlabelled_training_row_are_named(shop, tmp_path):
    root, _, _ = shop
    users = pacsv.read_csv(root / "data" / "users.csv")
    pacsv.write_csv(users.slice(0, 1400), tmp_path / "fewer.csv")
    cfg = config_with(root, tmp_path, nodes__0__files=str(tmp_path / "fewer.csv"))
    with pytest.raises(FormatError) as err:
        api.chunk(cfg, str(tmp_path / "g"), workers=1)
    assert "day-00.csv" in err.value.file and "not in node type 'user'" in err.value.message
    assert not os.path.exists(tmp_path / "g")
    res = api.chunk(config_with(root, tmp_path, nodes__0__files=str(tmp_path / "fewer.csv"),
                                dangling="add"), str(tmp_path / "a"), workers=1)
    assert res.graph.num_nodes["user"] > 1400
    labels = field(load_chunked_graph(str(tmp_path / "a")), "user", "label")
    assert (labels[1400:] == -1).all() and (labels[:1400] >= 0).all()

    seg = users["segment"].to_pylist()
    seg[7] = None
    pacsv.write_csv(users.set_column(users.schema.get_field_index("segment"), "segment",
                                     pa.array(seg)), tmp_path / "nolabel.csv")
    cfg = config_with(root, tmp_path, nodes__0__files=str(tmp_path / "nolabel.csv"),
                      nodes__0__split={"column": "none"})
    with pytest.raises(FormatError) as err:
        api.chunk(cfg, str(tmp_path / "b"), workers=1)
    assert "none" in str(err.value)          # a split column that is not in the table
    cfg = config_with(root, tmp_path, nodes__0__files=str(tmp_path / "nolabel.csv"))
    mask = np.zeros(1)
    try:
        api.chunk(cfg, str(tmp_path / "c"), workers=1)
    except FormatError as e:                 # row 7 drew a training split
        assert e.row == 7 and e.field == "segment" and "no label" in e.message
    else:                                    # row 7 drew val/test: allowed, label -1
        mask = field(load_chunked_graph(str(tmp_path / "c")), "user", "train_mask")
        assert not mask[7]


def test_config_mistakes_name_the_field(shop, tmp_path):
    root, _, _ = shop
    cfg = config_with(root, tmp_path, nodes__0__colour="red")
    with pytest.raises(FormatError, match=r"nodes\[0\].*unknown key 'colour'"):
        api.chunk(cfg, str(tmp_path / "g"), workers=1)
    cfg = config_with(root, tmp_path, nodes__0__features={"feat": ["age", "nope"]})
    with pytest.raises(FormatError, match="'nope' not found"):
        api.chunk(cfg, str(tmp_path / "g"), workers=1)
