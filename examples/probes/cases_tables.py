"""Misuse cases of the tables config (``prep chunk CONFIG.yaml OUT``): CSV options, column
positions, JSON tables, sparse features, tables joined by key, and chunk flags a config
decides. Each is a mistake a new user makes; each must end in exit 2 and one line naming the
file, the field or column, and the row or key (or, for the few that must work, succeed)."""

from __future__ import annotations

import json
from pathlib import Path

from kit import Case, write

EDGES = "edges: [{type: n:e:n, files: e.csv, src: s, dst: d}]\n"


def _edges(folder: Path, pairs=(("a", "b"), ("b", "c"))) -> None:
    write(folder / "e.csv", "s,d\n" + "".join(f"{a},{b}\n" for a, b in pairs))


def chunk(config: str, files: dict[str, str], *flags, edges: bool = True):
    """A setup writing ``files`` and ``c.yaml`` (``config``), running prep chunk on it."""
    def setup(folder: Path):
        if edges:
            _edges(folder)
        for name, text in files.items():
            write(folder / name, text)
        write(folder / "c.yaml", config)
        return ["prep", "chunk", "c.yaml", "out", *flags]
    return setup


def _no_output(folder: Path, output: str) -> None:
    assert not (folder / "out").exists(), "output written"


NODES_CSV = {"n.csv": "id,x\na,1\nb,2\nc,3\n"}


def _graph_check(**expect):
    """A success check: the output exists and its node count per type matches."""
    def check(folder: Path, output: str) -> None:
        meta = json.loads((folder / "out" / "metadata.json").read_text())
        counts = dict(zip(meta["node_type"], meta["num_nodes_per_type"]))
        for t, n in expect.items():
            assert counts.get(t) == n, (t, counts)
    return check


