"""The whole graph as one homogeneous CSR, its vertex weights and the balance pass: what the
partitioners share (``--method metis``, ``kaminpar``, and the multilevel partitioner's coarsest
graph and node ID space).

The CSR is the symmetrized, deduplicated, self-loop-free homogeneous graph of all edge types
(node types offset into one ID space, :func:`type_offsets`), assembled chunk by chunk; it holds
8 bytes per node (xadj) + 16 bytes per input edge (adjncy, both directions) + 8 bytes per node
per balance constraint, and during assembly the sorted edge keys (16 bytes per edge).

Balance constraints (METIS multi-constraint vertex weights, like DGL's):
``ntypes`` one column per node type (else one column of ones: node counts), ``train`` the
train_mask, ``edges`` the in-degree: a part's edges are the in-edges of the nodes it owns
(dispatch keeps every edge with its destination's owner, and the statistics' ``edges_per_part``
count them so), self-loops and repeated edges included. The default (``base.default_balance``)
is all three, ``train`` only where there are training nodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph, FormatError, read_edge_chunk
from graphprep.formats.fields import open_field
from graphprep.formats.output import save_npy
from graphprep.formats.validate import read_checked_edges
from graphprep.pipeline.core.arrayops import unique_ints
from graphprep.pipeline.partition.base import PartitionOptions, require_a_node_per_part
from graphprep.pipeline.partition.rebalance import rebalance
from graphprep.pipeline.partition.weights import balance_keys, constraint_columns

OBJECTIVES = {"cut": 0, "vol": 1}


def type_offsets(graph: ChunkedGraph) -> dict[str, int]:
    offsets, total = {}, 0
    for t in graph.node_types:
        offsets[t] = total
        total += graph.num_nodes[t]
    return offsets


def edge_cut(graph: ChunkedGraph, parts: np.ndarray) -> int:
    """Input edge rows whose ends lie in different parts (as the statistics count the cut).
    ``parts``: one part per node in the one ID space of all types (:func:`type_offsets`).
    Holds one edge chunk at a time, plus ``parts``: for tests and benchmarks of graphs whose
    node count fits in memory."""
    off = type_offsets(graph)
    cut = 0
    for et in graph.edge_types:
        for f in graph.edges[et].files:
            src, dst = read_edge_chunk(graph.path(f), graph.edges[et])
            cut += int((parts[src + off[et.src]] != parts[dst + off[et.dst]]).sum())
    return cut


def symmetric_csr(graph: ChunkedGraph, with_in_degree: bool = False):
    """``(xadj, adjncy, in_degree or None)`` of the undirected simple graph over all node types.

    Holds the edge keys of both directions (16 bytes per edge) while sorting them once.
    """
    offsets = type_offsets(graph)
    n = sum(graph.num_nodes.values())
    keys = []
    in_degree = np.zeros(n, dtype=np.int64) if with_in_degree else None
    for et in graph.edge_types:
        for rel, rows in zip(graph.edges[et].files, graph.edge_chunks[et]):
            # Checked before the offsets: an ID out of its type's range would land on another
            # type's node (or wrap around) and be partitioned as if it were an edge.
            src, dst = read_checked_edges(graph.path(rel), graph.edges[et], rows=rows,
                                          num_src=graph.num_nodes[et.src],
                                          num_dst=graph.num_nodes[et.dst], etype=et)
            src, dst = src + offsets[et.src], dst + offsets[et.dst]
            if with_in_degree:
                in_degree += np.bincount(dst, minlength=n)
            keep = src != dst
            keys += [src[keep] * n + dst[keep], dst[keep] * n + src[keep]]
            del src, dst, keep
    keys = unique_ints(np.concatenate(keys), inplace=True) if keys else np.empty(0, np.int64)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=n), out=xadj[1:])
    keys %= n  # in place: the column of each key is its neighbour
    return xadj, keys, in_degree


def vertex_weights(graph: ChunkedGraph, balance: tuple[str, ...], in_degree: np.ndarray | None):
    """``[n, ncon]`` int64 METIS vertex weights for the requested constraints (``weights.py``:
    node counts, then one column per other constraint, a combined one folded into one)."""
    return np.concatenate(constraint_columns(base_columns(graph, balance, in_degree), balance),
                          axis=1)


def base_columns(graph: ChunkedGraph, balance: tuple[str, ...], in_degree: np.ndarray | None
                 ) -> dict[str, np.ndarray]:
    """The columns per key that ``balance`` names: ``ntypes`` (always): one count column per
    node type with ``ntypes`` on a heterogeneous graph, else one of ones; ``train``, ``edges``
    (``in_degree``): one each, ``[n, 1]`` int64."""
    offsets = type_offsets(graph)
    n = sum(graph.num_nodes.values())
    keys = balance_keys(balance)
    if "ntypes" in keys and len(graph.node_types) > 1:
        counts = np.zeros((n, len(graph.node_types)), dtype=np.int64)
        for i, t in enumerate(graph.node_types):
            counts[offsets[t]:offsets[t] + graph.num_nodes[t], i] = 1
    else:
        counts = np.ones((n, 1), dtype=np.int64)
    base = {"ntypes": counts}
    if "train" in keys:
        base["train"] = train_column(graph, n)[:, None]
    if "edges" in keys:
        base["edges"] = np.asarray(in_degree, dtype=np.int64)[:, None]
    return base


def train_column(graph: ChunkedGraph, n: int) -> np.ndarray:
    offsets = type_offsets(graph)
    col = np.zeros(n, dtype=np.int64)
    found = False
    for t in graph.node_types:
        files = graph.node_data.get(t, {}).get("train_mask")
        if files is None:
            continue
        found = True
        # Rows per chunk checked from the headers first: a short or long mask would shift
        # every later row onto the wrong node (or past the type's end).
        mask = open_field(graph, files, f"node_data.{t}.train_mask", graph.num_nodes[t],
                          graph.node_chunks[t], "ignore")
        col[offsets[t]:offsets[t] + graph.num_nodes[t]] = mask.read(
            0, graph.num_nodes[t]).astype(bool)
    if not found or col.sum() == 0:
        raise FormatError("--balance train needs node data 'train_mask' with at least one true "
                          "row, and the graph has none", file=graph.path("metadata.json"),
                          field="node_data.*.train_mask")
    return col


@dataclass(frozen=True)
class WholeGraphTask:
    """One task holding the whole graph (``--method metis`` and ``kaminpar``): writes
    ``out/<ntype>.npy``."""

    graph: ChunkedGraph
    options: PartitionOptions
    out: str


def enforce_balance(parts: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray,
                    weights: np.ndarray, opts: PartitionOptions, warn: bool = True
                    ) -> np.ndarray:
    """A partitioner's ``parts`` (one per node) with every constraint column of ``weights``
    within ``opts.imbalance`` where moves allow (``rebalance``; ``warn``: log a cap left
    exceeded) and no part empty (:func:`fill_empty_parts`). ``adjncy`` may be memory-mapped.
    Holds what ``rebalance`` holds (a candidates x parts count matrix) besides a copy of
    ``parts``."""
    if opts.num_parts == 1:
        return parts
    parts = rebalance(parts, xadj, adjncy, weights, opts.num_parts, opts.imbalance, warn=warn)
    return fill_empty_parts(parts, xadj, opts.num_parts)


def save_parts(graph: ChunkedGraph, parts: np.ndarray, out: str) -> None:
    """Write ``out/<ntype>.npy`` (int32) from ``parts``, one part per node in the one ID space
    of all types (:func:`type_offsets`); holds one type's slice as int32 at a time."""
    for t, off in type_offsets(graph).items():
        save_npy(os.path.join(out, f"{t}.npy"),
                 parts[off:off + graph.num_nodes[t]].astype(np.int32))


