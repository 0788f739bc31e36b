"""Edge scorers for link prediction, ``(h_src [B, D], h_dst [B, D]) -> logits [B]``, and the
binary cross-entropy loss over positive and negative logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SCORERS = ("dot", "mlp")


class DotScorer(nn.Module):
    """``logit = <h_src, h_dst>``; no parameters. Holds one ``[B, D]`` product."""

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return (h_src * h_dst).sum(-1)


class MLPScorer(nn.Module):
    """``logit = MLP(h_src * h_dst)``: ``Linear(dim, hidden)``, ReLU, ``Linear(hidden, 1)``.

    The Hadamard product (as OGB's link predictors) keeps the input at ``dim`` and the score
    symmetric in its two ends. Holds ``[B, D]`` and ``[B, hidden]`` activations.
    """

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.mlp(h_src * h_dst).squeeze(-1)


def make_scorer(name: str, dim: int, hidden: int | None = None) -> nn.Module:
    """The scorer ``--scorer name`` (``dot`` or ``mlp``) for ``dim``-wide embeddings; the MLP's
    hidden width defaults to ``dim``. Raises ValueError naming the option otherwise."""
    if name == "dot":
        return DotScorer()
    if name == "mlp":
        return MLPScorer(dim, hidden or dim)
    raise ValueError(f"--scorer {name!r}: must be one of {', '.join(SCORERS)}")


def link_loss(pos_logits: torch.Tensor, neg_logits: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy with logits, positives labelled 1 and negatives 0.

    Takes logits of any shapes (flattened); returns the scalar mean over all ``P + N`` terms
    (so with ``ratio`` negatives per positive the negatives weigh ``ratio`` times more, as
    PyG's examples). Holds ``O(P + N)``.
    """
    logits = torch.cat([pos_logits.flatten(), neg_logits.flatten()])
    labels = torch.cat([torch.ones_like(pos_logits.flatten()),
                        torch.zeros_like(neg_logits.flatten())])
    return F.binary_cross_entropy_with_logits(logits, labels)
