"""Batches of positive edges with their negatives, sampled around both ends (link prediction).

A batch of ``B`` training edges gets ``B * neg_ratio`` uniform negatives
(:func:`graphprep.trainer.data.negatives.uniform_negatives`, global new IDs: no part needs the whole graph).
The seed nodes are the distinct ends of positives and negatives per node type; they are
sampled like any nodes, in one multi-type :meth:`DistNeighborSampler.sample_blocks` call that
excludes the batch's positives (and their twins) at the owners. Shuffling, prefetching and the
per-batch random keys are :class:`NodeLoader`'s; the positives come from
:class:`graphprep.trainer.data.link_data.TrainPositives`, a keyed permutation of the rank's
share of the part's CSC positions (nothing held per edge).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from graphprep.formats import EdgeType

from graphprep.trainer.batch import Batch
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler, mix_seed
from graphprep.trainer.data.batches import edge_key, make_batch
from graphprep.trainer.data.features import FeatureFetcher
from graphprep.trainer.data.link_data import TrainPositives, exclusion_keys
from graphprep.trainer.data.loader import NodeLoader
from graphprep.trainer.data.negatives import uniform_negatives
from graphprep.trainer.sampling.partition import LocalPart


def seed_nodes(etype: EdgeType, src: torch.Tensor, dst: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Distinct seed nodes per type of the pairs ``(src[i], dst[i])`` and each pair's two
    positions among them: ``(seeds, src_pos, dst_pos)``. One ``torch.unique`` per node type."""
    if etype.src == etype.dst:
        uniq, inverse = torch.unique(torch.cat([src, dst]), return_inverse=True)
        return {etype.src: uniq}, inverse[:len(src)], inverse[len(src):]
    us, src_pos = torch.unique(src, return_inverse=True)
    ud, dst_pos = torch.unique(dst, return_inverse=True)
    return {etype.src: us, etype.dst: ud}, src_pos, dst_pos


class LinkLoader(NodeLoader):
    """Training batches over this rank's ``positives`` of ``etype``; holds at most
    ``prefetch`` prepared batches, and nothing per positive."""

    def __init__(self, sampler: DistNeighborSampler, fetcher: FeatureFetcher, part: LocalPart,
                 etype: EdgeType, positives: TrainPositives, batch_size: int, *, seed: int,
                 rank: int, neg_ratio: int = 1, corrupt_src: bool = False, shuffle: bool = True,
                 prefetch: int = 2, feature: str = "feat", max_batches: int | None = None):
        super().__init__(sampler, fetcher, etype.dst, torch.empty(0, dtype=torch.int64),
                         batch_size, seed=seed, rank=rank, shuffle=shuffle, prefetch=prefetch,
                         feature=feature, label=None, max_batches=max_batches)
        self.part, self.etype, self.positives = part, etype, positives
        self.neg_ratio, self.corrupt_src = neg_ratio, corrupt_src

    def full_batches(self) -> int:
        return math.ceil(len(self.positives) / self.batch_size)

    def seed_batches(self, epoch: int) -> Iterator[torch.Tensor]:
        """Stored CSC positions of each batch's positives: the rank's share in the order
        keyed by (seed, epoch, rank), or in CSC order without shuffling."""
        key = mix_seed(self.seed, epoch, self.rank) if self.shuffle else None
        return self.positives.batches(self.batch_size, key)

    def batch(self, epoch: int, i: int, positions: torch.Tensor) -> Batch:
        """Batch ``i`` of the positives at stored CSC ``positions``: those, then their
        negatives, as ``edge_label_index`` (positions into the seeds of the edge type's two
        end types) with ``edge_label`` 1 then 0, and the blocks and inputs around the seeds
        (runs on the loader thread)."""
        et, n = self.etype, self.part.graph.num_nodes
        src, dst = self.positives.ends(positions)
        key = mix_seed(self.seed, epoch, self.rank, i)
        generator = torch.Generator().manual_seed(mix_seed(key, 1))
        neg_src, neg_dst = uniform_negatives(src, n[et.dst], self.neg_ratio, generator,
                                             self.corrupt_src, n[et.src], dst)
        seeds, src_pos, dst_pos = seed_nodes(et, torch.cat([src, neg_src]),
                                             torch.cat([dst, neg_dst]))
        blocks = self.sampler.sample_blocks(seeds, key,
                                            exclude=exclusion_keys(self.part, et, src, dst))
        batch = make_batch(blocks, self.fetcher, self.part.graph, et.dst, seeds, self.feature)
        b = len(src)
        batch.edge_label_index = torch.stack([src_pos, dst_pos])
        batch.edge_label = torch.cat([torch.ones(b), torch.zeros(len(src_pos) - b)])
        batch.edge_label_type = edge_key(et)
        return batch
