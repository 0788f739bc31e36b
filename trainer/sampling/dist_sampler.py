"""Distributed multi-hop neighbor sampling into per-layer blocks.

Each hop splits the frontier by owner part (the partition book), sends **one** request per
remote owner with every node type of the frontier (the owner samples all edge types of those
nodes), samples the owned frontier locally meanwhile, then merges, deduplicates and relabels the
sampled sources into a :class:`Block`. Everything is vectorized torch ops on the sampler's device;
only the loop over hops and over the P parts is Python.

Per batch, the relabel (:class:`Relabeler`) and the owner split (:func:`split_by_owner`) cost time
linear in the sampled edges and frontier: no sort. The relabel keeps one reusable int32 stamp
array per node type (4 B per node of the type's new-ID space, i.e. of all parts); the previous
sort-based path (``torch.unique``, ``argsort``) stays as :func:`relabel_unique` and
:func:`split_by_owner_argsort`, the tests' reference and the benchmark's baseline.

Fanouts are given from the seeds outward (``[15, 10, 5]``: 15 neighbors of each seed, 10 of each
of those, ...); ``-1`` takes every neighbor.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from graphprep.formats import EdgeType

from graphprep.trainer.sampling.partition import LocalPart, PartitionBook
from graphprep.trainer.sampling.service import PartServer, SampleRequest, SampleResponse, Transport
from graphprep.trainer.sampling.timing import Breakdown


@dataclass
class Block:
    """One layer's bipartite graph. ``src_nodes[t]`` are per-type new IDs whose first
    ``num_dst[t]`` entries are this layer's destination nodes; ``edges[etype] = (src, dst)``
    index ``src_nodes[etype.src]`` and the destination prefix of ``src_nodes[etype.dst]``;
    ``edge_attr[etype]`` (with ``--edge-feat``, for the types that have the array, else None)
    holds row ``i`` of the array for edge ``i`` of ``edges[etype]``."""

    src_nodes: dict[str, torch.Tensor]
    num_dst: dict[str, int]
    edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]]
    edge_attr: dict[EdgeType, torch.Tensor] | None = None   # rows of --edge-feat, edge order

    def to(self, device) -> "Block":
        return Block({t: v.to(device, non_blocking=True) for t, v in self.src_nodes.items()},
                     dict(self.num_dst),
                     {et: (s.to(device, non_blocking=True), d.to(device, non_blocking=True))
                      for et, (s, d) in self.edges.items()},
                     self.edge_attr and {et: a.to(device, non_blocking=True)
                                         for et, a in self.edge_attr.items()})


@dataclass
class MiniBatch:
    """Sampler output for a batch of seeds of one node type: ``blocks`` run from the input
    layer to the seeds (``blocks[-1]``'s destinations are the seeds, in the given order). The
    loaders turn blocks into the :class:`graphprep.trainer.batch.Batch` a model receives."""

    ntype: str
    seeds: torch.Tensor
    blocks: list[Block]

    @property
    def input_nodes(self) -> dict[str, torch.Tensor]:
        return self.blocks[0].src_nodes


def mix_seed(*keys: int) -> int:
    """A 63-bit seed from integer keys (run seed, epoch, rank, batch, hop, part)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint64)[0]
               >> np.uint64(1))


def split_by_owner(book: PartitionBook, nodes: dict[str, torch.Tensor], num_parts: int
                   ) -> list[dict[str, torch.Tensor]]:
    """Positions of ``nodes`` per owner part: ``out[q][t]`` indexes ``nodes[t]``, ascending (the
    same tensors as :func:`split_by_owner_argsort`); owners without nodes of ``t`` get no key.

    Counting, not sorting: one ``searchsorted`` for the owners, a ``bincount`` of them, then one
    compare-and-``nonzero`` pass per owner that has nodes; when a single owner holds them all
    (always on one part) its positions are an ``arange`` and nothing else runs. Time is
    O(len(nodes) * owners present), memory O(len(nodes)) per type."""
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(num_parts)]
    for t, ids in nodes.items():
        if not len(ids):
            continue
        if num_parts == 1:
            out[0][t] = torch.arange(len(ids), device=ids.device)
            continue
        owner = book.owner(t, ids)
        counts = torch.bincount(owner, minlength=num_parts).tolist()
        present = [q for q, c in enumerate(counts) if c]
        if len(present) == 1:
            out[present[0]][t] = torch.arange(len(ids), device=ids.device)
            continue
        for q in present:
            out[q][t] = torch.nonzero(owner == q).flatten()
    return out


