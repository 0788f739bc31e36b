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
                     generator: torch.Generator | None = None) -> SampledEdges:
    """Sample up to ``fanout`` distinct in-edges of each seed (local destination index)."""
    device = indptr.device
    seeds = seeds.to(device)
    start = indptr[seeds]
    deg = indptr[seeds + 1] - start
    take_all = deg <= fanout if fanout >= 0 else torch.ones_like(deg, dtype=torch.bool)
    parts_seed, parts_edge = [], []

    # seeds whose in-edges are all taken
    all_idx = torch.nonzero(take_all).flatten()
    counts = deg[all_idx]
    seed_pos = torch.repeat_interleave(all_idx, counts)
    first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    offset = torch.arange(len(seed_pos), device=device) - first
    parts_seed.append(seed_pos)
    parts_edge.append(start[seed_pos] + offset)

    # seeds with more in-edges than the fanout: Floyd's algorithm, k steps
    big = torch.nonzero(~take_all).flatten()
    if len(big):
        d, k = deg[big], fanout
        chosen = torch.empty((len(big), k), dtype=torch.long, device=device)
        for step in range(k):
            j = d - k + step
            t = (torch.rand(len(big), device=device, generator=generator) * (j + 1)).long()
            t = torch.minimum(t, j)  # guard the float edge case rand * (j+1) == j+1
            dup = (chosen[:, :step] == t[:, None]).any(dim=1) if step else \
                torch.zeros_like(t, dtype=torch.bool)
            chosen[:, step] = torch.where(dup, j, t)
        parts_seed.append(big.repeat_interleave(k))
        parts_edge.append((start[big][:, None] + chosen).flatten())
    return SampledEdges(torch.cat(parts_seed), torch.cat(parts_edge))
