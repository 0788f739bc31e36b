"""Parts of input tables, read inside Dask tasks as Arrow tables of the columns asked for.

A part is a byte range of an uncompressed CSV, a whole compressed CSV (streamed), or a run
of Parquet row groups; each yields tables of at most about one block. A CSV's column types
are fixed once, at the client, from the file's first rows (:func:`csv_format`), so that every
part of every file parses a column alike.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Iterator

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from graphprep.formats import FormatError
from graphprep.formats.storage import is_url, open_file, parquet_file
from graphprep.pipeline.tables.ranges import (STREAM_BLOCK_BYTES, FilePart, LineRange, RowGroupRun,
                                             byte_ranges, collect_rows, csv_parse_error,
                                             is_decompress_error, read_head, read_head_lines,
                                             row_group_runs, truncated)

CSV_SUFFIXES = (".csv", ".tsv", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",) + JSON_LINES_SUFFIXES
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


def is_json(path: str) -> bool:
    """Whether ``path`` names a JSON or JSON lines file (by its extension), maybe compressed."""
    return strip_compression(path.lower()).endswith(JSON_SUFFIXES)


def is_table_file(path: str) -> bool:
    """Whether ``path`` names a CSV/TSV, Parquet or JSON file, maybe compressed."""
    return strip_compression(path.lower()).endswith(CSV_SUFFIXES + PARQUET_SUFFIXES +
                                                    JSON_SUFFIXES)


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
        raise FormatError("matches no table files (.csv/.tsv/.parquet/.json/.jsonl, maybe "
                          "compressed)", file=spec)
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
               max_rows: int | None = None, names: tuple[str, ...] = ()) -> TableFormat:
    """The :class:`TableFormat` of a CSV from its first ``HEAD_BYTES`` (or its first
    ``max_rows`` rows): column names from ``names``, else the header, else ``c0, c1...``, and
    each of ``columns``'s type as pyarrow infers it from those rows, except those in
    ``strings``, always read as strings. Raises :class:`FormatError` naming a column that is
    not in the file, or ``names`` of another length than the file's columns."""
    base = strip_compression(path.lower())
    delimiter = delimiter or ("\t" if base.endswith(".tsv") else ",")
    head = read_head_lines(path, HEAD_BYTES if max_rows is None else 1 << 16)
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
    if names and len(names) != table.num_columns:
        raise FormatError(f"csv.names gives {len(names)} names, the file has "
                          f"{table.num_columns} columns (delimiter {delimiter!r})", file=path,
                          field="csv.names")
    names = tuple(names or (table.column_names if header else
                            (f"c{i}" for i in range(table.num_columns))))
    missing = [c for c in columns if c not in names]
    if missing:
        raise FormatError(f"column {missing[0]!r} not found (columns: {list(names)})"
                          f"{_delimiter_hint(names, delimiter)}", file=path, field=missing[0])
    table = table.rename_columns(list(names))
    types = tuple((c, pa.string() if c in strings else _widened(table.schema.field(c).type))
                  for c in columns)
    return TableFormat(delimiter, header, names, types)


def _delimiter_hint(names: tuple[str, ...], delimiter: str) -> str:
    """A hint when the header parsed as one column holding another likely delimiter."""
    if len(names) != 1:
        return ""
    other = next((d for d in ("\t", ";", ",", "|", " ") if d != delimiter and d in names[0]),
                 None)
    return (f"; is the delimiter {other!r}? set csv: {{delimiter: {json_quote(other)}}}"
            if other else "")


def json_quote(text: str) -> str:
    """``text`` as YAML reads it back in double quotes (a tab as \\t)."""
    import json
    return json.dumps(text)


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
class TablePart(FilePart):
    """Some rows of one table file (:class:`FilePart`), read as tables of ``columns``."""

    columns: tuple[str, ...] = ()

    def tables(self) -> Iterator[pa.Table]:
        raise NotImplementedError


