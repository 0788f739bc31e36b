"""Enforce balance constraints after METIS, which treats them as targets, not limits.

A greedy boundary pass in the spirit of FM balancing: while some part exceeds the cap of some
constraint (``total / P * (1 + imbalance)``), take the nodes of that part that carry weight in
that constraint, and move the ones whose move costs the least cut (gain = neighbours in the
target part - neighbours at home) to parts with room in *every* constraint. Vectorized per
round; holds the CSR (already held for METIS) and a candidates x parts count matrix.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)


def loads_of(parts: np.ndarray, weights: np.ndarray, num_parts: int) -> np.ndarray:
    """``[num_parts, ncon]`` total weight per part and constraint."""
    return np.stack([np.bincount(parts, weights=weights[:, c], minlength=num_parts)
                     for c in range(weights.shape[1])], axis=1)


def _neighbour_part_counts(cand, parts, xadj, adjncy, num_parts, adjwgt=None):
    """``[len(cand), num_parts]`` connection of each candidate to each part: neighbour counts,
    or summed edge weights with ``adjwgt`` (a coarse graph's merged edges)."""
    starts, ends = xadj[cand], xadj[cand + 1]
    deg = ends - starts
    rows = np.repeat(np.arange(len(cand)), deg)
    offsets = np.arange(deg.sum()) - np.repeat(np.cumsum(deg) - deg, deg)
    idx = np.repeat(starts, deg) + offsets
    weights = None if adjwgt is None else adjwgt[idx]
    counts = np.bincount(rows * num_parts + parts[adjncy[idx]], weights=weights,
                         minlength=len(cand) * num_parts)
    return counts.astype(np.int64).reshape(len(cand), num_parts)


def rebalance(parts: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray, weights: np.ndarray,
              num_parts: int, imbalance: float, max_rounds: int = 100,
              adjwgt: np.ndarray | None = None, warn: bool = True) -> np.ndarray:
    """Return ``parts`` with every constraint within its cap where moves allow it. Gains
    count neighbours, or sum ``adjwgt`` (one weight per ``adjncy`` entry) when given.
    ``warn``: log a warning when a cap stays exceeded (False for a caller that tries other
    starting points and warns about the one it keeps)."""
    parts = parts.copy()
    caps = weights.sum(axis=0) / num_parts * (1 + imbalance)
    for _ in range(max_rounds):
        loads = loads_of(parts, weights, num_parts)
        over = (loads - caps) / np.maximum(caps, 1)
        p, c = np.unravel_index(np.argmax(over), over.shape)
        if over[p, c] <= 0:
            break
        excess = loads[p, c] - caps[c]
        cand = np.flatnonzero((parts == p) & (weights[:, c] > 0))
        conn = _neighbour_part_counts(cand, parts, xadj, adjncy, num_parts, adjwgt)
        room = caps[None, :] - loads                                # [P, ncon]
        # A constraint the node carries no weight in never blocks it: the target may be over
        # it (a node of no in-edges adds no edges), as in the multilevel passes.
        w_c = weights[cand][:, None, :]
        fits = ((w_c <= room[None, :, :]) | (w_c == 0)).all(axis=2)
        fits[:, p] = False
        gain = np.where(fits, conn - conn[:, [p]], np.iinfo(np.int64).min)
        target = gain.argmax(axis=1)
        ok = fits[np.arange(len(cand)), target]
        moved = 0.0
        for q in range(num_parts):  # fill each target up to its room, best gain first
            mine = np.flatnonzero(ok & (target == q))
            mine = mine[np.argsort(-gain[mine, q], kind="stable")]
            total = np.cumsum(weights[cand[mine]], axis=0)
            w = weights[cand[mine]]
            fit = ((total <= room[q]) | (total == 0)).all(axis=1)
            take = np.cumsum(w[:, c]) - w[:, c] < excess - moved
            chosen = mine[fit & take]
            parts[cand[chosen]] = q
            moved += weights[cand[chosen], c].sum()
            if moved >= excess:
                break
        if moved == 0 and not (
                _swap(parts, p, c, excess, loads, caps, weights, xadj, adjncy, num_parts,
                      adjwgt) or
                _paired_swap(parts, p, c, excess, loads, caps, weights, xadj, adjncy,
                             num_parts, adjwgt)):
            if warn:
                log.warning("rebalance: part %d stays over the cap of constraint %d", p, c)
            break
    return parts


def _swap(parts, p, c, excess, loads, caps, weights, xadj, adjncy, num_parts,
          adjwgt=None) -> bool:
    """When no single move fits (targets full in another constraint), swap nodes carrying
    constraint ``c`` out of ``p`` against nodes of the target carrying none of it."""
    q = int(np.argmin(np.where(np.arange(num_parts) == p, np.inf, loads[:, c])))
    out = np.flatnonzero((parts == p) & (weights[:, c] > 0))
    back = np.flatnonzero((parts == q) & (weights[:, c] == 0))
    if len(out) == 0 or len(back) == 0:
        return False
    g_out = _neighbour_part_counts(out, parts, xadj, adjncy, num_parts, adjwgt)
    g_back = _neighbour_part_counts(back, parts, xadj, adjncy, num_parts, adjwgt)
    out = out[np.argsort(-(g_out[:, q] - g_out[:, p]), kind="stable")]
    back = back[np.argsort(-(g_back[:, p] - g_back[:, q]), kind="stable")]
    per_node = max(float(weights[out, c].min()), 1.0)
    k = int(min(np.ceil(excess / per_node), len(out), len(back),
                max((caps[c] - loads[q, c]) // per_node, 1)))
    while k > 0:
        delta = weights[out[:k]].sum(axis=0) - weights[back[:k]].sum(axis=0)
        new_p, new_q = loads[p] - delta, loads[q] + delta
        worse_p = (new_p > caps) & (new_p > loads[p])
        worse_q = (new_q > caps) & (new_q > loads[q])
        worse_p[c] = worse_q[c] = False
        if not (worse_p.any() or worse_q.any()) and new_q[c] <= max(caps[c], loads[q, c]):
            parts[out[:k]], parts[back[:k]] = q, p
            return True
        k //= 2
    return False


def _paired_swap(parts, p, c, excess, loads, caps, weights, xadj, adjncy, num_parts,
                 adjwgt=None) -> bool:
    """Swap nodes carrying constraint ``c`` out of ``p`` against nodes of another part that
    carry none of it and the same weight in every other constraint, so that only ``c`` moves.
    Where every other part is at its cap in some constraint (node counts, train) no single move
    or mixed swap fits, but such pairs do (a part over its edge cap trades nodes with in-edges
    for nodes without, of the same type and train bit). Pairs best gain first, within the
    target's room in ``c``; returns whether any pair was swapped."""
    other = [i for i in range(weights.shape[1]) if i != c]
    out = np.flatnonzero((parts == p) & (weights[:, c] > 0))
    if len(out) == 0:
        return False
    g_out = _neighbour_part_counts(out, parts, xadj, adjncy, num_parts, adjwgt)
    for q in np.argsort(loads[:, c], kind="stable"):
        room = caps[c] - loads[q, c]
        if q == p or room <= 0:
            continue
        back = np.flatnonzero((parts == q) & (weights[:, c] == 0))
        cand = out[weights[out, c] <= room]
        if len(back) == 0 or len(cand) == 0:
            continue
        gain_out = (g_out[:, q] - g_out[:, p])[weights[out, c] <= room]
        g_back = _neighbour_part_counts(back, parts, xadj, adjncy, num_parts, adjwgt)
        gain_back = g_back[:, p] - g_back[:, q]
        if other:
            _, prof = np.unique(weights[np.concatenate([cand, back])][:, other], axis=0,
                                return_inverse=True)
            prof = prof.ravel()
        else:
            prof = np.zeros(len(cand) + len(back), dtype=np.int64)
        po, pb = prof[:len(cand)], prof[len(cand):]
        # rank within each profile, best gain first; out's r-th pairs with back's r-th
        oo = np.lexsort((-gain_out, po))
        ob = np.lexsort((-gain_back, pb))
        ro, rb = _rank_in_group(po[oo]), _rank_in_group(pb[ob])
        width = int(max(ro.max(), rb.max())) + 1
        k_out, k_back = po[oo] * width + ro, pb[ob] * width + rb      # k_back is sorted
        at = np.minimum(np.searchsorted(k_back, k_out), len(k_back) - 1)
        paired = k_back[at] == k_out
        if not paired.any():
            continue
        i_out, i_back = oo[paired], ob[at[paired]]
        order = np.argsort(-(gain_out[i_out] + gain_back[i_back]), kind="stable")
        i_out, i_back = i_out[order], i_back[order]
        w = weights[cand[i_out], c]
        total = np.cumsum(w)
        chosen = (total <= room) & (total - w < excess)
        if not chosen.any():
            continue
        parts[cand[i_out[chosen]]], parts[back[i_back[chosen]]] = q, p
        return True
    return False


def _rank_in_group(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of the sorted ``groups``."""
    if len(groups) == 0:
        return groups
    starts = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]]))
    lengths = np.diff(np.concatenate([starts, [len(groups)]]))
    return np.arange(len(groups)) - np.repeat(starts, lengths)
