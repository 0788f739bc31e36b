"""Out-of-core key mapping: the node keys of tables (any integer, string or bytes type) ->
IDs ``0..N-1`` per node type, and edge endpoints translated by a shuffle join. Four phases of
Dask tasks, none holding all keys of a type:

1. per input part: each key column hashed into buckets (``pieces``);
2. per (node type, bucket): the table's keys checked unique, the keys only edges name
   found (``numbering.count_bucket``);
3. per (node type, bucket): the map ``key -> id`` written, the bucket's edge keys looked up
   (``numbering.finish_bucket``);
4. per edge part: the IDs put back in input order (``translate``).

Numbering, deterministic for a given input whatever the chunking or worker count: a node
table's rows are IDs ``0..rows-1`` in input order (files in order); keys that only edges name
(all keys of a type without a table, or ``--dangling add``) follow, ordered by (hash, key).
The client holds a few integers per part and bucket.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.formats import EdgeType, FormatError
from graphprep.formats.schema import KeyMap
from graphprep.pipeline.tables.parts import TablePart
from graphprep.pipeline.keys.numbering import (BucketCount, BucketTask, FinishTask, PieceRef,
                                               count_bucket, finish_bucket)
from graphprep.pipeline.keys.pieces import KeyColumn, PieceResult, PieceTask, write_pieces
from graphprep.pipeline.keys.translate import SideRef, TranslateTask, translate_part

log = logging.getLogger(__name__)

MAX_BITS = 12
DANGLING = ("error", "drop", "add")


@dataclass(frozen=True)
class NodeTable:
    """A node type's table: its parts and the column holding each row's key."""

    ntype: str
    parts: tuple[TablePart, ...]
    key: str


@dataclass(frozen=True)
class EdgeTable:
    """An edge type's table: its parts and the columns of its endpoints' keys."""

    etype: EdgeType
    parts: tuple[TablePart, ...]
    src: str
    dst: str


@dataclass(frozen=True)
class TablePartRows:
    """Where a node table part's rows went: ``rows`` rows, the first at ``first_row`` of its
    file, with IDs from ``first_id``."""

    first_row: int
    first_id: int
    rows: int


@dataclass(frozen=True)
class TranslatedPart:
    """An edge part as IDs: ``<prefix>.src.npy``/``.dst.npy`` of ``rows`` edges (``dropped``
    left out, their rows marked False in ``<prefix>.keep.npy``), the first read from row
    ``first_row`` of its file."""

    prefix: str
    rows: int
    first_row: int
    dropped: int

    @property
    def keep(self) -> str:
        return self.prefix + ".keep.npy" if self.dropped else ""


@dataclass
class MappedKeys:
    """What the mapping made: node counts, maps (paths relative to the output), per node
    table its parts' rows, and per edge type its translated parts."""

    num_nodes: dict[str, int]
    maps: dict[str, KeyMap]
    tables: dict[str, list[TablePartRows]] = field(default_factory=dict)
    edges: dict[EdgeType, list[TranslatedPart]] = field(default_factory=dict)
    dropped_edges: dict[EdgeType, int] = field(default_factory=dict)
    added_nodes: dict[str, int] = field(default_factory=dict)


def bucket_bits(pieces: int) -> int:
    """Buckets for a type read from ``pieces`` parts of about a chunk each: about a chunk of
    keys per bucket."""
    return min(MAX_BITS, max(0, math.ceil(math.log2(max(pieces, 1)))))


