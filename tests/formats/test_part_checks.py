"""A rank's start-up check reads a bounded sample of its part's rows, whatever the part's
size; ``--verify-data`` reads every row (issue 50, item 3)."""

from __future__ import annotations

import os
import shutil
from collections import Counter

import numpy as np
import pytest

from conftest import dispatched, rerecord
from graphprep.formats import part_checks
from graphprep.formats.errors import FormatError
from graphprep.formats.partitioned import load_partitioned

SLICES, ELEMENTS = 4, 512          # the sample, shrunk so that a small part exceeds it


class Counted(np.ndarray):
    """A memory-mapped array that counts the elements read from it: by indexing, or by a
    ufunc (``min``, ``isfinite``...) over the whole array."""

    reads: Counter = Counter()

    def __getitem__(self, key):
        out = np.asarray(self).__getitem__(key)
        Counted.reads[self.path] += np.size(out)
        return out

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        for x in inputs:
            if isinstance(x, Counted):
                Counted.reads[x.path] += x.size
        return getattr(ufunc, method)(*(np.asarray(x) for x in inputs), **kw)


@pytest.fixture
def counted(monkeypatch):
    """Every array the checks open counts its reads; the sample is SLICES x ELEMENTS."""
    opened = part_checks._open

    def _open(path, **kw):
        arr = opened(path, **kw).view(Counted)
        arr.path = path
        return arr

    monkeypatch.setattr(part_checks, "_open", _open)
    monkeypatch.setattr(part_checks, "SAMPLE_SLICES", SLICES)
    monkeypatch.setattr(part_checks, "SAMPLE_ELEMENTS", ELEMENTS)
    Counted.reads = Counter()
    return Counted.reads


@pytest.fixture(scope="module")
def parts(scheduler, rmat, tmp_path_factory):
    """R-MAT scale 13 (131,072 edges) in 2 parts: graph.json's path."""
    return dispatched(scheduler, rmat, tmp_path_factory.mktemp("parts") / "d", 2)


def sizes(graph_json: str, p: int) -> dict[str, int]:
    """Elements of every array file of part ``p``."""
    g = load_partitioned(graph_json)
    out = {}
    for root, _, files in os.walk(g.part_path(p)):
        for name in files:
            if name.endswith(".npy"):
                path = os.path.join(root, name)
                out[path] = np.load(path, mmap_mode="r").size
    return out


def test_default_check_reads_a_bounded_sample_of_every_array(parts, counted):
    part_checks.check_part(load_partitioned(parts), 0)
    whole = sizes(parts, 0)
    big = {path for path, n in whole.items() if n > SLICES * ELEMENTS * 4}
    assert len(big) >= 3             # indices, edge orig_ids, features: the test means something
    for path, n in counted.items():
        # every slice is ELEMENTS long (rows of wide arrays: a row's elements), read at most
        # twice (range, then order or labels) and by the whole-slice ufuncs
        assert n <= 6 * SLICES * max(ELEMENTS, 64), (path, n, whole[path])
    assert all(counted[path] < whole[path] for path in big), counted


def test_verify_data_reads_every_row(parts, counted):
    part_checks.check_part(load_partitioned(parts), 0, verify_data=True)
    for path, n in sizes(parts, 0).items():
        assert counted[path] >= n, path


def damage(graph_json: str, tmp_path, row: int) -> tuple[str, str]:
    """A copy of the parts whose part 0 ``indices`` hold an out-of-range value at ``row``
    (negative: from the end), the manifest re-recorded (a dispatch bug, not a changed file):
    ``(graph.json of the copy, the damaged file)``."""
    src = os.path.dirname(graph_json)
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    g = load_partitioned(str(copy / "graph.json"))
    et = g.edge_types[0]
    path = g.part_path(0, "edges", et.dirname, "indices.npy")
    arr = np.load(path, mmap_mode="r+")
    arr[row] = np.iinfo(arr.dtype).max
    arr.flush()
    del arr
    rerecord(str(copy), 0, os.path.relpath(path, g.part_path(0)))
    return str(copy / "graph.json"), path


@pytest.mark.parametrize("row", [0, -1])
def test_the_sample_holds_the_first_and_last_rows(parts, counted, tmp_path, row):
    graph_json, path = damage(parts, tmp_path, row)
    with pytest.raises(FormatError, match="local source index") as err:
        part_checks.check_part(load_partitioned(graph_json), 0)
    assert err.value.file == path


def test_a_row_between_the_samples_needs_verify_data(parts, counted, tmp_path):
    g = load_partitioned(parts)
    m = g.edge_map[g.edge_types[0]][0]
    middle = (m[1] - m[0]) // 2     # between the samples at a third and two thirds
    graph_json, path = damage(parts, tmp_path, middle)
    part_checks.check_part(load_partitioned(graph_json), 0)
    with pytest.raises(FormatError, match="local source index") as err:
        part_checks.check_part(load_partitioned(graph_json), 0, verify_data=True)
    assert err.value.file == path and f"row {middle}" in str(err.value)
