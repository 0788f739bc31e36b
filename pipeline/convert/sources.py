"""Picklable descriptions of raw input, read inside Dask tasks.

A converter turns its input into a :class:`SourceGraph`: per edge type a list of
:class:`EdgePart` (each yields blocks of edges, holding one block), per node type a set of
:class:`ArraySource` (random access by row range, or a stream of blocks). The generic writer
(``graphprep.pipeline.convert.writer``) turns any ``SourceGraph`` into the chunked format.
"""

from __future__ import annotations

import functools
import io
import lzma
import os
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from graphprep.formats import ChunkFiles, EdgeType, FormatError
from graphprep.formats.arrays import (_as_int64, _int_column, read_array_chunk, read_edge_chunk,
                                      table_to_array)
from graphprep.formats.fields import ArraySource
from graphprep.formats.sparse import CSR, CsrRows, concat_rows, read_scipy_npz
from graphprep.formats.storage import open_file
from graphprep.pipeline.tables.ranges import (STREAM_BLOCK_BYTES, FilePart, LineRange, RowGroupRun,
                                             collect_rows, csv_parse_error, is_decompress_error,
                                             truncated)

_INT64_DIGITS = str(2**63 - 1)   # the largest int64, to find IDs too large to parse


@dataclass(frozen=True)
class EdgeBlock:
    src: np.ndarray
    dst: np.ndarray
    data: dict[str, np.ndarray] = field(default_factory=dict)


# ----------------------------------------------------------------------------- edge parts

@dataclass(frozen=True)
class EdgePart(FilePart):
    """Some rows of one edge input file (``first_row``: the row of the part's first edge in
    its file, or None when only known from the parts before it, as for CSV byte ranges)."""

    def blocks(self) -> Iterator[EdgeBlock]:
        raise NotImplementedError


@dataclass(frozen=True)
class CsvColumns:
    """How to read an edge CSV: delimiter, header, which columns hold src/dst."""

    delimiter: str = ","
    header: bool = False
    src: int = 0
    dst: int = 1
    num_columns: int = 2

    def read_options(self, block_size: int | None = None) -> pacsv.ReadOptions:
        kw = {"block_size": block_size} if block_size else {}
        return pacsv.ReadOptions(column_names=[f"c{i}" for i in range(self.num_columns)],
                                 skip_rows=1 if self.header else 0, use_threads=False, **kw)

    def convert_options(self, typed: bool = True) -> pacsv.ConvertOptions:
        """int64 columns (fast path), or strings to find the row that is not an integer."""
        names = [f"c{self.src}", f"c{self.dst}"]
        kind = pa.int64() if typed else pa.string()
        return pacsv.ConvertOptions(include_columns=names, column_types={n: kind for n in names})

    def parse_options(self, bad_rows: list) -> pacsv.ParseOptions:
        return pacsv.ParseOptions(delimiter=self.delimiter, invalid_row_handler=collect_rows(bad_rows))


def _typed_id_columns(table: pa.Table, cols: CsvColumns, path: str, row0: int):
    """int64 columns -> arrays, naming the first missing value."""
    out = []
    for name, idx in (("src", cols.src), ("dst", cols.dst)):
        col = table.column(f"c{idx}")
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise FormatError("missing node ID", file=path, field=name, row=row0 + row)
        out.append(col.to_numpy())
    return out


def _parse_id_columns(table: pa.Table, cols: CsvColumns, path: str, row0: int):
    """String columns -> int64 arrays, naming the first row that is not an integer (the slow
    path, taken only after the typed parse failed)."""
    out = []
    for name, idx in (("src", cols.src), ("dst", cols.dst)):
        col = table.column(f"c{idx}")
        try:
            out.append(pc.cast(pc.utf8_trim_whitespace(col), pa.int64()).to_numpy())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise _not_int64(col, path, name, row0) from None
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise FormatError("missing node ID", file=path, field=name, row=row0 + row)
    return out


