"""One level of the multilevel hierarchy on disk.

A level is a folder holding its graph as a CSR per node range (``r00000.indptr.npy`` int64
local offsets, ``.adj.npy`` global neighbour IDs, ``.wgt.npy`` edge weights; both directions of
every edge, no self-loops, no duplicates) and ``vwgt.npy``, the ``[n, ncon]`` int64 vertex
weights (memory-mapped: tasks read only the rows they touch). A task loads one range's CSR.
IDs and weights are stored as int32 where they fit, and unit weights (level 0) not at all: at
10^9 edges level 0 takes 8 GB of disk instead of 32 GB.

Tasks read a range's CSR in blocks of consecutive rows (``Level.read_csr_blocks``) and write
one block by block (``CSRWriter``), at most ``BLOCK_ENTRIES`` entries plus rows a block: above
``method.MAX_RANGES`` ranges a range grows with the graph (~781k nodes, ~16M entries at 10^9
edges), and a task holding whole ranges grew with it (examples/benchmarks/RESULTS.md,
"bench_pipeline.py `--huge --method multilevel`", second run). Rows of different blocks are
disjoint, so per-row work gives the same result block by block as on the whole range. A row
over the limit comes in pieces to the passes that can take it so (``split_rows``); per-row
work sums the pieces' connections before it decides (``whole_rows``, ``summed_pieces``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter

import numpy as np

from graphprep.formats.npyio import npy_header_bytes, npy_header_of
from graphprep.formats.output import save_npy, writing
from graphprep.pipeline.core.arrayops import sort_ints, stable_argsort

# Entries plus rows of one block (``cut_points``): below the ~2.6M entries of a 2^17-node
# range at 10^8 edges, so that a task holds no more at 10^9 edges than at 10^8.
BLOCK_ENTRIES = 1 << 21
# A row over the block limit comes in pieces of BLOCK_ENTRIES / PIECES entries: a reader holds
# what it kept of the earlier pieces while it reads the next one.
PIECES = 4


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
        """The CSR of range ``r`` (loaded: ~16 B per stored edge entry). For the coarsest
        level; range tasks use ``read_csr_blocks``."""
        start, stop = self.bounds(r)
        adj = np.load(self.csr_path(r, "adj"))
        wgt_path = self.csr_path(r, "wgt")
        # Sums of weights must not wrap: int64 in memory, whatever is stored.
        wgt = np.load(wgt_path).astype(np.int64) if os.path.exists(wgt_path) else \
            np.ones(len(adj), dtype=np.int64)
        return RangeCSR(start, stop, np.load(self.csr_path(r, "indptr")), adj, wgt)

    def read_csr_blocks(self, r: int, max_entries: int | None = None,
                        split_rows: bool = False) -> Iterator[RangeCSR]:
        """Range ``r``'s CSR as blocks of consecutive rows (``RangeCSR`` with the block's own
        ``start``/``stop``), of at most ``max_entries`` (default ``BLOCK_ENTRIES``) entries +
        rows each; at least one block, empty for a range without rows. A row with more
        entries is a block of its own, or, with ``split_rows``, several *pieces* of at
        most ``max_entries / PIECES`` entries, blocks of that one row with the same
        ``start`` (a reader that decides per row sums its pieces: ``whole_rows``). The
        coarse nodes of a power-law graph's hub clusters have rows of millions of entries
        (4.1M at level 1 of the planted 10^9 graph), and a propose task holding one whole
        held 4.8x what a range without it needs (``multilevel_hub_row.py``).
        A block reads only its slices of the adj and weight files, with one ``pread``-like
        call each (not memory-mapped: mapped pages would stay in the worker's RSS until the
        range is done). Holds the range's indptr (8 B per node) and one block (~12 B per
        entry: adj as stored, weights as int64)."""
        start, _ = self.bounds(r)
        limit = max_entries or BLOCK_ENTRIES
        indptr = np.load(self.csr_path(r, "indptr"))
        adj_path, wgt_path = self.csr_path(r, "adj"), self.csr_path(r, "wgt")
        adj = _npy_data(adj_path)
        wgt = _npy_data(wgt_path) if os.path.exists(wgt_path) else None
        cost = np.arange(len(indptr))
        cost += indptr
        cuts = cut_points(cost, limit)
        del cost
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            lo, hi = int(indptr[a]), int(indptr[b])
            step = max(limit // PIECES, 1) if split_rows and b == a + 1 else max(hi - lo, 1)
            for p in range(lo, max(hi, lo + 1), step):
                q = min(p + step, hi)
                # built in the yield: this frame keeps no reference to the block's arrays
                yield RangeCSR(start + a, start + b,
                               indptr[a:b + 1] - lo if q - p == hi - lo else
                               np.array([0, q - p], dtype=np.int64),
                               _read_slice(adj_path, adj, p, q),
                               np.ones(q - p, dtype=np.int64) if wgt is None else
                               _read_slice(wgt_path, wgt, p, q).astype(np.int64))

    def vwgt(self, mode: str = "r") -> np.ndarray:
        return np.load(self.path("vwgt.npy"), mmap_mode=mode)

    def num_entries(self) -> int:
        """Stored edge entries (2 per undirected edge), from the indptr files only."""
        return sum(int(np.load(self.csr_path(r, "indptr"), mmap_mode="r")[-1])
                   for r in range(self.num_ranges))


@dataclass(frozen=True)
class RangeCSR:
    """Rows ``start:stop`` (global node IDs) of a level: a whole range or a block of one."""
    start: int
    stop: int
    indptr: np.ndarray
    adj: np.ndarray
    wgt: np.ndarray

    def rows(self) -> np.ndarray:
        """Local row of every entry."""
        return np.repeat(np.arange(self.stop - self.start), np.diff(self.indptr))


def whole_rows(blocks: Iterable[RangeCSR]) -> Iterator[Iterator[RangeCSR]]:
    """The blocks of ``read_csr_blocks(..., split_rows=True)`` grouped by whole rows: a
    block alone, or the pieces of one split row; lazily, so that a reader summing a row's
    pieces holds one at a time."""
    return (group for _, group in groupby(blocks, key=attrgetter("start")))


def write_csr(level: Level, r: int, rows_local: np.ndarray, adj: np.ndarray,
              wgt: np.ndarray) -> None:
    """Write range ``r`` from entries sorted by (row, neighbour): int32 where the values fit,
    no weight file when every weight is 1."""
    start, stop = level.bounds(r)
    indptr = np.zeros(stop - start + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows_local, minlength=stop - start), out=indptr[1:])
    save_npy(level.csr_path(r, "indptr"), indptr)
    save_npy(level.csr_path(r, "adj"), adj.astype(narrowest(level.num_nodes), copy=False))
    if len(wgt) and not (wgt.min() == 1 and wgt.max() == 1):
        save_npy(level.csr_path(r, "wgt"), wgt.astype(narrowest(wgt.max() + 1), copy=False))


def cut_points(cost: np.ndarray, limit: int) -> np.ndarray:
    """Cuts ``0 = c_0 < c_1 < ... < c_m = len(cost) - 1`` of the items of a non-decreasing
    cumulative ``cost`` (``cost[i]``: the cost before item ``i``), greedily as few as keep
    every ``[c_j, c_{j+1})`` within ``limit``, or one item where that item alone exceeds it.
    ``[0, 0]`` without items. A loop over the cuts, not the items."""
    last = len(cost) - 1
    cuts = [0]
    while cuts[-1] < last:
        i = cuts[-1]
        j = int(np.searchsorted(cost, cost[i] + limit, side="right")) - 1
        cuts.append(min(max(j, i + 1), last))
    return np.asarray(cuts if last > 0 else [0, 0], dtype=np.int64)


class CSRWriter:
    """Writes range ``r``'s CSR block by block (``add``, rows in order) into the files
    ``write_csr`` writes, byte for byte. One block (``blocks=1``): ``write_csr`` itself.
    Several: adj goes straight into its ``.npy`` (the header, whose length numpy keeps
    independent of the shape, is written last); weights go as int64 into a scratch file from
    the first weight other than 1 on, and are narrowed into the ``.npy`` on ``close``. Holds
    the range's degree counts (8 B per node) and, on close, ``BLOCK_ENTRIES`` weights."""

    def __init__(self, level: Level, r: int, blocks: int):
        self.level, self.r, self.single = level, r, blocks <= 1
        start, stop = level.bounds(r)
        self.counts = np.zeros(stop - start, dtype=np.int64)
        self.entries, self.wmax, self.wgt = 0, 1, None
        self.adj_dtype = np.dtype(narrowest(level.num_nodes))
        if not self.single:
            self.adj_path = level.csr_path(r, "adj")
            self.adj = open(self.adj_path, "wb")
            self.adj.write(npy_header_bytes(self.adj_dtype, (0,)))

    def add(self, rows_local: np.ndarray, adj: np.ndarray, wgt: np.ndarray | None) -> None:
        """Entries of the next rows, sorted by (row, neighbour); ``wgt`` None: all 1."""
        if self.single:
            write_csr(self.level, self.r, rows_local, adj,
                      np.ones(len(adj), dtype=np.int64) if wgt is None else wgt)
            return
        if len(rows_local):               # rows sorted: one search per row, not per entry
            lo, hi = int(rows_local[0]), int(rows_local[-1]) + 1
            self.counts[lo:hi] += np.diff(np.searchsorted(rows_local, np.arange(lo, hi + 1)))
        with writing(self.adj_path):
            adj.astype(self.adj_dtype, copy=False).tofile(self.adj)
            if wgt is not None and len(wgt) and (wgt.min() != 1 or wgt.max() != 1):
                self.wmax = max(self.wmax, int(wgt.max()))
                if self.wgt is None:          # the unit weights so far, a block at a time
                    self.wgt = open(self.level.csr_path(self.r, "wgt") + ".part", "w+b")
                    for a in range(0, self.entries, BLOCK_ENTRIES):
                        np.ones(min(BLOCK_ENTRIES, self.entries - a), dtype=np.int64).tofile(
                            self.wgt)
            if self.wgt is not None:
                (np.ones(len(adj), dtype=np.int64) if wgt is None else
                 wgt.astype(np.int64, copy=False)).tofile(self.wgt)
        self.entries += len(adj)

    def close(self) -> None:
        """Finish the files (a no-op after ``write_csr``)."""
        if self.single:
            return
        indptr = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=indptr[1:])
        save_npy(self.level.csr_path(self.r, "indptr"), indptr)
        with writing(self.adj_path):
            header = npy_header_bytes(self.adj_dtype, (self.entries,))
            assert len(header) == len(npy_header_bytes(self.adj_dtype, (0,)))
            self.adj.seek(0)
            self.adj.write(header)
            self.adj.close()
        if self.wgt is None:
            return
        path = self.level.csr_path(self.r, "wgt")
        dtype = np.dtype(narrowest(self.wmax + 1))
        with writing(path), open(path, "wb") as out:
            out.write(npy_header_bytes(dtype, (self.entries,)))
            self.wgt.seek(0)
            for _ in range(0, self.entries, BLOCK_ENTRIES):
                np.fromfile(self.wgt, dtype=np.int64, count=BLOCK_ENTRIES).astype(
                    dtype).tofile(out)
        self.wgt.close()
        os.remove(path + ".part")


