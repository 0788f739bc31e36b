"""Uniform neighbor sampling without replacement on a CSC, vectorized, any device.

For each seed of degree ``d`` and fanout ``k``: all ``d`` in-neighbors when ``d <= k`` (or
``k == -1``), else a uniform random ``k``-subset drawn with Floyd's algorithm, vectorized over
seeds (``k`` steps of tensor ops, no per-node Python loop). The same code runs with tensors on
CPU or CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SampledEdges:
    """Edges sampled for one hop: ``seed_pos[i]`` indexes the seed, ``edge_pos[i]`` the CSC
    position (so ``indices[edge_pos]`` is the neighbor and ``orig_ids[edge_pos]`` the edge)."""

    seed_pos: torch.Tensor
    edge_pos: torch.Tensor


def sample_neighbors(indptr: torch.Tensor, seeds: torch.Tensor, fanout: int,
                     generator: torch.Generator | None = None,
                     ends: torch.Tensor | None = None) -> SampledEdges:
    """Sample up to ``fanout`` distinct in-edges of each seed (local destination index):
    those in ``indptr[v]:indptr[v + 1]``, or ``indptr[v]:ends[v]`` with ``ends``.

    Returns :class:`SampledEdges`, grouped by seed: first every in-edge of the seeds with at
    most ``fanout`` of them (in seed order, CSC order within a seed), then ``fanout`` edges of
    each other seed (in seed order). Time and memory are linear in the sampled edges (Floyd's
    duplicate check adds ``fanout**2 / 2`` compares per sampled seed); the ``fanout`` uniform
    draws of all sampled seeds come from one ``torch.rand((fanout, n), generator=...)`` call,
    which on CPU is the same stream as ``fanout`` calls of ``torch.rand(n)``."""
    device = indptr.device
    seeds = seeds.to(device)
    start = indptr.index_select(0, seeds)       # index_select: a faster gather than [] on CPU
    deg = (indptr.index_select(0, seeds + 1) if ends is None else
           ends.index_select(0, seeds)) - start
    take_all = deg <= fanout if fanout >= 0 else torch.ones_like(deg, dtype=torch.bool)
    parts_seed, parts_edge = [], []

    # seeds whose in-edges are all taken: edge i of the group belongs to all_idx[which[i]]
    all_idx = torch.nonzero(take_all).flatten()
    counts = deg.index_select(0, all_idx)
    which = torch.repeat_interleave(counts)
    base = start.index_select(0, all_idx) - (torch.cumsum(counts, 0) - counts)  # CSC - group
    parts_seed.append(all_idx.index_select(0, which))
    parts_edge.append(torch.arange(len(which), device=device) + base.index_select(0, which))

    # seeds with more in-edges than the fanout: Floyd's algorithm, k steps over a [k, n] array
    big = torch.nonzero(~take_all).flatten()
    if len(big):
        d, k = deg.index_select(0, big), fanout
        j = d - k + torch.arange(k, device=device)[:, None]           # [k, n]: d - k + step
        chosen = (torch.rand((k, len(big)), device=device, generator=generator) *
                  (j + 1)).long()
        chosen = torch.minimum(chosen, j)  # guard the float edge case rand * (j+1) == j+1
        for step in range(1, k):           # row 0 cannot collide
            dup = (chosen[:step] == chosen[step]).any(dim=0)
            chosen[step] = torch.where(dup, j[step], chosen[step])
        parts_seed.append(big.repeat_interleave(k))
        parts_edge.append((chosen + start.index_select(0, big)).t().reshape(-1))
    return SampledEdges(torch.cat(parts_seed), torch.cat(parts_edge))