def _not_int64(col: pa.ChunkedArray, path: str, name: str, row0: int) -> FormatError:
    """The error for a string column that does not cast to int64: the first row that is not an
    integer, or else the first integer outside int64 (cast refuses it; e.g. 2^64 - 1)."""
    text = pc.utf8_trim_whitespace(col)
    ok = pc.match_substring_regex(text, r"^[-+]?\d+$").to_numpy(zero_copy_only=False)
    ok &= ~col.is_null().to_numpy(zero_copy_only=False)
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        return FormatError(f"node ID {col[row].as_py()!r} is not an integer (keys that are "
                           f"strings: --map-keys maps them)", file=path,
                           field=name, row=row0 + row)
    digits = pc.utf8_ltrim(pc.utf8_ltrim(text, "+-"), "0")
    length = pc.utf8_length(digits).to_numpy(zero_copy_only=False)
    limit = len(_INT64_DIGITS)
    # Same length: decimal strings compare like their values.
    bigger = (length > limit) | ((length == limit) & pc.greater(
        digits, _INT64_DIGITS).to_numpy(zero_copy_only=False))
    if not bigger.any():
        return FormatError("node IDs do not convert to int64", file=path, field=name)
    row = int(np.flatnonzero(bigger)[0])
    value = text[row].as_py()
    why = "is negative" if value.startswith("-") else "is too large (IDs must be below 2^63-1)"
    return FormatError(f"node ID {value} {why}", file=path, field=name, row=row0 + row)


@dataclass(frozen=True)
class CsvRange(LineRange, EdgePart):
    """Lines of an uncompressed CSV whose first byte lies in ``[start, end)``."""

    columns: CsvColumns = CsvColumns()

    def blocks(self) -> Iterator[EdgeBlock]:
        data = self.read_lines()
        cols = self.columns
        if self.start != 0 and cols.header:
            cols = CsvColumns(cols.delimiter, False, cols.src, cols.dst, cols.num_columns)
        if not data.strip():
            return
        header_lines = int(self.start == 0 and self.columns.header)
        bad_rows = []

        def parse(typed: bool) -> pa.Table:
            return pacsv.read_csv(io.BytesIO(data), read_options=cols.read_options(),
                                  parse_options=cols.parse_options(bad_rows),
                                  convert_options=cols.convert_options(typed))
        try:
            table = parse(typed=True)
        except pa.ArrowInvalid as err:
            if bad_rows:
                raise csv_parse_error(err, self.path, -header_lines, bad_rows) from None
            src, dst = _parse_id_columns(parse(typed=False), cols, self.path, 0)
            raise FormatError(f"CSV parse error: {err}", file=self.path) from None
        if bad_rows:
            raise csv_parse_error(None, self.path, -header_lines, bad_rows)
        src, dst = _typed_id_columns(table, cols, self.path, 0)
        yield EdgeBlock(src, dst)


@dataclass(frozen=True)
class CsvStream(EdgePart):
    """A whole CSV read as a stream of blocks (compressed files: .gz, .bz2, .zst...)."""

    columns: CsvColumns = CsvColumns()

    def blocks(self) -> Iterator[EdgeBlock]:
        try:
            yield from self._stream(typed=True)
        except _NotInteger:
            # Slow path: stream again as strings to name the row that is not an integer.
            for _ in self._stream(typed=False):
                pass
            raise FormatError("CSV conversion error", file=self.path) from None

    def _stream(self, typed: bool) -> Iterator[EdgeBlock]:
        cols, row0, bad_rows = self.columns, 0, []
        with open_file(self.path, compression="infer") as f:
            try:
                reader = pacsv.open_csv(f, read_options=cols.read_options(STREAM_BLOCK_BYTES),
                                        parse_options=cols.parse_options(bad_rows),
                                        convert_options=cols.convert_options(typed))
                for batch in reader:
                    if bad_rows:
                        break
                    table = pa.Table.from_batches([batch])
                    ids = _typed_id_columns if typed else _parse_id_columns
                    src, dst = ids(table, cols, self.path, row0)
                    row0 += len(src)
                    if typed:
                        yield EdgeBlock(src, dst)
            except pa.ArrowInvalid as err:
                if bad_rows:
                    raise csv_parse_error(err, self.path, -int(cols.header), bad_rows) from None
                if typed:
                    raise _NotInteger() from None
                raise FormatError(f"CSV parse error: {err}", file=self.path) from None
            except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
                # pyarrow reads the decompressing file object: its errors pass through here.
                if not is_decompress_error(err):
                    raise
                raise truncated(self.path, err, row0) from None
        if bad_rows:
            raise csv_parse_error(None, self.path, -int(cols.header), bad_rows)


