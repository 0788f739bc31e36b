"""Rows of node data (features, labels) for any nodes: owned rows straight from the
memory-mapped part, remote rows by one request per owner part (all node types together).

Callers pass unique IDs (a block's source nodes are), so nothing is fetched twice. An optional
:class:`HaloCache` keeps the rows of the most referenced halo nodes, fetched once at start.
"""

from __future__ import annotations

import torch

from .dist_sampler import split_by_owner
from .partition import LocalPart, PartitionBook
from .service import PartServer, Transport
from .timing import Breakdown


LOG_DEGREE = "__log_degree"     # node data added at load by add_log_degree


def add_log_degree(part: LocalPart) -> None:
    """Register node data ``LOG_DEGREE`` in ``part``: ``log(1 + in-degree)`` of each owned
    node over every edge type of the part's CSC as served (float32 ``[n, 1]``; for link
    prediction the training graph, so held-out edges do not leak). Mean aggregation is blind
    to degree, and on power-law graphs the degrees of an edge's ends say much about whether
    it exists. Every rank registers it, so remote rows come through the usual requests."""
    for t in part.graph.node_types:
        degree = torch.zeros(len(part.orig_ids[t]))
        for et, csc in part.csc.items():
            if et.dst == t:
                degree += (csc.indptr[1:] - csc.indptr[:-1]).cpu().float()
        part.node_data[t][LOG_DEGREE] = torch.log1p(degree).unsqueeze(1)
        part.graph.node_feats.setdefault(t, {})[LOG_DEGREE] = {"dtype": "float32",
                                                               "shape": [1]}


class HaloCache:
    """Rows of one data array for the halo nodes this part's edges reference most, fetched
    once: ``ids[t]`` sorted new IDs, ``rows[t]`` their rows. Holds at most its byte budget."""

    def __init__(self, name: str, ids: dict[str, torch.Tensor], rows: dict[str, torch.Tensor]):
        self.name, self.ids, self.rows = name, ids, rows

    @property
    def nbytes(self) -> int:
        return sum(r.numel() * r.element_size() for r in self.rows.values())

    @classmethod
    def build(cls, fetcher: "FeatureFetcher", name: str, budget_bytes: int,
              scan_rows: int = 1 << 24) -> "HaloCache":
        """Pick, per node type with ``name``, the halo nodes with the most in-part edges
        (counted over ``indices`` in slices of ``scan_rows``) within an equal share of the
        budget, and fetch their rows (one request per owner)."""
        part, meta = fetcher.part, fetcher.meta
        types = [t for t in part.graph.node_types if name in meta.get(t, {})]
        chosen = {}
        for t in types:
            halo = part.halo_ids[t].cpu()
            row_bytes = fetcher.dim(t, name) * torch.empty((), dtype=getattr(
                torch, meta[t][name]["dtype"])).element_size()
            k = min(len(halo), budget_bytes // max(len(types), 1) // row_bytes)
            if k <= 0:
                continue
            owned, refs = len(part.orig_ids[t]), torch.zeros(len(halo), dtype=torch.long)
            for et, csc in part.csc.items():
                if et.src != t:
                    continue
                for chunk in torch.split(csc.indices.cpu(), scan_rows):
                    chunk = chunk[chunk >= owned].long() - owned
                    refs += torch.bincount(chunk, minlength=len(halo))
            chosen[t] = torch.sort(halo[torch.topk(refs, k).indices]).values
        return cls(name, chosen, fetcher.fetch(name, chosen) if chosen else {})

    def fill(self, ntype: str, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Copy cached rows of ``ids`` into ``rows``; returns the positions not cached."""
        cached = self.ids.get(ntype)
        if cached is None or not len(cached):
            return torch.arange(len(ids))
        pos = torch.searchsorted(cached, ids).clamp(max=len(cached) - 1)
        hit = cached[pos] == ids
        rows[hit] = self.rows[ntype][pos[hit]]
        return torch.nonzero(~hit).flatten()


class FeatureFetcher:
    """Gathers rows of a node data array by new ID across parts. Holds the partition book and
    the optional :class:`HaloCache`; each call holds the requested rows. Node types without the
    array get a constant ``[1.0]`` per node (a learned per-type input, for featureless types of
    heterogeneous graphs)."""

    def __init__(self, part: LocalPart, server: PartServer, transport: Transport,
                 breakdown: Breakdown | None = None, cache: HaloCache | None = None,
                 extra_inputs: tuple[str, ...] = ()):
        self.part, self.p, self.num_parts = part, part.p, part.graph.num_parts
        self.extra_inputs = extra_inputs
        self.meta = part.graph.node_feats
        self.server, self.transport = server, transport
        self.book = PartitionBook(part.graph)
        self.breakdown = breakdown or Breakdown()
        self.cache = cache

    def dim(self, ntype: str, name: str) -> int:
        """Row width of ``name`` for ``ntype`` (1 for a type without it)."""
        spec = self.meta.get(ntype, {}).get(name)
        return int(torch.tensor(spec["shape"]).prod()) if spec else 1

    def input_dim(self, ntype: str, name: str = "feat") -> int:
        """Width of the model input of ``ntype``: ``name`` and the extra input columns."""
        return self.dim(ntype, name) + sum(self.dim(ntype, e) for e in self.extra_inputs)

    def inputs(self, nodes: dict[str, torch.Tensor], name: str = "feat"
               ) -> dict[str, torch.Tensor]:
        """Model inputs of ``nodes``: rows of ``name`` with the ``extra_inputs`` columns
        appended (float32), in the given order, on CPU."""
        x = self.fetch(name, nodes)
        if not self.extra_inputs:
            return x
        extra = [self.fetch(e, nodes) for e in self.extra_inputs]
        return {t: torch.cat([x[t].float().flatten(1), *(e[t].float() for e in extra)], 1)
                for t in x}

    def fetch(self, name: str, nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows of ``name`` for ``nodes`` (per-type new IDs), in the given order, on CPU."""
        with self.breakdown.clock("feature_fetch"):
            have = {t: ids.cpu() for t, ids in nodes.items() if name in self.meta.get(t, {})}
            out = {t: torch.ones((len(ids), 1)) for t, ids in nodes.items() if t not in have}
            for t, ids in have.items():
                spec = self.meta[t][name]
                out[t] = torch.empty((len(ids), *spec["shape"]),
                                     dtype=getattr(torch, spec["dtype"]))
            cache = self.cache if self.cache is not None and self.cache.name == name else None
            todo = {t: cache.fill(t, ids, out[t]) if cache else torch.arange(len(ids))
                    for t, ids in have.items()}
            by_owner = split_by_owner(self.book, {t: have[t][pos] for t, pos in todo.items()},
                                      self.num_parts)
            asks = {q: {t: have[t][todo[t][pos]] for t, pos in where.items()}
                    for q, where in enumerate(by_owner) if where}
            remote = {q: self.transport.call(q, "rows", name, ask)
                      for q, ask in asks.items() if q != self.p}
            answers = {self.p: self.server.rows(name, asks[self.p])} if self.p in asks else {}
            answers.update({q: self.transport.wait(q, fut, "feature fetch")
                            for q, fut in remote.items()})
            for q, answer in answers.items():
                for t, rows in answer.items():
                    out[t][todo[t][by_owner[q][t]]] = rows
        return out
