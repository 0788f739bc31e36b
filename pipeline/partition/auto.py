"""``--method auto``: ``metis`` when its in-memory peak fits the memory budget, else
``multilevel``.

The estimate is the memory model's (``pipeline/estimate.py``, also behind the multilevel
budget): ``--method metis`` peaks at about ``METIS_BYTES_PER_EDGE`` (270) bytes per input edge in
its one task (measured: 2,658 MB at 10^7 edges, node counts balanced), plus
``METIS_PER_NODE_CONSTRAINT`` bytes per node for each further vertex-weight column (the default
``--balance`` adds two, edges and train, and on a heterogeneous graph one per node type). The
budget is ``SHARE`` of the smallest Dask worker memory
limit (the embedded cluster's default limit is the machine's memory divided among its workers),
or of this machine's memory when the workers have no limit. ``SHARE`` stays below Dask's pause
threshold (80% of the limit) with room for the worker's own baseline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..estimate import METIS_BYTES_PER_EDGE, metis_peak_bytes  # noqa: F401 (tests, bench)
from .base import num_constraints
from .multilevel.budget import worker_memory_bytes

log = logging.getLogger(__name__)

SHARE = 0.6


@dataclass(frozen=True)
class AutoChoice:
    method: str                     # "metis" or "multilevel"
    metis_peak_bytes: int           # estimated peak of --method metis on the input
    budget_bytes: int | None        # SHARE of the worker limit (None: unknown, metis chosen)

    def describe(self) -> str:
        budget = "unknown" if self.budget_bytes is None else f"{self.budget_bytes / 1e9:.2f} GB"
        return (f"--method auto: {self.method} (metis would peak at ~"
                f"{self.metis_peak_bytes / 1e9:.2f} GB; budget {budget} = {SHARE:.0%} of the "
                "smallest worker memory limit)")


def choose(input_edges: int, worker_bytes: int | None, nodes: int = 0,
           ncon: int = 1) -> AutoChoice:
    """The method for ``input_edges`` edges and ``nodes`` nodes balanced by ``ncon``
    vertex-weight columns on workers of ``worker_bytes`` memory (pure)."""
    peak = metis_peak_bytes(input_edges, nodes, ncon)
    budget = None if not worker_bytes else int(worker_bytes * SHARE)
    method = "metis" if budget is None or peak <= budget else "multilevel"
    return AutoChoice(method, peak, budget)


def choose_for(graph, runner, balance: tuple[str, ...] = ()) -> AutoChoice:
    """The choice for ``graph`` balanced by ``balance`` on ``runner``'s cluster; logged."""
    choice = choose(sum(graph.num_edges.values()), worker_memory_bytes(runner),
                    sum(graph.num_nodes.values()), num_constraints(graph, balance))
    log.info("%s", choice.describe())
    return choice
