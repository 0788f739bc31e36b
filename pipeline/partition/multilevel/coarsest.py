"""METIS on the coarsest level, in one task: multi-constraint vertex weights and edge weights.

The task holds the coarse graph's CSR (8 B/node + 16 B/entry for adjncy and adjwgt), its vertex
weights and METIS's own copies; the budget (``budget.py``) keeps that below the worker limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formats.output import save_npy

from ..metis_capi import part_graph
from ..metis_method import fill_empty_parts
from ..rebalance import rebalance
from .layout import Level


@dataclass(frozen=True)
class CoarsestTask:
    level: Level
    num_parts: int
    seed: int
    objective: int
    imbalance: float
    target: str


def partition_coarsest(task: CoarsestTask) -> dict:
    """Writes ``target`` (int64 part per coarse node); returns METIS's weighted cut."""
    lv = task.level
    csrs = [lv.read_csr(r) for r in range(lv.num_ranges)]
    xadj = np.zeros(lv.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.concatenate([np.diff(c.indptr) for c in csrs]), out=xadj[1:])
    adjncy = np.concatenate([c.adj for c in csrs]).astype(np.int64, copy=False)
    adjwgt = np.concatenate([c.wgt for c in csrs]).astype(np.int64, copy=False)
    del csrs
    weights = np.asarray(lv.vwgt())
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
