"""A part's halo: the non-owned sources of its edges, as a bit set with rank queries.

The CSC of a part numbers its halo nodes after its owned ones, in new-ID order, so every
edge's source needs its rank among the halo. A binary search of the sorted halo per edge was
most of dispatch's time (60 of 95 s at 10^8 edges, random parts): 23 random probes into the
halo list per edge. A bit per node plus a running count per 64-bit word answers the same in
two lookups into arrays an eighth of the node count each.
"""

from __future__ import annotations

import os

import numpy as np

from graphprep.formats import EdgeType
from graphprep.formats.npyio import npy_shape, read_rows
from graphprep.dispatch.plan import DispatchPlan

# popcount of every byte: the fallback for numpy < 2.0, which has no bitwise_count
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1)


def popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 of ``words``."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words)
    return _BYTE_BITS[words.view(np.uint8)].reshape(-1, 8).sum(axis=1)


class BitRank:
    """A set of IDs in ``[0, n)`` as bits, with ``rank(x)``: how many members lie below ``x``.
    Holds n / 8 bytes of bits and n / 8 bytes of running counts (one int64 per 64 IDs)."""

    def __init__(self, members: np.ndarray):
        """``members``: bool per ID (read once; not kept)."""
        self.n = len(members)
        packed = np.packbits(members, bitorder="little")
        padded = np.zeros(-(-len(packed) // 8) * 8, dtype=np.uint8)
        padded[:len(packed)] = packed
        self.words = padded.view("<u8")
        counts = popcount(self.words).astype(np.int64)
        self.before = np.cumsum(counts) - counts
        self.count = int(counts.sum())

    def rank(self, ids: np.ndarray) -> np.ndarray:
        """Members below each of ``ids`` (int64; any order)."""
        word = ids >> 6
        below = (np.uint64(1) << (ids & 63).astype(np.uint64)) - np.uint64(1)
        return self.before[word] + popcount(self.words[word] & below)

    def id_blocks(self, words: int = 1 << 16):
        """Yield the members in ascending order (int64), ``words`` * 64 IDs' worth at a time:
        holds one block's bits unpacked (a byte per ID) and its members, never all n."""
        for w0 in range(0, len(self.words), words):
            bits = np.unpackbits(self.words[w0:w0 + words].view(np.uint8), bitorder="little")
            yield np.flatnonzero(bits) + (w0 << 6)   # padding bits are never set


def find_halo(plan: DispatchPlan, t: str, p: int, node_map) -> BitRank:
    """The new IDs of the non-owned sources of part ``p``'s edges (all edge types from
    ``t``). Holds one byte per node of type ``t`` while reading, one block of bucket rows,
    and the result (n / 4 bytes). Collecting the sources themselves held the part's cross
    edges at once (2.1 GB at 10^9 R-MAT edges)."""
    start, end = node_map[t][p]
    seen = np.zeros(plan.graph.num_nodes[t], dtype=bool)
    for et in plan.graph.edge_types:
        if et.src == t:
            for src in _bucket_sources(plan, et, p):
                seen[src] = True
    seen[start:end] = False
    return BitRank(seen)


def _bucket_sources(plan: DispatchPlan, et: EdgeType, p: int, rows: int = 1 << 20):
    """Yield the new source IDs of part ``p``'s edges of ``et``, ``rows`` at a time, in no
    particular order."""
    for k in range(len(plan.graph.edge_chunks[et])):
        path = os.path.join(plan.edge_bucket(et, k), f"p{p:05d}.npy")
        count = npy_shape(path)[0][0]
        for lo in range(0, count, rows):
            yield read_rows(path, lo, lo + rows)[:, 1]
