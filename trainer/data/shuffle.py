"""A keyed pseudo-random permutation of ``[0, n)`` computed per index, never stored.

An epoch over a part's training edges visits them in a shuffled order without holding a
permutation of them (at 10^9 edges a part has hundreds of millions: ``torch.randperm`` of
them alone would be gigabytes). :class:`KeyedPermutation` maps any batch of positions
``i`` to ``perm[i]`` with a 4-round Feistel network over the smallest even-bit domain
``2^(2h) >= n``, walking the cycle back into ``[0, n)`` for the values that land outside
(fewer than 4 steps in expectation). Vectorized over the batch; every intermediate product
stays below 2^63, so int64 tensor arithmetic is exact.
"""

from __future__ import annotations

import numpy as np
import torch

ROUNDS = 4
_MULTIPLIERS = (0x5BD1E995, 0x2C1B3C6D, 0x297A2D39, 0x3B9ACA07)  # odd, < 2^31


class KeyedPermutation:
    """``perm(i)``: a bijection of ``[0, n)`` chosen by ``key`` (any int). Holds nothing
    per element; ``perm(i)`` costs O(len(i)) per cycle-walking step."""

    def __init__(self, n: int, key: int):
        self.n = int(n)
        bits = max(2, int(self.n - 1).bit_length() if self.n > 1 else 1)
        self.half = (bits + 1) // 2              # each half of the Feistel domain, in bits
        self.mask = (1 << self.half) - 1
        keys = np.random.SeedSequence(int(key) & ((1 << 63) - 1)).generate_state(ROUNDS,
                                                                                 np.uint32)
        self.keys = [int(k) & self.mask for k in keys]

    def _round(self, x: torch.Tensor, r: int) -> torch.Tensor:
        h = ((x ^ self.keys[r]) * _MULTIPLIERS[r]) & 0xFFFFFFFF   # < 2^32 * 2^31
        h = h ^ (h >> 15)
        h = (h * _MULTIPLIERS[(r + 1) % ROUNDS]) & 0xFFFFFFFF
        return (h ^ (h >> 13)) & self.mask

    def _feistel(self, x: torch.Tensor) -> torch.Tensor:
        left, right = x >> self.half, x & self.mask
        for r in range(ROUNDS):
            left, right = right, left ^ self._round(right, r)
        return (left << self.half) | right

    def __call__(self, i: torch.Tensor) -> torch.Tensor:
        """``perm[i]`` for int64 positions ``i`` in ``[0, n)``."""
        out = self._feistel(i.long())
        outside = torch.nonzero(out >= self.n).flatten()
        while len(outside):                      # cycle walking: stays a bijection of [0, n)
            out[outside] = self._feistel(out[outside])
            outside = outside[out[outside] >= self.n]
        return out
