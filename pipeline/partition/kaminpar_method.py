"""``--method kaminpar``: KaMinPar (deep multilevel partitioning, MIT; ``pip install kaminpar``)
on the whole graph, in one Dask task, as ``--method metis`` does it.

The task assembles the same symmetrized, deduplicated, self-loop-free graph of all edge types
(``metis_method.symmetric_csr``) and the same vertex-weight columns for ``--balance``
(``metis_method.vertex_weights``). KaMinPar balances one node weight, so the columns are
folded into one (:func:`combined_weight`: each column over its total, summed, scaled to
integers); then ``rebalance`` enforces every constraint within ``--imbalance``, as after METIS.

KaMinPar 3.7.3's Python bindings build a graph only from a file, so the task writes the CSR and
the combined weights as a ParHIP binary graph (``parhip.py``: 4 B per adjacency entry, 12 B per
node) under ``out/.kaminpar`` and has KaMinPar load it. Our in-memory adjacency is dropped once
written: the rebalance pass reads the file's, memory-mapped. **It holds the whole graph in that
worker's memory**: the CSR build's sorted keys (16 B per edge) and CSR, then KaMinPar's own
copy (64-bit IDs and weights in the pip build) and its coarse levels, beside our offsets and
``[n, ncon]`` weights; ``pipeline/estimate.py`` has the measured peak per edge.

One thread: a Dask worker runs one task per thread, and KaMinPar with more threads does not
give the same partition for the same seed (measured on R-MAT scale 16: two 2-thread runs
differed, 1-thread runs were identical).
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from formats import ChunkedGraph, FormatError
from ..export.requires import import_in_task, require
from .base import PartitionOptions
from .metis_method import (MetisTask, check_whole_graph_options, enforce_balance, save_parts,
                           symmetric_csr, vertex_weights)
from .parhip import mapped_adjacency, write_parhip

KAMINPAR_MISSING = ("--method kaminpar needs KaMinPar's Python bindings: pip install kaminpar "
                    "(or pip install 'graphprep[bench]')")
THREADS = 1
SCRATCH = ".kaminpar"
# The combined weights' total stays below this, so that a 32-bit KaMinPar build (and our 32-bit
# weights in the ParHIP file) holds it.
WEIGHT_LIMIT = (1 << 31) - 1


def combined_weight(weights: np.ndarray, limit: int = WEIGHT_LIMIT) -> np.ndarray:
    """One integer weight per node from the ``[n, ncon]`` constraint columns: each column
    divided by its total (a column of total 0 adds nothing), summed over the columns, scaled so
    that the weights' sum stays within ``limit``; every weight is at least 1. Returns int64
    ``[n]``. Holds two float arrays of ``n``."""
    n, ncon = weights.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    scale = (limit - n) / ncon      # floor(share * scale) + 1 summed: <= ncon * scale + n
    if scale < 1:
        raise FormatError(f"{n} nodes: too many for --method kaminpar's 31-bit node weights; "
                          "use --method multilevel", field="--method")
    share = np.zeros(n, dtype=np.float64)
    for c in range(ncon):
        total = float(weights[:, c].sum())
        if total > 0:
            share += weights[:, c] / total
    share *= scale
    return np.floor(share).astype(np.int64) + 1


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


def kaminpar_parts(task: MetisTask) -> dict:
    """Build the CSR, run KaMinPar on the combined weight, rebalance every constraint, write
    ``<ntype>.npy``. Returns KaMinPar's own edge cut (of the simple symmetric graph, before
    the rebalance) and the bytes of the CSR and weights."""
    kaminpar = import_in_task("kaminpar", KAMINPAR_MISSING, field="--method")
    graph, opts = task.graph, task.options
    xadj, adjncy, in_degree = symmetric_csr(graph, with_in_degree="edges" in opts.balance)
    weights = vertex_weights(graph, opts.balance, in_degree)
    del in_degree
    n, m = len(xadj) - 1, len(adjncy)
    info = {"csr_bytes": int(xadj.nbytes + adjncy.nbytes + weights.nbytes),
            "kaminpar_edge_cut": 0}
    if opts.num_parts == 1 or n == 0:
        save_parts(graph, np.zeros(n, dtype=np.int64), task.out)
        return info
    scratch = os.path.join(task.out, SCRATCH)
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, "graph.parhip")
    eid_bytes = 8 if kaminpar.__64bit__ else 4
    try:
        write_parhip(path, xadj, adjncy, combined_weight(weights), eid_bytes)
        del adjncy                  # from here on, the file's adjacency (memory-mapped)
        parts, info["kaminpar_edge_cut"] = run_kaminpar(kaminpar, path, opts.num_parts,
                                                        opts.imbalance, opts.seed)
        adjncy = mapped_adjacency(path, n, m, eid_bytes)
        parts = enforce_balance(parts, xadj, adjncy, weights, opts)
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
        (self.info,) = runner(kaminpar_parts, [MetisTask(graph, options, out)], "kaminpar")
        return self.name
