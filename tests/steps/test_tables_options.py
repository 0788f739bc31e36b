"""The tables config's options: the generated reference, CSV options (delimiter, headerless
files, ``names``, positional columns), CLI flags a config overrides, and the worked configs
of docs/tables.md run as written."""

from __future__ import annotations

import os
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from faultkit import prep_fails
from graphprep.formats import EdgeType, FormatError, load_chunked_graph
from graphprep.formats.arrays import read_array_chunk, read_edge_chunk
from graphprep.pipeline.tables.config import load_config

from conftest import ROOT  # noqa: E402  (the repository)
DOCS = os.path.join(ROOT, "docs")


def keys(g, ntype) -> list:
    """A type's original keys by ID (string keys are stored as bytes)."""
    return [k.decode() if isinstance(k, bytes) else k for f in g.keys[ntype].by_id
            for k in pq.read_table(g.path(f))["key"].to_pylist()]


def field(g, ntype, name):
    files = g.node_data[ntype][name]
    parts = [read_array_chunk(g.path(f), files) for f in files.files]
    return np.concatenate([p.to_dense() if hasattr(p, "to_dense") else np.asarray(p)
                           for p in parts])


def edge_keys(g, et: EdgeType) -> list[tuple]:
    src_keys, dst_keys = keys(g, et.src), keys(g, et.dst)
    out = []
    for f in g.edges[et].files:
        s, d = read_edge_chunk(g.path(f), g.edges[et])
        out += [(src_keys[a], dst_keys[b]) for a, b in zip(s, d)]
    return sorted(out)


def write(path, text: str):
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- reference

def test_reference_is_generated_from_the_schema_and_up_to_date():
    """docs/tables-config.md is what `python -m graphprep.pipeline.tables.reference` prints: rerun it
    after changing SCHEMA (the loader accepts exactly the keys SCHEMA declares)."""
    from graphprep.pipeline.tables.config import SCHEMA
    from graphprep.pipeline.tables.reference import reference
    with open(os.path.join(DOCS, "tables-config.md")) as f:
        assert f.read() == reference(), \
            "stale: python -m graphprep.pipeline.tables.reference > docs/tables-config.md"
    for section in SCHEMA.values():
        for key in section.keys:
            assert f"| `{key.name}` |" in reference()


def test_loader_accepts_exactly_the_declared_keys(tmp_path):
    cfg = {"nodes": [{"type": "n", "files": "n.csv", "key": "id", "colour": 1}],
           "edges": [{"type": "n:e:n", "files": "e.csv", "src": "s", "dst": "d"}]}
    with pytest.raises(FormatError, match=r"unknown key 'colour' \(known: type, files, key"):
        load_config(str(tmp_path / "c.yaml"), cfg)
    cfg["nodes"][0].pop("colour")
    cfg["nodes"][0]["csv"] = {"delimiter": ";", "header": False, "names": ["id", "x"]}
    cfg["nodes"][0]["json"] = {"shape": "object", "keys_as": "id", "values_as": "x"}
    spec = load_config(str(tmp_path / "c.yaml"), cfg).nodes[0]
    assert spec.csv.names == ("id", "x") and spec.json.keys_as == "id"


# ----------------------------------------------------------------------------- CSV options

def test_positional_columns_for_headerless_files(tmp_path):
    def node(**kw):
        return load_config(str(tmp_path / "c.yaml"), {
            "nodes": [{"type": "n", "files": "n.csv", **kw}],
            "edges": [{"type": "n:e:n", "files": "e.csv", "src": 0, "dst": 1,
                       "csv": {"header": False}}]})
    cfg = node(key=0, csv={"header": False}, features={"f": [2, 1]}, label=3)
    n, e = cfg.nodes[0], cfg.edges[0]
    assert (n.key, e.src, e.dst) == ("c0", "c0", "c1")
    assert n.data.fields[0].columns == ("c2", "c1") and n.data.fields[1].columns == ("c3",)
    cfg = node(key=1, csv={"header": False, "names": ["a", "b"]})
    assert cfg.nodes[0].key == "b"
    with pytest.raises(FormatError, match=r"nodes\[0\].key.*position 0 needs a headerless"):
        node(key=0)
    with pytest.raises(FormatError, match=r"position 2: csv.names has 2 columns"):
        node(key=2, csv={"names": ["a", "b"]})