def split_by_owner_argsort(book: PartitionBook, nodes: dict[str, torch.Tensor], num_parts: int
                           ) -> list[dict[str, torch.Tensor]]:
    """:func:`split_by_owner` by a stable ``argsort`` of the owners (the previous
    implementation, O(n log n)): the reference for tests and the benchmark's baseline."""
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
    directly, the others through ``transport``. Holds the partition book (P starts per type)
    and a :class:`Relabeler`, whose stamp arrays take 4 B per node of each node type sampled
    (the type's whole new-ID space, all parts), allocated on ``device`` at first use.

    ``dedup="unique"`` selects the previous sort-based relabel and owner split
    (:func:`relabel_unique`, :func:`split_by_owner_argsort`; no stamp arrays): a baseline for
    benchmarks, with blocks equal to the default's up to the order of the non-destination
    source nodes (and so, from the second hop on, of the sampled neighbors).

    ``edge_feat`` (``--edge-feat``): an edge data array whose rows of the sampled edges each
    owner returns with its sample, in the same request (no extra round trip); the blocks hold
    them as ``Block.edge_attr``, on ``device``, in edge order.

    ``relabeler``: one shared with the rank's other samplers (its stamp arrays are the
    sampler's only memory that grows with the graph: a rank holds them once, not once per
    loader); by default the sampler's own."""

    def __init__(self, part: LocalPart, server: PartServer, transport: Transport,
                 fanouts: list[int], device: str | torch.device = "cpu",
                 breakdown: Breakdown | None = None, dedup: str = "stamp",
                 edge_feat: str | None = None, relabeler: "Relabeler | None" = None):
        if dedup not in ("stamp", "unique"):
            raise ValueError(f"dedup must be 'stamp' or 'unique', got {dedup!r}")
        self.p, self.graph = part.p, part.graph
        self.num_parts = part.graph.num_parts
        self.num_nodes = part.graph.num_nodes
        self.etypes = {str(et): et for et in part.graph.edge_types}
        self.server, self.transport = server, transport
        self.fanouts = list(fanouts)
        self.device = torch.device(device)
        self.book = PartitionBook(part.graph, device=self.device)
        self.breakdown = breakdown or Breakdown()
        self.dedup = dedup
        self.edge_feat = edge_feat
        self.relabeler = None if dedup != "stamp" else \
            relabeler or Relabeler(part.graph.num_nodes)
        self._split = split_by_owner if dedup == "stamp" else split_by_owner_argsort

    def sample(self, ntype: str, seeds: torch.Tensor, seed: int) -> MiniBatch:
        """Blocks for ``seeds`` (unique per-type new IDs), keyed by ``seed``: the same
        (seeds, seed) give the same blocks whatever the thread timing or placement of parts."""
        return MiniBatch(ntype, seeds, self.sample_blocks({ntype: seeds}, seed))

    def sample_blocks(self, seeds: dict[str, torch.Tensor], seed: int,
                      exclude: dict[str, torch.Tensor] | None = None) -> list[Block]:
        """Blocks, input layer first, whose last destinations are ``seeds`` (unique per-type
        new IDs of one or more types, in the given order). ``exclude``: edges no hop may
        return, as :class:`SampleRequest` describes; each owner gets only those whose
        destination it owns (the only ones it could sample)."""
        nodes = {t: ids.to(self.device) for t, ids in seeds.items()}
        by_owner = self.exclusions_by_owner(exclude) if exclude else None
        self.breakdown.count("seeds_sampled", sum(len(v) for v in nodes.values()))
        blocks: list[Block] = []
        for hop, fanout in enumerate(self.fanouts):
            edges, attrs = self.sample_hop(nodes, fanout, mix_seed(seed, hop), by_owner)
            self.breakdown.count("sampled_edges", sum(len(d) for d, _ in edges.values()))
            block = self.relabeler(nodes, edges, attrs) if self.relabeler is not None else \
                relabel_unique(nodes, edges, attrs)
            blocks.insert(0, block)
            nodes = block.src_nodes
        return blocks

    def exclusions_by_owner(self, exclude: dict[str, torch.Tensor]
                            ) -> list[dict[str, torch.Tensor] | None]:
        """``exclude`` keys (``src * num_nodes[dst type] + dst``, ascending) split by the
        owner of their destination; still ascending. ``None`` for an owner without any."""
        out: list[dict[str, torch.Tensor]] = [{} for _ in range(self.num_parts)]
        for key, keys in exclude.items():
            et = self.etypes[key]
            keys = keys.to(self.device)
            owner = self.book.owner(et.dst, keys % self.num_nodes[et.dst])
            for q in torch.unique(owner).tolist():
                out[q][key] = keys[owner == q]
        return [o or None for o in out]

    def sample_hop(self, nodes: dict[str, torch.Tensor], fanout: int, seed: int,
                   exclude: list[dict[str, torch.Tensor] | None] | None = None
                   ) -> tuple[dict[EdgeType, tuple[torch.Tensor, torch.Tensor]],
                              dict[EdgeType, torch.Tensor]]:
        """In-edges sampled for every frontier node: ``(edges, attrs)``, per edge type
        ``edges[et] = (position of the destination in nodes[dst type], source new ID)`` and,
        with ``edge_feat``, ``attrs[et]`` the edges' rows (types with the array only; ``{}``
        without). ``exclude``: per owner part, the edges it must not return
        (:meth:`exclusions_by_owner`)."""
        by_owner = self._split(self.book, nodes, self.num_parts)
        requests = {q: SampleRequest({t: _take(nodes[t], pos) for t, pos in where.items()},
                                     fanout, mix_seed(seed, q), exclude and exclude[q],
                                     self.edge_feat)
                    for q, where in enumerate(by_owner) if where}
        remote = {q: self.transport.call(q, "sample", _to_cpu(req))
                  for q, req in requests.items() if q != self.p}
        answers: dict[int, SampleResponse] = {}
        with self.breakdown.clock("sample_local"):
            if self.p in requests:
                answers[self.p] = self.server.sample(requests[self.p])
        start = time.perf_counter()
        for q, fut in remote.items():
            answers[q] = self.transport.wait(q, fut, "sampling")
        self.breakdown.add("sample_remote", time.perf_counter() - start)
        return self._merge(nodes, by_owner, answers)

    def _merge(self, nodes, by_owner, answers):
        """The owners' answers as one edge list per type (owners in part order) and their
        edge data rows in the same order."""
        parts: dict[str, list] = {}
        for q, answer in sorted(answers.items()):
            for key, (seed_pos, src, *rows) in answer.items():
                et = self.etypes[key]
                where, seed_pos = by_owner[q][et.dst], seed_pos.to(self.device)
                # a whole frontier sent to one owner: positions in the request are final
                dst_pos = seed_pos if len(where) == len(nodes[et.dst]) else \
                    where.index_select(0, seed_pos)
                parts.setdefault(key, []).append((dst_pos, src.to(self.device), *rows))
        edges, attrs = {}, {}
        for key, chunks in parts.items():
            et = self.etypes[key]
            edges[et] = (_cat([c[0] for c in chunks]), _cat([c[1] for c in chunks]))
            rows = [c[2] for c in chunks if len(c) == 3]
            if rows:
                if len(rows) != len(chunks):     # parts share graph.json: never on one graph
                    raise ValueError(f"edge type {key}: some parts returned "
                                     f"--edge-feat {self.edge_feat} rows, others none")
                attrs[et] = _cat(rows).to(self.device, non_blocking=True)
        return edges, attrs


