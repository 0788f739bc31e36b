"""Keyed edge lists misused: every mistake exits 2 with one line naming the user's file, the
column and the row or key, and nothing is written; an integer edge list of a header only is
a graph of isolated nodes, not a keyed one."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from faultkit import prep_fails
from graphprep.formats import load_chunked_graph

from conftest import edges_of

BIG = 2**63
TOP = 2**64 - 1


def lines(path, rows, header="src,dst"):
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + rows))
    return path


def test_uint64_above_int64_names_row_and_value(scheduler, tmp_path):
    pq.write_table(pa.table({"src": pa.array([1, 2, TOP, 3], pa.uint64()),
                             "dst": pa.array([2, 3, 4, 5], pa.uint64())}), tmp_path / "e.parquet")
    out = prep_fails(scheduler, "chunk", tmp_path / "e.parquet", tmp_path / "g", "--map-keys",
                     code=2, names=["e.parquet", "'src'", "row 2", str(TOP)])
    assert "TypeError" not in out
    assert not os.path.exists(tmp_path / "g")


def test_csv_integer_beyond_int64_names_its_row_in_a_later_part(scheduler, tmp_path):
    """2^63 far below the first rows (pyarrow's inference would read the column as double,
    naming no row): the row in the whole file, past several parts, and the value."""
    rng = np.random.default_rng(1)
    ids = rng.integers(2**40, 2**62, (9000, 2))
    rows = [f"{a},{b}" for a, b in ids]
    rows[7321] = f"{ids[7321, 0]},{BIG}"
    lines(tmp_path / "e.csv", rows)
    prep_fails(scheduler, "chunk", tmp_path / "e.csv", tmp_path / "g", "--map-keys",
               "--chunk-size", 1000, code=2,
               names=["e.csv", "'dst'", "row 7321", str(BIG)])
    rows[7321] = f"{TOP},{ids[7321, 1]}"
    lines(tmp_path / "e.csv", rows)
    prep_fails(scheduler, "chunk", tmp_path / "e.csv", tmp_path / "g", "--map-keys",
               "--chunk-size", 1000, code=2, names=["e.csv", "'src'", "row 7321", str(TOP)])
    assert not os.path.exists(tmp_path / "g")


def test_decimal_endpoints_are_refused_not_made_string_keys(scheduler, tmp_path):
    lines(tmp_path / "e.csv", ["1.0,2.0", "2.0,3.0"])
    for extra in ((), ("--map-keys",)):
        prep_fails(scheduler, "chunk", tmp_path / "e.csv", tmp_path / "g", *extra, code=2,
                   names=["e.csv", "'src'", "row 0", "1.0", "decimal"])
    pq.write_table(pa.table({"src": [1.0, 2.0], "dst": [2.0, 3.0]}), tmp_path / "e.parquet")
    prep_fails(scheduler, "chunk", tmp_path / "e.parquet", tmp_path / "g", code=2,
               names=["e.parquet", "'src'", "row 0", "1.0"])
    assert not os.path.exists(tmp_path / "g")


def test_text_among_integers_with_map_keys_names_its_row(scheduler, tmp_path):
    lines(tmp_path / "e.csv", ["1,2", "3,4", "5,abc"])
    prep_fails(scheduler, "chunk", tmp_path / "e.csv", tmp_path / "g", "--map-keys", code=2,
               names=["e.csv", "'dst'", "row 2", "'abc'"])


def test_same_column_for_both_endpoints_is_refused(scheduler, tmp_path):
    lines(tmp_path / "k.csv", ["a,b,1"], header="user,item,n")
    prep_fails(scheduler, "chunk", tmp_path / "k.csv", tmp_path / "g", "--src-col", "user",
               "--dst-col", "user", code=2, names=["k.csv", "--dst-col", "'user'"])
    lines(tmp_path / "i.csv", ["1,2", "2,3"], header=None)
    prep_fails(scheduler, "chunk", tmp_path / "i.csv", tmp_path / "g", "--src-col", 1,
               "--dst-col", 1, code=2, names=["i.csv", "--dst-col", "'1'"])


def test_keyed_type_of_an_empty_edge_file_only_names_that_file(scheduler, tmp_path):
    edges = tmp_path / "in" / "edges"
    edges.mkdir(parents=True)
    lines(edges / "user__bought__item.csv", ["u1,i1", "u2,i2"])
    (edges / "tag__of__item.csv").write_text("")
    out = prep_fails(scheduler, "chunk", tmp_path / "in", tmp_path / "g", code=2,
                     names=[str(edges / "tag__of__item.csv"), "'tag'"])
    assert ".partial" not in out


def test_header_only_integer_edge_list_with_num_nodes_is_isolated_nodes(prep, tmp_path):
    lines(tmp_path / "e.csv", [])
    prep("chunk", tmp_path / "e.csv", tmp_path / "g", "--num-nodes", 5)
    g = load_chunked_graph(str(tmp_path / "g"))
    assert g.num_nodes["_N"] == 5 and not g.keys
    assert len(edges_of(tmp_path / "g")[0]) == 0


def test_empty_edge_list_names_the_users_file_not_a_partial_one(scheduler, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    lines(tmp_path / "header.csv", [])
    for name in ("empty.csv", "header.csv"):
        for extra in (("--map-keys",), ()):
            out = prep_fails(scheduler, "chunk", tmp_path / name, tmp_path / "g", *extra,
                             code=2, names=[str(tmp_path / name), "no edges"])
            assert ".partial" not in out, out
    assert not os.path.exists(tmp_path / "g")


def test_integer_keys_keep_every_digit_and_map_back(prep, tmp_path):
    """Keys at int64's ends, signs and padding are integers: each maps to one node, and the
    saved keys are the integers themselves."""
    keys = [BIG - 1, -BIG, 7, -3, 2**53 + 1]
    lines(tmp_path / "e.csv", [f"{BIG - 1},-{BIG}", "+7, -3", f"{2**53 + 1},0007",
                               f"{BIG - 1},{2**53 + 1}"])
    prep("chunk", tmp_path / "e.csv", tmp_path / "g", "--map-keys")
    g = load_chunked_graph(str(tmp_path / "g"))
    names = np.concatenate([pq.read_table(g.path(f)).column("key").to_numpy()
                            for f in g.keys["_N"].by_id])
    assert g.keys["_N"].kind == "integer" and sorted(names.tolist()) == sorted(keys)
    s, d = edges_of(tmp_path / "g")
    assert list(zip(names[s].tolist(), names[d].tolist())) == [
        (BIG - 1, -BIG), (7, -3), (2**53 + 1, 7), (BIG - 1, 2**53 + 1)]


def test_parse_integer_keys_keeps_nulls_and_names_rows():
    from graphprep.pipeline.keys.hashing import parse_integer_keys
    got = parse_integer_keys(pa.array(["5", None, " -2 "]), file="f", field="c")
    assert got.type == pa.int64() and got.to_pylist() == [5, None, -2]
    for text, row, named in ((["1", "x1"], 11, "'x1'"), (["1", "2.5"], 11, "2.5"),
                             ([str(-BIG - 1)], 10, str(-BIG - 1))):
        try:
            parse_integer_keys(pa.array(text), file="f", field="c", row0=10)
        except ValueError as err:
            assert err.row == row and named in str(err), str(err)
        else:
            raise AssertionError(text)