def map_keys(nodes: list[NodeTable], edges: list[EdgeTable], out: str, staging: str,
             runner, dangling: str = "error") -> MappedKeys:
    """Map the keys of ``nodes`` and ``edges``; maps go under ``out/keys/<ntype>/``, the
    translated edges under ``staging``. Raises :class:`FormatError` naming the file, row and
    key of a duplicate node key, a null key, an edge key missing from its node table (unless
    ``dangling`` is "drop" or "add"), or node types whose keys differ in kind."""
    if dangling not in DANGLING:
        raise ValueError(f"dangling must be one of {DANGLING}")
    ntypes = list(dict.fromkeys([t.ntype for t in nodes] +
                                [n for e in edges for n in (e.etype.src, e.etype.dst)]))
    pieces = {t: 0 for t in ntypes}
    for t in nodes:
        pieces[t.ntype] += len(t.parts)
    for e in edges:
        pieces[e.etype.src] += len(e.parts)
        pieces[e.etype.dst] += len(e.parts)
    bits = {t: bucket_bits(n) for t, n in pieces.items()}

    node_tasks, edge_tasks = _piece_tasks(nodes, edges, bits, staging)
    results = runner(write_pieces, node_tasks + edge_tasks, "keys: hash into buckets")
    _raise_first_problem(node_tasks + edge_tasks, results)
    node_results, edge_results = results[:len(node_tasks)], results[len(node_tasks):]
    kinds = _kinds(node_tasks + edge_tasks, results)
    # a type's keys are written back as text unless some column of it holds bytes
    binary = {kc.ntype for task, res in zip(node_tasks + edge_tasks, results) if res.rows
              for kc, b in zip(task.keys, res.binary) if b}
    text = {t for t, k in kinds.items() if k == "string" and t not in binary}
    first_rows = _first_rows(node_tasks + edge_tasks, results)

    table_refs: dict[str, list[PieceRef]] = {t: [] for t in ntypes}
    table_rows = {t: 0 for t in ntypes}
    table_parts: dict[str, list[TablePartRows]] = {t.ntype: [] for t in nodes}
    for task, res, row0 in zip(node_tasks, node_results, first_rows):
        t = task.keys[0].ntype
        table_refs[t].append(PieceRef(task.targets[0], task.part.path, row0, table_rows[t]))
        table_parts[t].append(TablePartRows(row0, table_rows[t], res.rows))
        table_rows[t] += res.rows
    edge_refs: dict[str, list[PieceRef]] = {t: [] for t in ntypes}
    sides = []          # per edge task: (src index, dst index) among its types' edge pieces
    for task, row0 in zip(edge_tasks, first_rows[len(node_tasks):]):
        at = []
        for kc, target in zip(task.keys, task.targets):
            at.append(len(edge_refs[kc.ntype]))
            edge_refs[kc.ntype].append(PieceRef(target, task.part.path, row0))
        sides.append(at)

    has_table = {t.ntype for t in nodes}
    counts_tasks = [BucketTask(t, b, tuple(table_refs[t]), tuple(edge_refs[t]),
                               dangling if t in has_table else "add",
                               os.path.join(staging, "keys", t))
                    for t in ntypes for b in range(1 << bits[t])]
    counts: list[BucketCount] = runner(count_bucket, counts_tasks, "keys: number")
    _raise_bucket_problem(counts)

    finish, maps, num_nodes, added = [], {}, {}, {}
    by_bucket = iter(zip(counts_tasks, counts))
    for t in ntypes:
        per_bucket = [next(by_bucket) for _ in range(1 << bits[t])]
        new = np.array([c.new for _, c in per_bucket], dtype=np.int64)
        first_new = table_rows[t] + np.concatenate([[0], np.cumsum(new)[:-1]])
        num_nodes[t] = table_rows[t] + int(new.sum())
        root = f"keys/{t}"
        by_key = tuple(f"{root}/by_key/bucket-{b:05d}.parquet" for b in range(1 << bits[t]))
        by_id_new = [by_id_name(root, int(first), "edges", num_nodes[t]) if n else ""
                     for first, n in zip(first_new, new)]
        for (task, _), first, key_file, id_file in zip(per_bucket, first_new, by_key,
                                                       by_id_new):
            finish.append(FinishTask(task, int(first), os.path.join(out, key_file),
                                     os.path.join(out, id_file) if id_file else "",
                                     _ids_path(staging, t, task.bucket), t in text))
        table_files, table_part_rows = [], []
        mine = [(task, res) for task, res in zip(node_tasks, node_results)
                if task.keys[0].ntype == t]
        for ref, (task, res) in zip(table_refs[t], mine):
            if not res.rows:      # no keys, no file: each file's first ID is its own
                if os.path.exists(task.by_id):
                    os.remove(task.by_id)
                continue
            name = by_id_name(root, ref.first_id, "table", num_nodes[t])
            os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
            if t in binary:
                _as_bytes(task.by_id)
            os.replace(task.by_id, os.path.join(out, name))
            table_files.append(name)
            table_part_rows.append(res.rows)
        maps[t] = KeyMap(kinds.get(t, "string"), bits[t],
                         tuple(table_files + [f for f in by_id_new if f]),
                         tuple(table_part_rows + [int(n) for n in new if n]), by_key)
        dangling_edges = sum(c.dangling_edges for _, c in per_bucket)
        if t in has_table and dangling_edges:
            added[t] = int(new.sum())
            log.warning("node type %r: %d edge endpoints name keys not in its table: %s",
                        t, dangling_edges, f"{added[t]} keys added as nodes"
                        if dangling == "add" else "their edges dropped")
    runner(finish_bucket, finish, "keys: map and look up")

    translate = []
    for task, res, (i_src, i_dst), table in zip(edge_tasks, edge_results, sides,
                                                _edge_table_of(edges)):
        src_t, dst_t = task.keys[0].ntype, task.keys[1].ntype
        translate.append(TranslateTask(
            res.rows,
            SideRef(task.targets[0], _ids_paths(staging, src_t, bits[src_t]), i_src),
            SideRef(task.targets[1], _ids_paths(staging, dst_t, bits[dst_t]), i_dst),
            os.path.join(staging, "keyed", table.etype.dirname, f"part-{len(translate):05d}")))
    done = runner(translate_part, translate, "keys: translate edges")
    result = MappedKeys(num_nodes, maps, table_parts, added_nodes=added)
    for task, table, row0, (rows, dropped) in zip(translate, _edge_table_of(edges),
                                                  first_rows[len(node_tasks):], done):
        result.edges.setdefault(table.etype, []).append(
            TranslatedPart(task.target, rows, row0, dropped))
        result.dropped_edges[table.etype] = result.dropped_edges.get(table.etype, 0) + dropped
    for et, n in result.dropped_edges.items():
        if n:
            log.warning("edge type %s: %d edges dropped (an endpoint's key is not in its node "
                        "table)", et, n)
    shutil.rmtree(os.path.join(staging, "keys"), ignore_errors=True)
    return result


