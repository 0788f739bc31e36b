"""``prep verify --tables CONFIG``: the input tables against the chunked graph, by key.

``prep verify`` proves the parts hold exactly the chunked graph; this proves the chunked
graph holds exactly the tables, so that together every table row is checked by its key from
input to parts. One task per table part, as ``prep chunk`` cut them:

- a **node table** part: its keys looked up in the saved map must be consecutive IDs (rows keep
  their order as IDs), and every field encoded again from the row (features, categorical codes
  by the saved vocabulary, labels, sparse rows, split masks) must equal the chunked graph's
  row of that ID. A difference names the file, the key and the field. Then, both ways: the
  parts' IDs together are ``0..rows-1`` each once, and ``rows`` is the type's node count less
  the keys ``--dangling add`` added; a graph node no row holds is named by its key. A
  type's later tables (fields joined by key): each row against the graph's row of its key,
  and per field the graph's rows less fills summed against the joined rows (a joined row
  removed is named by its key).
- an **edge table** part: its endpoint keys looked up (rows whose key is missing are dropped
  under ``--dangling drop`` and counted against the graph's record, an error otherwise), its
  fields encoded again, and the multiset of (source ID, destination ID, field rows)
  fingerprinted (a count and a wrapping hash sum, as :mod:`graphprep.dispatch.fingerprint`), with the
  same of its reversed edges where the graph has them (every row but self loops); the sum over
  the parts filling a graph edge type must equal the same fingerprint of the chunked graph's
  edges (one task per edge chunk). Where they differ, each part's rows are compared in order
  with the graph's edges at their position (``prep chunk`` keeps a table's rows in order, its
  reversed edges after them in the same order) to name the first differing edge by its keys.

How the graph was chunked (reverse edges, ``--dangling``, ``--drop-self-loops``) is read from
its record, ``chunked`` in metadata.json (formats/FORMATS.md).

A task holds one table part (its columns and encoded rows) and the map buckets its keys fall
in; the chunked graph's side one edge chunk with its data rows.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace

import numpy as np
import pyarrow.parquet as pq

from graphprep.formats import METADATA, ChunkedGraph, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.storage import is_url, join
from graphprep.formats.arrays import read_edge_chunk
from graphprep.formats.sparse import CsrRows, is_csr
from graphprep.pipeline.core.arrayops import mix
from graphprep.formats.fields import data_fields
from graphprep.pipeline.convert.tables_in import read_parts
from graphprep.pipeline.keys.hashing import normalize_keys
from graphprep.pipeline.keys.lookup import ids_of, keys_of
from graphprep.pipeline.split_edges import SplitSpec as EdgeSplit
from graphprep.pipeline.tables.columns import EncodeTask, edge_split_masks, encode_fields
from graphprep.pipeline.tables.config import Fields, TablesConfig, load_config
from graphprep.pipeline.tables.parts import input_files, is_json, read_part
from graphprep.dispatch.fingerprint import row_hash


@dataclass(frozen=True)
class NodeRowsTask:
    graph: ChunkedGraph
    fields: dict                # the type's node data, {name: DataField} (opened once)
    ntype: str
    key: str
    encode: EncodeTask          # first_id is found by the task
    joined: str = ""            # a joined table (not the type's first): the dangling mode


@dataclass(frozen=True)
class EdgeRowsTask:
    graph: ChunkedGraph
    fields: dict                # the type's edge data, {name: DataField}
    etype: EdgeType
    src: str
    dst: str
    dangling: str
    part: object                # the TablePart
    encode: EncodeTask | None   # None: the table has no fields
    reverse: EdgeType | None = None      # the type holding the rows reversed (as recorded)
    drop_self_loops: bool = False        # prep chunk --drop-self-loops


def _vocabularies(graph: ChunkedGraph, owner: str, fields: Fields) -> tuple[tuple, ...]:
    """Per field, the saved vocabulary (() for fields without one), as ``prep chunk`` used."""
    saved = graph.vocab.get(owner, {})
    return tuple(tuple(pq.read_table(graph.path(saved[f.name])).column("value").to_pylist())
                 if f.name in saved else () for f in fields.fields)


def _encoder(graph: ChunkedGraph, owner: str, part, fields: Fields, split=None,
             edge_split=None) -> EncodeTask:
    return EncodeTask(part, fields.fields, _vocabularies(graph, owner, fields), split, 0, 0,
                      "", "", edge_split)


def _as_chunked(graph: ChunkedGraph, ntype: str, fields: Fields) -> Fields:
    """``fields`` with each sparse field's width as the graph holds it: a config may leave
    ``dim`` out (the chunk step took the largest index + 1)."""
    made = graph.node_data.get(ntype, {})
    return replace(fields, fields=tuple(
        replace(f, dim=made[f.name].dim) if f.kind == "sparse" and not f.dim and f.name in made
        else f for f in fields.fields))


def table_tasks(config: TablesConfig, graph: ChunkedGraph, chunk_size: int, dangling: str,
                fields: tuple[dict, dict], reverse: dict | None = None,
                drop_self_loops: bool = False, staging: str = "", runner=None):
    """``(node tasks, edge tasks)`` for every part of every table of ``config``; ``fields``:
    the graph's ``(node fields, edge fields)`` as :func:`data_fields` opens them;
    ``reverse``: input edge type -> the type holding its reversed edges (as recorded);
    ``staging``/``runner``: where and how JSON array and object tables are parsed into
    Parquet first (see :func:`read_parts`)."""
    reverse = reverse or {}
    nodes, listed = [], set()
    for i, s in enumerate(config.nodes):
        # A type's first table lists its nodes; a later one adds fields, joined by key.
        joined = s.ntype in listed
        listed.add(s.ntype)
        data = _as_chunked(graph, s.ntype, s.data)
        nodes += [NodeRowsTask(graph, fields[0].get(s.ntype, {}), s.ntype, s.key,
                               _encoder(graph, s.ntype, part, Fields(data.fields),
                                        s.data.split), dangling if joined else "")
                  for part in read_parts(s.files, (s.key,), data, s.csv, chunk_size, s.json,
                                         staging, runner, f"n{i}-{s.ntype}")]
    edges = []
    for i, s in enumerate(config.edges):
        split = None
        if s.data.split is not None:
            _, val, test = s.data.split.fractions
            split = EdgeSplit(s.etype, val, test, s.data.split.seed)
        for part in read_parts(s.files, (s.src, s.dst), s.data, s.csv, chunk_size, s.json,
                               staging, runner, f"e{i}-{s.etype.dirname}"):
            encode = _encoder(graph, str(s.etype), part, Fields(s.data.fields),
                              edge_split=split) if s.data.names else None
            edges.append(EdgeRowsTask(graph, fields[1].get(s.etype, {}), s.etype, s.src, s.dst,
                                      dangling, part, encode, reverse.get(s.etype),
                                      drop_self_loops))
    return nodes, edges


def check_node_rows(task: NodeRowsTask) -> tuple[int, int] | str:
    """``(first ID, rows)`` of a node table part whose rows match the chunked graph, else
    the first difference (file, key, field). Holds the part and its rows' graph rows."""
    part = task.encode.part
    table = read_part(part)
    keys = normalize_keys(table.column(task.key), file=part.path, field=task.key)
    ids = ids_of(task.graph, task.ntype, keys)
    if task.joined:
        return _check_joined_rows(task, table, keys, ids)
    n = len(ids)
    if not n:
        return (0, 0)
    first = int(ids[0])
    bad = np.flatnonzero(ids != np.arange(first, first + n))
    if len(bad):
        i = int(bad[0])
        return (f"{_at(part, i)}: node type {task.ntype}: the row's key has ID "
                f"{int(ids[i])} in the graph, expected {first + i} (rows keep their order): "
                f"key {_shown(keys[i])}" if ids[i] >= 0 else
                f"{_at(part, i)}: node type {task.ntype}: the row's key is not in the graph: "
                f"key {_shown(keys[i])}")
    mine = task.fields
    for name, rows in encode_fields(replace(task.encode, first_id=first), table).items():
        if name not in mine:
            return f"{part.path}: field {name!r} of node type {task.ntype} is not in the graph"
        got = mine[name].read(first, first + n)
        differs = np.flatnonzero(row_hash(got) != row_hash(rows))
        if len(differs):
            i = int(differs[0])
            return (f"{_at(part, i)}: node {first + i} of type {task.ntype}: field {name!r} "
                    f"differs from the graph's row: key {_shown(keys[i])}")
    return (first, n)


