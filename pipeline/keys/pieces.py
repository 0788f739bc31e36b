"""Phase 1 of key mapping, one task per input part: each key column of the part, hashed and
written as one *piece* — an Arrow IPC file with one record batch per bucket of its node
type, rows ``(key, hash, row)`` where ``row`` is the row within the part, in input order
within a bucket. A node table's part also writes its keys in row order (their ID order).

A task holds one part (about ``chunk_size`` rows) and its keys twice (read and sorted).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.formats import FormatError
from graphprep.formats.output import writing
from graphprep.pipeline.tables.parts import TablePart, read_part
from graphprep.pipeline.keys.hashing import bucket_of, is_text, key_hash, key_kind, normalize_keys


@dataclass(frozen=True)
class KeyColumn:
    """A column of keys of node type ``ntype``, bucketed by the top ``bits`` of their hash."""

    column: str
    ntype: str
    bits: int


@dataclass(frozen=True)
class PieceTask:
    part: TablePart
    keys: tuple[KeyColumn, ...]
    targets: tuple[str, ...]          # one piece file per key column
    by_id: str = ""                   # node tables: where the keys go in row order (Parquet)


@dataclass
class PieceResult:
    rows: int = 0
    kinds: tuple[str, ...] = ()       # per key column: "integer" or "string"
    binary: tuple[bool, ...] = ()     # per key column: bytes, not text (nor integers)
    problem: FormatError | None = None   # row relative to the part when its first row is unknown
    problem_rows_before: int = 0      # rows of the part before the table the problem is in
    columns: tuple[str, ...] = field(default_factory=tuple)


def write_pieces(task: PieceTask) -> PieceResult:
    """Read the part and write a piece per key column (and ``by_id`` for a node table).
    Bad input (a null key, a type keys cannot have, an unreadable row) is returned as
    ``problem`` so that the client can name the row in the whole file."""
    try:
        table = read_part(task.part)
    except FormatError as err:
        return PieceResult(problem=err)
    kinds, binary = [], []
    for kc, target in zip(task.keys, task.targets):
        text = is_text(table.column(kc.column).type)
        try:
            keys = normalize_keys(table.column(kc.column), file=task.part.path,
                                  field=kc.column)
        except FormatError as err:
            return PieceResult(rows=table.num_rows, problem=err)
        kinds.append(key_kind(keys.type))
        binary.append(kinds[-1] == "string" and not text)
        write_piece(target, keys, kc.bits)
        if task.by_id:
            # text keys are written back as text (a reader joins them to its strings); the
            # job rewrites them as bytes if other columns of the type hold bytes
            os.makedirs(os.path.dirname(task.by_id), exist_ok=True)
            with writing(task.by_id):
                pq.write_table(pa.table({"key": keys.view(pa.large_string()) if text
                                         else keys}), task.by_id)
    return PieceResult(rows=table.num_rows, kinds=tuple(kinds), binary=tuple(binary))


def write_piece(path: str, keys: pa.Array, bits: int) -> None:
    """``keys`` as one IPC file of ``2^bits`` batches, batch ``b`` the keys of bucket ``b``
    (their hash's top bits) with their hash and row, in row order."""
    hashes = key_hash(keys)
    bucket = bucket_of(hashes, bits)
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange((1 << bits) + 1))
    table = pa.table({"key": keys.take(pa.array(order)), "hash": pa.array(hashes[order]),
                      "row": pa.array(order.astype(np.int64))})
    write_batches(path, table.schema, (table.slice(bounds[b], bounds[b + 1] - bounds[b])
                                       for b in range(1 << bits)))


def write_batches(path: str, schema: pa.Schema, tables) -> None:
    """An IPC file of one record batch per table of ``tables`` (empty ones too: batch ``i``
    is always table ``i``)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with writing(path), pa.OSFile(path, "wb") as sink, \
            pa.ipc.new_file(sink, schema) as writer:
        for t in tables:
            t = t.combine_chunks()
            writer.write_batch(t.to_batches()[0] if t.num_rows else
                               pa.RecordBatch.from_pylist([], schema=schema))


def read_batch(path: str, index: int) -> pa.RecordBatch:
    """Batch ``index`` of an IPC file, memory-mapped (reads only its pages)."""
    return pa.ipc.open_file(pa.memory_map(path)).get_batch(index)
