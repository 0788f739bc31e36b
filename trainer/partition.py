"""One part of a partitioned graph as torch tensors, and the partition book.

Arrays are memory-mapped copy-on-write (``mmap_mode="c"``): tensors share the page cache with
other ranks on the machine and nothing is copied unless moved to another device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from formats import EdgeType
from formats.partitioned import PartitionedGraph, load_partitioned


def _tensor(path: str) -> torch.Tensor:
    return torch.from_numpy(np.load(path, mmap_mode="c"))


class PartitionBook:
    """Owner of per-type new node IDs: one ``searchsorted`` over the P range starts."""

    def __init__(self, graph: PartitionedGraph, device: str | torch.device = "cpu"):
        self.starts = {t: torch.tensor([r[0] for r in ranges], device=device)
                       for t, ranges in graph.node_map.items()}

    def owner(self, ntype: str, new_ids: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.starts[ntype], new_ids, right=True) - 1


@dataclass
class LocalCSC:
    """CSC of one edge type in a part: in-edges of the owned destination nodes."""

    indptr: torch.Tensor      # int64 [owned dst + 1]
    indices: torch.Tensor     # local source index: owned first, then halo positions
    orig_ids: torch.Tensor    # original edge ID of each edge

    def to(self, device) -> "LocalCSC":
        return LocalCSC(self.indptr.to(device), self.indices.to(device), self.orig_ids.to(device))


@dataclass
class LocalPart:
    """The arrays of part ``p``: owned/halo node IDs and a CSC per edge type."""

    graph: PartitionedGraph
    p: int
    orig_ids: dict[str, torch.Tensor]
    halo_ids: dict[str, torch.Tensor]
    csc: dict[EdgeType, LocalCSC]

    @classmethod
    def load(cls, graph_json: str, p: int) -> "LocalPart":
        g = load_partitioned(graph_json)
        orig = {t: _tensor(g.part_path(p, "nodes", t, "orig_ids.npy")) for t in g.node_types}
        halo = {t: _tensor(g.part_path(p, "nodes", t, "halo_ids.npy")) for t in g.node_types}
        csc = {et: LocalCSC(*(_tensor(g.part_path(p, "edges", et.dirname, f"{name}.npy"))
                              for name in ("indptr", "indices", "orig_ids")))
               for et in g.edge_types}
        return cls(g, p, orig, halo, csc)

    def local_to_new(self, ntype: str, local: torch.Tensor) -> torch.Tensor:
        """Per-type new node IDs of local source indices (owned, then halo)."""
        start = self.graph.node_map[ntype][self.p][0]
        owned = len(self.orig_ids[ntype])
        halo = self.halo_ids[ntype].to(local.device)
        return torch.where(local < owned, local + start,
                           halo[(local - owned).clamp(min=0, max=max(len(halo) - 1, 0))]
                           if len(halo) else local + start)