def _check_joined_rows(task: NodeRowsTask, table, keys, ids) -> dict | str:
    """A joined table's part: each row's fields equal the graph's row of its key's ID (a key
    the graph lacks: dropped under ``--dangling drop``, else named). Reads the graph's rows
    one node chunk at a time. Returns per field the wrapping sum over its rows of (row hash -
    the fill row's hash), which the graph's rows of the type must sum to as well (a graph row
    no joined row gives is a fill)."""
    part, t = task.encode.part, task.ntype
    missing = ids < 0
    if missing.any() and task.joined != "drop":
        i = int(np.flatnonzero(missing)[0])
        return (f"{_at(part, i)}: node type {t}: the joined row's key is not in the graph: "
                f"key {_shown(keys[i])}")
    kept = np.flatnonzero(~missing)
    bounds = np.concatenate([[0], np.cumsum(task.graph.node_chunks[t])])
    chunk = np.searchsorted(bounds, ids[kept], side="right") - 1
    sums = {}
    for name, rows in encode_fields(task.encode, table).items():
        if name not in task.fields:
            return f"{part.path}: node type {t}: the field is not in the graph: {name!r}"
        want = row_hash(rows)[kept]
        got = np.empty(len(kept), np.uint64)
        fill = np.uint64(0)
        for c in np.unique(chunk):
            at = np.flatnonzero(chunk == c)
            block = task.fields[name].read(int(bounds[c]), int(bounds[c + 1]))
            got[at] = row_hash(block)[ids[kept[at]] - bounds[c]]
            fill = _fill_hash(block)
        differs = np.flatnonzero(want != got)
        if len(differs):
            i = int(kept[differs[0]])
            return (f"{_at(part, i)}: node {int(ids[i])} of type {t}: field {name!r} "
                    f"differs from the graph's row: key {_shown(keys[i])}")
        with np.errstate(over="ignore"):
            sums[name] = (got - fill).sum(dtype=np.uint64)
    return sums


