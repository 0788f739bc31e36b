"""``prep chunk CONFIG.yaml``: node and edge tables keyed by strings come out as a chunked graph
whose every row, feature, category, label and edge matches the input by key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from graphprep.formats import EdgeType, FormatError, load_chunked_graph
from graphprep.formats.arrays import read_array_chunk, read_edge_chunk
from graphprep.pipeline import api

from conftest import ROOT  # noqa: E402  (the repository)
EXAMPLE = os.path.join(ROOT, "examples", "tables")
sys.path.insert(0, EXAMPLE)
import make_shop  # noqa: E402

BOUGHT = EdgeType("user", "bought", "item")


@pytest.fixture(scope="module")
def shop(scheduler, tmp_path_factory):
    root = tmp_path_factory.mktemp("shop")
    make_shop.make(str(root / "data"), users=1500, items=600, days=2)
    shutil.copy(os.path.join(EXAMPLE, "shop.yaml"), root / "shop.yaml")
    api.chunk(str(root / "shop.yaml"), str(root / "g"), chunk_size=700, scheduler=scheduler)
    return root, load_chunked_graph(str(root / "g")), scheduler


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
    root, g, scheduler = shop
    users = pacsv.read_csv(root / "data" / "users.csv")
    ids = keys(g, "user")
    np.testing.assert_array_equal(ids, users["user_id"].to_numpy(zero_copy_only=False))
    want = np.stack([users[c].to_numpy().astype(np.float32) for c in
                     ("age", "spend", "taste0", "taste1", "taste2", "taste3")], axis=1)
    np.testing.assert_allclose(field(g, "user", "feat"), want, rtol=1e-6)
    labels = np.array(vocab(g, "user", "label"))[field(g, "user", "label")]
    np.testing.assert_array_equal(labels, users["segment"].to_numpy(zero_copy_only=False))
    assert vocab(g, "user", "label") == sorted(make_shop.SEGMENTS)
    from graphprep.pipeline.inspect import describe
    shown = {k["type"]: k for k in describe(g.root)["keys"]}
    assert shown["user"]["keys"] == 1500 and shown["user"]["first"] == ids[0]
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
    root, g, scheduler = shop
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
    root, g, scheduler = shop
    api.chunk(str(root / "shop.yaml"), str(tmp_path / "g"), chunk_size=5000, scheduler=scheduler)
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
    root, _, scheduler = shop
    users = pacsv.read_csv(root / "data" / "users.csv")
    pacsv.write_csv(users.slice(0, 1400), tmp_path / "fewer.csv")
    cfg = config_with(root, tmp_path, nodes__0__files=str(tmp_path / "fewer.csv"))
    with pytest.raises(FormatError) as err:
        api.chunk(cfg, str(tmp_path / "g"), scheduler=scheduler)
    assert "day-00.csv" in err.value.file and "node type 'user'" in err.value.message
    assert not os.path.exists(tmp_path / "g")
    res = api.chunk(config_with(root, tmp_path, nodes__0__files=str(tmp_path / "fewer.csv"),
                                dangling="add"), str(tmp_path / "a"), scheduler=scheduler)
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
        api.chunk(cfg, str(tmp_path / "b"), scheduler=scheduler)
    assert "none" in str(err.value)          # a split column that is not in the table
    cfg = config_with(root, tmp_path, nodes__0__files=str(tmp_path / "nolabel.csv"))
    mask = np.zeros(1)
    try:
        api.chunk(cfg, str(tmp_path / "c"), scheduler=scheduler)
    except FormatError as e:                 # row 7 drew a training split
        assert e.row == 7 and e.field == "segment" and "no label" in e.message
    else:                                    # row 7 drew val/test: allowed, label -1
        mask = field(load_chunked_graph(str(tmp_path / "c")), "user", "train_mask")
        assert not mask[7]


def test_config_mistakes_name_the_field(shop, tmp_path):
    root, _, scheduler = shop
    cfg = config_with(root, tmp_path, nodes__0__colour="red")
    with pytest.raises(FormatError, match=r"nodes\[0\].*unknown key 'colour'"):
        api.chunk(cfg, str(tmp_path / "g"), scheduler=scheduler)
    cfg = config_with(root, tmp_path, nodes__0__features={"feat": ["age", "nope"]})
    with pytest.raises(FormatError, match="'nope' not found"):
        api.chunk(cfg, str(tmp_path / "g"), scheduler=scheduler)


@pytest.mark.timeout(900)
def test_tables_to_training_to_predictions_by_key(shop, tmp_path):
    """Heterogeneous tables keyed by strings: chunk -> partition -> dispatch -> R-GCN on
    users' segments -> embed. Training beats chance (4 balanced classes: 0.25) by a margin,
    and predictions and embeddings come back keyed by the users' UUIDs, every key once."""
    root, _, scheduler = shop
    from conftest import run_prep
    run_prep(scheduler, "partition", root / "g", tmp_path / "a", "-p", 2)
    run_prep(scheduler, "dispatch", root / "g", tmp_path / "a", tmp_path / "d")
    run_prep(scheduler, "verify", root / "g", tmp_path / "d")
    run_prep(scheduler, "export", root / "g", tmp_path / "x", "--to", "dgl-chunked")
    carried = json.loads((tmp_path / "x" / "keys.json").read_text())["keys"]["user"]
    users_by_id = np.concatenate([pq.read_table(tmp_path / "x" / f)["key"].to_numpy(
        zero_copy_only=False) for f in carried["by_id"]]).astype(str)
    assert sorted(users_by_id) == sorted(pacsv.read_csv(root / "data" / "users.csv")[
        "user_id"].to_pylist())
    common = ["--no-progress", "--threads", "1"]
    train = ["--graph", tmp_path / "d", "--target", "user", "--model", "rgcn", "--fanouts",
             "10,5", "--epochs", 8, "--batch-size", 128, "--lr", 0.01, "--checkpoint-dir",
             tmp_path / "ck", "--metrics-out", tmp_path / "m.json", *common]
    done = subprocess.run([sys.executable, "-m", "graphprep.trainer", *map(str, train)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "m.json").read_text())["summary"]
    assert summary["test_acc"] > 0.4, summary
    embed = ["--graph", tmp_path / "d", "--checkpoint", tmp_path / "ck", "--out",
             tmp_path / "e", *common]
    done = subprocess.run([sys.executable, "-m", "graphprep.trainer", "embed", *map(str, embed)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    users = pacsv.read_csv(root / "data" / "users.csv")
    truth = dict(zip(users["user_id"].to_pylist(), users["segment"].to_pylist()))
    pred = pq.read_table(tmp_path / "e" / "user" / "predictions.parquet")
    keys = pred["key"].to_pylist()
    assert sorted(keys) == sorted(truth)                       # every key, once
    accuracy = np.mean([truth[k] == c for k, c in zip(keys, pred["prediction"].to_pylist())])
    assert accuracy > 0.4
    for t, table in (("user", users["user_id"]), ("item", pq.read_table(
            root / "data" / "items.parquet")["asin"])):
        emb = pq.read_table(tmp_path / "e" / t / "embeddings.parquet")
        assert sorted(emb["key"].to_pylist()) == sorted(table.to_pylist())
        rows = np.load(tmp_path / "e" / t / "embeddings.npy")
        np.testing.assert_array_equal(np.stack(emb["embedding"].to_numpy(
            zero_copy_only=False)), rows)


def test_python_api_takes_a_dict_and_maps_keys_both_ways(shop, tmp_path, monkeypatch):
    root, g, scheduler = shop
    raw = yaml.safe_load(open(root / "shop.yaml"))
    monkeypatch.chdir(root)                        # relative table paths: the working folder
    res = api.chunk(raw, str(tmp_path / "g"), chunk_size=700, scheduler=scheduler)
    h = res.graph
    np.testing.assert_array_equal(keys(g, "user"), keys(h, "user"))
    users = keys(g, "user")
    ids = np.array([5, 0, 1499, 5])
    assert api.node_keys(str(tmp_path / "g"), "user", ids).to_pylist() == list(users[ids])
    np.testing.assert_array_equal(
        api.node_ids(str(tmp_path / "g"), "user", [users[7], "no-such-user", users[3]]),
        [7, -1, 3])
    again = api.chunk(raw, str(tmp_path / "g"), chunk_size=700, scheduler=scheduler)
    assert again.reused
