"""What the built-in models share: per-type input and output forms, and ModuleDict keys."""

from __future__ import annotations

import torch

EdgeKey = tuple[str, str, str]


def key(name) -> str:
    """A ModuleDict key for a node type or an edge type tuple (keys cannot hold dots)."""
    text = ":".join(name) if isinstance(name, tuple) else name
    return text.replace(".", "_")


def as_dict(h, types) -> dict[str, torch.Tensor]:
    """``h`` per node type: a dict as is, a tensor as the one type of ``types``."""
    if isinstance(h, dict):
        return h
    (only,) = types
    return {only: h}


def like(out: dict[str, torch.Tensor], h):
    """``out`` in the form of ``h``: a tensor when ``h`` was one, else the dict."""
    return out if isinstance(h, dict) else next(iter(out.values()))


def aggregate_mean(msg: torch.Tensor, dst: torch.Tensor, n_dst: int) -> torch.Tensor:
    """Mean of ``msg`` rows per destination in ``[0, n_dst)`` (0 where none)."""
    total = msg.new_zeros((n_dst, msg.shape[1])).index_add_(0, dst, msg)
    deg = torch.bincount(dst, minlength=n_dst).clamp(min=1).unsqueeze(1)
    return total / deg
