"""The array helpers: ``mix`` computes splitmix64 chained over its parts whatever its blocking
(every seeded decision of the pipeline, and so every output's bytes, rests on it)."""

from __future__ import annotations

import numpy as np
import pytest

from graphprep.pipeline.core import arrayops
from graphprep.pipeline.core.arrayops import mix

M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix_chain(*parts):
    """The definition, one numpy operation at a time."""
    with np.errstate(over="ignore"):
        h = np.uint64(0x9E3779B97F4A7C15)
        for p in parts:
            h = np.asarray(p).astype(np.uint64) + h * np.uint64(0x100000001B3)
            h = h ^ (h >> np.uint64(30))
            h = h * M1
            h = h ^ (h >> np.uint64(27))
            h = h * M2
            h = h ^ (h >> np.uint64(31))
    return h


@pytest.mark.parametrize("block", [7, 1 << 15])
def test_mix_is_the_chain_for_scalars_arrays_and_broadcasts(monkeypatch, block):
    monkeypatch.setattr(arrayops, "MIX_BLOCK", block)
    rng = np.random.default_rng(1)
    x = rng.integers(-10**12, 10**12, 1001)
    y = rng.integers(0, 10**8, 1001).astype(np.int32)
    cases = [(5, 6), (3, 4, 1, x), (3, 4, x, y), (x,), (x, 7), (3, x[:5, None], y[None, :4]),
             (1, np.array([], np.int64)), (2, x > 0)]
    for parts in cases:
        got, want = mix(*parts), splitmix_chain(*parts)
        assert type(got) is type(want) and np.shape(got) == np.shape(want)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.asarray(got).dtype == np.uint64


@pytest.mark.parametrize("case", ["ties", "distinct", "one", "empty", "int32", "negative",
                                  "too wide"])
def test_stable_argsort_is_numpys_stable_argsort(case):
    """The same permutation as ``np.argsort(kind="stable")``, ties in input order, whether it
    packs positions into the keys or falls back (negative keys, keys too wide to pack)."""
    rng = np.random.default_rng(2)
    keys = {"ties": rng.integers(0, 50, 10_000), "distinct": rng.permutation(70_000),
            "one": np.array([7]), "empty": np.array([], np.int64),
            "int32": rng.integers(0, 1000, 5000).astype(np.int32),
            "negative": rng.integers(-5, 5, 3000),
            "too wide": rng.integers(0, 1 << 62, 3000) | (1 << 61)}[case]
    got = arrayops.stable_argsort(keys)
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))
    assert len(got) == len(keys) and np.issubdtype(got.dtype, np.integer)
