"""The part halo's bit set: rank queries against a binary search of the sorted IDs."""

import numpy as np
import pytest

from graphprep.dispatch import halo as halo_mod
from graphprep.dispatch.halo import BitRank


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 4099])
def test_rank_is_the_position_in_the_sorted_members(n):
    rng = np.random.default_rng(n)
    members = rng.random(n) < 0.3
    bits = BitRank(members)
    ids = np.flatnonzero(members)
    assert bits.count == len(ids)
    np.testing.assert_array_equal(np.concatenate([*bits.id_blocks(words=1), []]), ids)
    np.testing.assert_array_equal(np.concatenate([*bits.id_blocks(), []]), ids)
    queries = rng.integers(0, n, 5 * n)
    np.testing.assert_array_equal(bits.rank(queries), np.searchsorted(ids, queries))
    # a member's rank is its index in the sorted halo: the CSC's local index - owned count
    np.testing.assert_array_equal(bits.rank(ids), np.arange(len(ids)))


def test_popcount_without_bitwise_count(monkeypatch):
    words = np.random.default_rng(0).integers(0, 2**63, 1000, dtype=np.int64).astype(np.uint64)
    words[:3] = [0, np.uint64(2**64 - 1), 1]
    expected = np.array([bin(int(w)).count("1") for w in words])
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    np.testing.assert_array_equal(halo_mod.popcount(words), expected)
