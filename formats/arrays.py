"""Read one chunk file: edge chunks as (src, dst) int64 arrays, data chunks as numpy arrays.

Each reader holds one chunk (``.npy`` chunks are memory-mapped and hold nothing until read).
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from graphprep.formats.errors import FormatError
from graphprep.formats.schema import ChunkFiles
from graphprep.formats.sparse import read_csr_parquet
from graphprep.formats.storage import is_url, open_file, parquet_file
from graphprep.formats.storage import size as storage_size

EDGE_COLUMNS = ("src", "dst")
SHAPE_KEY = b"shape"   # DGL's Parquet writer: the array's true shape, str(tuple), per file


@dataclass(frozen=True)
class ArrayInfo:
    """Rows, dtype and per-row shape of a data chunk, read from its header where possible."""

    rows: int
    dtype: np.dtype
    row_shape: tuple[int, ...]


def read_edge_chunk(path: str, files: ChunkFiles) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 arrays of one edge chunk: Parquet (columns ``src``/``dst`` when both
    are there, else the first two, as DGL's pipeline reads its ``"0"``/``"1"`` columns), CSV
    (the first two columns; a 0-byte file is 0 edges, as DGL writes and skips it) or .npy."""
    if files.format == "parquet":
        pf = parquet_file(path)
        names = edge_column_names(pf.schema_arrow.names, path)
        try:
            table = pf.read(columns=list(names))
        except (pa.ArrowInvalid, OSError) as err:
            raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None
        return tuple(_int_column(table.column(n), path, field)
                     for n, field in zip(names, EDGE_COLUMNS))
    if files.format == "csv" and _is_empty(path):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    array = read_array_chunk(path, files)
    if array.ndim != 2 or array.shape[1] < 2:
        found = 1 if array.ndim == 1 else array.shape[1]
        hint = f": is the delimiter {files.delimiter!r} right?" if files.format == "csv" else ""
        raise FormatError(f"edge chunk needs 2 columns (src, dst): found {found} "
                          f"column{'s' if found != 1 else ''}{hint}", file=path, field="src")
    return tuple(_as_int64(array[:, i], path, c) for i, c in enumerate(EDGE_COLUMNS))


def edge_column_names(names: list[str], path: str) -> tuple[str, str]:
    """The two columns of a Parquet edge chunk that hold src and dst: ``src``/``dst`` when both
    exist, else the first two (DGL writes ``"0"``/``"1"`` and reads columns by position). One of
    the two names without the other is ambiguous: refused, naming the missing one."""
    present = [c in names for c in EDGE_COLUMNS]
    if all(present):
        return EDGE_COLUMNS
    if any(present):
        missing = EDGE_COLUMNS[present.index(False)]
        raise FormatError(f"column {missing!r} missing (has {names})", file=path, field=missing)
    if len(names) < 2:
        raise FormatError(f"edge chunk needs 2 columns (src, dst), found {len(names)} "
                          f"({names})", file=path, field="src")
    return names[0], names[1]


def _is_empty(path: str) -> bool:
    """True for a 0-byte file (DGL's CSV edge chunk of an edge type with fewer edges than
    chunks)."""
    return storage_size(path) == 0


def _int_column(column: pa.ChunkedArray, path: str, name: str) -> np.ndarray:
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("missing value", file=path, field=name, row=row)
    if not pa.types.is_integer(column.type):
        raise FormatError(f"node IDs must be integers, found {column.type}", file=path, field=name)
    return _as_int64(column.to_numpy(), path, name)


# Unsigned or float IDs at or above this do not fit int64 (casting would wrap them negative).
_INT64_LIMIT = 2**63


def _as_int64(values: np.ndarray, path: str, name: str) -> np.ndarray:
    """Node IDs of any numeric dtype as int64; a value that is not an integer or does not fit
    int64 is a :class:`FormatError` naming its row. Signed input costs nothing; unsigned and
    float input one max (and the float checks) before the cast."""
    if values.dtype.kind == "i":
        return values.astype(np.int64, copy=False)
    if values.dtype.kind == "u":
        if len(values) and int(values.max()) >= _INT64_LIMIT:
            _too_large(values, values >= np.uint64(_INT64_LIMIT), path, name)
        return values.astype(np.int64, copy=False)
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            raise FormatError(f"node ID {values[bad][0]!r} is not an integer", file=path,
                              field=name, row=int(np.flatnonzero(bad)[0]))
        if len(values) and values.max() >= _INT64_LIMIT:
            _too_large(values, values >= _INT64_LIMIT, path, name)
        return values.astype(np.int64)
    raise FormatError(f"node IDs must be integers, found {values.dtype}", file=path, field=name)


def _too_large(values: np.ndarray, bad: np.ndarray, path: str, name: str):
    row = int(np.flatnonzero(bad)[0])
    value = int(values[row].item())  # floats here are whole numbers (checked before)
    raise FormatError(f"node ID {value} is too large (IDs must be below 2^63-1)", file=path,
                      field=name, row=row)


def read_array_chunk(path: str, files: ChunkFiles, *, mmap: bool = True) -> np.ndarray:
    """One data chunk as an array: ``.npy`` memory-mapped (local), Parquet or CSV parsed.

    Parquet: one numeric column gives 1-D; a list column or several numeric columns give 2-D.
    CSV: no header, values separated by the declared delimiter; one column gives 1-D.
    CSR (sparse rows): a :class:`graphprep.formats.sparse.CsrRows`.
    """
    if files.format == "csr":
        return read_csr_parquet(path, files.dim)
    if files.format == "numpy":
        try:
            if is_url(path):
                with open_file(path) as f:
                    return np.load(io.BytesIO(f.read()), allow_pickle=False)
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise FormatError(f"unreadable or truncated .npy file ({err})", file=path) from None
    if files.format == "parquet":
        pf = parquet_file(path)
        try:
            table = pf.read()
        except (pa.ArrowInvalid, OSError) as err:
            raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None
        return _reshaped(table_to_array(table, path), parquet_shape(pf, path), path)
    return _read_csv_array(path, files.delimiter)


