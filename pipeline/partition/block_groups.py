"""Group the blocks of a fine partition into parts that balance every constraint: METIS on the
quotient graph.

A partitioner that balances one weight (KaMinPar on the combined weight) can leave parts far
apart in each constraint: on R-MAT one part took most isolated nodes (far more than its share
of the nodes, no edges) and another the hubs, and the rebalance pass, built to repair a few
percent, stopped with a part well over its caps (examples/benchmarks/RESULTS.md, "Before the
blocks"). Cut into ``K`` blocks instead (a few per part), the blocks differ as
much, but grouping them is a small multi-constraint problem: the quotient graph has one vertex
per block, weighted by the block's load in each constraint, and one edge per pair of blocks,
weighted by the adjacency entries between them; METIS (multi-constraint vertex weights, edge
weights) puts the blocks into parts, cutting as few of those edges as it can.
"""

from __future__ import annotations

import numpy as np

from graphprep.pipeline.partition.metis_capi import part_graph
from graphprep.pipeline.partition.rebalance import loads_of

SLICE = 1 << 22              # adjacency entries read at a time (8 B each per temporary)


def quotient_graph(blocks: np.ndarray, num_blocks: int, xadj: np.ndarray, adjncy: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(qxadj, qadjncy, qweights)``: the graph of blocks, an edge between two blocks weighted
    by the adjacency entries from one to the other (symmetric when the graph is). ``blocks``:
    block of each node; ``adjncy`` may be memory-mapped. Holds a ``num_blocks^2`` count matrix
    and one slice of ``SLICE`` entries (their rows, 8 B each) at a time."""
    n = len(xadj) - 1
    counts = np.zeros(num_blocks * num_blocks, dtype=np.int64)
    degree = np.diff(xadj)
    start = 0
    while start < n:
        # the nodes whose entries fit in one slice (at least one node)
        stop = max(int(np.searchsorted(xadj, xadj[start] + SLICE, side="right")) - 1, start + 1)
        stop = min(stop, n)
        rows = np.repeat(blocks[start:stop], degree[start:stop])
        cols = blocks[np.asarray(adjncy[xadj[start]:xadj[stop]])]
        counts += np.bincount(rows * num_blocks + cols, minlength=num_blocks * num_blocks)
        start = stop
    counts = counts.reshape(num_blocks, num_blocks)
    np.fill_diagonal(counts, 0)
    qxadj = np.zeros(num_blocks + 1, dtype=np.int64)
    np.cumsum((counts > 0).sum(axis=1), out=qxadj[1:])
    src, dst = np.nonzero(counts)
    return qxadj, dst.astype(np.int64), counts[src, dst]


def group_blocks(blocks: np.ndarray, num_blocks: int, xadj: np.ndarray, adjncy: np.ndarray,
                 weights: np.ndarray, num_parts: int, *, seed: int = 0, objective: int = 0,
                 imbalance: float = 0.03) -> np.ndarray:
    """The part of each node: the blocks (``blocks``, ``num_blocks`` of them) grouped into
    ``num_parts`` parts by METIS on :func:`quotient_graph`, each of the ``[n, ncon]``
    ``weights`` columns balanced within ``imbalance`` (as a target: the rebalance pass
    enforces it). Holds the quotient graph, ``[num_blocks, ncon]`` loads and the result."""
    qxadj, qadjncy, qweights = quotient_graph(blocks, num_blocks, xadj, adjncy)
    loads = np.rint(loads_of(blocks, weights, num_blocks)).astype(np.int64)
    _, group = part_graph(num_parts, qxadj, qadjncy, loads, seed=seed, objective=objective,
                          ufactor=max(1, int(round(imbalance * 1000))), eweights=qweights)
    return np.asarray(group, dtype=np.int64)[blocks]
