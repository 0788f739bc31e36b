"""``--method multilevel``: near-METIS partitioning of graphs whose CSR does not fit one task.

Modules, one job each: ``layout`` (on-disk levels: range CSR files + memory-mapped arrays),
``symmetric`` (level 0: one shuffle of the input chunks into a symmetric range CSR), ``coarsen``
(size-constrained label propagation), ``contract`` (coarse weighted graph), ``coarsest`` (METIS
with vertex and edge weights), ``refine`` (projection, label-propagation refinement, balance),
``budget`` (coarse-edge budget from memory), ``method`` (the ``Partitioner``).
"""

from graphprep.pipeline.partition.multilevel.method import MultilevelPartitioner

__all__ = ["MultilevelPartitioner"]
