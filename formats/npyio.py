"""``.npy`` files read and written by row range, without memory-mapping.

Memory-mapped pages a task touches count in its resident memory (and Dask's memory monitor
sees them), so streaming steps read row ranges with a seek and write outputs front to back.
Files are byte-identical to ``np.save`` of the whole array.
"""

from __future__ import annotations

import io
import os

import numpy as np
from numpy.lib import format as npformat

from graphprep.formats.output import writing


def read_npy_header(f) -> tuple[tuple[int, ...], np.dtype, int, bool]:
    """``(shape, dtype, data offset, fortran_order)`` from the header at the start of the open
    binary file ``f`` (local or fsspec), which is left at the data. The one ``.npy`` header
    reader: every other place that needs a header calls it. Raises what numpy raises on a
    damaged header (ValueError, OSError, EOFError, SyntaxError)."""
    version = npformat.read_magic(f)
    read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return tuple(int(n) for n in shape), dtype, f.tell(), fortran


def _header(f):
    shape, dtype, offset, fortran = read_npy_header(f)
    if fortran:
        raise ValueError(f"{f.name}: Fortran-ordered arrays are not supported")
    return shape, dtype, offset


def npy_header_of(path: str) -> tuple[tuple[int, ...], np.dtype, int, bool]:
    """``(shape, dtype, data offset, fortran_order)`` of a local ``.npy`` (reads the header
    only; :func:`read_npy_header`)."""
    with open(path, "rb") as f:
        return read_npy_header(f)


def npy_shape(path: str) -> tuple[tuple[int, ...], np.dtype]:
    with open(path, "rb") as f:
        shape, dtype, _ = _header(f)
    return shape, dtype


def read_rows(path: str, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``[start, stop)`` of a C-ordered ``.npy`` (holds only those rows); ``out``: read
    them into this C-contiguous array of the file's dtype and row shape instead (no second
    copy when gathering many files' rows into one buffer). Raises ValueError if ``out`` does
    not fit or the file ends early."""
    with open(path, "rb") as f:
        shape, dtype, offset = _header(f)
        row = int(np.prod(shape[1:], dtype=np.int64))
        stop = min(stop, shape[0])
        count = max(stop - start, 0)
        f.seek(offset + start * row * dtype.itemsize)
        if out is None:
            data = np.fromfile(f, dtype=dtype, count=count * row)
            return data.reshape((count, *shape[1:]))
        if out.dtype != dtype or out.shape != (count, *shape[1:]) or \
                not out.flags.c_contiguous:
            raise ValueError(f"{path}: rows [{start}, {stop}) of {dtype} {shape} do not fit "
                             f"an array of {out.dtype} {out.shape}")
        if f.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise ValueError(f"{path}: ends before row {stop}")
    return out


def new_npy(path: str, shape: tuple[int, ...], dtype=np.int64) -> None:
    """Create a C-ordered ``.npy`` of zeros of ``shape`` and ``dtype`` at ``path`` (the bytes
    of ``np.save`` of ``np.zeros``) for tasks to fill range by range with :func:`write_rows`.
    Writes only the header and sets the file's length: holds nothing, and the file system
    stores no zeros until they are written."""
    dtype, shape = np.dtype(dtype), tuple(int(x) for x in shape)
    header = npy_header_bytes(dtype, shape)
    with writing(path), open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + dtype.itemsize * int(np.prod(shape, dtype=np.int64)))


def write_rows(path: str, start: int, values: np.ndarray) -> None:
    """Write ``values`` (cast to the file's dtype) at rows ``start:`` of the C-ordered ``.npy``
    at ``path`` with one positioned write; holds only ``values``. The counterpart of
    :func:`read_rows` for files that tasks fill range by range. Not through a memory map and
    its flush: ``msync`` wrote back every dirty page of the mapping, other tasks' rows
    included, and waited for the disk (without it a 10^8-edge partition took 7-13% less).
    Closing the file is what makes the rows visible to workers on other hosts sharing the
    folder (NFS's close-to-open consistency). Raises ValueError when the rows do not fit the
    file's shape."""
    with open(path, "r+b") as f:
        shape, dtype, offset = _header(f)
        values = np.ascontiguousarray(values, dtype=dtype)
        if values.shape[1:] != shape[1:] or not 0 <= start <= shape[0] - len(values):
            raise ValueError(f"{path}: rows {start}:{start + len(values)} of shape "
                             f"{values.shape[1:]} do not fit its {shape}")
        f.seek(offset + start * dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
        with writing(path):
            f.write(memoryview(values.reshape(-1)).cast("B"))


def npy_header_bytes(dtype, shape) -> bytes:
    """The header ``np.save`` writes for a C-ordered array of ``shape`` ``dtype``s (version
    1.0; numpy pads it for 21 digits of each size, so its length does not depend on them)."""
    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, {"descr": npformat.dtype_to_descr(np.dtype(dtype)),
                                          "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


class NpyWriter:
    """Writes a ``.npy`` of known shape front to back: ``write(rows)`` appends rows."""

    def __init__(self, path: str, shape, dtype):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path, self.shape, self.dtype = path, tuple(int(x) for x in shape), np.dtype(dtype)
        self.rows = 0
        with writing(path):
            self._f = open(path, "wb")
            self._f.write(npy_header_bytes(self.dtype, self.shape))

    def write(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        with writing(self.path):  # the array's own buffer: no bytes copy of it
            self._f.write(memoryview(rows.reshape(-1)).cast("B"))
        self.rows += len(rows) if rows.ndim else 1

    def close(self) -> None:
        with writing(self.path):
            self._f.close()
        if self.rows != self.shape[0]:
            raise RuntimeError(f"{self.path}: wrote {self.rows} rows of {self.shape[0]}")