def fill_empty_parts(parts: np.ndarray, xadj: np.ndarray, num_parts: int) -> np.ndarray:
    """Give every empty part one node: METIS may leave a part empty (few nodes, many parts,
    disconnected pieces) and an empty part breaks dispatch's and training's one-part-per-rank
    layout. Each empty part takes the lowest-degree node of the currently largest part (the
    cheapest move for the cut). Callers ensure ``len(parts) >= num_parts``. Holds P counts."""
    sizes = np.bincount(parts, minlength=num_parts)
    empty = np.flatnonzero(sizes == 0)
    if len(empty) == 0:
        return parts
    parts = parts.copy()
    degree = np.diff(xadj)
    for q in empty:  # a loop over empty parts (at most P), each step vectorized
        big = int(np.argmax(sizes))
        members = np.flatnonzero(parts == big)
        node = members[np.argmin(degree[members])]
        parts[node] = q
        sizes[big] -= 1
        sizes[q] += 1
    return parts


def check_whole_graph_options(graph: ChunkedGraph, options: PartitionOptions) -> None:
    """FormatError (exit 2) on the client, before a whole-graph task assembles the graph: fewer
    nodes than parts (METIS would exit 0 regardless), or ``--balance train`` on a graph without
    a train_mask field. Reads metadata only."""
    require_a_node_per_part(graph, options.num_parts)
    if "train" in balance_keys(options.balance):
        has = any("train_mask" in graph.node_data.get(t, {}) for t in graph.node_types)
        if not has:
            train_column(graph, 0)