def read_part(part: TablePart) -> pa.Table:
    """The part's columns as one table (the part's rows in memory)."""
    tables = list(part.tables())
    if not tables:
        return pa.table({c: pa.array([], pa.string()) for c in part.columns})
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 \
        else tables[0]


@dataclass(frozen=True)
class CsvTableRange(LineRange, TablePart):
    """The lines of an uncompressed CSV whose first byte lies in ``[start, end)``."""

    fmt: TableFormat = field(default_factory=TableFormat)

    def tables(self) -> Iterator[pa.Table]:
        data = self.read_lines()
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
class ParquetTablePart(RowGroupRun, TablePart):
    """Row groups ``[first_group, last_group)`` of a Parquet file."""

    def tables(self) -> Iterator[pa.Table]:
        for table in self.row_groups(list(self.columns)):
            yield decoded(table)


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded columns (what pandas' ``category`` dtype writes)
    as plain columns of their values: every step compares values, not codes."""
    if not any(pa.types.is_dictionary(t) for t in table.schema.types):
        return table
    return pa.table({name: col.cast(col.type.value_type) if pa.types.is_dictionary(col.type)
                     else col for name, col in zip(table.column_names, table.columns)})


def parquet_columns(path: str) -> list[str]:
    """The column names of a Parquet file (its footer only)."""
    return parquet_file(path).metadata.schema.to_arrow_schema().names


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


def with_columns(part: TablePart, columns: tuple[str, ...]) -> TablePart:
    """The same rows of the same file, reading ``columns``."""
    return replace(part, columns=columns)


# ----------------------------------------------------------------------------- JSON

def json_shape(path: str, shape: str | None = None) -> str:
    """``records``, ``lines`` or ``object``: ``shape`` when given; ``lines`` for .jsonl/.ndjson;
    else from the file's first bytes (``[``: records; ``{``: lines when the first line is a
    whole object and another follows, else object). Raises :class:`FormatError` otherwise."""
    if shape:
        return shape
    if strip_compression(path.lower()).endswith(JSON_LINES_SUFFIXES):
        return "lines"
    text = read_head(path, HEAD_BYTES).lstrip()
    if text[:1] == b"[":
        return "records"
    if text[:1] == b"{":
        first, _, rest = text.partition(b"\n")
        if rest.strip().startswith(b"{"):
            try:
                json.loads(first)
                return "lines"
            except ValueError:
                pass
        return "object"
    raise FormatError(f"a JSON table must be an array of records, an object of key -> value, "
                      f"or JSON lines; it starts with {text[:20]!r}", file=path)


_JSON_ROW = re.compile(r"in row (\d+)")
_JSON_COLUMN = re.compile(r"Column\(/([^)]*)\)")


def json_error(err: Exception, path: str) -> FormatError:
    """pyarrow's JSON error as a :class:`FormatError` naming the column and row it names."""
    text = str(err).removeprefix("JSON parse error: ")
    row, column = _JSON_ROW.search(text), _JSON_COLUMN.search(text)
    return FormatError(f"JSON parse error: {_JSON_ROW.sub('', text).strip()}", file=path,
                       field=column.group(1) if column else None,
                       row=int(row.group(1)) if row else None)


def json_lines_format(path: str, columns: tuple[str, ...]) -> TableFormat:
    """The :class:`TableFormat` (only ``types``) of a JSON lines file from its first
    ``HEAD_BYTES``: each of ``columns``'s type as pyarrow infers it, widened, so that every
    part of the file parses a column alike. Raises :class:`FormatError` naming a column that is
    not in those rows."""
    head = read_head_lines(path, HEAD_BYTES)
    try:
        table = pajson.read_json(io.BytesIO(head), read_options=pajson.ReadOptions(
            use_threads=False, block_size=max(len(head), 1 << 16)))
    except pa.ArrowInvalid as err:
        raise json_error(err, path) from None
    missing = [c for c in columns if c not in table.column_names]
    if missing and table.num_rows:
        raise FormatError(f"column {missing[0]!r} not found in the first records (columns: "
                          f"{table.column_names})", file=path, field=missing[0])
    return TableFormat(types=tuple((c, _widened(table.schema.field(c).type)
                                    if c in table.column_names else pa.string())
                                   for c in columns))


