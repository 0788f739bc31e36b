"""``prep partition --dry-run``: the peak memory of one worker and the disk the step needs,
from metadata alone (no cluster, no data read), by the memory model of ``core/costs.py``;
``auto`` is resolved as the step resolves it.
"""

from __future__ import annotations

from graphprep.formats import ChunkedGraph
from graphprep.pipeline.core.costs import (COARSE_EDGE, CHUNK_EDGE, KAMINPAR_FIXED,
                                           KAMINPAR_PER_EDGE, KAMINPAR_PER_NODE_CONSTRAINT,
                                           LEVEL_ENTRY, MAPPED_PER_CONSTRAINT, MAPPED_PER_NODE, MB,
                                           METIS_PER_EDGE, METIS_PER_NODE_CONSTRAINT, RANDOM_SLICE,
                                           WORKER_BASE, WORKER_IDLE, Estimate, graph_sizes)
from graphprep.pipeline.partition.auto import choose, kaminpar_installed
from graphprep.pipeline.partition.base import default_balance, num_constraints
from graphprep.pipeline.partition.multilevel.budget import derive_budget
from graphprep.pipeline.partition.multilevel.method import MAX_RANGES
from graphprep.pipeline.partition.parhip import parhip_bytes


def _whole_graph(label: str, name: str, fixed: int, per_edge: int, per_constraint: int,
                 nodes: int, edges: int, ncon: int, scratch: int, output: int) -> Estimate:
    """The estimate of a method holding the whole graph in one task (metis, kaminpar):
    ``fixed`` bytes plus ``per_edge`` per input edge above the idle worker, plus
    ``per_constraint`` per node for each balance constraint beyond the first."""
    per_node = per_constraint * (ncon - 1)
    return Estimate("partition", label,
                    WORKER_IDLE + fixed + per_edge * edges + per_node * nodes, scratch, output,
                    f"the whole graph in one task ({name}), "
                    + (f"{fixed / MB:,.0f} MB + " if fixed else "") + f"{per_edge} B per edge"
                    + (f" + {per_node} B per node for {ncon} balance constraints"
                       if per_node else ""))


def estimate_partition(graph: ChunkedGraph, method: str, num_parts: int, balance=None,
                       coarse_edges: int | None = None, worker_bytes: int | None = None,
                       range_size: int = 1 << 17) -> Estimate:
    """The estimate of ``prep partition`` with these options; ``auto`` is resolved as the
    step would resolve it for workers of ``worker_bytes``. ``balance`` None: the method's
    default (``default_balance``, from the metadata: a train_mask field counts)."""
    nodes, edges, chunk = graph_sizes(graph)
    if balance is None:
        balance = default_balance(graph, method, read_masks=False)
    ncon = num_constraints(graph, tuple(balance))
    label = method
    if method == "auto":
        method = choose(edges, worker_bytes, nodes, ncon, kaminpar_installed()).method
        label = f"auto -> {method}"
    output = nodes * 4
    if method == "random":
        return Estimate("partition", label, WORKER_BASE + min(nodes, RANDOM_SLICE) * 24, 0,
                        output, f"a slice of up to {RANDOM_SLICE:,} node IDs")
    if method == "metis":
        return _whole_graph(label, "METIS", 0, METIS_PER_EDGE, METIS_PER_NODE_CONSTRAINT,
                            nodes, edges, ncon, 0, output)
    if method == "kaminpar":
        # scratch: the ParHIP file (at most both directions of every input edge)
        return _whole_graph(label, "KaMinPar", KAMINPAR_FIXED, KAMINPAR_PER_EDGE,
                            KAMINPAR_PER_NODE_CONSTRAINT, nodes, edges, ncon,
                            parhip_bytes(nodes, 2 * edges), output)
    ranges = -(-nodes // max(range_size, -(-nodes // MAX_RANGES)))
    per_range = 2 * edges // max(ranges, 1)
    coarse = derive_budget(edges, worker_bytes, coarse_edges).edges
    tasks = {"a range task": per_range * LEVEL_ENTRY,
             "the coarsest graph's task": coarse * COARSE_EDGE,
             "an input chunk's task": chunk * CHUNK_EDGE}
    biggest = max(tasks, key=tasks.get)
    scratch = edges * (16 + 8) + nodes * 8 * (ncon + 6)
    mapped = MAPPED_PER_NODE + MAPPED_PER_CONSTRAINT * (ncon - 1)
    return Estimate("partition", label,
                    WORKER_BASE + tasks[biggest] + nodes * mapped, scratch, output,
                    f"{biggest}: {per_range:,} entries per range, coarse budget {coarse:,} "
                    f"edges, plus mapped per-node pages")
