"""Rows of node data (features, labels) for any nodes: owned rows straight from the
memory-mapped part, remote rows by one request per owner part (all node types together).

Callers pass unique IDs (a block's source nodes are), so nothing is fetched twice.
"""

from __future__ import annotations

import torch

from .dist_sampler import split_by_owner
from .partition import LocalPart, PartitionBook
from .service import PartServer, Transport
from .timing import Breakdown


class FeatureFetcher:
    """Gathers rows of a node data array by new ID across parts. Holds the partition book only;
    each call holds the requested rows. Node types without the array get a constant ``[1.0]``
    per node (a learned per-type input, for featureless types of heterogeneous graphs)."""

    def __init__(self, part: LocalPart, server: PartServer, transport: Transport,
                 breakdown: Breakdown | None = None):
        self.p, self.num_parts = part.p, part.graph.num_parts
        self.meta = part.graph.node_feats
        self.server, self.transport = server, transport
        self.book = PartitionBook(part.graph)
        self.breakdown = breakdown or Breakdown()

    def dim(self, ntype: str, name: str) -> int:
        """Row width of ``name`` for ``ntype`` (1 for a type without it)."""
        spec = self.meta.get(ntype, {}).get(name)
        return int(torch.tensor(spec["shape"]).prod()) if spec else 1

    def fetch(self, name: str, nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows of ``name`` for ``nodes`` (per-type new IDs), in the given order, on CPU."""
        with self.breakdown.clock("feature_fetch"):
            have = {t: ids.cpu() for t, ids in nodes.items() if name in self.meta.get(t, {})}
            out = {t: torch.ones((len(ids), 1)) for t, ids in nodes.items() if t not in have}
            by_owner = split_by_owner(self.book, have, self.num_parts)
            asks = {q: {t: have[t][pos] for t, pos in where.items()}
                    for q, where in enumerate(by_owner) if where}
            remote = {q: self.transport.call(q, "rows", name, ask)
                      for q, ask in asks.items() if q != self.p}
            answers = {self.p: self.server.rows(name, asks[self.p])} if self.p in asks else {}
            answers.update({q: fut.wait() for q, fut in remote.items()})
            for t, ids in have.items():
                spec = self.meta[t][name]
                rows = torch.empty((len(ids), *spec["shape"]), dtype=getattr(torch, spec["dtype"]))
                for q, answer in answers.items():
                    if t in answer:
                        rows[by_owner[q][t]] = answer[t]
                out[t] = rows
        return out
