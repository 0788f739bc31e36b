"""``prep verify --tables`` on graphs chunked with reversed edges (``reverse: true``,
``--add-reverse-edges``), ``--dangling drop``, and tables changed after chunking: the graph
records how it was made, and the check compares node rows and keys both ways and the edge
multisets, naming the file and the key that differ (issue 48)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from graphprep.formats import EdgeType, load_chunked_graph
from graphprep.formats.arrays import read_edge_chunk
from graphprep.formats.output import write_edge_chunk

from faultkit import prep_fails

USERS = [f"u{i:03d}" for i in range(60)]
PAPERS = [f"p{i:02d}" for i in range(40)]
AUTHORS = [f"a{i:02d}" for i in range(30)]
FOLLOWS = EdgeType("user", "follows", "user")
WRITES = EdgeType("author", "writes", "paper")
CITES = EdgeType("paper", "cites", "paper")


def _tables(folder):
    """Small tables: users (CSV) and their follows (Parquet, with self loops and a weight);
    papers (CSV), authors (Parquet), writes (CSV) and cites (CSV, with self loops)."""
    rng = np.random.default_rng(4)
    folder.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(pa.table({"id": USERS, "age": rng.integers(10, 80, 60)}),
                    folder / "users.csv")
    s, d = rng.integers(0, 60, 300), rng.integers(0, 60, 300)
    d[:10] = s[:10]
    pq.write_table(pa.table({"a": [USERS[i] for i in s], "b": [USERS[i] for i in d],
                             "w": rng.random(300)}), folder / "follows.parquet")
    pacsv.write_csv(pa.table({"id": PAPERS, "year": rng.integers(1990, 2020, 40)}),
                    folder / "papers.csv")
    pq.write_table(pa.table({"id": AUTHORS, "h": rng.integers(0, 50, 30)}),
                   folder / "authors.parquet")
    a, p = rng.integers(0, 30, 120), rng.integers(0, 40, 120)
    pacsv.write_csv(pa.table({"author": [AUTHORS[i] for i in a],
                              "paper": [PAPERS[i] for i in p]}), folder / "writes.csv")
    s, d = rng.integers(0, 40, 200), rng.integers(0, 40, 200)
    d[:5] = s[:5]
    pacsv.write_csv(pa.table({"src": [PAPERS[i] for i in s], "dst": [PAPERS[i] for i in d]}),
                    folder / "cites.csv")


def homo_config(**edge) -> dict:
    return {"nodes": [{"type": "user", "files": "users.csv", "key": "id",
                       "features": {"feat": "age"}}],
            "edges": [{"type": "user:follows:user", "files": "follows.parquet", "src": "a",
                       "dst": "b", "features": {"w": "w"}, **edge}]}


def hetero_config(writes=None, cites=None) -> dict:
    return {"nodes": [{"type": "paper", "files": "papers.csv", "key": "id",
                       "features": {"feat": "year"}},
                      {"type": "author", "files": "authors.parquet", "key": "id",
                       "features": {"feat": "h"}}],
            "edges": [{"type": "author:writes:paper", "files": "writes.csv", "src": "author",
                       "dst": "paper", **(writes or {})},
                      {"type": ["paper", "cites", "paper"], "files": "cites.csv", "src": "src",
                       "dst": "dst", **(cites or {})}]}


def made(prep, root, name: str, config: dict, *chunk_args):
    """Tables under ``root/name``, chunked with ``config`` and dispatched in 2 parts:
    ``(tables folder, config path, chunked, dispatched)``."""
    folder = root / name
    _tables(folder)
    cfg = folder / "g.yaml"
    cfg.write_text(yaml.safe_dump(config))
    prep("chunk", cfg, root / f"{name}-g", "--chunk-size", 64, *chunk_args)
    prep("partition", root / f"{name}-g", root / f"{name}-a", "-p", 2)
    prep("dispatch", root / f"{name}-g", root / f"{name}-a", root / f"{name}-d")
    return folder, cfg, root / f"{name}-g", root / f"{name}-d"


def changed(folder, tmp_path):
    """A copy of the tables and config to change."""
    copy = tmp_path / "changed"
    shutil.copytree(folder, copy)
    return copy


def all_edges(chunked, et):
    g = load_chunked_graph(str(chunked))
    pairs = [read_edge_chunk(g.path(f), g.edges[et]) for f in g.edges[et].files]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def pairs_of(src, dst) -> list:
    return sorted(zip(src.tolist(), dst.tolist()))


def test_undirected_table_chunks_and_verifies(scheduler, prep, tmp_path):
    """``reverse: true`` on a homogeneous table: every row both ways in the same type, a self
    loop once; verify --tables passes, and a changed graph edge is named by its keys."""
    folder, cfg, g, d = made(prep, tmp_path, "homo", homo_config(reverse=True))
    follows = pq.read_table(folder / "follows.parquet")
    graph = load_chunked_graph(str(g))
    s, t = all_edges(g, FOLLOWS)
    ids = {k: i for i, k in enumerate(USERS)}
    a = np.array([ids[k] for k in follows.column("a").to_pylist()])
    b = np.array([ids[k] for k in follows.column("b").to_pylist()])
    loop = a == b
    assert pairs_of(s, t) == pairs_of(np.concatenate([a, b[~loop]]),
                                      np.concatenate([b, a[~loop]]))
    assert graph.made.reverse == {FOLLOWS: FOLLOWS}
    out = prep("verify", g, d, "--tables", cfg).output
    assert f"{len(a) + (~loop).sum():,} edges match the chunked graph by key" in out
    # the graph's last reversed edge changed: named by the keys of the table's row
    bad = tmp_path / "bad-g"
    shutil.copytree(g, bad)
    last = graph.edges[FOLLOWS].files[-1]
    cs, cd = read_edge_chunk(str(bad / last), graph.edges[FOLLOWS])
    cd = np.array(cd)
    cd[-1] = (cd[-1] + 1) % 60
    write_edge_chunk(str(bad / last), np.asarray(cs), cd)
    i = np.flatnonzero(~loop)[-1]
    out = prep_fails(scheduler, "verify", bad, d, "--tables", cfg, code=1)
    assert f"'{USERS[b[i]]}' -> '{USERS[a[i]]}'" in out and "reversed" in out


def test_hetero_reverse_types_chunk_and_verify(scheduler, prep, tmp_path):
    """A heterogeneous config naming its reverse types (a relation name, a [src, rel, dst]
    list): the graph has them, verify --tables passes; a changed table row is named."""
    config = hetero_config({"reverse": True, "reverse_type": "written_by"},
                           {"reverse": True, "reverse_type": ["paper", "cited_by", "paper"]})
    folder, cfg, g, d = made(prep, tmp_path, "hetero", config)
    graph = load_chunked_graph(str(g))
    rev = EdgeType("paper", "written_by", "author")
    assert set(graph.edge_types) == {WRITES, CITES, rev, EdgeType("paper", "cited_by", "paper")}
    ws, wd = all_edges(g, WRITES)
    rs, rd = all_edges(g, rev)
    assert pairs_of(rs, rd) == pairs_of(wd, ws)
    prep("verify", g, d, "--tables", cfg)
    copy = changed(folder, tmp_path)
    writes = pacsv.read_csv(copy / "writes.csv")
    papers = writes.column("paper").to_pylist()
    papers[50] = PAPERS[(PAPERS.index(papers[50]) + 1) % 40]
    pacsv.write_csv(writes.set_column(1, "paper", pa.array(papers)), copy / "writes.csv")
    out = prep_fails(scheduler, "verify", g, d, "--tables", copy / "g.yaml", code=1)
    assert "writes.csv" in out and f"-> '{papers[50]}'" in out


@pytest.mark.parametrize("config", ["homo", "hetero"])
def test_add_reverse_edges_graph_verifies(prep, tmp_path, config):
    """A config without ``reverse`` chunked with --add-reverse-edges: verify --tables reads
    the record and passes (it counted the tables' edges once and failed)."""
    raw = homo_config() if config == "homo" else hetero_config()
    folder, cfg, g, d = made(prep, tmp_path, config, raw, "--add-reverse-edges")
    out = prep("verify", g, d, "--tables", cfg).output
    graph = load_chunked_graph(str(g))
    assert f"{sum(graph.num_edges.values()):,} edges match the chunked graph by key" in out


def test_dangling_drop_graph_verifies(scheduler, prep, tmp_path):
    """Edge rows naming keys no node table has, chunked with --dangling drop: verify --tables
    passes; a dangling row added to the table afterwards is named by file and key."""
    folder = tmp_path / "drop"
    _tables(folder)
    writes = pacsv.read_csv(folder / "writes.csv")
    papers = writes.column("paper").to_pylist()
    papers[3], papers[70] = "p_gone", "p_lost"
    pacsv.write_csv(writes.set_column(1, "paper", pa.array(papers)), folder / "writes.csv")
    cfg = folder / "g.yaml"
    cfg.write_text(yaml.safe_dump(hetero_config()))
    prep("chunk", cfg, tmp_path / "g", "--chunk-size", 64, "--dangling", "drop")
    prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "g", tmp_path / "a", tmp_path / "d")
    assert load_chunked_graph(str(tmp_path / "g")).made.dropped_edges == {WRITES: 2}
    prep("verify", tmp_path / "g", tmp_path / "d", "--tables", cfg)
    copy = changed(folder, tmp_path)
    more = pa.table({"author": ["a01"], "paper": ["p_new"]})
    pacsv.write_csv(pa.concat_tables([pacsv.read_csv(copy / "writes.csv"), more]),
                    copy / "writes.csv")
    prep_fails(scheduler, "verify", tmp_path / "g", tmp_path / "d", "--tables",
               copy / "g.yaml", code=1, names=("3 rows", "dropped 2", "writes.csv"))