class _NotInteger(Exception):
    """The typed parse met a value that is not an integer (the row is found on a second pass)."""


@dataclass(frozen=True)
class ParquetEdges(RowGroupRun, EdgePart):
    """Row groups ``[first_group, last_group)`` of a Parquet edge list."""

    src_col: str = "src"
    dst_col: str = "dst"

    def blocks(self) -> Iterator[EdgeBlock]:
        rows_before = 0  # rows of this part before the current row group
        for table in self.row_groups([self.src_col, self.dst_col], name_row=True):
            try:
                src = _int_column(table.column(self.src_col), self.path, self.src_col)
                dst = _int_column(table.column(self.dst_col), self.path, self.dst_col)
            except FormatError as err:  # row within the group -> row within the part
                raise FormatError(err.message, file=err.file, field=err.field,
                                  row=None if err.row is None else err.row + rows_before) from None
            yield EdgeBlock(src, dst)
            rows_before += len(src)


@dataclass(frozen=True)
class ArrayEdges(EdgePart):
    """Rows ``[start, stop)`` of edges held in array sources (src, dst, and edge data)."""

    src: "ArraySource" = None
    dst: "ArraySource" = None
    data: tuple[tuple[str, "ArraySource"], ...] = ()
    start: int = 0
    stop: int = 0

    @property
    def first_row(self) -> int:
        return self.start

    def blocks(self) -> Iterator[EdgeBlock]:
        src = _as_int64(np.asarray(self.src.read(self.start, self.stop)), self.path, "src")
        dst = _as_int64(np.asarray(self.dst.read(self.start, self.stop)), self.path, "dst")
        data = {name: np.asarray(a.read(self.start, self.stop)) for name, a in self.data}
        yield EdgeBlock(src, dst, data)


@dataclass(frozen=True)
class ChunkFileEdges(EdgePart):
    """Edges ``[start, stop)`` of one type of a chunked graph (DGL's format), read from the
    chunk files they overlap (``file_starts``: first edge of each), with their edge data.
    Rows in errors are relative to the chunk file named."""

    paths: tuple[str, ...] = ()
    file_starts: tuple[int, ...] = ()
    files: ChunkFiles = None
    data: tuple[tuple[str, "ArraySource"], ...] = ()
    start: int = 0
    stop: int = 0

    def blocks(self) -> Iterator[EdgeBlock]:
        for path, first in zip(self.paths, self.file_starts):
            src, dst = read_edge_chunk(path, self.files)
            lo, hi = max(self.start - first, 0), min(self.stop - first, len(src))
            data = {name: np.asarray(a.read(first + lo, first + hi)) for name, a in self.data}
            yield EdgeBlock(src[lo:hi], dst[lo:hi], data)


# ----------------------------------------------------------------------------- arrays

@dataclass(frozen=True)
class NpyArray(ArraySource):
    """A ``.npy`` file (memory-mapped), or its rows along ``axis`` 1 for ``[2, E]`` edge
    arrays (``row`` picks the row)."""

    rows: int = 0
    transpose_row: int | None = None

    @classmethod
    def open(cls, path: str, transpose_row: int | None = None) -> "NpyArray":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:  # truncated, or not a .npy
            raise FormatError(f"unreadable or truncated .npy file ({err})", file=path) from None
        rows = arr.shape[1] if transpose_row is not None else arr.shape[0]
        return cls(path, rows, transpose_row)

    @property
    def num_rows(self) -> int:
        return self.rows

    def mapped(self) -> np.ndarray:
        """The whole file, memory-mapped (holds nothing until read)."""
        return np.load(self.path, mmap_mode="r", allow_pickle=False)

    def read(self, start: int, stop: int) -> np.ndarray:
        arr = self.mapped()
        if self.transpose_row is not None:
            return np.array(arr[self.transpose_row, start:stop])
        return np.array(arr[start:stop])


