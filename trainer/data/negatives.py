"""Negative sampling for link prediction, in global node ID space, vectorized, any device.

Uniform negatives are drawn without looking at the graph, so a few of them are true edges
(about the graph's density of them): standard practice, as PyG's ``negative_sampling`` and
OGB's fixed evaluation negatives. Where the edge list is known (tests, evaluation),
``filter_true_edges`` drops them by binary search over sorted edge keys
``src * num_dst_nodes + dst`` (int64: fine while ``num_src_nodes * num_dst_nodes < 2^63``).
"""

from __future__ import annotations

import torch

from graphprep.trainer.sampling.edge_keys import true_edge_mask


def uniform_negatives(src: torch.Tensor, num_dst_nodes: int, ratio: int,
                      generator: torch.Generator, corrupt_src: bool = False,
                      num_src_nodes: int | None = None, dst: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``ratio`` negatives per positive edge ``(src[i], dst[i])``.

    Takes the positives' sources ``src [E]`` (global IDs) and, with ``corrupt_src``, their
    destinations ``dst [E]`` and ``num_src_nodes``; ``generator`` lives on ``src``'s device.
    Returns ``(neg_src, neg_dst)``, int64 ``[E * ratio]`` on that device, positive-major
    (``reshape(E, ratio)`` gives row ``i`` for positive ``i``). Without ``corrupt_src`` every
    negative is ``(src[i], uniform over [0, num_dst_nodes))``; with it, odd flat positions
    (half of them, ``(E * ratio) // 2``: every other one, so ``ratio == 1`` works too) are
    ``(uniform over [0, num_src_nodes), dst[i])`` instead. Deterministic given the generator's
    state; holds the two outputs.
    """
    if ratio < 1 or num_dst_nodes < 1:
        raise ValueError(f"negatives: need ratio >= 1 and num_dst_nodes >= 1, got ratio {ratio}"
                         f", num_dst_nodes {num_dst_nodes}")
    device = src.device
    neg_src = src.long().repeat_interleave(ratio)
    n = len(neg_src)
    if not corrupt_src:
        neg_dst = torch.randint(0, num_dst_nodes, (n,), device=device, generator=generator)
        return neg_src, neg_dst
    if dst is None or num_src_nodes is None or num_src_nodes < 1 or dst.shape != src.shape:
        raise ValueError("negatives: corrupt_src needs dst (same shape as src) and "
                         "num_src_nodes >= 1")
    neg_dst = dst.to(device).long().repeat_interleave(ratio)
    neg_dst[0::2] = torch.randint(0, num_dst_nodes, ((n + 1) // 2,), device=device,
                                  generator=generator)
    neg_src[1::2] = torch.randint(0, num_src_nodes, (n // 2,), device=device,
                                  generator=generator)
    return neg_src, neg_dst


def filter_true_edges(neg_src: torch.Tensor, neg_dst: torch.Tensor,
                      edge_keys_sorted: torch.Tensor, num_dst_nodes: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the negatives that are existing edges. Takes 1-D ``neg_src, neg_dst`` and the
    graph's ascending ``edge_keys_sorted``; returns the kept ``(neg_src, neg_dst)`` in their
    order (fewer than given: per-positive rows no longer line up). Holds ``O(M)``."""
    keep = ~true_edge_mask(neg_src, neg_dst, edge_keys_sorted, num_dst_nodes)
    return neg_src[keep], neg_dst[keep]


def fixed_eval_negatives(num_positives: int, k: int, num_dst_nodes: int, seed: int,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """The fixed negative destinations of each evaluation positive, for MRR/Hits@k.

    Takes the number of positives ``P``, negatives per positive ``k``, the destination ID range
    and a seed. Returns int64 ``[P, k]``, uniform over ``[0, num_dst_nodes)`` (unfiltered, as
    OGB's), row ``i`` for positive ``i`` in the global positive order. Drawn on CPU from a
    generator seeded by ``seed`` alone, then moved to ``device``: the same on every rank and
    device (a rank evaluating a slice of positives takes the same slice of rows). Holds
    ``8 P k`` bytes.
    """
    if num_positives < 0 or k < 1 or num_dst_nodes < 1:
        raise ValueError(f"eval negatives: need P >= 0, k >= 1, num_dst_nodes >= 1, got "
                         f"{num_positives}, {k}, {num_dst_nodes}")
    generator = torch.Generator().manual_seed(seed)
    neg = torch.randint(0, num_dst_nodes, (num_positives, k), generator=generator)
    return neg if device is None else neg.to(device)