def _take(values: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``values[pos]`` for ``pos`` an owner's share from :func:`split_by_owner` (distinct
    ascending positions): ``values`` itself, no copy, when that share is all of them."""
    return values if len(pos) == len(values) else values.index_select(0, pos)


def _cat(chunks: list[torch.Tensor]) -> torch.Tensor:
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


def _to_cpu(request: SampleRequest) -> SampleRequest:
    return SampleRequest({t: v.cpu() for t, v in request.nodes.items()}, request.fanout,
                         request.seed, request.exclude and
                         {k: v.cpu() for k, v in request.exclude.items()}, request.edge_feat)


class Relabeler:
    """Merges, deduplicates and relabels sampled nodes into a :class:`Block` in time linear in
    the sampled edges (scatter and gather, no sort); :meth:`__call__` has the contract of
    :func:`relabel`.

    Holds, per node type, one int32 "stamp" array of ``num_nodes[t]`` entries (4 B per node of
    the type's new-ID space: new IDs are global, so all parts' nodes of the type), allocated on
    the IDs' device at the type's first use and reused by every later call, and a counter.
    A call with ``n`` IDs claims the ``n`` keys after the counter and gives position ``i`` of
    its ID list the key ``base + n - 1 - i``; a ``scatter_reduce(amax)`` leaves in each ID's
    entry the key of its first position, outranking whatever earlier calls left (their keys are
    all smaller), so nothing is reset between calls: the array is refilled only when the int32
    keys run out (every ~2**31 IDs relabeled, a few thousand batches). int32 rather than int64:
    half the memory, and the random scatter and gather into it run several times faster on
    CPU. Without ``num_nodes`` a type's array is sized (and grown) to the largest ID seen. Per
    call it also holds a few temporaries of the call's IDs (destinations + sampled sources),
    about 40 B per ID. Calls are serialized by a lock: one relabeler may serve several threads,
    one at a time."""

    _KEY_LIMIT = torch.iinfo(torch.int32).max

    def __init__(self, num_nodes: dict[str, int] | None = None):
        self.num_nodes = dict(num_nodes) if num_nodes is not None else None
        self.stamps: dict[str, torch.Tensor] = {}
        self.next_key: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held by the stamp arrays allocated so far."""
        return sum(s.numel() * s.element_size() for s in self.stamps.values())

    def __call__(self, dst_nodes: dict[str, torch.Tensor],
                 edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]],
                 edge_attr: dict[EdgeType, torch.Tensor] | None = None) -> Block:
        src_nodes, num_dst, local_src = {}, {}, {}
        types = set(dst_nodes) | {et.src for et in edges}
        with self._lock:
            for t in sorted(types):
                ets = [et for et in edges if et.src == t]
                dst = dst_nodes.get(t)
                if dst is None:
                    dst = edges[ets[0]][1][:0]
                src_nodes[t], locals_ = self._relabel_type(t, dst, [edges[et][1] for et in ets])
                num_dst[t] = len(dst)
                local_src.update(zip(ets, locals_))
        return Block(src_nodes, num_dst, {et: (local_src[et], edges[et][0]) for et in edges},
                     _aligned(edges, edge_attr))

    def _claim(self, t: str, ids: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The stamp array of ``t`` (allocated or grown as needed) and the first of
        ``len(ids)`` keys no entry holds yet."""
        stamp = self.stamps.get(t)
        if self.num_nodes is not None:
            size = self.num_nodes[t]
        else:
            size = max(int(ids.max()) + 1, len(stamp) if stamp is not None else 0)
        if stamp is None or len(stamp) < size:
            grown = torch.full((size,), -1, dtype=torch.int32, device=ids.device)
            if stamp is not None:
                grown[:len(stamp)] = stamp
            stamp = self.stamps[t] = grown
        base = self.next_key.get(t, 0)
        if base + len(ids) > self._KEY_LIMIT:     # keys ran out: forget every earlier call
            stamp.fill_(-1)
            base = 0
        self.next_key[t] = base + len(ids)
        return stamp, base

    def _relabel_type(self, t: str, dst: torch.Tensor, srcs: list[torch.Tensor]
                      ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(nodes, [local index of each of srcs[i]])``: ``nodes`` is ``dst`` (unique) then the
        IDs of ``srcs`` not in it, in order of first occurrence."""
        if not srcs:
            return dst, []
        ids = torch.cat([dst, *srcs]).long()
        n_dst, total = len(dst), len(ids)
        if total > self._KEY_LIMIT:
            raise ValueError(f"relabel: {total} IDs in one call, at most 2^31 - 1")
        if not total:
            return ids, [ids for _ in srcs]
        stamp, base = self._claim(t, ids)
        top = base + total - 1
        key = torch.arange(top, base - 1, -1, dtype=torch.int32, device=ids.device)
        stamp.scatter_reduce_(0, ids, key, "amax")         # an ID's first position wins
        got = stamp.index_select(0, ids)                    # key of its ID's first position
        is_first = got == key
        rank = torch.cumsum(is_first, 0).sub_(1)            # local index, at first positions
        num = int(rank[-1]) + 1
        if n_dst and int(rank[n_dst - 1]) != n_dst - 1:
            raise ValueError(f"relabel: destination nodes of type {t!r} are not unique")
        # the first occurrences, in order: scatter by local index; the others land in slot num
        nodes = ids.new_empty(num + 1).scatter_(0, torch.where(is_first, rank, num), ids)[:num]
        local = rank.index_select(0, top - got[n_dst:])    # top - key: first position
        return nodes, list(torch.split(local, [len(s) for s in srcs]))


def relabel(dst_nodes: dict[str, torch.Tensor],
            edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]],
            relabeler: Relabeler | None = None,
            edge_attr: dict[EdgeType, torch.Tensor] | None = None) -> Block:
    """Block from destination nodes (unique per type) and sampled (destination position, source
    new ID) edges: per type, sources are the destinations first, then the new IDs seen,
    deduplicated, in order of first occurrence (edge types in ``edges`` order). Returns the
    :class:`Block`; time linear in the edges. ``relabeler`` (a sampler's, reused across
    batches) holds the stamp arrays; without one, a temporary one sized to the largest ID
    seen per type (4 B per ID) is used. ``edge_attr[et]``: rows of the edges of ``edges[et]``,
    in their order, kept as the block's ``edge_attr`` (edges keep their order: no copy)."""
    return (relabeler or Relabeler())(dst_nodes, edges, edge_attr)


def relabel_unique(dst_nodes: dict[str, torch.Tensor],
                   edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]],
                   edge_attr: dict[EdgeType, torch.Tensor] | None = None) -> Block:
    """:func:`relabel` by ``torch.unique`` (the previous implementation, a sort of the IDs per
    type): the same nodes and edges, with the non-destination sources in ascending ID order
    instead of first occurrence. The reference for tests and the benchmark's baseline; holds
    O(IDs) temporaries per call and nothing across calls."""
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
    return Block(src_nodes, num_dst, {et: (local_src[et], edges[et][0]) for et in edges},
                 _aligned(edges, edge_attr))


def _aligned(edges: dict, edge_attr: dict | None) -> dict | None:
    """``edge_attr`` for a block of ``edges`` (the relabels keep every edge list's order, so
    row ``i`` stays edge ``i``'s), checked to hold one row per edge; None when empty."""
    if not edge_attr:
        return None
    for et, rows in edge_attr.items():
        if len(rows) != len(edges[et][0]):
            raise ValueError(f"edge_attr of {et}: {len(rows)} rows for {len(edges[et][0])} "
                             "edges")
    return dict(edge_attr)
