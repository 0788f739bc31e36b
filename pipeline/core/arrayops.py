"""Array helpers shared by the pipeline's tasks."""

from __future__ import annotations

import numpy as np


def sort_ints(values: np.ndarray, presorted: bool = False) -> None:
    """Sort a 1-D integer array in place. ``presorted``: it is largely in order already
    (sorted runs one after the other, or a CSR block's rows in order with each row's columns
    in any order), and a merge sort (timsort) uses that.

    Timsort took 9-16 ns per key on 2^20 keys in rows of 4-64 and 27 ns in rows of 1,000.
    numpy's int64 quicksort takes ~50 ns per key whatever the order where it is not a SIMD
    sort (and where it is x86-simd-sort's AVX-512 code on AMD Zen 4), and ~10 ns with its AVX2
    or AVX-512 sort (``simd.py``): timsort is never much slower on keys in order, and can be
    5x faster, while quicksort stays the choice for keys in no order.
    """
    values.sort(kind="stable" if presorted else "quicksort")


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of a 1-D integer array, the same permutation, as one
    sort of ``key << b | position`` where every key is non-negative and that fits in 63
    bits; else the stable argsort itself.

    numpy's stable argsort is a merge sort of indices (86 ns per random int64 key here, or a
    radix sort of 8- and 16-bit keys), while an int64 sort is SIMD code where numpy has it
    (10 ns with AVX2, ``simd.py``; 50 ns where it has none). Holds one int64 array of the
    keys' length, which it returns.
    """
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    b = max(int(n - 1).bit_length(), 1)
    if int(keys.min()) < 0 or int(keys.max()).bit_length() + b > 63:
        return np.argsort(keys, kind="stable")
    packed = keys.astype(np.int64)                  # a copy: the one array of the sort
    packed <<= b
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    packed &= (1 << b) - 1
    return packed


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
_CHAIN, _SEED = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
# mix hashes arrays this many elements at a time, in place: its five passes per part then stay
# in the core's cache (2.5x faster on 1.3M elements than a new array per operation)
MIX_BLOCK = 1 << 15


def mix(*parts) -> np.ndarray:
    """Seeded 64-bit hash (splitmix64 finalizer chained over ``parts``, ints or int arrays
    broadcast together): per-element random decisions that depend only on the element,
    whatever the task layout. Returns a uint64 scalar or array; holds its output and one
    block of scratch."""
    with np.errstate(over="ignore"):
        h = _SEED
        arrays = [np.asarray(p) for p in parts]
        while arrays and arrays[0].ndim == 0:          # leading scalars: the seed's chain
            h = _finalized(arrays.pop(0).astype(np.uint64) + h * _CHAIN)
        if not arrays:
            return h
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        out = np.empty(shape, dtype=np.uint64)
        flat = out.reshape(-1)
        rest = [np.broadcast_to(a, shape).reshape(-1) for a in arrays]
        scratch = np.empty(min(MIX_BLOCK, flat.size), dtype=np.uint64)
        for a in range(0, flat.size, MIX_BLOCK):
            block = flat[a:a + MIX_BLOCK]
            tmp = scratch[:len(block)]
            np.copyto(block, rest[0][a:a + MIX_BLOCK], casting="unsafe")
            block += h * _CHAIN
            _finalize(block, tmp)
            for more in rest[1:]:
                block *= _CHAIN
                block += more[a:a + MIX_BLOCK].astype(np.uint64)
                _finalize(block, tmp)
    return out


def _finalized(h):
    """splitmix64's finalizer of a scalar."""
    h = h ^ (h >> _S30)
    h = h * _M1
    h = h ^ (h >> _S27)
    h = h * _M2
    return h ^ (h >> _S31)


def _finalize(h: np.ndarray, tmp: np.ndarray) -> None:
    """splitmix64's finalizer of ``h`` in place (``tmp``: scratch of its size)."""
    np.right_shift(h, _S30, out=tmp)
    h ^= tmp
    h *= _M1
    np.right_shift(h, _S27, out=tmp)
    h ^= tmp
    h *= _M2
    np.right_shift(h, _S31, out=tmp)
    h ^= tmp
