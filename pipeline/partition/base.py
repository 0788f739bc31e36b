"""The partitioner plug-in interface: chunked graph in, ``<ntype>.npy`` assignment out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from graphprep.formats import ChunkedGraph, FormatError
from graphprep.formats.schema import METADATA
from graphprep.formats.fields import open_field
from graphprep.formats.npyio import new_npy
from graphprep.pipeline.partition.weights import counts_combined

BALANCE_KEYS = ("ntypes", "train", "edges")
# The default --balance of metis, multilevel, kaminpar and auto: a part's work in sampling and
# training is its edges (each edge is kept with its destination's owner, so a node weighs its
# in-degree) and its training seeds, not its node count. "train" only where some node type has
# a train_mask with a true row (as DGL recommends for training). random takes no constraints.
WORK_BALANCE = ("ntypes", "train", "edges")


@dataclass(frozen=True)
class PartitionOptions:
    num_parts: int
    seed: int = 0
    # Constraints: each a key of BALANCE_KEYS or keys joined by "+" (one combined weight,
    # weights.py), METIS vertex-weight columns. None: the method's default
    # (default_balance), resolved by run_partition before the manifest is written.
    balance: tuple[str, ...] | None = ()
    objective: str = "cut"            # METIS: "cut" (edge cut) or "vol" (communication volume)
    imbalance: float = 0.03           # METIS: allowed load imbalance per constraint (3%)
    coarse_edges: int | None = None   # multilevel: coarse-edge budget (None: derived from memory)


def default_balance(graph: ChunkedGraph, method: str, read_masks: bool = True
                    ) -> tuple[str, ...]:
    """The constraints ``--balance`` defaults to for ``method``: none for ``random``, else
    ``WORK_BALANCE``, without ``train`` when no node type has training nodes. ``read_masks``:
    read the train_mask chunks up to the first true row (one chunk for any real split); False
    (``--dry-run``, metadata only): a train_mask field counts."""
    if method == "random":
        return ()
    train = has_train_nodes(graph) if read_masks else any(
        "train_mask" in graph.node_data.get(t, {}) for t in graph.node_types)
    return tuple(k for k in WORK_BALANCE if k != "train" or train)


def has_train_nodes(graph: ChunkedGraph) -> bool:
    """Whether some node type's train_mask has a true row; reads its chunks in order and stops
    at the first true row (holds one chunk)."""
    for t in graph.node_types:
        files = graph.node_data.get(t, {}).get("train_mask")
        if files is None:
            continue
        mask = open_field(graph, files, f"node_data.{t}.train_mask", graph.num_nodes[t],
                          graph.node_chunks[t], "ignore")
        start = 0
        for rows in graph.node_chunks[t]:
            if np.asarray(mask.read(start, start + rows)).any():
                return True
            start += rows
    return False


def num_constraints(graph: ChunkedGraph, balance: tuple[str, ...]) -> int:
    """Columns of the vertex weights for ``balance`` (as ``vertex_weights`` builds them): node
    counts, one per node type with ``ntypes`` on a heterogeneous graph (else one of ones),
    unless ``ntypes`` is combined; plus one per other constraint (``train``, ``edges`` or a
    combined one)."""
    counts = len(graph.node_types) if "ntypes" in balance and len(graph.node_types) > 1 else 1
    return (0 if counts_combined(balance) else counts) + sum(c != "ntypes" for c in balance)


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
        new_npy(os.path.join(out, f"{t}.npy"), (graph.num_nodes[t],), np.int32)
