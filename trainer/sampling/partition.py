"""One part of a partitioned graph as torch tensors, and the partition book.

Arrays are memory-mapped copy-on-write (``mmap_mode="c"``): tensors share the page cache with
other ranks on the machine and nothing is copied unless moved to another device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphprep.formats import EdgeType
from graphprep.formats.partitioned import MESSAGE_END, PartitionedGraph, load_partitioned
from graphprep.formats.sparse import CSR, csr_paths, load_csr

from graphprep.trainer.data.sparse import SparseRows


ORIG_ID = "__orig_id"      # node data of every part: each owned node's original ID


def _tensor(path: str) -> torch.Tensor:
    return torch.from_numpy(np.load(path, mmap_mode="c"))


def is_sparse_spec(spec: dict | None) -> bool:
    """Whether a graph.json data spec describes a sparse (CSR) field."""
    return bool(spec) and spec.get("format") == CSR


def _node_field(graph: PartitionedGraph, p: int, ntype: str, name: str, spec: dict):
    """Node data ``name`` of part ``p``: a tensor over ``NAME.npy``, or for a CSR field
    (``spec["format"] == "csr"``) a :class:`SparseRows` over ``NAME.{indptr,indices,
    values}.npy``; memory-mapped copy-on-write either way (nothing read)."""
    if not is_sparse_spec(spec):
        return _tensor(graph.part_path(p, "node_feats", ntype, f"{name}.npy"))
    base = graph.part_path(p, "node_feats", ntype, name)
    dim = int(np.prod(spec["shape"]))
    load_csr(base, dim)       # the three files agree (a FormatError names the one that does not)
    paths = csr_paths(base)
    return SparseRows(*(_tensor(paths[a]) for a in ("indptr", "indices", "values")), dim)


class PartitionBook:
    """Owner of per-type new node IDs: one ``searchsorted`` over the P range starts."""

    def __init__(self, graph: PartitionedGraph, device: str | torch.device = "cpu"):
        self.starts = {t: torch.tensor([r[0] for r in ranges], device=device)
                       for t, ranges in graph.node_map.items()}

    def owner(self, ntype: str, new_ids: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.starts[ntype], new_ids, right=True) - 1


@dataclass
class LocalCSC:
    """CSC of one edge type in a part: in-edges of the owned destination nodes.

    ``stored_pos`` (host): each served edge's position in the part's stored CSC, where its
    edge data rows and original ID are; ``None`` when the CSC is the stored one (then a
    position is its own). Set by :meth:`LocalPart.without_edges`: int32 (4 B per kept edge)
    while the stored CSC has fewer than 2^31 edges, else int64.

    ``ends``: where each destination's served in-edges end, when that is before the next
    destination's start (``indptr[v + 1]``): the stored CSC with each destination's held-out
    in-edges last, served without them (:meth:`LocalPart.without_held_out_tail`)."""

    indptr: torch.Tensor      # int64 [owned dst + 1]
    indices: torch.Tensor     # local source index: owned first, then halo positions
    stored_orig_ids: torch.Tensor    # original edge ID of each edge of the stored CSC (mapped)
    stored_pos: torch.Tensor | None = None
    ends: torch.Tensor | None = None  # int64 [owned dst], or None: indptr[1:]

    @property
    def degrees(self) -> torch.Tensor:
        """Served in-degree of each owned destination."""
        return (self.indptr[1:] if self.ends is None else self.ends) - self.indptr[:-1]

    def served_positions(self) -> torch.Tensor:
        """The CSC position (of ``indices``) of every served edge, in served order (host,
        int64): each destination's head up to ``ends``, else every position."""
        indptr = self.indptr.cpu()
        if self.ends is None:
            return torch.arange(int(indptr[-1]))
        d = self.degrees.cpu()
        skip = indptr[:-1] - (torch.cumsum(d, 0) - d)
        return torch.arange(int(d.sum())) + torch.repeat_interleave(skip, d)

    def to(self, device) -> "LocalCSC":
        """Structure on ``device``; edge IDs and ``stored_pos`` stay on the host, where edge
        data is."""
        return self.moved(lambda t: t.to(device))

    def moved(self, move) -> "LocalCSC":
        """The structure (indptr, indices, ends) through ``move``; the rest as it is."""
        return LocalCSC(move(self.indptr), move(self.indices), self.stored_orig_ids,
                        self.stored_pos, None if self.ends is None else move(self.ends))

    def stored(self, pos: torch.Tensor) -> torch.Tensor:
        """Positions in the stored CSC (edge data rows) of served CSC positions ``pos``
        (host tensors), int64."""
        return pos if self.stored_pos is None else self.stored_pos.index_select(0, pos).long()

    def orig_ids(self, pos: torch.Tensor) -> torch.Tensor:
        """Original edge IDs of the edges at served CSC positions ``pos`` (host tensors)."""
        return self.stored_orig_ids.index_select(0, self.stored(pos))


