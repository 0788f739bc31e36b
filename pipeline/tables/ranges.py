"""Row ranges of input files, the one stack that edge parts (``convert.sources``) and table
parts (``tables.parts``) are built on: what a Dask task of ``prep chunk`` reads.

A part is some rows of one file: the whole lines whose first byte lies in a byte range of an
uncompressed text file (:class:`LineRange`, ranges from :func:`byte_ranges`), or a run of a
Parquet file's row groups (:class:`RowGroupRun`, runs from :func:`row_group_runs`); a
compressed file is streamed whole. Here too: the errors a CSV parse or a cut-short compressed
file becomes (:func:`csv_parse_error`, :func:`truncated`).
"""

from __future__ import annotations

import gzip
import lzma
import re
import zlib
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from graphprep.formats import FormatError
from graphprep.formats.storage import open_file, parquet_file, size

STREAM_BLOCK_BYTES = 16 << 20


def is_decompress_error(err: BaseException) -> bool:
    """True for what gzip/bz2/xz/zstd raise on a truncated or corrupt stream (an OSError with
    an errno is a real I/O fault instead: disk, permissions)."""
    if isinstance(err, (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)):
        return True
    return isinstance(err, OSError) and err.errno is None


def truncated(path: str, err: BaseException, rows: int | None = None) -> FormatError:
    """The :class:`FormatError` for a compressed file that ends early or is corrupt."""
    read = f" ({rows} data rows read before)" if rows is not None else ""
    return FormatError(f"compressed file is truncated or corrupt: {err}{read}", file=path)


def csv_parse_error(err: Exception | None, path: str, row0: int, rows: list) -> FormatError:
    """The error naming the first bad row of ``rows`` (``row0`` + its line number - 1), or
    pyarrow's own message ``err`` when no row was kept."""
    if rows:
        bad = rows[0]
        return FormatError(f"expected {bad.expected_columns} columns, found "
                           f"{bad.actual_columns}: {bad.text!r}", file=path,
                           row=row0 + bad.number - 1 if bad.number else None)
    found = _ARROW_CSV_PLACE.match(str(err))
    if found:       # pyarrow's 0-based column and 1-based line of the block: say them as ours
        column, line, message = found.groups()
        return FormatError(message, file=path, field=f"column #{column}",
                           row=row0 + int(line) - 1)
    return FormatError(f"CSV parse error: {err}", file=path)


_ARROW_CSV_PLACE = re.compile(r"In CSV column #(\d+): Row #(\d+): (.*)", re.S)


def read_line_range(path: str, start: int, end: int) -> bytes:
    """The whole lines of a text file whose first byte lies in ``[start, end)``: ranges that
    tile a file read every line once."""
    with open_file(path) as f:
        if start:
            f.seek(start - 1)
            f.readline()  # the line straddling start belongs to the previous range
        pos = f.tell()
        if pos >= end:
            return b""
        data = f.read(end - pos)
        if data and not data.endswith(b"\n"):
            data += f.readline()
        return data


def collect_rows(store: list):
    """A pyarrow ``invalid_row_handler`` that keeps each bad row in ``store`` and skips it
    (the caller raises :func:`csv_parse_error` for the first after the parse)."""
    def handler(row):
        store.append(row)
        return "skip"
    return handler


def read_head(path: str, nbytes: int) -> bytes:
    """The first ``nbytes`` of a (maybe compressed) file; a file cut short names itself."""
    try:
        with open_file(path, compression="infer") as f:
            return f.read(nbytes)
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
        if not is_decompress_error(err):
            raise
        raise truncated(path, err, 0) from None


def read_head_lines(path: str, nbytes: int) -> bytes:
    """The whole lines within the first ``nbytes`` of a (maybe compressed) text file, the
    sample its column types are inferred from; a file cut short names itself."""
    head = read_head(path, nbytes)
    return head[:head.rfind(b"\n") + 1] if len(head) == nbytes else head


def row_group_runs(path: str, rows_per_part: int) -> list[tuple[int, int, int]]:
    """Runs of consecutive row groups of a Parquet file, about ``rows_per_part`` rows each
    (a larger group is a run of its own): ``(first group, last group + 1, first row)``.
    Reads the footer only."""
    md = parquet_file(path).metadata
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


@dataclass(frozen=True)
class FilePart:
    """Some rows of one input file. ``first_row``: the row of the part's first row in its file
    (data rows, not counting a header), or None when known only from the parts before it."""

    path: str

    @property
    def first_row(self) -> int | None:
        return 0


@dataclass(frozen=True)
class LineRange(FilePart):
    """The whole lines of an uncompressed text file whose first byte lies in ``[start,
    end)``: ranges that tile a file (:func:`byte_ranges`) read each line once; only the first
    knows its row."""

    start: int = 0
    end: int = 0

    @property
    def first_row(self) -> int | None:
        return 0 if self.start == 0 else None

    def read_lines(self) -> bytes:
        return read_line_range(self.path, self.start, self.end)


@dataclass(frozen=True)
class RowGroupRun(FilePart):
    """Row groups ``[first_group, last_group)`` of a Parquet file, the first starting at row
    ``row_start`` (:func:`row_group_runs`)."""

    first_group: int = 0
    last_group: int = 0
    row_start: int = 0

    @property
    def first_row(self) -> int:
        return self.row_start

    def row_groups(self, columns: list[str], *, name_row: bool = False) -> Iterator[pa.Table]:
        """``columns`` of each row group in turn (holds one). A group that does not read is a
        :class:`FormatError` naming it (and, with ``name_row``, the file's row it starts at)."""
        pf = parquet_file(self.path)
        row = self.row_start
        for g in range(self.first_group, self.last_group):
            try:
                table = pf.read_row_group(g, columns=columns)
            except (pa.ArrowInvalid, OSError) as err:
                raise FormatError(f"unreadable or truncated Parquet row group {g} ({err})",
                                  file=self.path, row=row if name_row else None) from None
            row += table.num_rows
            yield table
