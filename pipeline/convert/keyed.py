"""Edge lists whose endpoints are keys, not IDs ``0..N-1``: strings (UUIDs, ASINs...), or
integers with ``--map-keys`` (sparse IDs up to 2^62 must not become 2^62 rows).

CSV endpoints are read as text; a column of numbers is parsed into int64 keys by
``keys.hashing.parse_integer_keys``, so that a 2^63, a 1.0 or an "abc" among integers is
refused by its row and value, never read as a double or as a string key.

The keys are mapped out of core (``graphprep.pipeline.keys``) before the edges are written; the maps
go beside the graph (``keys/<ntype>/``, FORMATS.md "Keys"). A task holds one part of the
input, or one bucket of keys (about a chunk).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from graphprep.formats import EdgeType, FormatError
from graphprep.pipeline.keys.hashing import parse_integer_keys
from graphprep.pipeline.keys.job import EdgeTable
from graphprep.pipeline.tables.parts import (CsvTableRange, CsvTableStream, TableFormat, csv_format,
                                             is_parquet, parquet_columns, table_parts)
from graphprep.pipeline.convert.edgefiles import csv_columns, no_rows
from graphprep.pipeline.convert.options import ChunkOptions
from graphprep.pipeline.convert.sources import SourceGraph


def _names(path: str, opts: ChunkOptions) -> tuple[str, str, TableFormat | None,
                                                 tuple[str, ...]]:
    """The src and dst column names of an edge file, its CSV format (None for Parquet), and
    the endpoint columns read as text and parsed as integers: ``--src-col``/``--dst-col``
    (name or index), else ``src``/``dst``, else the first two."""
    if is_parquet(path):
        names = parquet_columns(path)
        fmt = None
    else:
        header = opts.header if opts.header is not None else _has_header(path, opts)
        fmt = csv_format(path, (), delimiter=opts.delimiter, header=header)
        names = list(fmt.names)
    src = _pick(opts.src_col, "src", names, 0, path)
    dst = _pick(opts.dst_col, "dst", names, 1, path)
    if src == dst:
        raise FormatError(f"--src-col and --dst-col name the same column: {dst!r}", file=path,
                          field="--dst-col")
    integers: tuple[str, ...] = ()
    if fmt is not None:
        inferred = csv_format(path, (src, dst), delimiter=opts.delimiter, header=fmt.header)
        first = csv_format(path, (src, dst), delimiter=opts.delimiter, header=fmt.header,
                           max_rows=1)
        # Endpoints are read as text and a column of numbers parsed as integers by
        # parse_integer_keys, which names the row of a 2^63, a 1.0 or an "abc" (pyarrow's
        # inference would make a double, or string keys "1.0"). With --map-keys a column
        # whose first row is a number is one of integers, as has_string_keys decides;
        # without, only decimals are parsed (to be refused): integer-looking keys beside
        # strings stay strings.
        number = (pa.types.is_integer, pa.types.is_floating)
        integers = tuple(c for (c, t), (_, t1) in zip(inferred.types, first.types)
                         if pa.types.is_floating(t) or
                         (opts.map_keys and any(f(t1) for f in number)))
        fmt = dataclasses.replace(inferred, types=tuple((c, pa.string())
                                                        for c, _ in inferred.types))
    return src, dst, fmt, integers


class _IntegerKeys:
    """A CSV part whose ``integers`` columns, read as text, come out as int64 keys (a bad
    value named by its row within the part, which the key job makes a row of the file)."""

    def tables(self) -> Iterator[pa.Table]:
        rows = 0
        for table in super().tables():
            for c in self.integers:
                if c in table.column_names:
                    table = table.set_column(
                        table.column_names.index(c), c,
                        parse_integer_keys(table.column(c), file=self.path, field=c,
                                           row0=rows))
            rows += table.num_rows
            yield table


@dataclasses.dataclass(frozen=True)
class IntegerKeysRange(_IntegerKeys, CsvTableRange):
    """A byte range of an uncompressed CSV, its ``integers`` columns parsed as int64 keys."""

    integers: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class IntegerKeysStream(_IntegerKeys, CsvTableStream):
    """A compressed CSV streamed, its ``integers`` columns parsed as int64 keys."""

    integers: tuple[str, ...] = ()


def _with_integers(part, integers: tuple[str, ...]):
    """``part`` reading ``integers`` as integer keys (a CSV part; others as they are)."""
    kind = {CsvTableRange: IntegerKeysRange, CsvTableStream: IntegerKeysStream}.get(type(part))
    if not integers or kind is None:
        return part
    return kind(**{f.name: getattr(part, f.name) for f in dataclasses.fields(part)},
                integers=integers)


def _has_header(path: str, opts: ChunkOptions) -> bool:
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
    return not is_parquet(path) and csv_columns(path, opts) is None


def has_string_keys(files: list[str], opts: ChunkOptions) -> bool:
    """Whether the first edge file with rows has endpoint columns that are not integers (so
    keys must be mapped): its column types, or for a CSV its first data row (an integer edge
    list with a typo further down stays an integer list, whose reader names the bad row). A
    file of a header only says nothing: an edge list of no edges is an integer one."""
    for path in files:
        if no_rows(path, opts):
            continue
        src, dst, fmt, _ = _names(path, opts)
        if fmt is None:
            schema = pq.read_schema(path)
            return not all(pa.types.is_integer(schema.field(c).type) for c in (src, dst))
        first = csv_format(path, (src, dst), delimiter=opts.delimiter, header=fmt.header,
                           max_rows=1)
        return not all(pa.types.is_integer(t) for _, t in first.types)
    return False


def edge_table(et: EdgeType, files: list[str], opts: ChunkOptions) -> EdgeTable:
    """The :class:`EdgeTable` of one edge type's files, parts of about a chunk."""
    parts, columns = [], None
    for path in files:
        if _empty_csv(path, opts):
            continue              # an empty file: no edges
        src, dst, fmt, integers = _names(path, opts)
        if columns is not None and (src, dst) != columns:
            raise FormatError(f"endpoint columns {src!r}, {dst!r} differ from the first "
                              f"file's {columns}", file=path)
        columns = (src, dst)
        parts += [_with_integers(p, integers)
                  for p in table_parts(path, (src, dst), opts.chunk_size, fmt)]
    return EdgeTable(et, tuple(parts), *(columns or ("src", "dst")))


def keyed_source(name: str, tables: list[EdgeTable], opts: ChunkOptions, out: str,
                 staging: str, runner, inputs: tuple[str, ...]) -> SourceGraph:
    """Map the keys of ``tables`` and return their edges as a :class:`SourceGraph` of IDs,
    with the node counts the mapping found and its maps (written under ``out``)."""
    from graphprep.pipeline.convert.tables_in import tables_source
    if opts.num_nodes:
        raise FormatError("--num-nodes does not apply to keyed edges: the keys that appear "
                          "are the nodes", field="--num-nodes")
    return tables_source(name, [], {}, tables, {}, opts.dangling, out, staging, runner, inputs)
