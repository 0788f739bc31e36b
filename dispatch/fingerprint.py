"""Order-free fingerprints of edge and node rows, for ``prep verify`` without scratch files.

A row's hash mixes its original ID with its content (endpoints, every data field's bytes);
a piece of the input (an edge chunk, a node range) is fingerprinted by the count of its rows
and the sum of their hashes modulo 2^64 (a multiset hash: independent of order and of which
part a row sits in). The parts' fingerprints, summed piece by piece, equal the input's exactly
when every row is there once with the same content, up to a 2^-64 chance per piece. A piece
whose fingerprints differ is then checked row by row to name the first difference.
"""

from __future__ import annotations

import numpy as np

from graphprep.formats.sparse import CsrRows, is_csr
from graphprep.pipeline.core.arrayops import mix


def row_hash(values: np.ndarray) -> np.ndarray:
    """One uint64 per row of ``values`` (any shape ``(n, ...)``), from the row's bytes.
    Floats are made canonical first, as verify's row comparison sees them: every NaN alike,
    ``-0.0`` as ``0.0``. Holds a copy of ``values`` as 64-bit words. Sparse rows
    (:class:`CsrRows`) hash their stored entries (column, value) and their count."""
    if is_csr(values):
        return _csr_row_hash(values)
    n = len(values)
    a = np.ascontiguousarray(values)
    if a.dtype.kind == "f":
        a = np.where(a != a, np.array(np.nan, a.dtype), a) + a.dtype.type(0)
    raw = a.reshape(n, -1).view(np.uint8) if a.size else np.zeros((n, 0), np.uint8)
    width = -(-raw.shape[1] // 8) * 8
    if width != raw.shape[1]:
        raw = np.concatenate([raw, np.zeros((n, width - raw.shape[1]), np.uint8)], axis=1)
    words = np.ascontiguousarray(raw).view(np.uint64)
    return mix(raw.shape[1], *words.T) if words.shape[1] else mix(0, np.zeros(n, np.uint64))


def _csr_row_hash(rows: CsrRows) -> np.ndarray:
    """Per row: its entry count mixed with the wrapping sum of its entries' hashes (a prefix
    sum, so no per-row loop). Holds a few uint64 per stored entry."""
    entries = mix(np.asarray(rows.indices).astype(np.uint64),
                  row_hash(np.asarray(rows.values).reshape(-1, 1)))
    total = np.zeros(rows.nnz + 1, np.uint64)
    np.cumsum(entries, out=total[1:])
    indptr = np.asarray(rows.indptr)
    return mix(np.diff(indptr).astype(np.uint64), total[indptr[1:]] - total[indptr[:-1]])


def edge_hash(eids, src, dst, fields: list[np.ndarray]) -> np.ndarray:
    """Hash per edge of its original ID, endpoints (original IDs) and data rows (``fields``
    in field-name order)."""
    return mix(eids, src, dst, *(row_hash(f) for f in fields))


def node_hash(ids, fields: list[np.ndarray]) -> np.ndarray:
    """Hash per node of its original ID and data rows (``fields`` in field-name order)."""
    return mix(ids, *(row_hash(f) for f in fields))


def add_prints(prints: np.ndarray, piece: np.ndarray, hashes: np.ndarray) -> None:
    """Add rows to ``prints`` (``[pieces, 2]`` uint64: count, hash sum), row i to piece
    ``piece[i]``; sums wrap modulo 2^64."""
    np.add.at(prints[:, 0], piece, np.uint64(1))
    np.add.at(prints[:, 1], piece, hashes)


def new_prints(pieces: int) -> np.ndarray:
    return np.zeros((pieces, 2), np.uint64)
