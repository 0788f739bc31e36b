"""A part's work is its edges and its training seeds, not its node count: the warning that
``prep partition`` logs and stores in the statistics (``stats["warnings"]``) when one part holds
much more than its share of either, and that ``prep inspect``/``prep report`` show.

Pure functions of the statistics dict (no Dask: ``prep inspect`` imports this).
"""

from __future__ import annotations

import numpy as np

# A part holding more than this times the mean of the edges or training nodes does most of the
# sampling and training.
WARN_IMBALANCE = 1.5
# (imbalance key, per-part counts, what they are)
WORK = (("edges", "edges_per_part", "edges"), ("train", "train_per_part", "training nodes"))


def work_warnings(stats: dict, method: str | None = None,
                  balance: tuple[str, ...] | None = None) -> list[str]:
    """One message per work measure (edges, training nodes) whose imbalance (max/mean over the
    parts) exceeds ``WARN_IMBALANCE``: the figure, the largest part's share, and the option
    that fixes it for ``method`` (``metis``, ``multilevel``, ``kaminpar``, ``random``; None:
    not known, e.g. DGL's assignment) run with ``balance``."""
    imbalance = stats.get("imbalance") or {}
    over = [(key, stats[field], what) for key, field, what in WORK
            if (imbalance.get(key) or 0) > WARN_IMBALANCE and sum(stats.get(field) or [])]
    out = []
    for key, counts, what in over:
        big = int(np.argmax(counts))
        share = counts[big] / sum(counts)
        out.append(f"{what} are unbalanced: the largest part holds {imbalance[key]:.2f}x the "
                   f"mean (part {big}, of {len(counts)} parts, holds {share:.0%} of the "
                   f"{what}); {_remedy(key, [k for k, _, _ in over], method, balance)}")
    return out


def _remedy(key: str, over: list[str], method: str | None,
            balance: tuple[str, ...] | None) -> str:
    """What fixes ``key``'s imbalance (``over``: every key over the threshold)."""
    if method in ("metis", "multilevel", "kaminpar") and balance is not None:
        # Here, not at the top: importing partition.weights first runs partition/__init__.py
        # (the partitioners, Dask), which imports this module; prep inspect needs neither.
        from graphprep.pipeline.partition.weights import combined_constraints, constraint_keys

        combined = combined_constraints(balance)
        inside = {k for c in combined for k in constraint_keys(c)}
        if key in inside:
            holder = next(c for c in combined if key in constraint_keys(c))
            apart = ",".join(k for c in balance for k in constraint_keys(c))
            return (f"--balance {','.join(balance)} balances {key} only within the combined "
                    f"weight {holder}; partition with --balance {apart} to balance each "
                    "on its own")
        if key in balance and key == "edges":
            return ("--balance edges could not be met: a node is never split, and a hub "
                    "whose in-edges exceed a part's share stays whole; use fewer parts")
        if key in balance:
            return (f"--balance {key} could not be met together with the other constraints; "
                    "try a larger --imbalance or fewer constraints")
        wanted = ",".join(list(combined) + [k for k in ("ntypes", "train", "edges") if k not in inside
                                      and (k in balance or k == "ntypes" or k in over)])
        return (f"partition with --balance {wanted} (metis, multilevel and auto balance "
                "edges and training nodes by default)")
    lead = "--method random balances node counts only: " if method == "random" else ""
    hubs = ("; a node is never split, so a hub whose in-edges exceed a part's share needs "
            "fewer parts" if key == "edges" else "")
    return (f"{lead}partition with --method metis, multilevel or auto, whose default --balance "
            f"balances edges and training nodes{hubs}")


def made_with(meta) -> tuple[str | None, tuple[str, ...] | None]:
    """``(method, balance)`` of an assignment (``AssignmentMeta``) from its options, for
    :func:`work_warnings`; ``(None, None)`` for one that does not say (DGL's)."""
    balance = (meta.options or {}).get("balance")
    if balance is None:
        return None, None
    return meta.method_name, tuple(balance)
