"""Phases 2 and 3 of key mapping, one task per (node type, bucket).

Phase 2 (:func:`count_bucket`) reads the bucket's batch of every piece of the type: the node
table's keys (IDs = their rows) and the keys edges refer to. It checks the table's keys are
unique, finds the edge keys the table lacks (the type's *new* keys: all of them for a type
without a table), writes them sorted by (hash, key), and returns their count.

Phase 3 (:func:`finish_bucket`), given the first ID of the bucket's new keys (a prefix sum
over buckets, so IDs follow (hash, key) order whatever the bucket count), writes the bucket's
map ``key -> id`` and translates the edge keys of the bucket: one batch of IDs per edge piece
(-1 for a key dropped as dangling).

A task holds the bucket: the type's table keys and edge endpoint keys divided by the bucket
count, which the job sizes to about one chunk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphprep.formats import FormatError
from graphprep.formats.output import writing
from graphprep.pipeline.keys.pieces import read_batch, write_batches

SORT = [("hash", "ascending"), ("key", "ascending")]


@dataclass(frozen=True)
class PieceRef:
    """A phase-1 piece and where its rows came from (for errors and IDs)."""

    path: str
    file: str              # the input file
    first_row: int         # the row, in that file, of the part's first row
    first_id: int = -1     # node tables: the ID of the part's first row


@dataclass(frozen=True)
class BucketTask:
    ntype: str
    bucket: int
    table: tuple[PieceRef, ...]      # node table pieces (empty: a type known from edges only)
    edges: tuple[PieceRef, ...]      # edge pieces whose keys are of this type
    dangling: str                    # "error", "drop" or "add"
    staging: str                     # this type's scratch folder


@dataclass
class BucketCount:
    new: int = 0                     # keys numbered in this bucket after the table's rows
    dangling_edges: int = 0          # edge endpoints whose key the table lacks
    problem: FormatError | None = None
    problem_at: tuple[int, int] = (0, 0)   # (piece index, row): the first problem in input order


def _gather(refs: tuple[PieceRef, ...], bucket: int, with_ids: bool,
            key_type: pa.DataType) -> pa.Table:
    """The bucket's rows of every piece: ``key, hash`` and ``piece, row`` (or ``id``)."""
    tables = []
    for i, ref in enumerate(refs):
        batch = read_batch(ref.path, bucket)
        rows = batch.column("row").to_numpy()
        extra = {"id": pa.array(ref.first_id + rows)} if with_ids else \
            {"piece": pa.array(np.full(len(rows), i, np.int32)), "row": batch.column("row")}
        tables.append(pa.table({"key": batch.column("key"), "hash": batch.column("hash"),
                                **extra}))
    if not tables:
        return pa.table({"key": pa.array([], key_type),
                         "hash": pa.array([], pa.uint64()),
                         **({"id": pa.array([], pa.int64())} if with_ids else
                            {"piece": pa.array([], pa.int32()),
                             "row": pa.array([], pa.int64())})})
    return pa.concat_tables(tables).combine_chunks()


def _key_type(task: BucketTask) -> pa.DataType:
    refs = task.table or task.edges
    if not refs:                   # a type only empty edge files name: no keys at all
        return pa.large_binary()
    return read_batch(refs[0].path, task.bucket).schema.field("key").type


def _new_path(task: BucketTask) -> str:
    return os.path.join(task.staging, f"new-{task.bucket:05d}.arrow")


