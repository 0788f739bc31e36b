"""Scratch tables bucketed by node range: how one pass hands rows to the tasks of the next.

A task writes its rows sorted by a destination range as one raw file and returns the
offsets of each range's slice to the client, which passes every reader its
``(path, start, stop)`` spans. A reader then opens only the files that hold rows for it, and
reads each slice with one ``pread``-like call: no ``.npy`` header to parse and no offsets file
to load. At 10^8 edges the ``.npy`` + offsets version spent ~38 ms of each task opening
2 x 77 files, a third of coarsening's accept and apply passes.

A task that produces its rows block by block appends one such table per block to its file
(``append_bucketed``; a span then names its table's byte offset), and a reader that must not
hold all its rows at once takes them in row blocks of its own range (``key_blocks``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from graphprep.formats.output import writing

from graphprep.pipeline.partition.multilevel.layout import cut_points

GRID = 16          # key_blocks: candidate cuts per block, before refining
# key_blocks: rounds of refining cells over the limit (each cuts a cell in 32 or more: a hub's
# row among 10^5 others is a cell of its own after 4, and cut by column after 5)
REFINE_ROUNDS = 8


@dataclass(frozen=True)
class Span:
    path: str
    start: int       # first row
    stop: int        # one past the last row
    dtype: str = "int64"
    base: int = 0    # byte offset of the table in the file (files of several tables)


def write_bucketed(path: str, table: np.ndarray, keys: np.ndarray,
                   bounds: np.ndarray) -> np.ndarray:
    """Write ``table`` (rows sorted by ``keys``) raw to ``path``; returns the row offsets of
    each ``[bounds[i], bounds[i + 1])`` key range (``len(bounds)`` values)."""
    with writing(path):
        np.ascontiguousarray(table).tofile(path)
    return np.searchsorted(keys, bounds)


def append_bucketed(f, table: np.ndarray, keys: np.ndarray,
                    bounds: np.ndarray) -> tuple[int, np.ndarray]:
    """``write_bucketed`` into the open file ``f`` after the tables already there: returns
    the table's byte offset in the file and its row offsets of each key range."""
    base = f.tell()
    with writing(f.name):
        np.ascontiguousarray(table).tofile(f)
    return base, np.searchsorted(keys, bounds)


class TableFile:
    """A raw file that a task appends tables to (``append_bucketed``), one per block of its
    rows, remembering each table's ``(byte offset, row offsets)`` for ``table_spans``."""

    def __init__(self, path: str):
        self.path, self.tables = path, []
        self.file = open(path, "wb")

    def append(self, table: np.ndarray, keys: np.ndarray, bounds: np.ndarray) -> None:
        self.tables.append(append_bucketed(self.file, table, keys, bounds))

    def __enter__(self) -> "TableFile":
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def table_spans(paths: list[str], tables: list[list[tuple[int, np.ndarray]]],
                s: int) -> tuple[Span, ...]:
    """``spans_into`` for files of several tables: ``tables[i]`` lists the ``(byte offset,
    row offsets)`` of the tables of ``paths[i]`` (``TableFile.tables``)."""
    flat = [(p, base, off) for p, ts in zip(paths, tables) for base, off in ts]
    return spans_into([p for p, _, _ in flat], [off for _, _, off in flat], s, None,
                      [base for _, base, _ in flat])


def span_groups(pieces: tuple[tuple[Span, ...], ...], max_rows: int
                ) -> Iterator[tuple[Span, ...]]:
    """Consecutive ``pieces`` (each the spans of one bucket) joined while their rows stay
    within ``max_rows``; a piece over it alone. A piece is never split, so a reader that
    decides per key keeps each key's rows together."""
    group, size = [], 0
    for piece in pieces:
        rows = sum(x.stop - x.start for x in piece)
        if group and size + rows > max_rows:
            yield tuple(group)
            group, size = [], 0
        group.extend(piece)
        size += rows
    if group:
        yield tuple(group)


def spans_into(paths: list[str], offsets: list[np.ndarray], s: int,
               dtypes: list[str] | None = None,
               bases: list[int] | None = None) -> tuple[Span, ...]:
    """The non-empty slices for bucket ``s`` of every written table (of ``dtypes``, default
    int64; at byte offsets ``bases`` in their files, default 0)."""
    dtypes = dtypes or ["int64"] * len(paths)
    bases = bases or [0] * len(paths)
    return tuple(Span(p, int(o[s]), int(o[s + 1]), d, b)
                 for p, o, d, b in zip(paths, offsets, dtypes, bases) if o[s + 1] > o[s])


def read_spans(spans: tuple[Span, ...], cols: int = 1, dtype=np.int64) -> np.ndarray:
    """The rows of ``spans`` (tables of ``cols`` columns), concatenated as ``dtype``. Each
    file is opened once, however many of its tables are read, and a span of ``dtype`` is
    read straight into the result. Holds the result and one span of another dtype."""
    out = np.empty((sum(s.stop - s.start for s in spans), cols), dtype=dtype)
    files = {}
    try:
        pos = 0
        for s in spans:
            f = files.get(s.path) or files.setdefault(s.path, open(s.path, "rb", buffering=0))
            rows, src = s.stop - s.start, np.dtype(s.dtype)
            into = out[pos:pos + rows] if src == out.dtype else np.empty((rows, cols), src)
            _read_into(f, into, s.base + s.start * cols * src.itemsize)
            if into.base is not out:
                out[pos:pos + rows] = into
            pos += rows
    finally:
        for f in files.values():
            f.close()
    return out