@pytest.fixture(scope="module")
def plain(scheduler, tmp_path_factory):
    """The heterogeneous tables chunked plainly and dispatched."""
    from conftest import run_prep
    root = tmp_path_factory.mktemp("plain")
    _tables(root / "t")
    cfg = root / "t" / "g.yaml"
    cfg.write_text(yaml.safe_dump(hetero_config()))
    run_prep(scheduler, "chunk", cfg, root / "g", "--chunk-size", 64)
    run_prep(scheduler, "partition", root / "g", root / "a", "-p", 2)
    run_prep(scheduler, "dispatch", root / "g", root / "a", root / "d")
    return root


@pytest.mark.parametrize("table, key", [("papers.csv", PAPERS[-1]),
                                        ("authors.parquet", AUTHORS[-1])])
def test_deleted_last_node_row_is_named(scheduler, plain, tmp_path, table, key):
    """The last row of a node table (CSV, Parquet) removed after chunking: the graph's node no
    row holds is named by its key and the table's file (it matched 'by key' and exited 0)."""
    copy = changed(plain / "t", tmp_path)
    path = copy / table
    if table.endswith(".csv"):
        pacsv.write_csv(pacsv.read_csv(path).slice(0, 39), path)
    else:
        pq.write_table(pq.read_table(path).slice(0, 29), path)
    prep_fails(scheduler, "verify", plain / "g", plain / "d", "--tables", copy / "g.yaml",
               code=1, names=(table, f"key '{key}'"))