def by_id_name(root: str, first_id: int, origin: str, num_nodes: int) -> str:
    """``<root>/by_id/<first ID>-<origin>.parquet``: the first ID zero-padded to one width per
    node type (at least 12 digits), so that file names sort in ID order for any reader that
    lists the folder (a Parquet dataset, pandas, a glob). ``origin``: ``table`` (a node
    table's rows) or ``edges`` (keys only edges name)."""
    width = max(12, len(str(max(num_nodes - 1, 0))))
    return f"{root}/by_id/{first_id:0{width}d}-{origin}.parquet"


def _as_bytes(path: str) -> None:
    """Rewrite a by-ID file of text keys as bytes: a type whose keys are text in its table
    but bytes in some edge file (rare) has one key type in every file. Holds the file."""
    keys = pq.read_table(path).column("key").combine_chunks()
    if pa.types.is_large_string(keys.type):
        pq.write_table(pa.table({"key": keys.view(pa.large_binary())}), path)


def _ids_path(staging: str, ntype: str, bucket: int) -> str:
    return os.path.join(staging, "keys", ntype, f"ids-{bucket:05d}.arrow")


def _ids_paths(staging: str, ntype: str, bits: int) -> tuple[str, ...]:
    return tuple(_ids_path(staging, ntype, b) for b in range(1 << bits))


def _edge_table_of(edges: list[EdgeTable]):
    """Per edge part, in task order: its edge table."""
    return [e for e in edges for _ in e.parts]


def _piece_tasks(nodes, edges, bits, staging):
    node_tasks = []
    for t in nodes:
        for i, part in enumerate(t.parts):
            base = os.path.join(staging, "keys", "pieces", f"n-{t.ntype}-{i:05d}")
            node_tasks.append(PieceTask(
                part, (KeyColumn(t.key, t.ntype, bits[t.ntype]),), (base + ".key.arrow",),
                # named once its first ID is known (after phase 1), then moved into out
                os.path.join(staging, "keys", "pieces", f"n-{len(node_tasks):05d}.by_id.parquet")))
    edge_tasks = []
    for e in edges:
        for i, part in enumerate(e.parts):
            base = os.path.join(staging, "keys", "pieces", f"e-{e.etype.dirname}-{i:05d}")
            edge_tasks.append(PieceTask(
                part, (KeyColumn(e.src, e.etype.src, bits[e.etype.src]),
                       KeyColumn(e.dst, e.etype.dst, bits[e.etype.dst])),
                (base + ".src.arrow", base + ".dst.arrow")))
    return node_tasks, edge_tasks


def _first_rows(tasks: list[PieceTask], results: list[PieceResult]) -> list[int]:
    """The row, in its file, of each part's first row (parts of a file are consecutive)."""
    rows, seen = [], {}
    for task, res in zip(tasks, results):
        start = task.part.first_row
        row0 = start if start is not None else seen.get(task.part.path, 0)
        rows.append(row0)
        seen[task.part.path] = row0 + res.rows
    return rows


def _raise_first_problem(tasks: list[PieceTask], results: list[PieceResult]) -> None:
    """The first part's problem, its row made a row of the whole file."""
    rows_before = {}
    for task, res in zip(tasks, results):
        start = task.part.first_row
        before = start if start is not None else rows_before.get(task.part.path, 0)
        if res.problem is not None:
            err = res.problem
            raise FormatError(err.message, file=err.file or task.part.path, field=err.field,
                              row=None if err.row is None else err.row + before)
        rows_before[task.part.path] = before + res.rows


def _kinds(tasks: list[PieceTask], results: list[PieceResult]) -> dict[str, str]:
    """Per node type the kind of its keys; the first file whose keys differ is an error."""
    kinds: dict[str, tuple[str, str, str]] = {}
    for task, res in zip(tasks, results):
        if not res.rows:
            continue       # an empty part's column type says nothing
        for kc, kind in zip(task.keys, res.kinds):
            seen = kinds.setdefault(kc.ntype, (kind, task.part.path, kc.column))
            if seen[0] != kind:
                raise FormatError(
                    f"keys of node type {kc.ntype!r} are {kind}s here but {seen[0]}s in "
                    f"{seen[1]} (column {seen[2]!r}): a type's keys must all be integers or "
                    f"all strings", file=task.part.path, field=kc.column)
    return {t: k[0] for t, k in kinds.items()}


def _raise_bucket_problem(counts: list[BucketCount]) -> None:
    """The problem first in input order among the buckets' (all buckets of a run agree, so
    the error does not depend on which task failed first)."""
    problems = [c for c in counts if c.problem is not None]
    if problems:
        raise min(problems, key=lambda c: c.problem_at).problem

