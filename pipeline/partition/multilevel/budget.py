"""The coarse-edge budget (issue 18): how small the coarsest graph must be, from memory.

``--method metis`` peaks at about ``METIS_BYTES_PER_EDGE`` (270) bytes per input edge, its
idle worker included (``pipeline/core/costs.py``, the one memory model: 2,658 MB measured at 10^7
edges: CSR, the sort of the keys, METIS's copies). METIS on the coarse graph costs the
same per edge plus its edge weights (adjwgt: the coarse CSR is ~1.5x the unweighted one). The
budget keeps the coarse METIS task within a quarter of what ``metis`` would need on the input,
so that with the worker's own baseline (~150 MB) its peak stays under a third of ``metis``'s
(measured at 10^7 edges: ~385 B per coarse edge above the baseline, model 405), and within
half of the smallest worker's memory limit. It is also capped at ``FLAT_EDGES``: a quarter of
``metis`` grows with the input, and the coarse task would then become the worker peak of a
big graph (6.7 GB at 10^8 edges); at 10^6 coarse edges it holds about what a range task holds
(~400 MB), so the worker peak stays flat as the graph grows. METIS itself coarsens to a few
hundred nodes: a coarse graph of 10^6 edges leaves it ample room.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphprep.pipeline.core.costs import METIS_BYTES_PER_EDGE   # measured peak of --method metis per input edge

WEIGHTED_FACTOR = 1.5               # coarse CSR carries adjwgt
SHARE_OF_METIS = 1 / 4
SHARE_OF_WORKER = 0.5
MIN_EDGES = 10_000                  # below this, METIS's memory is negligible anyway
FLAT_EDGES = 1_000_000              # ~400 MB in the coarse task: about a range task's peak


@dataclass(frozen=True)
class Budget:
    edges: int                       # undirected coarse edges allowed
    how: str                         # the derivation, logged and stored in the statistics


def derive_budget(input_edges: int, worker_bytes: int | None, override: int | None) -> Budget:
    """The budget: ``override`` when given (``--coarse-edges``), else from memory."""
    if override is not None:
        return Budget(int(override), f"--coarse-edges {override}")
    by_share = int(input_edges * SHARE_OF_METIS / WEIGHTED_FACTOR)
    how = (f"1/{round(1 / SHARE_OF_METIS)} of --method metis's "
           f"~{METIS_BYTES_PER_EDGE * input_edges / 1e9:.2f} GB on "
           f"{input_edges:,} edges at {METIS_BYTES_PER_EDGE * WEIGHTED_FACTOR:.0f} B per "
           f"weighted coarse edge -> {by_share:,}")
    edges = by_share
    if by_share > FLAT_EDGES:
        how += f"; capped at {FLAT_EDGES:,} (the coarse task within a range task's memory)"
        edges = FLAT_EDGES
    if worker_bytes:
        by_worker = int(worker_bytes * SHARE_OF_WORKER / (METIS_BYTES_PER_EDGE *
                                                          WEIGHTED_FACTOR))
        how += f"; half the worker limit {worker_bytes / 1e9:.2f} GB -> {by_worker:,}"
        edges = min(edges, by_worker)
    edges = max(edges, MIN_EDGES)
    return Budget(edges, how + f"; budget {edges:,} coarse edges")


def worker_memory_bytes(runner) -> int | None:
    """The smallest Dask worker memory limit (None: unlimited or an in-process runner, then
    this machine's memory)."""
    client = getattr(runner, "client", None)
    if client is not None:
        from graphprep.pipeline.core.cluster import workers_info
        limits = [w.get("memory_limit") or 0 for w in workers_info(client).values()]
        limits = [x for x in limits if x]
        if limits:
            return int(min(limits))
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except ImportError:
        return None
