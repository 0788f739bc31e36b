"""Sparse rows (CSR): bag-of-words and multi-hot node data kept sparse from input to model.

A 4,714-wide multi-hot feature with a few dozen active entries per row is ~19 KB per row dense
and ~0.2 KB sparse; densifying it made every step, and above all every RPC of the trainer, move
100x the bytes. :class:`CsrRows` is such a field's rows: ``indptr`` (int64 ``[n + 1]``),
``indices`` (column of each stored value, int32 or int64 ``[nnz]``), ``values`` (``[nnz]``),
and the row width ``dim``. It answers what the pipeline asks of a dense row block (``len``,
``shape``, ``dtype``, slices, fancy and mask indexing, concatenation), so row-moving code stays
the same for both.

On disk (FORMATS.md, "Sparse data"):

- in a chunked graph a sparse field's entry is ``{"format": {"name": "csr", "dim": D}, ...}``
  and each chunk one Parquet file with list columns ``indices`` and ``values``
  (``graphprep.formats.output.write_csr_parquet``, :func:`read_csr_parquet`);
- everywhere else (dispatch's pieces, the parts) three ``.npy`` files beside where the dense
  ``NAME.npy`` would be: ``NAME.indptr.npy``, ``NAME.indices.npy``, ``NAME.values.npy``
  (``graphprep.formats.output.save_csr``, :func:`load_csr`: memory-mapped, read rows by
  slicing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphprep.formats.errors import FormatError
from graphprep.formats.storage import parquet_file

if TYPE_CHECKING:      # pyarrow is imported where a Parquet chunk is read (see storage.py)
    import pyarrow as pa

CSR = "csr"                                   # ChunkFiles.format and a field spec's "format"
CSR_ARRAYS = ("indptr", "indices", "values")
DIM_KEY = b"graphprep.csr_dim"                # Parquet schema metadata of a CSR chunk


@dataclass(frozen=True)
class CsrRows:
    """Rows of a sparse field (see the module docstring). ``indptr[0]`` is 0; arrays may be
    memory-mapped (slices of a mapped block stay mapped)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.dim)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.values.nbytes

    def row_of_entries(self) -> np.ndarray:
        """The row of each stored value (int64 ``[nnz]``)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def __getitem__(self, key) -> "CsrRows":
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self.rows_between(start, max(start, stop))
            key = np.arange(start, stop, step)
        key = np.asarray(key)
        if key.dtype == bool:
            key = np.flatnonzero(key)
        return self.take(key)

    def rows_between(self, start: int, stop: int) -> "CsrRows":
        """Rows ``[start, stop)``: views of ``indices``/``values`` (mapped stays mapped)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        indptr = np.asarray(self.indptr[start:stop + 1], dtype=np.int64) - lo
        return CsrRows(indptr, self.indices[lo:hi], self.values[lo:hi], self.dim)

    def take(self, rows: np.ndarray) -> "CsrRows":
        """Rows ``rows`` (int array, any order, repeats allowed), vectorized: one gather of
        the stored values."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = np.asarray(self.indptr[rows], dtype=np.int64)
        counts = np.asarray(self.indptr[rows + 1], dtype=np.int64) - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        where = np.repeat(starts - indptr[:-1], counts) + np.arange(indptr[-1], dtype=np.int64)
        return CsrRows(indptr, np.asarray(self.indices[where]), np.asarray(self.values[where]),
                       self.dim)

    def to_dense(self) -> np.ndarray:
        """The rows as a dense ``[n, dim]`` array (holds it: for small blocks only)."""
        out = np.zeros(self.shape, dtype=self.dtype)
        out[self.row_of_entries(), self.indices] = self.values
        return out

    def copy(self) -> "CsrRows":
        """The rows in memory (a mapped block read)."""
        return CsrRows(np.array(self.indptr), np.array(self.indices), np.array(self.values),
                       self.dim)

    @classmethod
    def from_dense(cls, array: np.ndarray) -> "CsrRows":
        """The non-zero entries of a 2-D array."""
        rows, cols = np.nonzero(array)
        indptr = np.zeros(len(array) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(array)), out=indptr[1:])
        return cls(indptr, cols.astype(index_dtype(array.shape[1])), array[rows, cols],
                   int(array.shape[1]))

    @classmethod
    def empty(cls, dim: int, dtype=np.float32) -> "CsrRows":
        return cls(np.zeros(1, np.int64), np.empty(0, index_dtype(dim)), np.empty(0, dtype), dim)


def index_dtype(dim: int) -> np.dtype:
    """int32 column indices where they fit (half the bytes), else int64."""
    return np.dtype(np.int32 if dim <= np.iinfo(np.int32).max else np.int64)


def is_csr(rows) -> bool:
    return isinstance(rows, CsrRows)


def as_rows(rows):
    """A row block as it moves: :class:`CsrRows` as is, anything else as a numpy array."""
    return rows if is_csr(rows) else np.asarray(rows)


def concat_rows(blocks: list):
    """Row blocks joined: dense arrays by ``np.concatenate``, :class:`CsrRows` as CSR (all of
    one kind)."""
    if not blocks or not is_csr(blocks[0]):
        return np.concatenate(blocks)
    sizes = np.array([b.nnz for b in blocks], dtype=np.int64)
    shift = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    indptr = np.concatenate([[0]] + [b.indptr[1:] + s for b, s in zip(blocks, shift)])
    return CsrRows(indptr.astype(np.int64), np.concatenate([b.indices for b in blocks]),
                   np.concatenate([b.values for b in blocks]), blocks[0].dim)


def csr_paths(base: str) -> dict[str, str]:
    """The three ``.npy`` files of a sparse array whose dense form would be ``base + .npy``."""
    return {name: f"{base}.{name}.npy" for name in CSR_ARRAYS}


def load_csr(base: str, dim: int, mmap: bool = True) -> CsrRows:
    """The sparse array saved at ``base`` (memory-mapped unless ``mmap`` is False). Raises
    :class:`FormatError` naming a missing, truncated or inconsistent file."""
    arrays = {}
    for name, path in csr_paths(base).items():
        try:
            arrays[name] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise FormatError(f"unreadable, missing or truncated CSR array ({err})",
                              file=path) from None
    if len(arrays["indices"]) != len(arrays["values"]) or not len(arrays["indptr"]) or \
            int(arrays["indptr"][-1]) != len(arrays["values"]):
        raise FormatError(f"CSR arrays disagree: indptr ends at {int(arrays['indptr'][-1])}, "
                          f"{len(arrays['indices'])} indices, {len(arrays['values'])} values",
                          file=csr_paths(base)["indptr"])
    return CsrRows(arrays["indptr"], arrays["indices"], arrays["values"], dim)


def csr_from_lists(indices: pa.Array, values: pa.Array | None, dim: int, *,
                   file: str, field: str, row0: int = 0) -> CsrRows:
    """:class:`CsrRows` from a list column of active indices and (optionally) a list column of
    their values (None: every value 1.0, multi-hot), checked: no null row, values as long as
    indices in every row, indices in ``[0, dim)``. Raises :class:`FormatError` naming the row
    (``row0``: the file row of the columns' first row)."""
    import pyarrow as pa

    if isinstance(indices, pa.ChunkedArray):
        indices = indices.combine_chunks()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if indices.null_count:
        row = int(np.flatnonzero(indices.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("null list of active indices", file=file, field=field,
                          row=row0 + row)
    offsets = indices.offsets.to_numpy().astype(np.int64)
    cols = indices.flatten().to_numpy(zero_copy_only=False)
    if cols.dtype.kind not in "iu" or pa.types.is_null(indices.type.value_type):
        if len(cols):
            raise FormatError(f"active indices must be integers, found {indices.type}",
                              file=file, field=field)
        cols = cols.astype(np.int64)
    if values is None:
        vals = np.ones(len(cols), dtype=np.float32)
    else:
        same = np.diff(values.offsets.to_numpy()) == np.diff(indices.offsets.to_numpy())
        if values.null_count or not same.all():
            row = int(np.flatnonzero(~same | values.is_null().to_numpy(
                zero_copy_only=False))[0])
            raise FormatError("the values list differs in length from the indices list (or "
                              "is null)", file=file, field=field, row=row0 + row)
        vals = values.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    outside = (cols < 0) | (cols >= dim)
    if outside.any():
        at = int(np.flatnonzero(outside)[0])
        row = int(np.searchsorted(offsets, at, side="right") - 1)
        raise FormatError(f"active index {int(cols[at])} outside [0, {dim})", file=file,
                          field=field, row=row0 + row)
    offsets -= offsets[0]
    return CsrRows(offsets, cols.astype(index_dtype(dim)), vals, dim)


def read_csr_parquet(path: str, dim: int | None = None) -> CsrRows:
    """A chunk written by ``output.write_csr_parquet`` (``dim``: the width metadata.json declares;
    None: the file's own). Raises :class:`FormatError` naming the file."""
    import pyarrow as pa

    pf = parquet_file(path)
    try:
        table = pf.read()
    except (pa.ArrowInvalid, OSError) as err:
        raise FormatError(f"unreadable or truncated Parquet file ({err})", file=path) from None
    if "indices" not in table.column_names:
        raise FormatError("a CSR chunk needs a list column 'indices' (and optionally "
                          "'values')", file=path)
    own = (pf.schema_arrow.metadata or {}).get(DIM_KEY)
    width = dim if dim is not None else int(own) if own else None
    if width is None:
        raise FormatError("the width of a CSR chunk is unknown (no 'dim' in metadata.json's "
                          "format, no graphprep.csr_dim in the file)", file=path)
    values = table.column("values") if "values" in table.column_names else None
    return csr_from_lists(table.column("indices"), values, width, file=path, field="indices")


def read_scipy_npz(path: str) -> CsrRows:
    """A sparse matrix saved by ``scipy.sparse.save_npz`` (CSR, CSC or COO; read with numpy
    alone) as :class:`CsrRows`, rows in order. Holds the matrix. Raises :class:`FormatError`
    for an ``.npz`` that is not such a matrix."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError) as err:
        raise FormatError(f"unreadable .npz ({err})", file=path) from None
    kind = arrays.get("format")
    if kind is None or "shape" not in arrays:
        raise FormatError("not a scipy sparse matrix (no 'format' and 'shape'): save it with "
                          "scipy.sparse.save_npz, or give dense rows as .npy", file=path)
    kind, (n, dim) = bytes(kind.item() if kind.ndim == 0 else kind).decode(), arrays["shape"]
    n, dim = int(n), int(dim)
    if kind == "csr":
        indptr = arrays["indptr"].astype(np.int64)
        return CsrRows(indptr - indptr[0], arrays["indices"].astype(index_dtype(dim)),
                       arrays["data"].astype(np.float32), dim)
    if kind == "csc":
        counts = np.diff(arrays["indptr"].astype(np.int64))
        rows, cols = arrays["indices"].astype(np.int64), np.repeat(np.arange(dim), counts)
    elif kind == "coo":
        rows, cols = arrays["row"].astype(np.int64), arrays["col"].astype(np.int64)
    else:
        raise FormatError(f"sparse format {kind!r} is not read (csr, csc or coo)", file=path,
                          field="format")
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return CsrRows(indptr, cols[order].astype(index_dtype(dim)),
                   arrays["data"][order].astype(np.float32), dim)