CASES: list[Case] = [
    # ------------------------------------------------------------- CSV options, positions
    Case("headerless file, key by a name it does not have",
         chunk("nodes: [{type: n, files: n.tsv, key: id, csv: {header: false}}]\n" + EDGES,
               {"n.tsv": "a\t1\nb\t2\nc\t3\n"}),
         names=("n.tsv", "'id'", "not found", "c0")),
    Case("column position in a file with a header",
         chunk("nodes: [{type: n, files: n.csv, key: 0}]\n" + EDGES, NODES_CSV),
         names=("c.yaml", "nodes[0].key", "position 0", "header: false")),
    Case("csv.names with one name too few",
         chunk("nodes: [{type: n, files: n.tsv, key: id, csv: {header: false, names: [id]}}]\n"
               + EDGES, {"n.tsv": "a\t1\nb\t2\nc\t3\n"}),
         names=("n.tsv", "csv.names", "1 names", "2 columns")),
    Case("tab delimiter in single quotes is two characters",
         chunk("nodes: [{type: n, files: n.txt, key: id, csv: {delimiter: '\\t'}}]\n" + EDGES,
               {"n.txt": "id\tx\na\t1\n"}),
         names=("c.yaml", "nodes[0].csv.delimiter", "one character")),
    Case("header: 'no' as a string",
         chunk("nodes: [{type: n, files: n.csv, key: id, csv: {header: 'no'}}]\n" + EDGES,
               NODES_CSV),
         names=("c.yaml", "nodes[0].csv.header", "true or false")),
    Case("semicolon file read with the default comma",
         chunk("nodes: [{type: n, files: n.csv, key: id}]\n" + EDGES,
               {"n.csv": "id;x\na;1\nb;2\nc;3\n"}),
         names=("n.csv", "'id' not found", "delimiter ';'")),
    Case("position beyond csv.names",
         chunk("nodes: [{type: n, files: n.tsv, key: 0, features: {x: 3}, "
               "csv: {header: false, names: [id, x]}}]\n" + EDGES, {"n.tsv": "a\t1\n"}),
         names=("c.yaml", "nodes[0].features.x", "position 3", "2 columns")),
    Case("headerless edges by position work",
         chunk("nodes: [{type: n, files: n.csv, key: id}]\nedges: [{type: n:e:n, files: e.tsv,"
               " src: 0, dst: 1, csv: {header: false}}]\n",
               {**NODES_CSV, "e.tsv": "a\tb\nb\tc\n"}, edges=False),
         code=0, check=_graph_check(n=3)),

    # ------------------------------------------------------------- chunk flags a config decides
    Case("--src-col with a config",
         chunk("nodes: [{type: n, files: n.csv, key: id}]\n" + EDGES, NODES_CSV,
               "--src-col", "s"),
         names=("c.yaml", "--src-col", "src: on each edge table")),
    Case("--name with a config",
         chunk("nodes: [{type: n, files: n.csv, key: id}]\n" + EDGES, NODES_CSV,
               "--name", "shop"),
         names=("c.yaml", "--name", "name: at the config's top level"), check=_no_output),
    Case("--num-nodes with a config",
         chunk("nodes: [{type: n, files: n.csv, key: id}]\n" + EDGES, NODES_CSV,
               "--num-nodes", "n=5"),
         names=("c.yaml", "--num-nodes", "node tables")),

    # ------------------------------------------------------------- config syntax
    Case("YAML indented with a tab",
         chunk("nodes:\n\t- {type: n, files: n.csv, key: id}\n" + EDGES, NODES_CSV),
         names=("c.yaml", "not valid YAML at line 2")),
    Case("JSON config with a trailing comma",
         lambda folder: (_edges(folder), write(folder / "n.csv", NODES_CSV["n.csv"]),
                         write(folder / "c.json", '{"nodes": [{"type": "n", "files": "n.csv", '
                               '"key": "id"},], "edges": []}'),
                         ["prep", "chunk", "c.json", "out"])[-1],
         names=("c.json", "not valid JSON", "line 1")),
    Case("json shape misspelt",
         chunk("nodes: [{type: n, files: n.json, key: key, json: {shape: object_map}}]\n"
               + EDGES, {"n.json": '{"a": 1}'}),
         names=("c.yaml", "nodes[0].json.shape", "records, lines, object")),

    # ------------------------------------------------------------- JSON tables
    Case("JSON object read with the key column named as in the CSV",
         chunk("nodes: [{type: n, files: f.json, key: id, sparse: {f: {indices: value}}}]\n"
               + EDGES, {"f.json": json.dumps({"a": [1], "b": [2], "c": []})}),
         names=("f.json", "'id' not found", "'key'")),
    Case("JSON array of arrays, not records",
         chunk("nodes: [{type: n, files: n.json, key: id}]\n" + EDGES,
               {"n.json": "[[1, 2], [3, 4]]"}),
         names=("n.json", "record 0", "not an object")),
    Case("JSON lines with a broken line",
         chunk("nodes: [{type: n, files: n.jsonl, key: id, features: {x: x}}]\n" + EDGES,
               {"n.jsonl": '{"id": "a", "x": 1}\n{"id": "b", x: 2}\n{"id": "c", "x": 3}\n'}),
         names=("n.jsonl", "row 1", "JSON parse error")),
    Case("JSON object whose values mix lists and numbers",
         chunk("nodes: [{type: n, files: f.json, key: key, sparse: {f: {indices: value}}}]\n"
               + EDGES, {"f.json": json.dumps({"a": [1], "b": 7, "c": [2]})}),
         names=("f.json", "field 'value'", "key 'b'")),
    Case("JSON feature list shorter in one record",
         chunk("nodes: [{type: n, files: n.jsonl, key: id, features: {x: x}}]\n" + EDGES,
               {"n.jsonl": '{"id": "a", "x": [1, 2]}\n{"id": "b", "x": [3]}\n'
                           '{"id": "c", "x": [4, 5]}\n'}),
         names=("n.jsonl", "field 'x'", "row 1", "one length")),
    Case("JSON object with integer keys against integer edge IDs works",
         lambda folder: (write(folder / "e.csv", "s,d\n0,1\n1,2\n"),
                         write(folder / "f.json", json.dumps({"0": [3], "1": [], "2": [0, 1]})),
                         write(folder / "c.yaml", "nodes: [{type: n, files: f.json, key: key,"
                               " sparse: {f: {indices: value}}}]\n" + EDGES),
                         ["prep", "chunk", "c.yaml", "out"])[-1],
         code=0, check=_graph_check(n=3)),

    # ------------------------------------------------------------- sparse features
    Case("sparse indices as a CSV string without separator",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t}}}]\n"
               + EDGES, {"n.csv": "id,t\na,1 2\nb,3\nc,4 5\n"}),
         names=("n.csv", "field 't'", "separator")),
    Case("sparse dim: 0",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: x, dim: 0}}}]\n"
               + EDGES, NODES_CSV),
         names=("c.yaml", "nodes[0].sparse.t.dim", "positive integer")),
    Case("comma-separated indices in an unquoted CSV cell",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t, "
               "separator: ','}}}]\n" + EDGES, {"n.csv": "id,t\na,1\nb,2,3\nc,4\n"}),
         names=("n.csv", "row 1", "expected 2 columns, found 3")),
    Case("sparse values fewer than indices",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t, values: w, "
               "separator: ' ', dim: 9}}}]\n" + EDGES,
               {"n.csv": "id,t,w\na,1 2,1 1\nb,3 4,0.5\nc,5,1\n"}),
         names=("n.csv", "field 't'", "row 1", "differs in length")),
    Case("sparse weight that is not a number",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t, values: w, "
               "separator: ' ', dim: 9}}}]\n" + EDGES,
               {"n.csv": "id,t,w\na,1 2,1 1\nb,3,high\nc,5,1\n"}),
         names=("n.csv", "field 'w'", "row 1", "'high'")),
    Case("sparse index lists of strings in JSON",
         chunk("nodes: [{type: n, files: n.jsonl, key: id, sparse: {t: {indices: t}}}]\n"
               + EDGES, {"n.jsonl": '{"id": "a", "t": ["3"]}\n{"id": "b", "t": ["1", "2"]}\n'
                                    '{"id": "c", "t": []}\n'}),
         names=("n.jsonl", "field 't'", "lists of integers", "string")),
    Case("negative sparse index",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t, "
               "separator: ' ', dim: 9}}}]\n" + EDGES, {"n.csv": "id,t\na,1\nb,2\nc,-1 4\n"}),
         names=("n.csv", "field 't'", "row 2", "-1 outside")),
    Case("no active index anywhere and no dim",
         chunk("nodes: [{type: n, files: n.csv, key: id, sparse: {t: {indices: t, "
               "separator: ' '}}}]\n" + EDGES, {"n.csv": "id,t\na,\nb,\nc,\n"}),
         names=("n.csv", "field 't'", "give sparse.<field>.dim")),

    # ------------------------------------------------------------- categorical and label
    Case("label on a float column",
         chunk("nodes: [{type: n, files: n.csv, key: id, label: score}]\n" + EDGES,
               {"n.csv": "id,score\na,0.5\nb,1.5\nc,2.5\n"}),
         names=("n.csv", "field 'score'", "not floats")),
    Case("categorical on a JSON object column",
         chunk("nodes: [{type: n, files: n.jsonl, key: id, categorical: {m: meta}}]\n" + EDGES,
               {"n.jsonl": '{"id": "a", "meta": {"k": 1}}\n{"id": "b", "meta": {"k": 2}}\n'
                           '{"id": "c", "meta": {"k": 1}}\n'}),
         names=("n.jsonl", "field 'meta'", "strings or integers", "struct")),

    # ------------------------------------------------------------- tables joined by key
    Case("a split on the joined table too",
         chunk("nodes: [{type: n, files: n.csv, key: id, split: {fractions: [0.5, 0.5, 0]}},\n"
               "        {type: n, files: f.csv, key: id, features: {y: y}, "
               "split: {fractions: [0.5, 0.5, 0]}}]\n" + EDGES,
               {**NODES_CSV, "f.csv": "id,y\na,1\n"}),
         names=("c.yaml", "nodes[1].split", "first table")),
    Case("a field given by both tables of a type",
         chunk("nodes: [{type: n, files: n.csv, key: id, features: {feat: x}},\n"
               "        {type: n, files: f.csv, key: id, features: {feat: y}}]\n" + EDGES,
               {**NODES_CSV, "f.csv": "id,y\na,1\n"}),
         names=("c.yaml", "nodes[1]", "'feat'", "nodes[0]")),
    Case("joined table naming a node the first table lacks",
         chunk("nodes: [{type: n, files: n.csv, key: id, features: {x: x}},\n"
               "        {type: n, files: f.csv, key: id, features: {y: y}}]\n" + EDGES,
               {**NODES_CSV, "f.csv": "id,y\na,1\nzz,2\n"}),
         names=("f.csv", "row 1", "zz")),
    Case("joined table covering some nodes works",
         chunk("nodes: [{type: n, files: n.csv, key: id, features: {x: x}},\n"
               "        {type: n, files: f.csv, key: id, features: {y: y}}]\n" + EDGES,
               {**NODES_CSV, "f.csv": "id,y\nc,1\n"}),
         code=0, check=_graph_check(n=3)),
]
