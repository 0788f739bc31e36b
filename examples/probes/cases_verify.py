"""Misuse of undirected edge tables (``reverse: true``, ``reverse_type``) and of ``prep verify
--tables`` on graphs chunked with reversed edges, ``--dangling drop`` or ``--dedupe``, and on
tables changed after chunking. Each failure must name the file, the field and the key (or
edge) in its last line; a verification that passes must say how much it matched.

The graphs the verify cases check are chunked, partitioned and dispatched once per kind, in a
folder shared by the cases (removed at exit)."""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kit import Case, command, write

USERS = [f"u{i:02d}" for i in range(30)]
FOLLOWS = [(USERS[(i * 7) % 30], USERS[(i * 11 + 3) % 30]) for i in range(120)]
PAPERS = [f"p{i:02d}" for i in range(20)]
AUTHORS = [f"a{i:02d}" for i in range(15)]
WRITES = [(AUTHORS[(i * 4) % 15], PAPERS[(i * 3 + 1) % 20]) for i in range(60)]
JOINED = USERS[::-4]             # the users a second, joined table gives a score
CITES = [(PAPERS[(i * 3) % 20], PAPERS[(i * 7 + 2) % 20]) for i in range(50)]


def csv(folder: Path, name: str, header: str, rows) -> Path:
    return write(folder / name, header + "\n" + "".join(",".join(map(str, r)) + "\n"
                                                        for r in rows))


def homo(folder: Path, follows=FOLLOWS, users=USERS, **edge) -> Path:
    """users.csv, follows.csv and g.yaml (``edge``: more keys of the edge table)."""
    csv(folder, "users.csv", "id,age", [(u, 20 + i % 50) for i, u in enumerate(users)])
    csv(folder, "follows.csv", "a,b", follows)
    config = {"nodes": [{"type": "user", "files": "users.csv", "key": "id",
                         "features": {"feat": "age"}}],
              "edges": [{"type": "user:follows:user", "files": "follows.csv", "src": "a",
                         "dst": "b", **edge}]}
    return write(folder / "g.yaml", json.dumps(config))


def hetero(folder: Path, writes=WRITES, papers=PAPERS, authors=AUTHORS, edges=None) -> Path:
    """papers.csv, authors.parquet, writes.csv, cites.csv and g.yaml (``edges``: the edge
    tables, default one per file)."""
    folder.mkdir(parents=True, exist_ok=True)
    csv(folder, "papers.csv", "id,year", [(p, 1990 + i) for i, p in enumerate(papers)])
    pq.write_table(pa.table({"id": authors, "h": list(range(len(authors)))}),
                   folder / "authors.parquet")
    csv(folder, "writes.csv", "author,paper", writes)
    csv(folder, "cites.csv", "src,dst", CITES)
    config = {"nodes": [{"type": "paper", "files": "papers.csv", "key": "id",
                         "features": {"feat": "year"}},
                        {"type": "author", "files": "authors.parquet", "key": "id"}],
              "edges": edges or [
                  {"type": ["author", "writes", "paper"], "files": "writes.csv",
                   "src": "author", "dst": "paper"},
                  {"type": "paper:cites:paper", "files": "cites.csv", "src": "src",
                   "dst": "dst"}]}
    return write(folder / "g.yaml", json.dumps(config))


WRITES_TABLE = {"type": "author:writes:paper", "files": "writes.csv", "src": "author",
                "dst": "paper"}
CITES_TABLE = {"type": "paper:cites:paper", "files": "cites.csv", "src": "src", "dst": "dst"}


def chunk_case(make):
    """A case chunking the config ``make(folder)`` writes."""
    def setup(folder: Path):
        make(folder)
        return ["prep", "chunk", "g.yaml", "out"]
    return setup


# ------------------------------------------------------------------ graphs, made once

_BUILT: dict[str, Path] = {}
_ROOT: list[Path] = []