def _json_lines_table(data, fmt: TableFormat, columns: tuple[str, ...], path: str,
                      block: int) -> pa.Table:
    schema = pa.schema([(c, t) for c, t in fmt.types if c in columns])
    try:
        table = pajson.read_json(data, read_options=pajson.ReadOptions(
            use_threads=False, block_size=block), parse_options=pajson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid as err:
        raise json_error(err, path) from None
    return table.select(list(columns))


@dataclass(frozen=True)
class JsonLinesRange(LineRange, TablePart):
    """The lines of an uncompressed JSON lines file whose first byte lies in ``[start, end)``."""

    fmt: TableFormat = field(default_factory=TableFormat)

    def tables(self) -> Iterator[pa.Table]:
        data = self.read_lines()
        if data.strip():
            yield _json_lines_table(io.BytesIO(data), self.fmt, self.columns, self.path,
                                    max(len(data), 1 << 16))


@dataclass(frozen=True)
class JsonLinesStream(TablePart):
    """A whole (compressed) JSON lines file, parsed whole: pyarrow's JSON reader takes one
    buffer, so the part holds the decompressed file."""

    fmt: TableFormat = field(default_factory=TableFormat)

    def tables(self) -> Iterator[pa.Table]:
        try:
            with open_file(self.path, compression="infer") as f:
                data = f.read()
        except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
            if not is_decompress_error(err):
                raise
            raise truncated(self.path, err) from None
        if data.strip():
            yield _json_lines_table(io.BytesIO(data), self.fmt, self.columns, self.path,
                                    max(len(data), 1 << 16))


@dataclass(frozen=True)
class JsonStaged(ParquetTablePart):
    """Row groups of the Parquet copy (``staged``) of a JSON array or object file; errors name
    the JSON file (``path``) and its rows."""

    staged: str = ""

    def tables(self) -> Iterator[pa.Table]:
        pf = parquet_file(self.staged)
        for g in range(self.first_group, self.last_group):
            yield pf.read_row_group(g, columns=list(self.columns))


@dataclass(frozen=True)
class JsonStageTask:
    path: str
    shape: str                 # records | object
    keys_as: str
    values_as: str
    target: str                # the Parquet copy
    rows_per_group: int
    columns: tuple[str, ...]   # the columns read (an empty file: these, 0 rows)


def stage_json(task: JsonStageTask) -> tuple[str, ...]:
    """Parse a JSON array of records, or an object of key -> value, and write it as Parquet
    (row groups of ``rows_per_group``) for parts to read by row group; returns its columns.
    Holds the parsed file (Python objects, several times the file's size) and its table."""
    try:
        with open_file(task.path, compression="infer") as f:
            doc = json.load(f)
    except ValueError as err:
        raise FormatError(f"not valid JSON: {err}", file=task.path) from None
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as err:
        if not is_decompress_error(err):
            raise
        raise truncated(task.path, err) from None
    if not doc and isinstance(doc, (list, dict)):
        table = pa.table({c: pa.array([], pa.string()) for c in task.columns})
    elif task.shape == "records":
        table = _records_table(doc, task.path)
    else:
        table = _object_table(doc, task)
    os.makedirs(os.path.dirname(task.target), exist_ok=True)
    pq.write_table(table, task.target, row_group_size=max(task.rows_per_group, 1))
    return tuple(table.column_names)


def _records_table(doc, path: str, keys: list | None = None) -> pa.Table:
    """A list of JSON objects as a table (pyarrow infers every column's type, over all rows).
    ``keys``: the object-shape keys of the rows, to name a bad row by key."""
    if not isinstance(doc, list):
        raise FormatError(f"expected an array of records, found a {type(doc).__name__}",
                          file=path)
    try:
        rows = pa.array(doc)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise _not_records(doc, path, keys) or _mixed_types(doc, path, err, keys) from None
    if not pa.types.is_struct(rows.type):
        raise _not_records(doc, path, keys)
    return pa.Table.from_struct_array(rows)


def _not_records(doc: list, path: str, keys: list | None) -> FormatError | None:
    """The first element that is not an object, named by key or record (error path)."""
    bad = next((i for i, r in enumerate(doc) if not isinstance(r, dict)), None)
    if bad is None:
        return None
    where = f"key {keys[bad]!r}" if keys else f"record {bad}"
    return FormatError(f"{where} is a {type(doc[bad]).__name__}, not an object", file=path,
                       row=None if keys else bad)


def _mixed_types(rows: list[dict], path: str, err: Exception, keys: list | None) -> FormatError:
    """The first column, and row, that pyarrow cannot give one type (error path only)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            first = type(next(v for v in values if v is not None))
            row = next(i for i, v in enumerate(values) if v is not None and
                       not isinstance(v, first))
            where = f" (key {keys[row]!r})" if keys else ""
            return FormatError(f"holds a {type(values[row]).__name__} here, a "
                               f"{first.__name__} in the rows before{where}", file=path,
                               field=name, row=None if keys else row)
    return FormatError(f"cannot be read as a table: {err}", file=path)


_INT_KEY = r"^(0|-?[1-9][0-9]*)$"


def _object_table(doc, task: JsonStageTask) -> pa.Table:
    """``{key: value}`` as rows: the keys in column ``keys_as`` (int64 when every key is a
    canonical integer), each value in column ``values_as``, or, when values are objects, their
    fields as columns."""
    if not isinstance(doc, dict):
        raise FormatError(f"expected an object of key -> value (json.shape: object), found a "
                          f"{type(doc).__name__}", file=task.path)
    keys = pa.array(list(doc), pa.string())
    if len(keys) and pc.all(pc.match_substring_regex(keys, _INT_KEY)).as_py():
        try:
            keys = pc.cast(keys, pa.int64())
        except pa.ArrowInvalid:          # beyond int64: keep the strings
            pass
    values = list(doc.values())
    if values and isinstance(values[0], dict):
        table = _records_table(values, task.path, list(doc))
        if task.keys_as in table.column_names:
            raise FormatError(f"the values have a field {task.keys_as!r}, the column the keys "
                              f"become: set json.keys_as to another name", file=task.path,
                              field=task.keys_as)
        return table.add_column(0, task.keys_as, keys)
    try:
        column = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise _mixed_types([{task.values_as: v} for v in values], task.path, err,
                           list(doc)) from None
    return pa.table({task.keys_as: keys, task.values_as: column})


def staged_json_parts(path: str, staged: str, columns: tuple[str, ...],
                      rows_per_part: int) -> list[TablePart]:
    """The parts of a JSON file staged as Parquet at ``staged`` by :func:`stage_json`."""
    names = parquet_columns(staged)
    missing = [c for c in columns if c not in names]
    if missing:
        raise FormatError(f"column {missing[0]!r} not found (columns: {names})", file=path,
                          field=missing[0])
    return [JsonStaged(path, columns, first, last, start, staged)
            for first, last, start in row_group_runs(staged, rows_per_part)]


def json_lines_parts(path: str, columns: tuple[str, ...], rows_per_part: int
                     ) -> list[TablePart]:
    """The parts of a JSON lines file: byte ranges of about ``rows_per_part`` lines (a
    compressed file: one part)."""
    fmt = json_lines_format(path, columns)
    if path.lower().endswith(COMPRESSED):
        return [JsonLinesStream(path, columns, fmt)]
    return [JsonLinesRange(path, columns, start, end, fmt)
            for start, end in byte_ranges(path, rows_per_part)]
