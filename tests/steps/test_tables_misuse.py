"""Misuses of the tables config that crashed or blamed the wrong thing: each now works, or
ends in exit 2 and one line naming the table's file, the column and the row or key."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from faultkit import prep_fails
from graphprep.formats import EdgeType, load_chunked_graph
from test_tables_options import field, keys, write

EDGES = "edges: [{type: n:e:n, files: e.csv, src: s, dst: d}]\n"


def setup(tmp_path, nodes: str, edges: str = EDGES):
    write(tmp_path / "e.csv", "s,d\na,b\nb,c\n")
    write(tmp_path / "c.yaml", nodes + edges)
    return tmp_path / "c.yaml"


def one_line_failure(scheduler, cfg, out, names):
    text = prep_fails(scheduler, "chunk", cfg, out, code=2, names=names)
    assert len(text.strip().splitlines()) == 1, text
    assert ".partial" not in text and not out.exists()
    return text


def test_dictionary_encoded_parquet_columns_work(tmp_path, prep):
    """pandas' ``category`` dtype writes dictionary-encoded columns: as keys, categories and
    labels they are read as their values."""
    ids = pa.array(["a", "b", "c"]).dictionary_encode()
    colour = pa.array(["red", "blue", "red"]).dictionary_encode()
    pq.write_table(pa.table({"id": ids, "colour": colour, "y": colour}), tmp_path / "n.parquet")
    cfg = setup(tmp_path, "nodes: [{type: n, files: n.parquet, key: id, categorical: "
                          "{colour: colour}, label: y}]\n")
    prep("chunk", cfg, tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    assert keys(g, "n") == ["a", "b", "c"]
    vocab = pq.read_table(g.path(g.vocab["n"]["colour"]))["value"].to_pylist()
    assert [vocab[c] for c in field(g, "n", "colour")] == ["red", "blue", "red"]


def test_inf_in_a_feature_names_the_table_not_the_partial_output(tmp_path, scheduler):
    pq.write_table(pa.table({"id": ["a", "b", "c"], "f": [1.0, 2.0, np.inf]}),
                   tmp_path / "n.parquet")
    cfg = setup(tmp_path, "nodes: [{type: n, files: n.parquet, key: id, features: {f: f}}]\n")
    one_line_failure(scheduler, cfg, tmp_path / "g",
                     ["n.parquet", "field 'f'", "row 2", "inf"])


def test_float_column_as_sparse_indices_is_named(tmp_path, scheduler):
    pq.write_table(pa.table({"id": ["a", "b", "c"], "t": [1.0, 2.0, 3.0]}),
                   tmp_path / "n.parquet")
    cfg = setup(tmp_path, "nodes: [{type: n, files: n.parquet, key: id, sparse: "
                          "{t: {indices: t, dim: 5}}}]\n")
    one_line_failure(scheduler, cfg, tmp_path / "g",
                     ["n.parquet", "field 't'", "must be a list column", "double"])


def test_categorical_on_a_list_column_is_named(tmp_path, scheduler):
    pq.write_table(pa.table({"id": ["a", "b", "c"], "l": [[1], [2], [1]]}),
                   tmp_path / "n.parquet")
    cfg = setup(tmp_path, "nodes: [{type: n, files: n.parquet, key: id, categorical: "
                          "{l: l}}]\n")
    one_line_failure(scheduler, cfg, tmp_path / "g",
                     ["n.parquet", "field 'l'", "strings or integers", "list<"])


def test_header_only_edge_table_with_a_feature_is_zero_edges(tmp_path, prep):
    write(tmp_path / "none.csv", "s,d,w\n")
    cfg = setup(tmp_path, "nodes: [{type: n, files: n.csv, key: id}]\n",
                "edges: [{type: n:e:n, files: e.csv, src: s, dst: d},\n"
                "        {type: n:f:n, files: none.csv, src: s, dst: d, features: {w: w}}]\n")
    write(tmp_path / "n.csv", "id\na\nb\nc\n")
    prep("chunk", cfg, tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    assert g.num_edges[EdgeType("n", "f", "n")] == 0 and g.num_edges[EdgeType("n", "e", "n")] == 2


def test_strings_in_one_file_integers_in_another_names_the_file(tmp_path, scheduler):
    write(tmp_path / "n1.csv", "id,c\na,x\n")
    write(tmp_path / "n2.csv", "id,c\nb,1\nc,2\n")
    cfg = setup(tmp_path, "nodes: [{type: n, files: [n1.csv, n2.csv], key: id, "
                          "categorical: {c: c}}]\n")
    one_line_failure(scheduler, cfg, tmp_path / "g",
                     ["n2.csv", "field 'c'", "integers", "n1.csv"])


def test_yaml_syntax_error_prints_one_line(tmp_path):
    write(tmp_path / "c.yaml", "nodes: [{type: n, files: n.csv, key: id\n" + EDGES)
    text = prep_fails(None, "chunk", tmp_path / "c.yaml", tmp_path / "g", code=2,
                      cluster=False, names=["c.yaml", "line 2"])
    assert len(text.strip().splitlines()) == 1, text
