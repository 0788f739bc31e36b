"""``prep synth --generator rmat``: the Graph500 Kronecker (R-MAT) generator, vectorized.

An edge is ``scale`` independent draws of a quadrant of the adjacency matrix: at each level the
(source bit, destination bit) pair is (0, 0), (0, 1), (1, 0), (1, 1) with probabilities
``a, b, c, d = 1 - a - b - c`` (Graph500: 0.57, 0.19, 0.19, 0.05). The result is an *R-MAT
index* in ``[0, 2^scale)`` per end; a seeded bijection (:class:`RmatPermutation`, the keyed
Feistel permutation of ``prep partition --method random`` on its own key stream) maps indices to
node IDs, so the hubs (indices with few 1-bits, index 0 first) are spread over the ID space, as
Graph500 permutes its vertex labels. Self-loops and repeated edges are kept, as Graph500
generates them. The rows and blocks are synth's (see :mod:`graphprep.pipeline.synth`).

Labels: class ``floor(C * i / 2^scale)`` of the node's R-MAT index ``i`` -- its top bits before
the permutation (for a power-of-two ``C``, exactly the top ``log2 C`` bits). With Graph500's
initiator the bits of an edge's two ends are nearly independent (``a*d`` ~ ``b*c``), so R-MAT has
no communities to label and no labelling of it is homophilous; these classes differ in degree
(class 0's nodes, the indices with leading 0-bits, are the hubs; half of the last class's
nodes are isolated), and the features carry the signal like the planted graph's
(``signal * class_mean + N(0, 1)``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from graphprep.pipeline.core.permutation import FeistelPermutation

GRAPH500_ABC = (0.57, 0.19, 0.19)
# FeistelPermutation's key stream for synth's node IDs: random partitions use the type index as
# the stream, so a graph made with seed S and partitioned with seed S still gets parts
# unrelated to the R-MAT structure.
RMAT_STREAM = 0x524D4154  # "RMAT"
MAX_SCALE = 40


def check_abc(abc) -> tuple[float, float, float]:
    """``abc`` as three floats; raises ``ValueError`` unless finite, > 0 and summing below 1."""
    abc = tuple(float(x) for x in abc)
    text = ",".join(map(repr, abc))
    if len(abc) != 3:
        raise ValueError(f"{text}: expected three probabilities a,b,c (d = 1-a-b-c)")
    if not (all(math.isfinite(x) and x > 0 for x in abc) and sum(abc) < 1):
        raise ValueError(f"{text}: a, b and c must be finite and > 0 with a+b+c < 1 "
                         "(d = 1-a-b-c), e.g. Graph500's 0.57,0.19,0.19")
    return abc


class RmatPermutation(FeistelPermutation):
    """The seeded bijection R-MAT index -> node ID over ``[0, 2^scale)`` and its inverse."""

    def __init__(self, scale: int, seed: int):
        super().__init__(1 << scale, seed, stream=RMAT_STREAM)

    def _decrypt(self, y: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = y >> h, y & self.mask
        for key in self.keys[::-1]:  # undo left, right = right, left ^ F(right)
            left, right = right ^ self._round(left, key), left
        return (left << h) | right

    def inverse(self, ids: np.ndarray) -> np.ndarray:
        """The R-MAT indices of node ``ids``, as int64 (cycle walking undone step by step)."""
        x = self._decrypt(np.asarray(ids, dtype=np.uint64))
        out = x >= np.uint64(self.n)
        while out.any():
            x[out] = self._decrypt(x[out])
            out = x >= np.uint64(self.n)
        return x.astype(np.int64)


@functools.lru_cache(maxsize=8)
def permutation(scale: int, seed: int) -> RmatPermutation:
    return RmatPermutation(scale, seed)


def rmat_indices(rng: np.random.Generator, size: int, scale: int,
                 abc: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """``size`` R-MAT edges as (source, destination) indices, top bit first: one uniform per
    edge and level picks the quadrant (Graph500 draws two per level; same distribution)."""
    a, b, c = abc
    src, dst = np.zeros(size, np.int64), np.zeros(size, np.int64)
    for _ in range(scale):
        u = rng.random(size)
        s_bit = u >= a + b                  # quadrants c, d: source bit 1
        d_bit = (u >= a) != s_bit           # quadrant b ...
        d_bit ^= u >= a + b + c             # ... or d: destination bit 1
        src <<= 1
        dst <<= 1
        src += s_bit
        dst += d_bit
    return src, dst


def rmat_labels(ids: np.ndarray, scale: int, seed: int, num_classes: int) -> np.ndarray:
    """Class ``floor(C * i / 2^scale)`` of each node ID's R-MAT index ``i``."""
    index = permutation(scale, seed).inverse(ids).astype(np.uint64)
    return ((index * np.uint64(num_classes)) >> np.uint64(scale)).astype(np.int64)


def expected_isolated_fraction(scale: int, edge_factor: int,
                               abc: tuple[float, float, float] = GRAPH500_ABC) -> float:
    """The expected fraction of nodes with no edge at all (self-loops count as edges): a node
    whose index has ``k`` one-bits is an edge's source with probability ``(a+b)^(S-k)
    (c+d)^k``, its destination with ``(a+c)^(S-k) (b+d)^k`` and both with ``a^(S-k) d^k``."""
    a, b, c = abc
    d = 1 - a - b - c
    m = edge_factor << scale
    total = 0.0
    for k in range(scale + 1):
        q = ((a + b) ** (scale - k) * (c + d) ** k + (a + c) ** (scale - k) * (b + d) ** k
             - a ** (scale - k) * d ** k)
        total += math.comb(scale, k) * math.exp(m * math.log1p(-q))
    return total / 2 ** scale
