"""``--method auto``: ``metis`` when its in-memory peak fits the memory budget, else ``kaminpar``
when its (about 5x smaller) in-memory peak fits, else ``multilevel``.

Why this order (issue 32; the figures: examples/benchmarks/RESULTS.md, "`--method auto`'s
order"): where METIS fits it gives the best cut under several constraints (KaMinPar's is a
little higher on R-MAT, equal on the planted graph, at a fraction of METIS's peak). Where
METIS does not fit, KaMinPar beats multilevel in time at the same or a better cut; multilevel
holds the least and takes every graph that fits no single task.

The estimate is the memory model's (``pipeline/core/costs.py``, also behind the multilevel
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

import importlib.util

from graphprep.pipeline.core.costs import kaminpar_peak_bytes, metis_peak_bytes
from graphprep.pipeline.partition.base import num_constraints
from graphprep.pipeline.partition.multilevel.budget import worker_memory_bytes

log = logging.getLogger(__name__)

SHARE = 0.6


@dataclass(frozen=True)
class AutoChoice:
    method: str                     # "metis", "kaminpar" or "multilevel"
    metis_peak_bytes: int           # estimated peak of --method metis on the input
    budget_bytes: int | None        # SHARE of the worker limit (None: unknown, metis chosen)
    kaminpar_peak_bytes: int = 0    # estimated peak of --method kaminpar (0: not installed)

    def describe(self) -> str:
        budget = "unknown" if self.budget_bytes is None else f"{self.budget_bytes / 1e9:.2f} GB"
        kaminpar = (f", kaminpar at ~{self.kaminpar_peak_bytes / 1e9:.2f} GB"
                    if self.kaminpar_peak_bytes else ", kaminpar not installed")
        return (f"--method auto: {self.method} (metis would peak at ~"
                f"{self.metis_peak_bytes / 1e9:.2f} GB{kaminpar}; budget {budget} = "
                f"{SHARE:.0%} of the smallest worker memory limit)")


def choose(input_edges: int, worker_bytes: int | None, nodes: int = 0, ncon: int = 1,
           kaminpar: bool = True) -> AutoChoice:
    """The method for ``input_edges`` edges and ``nodes`` nodes balanced by ``ncon``
    vertex-weight columns on workers of ``worker_bytes`` memory; ``kaminpar``: whether it
    may be chosen (installed). Pure."""
    peak = metis_peak_bytes(input_edges, nodes, ncon)
    kpeak = kaminpar_peak_bytes(input_edges, nodes, ncon) if kaminpar else 0
    budget = None if not worker_bytes else int(worker_bytes * SHARE)
    if budget is None or peak <= budget:
        method = "metis"
    elif kaminpar and kpeak <= budget:
        method = "kaminpar"
    else:
        method = "multilevel"
    return AutoChoice(method, peak, budget, kpeak)


def kaminpar_installed() -> bool:
    return importlib.util.find_spec("kaminpar") is not None


def choose_for(graph, runner, balance: tuple[str, ...] = ()) -> AutoChoice:
    """The choice for ``graph`` balanced by ``balance`` on ``runner``'s cluster; logged."""
    choice = choose(sum(graph.num_edges.values()), worker_memory_bytes(runner),
                    sum(graph.num_nodes.values()), num_constraints(graph, balance),
                    kaminpar_installed())
    log.info("%s", choice.describe())
    return choice
