"""``prep verify --tables CONFIG``: the input tables against the chunked graph, by key.

``prep verify`` proves the parts hold exactly the chunked graph; this proves the chunked
graph holds exactly the tables, so that together every table row is checked by its key from
input to parts. One task per table part, as ``prep chunk`` cut them:

- a **node table** part: its keys looked up in the saved map must be consecutive IDs (rows keep
  their order as IDs), and every field encoded again from the row (features, categorical codes
  by the saved vocabulary, labels, sparse rows, split masks) must equal the chunked graph's
  row of that ID. A difference names the file, the key and the field.
- an **edge table** part: its endpoint keys looked up (rows whose key is missing are dropped
  under ``dangling: drop``, an error otherwise), its fields encoded again, and the multiset of
  (source ID, destination ID, field rows) fingerprinted (a count and a wrapping hash sum, as
  :mod:`dispatch.fingerprint`); the sum over an edge type's parts must equal the same
  fingerprint of the chunked graph's edges (one task per edge chunk). Where they differ, each
  part's rows are compared in order with the graph's edges at their position (``prep chunk``
  keeps a table's rows in order) to name the first differing edge by its keys.

A task holds one table part (its columns and encoded rows) and the map buckets its keys fall
in; the chunked graph's side one edge chunk with its data rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow.parquet as pq

from formats import ChunkedGraph, EdgeType, load_chunked_graph
from formats.arrays import read_edge_chunk
from pipeline.arrayops import mix
from pipeline.convert.sources import data_fields
from pipeline.convert.tables_in import read_parts
from pipeline.keys.hashing import normalize_keys
from pipeline.keys.lookup import ids_of
from pipeline.keys.pieces import read_part
from pipeline.split_edges import SplitSpec as EdgeSplit
from pipeline.tables.columns import EncodeTask, edge_split_masks, encode_fields
from pipeline.tables.config import Fields, TablesConfig, load_config
from .fingerprint import row_hash


@dataclass(frozen=True)
class NodeRowsTask:
    graph: ChunkedGraph
    fields: dict                # the type's node data, {name: DataField} (opened once)
    ntype: str
    key: str
    encode: EncodeTask          # first_id is found by the task


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


def _vocabularies(graph: ChunkedGraph, owner: str, fields: Fields) -> tuple[tuple, ...]:
    """Per field, the saved vocabulary (() for fields without one), as ``prep chunk`` used."""
    saved = graph.vocab.get(owner, {})
    return tuple(tuple(pq.read_table(graph.path(saved[f.name])).column("value").to_pylist())
                 if f.name in saved else () for f in fields.fields)


def _encoder(graph: ChunkedGraph, owner: str, part, fields: Fields, split=None,
             edge_split=None) -> EncodeTask:
    return EncodeTask(part, fields.fields, _vocabularies(graph, owner, fields), split, 0, 0,
                      "", "", edge_split)


def table_tasks(config: TablesConfig, graph: ChunkedGraph, chunk_size: int, dangling: str,
                fields: tuple[dict, dict]):
    """``(node tasks, edge tasks)`` for every part of every table of ``config``; ``fields``:
    the graph's ``(node fields, edge fields)`` as :func:`data_fields` opens them."""
    nodes = [NodeRowsTask(graph, fields[0].get(s.ntype, {}), s.ntype, s.key,
                          _encoder(graph, s.ntype, part, Fields(s.data.fields), s.data.split))
             for s in config.nodes
             for part in read_parts(s.files, (s.key,), s.data, s.csv, chunk_size)]
    edges = []
    for s in config.edges:
        split = None
        if s.data.split is not None:
            _, val, test = s.data.split.fractions
            split = EdgeSplit(s.etype, val, test, s.data.split.seed)
        for part in read_parts(s.files, (s.src, s.dst), s.data, s.csv, chunk_size):
            encode = _encoder(graph, str(s.etype), part, Fields(s.data.fields),
                              edge_split=split) if s.data.names else None
            edges.append(EdgeRowsTask(graph, fields[1].get(s.etype, {}), s.etype, s.src, s.dst,
                                      config.dangling or dangling, part, encode))
    return nodes, edges


def check_node_rows(task: NodeRowsTask) -> tuple[int, int] | str:
    """``(first ID, rows)`` of a node table part whose rows match the chunked graph, else
    the first difference (file, key, field)."""
    part = task.encode.part
    table = read_part(part)
    keys = normalize_keys(table.column(task.key), file=part.path, field=task.key)
    ids = ids_of(task.graph, task.ntype, keys)
    n = len(ids)
    if not n:
        return (0, 0)
    first = int(ids[0])
    bad = np.flatnonzero(ids != np.arange(first, first + n))
    if len(bad):
        i = int(bad[0])
        return (f"{part.path}: key {_shown(keys[i])} of node type {task.ntype} has ID "
                f"{int(ids[i])} in the graph, expected {first + i} (rows keep their order)"
                if ids[i] >= 0 else f"{part.path}: key {_shown(keys[i])} of node type "
                f"{task.ntype} is not in the graph")
    mine = task.fields
    for name, rows in encode_fields(replace(task.encode, first_id=first), table).items():
        if name not in mine:
            return f"{part.path}: field {name!r} of node type {task.ntype} is not in the graph"
        got = mine[name].read(first, first + n)
        differs = np.flatnonzero(row_hash(got) != row_hash(rows))
        if len(differs):
            i = int(differs[0])
            return (f"{part.path}: key {_shown(keys[i])} (node {first + i} of type "
                    f"{task.ntype}): field {name!r} differs from the graph's row")
    return (first, n)


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
    hashes = mix(src, dst, *(row_hash(fields[k]) for k in sorted(fields)))
    return np.array([len(src), hashes.sum(dtype=np.uint64)], np.uint64)


