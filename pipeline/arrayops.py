"""Array helpers shared by the pipeline's tasks."""

from __future__ import annotations

import numpy as np


def unique_ints(values: np.ndarray, *, inplace: bool = False) -> np.ndarray:
    """Sorted distinct values of a 1-D integer array (``np.unique`` without its cost).

    numpy 2.4's ``np.unique`` on int64 is ~100x slower than a sort here (measured: 6.7 s vs
    0.07 s for 9 M keys). ``inplace`` sorts ``values`` itself to save a copy.
    """
    s = values if inplace else values.copy()
    s.sort()
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