def test_yaml_syntax_error_is_one_line(tmp_path):
    cfg = write(tmp_path / "bad.yaml", "nodes: [{type: n, files: n.csv, key: id\n"
                                       "edges: [{type: [n, e, n], files: e.csv}]\n")
    out = prep_fails(None, "chunk", cfg, tmp_path / "g", code=2, cluster=False,
                     names=["bad.yaml", "not valid YAML at line 2, column 6"])
    assert len(out.strip().splitlines()) == 1, out


@pytest.mark.parametrize("flags, names", [
    (["--delimiter", ";"], ["--delimiter", "csv: {delimiter: ...}"]),
    (["--no-header"], ["--header/--no-header", "csv: {header: false}"]),
    (["--src-col", "a"], ["--src-col", "src: on each edge table"]),
    (["--node-data", "feat=x.npy"], ["--node-data", "features:"]),
])
def test_cli_csv_flags_are_refused_with_a_config(tmp_path, flags, names):
    cfg = write(tmp_path / "c.yaml", "edges: [{type: n:e:n, files: e.csv, src: s, dst: d}]\n")
    write(tmp_path / "e.csv", "s,d\na,b\n")
    out = prep_fails(None, "chunk", cfg, tmp_path / "g", *flags, code=2, cluster=False,
                     names=["c.yaml", *names])
    assert len(out.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "g")


def test_delimiter_header_and_names_read_a_headerless_semicolon_file(tmp_path, prep,
                                                                      scheduler):
    write(tmp_path / "n.txt", "u1;0.5;red\nu2;1.5;blue\nu3;2.5;red\n")
    write(tmp_path / "e.txt", "u1;u2\nu2;u3\n")
    write(tmp_path / "c.yaml", """
nodes:
  - {type: user, files: n.txt, key: 0, features: {x: 1}, categorical: {colour: 2},
     csv: {delimiter: ";", header: false}}
edges:
  - {type: [user, knows, user], files: e.txt, src: a, dst: b,
     csv: {delimiter: ";", header: false, names: [a, b]}}
""")
    prep("chunk", tmp_path / "c.yaml", tmp_path / "g")
    g = load_chunked_graph(str(tmp_path / "g"))
    assert keys(g, "user") == ["u1", "u2", "u3"]
    np.testing.assert_allclose(field(g, "user", "x")[:, 0], [0.5, 1.5, 2.5])
    assert edge_keys(g, EdgeType("user", "knows", "user")) == [("u1", "u2"), ("u2", "u3")]
    # a header that another delimiter splits: the message says which
    write(tmp_path / "semi.csv", "id;x\nu1;1\n")
    write(tmp_path / "d.yaml", "nodes: [{type: user, files: semi.csv, key: id}]\n"
                               "edges: [{type: user:k:user, files: e.txt, src: 0, dst: 1, "
                               "csv: {header: false, delimiter: ';'}}]\n")
    prep_fails(scheduler, "chunk", tmp_path / "d.yaml", tmp_path / "h", code=2,
               names=["semi.csv", "'id' not found", "is the delimiter ';'?"])


# ----------------------------------------------------------------------------- the docs

def doc_configs() -> dict[str, str]:
    """The YAML blocks of docs/tables.md by the file name on their first line."""
    text = open(os.path.join(DOCS, "tables.md")).read()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return {b.splitlines()[0].lstrip("# ").strip(): b for b in blocks}


