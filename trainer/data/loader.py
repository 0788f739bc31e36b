"""Seed batches for node tasks, sampled and fetched ahead of the training loop.

Seeds are the owned nodes of a mask (``train_mask``...) in this rank's part, split evenly among
the ranks serving the part. Each epoch shuffles them with a generator keyed by (seed, epoch,
rank); a background thread samples blocks and fetches inputs for ``prefetch`` batches ahead, so
sampling and RPC overlap compute. Batch ``i`` of epoch ``e`` is keyed by (seed, e, rank, i): a run
is reproducible whatever the thread timing.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections.abc import Iterator

import torch

from graphprep.trainer.batch import Batch
from graphprep.trainer.sampling.dist_sampler import DistNeighborSampler, mix_seed
from graphprep.trainer.data.batches import make_batch
from graphprep.trainer.data.features import FeatureFetcher
from graphprep.trainer.runtime.health import tag_batch
from graphprep.trainer.sampling.partition import LocalPart


def rank_seeds(part: LocalPart, ntype: str, mask: str, ranks_per_part: int, local_index: int
               ) -> torch.Tensor:
    """New IDs of the owned ``ntype`` nodes where ``mask`` is set: this rank's even share."""
    owned = torch.nonzero(part.node_data[ntype][mask]).flatten() + part.start(ntype)
    return torch.tensor_split(owned, ranks_per_part)[local_index]


_END = object()      # the producer's last item: the epoch has no more batches


class NodeLoader:
    """Mini-batches over ``seeds``; holds at most ``prefetch`` prepared batches at a time."""

    def __init__(self, sampler: DistNeighborSampler, fetcher: FeatureFetcher, ntype: str,
                 seeds: torch.Tensor, batch_size: int, *, seed: int, rank: int,
                 shuffle: bool = True, prefetch: int = 2, feature: str = "feat",
                 label: str | None = "label", max_batches: int | None = None):
        self.sampler, self.fetcher = sampler, fetcher
        self.ntype, self.seeds, self.batch_size = ntype, seeds, batch_size
        self.seed, self.rank, self.shuffle = seed, rank, shuffle
        self.prefetch, self.feature, self.label = max(1, prefetch), feature, label
        self.max_batches = max_batches

    def __len__(self) -> int:
        """Batches per epoch: all of :meth:`full_batches`, or ``max_batches`` of them."""
        full = self.full_batches()
        return full if self.max_batches is None else min(full, self.max_batches)

    def full_batches(self) -> int:
        """Batches that cover every seed once."""
        return math.ceil(len(self.seeds) / self.batch_size)

    def batch(self, epoch: int, i: int, seeds: torch.Tensor) -> Batch:
        """Sample and fetch one batch (runs on the background thread)."""
        seeds_by_type = {self.ntype: seeds}
        blocks = self.sampler.sample_blocks(seeds_by_type, mix_seed(self.seed, epoch, self.rank, i))
        batch = make_batch(blocks, self.fetcher, self.sampler.graph, self.ntype, seeds_by_type,
                           self.feature)
        if self.label:
            batch.y = self.fetcher.fetch(self.label, seeds_by_type)[self.ntype]
        return batch

    def seed_batches(self, epoch: int) -> Iterator[torch.Tensor]:
        """The seeds of each batch of ``epoch``: shuffled by (seed, epoch, rank), split."""
        order = self.seeds
        if self.shuffle:
            g = torch.Generator().manual_seed(mix_seed(self.seed, epoch, self.rank))
            order = self.seeds[torch.randperm(len(self.seeds), generator=g)]
        return iter(torch.split(order, self.batch_size))

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """The batches of one epoch (the first ``len(self)`` of its shuffled seeds' batches),
        prepared ahead on a background thread."""
        batches = itertools.islice(self.seed_batches(epoch), len(self))
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce():
            i = 0
            try:
                for i, seeds in enumerate(batches):
                    if not put(self.batch(epoch, i, seeds)):
                        return
                put(_END)
            except BaseException as err:  # re-raised on the training thread
                tag_batch(err, i)          # which is in another step by then
                put(err)

        worker = threading.Thread(target=produce, name=f"loader-e{epoch}", daemon=True)
        worker.start()
        try:
            while True:
                start = time.perf_counter()
                item = ready.get()
                self.sampler.breakdown.add("wait_batch", time.perf_counter() - start)
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()
