"""Edges named by int64 keys ``src * num_dst_nodes + dst`` (per-type new IDs): what a sampling
request excludes, and what negative filtering looks up. int64 is enough while
``num_src_nodes * num_dst_nodes < 2^63``."""

from __future__ import annotations

import torch


def edge_keys(src: torch.Tensor, dst: torch.Tensor, num_dst_nodes: int) -> torch.Tensor:
    """Sorted distinct keys ``src * num_dst_nodes + dst`` of an edge list, for
    ``filter_true_edges``. Takes ``src, dst [E]``; returns int64 ``[<= E]``; holds ``O(E)``."""
    return torch.unique(src.long() * num_dst_nodes + dst.long(), sorted=True)


def true_edge_mask(neg_src: torch.Tensor, neg_dst: torch.Tensor,
                   edge_keys_sorted: torch.Tensor, num_dst_nodes: int) -> torch.Tensor:
    """Which candidate pairs are existing edges. Takes candidates ``neg_src, neg_dst`` (same
    shape, any) and ascending ``edge_keys_sorted`` (see ``edge_keys``); returns a bool mask of
    the candidates' shape. Binary search, ``O(M log E)``; holds ``O(M)`` for ``M`` candidates."""
    keys = neg_src.long() * num_dst_nodes + neg_dst.long()
    if len(edge_keys_sorted) == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(edge_keys_sorted, keys).clamp_(max=len(edge_keys_sorted) - 1)
    return edge_keys_sorted[pos] == keys