@dataclass(frozen=True)
class ScipyNpzArray(ArraySource):
    """A sparse matrix file of ``scipy.sparse.save_npz`` (node data kept sparse): loaded whole
    once per process (as every ``.npz`` input is loaded whole), rows sliced per read."""

    rows: int = 0
    dim: int = 0

    @classmethod
    def open(cls, path: str) -> "ScipyNpzArray":
        rows = read_scipy_npz(path)
        return cls(path, len(rows), rows.dim)

    @property
    def num_rows(self) -> int:
        return self.rows

    @property
    def csr_dim(self) -> int:
        return self.dim

    def read(self, start: int, stop: int) -> CsrRows:
        return _npz_rows(self.path, os.path.getmtime(self.path)).rows_between(start,
                                                                             stop).copy()


@functools.lru_cache(maxsize=1)
def _npz_rows(path: str, mtime: float) -> CsrRows:
    """The matrix at ``path`` (``mtime`` keys the cache): each chunk of it is one task, and a
    worker reading its chunks one after another parses the file once, not once per chunk."""
    return read_scipy_npz(path)


@dataclass(frozen=True)
class CsvArray(ArraySource):
    """A headerless numeric CSV (possibly compressed) streamed in blocks: 1-D for one column,
    2-D for several. ``nan_label`` maps NaN to -1 in an integer result (OGB's unlabeled nodes)."""

    delimiter: str = ","
    dtype: str | None = None
    header: bool = False

    def blocks(self) -> Iterator[np.ndarray]:
        opts = pacsv.ReadOptions(autogenerate_column_names=True, block_size=STREAM_BLOCK_BYTES,
                                 skip_rows=int(self.header), use_threads=False)
        row0 = 0
        with open_file(self.path, compression="infer") as f:
            try:
                reader = pacsv.open_csv(f, read_options=opts, parse_options=pacsv.ParseOptions(
                    delimiter=self.delimiter))
                for batch in reader:
                    try:
                        arr = table_to_array(pa.Table.from_batches([batch]), self.path)
                    except FormatError as err:
                        raise FormatError(err.message, file=err.file, field=err.field,
                                          row=row0 + (err.row or 0)) from None
                    row0 += len(arr)
                    yield self._cast(arr, row0 - len(arr))
            except pa.ArrowInvalid as err:
                raise FormatError(f"CSV parse error near data row {row0}: {err}",
                                  file=self.path) from None
            except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
                if not is_decompress_error(err):
                    raise
                raise truncated(self.path, err, row0) from None

    def _cast(self, arr: np.ndarray, row0: int) -> np.ndarray:
        if self.dtype is None:
            return arr
        dtype = np.dtype(self.dtype)
        if dtype.kind in "iu" and arr.dtype.kind == "f":
            nan = np.isnan(arr)
            arr = np.where(nan, -1, arr)
        return arr.astype(dtype)


@dataclass(frozen=True)
class MaskFromIds(ArraySource):
    """A boolean mask of ``rows`` rows, true at the node IDs listed in a (compressed) CSV."""

    rows: int = 0

    @property
    def num_rows(self) -> int:
        return self.rows

    def read(self, start: int, stop: int) -> np.ndarray:
        ids = np.concatenate([b.astype(np.int64).reshape(-1)
                              for b in CsvArray(self.path).blocks()] or [np.empty(0, np.int64)])
        bad = (ids < 0) | (ids >= self.rows)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise FormatError(f"node ID {ids[row]} out of range [0, {self.rows})",
                              file=self.path, row=row)
        mask = np.zeros(stop - start, dtype=bool)
        inside = ids[(ids >= start) & (ids < stop)]
        mask[inside - start] = True
        return mask


@dataclass(frozen=True)
class JoinedPart:
    """One part of a table joined to a node type by key: its rows' node IDs (``ids``, a
    ``.npy``), its field rows in the same order (``rows``: ``.npy`` or a CSR chunk), the
    span of its IDs, and where its rows came from (``keep``: the kept rows' mask, "" all)."""

    ids: str
    rows: str
    low: int
    high: int
    file: str
    first_row: int
    keep: str = ""


