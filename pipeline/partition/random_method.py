"""``--method random``: seeded, exactly balanced per node type, computed chunk by chunk.

Node ``i`` of a type goes to part ``perm(i) mod P`` where ``perm`` is a keyed pseudorandom
permutation of the type's IDs: part sizes differ by at most one node, every part gets a node of
every type with >= P nodes, and a task computes its slice alone (identical output for any
number of workers or chunks). A task holds one slice of IDs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph, FormatError
from graphprep.formats.npyio import write_rows
from graphprep.formats.schema import METADATA
from graphprep.pipeline.partition.base import PartitionOptions, create_assignment_files
from graphprep.pipeline.core.permutation import FeistelPermutation

SLICE = 1 << 22


@dataclass(frozen=True)
class RandomSliceTask:
    path: str
    num_nodes: int
    type_index: int
    start: int
    stop: int
    num_parts: int
    seed: int


def random_parts(task: RandomSliceTask) -> None:
    """Write the parts of nodes ``[start, stop)`` of one type; holds that slice."""
    perm = FeistelPermutation(task.num_nodes, task.seed, stream=task.type_index)
    write_rows(task.path, task.start, perm(np.arange(task.start, task.stop)) % task.num_parts)


def check_every_part_gets_a_node(graph: ChunkedGraph, num_parts: int) -> None:
    """Node ``i`` of a type goes to ``perm(i) mod P`` with ``perm(i) < n``: a type with ``n < P``
    nodes fills parts ``0..n-1`` only, so some part gets no node at all unless some type has
    at least ``P`` nodes. Raises :class:`FormatError` (exit 2) then; a type with fewer than
    ``P`` nodes beside a larger one is fine (its nodes go to the first parts)."""
    largest = max(graph.node_types, key=lambda t: graph.num_nodes[t])
    n = graph.num_nodes[largest]
    if num_parts > n:
        what = f"the graph has {n} nodes" if len(graph.node_types) == 1 else \
            f"its largest node type {largest!r} has {n} nodes"
        raise FormatError(f"{num_parts} parts but {what}: random partitioning (balanced per "
                          f"node type) would leave parts {n}..{num_parts - 1} empty; use at "
                          f"most {n} parts", file=graph.path(METADATA), field="--num-parts")


class RandomPartitioner:
    name = "random"

    def assign(self, graph: ChunkedGraph, options: PartitionOptions, runner, out: str) -> str:
        check_every_part_gets_a_node(graph, options.num_parts)
        create_assignment_files(graph, out)
        tasks = [RandomSliceTask(os.path.join(out, f"{t}.npy"), graph.num_nodes[t], i, s,
                                 min(s + SLICE, graph.num_nodes[t]), options.num_parts,
                                 options.seed)
                 for i, t in enumerate(graph.node_types)
                 for s in range(0, graph.num_nodes[t], SLICE)]
        runner(random_parts, tasks, "random partition")
        return self.name