def joined_ids(task: NodeRowsTask) -> np.ndarray:
    """The node IDs a joined table's part gives rows to (its keys the graph has)."""
    part = task.encode.part
    keys = normalize_keys(read_part(part).column(task.key), file=part.path, field=task.key)
    ids = ids_of(task.graph, task.ntype, keys)
    return ids[ids >= 0]


def _fill_hash(block) -> np.uint64:
    """The hash of the row ``prep chunk`` puts where no joined row gives one (0; -1 for
    integers; no entry when sparse), shaped like ``block``'s rows."""
    if is_csr(block):
        fill = CsrRows(np.zeros(2, np.int64), np.empty(0, np.int32), np.empty(0, np.float32),
                       block.dim)
    else:
        fill = np.full((1,) + tuple(block.shape[1:]), -1 if block.dtype.kind == "i" else 0,
                       block.dtype)
    return row_hash(fill)[0]


@dataclass(frozen=True)
class FillTask:
    field: object               # the graph's DataField of a joined field
    start: int                  # a node chunk's rows
    stop: int
    covered: np.ndarray | None = None   # to locate: which rows a joined row gives


def print_joined_chunk(task: FillTask):
    """The wrapping sum over a node chunk of (row hash - fill hash); with ``covered``, the
    first row (from ``start``) that is no fill yet no joined row gives, or -1. Holds the
    chunk's rows of the field."""
    block = task.field.read(task.start, task.stop)
    hashes = row_hash(block)
    fill = _fill_hash(block)
    if task.covered is None:
        with np.errstate(over="ignore"):
            return (hashes - fill).sum(dtype=np.uint64)
    stray = np.flatnonzero((hashes != fill) & ~task.covered)
    return int(stray[0]) if len(stray) else -1


def _shown(key) -> str:
    """A key as the user wrote it (keys are compared as bytes; text is shown as text)."""
    value = key.as_py()
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return repr(value)


def _edge_prints(src: np.ndarray, dst: np.ndarray, fields: dict) -> np.ndarray:
    """``[count, hash sum]`` of edges with their data rows (field-name order)."""
    return np.array([len(src), _edge_hashes(src, dst, fields).sum(dtype=np.uint64)], np.uint64)


def _edge_hashes(src: np.ndarray, dst: np.ndarray, fields: dict) -> np.ndarray:
    """One hash per edge of its endpoints and data rows (field-name order)."""
    return mix(src, dst, *(row_hash(fields[k]) for k in sorted(fields)))


