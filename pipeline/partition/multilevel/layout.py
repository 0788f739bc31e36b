"""One level of the multilevel hierarchy on disk.

A level is a folder holding its graph as a CSR per node range (``r00000.indptr.npy`` local
offsets, ``.adj.npy`` global neighbour IDs, ``.wgt.npy`` int64 edge weights; both directions of
every edge, no self-loops, no duplicates) and ``vwgt.npy``, the ``[n, ncon]`` int64 vertex
weights (memory-mapped: tasks read only the rows they touch). A task loads one range's CSR.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Level:
    folder: str
    num_nodes: int
    range_size: int
    ncon: int
    count_cols: int          # leading vwgt columns that count nodes (sum 1 per fine node)

    @property
    def num_ranges(self) -> int:
        return max(1, -(-self.num_nodes // self.range_size))

    def bounds(self, r: int) -> tuple[int, int]:
        return r * self.range_size, min((r + 1) * self.range_size, self.num_nodes)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def csr_path(self, r: int, what: str) -> str:
        return self.path(f"r{r:05d}.{what}.npy")

    def read_csr(self, r: int) -> RangeCSR:
        """The CSR of range ``r`` (loaded: ~16 B per stored edge entry)."""
        start, stop = self.bounds(r)
        return RangeCSR(start, stop, np.load(self.csr_path(r, "indptr")),
                        np.load(self.csr_path(r, "adj")), np.load(self.csr_path(r, "wgt")))

    def vwgt(self, mode: str = "r") -> np.ndarray:
        return np.load(self.path("vwgt.npy"), mmap_mode=mode)

    def num_entries(self) -> int:
        """Stored edge entries (2 per undirected edge), from the indptr files only."""
        return sum(int(np.load(self.csr_path(r, "indptr"), mmap_mode="r")[-1])
                   for r in range(self.num_ranges))


@dataclass(frozen=True)
class RangeCSR:
    start: int
    stop: int
    indptr: np.ndarray
    adj: np.ndarray
    wgt: np.ndarray

    def rows(self) -> np.ndarray:
        """Local row of every entry."""
        return np.repeat(np.arange(self.stop - self.start), np.diff(self.indptr))


def write_csr(level: Level, r: int, rows_local: np.ndarray, adj: np.ndarray,
              wgt: np.ndarray) -> None:
    """Write range ``r`` from entries sorted by (row, neighbour)."""
    from formats.output import save_npy
    start, stop = level.bounds(r)
    indptr = np.zeros(stop - start + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows_local, minlength=stop - start), out=indptr[1:])
    save_npy(level.csr_path(r, "indptr"), indptr)
    save_npy(level.csr_path(r, "adj"), adj.astype(np.int64, copy=False))
    save_npy(level.csr_path(r, "wgt"), wgt.astype(np.int64, copy=False))


def new_array(path: str, shape, dtype=np.int64) -> None:
    """Pre-size a memory-mapped ``.npy`` that tasks fill slice by slice."""
    np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape).flush()


def sum_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``keys`` and the sums of ``values`` (1-D or [m, c]) per key."""
    if len(keys) == 0:
        return keys[:0], values[:0]
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return keys[starts], np.add.reduceat(values, starts, axis=0)


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix(*parts) -> np.ndarray:
    """Seeded 64-bit hash (splitmix64 finalizer chained over ``parts``, ints or int arrays):
    the tie-breaks and coin flips of every round, the same whatever the task layout."""
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
