"""Edge list files: which files are edge files, and an edge CSV's layout (delimiter, header,
the src and dst columns) from its first line. Shared by the integer edge lists
(``convert.edgelist``) and the keyed ones (``convert.keyed``).
"""

from __future__ import annotations

import lzma
import os
import zlib

from graphprep.formats import FormatError
from graphprep.formats.storage import open_file
from graphprep.pipeline.convert.options import ChunkOptions
from graphprep.pipeline.convert.sources import CsvColumns
from graphprep.pipeline.tables.parts import is_parquet, strip_compression
from graphprep.pipeline.tables.ranges import is_decompress_error, truncated

EDGE_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq")


def is_edge_file(path: str) -> bool:
    base = strip_compression(path.lower())
    return base.endswith(EDGE_SUFFIXES)


def edge_files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if is_edge_file(f))
    return [path]


def csv_columns(path: str, opts: ChunkOptions) -> CsvColumns | None:
    """Delimiter, header and src/dst column positions of an edge CSV (None: the file holds
    nothing at all)."""
    base = strip_compression(path.lower())
    delimiter = opts.delimiter or ("\t" if base.endswith(".tsv") else ",")
    try:
        with open_file(path, compression="infer") as f:
            raw = f.readline()
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
        if not is_decompress_error(err):  # a real I/O fault: not the input's fault
            raise
        raise truncated(path, err, 0) from None
    if not raw:
        return None
    first = raw.decode("utf-8", "replace").rstrip("\r\n")
    fields = [x.strip() for x in first.split(delimiter)]
    if len(fields) < 2:
        raise FormatError(f"found 1 column: is the delimiter {delimiter!r} right? (first line "
                          f"{first[:80]!r}; --delimiter sets it)", file=path, row=0)
    header = opts.header if opts.header is not None else not all(_is_int(x) for x in fields)
    names = fields if header else [str(i) for i in range(len(fields))]
    src = _column(opts.src_col, "src", names, header, path, 0)
    dst = _column(opts.dst_col, "dst", names, header, path, 1)
    if src == dst:
        raise FormatError(f"--src-col and --dst-col name the same column: {names[dst]!r}",
                          file=path, field="--dst-col")
    return CsvColumns(delimiter, header, src, dst, len(fields))


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def _column(wanted: str | None, default: str, names: list[str], header: bool, path: str,
            fallback: int) -> int:
    if wanted is None:
        return names.index(default) if header and default in names else fallback
    if wanted in names and header:
        return names.index(wanted)
    if wanted.isdigit() and int(wanted) < len(names):
        return int(wanted)
    raise FormatError(f"column {wanted!r} not found (columns: {names})", file=path,
                      field=f"--{default}-col")


def no_rows(path: str, opts: ChunkOptions) -> bool:
    """Whether a CSV holds no data row: empty, or a header line only."""
    if is_parquet(path):
        return False
    columns = csv_columns(path, opts)
    if columns is None:
        return True
    if not columns.header:
        return False
    with open_file(path, compression="infer") as f:
        f.readline()
        for line in iter(f.readline, b""):      # blank lines are no rows (pyarrow skips them)
            if line.strip():
                return False
    return True
