"""What the report plots of a partitioned graph, gathered one Dask task per part.

A task reads its part's CSC ``indptr``/``indices`` per edge type, its halo lists and its
train masks, and returns small arrays: an in-degree histogram in powers of two, the edges that
come into the part from each part (a row of the cut matrix), halo and train counts. It holds
one edge type's index arrays of one part at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphprep.formats.partitioned import PartitionedGraph

from graphprep.pipeline.export.parts import PartView

DEGREE_BINS = 64          # bin b holds degrees in [2^(b-1), 2^b); bin 0 holds degree 0


@dataclass
class GraphProfile:
    """Summed over parts: ``degree_hist {etype: [DEGREE_BINS]}`` (nodes per in-degree bin),
    ``cut [P, P]`` (edges from part q, row, into part p, column), ``nodes``, ``edges``,
    ``halo``, ``train`` per part (``{ntype: [P]}`` or ``[P]``)."""

    num_parts: int
    degree_hist: dict[str, np.ndarray]
    cut: np.ndarray
    nodes: dict[str, list[int]]
    edges: list[int]
    halo: dict[str, list[int]]
    train: list[int] | None


def degree_bins(degrees: np.ndarray) -> np.ndarray:
    """Nodes per power-of-two degree bin (``DEGREE_BINS`` counts)."""
    bins = np.zeros(len(degrees), np.int64)
    nz = degrees > 0
    bins[nz] = np.floor(np.log2(degrees[nz])).astype(np.int64) + 1
    return np.bincount(bins, minlength=DEGREE_BINS)[:DEGREE_BINS]


def part_profile(task: tuple[PartitionedGraph, int]) -> dict:
    """One part's histogram, cut row, halo and train counts."""
    g, p = task
    view = PartView(g, p)
    hist, into = {}, np.zeros(g.num_parts, np.int64)
    for et in g.edge_types:
        base = ("edges", et.dirname)
        indptr = np.asarray(view.load(*base, "indptr.npy"))
        hist[str(et)] = degree_bins(np.diff(indptr))
        indices = np.asarray(view.load(*base, "indices.npy"))
        owned = g.node_map[et.src][p][1] - g.node_map[et.src][p][0]
        remote = indices[indices >= owned].astype(np.int64) - owned
        halo = np.asarray(view.load("nodes", et.src, "halo_ids.npy"))
        into += np.bincount(g.owner(et.src, halo[remote]), minlength=g.num_parts)
        into[p] += len(indices) - len(remote)
    halo_counts = {t: int(view.load("nodes", t, "halo_ids.npy").shape[0]) for t in g.node_types}
    train = None
    if any("train_mask" in g.node_feats.get(t, {}) for t in g.node_types):
        train = sum(int(np.count_nonzero(view.load("node_feats", t, "train_mask.npy")))
                    for t in g.node_types if "train_mask" in g.node_feats.get(t, {}))
    return {"hist": hist, "into": into, "halo": halo_counts, "train": train}


def profile_partitioned(g: PartitionedGraph, runner) -> GraphProfile:
    """The report's figures of ``g``, one task per part."""
    parts = runner(part_profile, [(g, p) for p in range(g.num_parts)], "report parts")
    P = g.num_parts
    return GraphProfile(
        num_parts=P,
        degree_hist={str(et): sum(r["hist"][str(et)] for r in parts) for et in g.edge_types},
        cut=np.stack([r["into"] for r in parts], axis=1),
        nodes={t: [r[1] - r[0] for r in g.node_map[t]] for t in g.node_types},
        edges=[sum(g.edge_map[et][p][1] - g.edge_map[et][p][0] for et in g.edge_types)
               for p in range(P)],
        halo={t: [r["halo"][t] for r in parts] for t in g.node_types},
        train=[r["train"] for r in parts] if parts[0]["train"] is not None else None)
