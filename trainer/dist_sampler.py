"""Distributed multi-hop neighbor sampling into per-layer blocks.

Each hop splits the frontier by owner part (the partition book), sends **one** request per
remote owner with every node type of the frontier (the owner samples all edge types of those
nodes), samples the owned frontier locally meanwhile, then merges, deduplicates and relabels the
sampled sources into a :class:`Block`. Everything is vectorized torch ops on the sampler's device;
only the loop over hops and over the P parts is Python.

Fanouts are given from the seeds outward (``[15, 10, 5]``: 15 neighbors of each seed, 10 of each
of those, ...); ``-1`` takes every neighbor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from formats import EdgeType

from .partition import LocalPart, PartitionBook
from .service import PartServer, SampleRequest, SampleResponse, Transport
from .timing import Breakdown


@dataclass
class Block:
    """One layer's bipartite graph. ``src_nodes[t]`` are per-type new IDs whose first
    ``num_dst[t]`` entries are this layer's destination nodes; ``edges[etype] = (src, dst)``
    index ``src_nodes[etype.src]`` and the destination prefix of ``src_nodes[etype.dst]``."""

    src_nodes: dict[str, torch.Tensor]
    num_dst: dict[str, int]
    edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]]

    def to(self, device) -> "Block":
        return Block({t: v.to(device, non_blocking=True) for t, v in self.src_nodes.items()},
                     dict(self.num_dst),
                     {et: (s.to(device, non_blocking=True), d.to(device, non_blocking=True))
                      for et, (s, d) in self.edges.items()})


@dataclass
class MiniBatch:
    """Sampler output for a batch of seeds of one node type, with its inputs.

    ``blocks`` run from the input layer to the seeds (``blocks[-1]``'s destinations are the
    seeds, in the given order); ``x`` holds input rows for ``blocks[0].src_nodes``; ``y`` the
    seeds' labels (or ``None``)."""

    ntype: str
    seeds: torch.Tensor
    blocks: list[Block]
    x: dict[str, torch.Tensor] | None = None
    y: torch.Tensor | None = None

    @property
    def input_nodes(self) -> dict[str, torch.Tensor]:
        return self.blocks[0].src_nodes

    def to(self, device) -> "MiniBatch":
        return MiniBatch(self.ntype, self.seeds.to(device), [b.to(device) for b in self.blocks],
                         None if self.x is None else
                         {t: v.to(device, non_blocking=True) for t, v in self.x.items()},
                         None if self.y is None else self.y.to(device, non_blocking=True))


