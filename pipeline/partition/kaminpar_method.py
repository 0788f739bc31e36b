"""``--method kaminpar``: KaMinPar (deep multilevel partitioning, MIT; ``pip install kaminpar``)
on the whole graph, in one Dask task, as ``--method metis`` does it.

The task assembles the same symmetrized, deduplicated, self-loop-free graph of all edge types
(``graph_ops.symmetric_csr``) and the same vertex-weight columns for ``--balance``
(``graph_ops.vertex_weights``). KaMinPar balances one node weight, so the columns are
folded into one (``weights.combined_weight``: each column over its total, summed, scaled to
integers); then ``rebalance`` enforces every constraint within ``--imbalance``, as after METIS.

That holds where the constraints go together (a planted graph: KaMinPar's parts came within
every cap before the rebalance). On a power-law graph they do not: balancing the sum, KaMinPar
put most isolated nodes into one part (R-MAT scale 19, 4 parts: 1.42x the mean nodes, no
edges) and the hubs into another, and the rebalance pass, a repair of small excesses, stopped
10-20% over (measured 1.09-1.21 at 4 and 8 parts). So where KaMinPar's parts exceed a cap by
more than ``REPAIRABLE``, or the rebalance pass leaves one exceeded, KaMinPar cuts the graph
into ``BLOCKS_PER_PART`` blocks per part instead, METIS groups the blocks into parts balancing
every constraint (``block_groups.py``, a graph of a few dozen vertices), and the rebalance pass
repairs what is left; blocks too coarse for that (a node type of 36 nodes among 8,000 over 3
parts needed 16 blocks per part) are doubled, up to ``MAX_BLOCKS_PER_PART``, and the best
balanced result is kept. ``stats.kaminpar_blocks`` says which ran (P: KaMinPar's parts, else
the number of blocks) and ``stats.kaminpar_runs`` how many KaMinPar runs it took.

KaMinPar 3.7.3's Python bindings build a graph only from a file, so the task writes the CSR and
the combined weights as a ParHIP binary graph (``parhip.py``: 4 B per adjacency entry, 12 B per
node) under ``out/.kaminpar`` and has KaMinPar load it. Our in-memory adjacency is dropped once
written: the rebalance pass reads the file's, memory-mapped. **It holds the whole graph in that
worker's memory**: the CSR build's sorted keys (16 B per edge) and CSR, then KaMinPar's own
copy (64-bit IDs and weights in the pip build) and its coarse levels, beside our offsets and
``[n, ncon]`` weights; ``pipeline/core/costs.py`` has the measured peak per edge.

One thread: a Dask worker runs one task per thread, and KaMinPar with more threads does not
give the same partition for the same seed (measured on R-MAT scale 16: two 2-thread runs
differed, 1-thread runs were identical).
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from graphprep.formats import ChunkedGraph
from graphprep.pipeline.core.requires import import_in_task, require
from graphprep.pipeline.partition.base import PartitionOptions
from graphprep.pipeline.partition.block_groups import group_blocks
from graphprep.pipeline.partition.graph_ops import (OBJECTIVES, WholeGraphTask,
                                                    check_whole_graph_options, enforce_balance,
                                                    save_parts, symmetric_csr, vertex_weights)
from graphprep.pipeline.partition.parhip import mapped_adjacency, write_parhip
from graphprep.pipeline.partition.rebalance import loads_of
from graphprep.pipeline.partition.weights import balance_keys, combined_weight

KAMINPAR_MISSING = ("--method kaminpar needs KaMinPar's Python bindings (a dependency of "
                    "graphprep): pip install kaminpar")
THREADS = 1
SCRATCH = ".kaminpar"
# KaMinPar's parts at most this far over a cap (load / cap) are left to the rebalance pass.
REPAIRABLE = 1.1
# Blocks per part where KaMinPar's own parts are too far apart. On R-MAT scale 19 (cut after
# the rebalance, 2 / 4 / 8 parts): 4 per part 3,877,299 / 5,816,491 / 6,814,932 input edges,
# 8: 3,870,611 / 5,836,495 / 6,868,658, 16: 3,879,123 / - / 6,900,143 (METIS: 3,703,338 /
# 5,681,459 / 6,788,052).
BLOCKS_PER_PART = 4
MAX_BLOCKS_PER_PART = 32


def run_kaminpar(kaminpar, path: str, num_parts: int, imbalance: float, seed: int
                 ) -> tuple[np.ndarray, int]:
    """KaMinPar (default context, ``THREADS`` threads, seeded) on the ParHIP file ``path``:
    ``(part of each node as int64, KaMinPar's edge cut of that graph)``. Holds KaMinPar's graph
    and working memory, and the partition as a list (8 B per node) while it is converted."""
    kaminpar.reseed(seed)
    graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
    solver = kaminpar.KaMinPar(THREADS, kaminpar.default_context())
    parts = solver.compute_partition(graph, num_parts, imbalance)
    cut = kaminpar.edge_cut(graph, parts)
    return np.asarray(parts, dtype=np.int64), int(cut)


def cap_ratio(parts: np.ndarray, weights: np.ndarray, num_parts: int, imbalance: float
              ) -> float:
    """The largest load over its cap, over parts and constraints; <= 1 when every constraint
    is met. Caps as the rebalance pass sets them (total / P * (1 + imbalance)), raised to what
    integer weights allow at best (the heaviest node, ceil(total / P)): 36 nodes of a type
    over 8 parts leave a part 5 of them, over a cap of 4.6. Holds ``[P, ncon]`` loads."""
    totals = weights.sum(axis=0)
    caps = np.maximum.reduce([totals / num_parts * (1 + imbalance), weights.max(axis=0),
                              np.ceil(totals / num_parts)])
    return float((loads_of(parts, weights, num_parts) / np.maximum(caps, 1e-12)).max())


def block_counts(num_parts: int, nodes: int) -> list[int]:
    """KaMinPar's block counts to try, in order: one per part, then ``BLOCKS_PER_PART`` per
    part doubling up to ``MAX_BLOCKS_PER_PART``, none above the node count."""
    counts, per_part = [num_parts], BLOCKS_PER_PART
    while per_part <= MAX_BLOCKS_PER_PART and per_part * num_parts <= nodes:
        counts.append(per_part * num_parts)
        per_part *= 2
    return counts


def balanced_parts(kaminpar, path: str, xadj: np.ndarray, adjncy: np.ndarray,
                   weights: np.ndarray, opts: PartitionOptions) -> tuple[np.ndarray, dict]:
    """KaMinPar's parts on the ParHIP file ``path``, every constraint of ``weights`` enforced;
    where they are too far apart for the rebalance pass, blocks grouped by METIS, finer until
    balanced (module docstring). ``adjncy``: the adjacency, memory-mapped. Returns ``(parts,
    info)``: the first balanced result, else the one least over its caps. Holds two
    partitions (this try's and the best) besides the rebalance pass's working set."""
    p, imb = opts.num_parts, opts.imbalance
    best, best_ratio, info = None, np.inf, {}
    for runs, k in enumerate(block_counts(p, len(xadj) - 1), start=1):
        blocks, cut = run_kaminpar(kaminpar, path, k, imb, opts.seed)
        parts = blocks if k == p else group_blocks(
            blocks, k, xadj, adjncy, weights, p, seed=opts.seed,
            objective=OBJECTIVES[opts.objective], imbalance=imb)
        del blocks
        if cap_ratio(parts, weights, p, imb) <= REPAIRABLE:
            parts = enforce_balance(parts, xadj, adjncy, weights, opts, warn=False)
        ratio = cap_ratio(parts, weights, p, imb)
        if ratio < best_ratio:
            best, best_ratio = parts, ratio
            info = {"kaminpar_edge_cut": cut, "kaminpar_blocks": k}
        info["kaminpar_runs"] = runs
        if ratio <= 1 + 1e-9:
            return best, info
    # none balanced: the rebalance pass's best effort (it logs the cap left exceeded), and
    # no part left empty
    return enforce_balance(best, xadj, adjncy, weights, opts), info


def kaminpar_parts(task: WholeGraphTask) -> dict:
    """Build the CSR, run KaMinPar on the combined weight, enforce every constraint, write
    ``<ntype>.npy``. Returns KaMinPar's own edge cut (of the simple symmetric graph, into
    ``kaminpar_blocks`` blocks, before the rebalance), the blocks, and the bytes of the CSR and
    weights."""
    kaminpar = import_in_task("kaminpar", KAMINPAR_MISSING, field="--method")
    graph, opts = task.graph, task.options
    xadj, adjncy, in_degree = symmetric_csr(graph,
                                            with_in_degree="edges" in balance_keys(opts.balance))
    weights = vertex_weights(graph, opts.balance, in_degree)
    del in_degree
    n, m = len(xadj) - 1, len(adjncy)
    info = {"csr_bytes": int(xadj.nbytes + adjncy.nbytes + weights.nbytes),
            "kaminpar_edge_cut": 0, "kaminpar_blocks": opts.num_parts, "kaminpar_runs": 0}
    if opts.num_parts == 1 or n == 0:
        save_parts(graph, np.zeros(n, dtype=np.int64), task.out)
        return info
    scratch = os.path.join(task.out, SCRATCH)
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, "graph.parhip")
    eid_bytes = 8 if kaminpar.__64bit__ else 4
    try:
        write_parhip(path, xadj, adjncy, combined_weight(weights), eid_bytes)
        # from here on, the file's adjacency (memory-mapped)
        adjncy = mapped_adjacency(path, n, m, eid_bytes)
        parts, found = balanced_parts(kaminpar, path, xadj, adjncy, weights, opts)
        info.update(found)
        del adjncy
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    save_parts(graph, parts, task.out)
    return info


class KaminparPartitioner:
    name = "kaminpar"

    def assign(self, graph: ChunkedGraph, options: PartitionOptions, runner, out: str) -> str:
        require(("kaminpar",), KAMINPAR_MISSING, field="--method")
        check_whole_graph_options(graph, options)
        (self.info,) = runner(kaminpar_parts, [WholeGraphTask(graph, options, out)], "kaminpar")
        return self.name