@dataclass(frozen=True)
class EdgeRows:
    """An edge table part's kept rows as the graph should hold them."""

    src: np.ndarray
    dst: np.ndarray
    fields: dict                # re-encoded fields and split masks of the kept rows
    keys: dict                  # "src"/"dst" -> the kept rows' keys
    rows: np.ndarray            # the kept rows' positions in the part
    dangling: int               # rows dropped as naming a key not in the graph (drop)

    def flipped(self, etype: EdgeType) -> "EdgeRows":
        """The reversed edges ``prep chunk`` adds for these: every one but the self loops
        (one is its own reverse), in the same order."""
        flip = self.src != self.dst if etype.src == etype.dst else \
            np.ones(len(self.src), bool)
        at = np.flatnonzero(flip)
        return EdgeRows(self.dst[flip], self.src[flip],
                        {k: v[flip] for k, v in self.fields.items()},
                        {"src": self.keys["dst"].take(at), "dst": self.keys["src"].take(at)},
                        self.rows[flip], 0)


def _edge_rows(task: EdgeRowsTask) -> EdgeRows | str:
    """An edge table part's kept rows as the graph should hold them (IDs, re-encoded fields,
    split masks): rows naming a key the graph lacks dropped under ``dangling`` drop (an error
    otherwise), self loops under ``drop_self_loops``; or a message when a row cannot be in
    the graph."""
    et, part = task.etype, task.part
    table = read_part(part)
    keys = {end: normalize_keys(table.column(col), file=part.path, field=col)
            for end, col in (("src", task.src), ("dst", task.dst))}
    graph = task.graph
    src, dst = ids_of(graph, et.src, keys["src"]), ids_of(graph, et.dst, keys["dst"])
    missing = (src < 0) | (dst < 0)
    if missing.any() and task.dangling != "drop":
        i = int(np.flatnonzero(missing)[0])
        end = "src" if src[i] < 0 else "dst"
        return (f"{_at(part, i)}: {end} key of edge type {et} is not in the graph: "
                f"{_shown(keys[end][i])}")
    keep = ~missing
    if task.drop_self_loops and et.src == et.dst:
        keep &= src != dst
    fields = {}
    if task.encode is not None:
        fields = {name: rows[keep] for name, rows in encode_fields(task.encode, table).items()}
        if task.encode.edge_split is not None:
            fields.update(edge_split_masks(task.encode, src[keep], dst[keep]))
    kept = np.flatnonzero(keep)
    return EdgeRows(src[keep], dst[keep], fields, {e: k.take(kept) for e, k in keys.items()},
                    kept, int(missing.sum()))


def _at(part, row: int) -> str:
    """The file, and the row where the part knows its first row."""
    first = part.first_row
    return part.path if first is None else f"{part.path}, row {first + row}"


def print_edge_rows(task: EdgeRowsTask) -> np.ndarray | str:
    """``[count, hash sum]`` of an edge table part's edges as IDs with their fields, the same
    of the reversed edges they give (zeros without ``reverse``), and the rows dropped as
    dangling; or why the part cannot be in the graph. Holds the part."""
    rows = _edge_rows(task)
    if isinstance(rows, str):
        return rows
    back = np.zeros(2, np.uint64)
    if task.reverse is not None:
        flipped = rows.flipped(task.etype)
        back = _edge_prints(flipped.src, flipped.dst, flipped.fields)
    return np.concatenate([_edge_prints(rows.src, rows.dst, rows.fields), back,
                           np.array([rows.dangling], np.uint64)])


def first_dangling_row(task: EdgeRowsTask) -> str | None:
    """The first row of the part naming a key the graph lacks, by file, row and key."""
    et, part = task.etype, task.part
    table = read_part(part)
    for end, col, ntype in (("src", task.src, et.src), ("dst", task.dst, et.dst)):
        keys = normalize_keys(table.column(col), file=part.path, field=col)
        ids = ids_of(task.graph, ntype, keys)
        if (ids < 0).any():
            i = int(np.flatnonzero(ids < 0)[0])
            return f"{_at(part, i)}: {end} key not in the node table: {_shown(keys[i])}"
    return None


@dataclass(frozen=True)
class LocateTask:
    rows: EdgeRowsTask
    gtype: EdgeType             # the graph type holding these rows
    fields: dict                # its edge data, {name: DataField}
    offset: int                 # where the part's (reversed) rows start in it
    flipped: bool               # the part's reversed rows
    surplus: int = 0            # the tables' edges of the type less the graph's