def mix_seed(*keys: int) -> int:
    """A 63-bit seed from integer keys (run seed, epoch, rank, batch, hop, part)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint64)[0]
               >> np.uint64(1))


def split_by_owner(book: PartitionBook, nodes: dict[str, torch.Tensor], num_parts: int
                   ) -> list[dict[str, torch.Tensor]]:
    """Positions of ``nodes`` per owner part: ``out[q][t]`` indexes ``nodes[t]``."""
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(num_parts)]
    for t, ids in nodes.items():
        owner = book.owner(t, ids)
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=num_parts).tolist()
        for q, pos in enumerate(torch.split(order, counts)):
            if len(pos):
                out[q][t] = pos
    return out


class DistNeighborSampler:
    """Samples blocks around seeds across all parts: the local part through ``server``
    directly, the others through ``transport``. Holds the partition book (P starts per type)."""

    def __init__(self, part: LocalPart, server: PartServer, transport: Transport,
                 fanouts: list[int], device: str | torch.device = "cpu",
                 breakdown: Breakdown | None = None):
        self.p = part.p
        self.num_parts = part.graph.num_parts
        self.etypes = {str(et): et for et in part.graph.edge_types}
        self.server, self.transport = server, transport
        self.fanouts = list(fanouts)
        self.device = torch.device(device)
        self.book = PartitionBook(part.graph, device=self.device)
        self.breakdown = breakdown or Breakdown()

    def sample(self, ntype: str, seeds: torch.Tensor, seed: int) -> MiniBatch:
        """Blocks for ``seeds`` (unique per-type new IDs), keyed by ``seed``: the same
        (seeds, seed) give the same blocks whatever the thread timing or placement of parts."""
        nodes = {ntype: seeds.to(self.device)}
        blocks: list[Block] = []
        for hop, fanout in enumerate(self.fanouts):
            edges = self.sample_hop(nodes, fanout, mix_seed(seed, hop))
            block = relabel(nodes, edges)
            blocks.insert(0, block)
            nodes = block.src_nodes
        return MiniBatch(ntype, seeds, blocks)

    def sample_hop(self, nodes: dict[str, torch.Tensor], fanout: int, seed: int
                   ) -> dict[EdgeType, tuple[torch.Tensor, torch.Tensor]]:
        """In-edges sampled for every frontier node: per edge type, (position of the destination
        in ``nodes[dst type]``, source new ID)."""
        by_owner = split_by_owner(self.book, nodes, self.num_parts)
        requests = {q: SampleRequest({t: nodes[t][pos] for t, pos in where.items()}, fanout,
                                     mix_seed(seed, q))
                    for q, where in enumerate(by_owner) if where}
        remote = {q: self.transport.call(q, "sample", _to_cpu(req))
                  for q, req in requests.items() if q != self.p}
        answers: dict[int, SampleResponse] = {}
        with self.breakdown.clock("sample_local"):
            if self.p in requests:
                answers[self.p] = self.server.sample(requests[self.p])
        start = time.perf_counter()
        for q, fut in remote.items():
            answers[q] = self.transport.wait(q, fut)
        self.breakdown.add("sample_remote", time.perf_counter() - start)
        return self._merge(by_owner, answers)

    def _merge(self, by_owner, answers):
        parts: dict[str, list] = {}
        for q, answer in sorted(answers.items()):
            for key, (seed_pos, src) in answer.items():
                et = self.etypes[key]
                dst_pos = by_owner[q][et.dst][seed_pos.to(self.device)]
                parts.setdefault(key, []).append((dst_pos, src.to(self.device)))
        return {self.etypes[key]: (torch.cat([d for d, _ in chunks]),
                                   torch.cat([s for _, s in chunks]))
                for key, chunks in parts.items()}


def _to_cpu(request: SampleRequest) -> SampleRequest:
    return SampleRequest({t: v.cpu() for t, v in request.nodes.items()}, request.fanout,
                         request.seed)


def relabel(dst_nodes: dict[str, torch.Tensor],
            edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]]) -> Block:
    """Block from destination nodes and sampled (destination position, source new ID) edges:
    per type, sources are the destinations first, then the new IDs seen, deduplicated."""
    src_nodes, num_dst, local_src = {}, {}, {}
    types = set(dst_nodes) | {et.src for et in edges}
    for t in sorted(types):
        dst = dst_nodes.get(t)
        if dst is None:
            dst = next(s for et, (_, s) in edges.items() if et.src == t)[:0]
        ets = [et for et in edges if et.src == t]
        ids = torch.cat([dst] + [edges[et][1] for et in ets])
        uniq, inverse = torch.unique(ids, return_inverse=True)
        n_dst = len(dst)
        order = torch.full((len(uniq),), -1, dtype=torch.long, device=ids.device)
        order[inverse[:n_dst]] = torch.arange(n_dst, device=ids.device)
        new = order < 0
        order[new] = n_dst + torch.arange(int(new.sum()), device=ids.device)
        nodes = torch.empty_like(uniq)
        nodes[order] = uniq
        src_nodes[t], num_dst[t] = nodes, n_dst
        seg = torch.split(order[inverse[n_dst:]], [len(edges[et][1]) for et in ets])
        local_src.update(zip(ets, seg))
    return Block(src_nodes, num_dst, {et: (local_src[et], edges[et][0]) for et in edges})