def _edge_rows(task: EdgeRowsTask):
    """``(src, dst, fields, keys)`` of an edge table part's kept rows as the graph should hold
    them (IDs, re-encoded fields, split masks; ``keys[end]`` of the kept rows), or a message
    when a row cannot be in the graph."""
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
        return (f"{part.path}: {end} key {_shown(keys[end][i])} of edge type {et} is not in "
                f"the graph")
    keep = ~missing
    fields = {}
    if task.encode is not None:
        fields = {name: rows[keep] for name, rows in encode_fields(task.encode, table).items()}
        if task.encode.edge_split is not None:
            fields.update(edge_split_masks(task.encode, src[keep], dst[keep]))
    kept = np.flatnonzero(keep)
    return src[keep], dst[keep], fields, {e: k.take(kept) for e, k in keys.items()}


def print_edge_rows(task: EdgeRowsTask) -> np.ndarray | str:
    """The fingerprint of an edge table part's edges as IDs with their fields, and their
    count, or why the part cannot be in the graph."""
    rows = _edge_rows(task)
    return rows if isinstance(rows, str) else _edge_prints(*rows[:3])


def locate_edge_rows(args: tuple[EdgeRowsTask, int]) -> str | None:
    """The first of a part's kept rows that differs from the graph's edge at the same position
    (the graph keeps a table's edges in row order: the part's rows are its edges ``[offset,
    offset + kept)``), named by file and keys; None when the part's rows all match."""
    task, offset = args
    src, dst, fields, keys = _edge_rows(task)
    got_src, got_dst = _graph_edges(task.graph, task.etype, offset, offset + len(src))
    checks = [("source", src, got_src), ("destination", dst, got_dst)]
    checks += [(f"field {name!r}", fields[name], task.fields[name].read(
        offset, offset + len(src))) for name in sorted(fields) if name in task.fields]
    for what, want, got in checks:
        differs = np.flatnonzero(row_hash(want) != row_hash(got))
        if len(differs):
            i = int(differs[0])
            return (f"{task.part.path}: the edge {_shown(keys['src'][i])} -> "
                    f"{_shown(keys['dst'][i])} (edge {offset + i} of type {task.etype}): "
                    f"its {what} differs from the graph's")
    return None


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
    raises :class:`TablesMismatch` naming the first difference."""
    config = load_config(config_path)
    graph = load_chunked_graph(chunked)
    fields = data_fields(graph)       # every chunk's header read once, here
    node_tasks, edge_tasks = table_tasks(config, graph, chunk_size, dangling, fields)
    found = run(check_node_rows, node_tasks, "verify node tables") if node_tasks else []
    problems = [r for r in found if isinstance(r, str)]
    if problems:
        raise TablesMismatch(problems[0])
    rows = 0
    for spec in config.nodes:
        spans = sorted(r for t, r in zip(node_tasks, found) if t.ntype == spec.ntype and r[1])
        at = 0
        for first, n in spans:
            if first != at:
                raise TablesMismatch(f"node type {spec.ntype}: the table's rows have IDs from "
                                     f"{first}, expected {at} (a row is missing or repeated)")
            at += n
        rows += at
    table_prints = run(print_edge_rows, edge_tasks, "verify edge tables") if edge_tasks else []
    problems = [r for r in table_prints if isinstance(r, str)]
    if problems:
        raise TablesMismatch(problems[0])
    types = list(dict.fromkeys(s.etype for s in config.edges))
    chunk_tasks = []
    for et in types:
        bounds = np.concatenate([[0], np.cumsum(graph.edge_chunks[et])])
        chunk_tasks += [EdgeChunkTask(graph, fields[1].get(et, {}), et, i, int(bounds[i]),
                                      int(bounds[i + 1]))
                        for i in range(len(graph.edge_chunks[et]))]
    graph_prints = run(print_edge_chunk, chunk_tasks, "verify graph edges") if chunk_tasks else []
    edges = 0
    for et in types:
        want = sum((p for t, p in zip(edge_tasks, table_prints) if t.etype == et),
                   np.zeros(2, np.uint64))
        got = sum((p for t, p in zip(chunk_tasks, graph_prints) if t.etype == et),
                  np.zeros(2, np.uint64))
        if want[0] != got[0]:
            raise TablesMismatch(f"edge type {et}: the tables hold {int(want[0]):,} edges, "
                                 f"the graph {int(got[0]):,}")
        if want[1] != got[1]:
            mine = [(t, p) for t, p in zip(edge_tasks, table_prints) if t.etype == et]
            offsets = np.concatenate([[0], np.cumsum([int(p[0]) for _, p in mine])])
            found = run(locate_edge_rows, [(t, int(o)) for (t, _), o in zip(mine, offsets)],
                        "locate the difference")
            raise TablesMismatch(next((f for f in found if f), f"edge type {et}: the graph's "
                                      f"edges differ from the tables' rows (as a set; not in "
                                      f"table order)"))
        edges += int(want[0])
    return {"rows": rows, "edges": edges}


class TablesMismatch(Exception):
    """The tables and the chunked graph differ (the message names where)."""
