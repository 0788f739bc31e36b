"""The partitioner plug-in interface: chunked graph in, ``<ntype>.npy`` assignment out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from formats import ChunkedGraph, FormatError
from formats.schema import METADATA

BALANCE_KEYS = ("ntypes", "train", "edges")


@dataclass(frozen=True)
class PartitionOptions:
    num_parts: int
    seed: int = 0
    balance: tuple[str, ...] = ()      # subset of BALANCE_KEYS (METIS vertex-weight constraints)
    objective: str = "cut"            # METIS: "cut" (edge cut) or "vol" (communication volume)
    imbalance: float = 0.03           # METIS: allowed load imbalance per constraint (3%)
    coarse_edges: int | None = None   # multilevel: coarse-edge budget (None: derived from memory)


class Partitioner(Protocol):
    """A partition method. ``assign`` writes ``out/<ntype>.npy`` (int32, one entry per node of
    the type, values in ``[0, num_parts)``) for every node type and returns the name of the
    algorithm that really ran (it goes into ``partition_meta.json``)."""

    name: str

    def assign(self, graph: ChunkedGraph, options: PartitionOptions, runner, out: str) -> str:
        ...


def require_a_node_per_part(graph: ChunkedGraph, num_parts: int) -> None:
    """FormatError (exit 2) when the graph has fewer nodes than parts: a part would be empty."""
    total = sum(graph.num_nodes.values())
    if num_parts > total:
        raise FormatError(f"{num_parts} parts but the graph has {total} nodes: a part would be "
                          "empty; use at most as many parts as nodes",
                          file=graph.path(METADATA), field="--num-parts")


def create_assignment_files(graph: ChunkedGraph, out: str) -> None:
    """Pre-size ``out/<ntype>.npy`` so chunk tasks can fill their slices in place."""
    for t in graph.node_types:
        np.lib.format.open_memmap(os.path.join(out, f"{t}.npy"), mode="w+", dtype=np.int32,
                                  shape=(graph.num_nodes[t],)).flush()
