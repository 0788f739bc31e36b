"""Picklable descriptions of raw input, read inside Dask tasks.

A converter turns its input into a :class:`SourceGraph`: per edge type a list of
:class:`EdgePart` (each yields blocks of edges, holding one block), per node type a set of
:class:`ArraySource` (random access by row range, or a stream of blocks). The generic writer
(``pipeline.convert.writer``) turns any ``SourceGraph`` into the chunked format.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from formats import ChunkFiles, EdgeType, FormatError
from formats.arrays import _as_int64, _int_column, read_array_chunk, read_edge_chunk, table_to_array
from formats.storage import is_url, open_file

STREAM_BLOCK_BYTES = 16 << 20


@dataclass(frozen=True)
class EdgeBlock:
    src: np.ndarray
    dst: np.ndarray
    data: dict[str, np.ndarray] = field(default_factory=dict)


# ----------------------------------------------------------------------------- edge parts

@dataclass(frozen=True)
class EdgePart:
    """Some rows of one edge input file. ``first_row`` is the row of the part's first edge in
    its file, or None when only known from the parts before it (CSV byte ranges)."""

    path: str

    @property
    def first_row(self) -> int | None:
        return 0

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
        return pacsv.ParseOptions(delimiter=self.delimiter, invalid_row_handler=_collect(bad_rows))


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
            ok = pc.match_substring_regex(col, r"^\s*[-+]?\d+\s*$").to_numpy(zero_copy_only=False)
            ok &= ~col.is_null().to_numpy(zero_copy_only=False)
            row = int(np.flatnonzero(~ok)[0])
            raise FormatError(f"node ID {col[row].as_py()!r} is not an integer", file=path,
                              field=name, row=row0 + row) from None
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise FormatError("missing node ID", file=path, field=name, row=row0 + row)
    return out


def _csv_parse_error(err: Exception, path: str, row0: int, rows: list) -> FormatError:
    if rows:
        bad = rows[0]
        return FormatError(f"expected {bad.expected_columns} columns, found "
                           f"{bad.actual_columns}: {bad.text!r}", file=path,
                           row=row0 + bad.number - 1 if bad.number else None)
    return FormatError(f"CSV parse error: {err}", file=path)


@dataclass(frozen=True)
class CsvRange(EdgePart):
    """Lines of an uncompressed CSV whose first byte lies in ``[start, end)``."""

    start: int = 0
    end: int = 0
    columns: CsvColumns = CsvColumns()

    @property
    def first_row(self) -> int | None:
        return 0 if self.start == 0 else None

    def read_bytes(self) -> bytes:
        with open_file(self.path) as f:
            if self.start:
                f.seek(self.start - 1)
                f.readline()  # the line straddling start belongs to the previous range
            pos = f.tell()
            if pos >= self.end:
                return b""
            data = f.read(self.end - pos)
            if data and not data.endswith(b"\n"):
                data += f.readline()
            return data

    def blocks(self) -> Iterator[EdgeBlock]:
        data = self.read_bytes()
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
                raise _csv_parse_error(err, self.path, -header_lines, bad_rows) from None
            src, dst = _parse_id_columns(parse(typed=False), cols, self.path, 0)
            raise FormatError(f"CSV parse error: {err}", file=self.path) from None
        if bad_rows:
            raise _csv_parse_error(None, self.path, -header_lines, bad_rows)
        src, dst = _typed_id_columns(table, cols, self.path, 0)
        yield EdgeBlock(src, dst)


def _collect(store: list):
    def handler(row):
        store.append(row)
        return "skip"
    return handler


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
                    raise _csv_parse_error(err, self.path, -int(cols.header), bad_rows) from None
                if typed:
                    raise _NotInteger() from None
                raise FormatError(f"CSV parse error: {err}", file=self.path) from None
        if bad_rows:
            raise _csv_parse_error(None, self.path, -int(cols.header), bad_rows)


class _NotInteger(Exception):
    """The typed parse met a value that is not an integer (the row is found on a second pass)."""


@dataclass(frozen=True)
class ParquetEdges(EdgePart):
    """Row groups ``[first_group, last_group)`` of a Parquet edge list."""

    src_col: str = "src"
    dst_col: str = "dst"
    first_group: int = 0
    last_group: int = 0
    row_start: int = 0

    @property
    def first_row(self) -> int:
        return self.row_start

    def blocks(self) -> Iterator[EdgeBlock]:
        pf = pq.ParquetFile(open_file(self.path) if is_url(self.path) else self.path)
        rows_before = 0  # rows of this part before the current row group
        for g in range(self.first_group, self.last_group):
            table = pf.read_row_group(g, columns=[self.src_col, self.dst_col])
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
class ArraySource:
    """Rows of one node or edge data field. Random access when ``num_rows`` is known."""

    path: str

    @property
    def num_rows(self) -> int | None:
        return None

    def read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def blocks(self) -> Iterator[np.ndarray]:
        yield self.read(0, self.num_rows)


@dataclass(frozen=True)
class NpyArray(ArraySource):
    """A ``.npy`` file (memory-mapped), or its rows along ``axis`` 1 for ``[2, E]`` edge
    arrays (``row`` picks the row)."""

    rows: int = 0
    transpose_row: int | None = None

    @classmethod
    def open(cls, path: str, transpose_row: int | None = None) -> "NpyArray":
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        rows = arr.shape[1] if transpose_row is not None else arr.shape[0]
        return cls(path, rows, transpose_row)

    @property
    def num_rows(self) -> int:
        return self.rows

    def read(self, start: int, stop: int) -> np.ndarray:
        arr = np.load(self.path, mmap_mode="r", allow_pickle=False)
        if self.transpose_row is not None:
            return np.array(arr[self.transpose_row, start:stop])
        return np.array(arr[start:stop])


@dataclass(frozen=True)
class ChunkedArray(ArraySource):
    """Data chunk files read as one array (DGL's node/edge data). Holds the files a read
    overlaps (``.npy`` chunks only the rows asked for)."""

    root: str = ""
    files: ChunkFiles = None
    rows_per_file: tuple[int, ...] = ()

    @classmethod
    def of(cls, graph, files: ChunkFiles) -> "ChunkedArray":
        """A field of a chunked graph (rows per file read from the files' headers)."""
        from formats.arrays import array_info
        rows = tuple(array_info(graph.path(f), files).rows for f in files.files)
        return cls(graph.root, graph.root, files, rows)

    @property
    def num_rows(self) -> int:
        return sum(self.rows_per_file)

    def read(self, start: int, stop: int) -> np.ndarray:
        from formats.storage import join
        bounds = np.concatenate([[0], np.cumsum(self.rows_per_file)])
        parts = []
        for i, rel in enumerate(self.files.files):
            lo, hi = max(start, bounds[i]), min(stop, bounds[i + 1])
            if lo < hi:
                arr = read_array_chunk(join(self.root, rel), self.files)
                parts.append(np.asarray(arr[lo - bounds[i]:hi - bounds[i]]))
        return np.concatenate(parts) if parts else np.empty(0)


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
