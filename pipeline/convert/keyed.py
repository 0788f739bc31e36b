"""Edge lists whose endpoints are keys, not IDs ``0..N-1``: strings (UUIDs, ASINs...), or
integers with ``--map-keys`` (sparse IDs up to 2^62 must not become 2^62 rows).

The keys are mapped out of core (``pipeline.keys``) before the edges are written; the maps
go beside the graph (``keys/<ntype>/``, FORMATS.md "Keys"). A task holds one part of the
input, or one bucket of keys (about a chunk).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from formats import EdgeType, FormatError
from ..keys.job import EdgeTable
from ..tables.parts import csv_format, is_parquet, parquet_columns, table_parts
from .options import ChunkOptions
from .sources import SourceGraph


def _names(path: str, opts: ChunkOptions) -> tuple[str, str, object]:
    """The src and dst column names of an edge file, and its CSV format (None for Parquet):
    ``--src-col``/``--dst-col`` (name or index), else ``src``/``dst``, else the first two."""
    if is_parquet(path):
        names = parquet_columns(path)
        fmt = None
    else:
        header = opts.header if opts.header is not None else _has_header(path, opts)
        fmt = csv_format(path, (), delimiter=opts.delimiter, header=header)
        names = list(fmt.names)
    src = _pick(opts.src_col, "src", names, 0, path)
    dst = _pick(opts.dst_col, "dst", names, 1, path)
    if fmt is not None:
        fmt = csv_format(path, (src, dst), delimiter=opts.delimiter, header=fmt.header,
                         strings=() if opts.map_keys else (src, dst))
    return src, dst, fmt


def _has_header(path: str, opts: ChunkOptions) -> bool:
    from .edgelist import csv_columns
    return csv_columns(path, opts).header


def _pick(wanted: str | None, default: str, names: list[str], fallback: int, path: str) -> str:
    if wanted is None:
        if default in names:
            return default
        if len(names) <= fallback:
            raise FormatError(f"needs at least 2 columns, found {names}", file=path)
        return names[fallback]
    if wanted in names:
        return wanted
    if wanted.isdigit() and int(wanted) < len(names):
        return names[int(wanted)]
    raise FormatError(f"column {wanted!r} not found (columns: {names})", file=path,
                      field=f"--{default}-col")


def _empty_csv(path: str, opts: ChunkOptions) -> bool:
    from .edgelist import csv_columns
    return not is_parquet(path) and csv_columns(path, opts) is None


def has_string_keys(files: list[str], opts: ChunkOptions) -> bool:
    """Whether the first edge file's endpoint columns hold strings (so keys must be mapped):
    its column types, or for a CSV its first data row (an integer edge list with a typo
    further down stays an integer list, whose reader names the bad row)."""
    files = [f for f in files if not _empty_csv(f, opts)]
    if not files:
        return False
    path = files[0]
    src, dst, fmt = _names(path, opts)
    if fmt is None:
        schema = pq.read_schema(path)
        types = [schema.field(c).type for c in (src, dst)]
    else:
        types = [t for _, t in csv_format(path, (src, dst), delimiter=opts.delimiter,
                                          header=fmt.header, max_rows=1).types]
    return not all(pa.types.is_integer(t) for t in types)


def edge_table(et: EdgeType, files: list[str], opts: ChunkOptions) -> EdgeTable:
    """The :class:`EdgeTable` of one edge type's files, parts of about a chunk."""
    parts, columns = [], None
    for path in files:
        if _empty_csv(path, opts):
            continue              # an empty file: no edges
        src, dst, fmt = _names(path, opts)
        if columns is not None and (src, dst) != columns:
            raise FormatError(f"endpoint columns {src!r}, {dst!r} differ from the first "
                              f"file's {columns}", file=path)
        columns = (src, dst)
        parts += table_parts(path, (src, dst), opts.chunk_size, fmt)
    return EdgeTable(et, tuple(parts), *(columns or ("src", "dst")))


def keyed_source(name: str, tables: list[EdgeTable], opts: ChunkOptions, out: str,
                 staging: str, runner, inputs: tuple[str, ...]) -> SourceGraph:
    """Map the keys of ``tables`` and return their edges as a :class:`SourceGraph` of IDs,
    with the node counts the mapping found and its maps (written under ``out``)."""
    from .tables_in import tables_source
    if opts.num_nodes:
        raise FormatError("--num-nodes does not apply to keyed edges: the keys that appear "
                          "are the nodes", field="--num-nodes")
    return tables_source(name, [], {}, tables, {}, opts.dangling, out, staging, runner, inputs)


def edge_files(path: str) -> list[str]:
    from .edgelist import is_edge_file
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if is_edge_file(f))
    return [path]
