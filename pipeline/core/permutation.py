"""A keyed pseudorandom permutation of ``[0, n)``, evaluated pointwise (no O(n) state).

A 4-round Feistel network on ``[0, 4^h)`` (``4^h >= n``) with cycle walking into ``[0, n)``:
``permute(ids)`` for any slice of IDs, in any chunking, gives the same values, so a chunk task
can compute its slice alone. Used for exactly balanced random partitions.
"""

from __future__ import annotations

import numpy as np

_MUL = np.uint64(0x9E3779B97F4A7C15)
ROUNDS = 4


class FeistelPermutation:
    def __init__(self, n: int, seed: int, stream: int = 0):
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self.half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
        self.mask = np.uint64((1 << self.half) - 1)
        keys = np.random.default_rng([seed, 7, stream]).integers(0, 2**63, ROUNDS)
        self.keys = keys.astype(np.uint64)

    def _round(self, r: np.ndarray, key: np.uint64) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((r ^ key) * _MUL >> np.uint64(64 - self.half)) & self.mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << h) | right

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """The permuted values of ``ids`` (each in ``[0, n)``), as int64."""
        x = self._encrypt(np.asarray(ids, dtype=np.uint64))
        out = x >= np.uint64(self.n)
        while out.any():  # cycle walking: re-encrypt until inside [0, n)
            x[out] = self._encrypt(x[out])
            out = x >= np.uint64(self.n)
        return x.astype(np.int64)
