"""METIS on the coarsest level, in one task: multi-constraint vertex weights and edge weights.

The task holds the coarse graph's CSR (8 B/node + 16 B/entry for adjncy and adjwgt), its vertex
weights and METIS's own copies; the budget (``budget.py``) keeps that below the worker limit.
When coarsening stalled above the budget, METIS gets only the heaviest coarse edges, up to the
budget (threshold sparsification, as KaMinPar sparsifies dense coarse graphs): the task reads
one range at a time and keeps at most the budget (``sparsify``), and refinement then sees
every edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphprep.formats.output import save_npy

from graphprep.pipeline.partition.metis_capi import part_graph
from graphprep.pipeline.partition.graph_ops import fill_empty_parts
from graphprep.pipeline.partition.rebalance import rebalance
from graphprep.pipeline.partition.multilevel.layout import Level, RangeCSR
from graphprep.pipeline.partition.multilevel.sparsify import Sparsifier


def _kept(csr: RangeCSR, sparse: Sparsifier | None) -> tuple[np.ndarray, ...]:
    """(degrees, adj, wgt) of a range, filtered by ``sparse``."""
    if sparse is None:
        return np.diff(csr.indptr), csr.adj, csr.wgt
    rows, keep = sparse.kept(csr)
    return np.bincount(rows, minlength=csr.stop - csr.start), csr.adj[keep], csr.wgt[keep]


@dataclass(frozen=True)
class CoarsestTask:
    level: Level
    num_parts: int
    seed: int
    objective: int
    imbalance: float
    target: str
    sparse: Sparsifier | None = None     # set when the level holds more than the budget
    first_column: int = 0                # METIS balances the weight columns from this one on


def partition_coarsest(task: CoarsestTask) -> dict:
    """Writes ``target`` (int64 part per coarse node); returns METIS's weighted cut."""
    lv = task.level
    # Block by block: when sparsified, a task never holds more than the budget plus a block.
    kept = [_kept(csr, task.sparse) for r in range(lv.num_ranges)
            for csr in lv.read_csr_blocks(r)]
    xadj = np.zeros(lv.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.concatenate([k[0] for k in kept]), out=xadj[1:])
    adjncy = np.concatenate([k[1] for k in kept]).astype(np.int64, copy=False)
    adjwgt = np.concatenate([k[2] for k in kept]).astype(np.int64, copy=False)
    del kept
    weights = np.ascontiguousarray(lv.vwgt()[:, task.first_column:])
    cut, parts = part_graph(task.num_parts, xadj, adjncy, weights, seed=task.seed,
                            objective=task.objective,
                            ufactor=max(1, int(round(task.imbalance * 1000))), eweights=adjwgt)
    if task.num_parts > 1:
        parts = rebalance(parts, xadj, adjncy, weights, task.num_parts, task.imbalance,
                          adjwgt=adjwgt)
        if lv.num_nodes >= task.num_parts:
            parts = fill_empty_parts(parts, xadj, task.num_parts)
    save_npy(task.target, parts.astype(np.int64))
    return {"coarse_metis_edge_cut": int(cut), "coarse_nodes": lv.num_nodes,
            "coarse_edges": len(adjncy) // 2,
            "coarse_csr_bytes": int(xadj.nbytes + adjncy.nbytes + adjwgt.nbytes +
                                    weights.nbytes)}
