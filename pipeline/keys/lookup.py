"""Keys <-> IDs through a chunked graph's saved maps (FORMATS.md "Keys"): the Python API's and
``prep inspect``'s way back to the user's keys. Reads only the map files the asked rows or
keys fall in; holds those files and the answer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphprep.formats import ChunkedGraph, FormatError
from graphprep.pipeline.keys.hashing import bucket_of, key_hash, normalize_keys


def _keymap(graph: ChunkedGraph, ntype: str):
    if ntype not in graph.keys:
        raise FormatError(f"node type {ntype!r} has no saved keys (its input had IDs, not "
                          f"keys)", file=graph.root, field="keys")
    return graph.keys[ntype]


def keys_of(graph: ChunkedGraph, ntype: str, ids) -> pa.Array:
    """The original key of each ID in ``ids`` (strings decoded as UTF-8 where they are text;
    integers as int64). Raises :class:`FormatError` for an ID outside ``[0, num_nodes)``."""
    keymap = _keymap(graph, ntype)
    ids = np.asarray(ids, dtype=np.int64)
    n = graph.num_nodes[ntype]
    if len(ids) and (ids.min() < 0 or ids.max() >= n):
        raise FormatError(f"IDs must be in [0, {n}) for node type {ntype!r}", field="ids")
    starts = np.concatenate([[0], np.cumsum(keymap.rows)])
    which = np.searchsorted(starts, ids, side="right") - 1
    pieces, positions = [], []
    for f in np.unique(which):
        at = np.flatnonzero(which == f)
        column = pq.read_table(graph.path(keymap.by_id[f])).column("key")
        pieces.append(column.take(pa.array(ids[at] - starts[f])).combine_chunks())
        positions.append(at)
    if not pieces:
        return pa.array([], pa.int64() if keymap.kind == "integer" else pa.string())
    order = np.argsort(np.concatenate(positions), kind="stable")
    out = pa.concat_arrays(pieces).take(pa.array(order))
    if keymap.kind == "string":
        try:
            return out.cast(pa.large_string())
        except pa.ArrowInvalid:
            return out
    return out


def ids_of(graph: ChunkedGraph, ntype: str, keys) -> np.ndarray:
    """The ID of each key in ``keys`` (any sequence or Arrow array of the type's key kind);
    -1 where the graph has no such key."""
    keymap = _keymap(graph, ntype)
    keys = normalize_keys(keys if isinstance(keys, (pa.Array, pa.ChunkedArray))
                          else pa.array(list(keys)))
    bucket = bucket_of(key_hash(keys), keymap.bits)
    out = np.full(len(keys), -1, dtype=np.int64)
    for b in np.unique(bucket):
        at = np.flatnonzero(bucket == b)
        table = pq.read_table(graph.path(keymap.by_key[b]))
        where = pc.index_in(keys.take(pa.array(at)), value_set=table.column("key"))
        found = pc.fill_null(pc.take(table.column("id"), where), -1)
        out[at] = found.to_numpy(zero_copy_only=False)
    return out