def test_docs_citation_graph_runs_as_written(tmp_path, prep):
    """Headerless TSV files of IDs (authors' strings, papers' integers), the config copied
    from docs/tables.md: every edge comes back by key, and papers' labels by key."""
    cfg = doc_configs()["citations.yaml"]
    write(tmp_path / "citations.yaml", cfg)
    writes = [("a1", 10), ("a2", 10), ("a2", 11), ("a3", 12), ("a3", 14)]
    cites = [(10, 11), (11, 12), (12, 10), (13, 10), (14, 99)]      # 99: only cited
    venue = [(10, "VLDB"), (11, "KDD"), (12, "KDD"), (13, "VLDB"), (14, "KDD")]
    labels = {10: "db", 11: "ml", 12: "ml", 13: "db", 14: "ml"}
    for name, rows in (("author_paper.tsv", writes), ("paper_paper.tsv", cites),
                       ("paper_venue.tsv", venue), ("paper_label.tsv", labels.items())):
        write(tmp_path / name, "".join(f"{a}\t{b}\n" for a, b in rows))
    prep("chunk", tmp_path / "citations.yaml", tmp_path / "g")
    prep("validate", tmp_path / "g", cluster=False)
    g = load_chunked_graph(str(tmp_path / "g"))
    for et, rows in ((EdgeType("author", "writes", "paper"), writes),
                     (EdgeType("paper", "cites", "paper"), cites),
                     (EdgeType("paper", "published_in", "venue"), venue)):
        assert edge_keys(g, et) == sorted(rows)
        if et.src != et.dst:                            # reverse: true
            assert edge_keys(g, EdgeType(et.dst, f"rev-{et.rel}", et.src)) == sorted(
                (b, a) for a, b in rows)
    vocab = pq.read_table(g.path(g.vocab["paper"]["label"]))["value"].to_pylist()
    got = dict(zip(keys(g, "paper"), field(g, "paper", "label")))
    assert {k: vocab[c] for k, c in got.items() if c >= 0} == labels and got[99] == -1
    partition_dispatch_verify(prep, tmp_path, "citations.yaml")


def test_docs_page_graph_runs_as_written(tmp_path, prep):
    """An edge CSV (id_1,id_2), a label CSV with more columns, and a JSON object of page ->
    active feature columns, the config copied from docs/tables.md: every edge (both ways)
    and every page's label and active columns come back by key."""
    import json
    write(tmp_path / "pages.yaml", doc_configs()["pages.yaml"])
    rng = np.random.default_rng(0)
    pages = list(range(40))
    links = sorted({(int(a), int(b)) for a, b in rng.integers(0, 40, (90, 2)) if a != b})
    kinds = ["tvshow", "government", "company", "politician"]
    active = {p: sorted(set(rng.integers(0, 50, rng.integers(0, 6)).tolist())) for p in pages}
    active[7] = [49]                                    # the widest index, once
    write(tmp_path / "musae_edges.csv",
          "id_1,id_2\n" + "".join(f"{a},{b}\n" for a, b in links))
    write(tmp_path / "musae_target.csv", "id,facebook_id,page_name,page_type\n" + "".join(
        f'{p},{10**14 + p},"Page {p}, Inc.",{kinds[p % 4]}\n' for p in pages))
    order = list(reversed(pages))                       # any order: joined by key
    write(tmp_path / "musae_features.json", json.dumps({str(p): active[p] for p in order}))
    prep("chunk", tmp_path / "pages.yaml", tmp_path / "g")
    prep("validate", tmp_path / "g", cluster=False)
    g = load_chunked_graph(str(tmp_path / "g"))
    links_both = sorted(set(links) | {(b, a) for a, b in links})
    et = EdgeType("page", "links", "page")
    assert sorted(set(edge_keys(g, et))) == links_both
    ids = keys(g, "page")
    assert sorted(ids) == pages
    vocab = pq.read_table(g.path(g.vocab["page"]["label"]))["value"].to_pylist()
    assert [vocab[c] for c in field(g, "page", "label")] == [kinds[p % 4] for p in ids]
    feat = field(g, "page", "feat")
    assert feat.shape == (40, 50) and g.node_data["page"]["feat"].format == "csr"
    assert [np.flatnonzero(row).tolist() for row in feat] == [active[p] for p in ids]
    partition_dispatch_verify(prep, tmp_path, "pages.yaml")


def partition_dispatch_verify(prep, tmp_path, config):
    """The rest of a new user's path: two parts, dispatched, verified against the tables."""
    prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "g", tmp_path / "a", tmp_path / "d")
    prep("verify", tmp_path / "g", tmp_path / "d", "--tables", tmp_path / config)
