"""Exact link-prediction metrics in plain torch (the same code on CPU and CUDA, no sklearn).

* ``auc``: ROC AUC over all positive x negative pairs, ``P(pos > neg) + 0.5 P(pos == neg)``
  (the Mann-Whitney U statistic over ``P * N``), by one sort; ties count exactly one half.
* ``ranking_metrics``: MRR and Hits@K, each positive ranked against its own ``K`` negatives.
  Tie convention (OGB's ``linkproppred`` evaluator): the optimistic and pessimistic ranks
  averaged, ``rank = 1 + #(neg > pos) + #(neg == pos) / 2``; ``hits@k`` is the fraction with
  ``rank <= k`` (a half-integer rank from ties counts only if it is within ``k``).

NaN scores are refused (ValueError): a comparison with NaN is false, so a NaN positive would
silently rank first. Across ranks, AUC does not combine (gather the scores first); MRR and
Hits@k do, as means weighted by each rank's number of positives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def _check_scores(name: str, scores: torch.Tensor) -> None:
    if scores.numel() == 0:
        raise ValueError(f"{name}: no scores")
    if scores.is_floating_point() and bool(torch.isnan(scores).any()):
        raise ValueError(f"{name}: NaN scores (the model diverged or a logit is undefined)")


def auc(pos_scores: torch.Tensor, neg_scores: torch.Tensor) -> float:
    """Exact ROC AUC of positive against negative scores.

    Takes ``pos_scores`` (any shape, flattened: ``P`` scores) and ``neg_scores`` (any shape,
    flattened: ``N`` scores) on one device; ints or floats. Returns
    ``(#(pos > neg) + 0.5 #(pos == neg)) / (P * N)`` over all ``P * N`` pairs, as a float.
    One ``torch.unique`` sort of the ``P + N`` scores, ``O((P+N) log(P+N))``; holds ``O(P + N)``
    (the concatenated scores, their inverse index and per-distinct-value counts). The count is
    kept as an int64 ``2 U`` so ties are exact (no float rank sums to lose precision).
    """
    _check_scores("pos_scores", pos_scores)
    _check_scores("neg_scores", neg_scores)
    pos, neg = pos_scores.flatten(), neg_scores.flatten()
    dtype = torch.promote_types(pos.dtype, neg.dtype)
    values, inverse = torch.unique(torch.cat([pos.to(dtype), neg.to(dtype)]), sorted=True,
                                   return_inverse=True)
    pos_count = torch.bincount(inverse[:len(pos)], minlength=len(values))
    neg_count = torch.bincount(inverse[len(pos):], minlength=len(values))
    neg_below = torch.cumsum(neg_count, 0) - neg_count       # negatives strictly lower
    two_u = int((pos_count * (2 * neg_below + neg_count)).sum())  # a tie is half a win
    return two_u / (2 * len(pos) * len(neg))


def _check_ks(ks) -> tuple[int, ...]:
    ks = tuple(int(k) for k in ks)
    if any(k < 1 for k in ks):
        raise ValueError(f"hits@k: k must be positive, got {ks}")
    return ks


def ranks(pos_scores: torch.Tensor, neg_scores: torch.Tensor) -> torch.Tensor:
    """Rank of each positive among its own negatives, OGB's tie convention.

    Takes ``pos_scores [P]`` and ``neg_scores [P, K]`` (row ``i`` the negatives of positive
    ``i``). Returns float64 ``[P]``: ``1 + #(neg > pos) + #(neg == pos) / 2``, in ``[1, K+1]``.
    Holds two ``[P, K]`` bool comparisons besides the inputs.
    """
    if pos_scores.dim() != 1 or neg_scores.dim() != 2 or len(neg_scores) != len(pos_scores):
        raise ValueError(f"ranking: want pos [P] and neg [P, K], got {tuple(pos_scores.shape)} "
                         f"and {tuple(neg_scores.shape)}")
    _check_scores("pos_scores", pos_scores)
    _check_scores("neg_scores", neg_scores)
    pos = pos_scores.unsqueeze(1)
    greater = (neg_scores > pos).sum(1)
    equal = (neg_scores == pos).sum(1)
    return 1.0 + greater.double() + 0.5 * equal.double()


def ranking_metrics(pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                    ks=(20, 50, 100)) -> dict[str, float]:
    """MRR and Hits@k of positives each ranked against their own negatives.

    Takes ``pos_scores [P]``, ``neg_scores [P, K]`` and the cut-offs ``ks`` (positive ints; a
    ``k > K`` gives hits 1.0). Returns ``{"mrr": mean 1/rank, "hits@k": fraction rank <= k}``
    as floats, ranks by ``ranks`` (OGB's tie convention). Vectorized over positives; holds
    ``O(P * K)`` bools and ``O(P)`` ranks.
    """
    ks = _check_ks(ks)
    r = ranks(pos_scores, neg_scores)
    out = {"mrr": float((1.0 / r).mean())}
    for k in ks:
        out[f"hits@{k}"] = float((r <= k).double().mean())
    return out


@dataclass
class LinkEvaluation:
    """One evaluation's link metrics: AUC over all pairs, MRR and Hits@k over ranked
    positives (``num_positives`` of them, each against ``num_negatives`` of its own)."""

    auc: float
    mrr: float
    hits: dict[int, float] = field(default_factory=dict)
    num_positives: int = 0
    num_negatives: int = 0

    def as_dict(self) -> dict[str, float | int]:
        """Flat JSON-ready dict: ``auc``, ``mrr``, ``hits@k``..., ``num_positives``,
        ``num_negatives``."""
        out: dict[str, float | int] = {"auc": self.auc, "mrr": self.mrr}
        out.update({f"hits@{k}": v for k, v in sorted(self.hits.items())})
        out.update(num_positives=self.num_positives, num_negatives=self.num_negatives)
        return out


def evaluate_link_scores(pos: torch.Tensor, neg_for_auc: torch.Tensor,
                         pos_ranked: torch.Tensor, neg_ranked: torch.Tensor,
                         ks=(20, 50, 100)) -> LinkEvaluation:
    """All link metrics of one evaluation.

    Takes the AUC's scores (``pos`` and ``neg_for_auc``, any shapes, flattened) and the
    ranking's (``pos_ranked [P]``, ``neg_ranked [P, K]``, often ``pos`` itself and the scores of
    ``fixed_eval_negatives``; ``neg_ranked`` may also serve as ``neg_for_auc``). Returns a
    ``LinkEvaluation``; holds what ``auc`` and ``ranking_metrics`` hold, one after the other.
    """
    ks = _check_ks(ks)
    ranking = ranking_metrics(pos_ranked, neg_ranked, ks)
    return LinkEvaluation(auc=auc(pos, neg_for_auc), mrr=ranking["mrr"],
                          hits={k: ranking[f"hits@{k}"] for k in ks},
                          num_positives=len(pos_ranked), num_negatives=neg_ranked.shape[1])