def _prep(*args, cwd: Path) -> None:
    proc = subprocess.run(command(["prep", *map(str, args)]), cwd=cwd, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise RuntimeError(f"prep {' '.join(map(str, args))}: {proc.stdout}{proc.stderr}")


def built(kind: str) -> Path:
    """A folder with the tables (``t/``) of ``kind`` and the graph made of them: chunked
    ``g``, dispatched ``d``."""
    if kind in _BUILT:
        return _BUILT[kind]
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="probe-verify-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    root = _ROOT[0] / kind
    (root / "t").mkdir(parents=True)
    args: list = []
    if kind == "undirected":
        homo(root / "t", reverse=True)
    elif kind == "add-reverse":
        homo(root / "t")
        args = ["--add-reverse-edges"]
    elif kind == "drop":
        hetero(root / "t", writes=WRITES[:10] + [("a01", "p_gone")] + WRITES[10:])
        args = ["--dangling", "drop"]
    elif kind == "joined":
        homo(root / "t", reverse=True)
        pq.write_table(pa.table({"uid": JOINED, "score": [float(i + 1) for i in
                                                          range(len(JOINED))]}),
                       root / "t" / "extra.parquet")
        config = json.loads((root / "t" / "g.yaml").read_text())
        config["nodes"].append({"type": "user", "files": "extra.parquet", "key": "uid",
                                "features": {"score": "score"}})
        write(root / "t" / "g.yaml", json.dumps(config))
    elif kind == "dedupe":
        homo(root / "t", follows=FOLLOWS + FOLLOWS[:5])
        args = ["--dedupe"]
    else:
        hetero(root / "t")
    _prep("chunk", "t/g.yaml", "g", "--chunk-size", 32, *args, cwd=root)
    _prep("partition", "g", "a", "-p", "2", cwd=root)
    _prep("dispatch", "g", "a", "d", cwd=root)
    _BUILT[kind] = root
    return root


def verify_case(kind: str, change=None, config: str = "g.yaml"):
    """A case verifying graph ``kind`` against a copy of its tables that ``change(folder)``
    alters (in the case's folder)."""
    def setup(folder: Path):
        root = built(kind)
        shutil.copytree(root / "t", folder, dirs_exist_ok=True)
        if change is not None:
            change(folder)
        return ["prep", "verify", root / "g", root / "d", "--tables", config]
    return setup


def _matched(folder: Path, output: str) -> None:
    assert "match the chunked graph by key" in output, output[-500:]


def _drop_last_csv_row(name: str):
    def change(folder: Path):
        lines = (folder / name).read_text().splitlines(keepends=True)
        (folder / name).write_text("".join(lines[:-1]))
    return change


def _drop_last_authors_row(folder: Path):
    table = pq.read_table(folder / "authors.parquet")
    pq.write_table(table.slice(0, len(table) - 1), folder / "authors.parquet")


def _append(name: str, line: str):
    def change(folder: Path):
        with open(folder / name, "a") as f:
            f.write(line + "\n")
    return change


def _change_follows_row(folder: Path):
    rows = list(FOLLOWS)
    rows[40] = (rows[40][0], "u29" if rows[40][1] != "u29" else "u28")
    csv(folder, "follows.csv", "a,b", rows)


def _config(**kwargs):
    def change(folder: Path):
        hetero_cfg = json.loads((folder / "g.yaml").read_text())
        hetero_cfg.update(kwargs)
        write(folder / "other.yaml", json.dumps(hetero_cfg))
    return change


def _drop_last_joined_row(folder: Path):
    table = pq.read_table(folder / "extra.parquet")
    pq.write_table(table.slice(0, len(table) - 1), folder / "extra.parquet")


def _bad_record(folder: Path) -> list[str]:
    root = built("undirected")
    shutil.copytree(root / "g", folder / "g")
    meta = json.loads((folder / "g" / "metadata.json").read_text())
    meta["chunked"]["dangling"] = "sometimes"
    write(folder / "g" / "metadata.json", json.dumps(meta))
    return ["prep", "validate", "g"]


CASES = [
    # --- a config's reverse: true / reverse_type, mistyped
    Case("reverse-as-a-string", chunk_case(lambda f: homo(f, reverse="yes")),
         names=("g.yaml", "edges[0].reverse", "true or false")),
    Case("reverse-type-without-reverse", chunk_case(lambda f: homo(f, reverse_type="back")),
         names=("g.yaml", "edges[0].reverse_type", "needs reverse: true")),
    Case("reverse-type-pointing-the-same-way", chunk_case(lambda f: hetero(f, edges=[
        {**WRITES_TABLE, "reverse": True, "reverse_type": ["author", "written_by", "paper"]},
        CITES_TABLE])), names=("g.yaml", "edges[0].reverse_type", "paper:<rel>:author")),
    Case("reverse-type-that-is-another-table", chunk_case(lambda f: hetero(f, edges=[
        {**WRITES_TABLE, "reverse": True, "reverse_type": "written_by"},
        {**WRITES_TABLE, "type": "paper:written_by:author", "src": "paper",
         "dst": "author"}])), names=("g.yaml", "edges[0].reverse_type", "edges[1]")),
    Case("two-tables-one-reverse-type", chunk_case(lambda f: hetero(f, edges=[
        {**CITES_TABLE, "reverse": True, "reverse_type": "cited_by"},
        {**CITES_TABLE, "type": "paper:refs:paper", "reverse": True,
         "reverse_type": "cited_by"}])),
         names=("g.yaml", "edges[1].reverse_type", "edges[0].reverse_type")),
    Case("undirected-table-listed-twice-swapped", chunk_case(lambda f: homo(f) and write(
        f / "g.yaml", json.dumps({**json.loads((f / "g.yaml").read_text()), "edges": [
            {"type": "user:follows:user", "files": "follows.csv", "src": "a", "dst": "b"},
            {"type": "user:follows:user", "files": "follows.csv", "src": "b",
             "dst": "a"}]}))), names=("g.yaml", "edges[1].type", "reverse: true")),
    Case("reverse-type-half-written", chunk_case(lambda f: hetero(f, edges=[
        {**WRITES_TABLE, "reverse": True, "reverse_type": "paper:written_by"}, CITES_TABLE])),
         names=("g.yaml", "edges[0].reverse_type", "paper:written_by")),
    Case("reverse-type-a-pair", chunk_case(lambda f: hetero(f, edges=[
        {**WRITES_TABLE, "reverse": True, "reverse_type": ["paper", "author"]}, CITES_TABLE])),
         names=("g.yaml", "edges[0].reverse_type", "relation name")),
    Case("add-reverse-edges-onto-a-table", lambda f: (hetero(f, edges=[
        WRITES_TABLE, {**WRITES_TABLE, "type": "paper:rev-writes:author", "src": "paper",
                       "dst": "author"}]), ["prep", "chunk", "g.yaml", "out",
                                            "--add-reverse-edges"])[1],
         names=("--add-reverse-edges", "paper:rev-writes:author")),
    # --- verify --tables: graphs chunked with reversed edges, drop, dedupe
    Case("undirected-graph-verifies", verify_case("undirected"), code=0, check=_matched),
    Case("add-reverse-edges-graph-verifies", verify_case("add-reverse"), code=0,
         check=_matched),
    Case("dangling-drop-graph-verifies", verify_case("drop"), code=0, check=_matched),
    Case("undirected-last-edge-row-deleted", verify_case(
        "undirected", _drop_last_csv_row("follows.csv")), code=1,
         names=("follows.csv", f"'{FOLLOWS[-1][0]}' -> '{FOLLOWS[-1][1]}'")),
    Case("undirected-edge-row-changed", verify_case("undirected", _change_follows_row),
         code=1, names=("follows.csv", "row 40", f"'{FOLLOWS[40][0]}'")),
    Case("undirected-edge-row-appended", verify_case(
        "undirected", _append("follows.csv", "u01,u02")), code=1,
         names=("follows.csv", "'u01' -> 'u02'")),
    Case("dangling-row-added-after-drop", verify_case(
        "drop", _append("writes.csv", "a02,p_new")), code=1,
         names=("writes.csv", "dropped 1", "'p_gone'")),
    Case("deduplicated-graph", verify_case("dedupe"),
         names=("metadata.json", "chunked.dedupe")),
    Case("config-says-undirected-graph-is-not", verify_case("plain", _config(edges=[
        WRITES_TABLE, {**CITES_TABLE, "reverse": True}]), "other.yaml"), code=1,
         names=("other.yaml", "no reversed edges", "paper:cites:paper")),
    Case("config-lacks-an-edge-table", verify_case("plain", _config(edges=[WRITES_TABLE]),
                                                   "other.yaml"), code=1,
         names=("other.yaml", "no table of the config fills", "paper:cites:paper")),
    # --- verify --tables: node tables changed after chunking
    Case("last-csv-node-row-deleted", verify_case("plain", _drop_last_csv_row("papers.csv")),
         code=1, names=("papers.csv", f"key '{PAPERS[-1]}'")),
    Case("last-parquet-node-row-deleted", verify_case("plain", _drop_last_authors_row),
         code=1, names=("authors.parquet", f"key '{AUTHORS[-1]}'")),
    Case("node-row-appended", verify_case("plain", _append("papers.csv", "p_new,2024")),
         code=1, names=("papers.csv", "key 'p_new'")),
    Case("node-row-appended-after-drop", verify_case("drop", _append("papers.csv", "p_gone,1")),
         code=1, names=("papers.csv", "key 'p_gone'")),
    Case("joined-table-verifies", verify_case("joined"), code=0, check=_matched),
    Case("joined-table-last-row-deleted", verify_case("joined", _drop_last_joined_row),
         code=1, names=("extra.parquet", "field 'score'", f"key '{JOINED[-1]}'")),
    Case("joined-table-row-for-an-unknown-key", verify_case(
        "joined", lambda f: pq.write_table(pa.concat_tables([pq.read_table(
            f / "extra.parquet"), pa.table({"uid": ["u99"], "score": [1.0]})]),
            f / "extra.parquet")), code=1, names=("extra.parquet", "key 'u99'")),
    # --- the record itself, hand-edited
    Case("hand-edited-record", _bad_record, names=("metadata.json", "chunked.dangling")),
]