def count_bucket(task: BucketTask) -> BucketCount:
    """Phase 2 for one bucket; writes its new keys. Returns counts, or the bucket's first
    problem (a duplicate key in the table, or with ``dangling="error"`` an edge key the table
    lacks), located by piece and row."""
    key_type = _key_type(task)
    table = _gather(task.table, task.bucket, True, key_type).sort_by(SORT)
    dup = _first_duplicate(table)
    if dup is not None:
        a, b = sorted(dup[1:])
        ref_a, ref_b = _ref_of_id(task.table, a), _ref_of_id(task.table, b)
        row_a = ref_a.first_row + a - ref_a.first_id
        row_b = ref_b.first_row + b - ref_b.first_id
        return BucketCount(problem=FormatError(
            f"duplicate key {_show(dup[0])} (also in row {row_a}"
            f"{'' if ref_a.file == ref_b.file else ' of ' + ref_a.file})",
            file=ref_b.file, row=row_b), problem_at=(-1, b))
    edges = _gather(task.edges, task.bucket, False, key_type)
    missing = pc.invert(pc.is_in(edges.column("key"), value_set=table.column("key")))
    count = BucketCount(dangling_edges=int(pc.sum(missing).as_py() or 0) if task.table else 0)
    if task.table and count.dangling_edges and task.dangling == "error":
        first = int(np.flatnonzero(missing.to_numpy(zero_copy_only=False))[0])
        piece, row = int(edges.column("piece")[first].as_py()), int(edges.column("row")[first]
                                                                     .as_py())
        ref = task.edges[piece]
        count.problem = FormatError(
            f"not in the table of node type {task.ntype!r} (--dangling drop|add to drop such "
            f"edges or add the keys): key {_show(edges.column('key')[first].as_py())}",
            file=ref.file, row=ref.first_row + row)
        count.problem_at = (piece, row)
        return count
    if task.dangling == "drop" and task.table:
        new = edges.slice(0, 0).select(["key", "hash"])
    else:
        new = edges.filter(missing).select(["key", "hash"])
        new = new.group_by(["key", "hash"]).aggregate([]).sort_by(SORT) if new.num_rows else new
    write_batches(_new_path(task), new.schema, [new])
    count.new = new.num_rows
    return count


def _first_duplicate(table: pa.Table):
    """(key, id, id) of the first equal pair of a table sorted by (hash, key), or None."""
    n = table.num_rows
    if n < 2:
        return None
    same = pc.and_(pc.equal(table.column("hash").slice(1), table.column("hash").slice(0, n - 1)),
                   pc.equal(table.column("key").slice(1), table.column("key").slice(0, n - 1)))
    hits = np.flatnonzero(same.to_numpy(zero_copy_only=False))
    if not len(hits):
        return None
    ids = table.column("id").to_numpy()
    # The pair whose later row comes first in input order: the error a reader expects.
    later = np.maximum(ids[hits], ids[hits + 1])
    i = int(hits[np.argmin(later)])
    return table.column("key")[i].as_py(), int(ids[i]), int(ids[i + 1])


def _ref_of_id(refs: tuple[PieceRef, ...], node_id: int) -> PieceRef:
    firsts = np.array([r.first_id for r in refs])
    return refs[int(np.searchsorted(firsts, node_id, side="right")) - 1]


def _show(key) -> str:
    if isinstance(key, bytes):
        try:
            return repr(key.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(key)
    return str(key)


@dataclass(frozen=True)
class FinishTask:
    count: BucketTask
    first_new_id: int                 # the ID of the bucket's first new key
    by_key: str                       # where the bucket's map goes (Parquet: key, id)
    by_id: str                        # where its new keys go in ID order ("" when none)
    ids: str                          # the edge pieces' IDs (IPC: a batch per edge piece)
    text: bool = False                # the type's keys are text: new keys written as strings


def finish_bucket(task: FinishTask) -> None:
    """Phase 3 for one bucket: its map, its new keys in ID order, and its edges' IDs."""
    b = task.count
    key_type = _key_type(b)
    table = _gather(b.table, b.bucket, True, key_type)
    new = pa.ipc.open_file(pa.memory_map(_new_path(b))).read_all()
    new = new.append_column("id", pa.array(np.arange(task.first_new_id, task.first_new_id
                                                     + new.num_rows, dtype=np.int64)))
    if task.by_id and new.num_rows:
        keys = new.column("key").combine_chunks()
        _write_parquet(task.by_id, pa.table({"key": keys.view(pa.large_string())
                                             if task.text else keys}))
    mapping = pa.concat_tables([table, new.select(["key", "hash", "id"])]).sort_by(SORT)
    _write_parquet(task.by_key, mapping.select(["key", "id"]))
    os.remove(_new_path(b))
    edges = _gather(b.edges, b.bucket, False, key_type)
    where = pc.index_in(edges.column("key"), value_set=mapping.column("key"))
    ids = pc.fill_null(pc.take(mapping.column("id"), where), -1)
    sizes = np.bincount(edges.column("piece").to_numpy(), minlength=len(b.edges))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    ids_table = pa.table({"id": ids})
    write_batches(task.ids, ids_table.schema,
                  (ids_table.slice(bounds[i], sizes[i]) for i in range(len(b.edges))))


def _write_parquet(path: str, table: pa.Table) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with writing(path):
        pq.write_table(table, path)
