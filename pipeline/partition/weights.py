"""``--balance``'s constraints as vertex-weight columns, and the combined weight of a group.

``--balance`` is a comma-separated list of constraints; a constraint is a key (``ntypes``,
``train``, ``edges``) or keys joined by ``+``: one weight per node, the sum of the node's share
of each key's total (``ntypes+edges``: node count and in-degree, the one weight KaMinPar is
given). A combined constraint lets a part hold more of one key where it holds less of another,
so it allows lower cuts than the keys as separate constraints (RESULTS.md).

Node counts are always balanced: as their own constraint (one per node type with ``ntypes`` on
a heterogeneous graph), unless ``ntypes`` is in a combined constraint, which then holds them.
"""

from __future__ import annotations

import numpy as np

from graphprep.formats import FormatError

# A combined column's total stays below this, so that 32-bit weights (KaMinPar's, ParHIP's)
# hold it and METIS's floating-point balance sums stay exact.
WEIGHT_LIMIT = (1 << 31) - 1


def constraint_keys(constraint: str) -> tuple[str, ...]:
    """The keys of one constraint: ``"ntypes+edges"`` -> ``("ntypes", "edges")``."""
    return tuple(constraint.split("+"))


def balance_keys(balance: tuple[str, ...]) -> frozenset[str]:
    """Every key named in ``balance``, combined or not."""
    return frozenset(k for c in balance for k in constraint_keys(c))


def combined_constraints(balance: tuple[str, ...]) -> tuple[str, ...]:
    """The constraints of ``balance`` that join several keys (``a+b``)."""
    return tuple(c for c in balance if "+" in c)


def counts_combined(balance: tuple[str, ...]) -> bool:
    """Whether node counts are balanced only through a combined constraint (``ntypes+...``),
    not as constraints of their own."""
    return any("ntypes" in constraint_keys(c) for c in combined_constraints(balance))


def combined_weight(weights: np.ndarray, limit: int = WEIGHT_LIMIT,
                    totals: np.ndarray | None = None, num_nodes: int | None = None
                    ) -> np.ndarray:
    """One integer weight per node from ``[n, ncon]`` columns: each column divided by its total
    (a column of total 0 adds nothing), summed over the columns, scaled so that the weights'
    sum over all nodes stays within ``limit``; every weight is at least 1. ``totals`` and
    ``num_nodes``: the whole graph's column totals and node count, when ``weights`` holds a
    slice of its nodes (default: ``weights``' own). Returns int64 ``[n]``; holds two float
    arrays of ``n``."""
    n, ncon = weights.shape
    totals = weights.sum(axis=0) if totals is None else np.asarray(totals)
    num_nodes = n if num_nodes is None else num_nodes
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    scale = (limit - num_nodes) / ncon     # floor(share * scale) + 1 summed: <= ncon*scale + n
    if scale < 1:
        raise FormatError(f"{num_nodes} nodes: too many for 31-bit combined node weights; "
                          "balance the keys as separate constraints", field="--balance")
    share = np.zeros(n, dtype=np.float64)
    for c in range(ncon):
        if totals[c] > 0:
            share += weights[:, c] / float(totals[c])
    share *= scale
    return np.floor(share).astype(np.int64) + 1


def constraint_columns(base: dict[str, np.ndarray], balance: tuple[str, ...],
                       totals: dict[str, np.ndarray] | None = None,
                       num_nodes: int | None = None) -> list[np.ndarray]:
    """The constraint columns (each ``[n, c]``) of ``balance`` from the ``base`` columns per
    key (``"ntypes"``: the count columns, always present; ``"train"``, ``"edges"``: one each):
    the count columns first unless ``ntypes`` is combined, then one entry per other constraint,
    a combined one folded by :func:`combined_weight` (``totals`` per key and ``num_nodes``:
    the whole graph's, when ``base`` holds a slice of its nodes)."""
    columns = [] if counts_combined(balance) else [base["ntypes"]]
    for constraint in balance:
        keys = constraint_keys(constraint)
        if keys == ("ntypes",):
            continue
        if len(keys) == 1:
            columns.append(base[keys[0]])
            continue
        stacked = np.concatenate([base[k] for k in keys], axis=1)
        whole = None if totals is None else np.concatenate([totals[k] for k in keys])
        columns.append(combined_weight(stacked, totals=whole, num_nodes=num_nodes)[:, None])
    return columns
