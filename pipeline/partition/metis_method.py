"""``--method metis``: pymetis on the whole graph, in one Dask task.

The task assembles the symmetrized, deduplicated, self-loop-free homogeneous graph of all edge
types (node types offset into one ID space) chunk by chunk, then calls METIS. **It holds the
whole graph's CSR in that worker's memory**: 8 bytes per node (xadj) + 16 bytes per input edge
(adjncy, both directions) + 8 bytes per node per balance constraint, plus METIS's own working
copies (about 3-5x the CSR), and during assembly the sorted edge keys (16 bytes per edge).
Use the scalable partitioner for graphs whose CSR does not fit one machine.

METIS treats balance as a target; a greedy pass (``rebalance``) then moves the cheapest
boundary nodes until every constraint is within ``--imbalance``.

The assembly, the vertex weights and the balance pass are shared with ``--method kaminpar``
and the multilevel partitioner: ``graph_ops.py``.
"""

from __future__ import annotations

from graphprep.formats import ChunkedGraph
from graphprep.pipeline.partition.base import PartitionOptions
from graphprep.pipeline.partition.graph_ops import (OBJECTIVES, WholeGraphTask,
                                                    check_whole_graph_options, enforce_balance,
                                                    save_parts, symmetric_csr, vertex_weights)
from graphprep.pipeline.partition.metis_capi import part_graph
from graphprep.pipeline.partition.weights import balance_keys


def metis_parts(task: WholeGraphTask) -> dict:
    """Build the CSR, run METIS, write ``<ntype>.npy``. Returns METIS's own edge cut."""
    graph, opts = task.graph, task.options
    xadj, adjncy, in_degree = symmetric_csr(graph,
                                            with_in_degree="edges" in balance_keys(opts.balance))
    weights = vertex_weights(graph, opts.balance, in_degree)
    cut, parts = part_graph(opts.num_parts, xadj, adjncy, weights, seed=opts.seed,
                            objective=OBJECTIVES[opts.objective],
                            ufactor=max(1, int(round(opts.imbalance * 1000))))
    parts = enforce_balance(parts, xadj, adjncy, weights, opts)
    save_parts(graph, parts, task.out)
    return {"metis_edge_cut": int(cut), "csr_bytes": int(xadj.nbytes + adjncy.nbytes +
                                                           weights.nbytes)}


class MetisPartitioner:
    name = "metis"

    def assign(self, graph: ChunkedGraph, options: PartitionOptions, runner, out: str) -> str:
        check_whole_graph_options(graph, options)
        (self.info,) = runner(metis_parts, [WholeGraphTask(graph, options, out)], "metis")
        return self.name
