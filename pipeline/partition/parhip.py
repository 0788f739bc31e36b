"""Write a CSR graph as a ParHIP binary graph file, the input KaMinPar's Python bindings read.

KaMinPar 3.7.3's bindings build a graph only from a file (``kaminpar.load_graph``), and of its
two formats the binary one is written straight from numpy arrays (no text). Layout (KaMinPar's
``kaminpar-io/parhip_parser.cc``, an extension of ParHIP's format), all little-endian:

- header, 3 x uint64: ``version``, ``n``, ``m`` (adjacency entries: both directions);
- offsets, ``n + 1`` EIDs: the *byte address* in the file of each node's first neighbour;
- adjacency, ``m`` VIDs; then vertex weights, ``n`` VWGTs, when present (no edge weights here).

``version`` is a bit field, LSB first: no edge weights, no vertex weights, 32-bit EIDs, 32-bit
VIDs, 32-bit vertex weights, 32-bit edge weights. A 64-bit build of KaMinPar widens 32-bit
fields as it reads them; a 32-bit build *exits the process* on a 64-bit field, so the caller
picks ``eid_bytes`` for the build (``kaminpar.__64bit__``), and IDs and weights are written
32-bit where they fit (both builds read them).
"""

from __future__ import annotations

import numpy as np

from graphprep.formats.output import writing

HEADER_BYTES = 24
SLICE = 1 << 22            # adjacency entries converted and written at a time


def parhip_version(eid_bytes: int, vid_bytes: int, node_weights: bool) -> int:
    """The header's ``version`` bit field for unweighted edges, the given widths, and vertex
    weights (32-bit) or none."""
    return (1 | (0 if node_weights else 2) | (4 if eid_bytes == 4 else 0)
            | (8 if vid_bytes == 4 else 0) | 16 | 32)


def parhip_bytes(n: int, m: int, eid_bytes: int = 8, node_weights: bool = True) -> int:
    """Size of the file :func:`write_parhip` writes for ``n`` nodes and ``m`` adjacency
    entries (32-bit IDs and weights)."""
    return HEADER_BYTES + (n + 1) * eid_bytes + m * 4 + (n * 4 if node_weights else 0)


def write_parhip(path: str, xadj: np.ndarray, adjncy: np.ndarray,
                 node_weights: np.ndarray | None = None, eid_bytes: int = 8) -> int:
    """Write the graph ``xadj`` (``n + 1`` offsets) / ``adjncy`` (``m`` neighbours, both
    directions of every edge) with optional ``node_weights`` (``n`` positive integers below
    2^31) to ``path``. IDs are written 32-bit (``n`` below 2^32), offsets ``eid_bytes`` wide.
    Returns the bytes written. Holds the offsets (8 B per node) and one slice of ``SLICE``
    adjacency entries converted to 32 bits at a time."""
    n, m = len(xadj) - 1, len(adjncy)
    if n >= 1 << 32:
        raise ValueError(f"{n} nodes: ParHIP files are written with 32-bit node IDs here")
    base = HEADER_BYTES + (n + 1) * eid_bytes
    last = base + 4 * m
    if eid_bytes == 4 and last >= 1 << 32:
        raise ValueError(f"a {last}-byte file needs 64-bit offsets (a 64-bit KaMinPar build)")
    if node_weights is not None and len(node_weights) and (
            node_weights.min() < 1 or node_weights.max() >= 1 << 31):
        raise ValueError("node weights must lie in [1, 2^31)")
    eid = "<u8" if eid_bytes == 8 else "<u4"
    with writing(path), open(path, "wb") as f:
        np.array([parhip_version(eid_bytes, 4, node_weights is not None), n, m],
                 dtype="<u8").tofile(f)
        offsets = np.asarray(xadj, dtype=np.uint64) * np.uint64(4)
        offsets += np.uint64(base)
        offsets.astype(eid, copy=False).tofile(f)
        del offsets
        for s in range(0, m, SLICE):
            np.asarray(adjncy[s:s + SLICE]).astype("<u4").tofile(f)
        if node_weights is not None:
            np.asarray(node_weights).astype("<u4").tofile(f)
    return parhip_bytes(n, m, eid_bytes, node_weights is not None)


def mapped_adjacency(path: str, n: int, m: int, eid_bytes: int = 8) -> np.ndarray:
    """The adjacency of a file :func:`write_parhip` wrote, memory-mapped read-only (uint32,
    ``m`` entries): the CSR's neighbours without holding them in memory."""
    if m == 0:                       # an empty mapping is refused
        return np.empty(0, dtype="<u4")
    return np.memmap(path, dtype="<u4", mode="r", offset=HEADER_BYTES + (n + 1) * eid_bytes,
                     shape=(m,))
