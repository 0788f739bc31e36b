"""Array helpers shared by the pipeline's tasks."""

from __future__ import annotations

import numpy as np


def sort_ints(values: np.ndarray, presorted: bool = False) -> None:
    """Sort a 1-D integer array in place. ``presorted``: it is largely in order already
    (sorted runs one after the other, or a CSR block's rows in order with each row's columns
    in any order), and a merge sort (timsort) uses that.

    numpy 2.4's int64 quicksort takes ~50 ns per entry here whatever the order. Timsort took
    9-16 ns on 2^20 keys in rows of 4-64 and 27 ns in rows of 1,000, and ~8% more than
    quicksort on keys in no order, which is why it is not the default.
    """
    values.sort(kind="stable" if presorted else "quicksort")


def unique_ints(values: np.ndarray, *, inplace: bool = False,
                presorted: bool = False) -> np.ndarray:
    """Sorted distinct values of a 1-D integer array (``np.unique`` without its cost).

    numpy 2.4's ``np.unique`` on int64 is ~100x slower than a sort here (measured: 6.7 s vs
    0.07 s for 9 M keys). ``inplace`` sorts ``values`` itself to save a copy; ``presorted``:
    see :func:`sort_ints`.
    """
    s = values if inplace else values.copy()
    sort_ints(s, presorted)
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix(*parts) -> np.ndarray:
    """Seeded 64-bit hash (splitmix64 finalizer chained over ``parts``, ints or int arrays):
    per-element random decisions that depend only on the element, whatever the task layout."""
    with np.errstate(over="ignore"):
        h = np.uint64(0x9E3779B97F4A7C15)
        for p in parts:
            h = np.asarray(p).astype(np.uint64) + h * np.uint64(0x100000001B3)
            h = h ^ (h >> np.uint64(30))
            h = h * _M1
            h = h ^ (h >> np.uint64(27))
            h = h * _M2
            h = h ^ (h >> np.uint64(31))
    return h