def locate_edge_rows(task: LocateTask) -> str | None:
    """The first of a part's kept rows that differs from the graph's edge at the same position
    (the graph keeps a table's edges in row order, its reversed edges after them in the same
    order: the part's rows are edges ``[offset, offset + kept)``), named by file and keys;
    None when they all match. A row removed from the table or added to it is told from a
    changed one by comparing with the next position. Holds the part and that edge range."""
    rows = _edge_rows(task.rows)
    if isinstance(rows, str):
        return rows
    if task.flipped:
        rows = rows.flipped(task.rows.etype)
    graph, gtype, offset, n = task.rows.graph, task.gtype, task.offset, len(rows.src)
    total = sum(graph.edge_chunks[gtype])
    stop = min(offset + n + 1, total)
    got_src, got_dst = _graph_edges(graph, gtype, offset, stop)
    got_fields = {name: task.fields[name].read(offset, stop) for name in rows.fields
                  if name in task.fields and stop > offset}
    if set(got_fields) != set(rows.fields) and len(got_src):
        missing = sorted(set(rows.fields) - set(got_fields))
        return f"edge type {gtype}: field {missing[0]!r} is not in the graph"
    want = _edge_hashes(rows.src, rows.dst, rows.fields)
    got = _edge_hashes(got_src, got_dst, got_fields) if len(got_src) else \
        np.empty(0, np.uint64)
    m = min(n, len(got))
    differs = np.flatnonzero(want[:m] != got[:m])
    if not len(differs) and n <= len(got):
        return None
    i = int(differs[0]) if len(differs) else m
    where = _at(task.rows.part, int(rows.rows[i]))
    edge = f"{_shown(rows.keys['src'][i])} -> {_shown(rows.keys['dst'][i])}"
    kind = f"type {gtype}{', reversed' if task.flipped else ''}"
    if i >= len(got):
        return (f"{where}: the edge (edge {offset + i} of {kind}) is not in the graph, which "
                f"has {total:,} edges of the type: {edge}")
    if i + 1 < len(got) and want[i] == got[i + 1] and (i + 1 >= n or want[i + 1] != got[i]):
        shown = _graph_edge_keys(graph, gtype, got_src[i], got_dst[i])
        return (f"{task.rows.part.path}: the graph's edge {offset + i} of type {gtype} is in "
                f"no row of the table (a row removed?): {shown}")
    if i + 1 < n and want[i + 1] == got[i] or task.surplus > 0:
        return f"{where}: the edge (edge {offset + i} of {kind}) is not in the graph (a row " \
               f"added?): {edge}"
    checks = [("source", rows.src[i], got_src[i]), ("destination", rows.dst[i], got_dst[i])]
    checks += [(f"field {name!r}", row_hash(rows.fields[name][i:i + 1])[0],
                row_hash(got_fields[name][i:i + 1])[0]) for name in sorted(rows.fields)]
    what = next((w for w, a, b in checks if a != b), "row")
    shown = _graph_edge_keys(graph, gtype, got_src[i], got_dst[i])
    return (f"{where}: the edge {edge} (edge {offset + i} of {kind}): its {what} differs "
            f"from the graph's ({shown})")


def _graph_edge_keys(graph: ChunkedGraph, et: EdgeType, src: int, dst: int) -> str:
    """A graph edge shown by its endpoints' original keys."""
    a = keys_of(graph, et.src, [int(src)])[0]
    b = keys_of(graph, et.dst, [int(dst)])[0]
    return f"{_shown(a)} -> {_shown(b)}"


def _graph_edges(graph: ChunkedGraph, et: EdgeType, start: int, stop: int):
    """The graph's edges ``[start, stop)`` of ``et`` (IDs), from the chunks they fall in."""
    files, bounds = graph.edges[et], np.concatenate([[0], np.cumsum(graph.edge_chunks[et])])
    src, dst = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for i in range(len(files.files)):
        lo, hi = max(start, bounds[i]), min(stop, bounds[i + 1])
        if lo < hi:
            s, d = read_edge_chunk(graph.path(files.files[i]), files)
            src.append(np.asarray(s[lo - bounds[i]:hi - bounds[i]], np.int64))
            dst.append(np.asarray(d[lo - bounds[i]:hi - bounds[i]], np.int64))
    return np.concatenate(src), np.concatenate(dst)


@dataclass(frozen=True)
class EdgeChunkTask:
    graph: ChunkedGraph
    fields: dict                # the type's edge data, {name: DataField}
    etype: EdgeType
    chunk: int
    start: int
    stop: int