def _npy_data(path: str) -> tuple[np.dtype, int]:
    """The dtype of a 1-D ``.npy`` file and the byte offset of its data."""
    _, dtype, offset, _ = npy_header_of(path)
    return dtype, offset


def _read_slice(path: str, data: tuple[np.dtype, int], lo: int, hi: int) -> np.ndarray:
    """Items ``lo:hi`` of the 1-D ``.npy`` at ``path`` (``data``: ``_npy_data``'s)."""
    dtype, offset = data
    return np.fromfile(path, dtype=dtype, count=hi - lo, offset=offset + lo * dtype.itemsize)


def narrowest(bound: int):
    """int32 for values below ``bound`` when that fits, else int64."""
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


def part_dtype(num_parts: int):
    """Parts arrays are int16 below 2^15 parts: the refinement passes gather a neighbour's
    part per edge entry, and a smaller array keeps more of it in cache (the gather of 2.6M
    entries from 10^7 nodes: 62 ms int16, 75-94 ms int64)."""
    return np.int16 if num_parts < (1 << 15) else np.int32


def read_parts(path: str, index) -> np.ndarray:
    """``parts[index]`` of a memory-mapped parts file, as int64 (arithmetic on parts, like
    ``part * k``, must not wrap in int16)."""
    return np.asarray(np.load(path, mmap_mode="r")[index]).astype(np.int64)