def test_first_and_added_node_rows_are_named(scheduler, plain, tmp_path):
    """A node row removed at the start, or one added with a key the graph lacks: named."""
    copy = changed(plain / "t", tmp_path)
    papers = pacsv.read_csv(plain / "t" / "papers.csv")
    pacsv.write_csv(papers.slice(1), copy / "papers.csv")
    prep_fails(scheduler, "verify", plain / "g", plain / "d", "--tables", copy / "g.yaml",
               code=1, names=("papers.csv", f"key '{PAPERS[0]}'"))
    extra = pa.table({"id": ["p_new"], "year": [2001]})
    pacsv.write_csv(pa.concat_tables([papers, extra.cast(papers.schema)]),
                    copy / "papers.csv")
    prep_fails(scheduler, "verify", plain / "g", plain / "d", "--tables", copy / "g.yaml",
               code=1, names=("papers.csv", "key 'p_new'"))


def test_config_saying_reverse_against_a_directed_graph_fails(scheduler, plain, tmp_path):
    """The config says undirected, the graph was chunked without reversed edges: named."""
    copy = changed(plain / "t", tmp_path)
    (copy / "g.yaml").write_text(yaml.safe_dump(hetero_config(cites={"reverse": True})))
    prep_fails(scheduler, "verify", plain / "g", plain / "d", "--tables", copy / "g.yaml",
               code=1, names=("g.yaml", "no reversed edges", "paper:cites:paper"))


