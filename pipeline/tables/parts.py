"""Parts of input tables, read inside Dask tasks as Arrow tables of the columns asked for.

A part is a byte range of an uncompressed CSV, a whole compressed CSV (streamed), or a run
of Parquet row groups; each yields tables of at most about one block. A CSV's column types
are fixed once, at the client, from the file's first rows (:func:`csv_format`), so that every
part of every file parses a column alike.
"""

from __future__ import annotations

import io
import lzma
import os
import zlib
from dataclasses import dataclass, field, replace
from typing import Iterator

import fsspec
import pyarrow as pa
import pyarrow.csv as pacsv

from formats import FormatError
from formats.arrays import _parquet_file
from formats.storage import is_url, open_file, size
from ..convert.sources import (STREAM_BLOCK_BYTES, collect_rows, csv_parse_error,
                               is_decompress_error, read_line_range, truncated)

CSV_SUFFIXES = (".csv", ".tsv", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSED = (".gz", ".bz2", ".xz", ".zst")
HEAD_BYTES = 1 << 20


def strip_compression(name: str) -> str:
    """``name`` without a compression suffix (.gz, .bz2, .xz, .zst)."""
    for ext in COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def is_parquet(path: str) -> bool:
    """Whether ``path`` names a Parquet file (by its extension)."""
    return strip_compression(path.lower()).endswith(PARQUET_SUFFIXES)


def is_table_file(path: str) -> bool:
    """Whether ``path`` names a CSV/TSV or Parquet file, maybe compressed."""
    return strip_compression(path.lower()).endswith(CSV_SUFFIXES + PARQUET_SUFFIXES)


def input_files(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    """The files ``spec`` names, in order: a file, a folder (its table files, by name), a
    glob, or a list of those; local paths or fsspec URLs. Raises :class:`FormatError` when a
    name matches nothing."""
    if isinstance(spec, (list, tuple)):
        return [f for s in spec for f in input_files(s)]
    fs, path = fsspec.core.url_to_fs(spec)
    protocol = spec.split("://")[0] + "://" if is_url(spec) else ""
    if any(c in path for c in "*?["):
        found = sorted(p for p in fs.glob(path) if fs.isfile(p))
    elif fs.isdir(path):
        found = sorted(p for p in fs.ls(path, detail=False)
                       if is_table_file(p) and not os.path.basename(p).startswith("."))
    elif fs.exists(path):
        found = [path]
    else:
        raise FormatError("input not found", file=spec)
    if not found:
        raise FormatError("matches no table files (.csv/.tsv/.parquet, maybe compressed)",
                          file=spec)
    return [protocol + p if protocol and not p.startswith(protocol) else p for p in found]


@dataclass(frozen=True)
class TableFormat:
    """How to read a CSV: delimiter, whether a header line names the columns, every column's
    name in order (``c0, c1...`` without a header), and the type of each column read."""

    delimiter: str = ","
    header: bool = True
    names: tuple[str, ...] = ()
    types: tuple[tuple[str, pa.DataType], ...] = ()

    def read_options(self, skip_header: bool, block_size: int | None = None):
        kw = {"block_size": block_size} if block_size else {}
        return pacsv.ReadOptions(column_names=list(self.names), use_threads=False,
                                 skip_rows=int(skip_header and self.header), **kw)

    def convert_options(self, columns: tuple[str, ...]) -> pacsv.ConvertOptions:
        return pacsv.ConvertOptions(include_columns=list(columns),
                                    column_types=dict(self.types), strings_can_be_null=True,
                                    quoted_strings_can_be_null=False)


def csv_format(path: str, columns: tuple[str, ...], *, delimiter: str | None = None,
               header: bool = True, strings: tuple[str, ...] = (),
               max_rows: int | None = None) -> TableFormat:
    """The :class:`TableFormat` of a CSV from its first ``HEAD_BYTES`` (or its first
    ``max_rows`` rows): column names from the header, and each of ``columns``'s type as
    pyarrow infers it from those rows, except those in ``strings``, always read as strings.
    Raises :class:`FormatError` naming a column that is not in the file."""
    base = strip_compression(path.lower())
    delimiter = delimiter or ("\t" if base.endswith(".tsv") else ",")
    want = HEAD_BYTES if max_rows is None else 1 << 16
    try:
        with open_file(path, compression="infer") as f:
            head = f.read(want)
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
        if not is_decompress_error(err):
            raise
        raise truncated(path, err, 0) from None
    if len(head) == want:
        head = head[:head.rfind(b"\n") + 1]
    if max_rows is not None:
        head = b"\n".join(head.split(b"\n")[:max_rows + int(header)]) + b"\n"
    opts = pacsv.ReadOptions(autogenerate_column_names=not header, use_threads=False)
    try:
        # bad rows are skipped here: the parts' reads name them by row
        table = pacsv.read_csv(io.BytesIO(head), read_options=opts,
                               parse_options=pacsv.ParseOptions(
                                   delimiter=delimiter, invalid_row_handler=collect_rows([])))
    except pa.ArrowInvalid as err:
        raise FormatError(f"CSV parse error in the first rows: {err}", file=path) from None
    names = tuple(table.column_names if header else (f"c{i}" for i in range(table.num_columns)))
    missing = [c for c in columns if c not in names]
    if missing:
        raise FormatError(f"column {missing[0]!r} not found (columns: {list(names)})",
                          file=path, field=missing[0])
    table = table.rename_columns(list(names))
    types = tuple((c, pa.string() if c in strings else _widened(table.schema.field(c).type))
                  for c in columns)
    return TableFormat(delimiter, header, names, types)


def _widened(dtype: pa.DataType) -> pa.DataType:
    """A type that later rows are less likely to overflow: int64 and float64; a column of
    nulls in the first rows becomes strings."""
    if pa.types.is_null(dtype):
        return pa.string()
    if pa.types.is_integer(dtype):
        return pa.int64()
    if pa.types.is_floating(dtype):
        return pa.float64()
    return dtype


@dataclass(frozen=True)
class TablePart:
    """Some rows of one table file. ``first_row``: the row of the part's first row in its file
    (data rows, not counting a header), or None when known only from the parts before it."""

    path: str
    columns: tuple[str, ...] = ()

    @property
    def first_row(self) -> int | None:
        return 0

    def tables(self) -> Iterator[pa.Table]:
        raise NotImplementedError


@dataclass(frozen=True)
class CsvTableRange(TablePart):
    """The lines of an uncompressed CSV whose first byte lies in ``[start, end)``."""

    start: int = 0
    end: int = 0
    fmt: TableFormat = field(default_factory=TableFormat)

    @property
    def first_row(self) -> int | None:
        return 0 if self.start == 0 else None

    def tables(self) -> Iterator[pa.Table]:
        data = read_line_range(self.path, self.start, self.end)
        if not data.strip():
            return
        bad: list = []
        header = -int(self.start == 0 and self.fmt.header)
        try:
            table = pacsv.read_csv(
                io.BytesIO(data), read_options=self.fmt.read_options(self.start == 0),
                parse_options=pacsv.ParseOptions(delimiter=self.fmt.delimiter,
                                                 invalid_row_handler=collect_rows(bad)),
                convert_options=self.fmt.convert_options(self.columns))
        except pa.ArrowInvalid as err:
            raise csv_parse_error(err, self.path, header, bad) from None
        if bad:
            raise csv_parse_error(None, self.path, header, bad)
        yield table


@dataclass(frozen=True)
class CsvTableStream(TablePart):
    """A whole CSV streamed block by block (compressed files)."""

    fmt: TableFormat = field(default_factory=TableFormat)

    def tables(self) -> Iterator[pa.Table]:
        bad: list = []
        rows = 0
        with open_file(self.path, compression="infer") as f:
            try:
                reader = pacsv.open_csv(
                    f, read_options=self.fmt.read_options(True, STREAM_BLOCK_BYTES),
                    parse_options=pacsv.ParseOptions(delimiter=self.fmt.delimiter,
                                                     invalid_row_handler=collect_rows(bad)),
                    convert_options=self.fmt.convert_options(self.columns))
                for batch in reader:
                    if bad:
                        break
                    rows += batch.num_rows
                    yield pa.Table.from_batches([batch])
            except pa.ArrowInvalid as err:
                raise csv_parse_error(err, self.path, -int(self.fmt.header), bad) from None
            except (EOFError, OSError) as err:
                if not is_decompress_error(err):
                    raise
                raise truncated(self.path, err, rows) from None
        if bad:
            raise csv_parse_error(None, self.path, -int(self.fmt.header), bad)


@dataclass(frozen=True)
class ParquetTablePart(TablePart):
    """Row groups ``[first_group, last_group)`` of a Parquet file."""

    first_group: int = 0
    last_group: int = 0
    row_start: int = 0

    @property
    def first_row(self) -> int:
        return self.row_start

    def tables(self) -> Iterator[pa.Table]:
        pf = _parquet_file(self.path)
        for g in range(self.first_group, self.last_group):
            try:
                yield pf.read_row_group(g, columns=list(self.columns))
            except (pa.ArrowInvalid, OSError) as err:
                raise FormatError(f"unreadable or truncated Parquet row group {g} ({err})",
                                  file=self.path) from None


def parquet_columns(path: str) -> list[str]:
    """The column names of a Parquet file (its footer only)."""
    return _parquet_file(path).metadata.schema.to_arrow_schema().names


def table_parts(path: str, columns: tuple[str, ...], rows_per_part: int,
                fmt: TableFormat | None = None) -> list[TablePart]:
    """The parts of one table file, about ``rows_per_part`` rows each; ``fmt`` for a CSV
    (from :func:`csv_format`). Raises :class:`FormatError` for a Parquet column not there."""
    if is_parquet(path):
        names = parquet_columns(path)
        missing = [c for c in columns if c not in names]
        if missing:
            raise FormatError(f"column {missing[0]!r} not found (columns: {names})",
                              file=path, field=missing[0])
        return [ParquetTablePart(path, columns, first, last, start)
                for first, last, start in row_group_runs(path, rows_per_part)]
    if path.lower().endswith(COMPRESSED):
        return [CsvTableStream(path, columns, fmt)]
    return [CsvTableRange(path, columns, start, end, fmt)
            for start, end in byte_ranges(path, rows_per_part)]


def row_group_runs(path: str, rows_per_part: int) -> list[tuple[int, int, int]]:
    """Runs of consecutive row groups of a Parquet file, about ``rows_per_part`` rows each
    (a larger group is a run of its own): ``(first group, last group + 1, first row)``.
    Reads the footer only."""
    md = _parquet_file(path).metadata
    runs, first, rows, start = [], 0, 0, 0
    for g in range(md.num_row_groups):
        rows += md.row_group(g).num_rows
        if rows >= rows_per_part or g == md.num_row_groups - 1:
            runs.append((first, g + 1, start))
            first, start, rows = g + 1, start + rows, 0
    return runs


def byte_ranges(path: str, rows_per_part: int) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges tiling an uncompressed text file, about ``rows_per_part``
    lines each (line length estimated from the first 64 KiB; at least 64 KiB a range). Read
    with ``read_line_range``, they give every line once."""
    total = size(path)
    with open_file(path) as f:
        sample = f.read(1 << 16)
    lines = max(sample.count(b"\n"), 1)
    step = max(int(rows_per_part * len(sample) / lines * 0.95), 1 << 16)
    return [(start, min(start + step, total)) for start in range(0, max(total, 1), step)]


def with_columns(part: TablePart, columns: tuple[str, ...]) -> TablePart:
    """The same rows of the same file, reading ``columns``."""
    return replace(part, columns=columns)
