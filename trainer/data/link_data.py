"""Link prediction's edges in one part: the positives of each split, the held-out edges that
must not carry messages, and the pairs a training batch must not see.

``prep split-edges`` marks the target edge type and its reverse twins with ``train_mask`` /
``val_mask`` / ``test_mask`` (both directions of a held-out edge are held out together), and
``prep dispatch`` stores them per part in CSC order, at the destination's owner. Every part
therefore knows, without asking anyone, which of its in-edges are held out and which training
edges it seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from graphprep.formats import EdgeType
from graphprep.formats.partitioned import HELD_OUT_MASKS

from graphprep.trainer.config import LINK_MASKS, masked_etypes
from graphprep.trainer.data.shuffle import KeyedPermutation
from graphprep.trainer.sampling.edge_keys import edge_keys
from graphprep.trainer.sampling.partition import LocalPart

SPLITS = ("train", "val", "test")


@dataclass
class LinkEdges:
    """Positive edges of one split owned by this part (by destination): per-type new IDs."""

    src: torch.Tensor
    dst: torch.Tensor

    def __len__(self) -> int:
        return len(self.src)

    def share(self, parts: int, index: int) -> "LinkEdges":
        """The ``index``-th of ``parts`` even, contiguous shares (a part's ranks split it)."""
        return LinkEdges(torch.tensor_split(self.src, parts)[index],
                         torch.tensor_split(self.dst, parts)[index])


def split_edges(part: LocalPart, etype: EdgeType, splits=SPLITS) -> dict[str, LinkEdges]:
    """``{split: LinkEdges}`` of ``etype`` in ``part`` for each of ``splits`` ("train", "val",
    "test"), in CSC order. Holds 24 B per edge of those splits (their positions, then ends);
    reads the masks mapped. Training takes its edges from :class:`TrainPositives` instead,
    which holds none."""
    masks = dict(zip(SPLITS, LINK_MASKS))
    return {split: LinkEdges(*part.csc_edges(etype, torch.nonzero(
                part.edge_data(etype, masks[split]).bool()).flatten()))
            for split in splits}


class TrainPositives:
    """The training edges (``train_mask``) of ``etype`` in one rank's share of its part: the
    ``index``-th of ``shares`` even, contiguous ranges of the stored CSC positions. Visited
    per epoch in a keyed pseudo-random order (:class:`KeyedPermutation` of the range), in
    batches of stored positions. Holds nothing per edge: the mask and the CSC stay mapped;
    counting the share's edges reads its mask once."""

    def __init__(self, stored: LocalPart, etype: EdgeType, shares: int = 1, index: int = 0):
        self.stored, self.etype = stored, etype
        self.mask = stored.stored_edge_data(etype, LINK_MASKS[0])
        n = len(self.mask)
        self.lo, self.hi = n * index // shares, n * (index + 1) // shares
        self.count = int(self.mask[self.lo:self.hi].sum())

    def __len__(self) -> int:
        return self.count

    def batches(self, batch_size: int, key: int | None) -> Iterator[torch.Tensor]:
        """Stored positions of the share's training edges, ``batch_size`` at a time (the last
        batch smaller): in the order of the permutation keyed by ``key``, or in CSC order
        for ``None``. Holds a few arrays of about a batch's size."""
        size = self.hi - self.lo
        perm = KeyedPermutation(size, key) if key is not None else None
        # positions drawn per step: about a batch's worth of training edges
        step = max(batch_size, math.ceil(batch_size * size / max(self.count, 1)))
        pending, held = [], 0
        for a in range(0, size, step):
            at = torch.arange(a, min(a + step, size))
            pos = (perm(at) if perm is not None else at) + self.lo
            pos = pos[self.mask.index_select(0, pos).bool()]
            pending.append(pos)
            held += len(pos)
            while held >= batch_size:
                ready = torch.cat(pending)
                yield ready[:batch_size]
                pending, held = [ready[batch_size:]], held - batch_size
        if held:
            yield torch.cat(pending)

    def ends(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` per-type new IDs of the edges at stored positions ``pos``."""
        return self.stored.csc_edges(self.etype, pos)


def twins(part: LocalPart, etype: EdgeType) -> list[EdgeType]:
    """Masked types running the other way (``dst -> src`` of ``etype``), other than itself."""
    return [et for et in masked_etypes(part.graph)
            if et != etype and et.src == etype.dst and et.dst == etype.src]


def without_held_out(part: LocalPart) -> LocalPart:
    """``part`` whose CSC lacks every validation and test edge of every masked type: message
    passing in training and evaluation sees training edges only (and all other types).

    Parts dispatched with each destination's held-out in-edges last (graph.json's
    ``held_out_last``) are served up to there, copying nothing. Parts dispatched before that
    get a filtered copy of the type's CSC whose edges remember their stored positions
    (``LocalCSC.stored_pos``, 8 B per kept edge), so ``--edge-feat`` rows and ``edge_data``
    follow the filter."""
    masked = masked_etypes(part.graph)
    tail = [et for et in masked if et in part.graph.held_out_last]
    drop = {et: torch.stack([part.edge_data(et, m).bool() for m in HELD_OUT_MASKS]).any(0)
            for et in masked if et not in tail}
    return part.without_held_out_tail(tail).without_edges(drop)


def exclusion_keys(part: LocalPart, etype: EdgeType, src: torch.Tensor, dst: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """The edges a batch of positives ``(src, dst)`` must not sample, as
    :class:`graphprep.trainer.sampling.service.SampleRequest` ``exclude`` keys: each positive in ``etype`` (both
    directions when its ends are one node type) and reversed in every twin type. Keys name
    endpoint pairs, so duplicates of a positive are excluded too. Holds O(batch)."""
    if etype.src == etype.dst:          # an undirected pair: both directions everywhere
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    n = part.graph.num_nodes
    out = {str(etype): edge_keys(src, dst, n[etype.dst])}
    for twin in twins(part, etype):
        out[str(twin)] = edge_keys(dst, src, n[twin.dst])
    return out