def print_edge_chunk(task: EdgeChunkTask) -> np.ndarray:
    """The same fingerprint of one edge chunk of the chunked graph."""
    files = task.graph.edges[task.etype]
    src, dst = read_edge_chunk(task.graph.path(files.files[task.chunk]), files)
    fields = {name: f.read(task.start, task.stop) for name, f in task.fields.items()}
    return _edge_prints(np.asarray(src, np.int64), np.asarray(dst, np.int64), fields)


def check_tables(config_path: str, chunked: str, run, chunk_size: int = 1 << 20,
                 dangling: str = "error") -> dict:
    """Check the tables of ``config_path`` against the chunked graph ``chunked`` with the task
    runner ``run``; returns ``{"rows": node table rows, "edges": edge table rows kept}`` or
    raises :class:`TablesMismatch` naming the first difference.

    How the graph was chunked comes from its record (``chunked`` in metadata.json): reversed
    edges (each table row must be in the graph in both directions, a self loop once), the
    ``--dangling`` mode (drop: rows naming a key missing from its node table must be absent,
    as many as the graph dropped; add: the added nodes are counted) and
    ``--drop-self-loops``. A graph without the record is checked as chunked plainly, with
    ``dangling`` (or the config's). Node tables: every row's key and fields, and every graph
    node of a table's type must be a row. The client holds a few numbers per part."""
    config = load_config(config_path)
    graph = load_chunked_graph(chunked)
    made = graph.made
    if made is not None and made.dedupe:
        raise FormatError("the graph was chunked with --dedupe: its edges are a set, the "
                          "tables' rows a multiset, and verify --tables cannot match them",
                          file=join(chunked, METADATA), field="chunked.dedupe")
    dangling = (made.dangling if made is not None and made.dangling else
                config.dangling or dangling)
    reverse = dict(made.reverse) if made is not None else {}
    _check_types(config, graph, reverse)
    fields = data_fields(graph)       # every chunk's header read once, here
    with _json_staging(config, chunked) as staging:
        return _check_tables(config, graph, run, chunk_size, dangling, made, reverse, fields,
                             staging)


