"""JSON node tables (records, JSON lines, an object of key -> value) and sparse features from
list columns or delimited strings, read from the tables config: each row back by key."""

from __future__ import annotations

import json

import numpy as np

from faultkit import prep_fails
from graphprep.formats import load_chunked_graph
from test_tables_options import field, keys, write

EDGES = "edges: [{type: n:e:n, files: e.csv, src: s, dst: d}]\n"


def edge_file(tmp_path, pairs=(("a", "b"), ("b", "c"))):
    write(tmp_path / "e.csv", "s,d\n" + "".join(f"{a},{b}\n" for a, b in pairs))


def test_json_records_lines_and_object_tables(tmp_path, prep):
    """Three node types, one per JSON shape, each with a feature list, a category and
    sparse indices; the object's values are records, its keys become column ``id``."""
    rows = [{"id": k, "x": [i, i + 0.5], "c": "ab"[i % 2], "t": list(range(i))}
            for i, k in enumerate("abc")]
    write(tmp_path / "rec.json", json.dumps(rows, indent=1))
    write(tmp_path / "lines.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(tmp_path / "obj.json", json.dumps({r["id"]: {k: v for k, v in r.items() if k != "id"}
                                             for r in reversed(rows)}))
    table = "features: {x: x}, categorical: {c: c}, sparse: {t: {indices: t, dim: 4}}"
    write(tmp_path / "c.yaml", f"""
nodes:
  - {{type: n, files: rec.json, key: id, {table}}}
  - {{type: m, files: lines.jsonl, key: id, {table}}}
  - {{type: o, files: obj.json, key: id, json: {{keys_as: id}}, {table}}}
edges:
  - {{type: n:e:n, files: e.csv, src: s, dst: d}}
  - {{type: m:e:m, files: e.csv, src: s, dst: d}}
  - {{type: o:e:o, files: e.csv, src: s, dst: d}}
""")
    edge_file(tmp_path)
    prep("chunk", tmp_path / "c.yaml", tmp_path / "g", "--chunk-size", 2)
    g = load_chunked_graph(str(tmp_path / "g"))
    for t in ("n", "m", "o"):
        by_key = {k: i for i, k in enumerate(keys(g, t))}
        order = [by_key[r["id"]] for r in rows]
        np.testing.assert_allclose(field(g, t, "x")[order], [r["x"] for r in rows])
        sparse = field(g, t, "t")[order]
        assert [np.flatnonzero(s).tolist() for s in sparse] == [r["t"] for r in rows]
        assert g.node_data[t]["t"].format == "csr"


def test_object_keys_that_are_integers_match_integer_ids(tmp_path, prep):
    write(tmp_path / "feat.json", json.dumps({"2": [0, 3], "0": [1], "1": []}))
    write(tmp_path / "e.csv", "s,d\n0,1\n1,2\n")
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: feat.json, key: key, "
                               "sparse: {f: {indices: value}}}]\n" + EDGES)
    prep("chunk", tmp_path / "c.yaml", tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    assert sorted(keys(g, "n")) == [0, 1, 2]
    f = field(g, "n", "f")
    assert f.shape == (3, 4)                             # dim: largest index + 1
    got = {k: np.flatnonzero(r).tolist() for k, r in zip(keys(g, "n"), f)}
    assert got == {0: [1], 1: [], 2: [0, 3]}


def test_sparse_from_a_delimited_string_column_with_weights(tmp_path, prep):
    write(tmp_path / "n.csv", 'id,words,counts\na,3 17  42,1 2 0.5\nb,,\nc, 5 ,4\n')
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: n.csv, key: id, sparse: {bow: "
                               "{indices: words, values: counts, separator: ' ', dim: 50}}}]\n"
          + EDGES)
    edge_file(tmp_path)
    prep("chunk", tmp_path / "c.yaml", tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    bow = dict(zip(keys(g, "n"), field(g, "n", "bow")))
    assert bow["a"].shape == (50,)
    assert {i: bow["a"][i] for i in np.flatnonzero(bow["a"])} == {3: 1, 17: 2, 42: 0.5}
    assert not bow["b"].any() and np.flatnonzero(bow["c"]).tolist() == [5]


def test_an_index_beyond_dim_in_a_later_file_names_that_file_and_row(tmp_path, scheduler):
    write(tmp_path / "n1.csv", "id,t\na,1 2\nb,3\n")
    write(tmp_path / "n2.csv", "id,t\nc,1\nd,0 9\n")
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: [n1.csv, n2.csv], key: id, sparse: "
                               "{t: {indices: t, separator: ' ', dim: 4}}}]\n" + EDGES)
    edge_file(tmp_path)
    prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
               names=["n2.csv", "'t'", "row 1", "active index 9 outside [0, 4)"])


def test_sparse_token_that_is_not_an_index_names_file_column_row(tmp_path, scheduler):
    write(tmp_path / "n.csv", "id,t\na,1 2\nb,3 x7\nc,\n")
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: n.csv, key: id, sparse: "
                               "{t: {indices: t, separator: ' '}}}]\n" + EDGES)
    edge_file(tmp_path)
    out = prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
                     names=["n.csv", "field 't', row 1", "'x7'"])
    assert len(out.strip().splitlines()) == 1


def test_feature_width_differing_between_files_names_the_file(tmp_path, scheduler):
    write(tmp_path / "a.jsonl", '{"id": "a", "x": [1, 2]}\n{"id": "b", "x": [3, 4]}\n')
    write(tmp_path / "b.jsonl", '{"id": "c", "x": [1, 2, 3]}\n')
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: [a.jsonl, b.jsonl], key: id, "
                               "features: {x: x}}]\n" + EDGES)
    edge_file(tmp_path)
    prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
               names=["b.jsonl", "field 'x'", "a.jsonl", "one width in every file"])


def test_joined_table_key_twice_or_unknown_is_named(tmp_path, scheduler):
    write(tmp_path / "n.csv", "id,y\na,1\nb,2\nc,3\n")
    write(tmp_path / "f.jsonl", '{"id": "a", "x": 1}\n{"id": "c", "x": 2}\n{"id": "a", "x": 3}\n')
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: n.csv, key: id, label: y},\n"
                               "        {type: n, files: f.jsonl, key: id, features: {x: x}}]\n"
          + EDGES)
    edge_file(tmp_path)
    prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
               names=["f.jsonl", "row 2", "key given twice"])
    write(tmp_path / "f.jsonl", '{"id": "a", "x": 1}\n{"id": "zz", "x": 2}\n')
    prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
               names=["f.jsonl", "row 1", "zz"])


def test_bad_token_deep_in_a_large_csv_names_its_file_row(tmp_path, scheduler):
    """Without dim, the pass that finds the width reads every part of the file: a bad
    token in a later part is named by its row in the whole file."""
    lines = [f"k{i},{i % 7} {i % 5}" for i in range(12000)]
    lines[9876] = "k9876,4 four"
    write(tmp_path / "n.csv", "id,t\n" + "\n".join(lines) + "\n")
    write(tmp_path / "e.csv", "s,d\nk1,k2\n")
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: n.csv, key: id, sparse: "
                               "{t: {indices: t, separator: ' '}}}]\n" + EDGES)
    prep_fails(scheduler, "chunk", tmp_path / "c.yaml", tmp_path / "g", "--chunk-size", 3000,
               code=2, names=["n.csv", "field 't', row 9876", "'four'"])