def table_to_array(table: pa.Table, path: str) -> np.ndarray:
    """A Parquet/CSV table as a numpy array (see :func:`read_array_chunk`)."""
    if table.num_columns == 0:
        raise FormatError("table has no columns", file=path)
    for name in table.column_names:
        if table.column(name).null_count:
            row = int(np.flatnonzero(table.column(name).is_null().to_numpy(
                zero_copy_only=False))[0])
            raise FormatError("missing value", file=path, field=name, row=row)
    if table.num_columns == 1:
        col = table.column(0).combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or \
                pa.types.is_large_list(col.type):
            lengths = pc.list_value_length(col).to_numpy()
            if len(lengths) and (lengths != lengths[0]).any():
                row = int(np.flatnonzero(lengths != lengths[0])[0])
                raise FormatError("list rows differ in length", file=path,
                                  field=table.column_names[0], row=row)
            width = int(lengths[0]) if len(lengths) else 0
            return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), width)
        return col.to_numpy(zero_copy_only=False)
    return np.column_stack([table.column(i).to_numpy() for i in range(table.num_columns)])


def parquet_shape(pf: pq.ParquetFile, path: str) -> tuple[int, ...] | None:
    """The array shape DGL's Parquet writer stores in the file's schema metadata (key
    ``shape``, ``str(tuple)``: ``b"(1000, 2, 3)"``), or None when absent. A value that is not a
    tuple of non-negative integers is a :class:`FormatError` (parsed as a literal, never run)."""
    meta = pf.schema_arrow.metadata or {}
    raw = meta.get(SHAPE_KEY)
    if raw is None:
        return None
    try:
        shape = ast.literal_eval(raw.decode("utf-8"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        shape = None
    if not isinstance(shape, (tuple, list)) or not shape or not all(
            type(n) is int and n >= 0 for n in shape):
        raise FormatError(f"schema metadata 'shape' is {raw[:80]!r}, not a tuple of sizes",
                          file=path, field="shape")
    return tuple(shape)


def _reshaped(array: np.ndarray, shape: tuple[int, ...] | None, path: str) -> np.ndarray:
    """``array`` (rows, values...) in the ``shape`` its file's metadata declares (None: as is)."""
    if shape is None or array.shape == shape:
        return array
    rows = array.shape[0] if array.ndim else 0
    if shape[0] != rows or int(np.prod(shape)) != array.size:
        raise FormatError(f"schema metadata 'shape' {shape} does not fit the {rows} rows x "
                          f"{array.size // max(rows, 1)} values in the file", file=path,
                          field="shape")
    return array.reshape(shape)


def _read_csv_array(path: str, delimiter: str) -> np.ndarray:
    """A headerless numeric CSV chunk as an array. A column of text (numbers joined by another
    character) is a :class:`FormatError` that asks about the delimiter."""
    try:
        with open_file(path, compression="infer") as f:
            table = pacsv.read_csv(f, read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                                   parse_options=pacsv.ParseOptions(delimiter=delimiter))
    except pa.ArrowInvalid as err:
        raise FormatError(f"CSV parse error: {err}", file=path) from None
    for i, col in enumerate(table.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            what = "found 1 column" if table.num_columns == 1 else \
                f"column {i} of {table.num_columns} is text, not numbers"
            raise FormatError(f"{what}: is the delimiter {delimiter!r} right? (first row "
                              f"{col[0].as_py()!r})", file=path, row=0)
    return table_to_array(table, path)


def array_info(path: str, files: ChunkFiles) -> ArrayInfo:
    """Rows, dtype and row shape of a data chunk without reading its values (npy, Parquet:
    the footer and one row; a ``shape`` in the schema metadata gives the row shape; CSR: the
    footer and the schema)."""
    if files.format == "csr":
        # values are read as float32 whatever the file stores (graphprep.formats.sparse)
        return ArrayInfo(parquet_file(path).metadata.num_rows, np.dtype(np.float32),
                         (files.dim,))
    if files.format == "parquet":
        pf = parquet_file(path)
        rows = pf.metadata.num_rows
        shape = parquet_shape(pf, path)
        if shape is not None and shape[0] != rows:
            raise FormatError(f"schema metadata 'shape' {shape} says {shape[0]} rows, the "
                              f"file has {rows}", file=path, field="shape")
        if rows and pf.metadata.num_row_groups:
            sample = table_to_array(pf.read_row_group(0).slice(0, 1), path)
            if shape is not None:
                sample = _reshaped(sample, (1, *shape[1:]), path)
            return ArrayInfo(rows, sample.dtype, sample.shape[1:])
        return ArrayInfo(rows, _empty_dtype(pf), shape[1:] if shape is not None else ())
    array = read_array_chunk(path, files)
    return ArrayInfo(array.shape[0] if array.ndim else 1, array.dtype, array.shape[1:])


def _empty_dtype(pf: pq.ParquetFile) -> np.dtype:
    """dtype of a Parquet chunk with no rows, from its schema (float64 when unknown)."""
    try:
        kind = pf.schema_arrow.field(0).type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
                pa.types.is_fixed_size_list(kind):
            kind = kind.value_type
        return np.dtype(kind.to_pandas_dtype())
    except (NotImplementedError, TypeError, IndexError, KeyError):
        return np.dtype("float64")