@contextlib.contextmanager
def _json_staging(config: TablesConfig, chunked: str):
    """Where JSON tables are parsed into Parquet copies (None: the config has none): a
    temporary folder beside the chunked graph, where the workers read already (else, for a
    URL or a read-only folder, the client's temporary folder), removed at the end."""
    files = input_files([f for s in config.nodes + config.edges for f in s.files])
    if not any(is_json(f) for f in files):
        yield ""
        return
    parent = None if is_url(chunked) else os.path.dirname(os.path.abspath(chunked))
    try:
        folder = tempfile.mkdtemp(prefix=".verify-json-", dir=parent)
    except OSError:
        folder = tempfile.mkdtemp(prefix="graphprep-verify-json-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_tables(config, graph, run, chunk_size, dangling, made, reverse, fields, staging):
    node_tasks, edge_tasks = table_tasks(config, graph, chunk_size, dangling, fields, reverse,
                                         made is not None and made.drop_self_loops, staging,
                                         run)
    found = run(check_node_rows, node_tasks, "verify node tables") if node_tasks else []
    problems = [r for r in found if isinstance(r, str)]
    if problems:
        raise TablesMismatch(problems[0])
    firsts = {s.ntype: s for s in reversed(config.nodes)}      # each type's listing table
    rows = sum(_check_node_spans(spec, graph, dangling, [
        (t, r) for t, r in zip(node_tasks, found) if t.ntype == spec.ntype and not t.joined])
        for spec in firsts.values())
    _check_joined_fills(config, graph, node_tasks, found, run)
    table_prints = run(print_edge_rows, edge_tasks, "verify edge tables") if edge_tasks else []
    problems = [r for r in table_prints if isinstance(r, str)]
    if problems:
        raise TablesMismatch(problems[0])
    if dangling == "drop" and made is not None:
        _check_dropped(config, made, edge_tasks, table_prints, run)
    # The graph types the tables fill: each table's own, and where its rows go reversed.
    segments: dict[EdgeType, list[tuple[EdgeType, bool]]] = {}
    for s in config.edges:
        segments.setdefault(s.etype, []).append((s.etype, False))
    for s in config.edges:
        if s.etype in reverse:
            segments.setdefault(reverse[s.etype], []).append((s.etype, True))
    chunk_tasks = []
    for et in segments:
        bounds = np.concatenate([[0], np.cumsum(graph.edge_chunks[et])])
        chunk_tasks += [EdgeChunkTask(graph, fields[1].get(et, {}), et, i, int(bounds[i]),
                                      int(bounds[i + 1]))
                        for i in range(len(graph.edge_chunks[et]))]
    graph_prints = run(print_edge_chunk, chunk_tasks, "verify graph edges") if chunk_tasks else []
    edges = 0
    for et, parts in segments.items():
        mine = [(t, p[2:4] if flipped else p[:2]) for table, flipped in parts
                for t, p in zip(edge_tasks, table_prints) if t.etype == table]
        want = sum((p for _, p in mine), np.zeros(2, np.uint64))
        got = sum((p for t, p in zip(chunk_tasks, graph_prints) if t.etype == et),
                  np.zeros(2, np.uint64))
        if want[0] != got[0] or want[1] != got[1]:
            counts = (f"edge type {et}: the tables hold {int(want[0]):,} edges, the graph "
                      f"{int(got[0]):,}; " if want[0] != got[0] else "")
            raise TablesMismatch(counts + _locate(graph, et, parts, edge_tasks, table_prints,
                                                  fields[1].get(et, {}), int(want[0]), run))
        edges += int(want[0])
    return {"rows": rows, "edges": edges}


def _check_types(config: TablesConfig, graph: ChunkedGraph, reverse: dict) -> None:
    """Every type the config names is in the graph, the graph's edge types are the tables'
    own and their reversed types, and the config's ``reverse`` is how the graph was made."""
    for s in config.nodes:
        if s.ntype not in graph.num_nodes:
            raise TablesMismatch(f"{config.path}: node type is not in the graph: {s.ntype}")
    for s in config.edges:
        if s.etype not in graph.edge_chunks:
            raise TablesMismatch(f"{config.path}: edge type is not in the graph: {s.etype}")
        if s.reverse and reverse.get(s.etype) != s.reverse_type:
            made = (f"its reversed edges in '{reverse[s.etype]}'" if s.etype in reverse
                    else "no reversed edges of it")
            raise TablesMismatch(f"{config.path}: reverse: true puts the reversed edges in "
                                 f"'{s.reverse_type}', the graph has {made}: {s.etype}")
    filled = {s.etype for s in config.edges} | {reverse[s.etype] for s in config.edges
                                                 if s.etype in reverse}
    extra = [et for et in graph.edge_types if et not in filled]
    if extra:
        raise TablesMismatch(f"{config.path}: the graph has an edge type no table of the "
                             f"config fills: {extra[0]}")


def _check_node_spans(spec, graph: ChunkedGraph, dangling: str, done: list) -> int:
    """The rows of a node table, part by part ``(task, (first ID, rows))``, must be the IDs
    ``0..rows-1`` each once, and ``rows`` the type's nodes less the keys ``--dangling add``
    added: a graph node no row holds (a row removed from the table) is named by its key."""
    t = spec.ntype
    spans = sorted((r[0], r[1], task.encode.part) for task, r in done if r[1])
    at, previous = 0, None
    for first, n, part in spans:
        if first > at:
            where = part.path if previous is None or previous.path == part.path else \
                f"{previous.path} or {part.path}"
            raise TablesMismatch(f"{where}: node {at} of type {t} is in the graph, in no row "
                                 f"of the table (a row removed?): key "
                                 f"{_shown(keys_of(graph, t, [at])[0])}")
        if first < at:
            raise TablesMismatch(f"{part.path}: node {first} of type {t} is in two rows of "
                                 f"the table: key {_shown(keys_of(graph, t, [first])[0])}")
        at, previous = at + n, part
    made = graph.made
    added = made.added_nodes.get(t, 0) if made is not None else None
    if added is None and dangling == "add":
        return at                    # an older graph: the keys it added are not counted
    expect = graph.num_nodes[t] - (added or 0)
    last = spans[-1][2].path if spans else ", ".join(spec.files)
    if at < expect:
        raise TablesMismatch(f"{last}: node {at} of type {t} is in the graph, in no row of "
                             f"the table (a row removed?): key "
                             f"{_shown(keys_of(graph, t, [at])[0])}")
    if at > expect:
        raise TablesMismatch(f"{last}: the table has {at:,} rows of node type {t}, the graph "
                             f"{expect:,} from the table and {added:,} added for edges "
                             f"(--dangling add); node {expect} has a row: key "
                             f"{_shown(keys_of(graph, t, [expect])[0])}")
    return at


def _check_joined_fills(config, graph: ChunkedGraph, node_tasks, found, run) -> None:
    """Each field of a joined table: the graph's rows of the type, less fills, sum to what
    the joined rows sum to (so a joined row removed from its table is seen); where not, the
    first graph node with a value but no joined row is named by its key. Locating holds one
    byte per node of the type."""
    joined = [(t, r) for t, r in zip(node_tasks, found) if t.joined]
    names = sorted({(t.ntype, name) for t, r in joined for name in r})
    if not names:
        return
    tasks, owners = [], []
    for ntype, name in names:
        field = next(t.fields[name] for t, r in joined if t.ntype == ntype and name in r)
        bounds = np.concatenate([[0], np.cumsum(graph.node_chunks[ntype])])
        tasks += [FillTask(field, int(bounds[c]), int(bounds[c + 1]))
                  for c in range(len(bounds) - 1)]
        owners += [(ntype, name)] * (len(bounds) - 1)
    sums = run(print_joined_chunk, tasks, "verify joined fields")
    for ntype, name in names:
        mine = [(t, r) for t, r in joined if t.ntype == ntype and name in r]
        with np.errstate(over="ignore"):
            got = sum((v for o, v in zip(owners, sums) if o == (ntype, name)), np.uint64(0))
            want = sum((r[name] for _, r in mine), np.uint64(0))
        if got == want:
            continue
        covered = np.zeros(graph.num_nodes[ntype], bool)
        for ids in run(joined_ids, [t for t, _ in mine], "locate the difference"):
            covered[ids] = True
        chunks = [replace(t, covered=covered[t.start:t.stop])
                  for t, o in zip(tasks, owners) if o == (ntype, name)]
        firsts = run(print_joined_chunk, chunks, "locate the difference")
        files = ", ".join(dict.fromkeys(t.encode.part.path for t, _ in mine))
        at = next((t.start + f for t, f in zip(chunks, firsts) if f >= 0), None)
        if at is None:
            raise TablesMismatch(f"{files}: node type {ntype}: the graph's rows differ from "
                                 f"the joined table's: field {name!r}")
        raise TablesMismatch(f"{files}: node {at} of type {ntype}: field {name!r} has a value "
                             f"in the graph, no row of the joined table (a row removed?): key "
                             f"{_shown(keys_of(graph, ntype, [at])[0])}")


def _check_dropped(config, made, edge_tasks, table_prints, run) -> None:
    """Under ``--dangling drop``: the rows the tables have naming a missing key are as many as
    the graph dropped, per edge type (the graph keeps no list of them: the first is named)."""
    for s in config.edges:
        mine = [(t, p) for t, p in zip(edge_tasks, table_prints) if t.etype == s.etype]
        have = sum(int(p[4]) for _, p in mine)
        dropped = made.dropped_edges.get(s.etype, 0)
        if have != dropped:
            named = [m for m in run(first_dangling_row, [t for t, p in mine if p[4]],
                                    "locate the difference") if m] if have else []
            detail = f"the first such row: {named[0]}" if named else \
                f"no row of the tables names a missing key: {s.etype}"
            raise TablesMismatch(f"edge type {s.etype}: {have:,} rows of the tables name a key "
                                 f"missing from its node table, the graph dropped {dropped:,} "
                                 f"(--dangling drop: such a row was added, removed or changed "
                                 f"since chunking); {detail}")


def _locate(graph, et, parts, edge_tasks, table_prints, gfields, want: int, run) -> str:
    """The first difference between the graph's edges of ``et`` and the tables' rows that
    fill it (``parts``: (table type, reversed) in the graph's order), by file and keys."""
    tasks, offset = [], 0
    for table, flipped in parts:
        for t, p in zip(edge_tasks, table_prints):
            if t.etype == table:
                tasks.append(LocateTask(t, et, gfields, offset, flipped,
                                        want - sum(graph.edge_chunks[et])))
                offset += int(p[2] if flipped else p[0])
    found = run(locate_edge_rows, tasks, "locate the difference") if tasks else []
    first = next((f for f in found if f), None)
    if first is not None:
        return first
    total = sum(graph.edge_chunks[et])
    if total > want:
        s, d = _graph_edges(graph, et, want, want + 1)
        last = tasks[-1].rows.part.path if tasks else "the tables"
        return (f"{last}: the graph's edge {want} of type {et} is in no row of the tables "
                f"(a row removed?): {_graph_edge_keys(graph, et, s[0], d[0])}")
    return (f"edge type {et}: the graph's edges differ from the tables' rows (as a set; not "
            f"in table order)")


class TablesMismatch(Exception):
    """The tables and the chunked graph differ (the message names where)."""