@dataclass
class LocalPart:
    """The arrays of part ``p``: owned/halo node IDs, a CSC per edge type, and node data
    per type and name: a tensor, or :class:`SparseRows` for a CSR field."""

    graph: PartitionedGraph
    p: int
    orig_ids: dict[str, torch.Tensor]
    halo_ids: dict[str, torch.Tensor]
    csc: dict[EdgeType, LocalCSC]
    node_data: dict[str, dict[str, "torch.Tensor | SparseRows"]]

    @classmethod
    def load(cls, graph_json: str, p: int) -> "LocalPart":
        g = load_partitioned(graph_json)
        orig = {t: _tensor(g.part_path(p, "nodes", t, "orig_ids.npy")) for t in g.node_types}
        halo = {t: _tensor(g.part_path(p, "nodes", t, "halo_ids.npy")) for t in g.node_types}
        csc = {et: LocalCSC(*(_tensor(g.part_path(p, "edges", et.dirname, f"{name}.npy"))
                              for name in ("indptr", "indices", "orig_ids")))
               for et in g.edge_types}
        data = {t: {name: _node_field(g, p, t, name, spec)
                    for name, spec in g.node_feats.get(t, {}).items()} for t in g.node_types}
        for t in g.node_types:   # served like data: remote ranks fetch them with features
            data[t][ORIG_ID] = orig[t]
            g.node_feats.setdefault(t, {})[ORIG_ID] = {"dtype": "int64", "shape": []}
        return cls(g, p, orig, halo, csc, data)

    def edge_data(self, etype: EdgeType, name: str) -> torch.Tensor:
        """Edge data ``name`` of ``etype`` in this part, in the order of the CSC as served:
        the stored array memory-mapped, or, where the CSC serves only some of the type's edges
        (held-out ones left out), a copy of the served rows (so it stays aligned with
        ``csc_edges``). Sampling reads rows by stored position instead, copying nothing."""
        stored = self.stored_edge_data(etype, name)
        csc = self.csc.get(etype)
        if csc is None or (csc.stored_pos is None and csc.ends is None):
            return stored
        # the copy's stored positions, or the stored CSC's served heads
        return stored.index_select(0, csc.stored_pos if csc.ends is None
                                   else csc.served_positions())

    def stored_edge_data(self, etype: EdgeType, name: str) -> torch.Tensor:
        """Edge data ``name`` of ``etype`` as the part stores it (the stored CSC's order, all
        of its edges), memory-mapped: index it with :meth:`LocalCSC.stored`."""
        return _tensor(self.graph.part_path(self.p, "edge_feats", etype.dirname, f"{name}.npy"))

    def csc_edges(self, etype: EdgeType, pos: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` per-type new IDs of the edges of ``etype`` at CSC positions ``pos``
        (default every edge the part serves, in CSC order). Holds two int64 arrays of those
        edges."""
        csc = self.csc[etype]
        indptr = csc.indptr.cpu()
        if pos is None:
            pos = csc.served_positions()
        dst = torch.searchsorted(indptr, pos, right=True) - 1 + self.start(etype.dst)
        return self.local_to_new(etype.src, csc.indices.cpu().index_select(0, pos).long()), dst

    def without_held_out_tail(self, etypes) -> "LocalPart":
        """This part serving, for each of ``etypes`` (of ``graph.held_out_last``), each
        destination's in-edges up to its ``message_end``, where ``prep dispatch`` stored its
        held-out ones from: those are not served, and nothing is copied (the structure stays
        mapped, with one more mapped int64 per destination)."""
        csc = dict(self.csc)
        for et in etypes:
            c = self.csc[et]
            ends = _tensor(self.graph.part_path(self.p, "edges", et.dirname, MESSAGE_END))
            csc[et] = LocalCSC(c.indptr, c.indices, c.stored_orig_ids, c.stored_pos,
                               ends.to(c.indptr.device))
        return LocalPart(self.graph, self.p, self.orig_ids, self.halo_ids, csc, self.node_data)

    def without_edges(self, drop: dict[EdgeType, torch.Tensor]) -> "LocalPart":
        """This part with the edges where ``drop[etype]`` (bool, CSC order) is set removed from
        the CSC (link prediction: held-out edges never carry messages). Holds a filtered copy
        of each such type's ``indices`` and the kept edges' positions in the stored CSC
        (``LocalCSC.stored_pos``: 4 + 4 B per kept edge; edge data and edge IDs stay mapped
        and are read there); other types stay mapped. While filtering, temporaries of 9 B
        per edge of the type."""
        csc = dict(self.csc)
        for et, mask in drop.items():
            c, keep = self.csc[et], ~mask.bool()
            assert c.ends is None, "without_edges of a CSC served up to its ends"
            kept_before = torch.zeros(len(keep) + 1, dtype=torch.int64)
            torch.cumsum(keep.long(), 0, out=kept_before[1:])
            kept = kept_before[c.indptr.long()].to(c.indptr.dtype)   # the new indptr
            del kept_before
            stored = c.stored(torch.nonzero(keep).flatten())   # composes with earlier drops
            if len(c.stored_orig_ids) < 2**31:
                stored = stored.int()
            csc[et] = LocalCSC(kept, c.indices[keep], c.stored_orig_ids, stored)
        return LocalPart(self.graph, self.p, self.orig_ids, self.halo_ids, csc, self.node_data)

    def start(self, ntype: str) -> int:
        """First new ID of the nodes of ``ntype`` this part owns."""
        return self.graph.node_map[ntype][self.p][0]

    def place(self, placement: str) -> "LocalPart":
        """The CSC moved to ``cpu`` (mmap, as loaded), ``pinned`` host memory or ``cuda``.

        ``pinned`` and ``cuda`` copy the structure (indptr, indices, halo); features stay
        memory-mapped on the host either way and are gathered per batch.
        """
        if placement == "cpu":
            return self
        move = (lambda t: t.pin_memory()) if placement == "pinned" else (lambda t: t.to("cuda"))
        csc = {et: c.moved(move) for et, c in self.csc.items()}
        halo = {t: move(h) for t, h in self.halo_ids.items()}
        return LocalPart(self.graph, self.p, self.orig_ids, halo, csc, self.node_data)

    def local_to_new(self, ntype: str, local: torch.Tensor) -> torch.Tensor:
        """Per-type new node IDs of local source indices (owned, then halo)."""
        start = self.start(ntype)
        owned = len(self.orig_ids[ntype])
        halo = self.halo_ids[ntype].to(local.device)
        return torch.where(local < owned, local + start,
                           halo[(local - owned).clamp(min=0, max=max(len(halo) - 1, 0))]
                           if len(halo) else local + start)