def sum_by_key(keys: np.ndarray, values: np.ndarray, presorted: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``keys`` (non-negative) and the sums of ``values`` (1-D or [m, c]) per
    key. ``presorted``: the keys are largely in order already (sorted pieces one after the
    other, or ``row << b | column`` of a CSR block's rows in order), which a merge sort uses
    (``arrayops.sort_ints``). Holds a few arrays of the input's length."""
    if len(keys) == 0:
        return keys[:0], values[:0]
    if values.ndim == 1:
        packed = _packed_sum(keys, values, presorted)
        if packed is not None:
            return packed
    order = stable_argsort(keys)
    keys, values = keys[order], values[order]
    starts = _group_starts(keys)
    return keys[starts], np.add.reduceat(values, starts, axis=0)


def summed_pieces(pieces: Iterable[tuple[np.ndarray, np.ndarray]], limit: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``sum_by_key`` of the ``(keys, values)`` pairs of ``pieces`` together, summed as they
    come; each piece's keys are one or more sorted runs. Holds one piece and the distinct keys
    summed so far (re-summed once they pass ``limit``, unless every piece's keys are
    increasing and above the last piece's: the pieces of a row of distinct neighbours, which
    are only concatenated)."""
    done_k, done_w, held, ordered, last = [], [], 0, True, None
    for k, w in pieces:
        if not _increasing(k):
            k, w = sum_by_key(k, w, presorted=True)
        if len(k):
            ordered &= last is None or k[0] > last
            last = k[-1]
        done_k.append(k)
        done_w.append(w)
        held += len(k)
        del k, w
        if held > limit and len(done_k) > 1 and not ordered:
            k, w = sum_by_key(np.concatenate(done_k), np.concatenate(done_w), presorted=True)
            done_k, done_w, held = [k], [w], len(k)
            del k, w
    if len(done_k) == 1:
        return done_k[0], done_w[0]
    if not done_k:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys, values = np.concatenate(done_k), np.concatenate(done_w)
    del done_k, done_w
    return (keys, values) if ordered else sum_by_key(keys, values, presorted=True)


def _increasing(keys: np.ndarray) -> bool:
    return len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())


def _group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    first = np.empty(len(sorted_keys), dtype=bool)
    first[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return np.flatnonzero(first)


def _packed_sum(keys: np.ndarray, values: np.ndarray, presorted: bool = False):
    """The fast path of ``sum_by_key``: ``key << b | value`` in one int64 when both fit, so a
    plain sort (3-5x faster than a stable argsort plus two gathers, measured on 2.6M entries
    of a range) replaces the argsort. None when they do not fit. Holds two int64 arrays of
    the input's length besides it."""
    vmin, vmax = int(values.min()), int(values.max())
    if vmin < 0:
        return None
    b = max(vmax.bit_length(), 1)
    if int(keys.max()).bit_length() + b > 63:
        return None
    packed = keys.astype(np.int64)                  # a copy: the one array of the sort
    packed <<= b
    packed |= values
    sort_ints(packed, presorted)
    total = None if vmin == vmax else packed & ((1 << b) - 1)
    packed >>= b                                      # now the sorted keys
    starts = _group_starts(packed)
    if total is None:                                 # unit weights (level 0): counts
        sums = np.diff(np.append(starts, len(packed))) * vmin
    else:                                             # a cumsum is cheaper than reduceat
        np.cumsum(total, out=total)
        ends = total[np.append(starts[1:], len(packed)) - 1]
        sums = ends - np.concatenate([[0], ends[:-1]])
    return packed[starts], sums


def best_per_row(rows: np.ndarray, conn: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Per distinct value of ``rows`` (sorted), the index of its entry of largest ``conn``,
    ties to the larger ``tie`` (uint64 hash), then to the first entry. ``conn`` must be
    non-negative and below 2^39 (a sum of edge weights at one node). A segmented max instead
    of a 3-key lexsort: 4x faster on the ~650k candidates of a 2^17-node range."""
    if len(rows) == 0:
        return np.empty(0, dtype=np.int64)
    score = (conn.astype(np.int64) << 24) | (tie >> np.uint64(40)).astype(np.int64)
    starts = _group_starts(rows)
    sizes = np.diff(np.append(starts, len(rows)))
    best = np.repeat(np.maximum.reduceat(score, starts), sizes)
    hit = np.flatnonzero(score == best)
    first = np.ones(len(hit), dtype=bool)
    first[1:] = rows[hit[1:]] != rows[hit[:-1]]
    return hit[first]
