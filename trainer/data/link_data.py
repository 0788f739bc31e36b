"""Link prediction's edges in one part: the positives of each split, the held-out edges that
must not carry messages, and the pairs a training batch must not see.

``prep split-edges`` marks the target edge type and its reverse twins with ``train_mask`` /
``val_mask`` / ``test_mask`` (both directions of a held-out edge are held out together), and
``prep dispatch`` stores them per part in CSC order, at the destination's owner. Every part
therefore knows, without asking anyone, which of its in-edges are held out and which training
edges it seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphprep.formats import EdgeType

from graphprep.trainer.config import LINK_MASKS, masked_etypes
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


def split_edges(part: LocalPart, etype: EdgeType) -> dict[str, LinkEdges]:
    """``{"train"|"val"|"test": LinkEdges}`` of ``etype`` in ``part``, in CSC order. Holds the
    type's part edges as two int64 arrays while splitting."""
    src, dst = part.csc_edges(etype)
    out = {}
    for split, mask_name in zip(SPLITS, LINK_MASKS):
        mask = part.edge_data(etype, mask_name).bool()
        out[split] = LinkEdges(src[mask], dst[mask])
    return out


def twins(part: LocalPart, etype: EdgeType) -> list[EdgeType]:
    """Masked types running the other way (``dst -> src`` of ``etype``), other than itself."""
    return [et for et in masked_etypes(part.graph)
            if et != etype and et.src == etype.dst and et.dst == etype.src]


def without_held_out(part: LocalPart) -> LocalPart:
    """``part`` whose CSC lacks every validation and test edge of every masked type: message
    passing in training and evaluation sees training edges only (and all other types). The
    kept edges remember their stored positions (``LocalCSC.stored_pos``), so ``--edge-feat``
    rows and ``edge_data`` follow the filter."""
    drop = {et: part.edge_data(et, "val_mask").bool() | part.edge_data(et, "test_mask").bool()
            for et in masked_etypes(part.graph)}
    return part.without_edges(drop)


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