def test_dangling_add_graph_verifies_and_counts_added_nodes(scheduler, prep, tmp_path):
    """--dangling add: the keys only edges name are nodes after the table's rows; verify
    --tables passes, and still names a table row removed (the added nodes do not hide it) or
    a row given later for an added key."""
    folder = tmp_path / "add"
    _tables(folder)
    writes = pacsv.read_csv(folder / "writes.csv")
    papers = writes.column("paper").to_pylist()
    papers[3] = "p_extra"
    pacsv.write_csv(writes.set_column(1, "paper", pa.array(papers)), folder / "writes.csv")
    cfg = folder / "g.yaml"
    cfg.write_text(yaml.safe_dump(hetero_config()))
    prep("chunk", cfg, tmp_path / "g", "--chunk-size", 64, "--dangling", "add")
    prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "g", tmp_path / "a", tmp_path / "d")
    graph = load_chunked_graph(str(tmp_path / "g"))
    assert graph.made.added_nodes == {"paper": 1} and graph.num_nodes["paper"] == 41
    prep("verify", tmp_path / "g", tmp_path / "d", "--tables", cfg)
    copy = changed(folder, tmp_path)
    table = pacsv.read_csv(folder / "papers.csv")
    pacsv.write_csv(table.slice(0, 39), copy / "papers.csv")
    prep_fails(scheduler, "verify", tmp_path / "g", tmp_path / "d", "--tables",
               copy / "g.yaml", code=1, names=("papers.csv", f"key '{PAPERS[-1]}'"))
    extra = pa.table({"id": ["p_extra"], "year": [2000]}).cast(table.schema)
    pacsv.write_csv(pa.concat_tables([table, extra]), copy / "papers.csv")
    prep_fails(scheduler, "verify", tmp_path / "g", tmp_path / "d", "--tables",
               copy / "g.yaml", code=1, names=("papers.csv", "key 'p_extra'"))


def test_joined_node_table_rows_are_checked_both_ways(scheduler, prep, tmp_path):
    """A node type's second table (fields joined by key): verify --tables compares its rows
    with the graph's by key, and names a graph row whose joined row was removed."""
    folder = tmp_path / "join"
    _tables(folder)
    joined = USERS[::-3]                              # a third of the users, out of order
    pq.write_table(pa.table({"uid": joined, "score": np.arange(1.0, len(joined) + 1)}),
                   folder / "extra.parquet")
    config = homo_config(reverse=True)
    config["nodes"].append({"type": "user", "files": "extra.parquet", "key": "uid",
                            "features": {"score": "score"}})
    cfg = folder / "g.yaml"
    cfg.write_text(yaml.safe_dump(config))
    prep("chunk", cfg, tmp_path / "g", "--chunk-size", 16)
    prep("partition", tmp_path / "g", tmp_path / "a", "-p", 2)
    prep("dispatch", tmp_path / "g", tmp_path / "a", tmp_path / "d")
    prep("verify", tmp_path / "g", tmp_path / "d", "--tables", cfg)
    copy = changed(folder, tmp_path)
    table = pq.read_table(folder / "extra.parquet")
    pq.write_table(table.slice(0, len(joined) - 1), copy / "extra.parquet")
    prep_fails(scheduler, "verify", tmp_path / "g", tmp_path / "d", "--tables",
               copy / "g.yaml", code=1, names=("extra.parquet", f"key '{joined[-1]}'"))
    scores = table.column("score").to_pylist()
    scores[4] += 1
    pq.write_table(table.set_column(1, "score", pa.array(scores)), copy / "extra.parquet")
    prep_fails(scheduler, "verify", tmp_path / "g", tmp_path / "d", "--tables",
               copy / "g.yaml", code=1, names=("extra.parquet", "field 'score'",
                                               f"key '{joined[4]}'"))
