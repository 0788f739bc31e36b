"""Out-of-core key mapping (``graphprep.pipeline.keys``): every edge survives by key, numbering is the
same for any chunking, and bad keys are named by file, row and key."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from graphprep.formats import EdgeType, FormatError, load_chunked_graph
from graphprep.formats.arrays import read_edge_chunk
from graphprep.pipeline import api
from graphprep.pipeline.keys.hashing import key_hash, normalize_keys
from graphprep.pipeline.keys.job import EdgeTable, NodeTable, map_keys
from graphprep.pipeline.tables.parts import csv_format, table_parts

CLICKS = EdgeType("user", "clicks", "item")


def run_here(fn, items, desc=None):
    return [fn(x) for x in items]


def uuid_keys(rng, n: int) -> np.ndarray:
    return np.array([f"{a:016x}-{b:08x}" for a, b in zip(rng.integers(0, 2**62, n),
                                                          rng.integers(0, 2**31, n))])


@pytest.fixture()
def tables(tmp_path):
    """A users table (Parquet, shuffled string keys) and a clicks CSV of user and item keys;
    items have no table."""
    rng = np.random.default_rng(0)
    users = uuid_keys(rng, 3000)
    items = np.array([f"B0{i:07d}" for i in rng.permutation(2000)])
    pq.write_table(pa.table({"uid": users}), tmp_path / "users.parquet", row_group_size=300)
    n = 20000
    clicks = pa.table({"user": users[rng.integers(0, len(users), n)],
                       "item": items[rng.integers(0, len(items), n)]})
    pacsv.write_csv(clicks, tmp_path / "clicks.csv")
    return tmp_path, users, clicks


def mapping(tmp_path, rows_per_part: int, out: str, dangling="error", users_file=None):
    users_file = users_file or tmp_path / "users.parquet"
    path = str(tmp_path / "clicks.csv")
    fmt = csv_format(path, ("user", "item"), strings=("user", "item"))
    nodes = [NodeTable("user", tuple(table_parts(str(users_file), ("uid",), rows_per_part,
                                                 csv_format(str(users_file), ("uid",))
                                                 if str(users_file).endswith(".csv")
                                                 else None)), "uid")]
    edges = [EdgeTable(CLICKS, tuple(table_parts(path, ("user", "item"), rows_per_part, fmt)),
                       "user", "item")]
    result = map_keys(nodes, edges, out, os.path.join(out, "_staging"), run_here, dangling)
    return result


def keys_by_id(out, keymap) -> np.ndarray:
    return np.concatenate([pq.read_table(os.path.join(out, f)).column("key").to_numpy(
        zero_copy_only=False) for f in keymap.by_id]).astype(str)


def translated(result, et) -> tuple[np.ndarray, np.ndarray]:
    parts = result.edges[et]
    return (np.concatenate([np.load(p.prefix + ".src.npy") for p in parts]),
            np.concatenate([np.load(p.prefix + ".dst.npy") for p in parts]))


def test_every_edge_comes_back_by_key_and_table_rows_keep_their_order(tables):
    tmp, users, clicks = tables
    out = str(tmp / "a")
    result = mapping(tmp, 1500, out)
    assert result.num_nodes == {"user": 3000, "item": len(set(clicks["item"].to_pylist()))}
    user_keys = keys_by_id(out, result.maps["user"])
    np.testing.assert_array_equal(user_keys, users)          # table rows: IDs in input order
    item_keys = keys_by_id(out, result.maps["item"])
    assert len(set(item_keys)) == len(item_keys)
    src, dst = translated(result, CLICKS)
    np.testing.assert_array_equal(user_keys[src], clicks["user"].to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(item_keys[dst], clicks["item"].to_numpy(zero_copy_only=False))
    # the by-key map agrees with the by-ID one
    for f in result.maps["item"].by_key:
        t = pq.read_table(os.path.join(out, f))
        np.testing.assert_array_equal(item_keys[t.column("id").to_numpy()],
                                      t.column("key").to_numpy(zero_copy_only=False).astype(str))


def test_numbering_is_the_same_for_any_chunking(tables):
    tmp, _, _ = tables
    a = mapping(tmp, 700, str(tmp / "a"))
    b = mapping(tmp, 9000, str(tmp / "b"))
    assert a.maps["item"].bits != b.maps["item"].bits       # different bucket counts too
    for t in ("user", "item"):
        np.testing.assert_array_equal(keys_by_id(tmp / "a", a.maps[t]),
                                      keys_by_id(tmp / "b", b.maps[t]))
    for x, y in zip(translated(a, CLICKS), translated(b, CLICKS)):
        np.testing.assert_array_equal(x, y)


def test_duplicate_node_key_names_both_rows(tables):
    tmp, users, _ = tables
    dup = users.copy()
    dup[2500] = dup[40]
    pacsv.write_csv(pa.table({"uid": dup}), tmp / "users.csv")
    with pytest.raises(FormatError) as err:
        mapping(tmp, 1000, str(tmp / "a"), users_file=tmp / "users.csv")
    e = err.value
    assert e.file.endswith("users.csv") and e.row == 2500, str(e)
    assert repr(str(users[40])) in e.message and "row 40" in e.message


def test_dangling_edge_key_error_drop_add(tables):
    tmp, users, clicks = tables
    pq.write_table(pa.table({"uid": users[:2900]}), tmp / "fewer.parquet")
    gone = set(users[2900:])
    first = next(i for i, u in enumerate(clicks["user"].to_pylist()) if u in gone)
    with pytest.raises(FormatError) as err:
        mapping(tmp, 1000, str(tmp / "a"), users_file=tmp / "fewer.parquet")
    assert err.value.file.endswith("clicks.csv") and err.value.row == first, str(err.value)
    assert clicks["user"][first].as_py() in err.value.message
    dangling = int(np.isin(clicks["user"].to_numpy(zero_copy_only=False), list(gone)).sum())
    dropped = mapping(tmp, 1000, str(tmp / "d"), "drop", tmp / "fewer.parquet")
    assert dropped.num_nodes["user"] == 2900
    assert dropped.dropped_edges[CLICKS] == dangling
    src, _ = translated(dropped, CLICKS)
    assert len(src) == clicks.num_rows - dangling and src.max() < 2900
    added = mapping(tmp, 1000, str(tmp / "n"), "add", tmp / "fewer.parquet")
    seen = len(gone & set(clicks["user"].to_pylist()))
    assert added.num_nodes["user"] == 2900 + seen and added.added_nodes["user"] == seen
    keys = keys_by_id(tmp / "n", added.maps["user"])
    src, _ = translated(added, CLICKS)
    np.testing.assert_array_equal(keys[src], clicks["user"].to_numpy(zero_copy_only=False))


def test_null_key_and_mixed_kinds_are_named(tables):
    tmp, users, clicks = tables
    with_null = clicks.set_column(1, "item", pa.array(
        [None if i == 777 else v for i, v in enumerate(clicks["item"].to_pylist())]))
    pacsv.write_csv(with_null, tmp / "clicks.csv")
    with pytest.raises(FormatError) as err:
        mapping(tmp, 1000, str(tmp / "a"))
    assert err.value.row == 777 and err.value.field == "item" and "missing key" in str(err.value)
    pq.write_table(pa.table({"uid": np.arange(3000)}), tmp / "ints.parquet")
    pacsv.write_csv(clicks, tmp / "clicks.csv")
    with pytest.raises(FormatError, match="integers here but strings|strings here but integers"):
        mapping(tmp, 1000, str(tmp / "b"), users_file=tmp / "ints.parquet")


def test_hash_is_stable_across_string_types_and_slices():
    words = ["", "a", "ab", "é", "x" * 300, "ab"]
    h = key_hash(normalize_keys(pa.array(words)))
    assert h[2] == h[5] and len(set(h.tolist())) == 5
    np.testing.assert_array_equal(h, key_hash(normalize_keys(pa.array(words, pa.large_string()))))
    np.testing.assert_array_equal(h[2:], key_hash(normalize_keys(pa.array(words).slice(2))))
    np.testing.assert_array_equal(key_hash(normalize_keys(pa.array([5, 2**40], pa.uint64()))),
                                  key_hash(normalize_keys(pa.array([5, 2**40]))))


def test_prep_chunk_maps_string_edge_list_and_sparse_integer_ids(tmp_path):
    rng = np.random.default_rng(3)
    keys = uuid_keys(rng, 800)
    src, dst = keys[rng.integers(0, 800, 5000)], keys[rng.integers(0, 800, 5000)]
    pacsv.write_csv(pa.table({"src": src, "dst": dst}), tmp_path / "e.csv")
    res = api.chunk(str(tmp_path / "e.csv"), str(tmp_path / "g"), chunk_size=1200, workers=1)
    g = load_chunked_graph(str(tmp_path / "g"))
    names = keys_by_id(str(tmp_path / "g"), g.keys["_N"])
    assert g.num_nodes["_N"] == len(set(src) | set(dst)) == len(names)
    s, d = map(np.concatenate, zip(*[read_edge_chunk(g.path(f), g.edges[res.graph.edge_types[0]])
                                     for f in g.edges[res.graph.edge_types[0]].files]))
    assert sorted(zip(names[s], names[d])) == sorted(zip(src, dst))
    sparse = rng.integers(2**40, 2**62, 300)
    np.savetxt(tmp_path / "ids.csv", sparse[rng.integers(0, 300, (2000, 2))], fmt="%d",
               delimiter=",")
    with pytest.raises(FormatError, match="--map-keys"):
        api.chunk(str(tmp_path / "ids.csv"), str(tmp_path / "h"), workers=1)
    api.chunk(str(tmp_path / "ids.csv"), str(tmp_path / "h"), map_keys=True, workers=1)
    h = load_chunked_graph(str(tmp_path / "h"))
    assert h.keys["_N"].kind == "integer" and h.num_nodes["_N"] == len(np.unique(
        np.loadtxt(tmp_path / "ids.csv", dtype=np.int64, delimiter=",")))


def test_keyed_edge_folder_is_heterogeneous_by_file_name(tmp_path):
    """``edges/<src>__<rel>__<dst>.csv`` with string endpoints: each node type numbered from
    the keys its edge types name, across files; node data files by row are refused."""
    rng = np.random.default_rng(5)
    users, items = uuid_keys(rng, 300), np.array([f"item-{i}" for i in range(120)])
    (tmp_path / "f" / "edges").mkdir(parents=True)
    tables = {
        "user__buys__item": (users[rng.integers(0, 300, 900)], items[rng.integers(0, 120, 900)]),
        "user__follows__user": (users[rng.integers(0, 300, 700)],
                                users[rng.integers(0, 300, 700)])}
    for name, (s, d) in tables.items():
        pacsv.write_csv(pa.table({"src": s, "dst": d}), tmp_path / "f" / "edges" / f"{name}.csv")
    (tmp_path / "f" / "edges" / "item__related__item.csv").write_text("")   # no edges yet
    api.chunk(str(tmp_path / "f"), str(tmp_path / "g"), chunk_size=256, workers=1)
    g = load_chunked_graph(str(tmp_path / "g"))
    assert g.num_edges[EdgeType("item", "related", "item")] == 0
    assert set(g.keys) == {"user", "item"}
    names = {t: keys_by_id(str(tmp_path / "g"), g.keys[t]) for t in g.keys}
    seen_users = set(tables["user__buys__item"][0]) | set(tables["user__follows__user"][0]) | \
        set(tables["user__follows__user"][1])
    assert set(names["user"]) == seen_users and len(names["user"]) == len(seen_users)
    for et in (t for t in g.edge_types if t.dirname in tables):
        s, d = map(np.concatenate, zip(*[read_edge_chunk(g.path(f), g.edges[et])
                                         for f in g.edges[et].files]))
        want_s, want_d = tables[et.dirname]
        assert sorted(zip(names[et.src][s], names[et.dst][d])) == sorted(zip(want_s, want_d))
    (tmp_path / "f" / "nodes" / "user").mkdir(parents=True)
    np.save(tmp_path / "f" / "nodes" / "user" / "feat.npy", np.zeros((300, 2)))
    with pytest.raises(FormatError, match="config file"):
        api.chunk(str(tmp_path / "f"), str(tmp_path / "h"), workers=1)


def test_bad_csv_row_in_a_table_is_named_by_its_row_in_the_file(tables):
    tmp, _, clicks = tables
    lines = (tmp / "clicks.csv").read_text().splitlines()
    lines[1 + 15000] = lines[1 + 15000] + ",extra"        # data row 15000: three fields
    (tmp / "clicks.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as err:
        mapping(tmp, 1000, str(tmp / "a"))
    assert err.value.file.endswith("clicks.csv") and err.value.row == 15000, str(err.value)
    assert "expected 2 columns, found 3" in err.value.message
