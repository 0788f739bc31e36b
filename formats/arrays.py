"""Read one chunk file: edge chunks as (src, dst) int64 arrays, data chunks as numpy arrays.

Each reader holds one chunk (``.npy`` chunks are memory-mapped and hold nothing until read).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import FormatError
from .schema import ChunkFiles
from .storage import is_url, open_file

EDGE_COLUMNS = ("src", "dst")


@dataclass(frozen=True)
class ArrayInfo:
    """Rows, dtype and per-row shape of a data chunk, read from its header where possible."""

    rows: int
    dtype: np.dtype
    row_shape: tuple[int, ...]


def _parquet_file(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(open_file(path) if is_url(path) else path)
    except (pa.ArrowInvalid, OSError) as err:
        raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None


def read_edge_chunk(path: str, files: ChunkFiles) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 arrays of one edge chunk (Parquet columns src/dst, CSV or .npy)."""
    if files.format == "parquet":
        pf = _parquet_file(path)
        missing = [c for c in EDGE_COLUMNS if c not in pf.schema_arrow.names]
        if missing:
            raise FormatError(f"column {missing[0]!r} missing (has {pf.schema_arrow.names})",
                              file=path, field=missing[0])
        try:
            table = pf.read(columns=list(EDGE_COLUMNS))
        except (pa.ArrowInvalid, OSError) as err:
            raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None
        return tuple(_int_column(table.column(c), path, c) for c in EDGE_COLUMNS)
    array = read_array_chunk(path, files)
    if array.ndim != 2 or array.shape[1] < 2:
        raise FormatError(f"edge chunk must have 2 columns (src, dst), found shape {array.shape}",
                          file=path, field="src")
    return tuple(_as_int64(array[:, i], path, c) for i, c in enumerate(EDGE_COLUMNS))


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
    """
    if files.format == "numpy":
        try:
            if is_url(path):
                with open_file(path) as f:
                    return np.load(io.BytesIO(f.read()), allow_pickle=False)
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise FormatError(f"unreadable or truncated .npy file ({err})", file=path) from None
    if files.format == "parquet":
        try:
            table = _parquet_file(path).read()
        except (pa.ArrowInvalid, OSError) as err:
            raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None
        return table_to_array(table, path)
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
            lengths = pa.compute.list_value_length(col).to_numpy()
            if len(lengths) and (lengths != lengths[0]).any():
                row = int(np.flatnonzero(lengths != lengths[0])[0])
                raise FormatError("list rows differ in length", file=path,
                                  field=table.column_names[0], row=row)
            width = int(lengths[0]) if len(lengths) else 0
            return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), width)
        return col.to_numpy(zero_copy_only=False)
    return np.column_stack([table.column(i).to_numpy() for i in range(table.num_columns)])


def _read_csv_array(path: str, delimiter: str) -> np.ndarray:
    try:
        with open_file(path, compression="infer") as f:
            table = pacsv.read_csv(f, read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                                   parse_options=pacsv.ParseOptions(delimiter=delimiter))
    except pa.ArrowInvalid as err:
        raise FormatError(f"CSV parse error: {err}", file=path) from None
    return table_to_array(table, path)


def array_info(path: str, files: ChunkFiles) -> ArrayInfo:
    """Rows, dtype and row shape of a data chunk without reading its values (npy, Parquet)."""
    if files.format == "parquet":
        pf = _parquet_file(path)
        rows = pf.metadata.num_rows
        if rows and pf.metadata.num_row_groups:
            sample = table_to_array(pf.read_row_group(0).slice(0, 1), path)
            return ArrayInfo(rows, sample.dtype, sample.shape[1:])
        return ArrayInfo(rows, np.dtype("float64"), ())
    array = read_array_chunk(path, files)
    return ArrayInfo(array.shape[0] if array.ndim else 1, array.dtype, array.shape[1:])