def _read_into(f, array: np.ndarray, offset: int) -> None:
    """Fill the contiguous ``array`` with the bytes of the raw file ``f`` from ``offset``."""
    view = memoryview(array).cast("B")
    f.seek(offset)
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise EOFError(f"{f.name}: {len(view) - done} bytes missing at {offset + done}")
        done += got


def span_rows(spans: tuple[Span, ...], max_rows: int) -> Iterator[tuple[Span, ...]]:
    """``spans`` regrouped (a long one split) into groups of at most ``max_rows`` rows, for
    ``read_spans`` one group at a time."""
    group, size = [], 0
    for s in spans:
        start = s.start
        while start < s.stop:
            take = min(s.stop - start, max_rows - size)
            group.append(replace(s, start=start, stop=start + take))
            start, size = start + take, size + take
            if size == max_rows:
                yield tuple(group)
                group, size = [], 0
    if group:
        yield tuple(group)


def key_rows(spans: tuple[Span, ...], keys: np.ndarray, max_rows: int) -> np.ndarray:
    """``[len(spans), len(keys)]``: per span (a table of one key column, sorted), the row
    where its keys reach each of the sorted ``keys``. Reads the spans, ``max_rows`` rows at
    a time (the count of a span's keys below a key is the sum over its pieces). Not by binary
    searches in a memory map: on files still in the page cache each probe maps ~64 KB
    (fault-around), and the searches of a range task mapped most of its input (+125 MB of
    RSS on 16.8M keys)."""
    out = np.zeros((len(spans), len(keys)), dtype=np.int64)
    out += np.array([s.start for s in spans], dtype=np.int64)[:, None]
    for i, s in enumerate(spans):
        for group in span_rows((s,), max_rows):
            out[i] += np.searchsorted(read_spans(group)[:, 0], keys)
    return out


def key_blocks(spans: tuple[Span, ...], start: int, stop: int, n: int, limit: int
               ) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """Blocks ``[a, b)`` of the keys ``row * n + col`` of the rows ``start:stop``, whose
    entries come in ``spans`` (each sorted), with at most about ``limit`` incoming entries
    plus rows each: ``(a, b, lo, hi)``, where span ``i``'s entries of the block are
    ``lo[i]:hi[i]`` (``sub_spans``). Blocks end between rows, except that a row whose
    entries alone are over the limit is cut by column (a reader's blocks then hold pieces
    of it, in order). One block when all of them fit. Else cuts are chosen among a grid of
    keys (``GRID`` per block), counted by one read of the spans (``key_rows``) and refined,
    by reading their entries again, where a cell alone is over the limit. Holds ``limit``
    keys and ``len(spans)`` int64 per grid point."""
    lo = np.array([s.start for s in spans], dtype=np.int64)
    hi = np.array([s.stop for s in spans], dtype=np.int64)
    total = int((hi - lo).sum())
    if total + (stop - start) <= limit:
        return [(start * n, stop * n, lo, hi)]
    grid = _grid_keys(start * n, stop * n, n, GRID * -(-total // limit))
    pos = key_rows(spans, grid, limit)
    for _ in range(REFINE_ROUNDS):
        cell = np.diff(pos.sum(axis=0)) + np.diff(grid // n)
        big = np.flatnonzero((cell > limit) & (np.diff(grid) > 1))
        if len(big) == 0:
            break
        points, rows = [grid], [pos]
        for i in big:
            inner = _grid_keys(int(grid[i]), int(grid[i + 1]), n,
                               GRID * -(-int(cell[i]) // limit))[1:-1]
            cut = tuple(replace(s, start=int(a), stop=int(b))
                        for s, a, b in zip(spans, pos[:, i], pos[:, i + 1]))
            points.append(inner)
            rows.append(key_rows(cut, inner, limit))
        grid = np.concatenate(points)
        order = np.argsort(grid, kind="stable")
        grid, pos = grid[order], np.concatenate(rows, axis=1)[:, order]
    cuts = cut_points(pos.sum(axis=0) + grid // n, limit)
    return [(int(grid[i]), int(grid[j]), pos[:, i], pos[:, j])
            for i, j in zip(cuts[:-1], cuts[1:])]


def _grid_keys(a: int, b: int, n: int, cells: int) -> np.ndarray:
    """About ``cells + 1`` sorted distinct keys from ``a`` to ``b`` (both included), evenly
    spread: on row boundaries (multiples of ``n``) where ``(a, b)`` holds any, else within
    the row."""
    first, last = -(-(a + 1) // n), (b - 1) // n            # rows starting inside (a, b)
    if first <= last:
        inner = np.linspace(first, last, min(last - first + 1, cells)).astype(np.int64) * n
    else:
        inner = np.linspace(a, b, min(b - a, cells) + 1).astype(np.int64)
    return np.unique(np.concatenate([[a], inner, [b]]))


def sub_spans(spans: tuple[Span, ...], lo: np.ndarray, hi: np.ndarray) -> tuple[Span, ...]:
    """Rows ``lo[i]:hi[i]`` of each span ``i`` (the non-empty ones)."""
    return tuple(replace(s, start=int(a), stop=int(b)) for s, a, b in zip(spans, lo, hi)
                 if b > a)