@dataclass(frozen=True)
class JoinedRows(ArraySource):
    """A node field given by a table joined by key (a node type's second table): row ``i``
    is the joined row whose key has ID ``i``, or a fill (0, -1 for integers, no entry when
    sparse) where no row has. A read holds the parts whose IDs overlap its range (tables in
    key order: about one). Raises :class:`FormatError` naming the file and row of a key
    given twice."""

    rows: int = 0
    parts: tuple[JoinedPart, ...] = ()
    files: ChunkFiles = None           # the parts' format (numpy, or csr with dim)
    dtype: str = "float32"
    row_shape: tuple[int, ...] = ()

    @property
    def num_rows(self) -> int:
        return self.rows

    @property
    def csr_dim(self) -> int:
        return self.files.dim if self.files.format == CSR else 0

    def read(self, start: int, stop: int):
        n = stop - start
        found, pieces = [], []
        for part in self.parts:
            if part.high < start or part.low >= stop:
                continue
            ids = np.load(part.ids, mmap_mode="r")
            at = np.flatnonzero((ids >= start) & (ids < stop))
            if not len(at):
                continue
            found.append(np.asarray(ids[at]) - start)
            rows = read_array_chunk(part.rows, self.files)
            pieces.append(rows.take(at) if isinstance(rows, CsrRows) else np.asarray(rows[at]))
            self._check_once(found, part, at)
        local = np.concatenate(found) if found else np.empty(0, np.int64)
        if self.csr_dim:
            if not pieces:
                return CsrRows(np.zeros(n + 1, np.int64), np.empty(0, np.int32),
                               np.empty(0, np.float32), self.csr_dim)
            order = np.argsort(local, kind="stable")
            taken = concat_rows(pieces).take(order)
            counts = np.zeros(n, np.int64)
            counts[local[order]] = np.diff(taken.indptr)
            indptr = np.zeros(n + 1, np.int64)
            np.cumsum(counts, out=indptr[1:])
            return CsrRows(indptr, taken.indices, taken.values, self.csr_dim)
        dtype = np.dtype(self.dtype)
        out = np.full((n,) + self.row_shape, -1 if dtype.kind == "i" else 0, dtype=dtype)
        if pieces:
            out[local] = np.concatenate(pieces)
        return out

    @staticmethod
    def _check_once(found: list, part: JoinedPart, at: np.ndarray) -> None:
        """Each ID at most once over the pieces so far (the last one just added)."""
        ids = np.concatenate(found)
        order = np.argsort(ids, kind="stable")
        later = order[1:][ids[order][1:] == ids[order][:-1]]   # a repeat's second position
        if not len(later):
            return
        row = int(at[later.min() - (len(ids) - len(found[-1]))])
        if part.keep:
            row = int(np.flatnonzero(np.load(part.keep))[row])
        raise FormatError("key given twice in a table joined by key (each node once)",
                          file=part.file, row=part.first_row + row)


# ----------------------------------------------------------------------------- the graph

@dataclass(frozen=True)
class EdgeSource:
    etype: EdgeType
    parts: tuple[EdgePart, ...]
    data_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceGraph:
    """Everything a converter found, not yet read. ``num_nodes[t]`` is None where the count
    must come from node data rows or the largest ID in the edges."""

    name: str
    node_types: tuple[str, ...]
    num_nodes: dict[str, int | None]
    edges: tuple[EdgeSource, ...]
    node_data: dict[str, dict[str, ArraySource]] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()      # paths fingerprinted into the manifest
    keys: dict = field(default_factory=dict)   # node type -> graphprep.formats.KeyMap (keyed inputs)
    vocab: dict = field(default_factory=dict)  # owner -> field -> vocabulary file (relative)
    # How keys and directions were made, for the graph's record (graphprep.formats.ChunkRecord):
    reverse: dict = field(default_factory=dict)        # EdgeType -> its reversed edges' type
    dangling: str | None = None                        # keyed inputs: the --dangling mode
    added_nodes: dict = field(default_factory=dict)    # ntype -> keys added as nodes
    dropped_edges: dict = field(default_factory=dict)  # EdgeType -> edges dropped
