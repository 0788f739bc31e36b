"""Sparse rows (CSR) as torch tensors: a bag-of-words or multi-hot node field kept sparse from
the part's files, through RPC and the feature fetch, into the first layer's product.

A 4,714-wide multi-hot row with a few dozen active columns is ~19 KB dense and ~0.3 KB
sparse; densifying it made every feature request, and every first-layer product, 100x bigger
than the data. :class:`SparseRows` answers what the trainer asks of a dense ``[n, dim]`` row
block where it moves rows (``len``, ``shape``, ``take`` by IDs, prefix slices, ``cat``,
``to(device)``) with vectorized torch ops, so the same code runs on CPU and CUDA.

The first layer consumes it through :func:`sparse_matmul` (``rows @ weight`` as one
``embedding_bag``: a sum over each row's stored values of weight rows, with autograd);
a model that does not declare ``sparse_input = True`` gets ``to_dense()`` per batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphprep.formats.sparse import CsrRows


@dataclass(frozen=True)
class SparseRows:
    """``n`` rows of width ``dim``: ``indptr`` (int64 ``[n + 1]``, from 0), ``indices`` (column
    of each stored value, int32 or int64 ``[nnz]``), ``values`` (``[nnz]``). Tensors may be
    memory-mapped (a part's field as loaded) or on any device; all on the same one."""

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    dim: int

    # --- what a dense row block answers ------------------------------------------------------
    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self), self.dim))

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def nnz(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        """Bytes of the three tensors (what the rows cost in memory and on the wire)."""
        return sum(t.numel() * t.element_size() for t in (self.indptr, self.indices,
                                                          self.values))

    def __getitem__(self, key) -> "SparseRows":
        """A prefix or any contiguous slice ``[a:b]`` (views of the stored arrays), or rows
        ``key`` (an int64 tensor or array, or a bool mask): :meth:`take`."""
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                return self.rows_between(start, max(start, stop))
            key = torch.arange(start, stop, step)
        key = torch.as_tensor(key)
        if key.dtype == torch.bool:
            key = torch.nonzero(key).flatten()
        return self.take(key)

    def rows_between(self, start: int, stop: int) -> "SparseRows":
        """Rows ``[start, stop)``: views of ``indices``/``values``, a shifted copy of the
        ``stop - start + 1`` indptr entries."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        return SparseRows(self.indptr[start:stop + 1] - lo, self.indices[lo:hi],
                          self.values[lo:hi], self.dim)

    def row_counts(self) -> torch.Tensor:
        """Stored values per row (int64 ``[n]``)."""
        return self.indptr[1:] - self.indptr[:-1]

    def take(self, rows: torch.Tensor) -> "SparseRows":
        """Rows ``rows`` (int tensor on this device or the host, any order, repeats allowed),
        vectorized: the new indptr is a cumsum of the rows' counts, and every stored value
        moves in one gather (``repeat_interleave`` of the row starts, plus a running offset).
        Holds the result and two int64 ``[nnz of the result]`` temporaries."""
        rows = torch.as_tensor(rows, dtype=torch.int64).to(self.indptr.device)
        starts = self.indptr.index_select(0, rows)
        counts = self.indptr.index_select(0, rows + 1) - starts
        indptr = torch.zeros(len(rows) + 1, dtype=torch.int64, device=self.indptr.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        total = int(indptr[-1])
        # entry k of output row r sits at starts[r] + (k - indptr[r]) in the stored arrays
        where = torch.repeat_interleave(starts - indptr[:-1], counts, output_size=total) + \
            torch.arange(total, dtype=torch.int64, device=self.indptr.device)
        where = where.to(self.values.device)
        return SparseRows(indptr, self.indices.index_select(0, where),
                          self.values.index_select(0, where), self.dim)

    @staticmethod
    def cat(blocks: list["SparseRows"]) -> "SparseRows":
        """Row blocks one after another (all of one width); indices in their common dtype."""
        if not blocks:
            raise ValueError("SparseRows.cat of no blocks")
        ends = torch.tensor([0] + [b.nnz for b in blocks], dtype=torch.int64)
        shift = torch.cumsum(ends, 0)[:-1].tolist()
        index_dtype = blocks[0].indices.dtype
        for b in blocks[1:]:
            index_dtype = torch.promote_types(index_dtype, b.indices.dtype)
        indptr = torch.cat([blocks[0].indptr[:1]] + [b.indptr[1:] + s
                                                      for b, s in zip(blocks, shift)])
        return SparseRows(indptr, torch.cat([b.indices.to(index_dtype) for b in blocks]),
                          torch.cat([b.values for b in blocks]), blocks[0].dim)

    def to(self, device, non_blocking: bool = False) -> "SparseRows":
        """The rows on ``device`` (non-blocking from pinned memory)."""
        move = (lambda t: t.to(device, non_blocking=non_blocking))
        return SparseRows(move(self.indptr), move(self.indices), move(self.values), self.dim)

    def cpu(self) -> "SparseRows":
        return self.to("cpu")

    def float(self) -> "SparseRows":
        return self.with_values(self.values.float())

    def with_values(self, values: torch.Tensor) -> "SparseRows":
        """The same pattern with other stored values (dropout, a cast, a scale)."""
        return SparseRows(self.indptr, self.indices, values, self.dim)

    def __mul__(self, scalar) -> "SparseRows":
        return self.with_values(self.values * scalar)

    __rmul__ = __mul__

    def to_dense(self) -> torch.Tensor:
        """The rows as a dense ``[n, dim]`` tensor (holds it: the per-batch fallback for
        models without sparse input, and tests)."""
        out = torch.zeros((len(self), self.dim), dtype=self.dtype, device=self.device)
        rows = torch.repeat_interleave(torch.arange(len(self), device=self.indptr.device),
                                       self.row_counts(), output_size=self.nnz)
        out[rows.to(self.device), self.indices.long().to(self.device)] = self.values
        return out

    def with_dense_columns(self, extra: torch.Tensor) -> "SparseRows":
        """These rows with the ``w`` columns of ``extra`` (2-D ``[n, w]``) appended as columns
        ``dim .. dim + w - 1`` (every one stored, zeros too: a fixed ``w`` more per row). How
        appended inputs (log-degree) join a sparse feature, so the first layer stays one
        sparse product over ``dim + w`` columns."""
        extra = extra.to(self.values.dtype).to(self.device)
        n, w = extra.shape
        counts = self.row_counts()
        indptr = torch.zeros(n + 1, dtype=torch.int64, device=self.indptr.device)
        torch.cumsum(counts + w, 0, out=indptr[1:])
        total = int(indptr[-1])
        rows = torch.repeat_interleave(torch.arange(n, device=self.indptr.device), counts,
                                       output_size=self.nnz)
        # an old entry keeps its offset within its row; the w new ones follow the row's last
        old = indptr[:-1].index_select(0, rows) + torch.arange(
            self.nnz, device=self.indptr.device) - self.indptr[:-1].index_select(0, rows)
        new = ((indptr[:-1] + counts).unsqueeze(1) +
               torch.arange(w, device=self.indptr.device)).flatten()
        index_dtype = torch.int64 if self.dim + w > torch.iinfo(torch.int32).max else \
            self.indices.dtype
        indices = torch.empty(total, dtype=index_dtype, device=self.device)
        values = torch.empty(total, dtype=self.values.dtype, device=self.device)
        indices[old.to(self.device)] = self.indices.to(index_dtype)
        values[old.to(self.device)] = self.values
        indices[new.to(self.device)] = (self.dim + torch.arange(w, device=self.device)
                                        ).to(index_dtype).repeat(n)
        values[new.to(self.device)] = extra.flatten()
        return SparseRows(indptr, indices, values, self.dim + w)

    # --- conversions -------------------------------------------------------------------------
    @classmethod
    def from_csr(cls, rows: CsrRows) -> "SparseRows":
        """Tensors over a :class:`graphprep.formats.sparse.CsrRows`' arrays (shared, not copied: a
        memory-mapped part field stays mapped)."""
        return cls(*(torch.from_numpy(np.asarray(a)) for a in (rows.indptr, rows.indices,
                                                               rows.values)), rows.dim)

    @classmethod
    def from_dense(cls, dense: torch.Tensor) -> "SparseRows":
        """The non-zero entries of a 2-D tensor (tests, small blocks)."""
        rows, cols = torch.nonzero(dense, as_tuple=True)
        indptr = torch.zeros(len(dense) + 1, dtype=torch.int64, device=dense.device)
        torch.cumsum(torch.bincount(rows, minlength=len(dense)), 0, out=indptr[1:])
        return cls(indptr, cols, dense[rows, cols], int(dense.shape[1]))

    @classmethod
    def empty(cls, dim: int, dtype=torch.float32, index_dtype=torch.int64) -> "SparseRows":
        return cls(torch.zeros(1, dtype=torch.int64), torch.empty(0, dtype=index_dtype),
                   torch.empty(0, dtype=dtype), dim)


def is_sparse(rows) -> bool:
    return isinstance(rows, SparseRows)


def sparse_matmul(rows: SparseRows, weight: torch.Tensor) -> torch.Tensor:
    """``rows @ weight`` (``weight`` ``[dim, out]``) without densifying: ``embedding_bag``
    sums, per row, the weight rows of its columns scaled by their values. Differentiable in
    ``weight`` (and the values); CPU and CUDA. Holds the ``[n, out]`` result."""
    offsets = rows.indptr.to(rows.device)
    # embedding_bag wants indices and offsets of one dtype; int64 holds any nnz
    return torch.nn.functional.embedding_bag(
        rows.indices.long(), weight, offsets, mode="sum",
        per_sample_weights=rows.values.to(weight.dtype), include_last_offset=True)


def densify(x):
    """``x`` with every :class:`SparseRows` (alone or in a dict) as a dense tensor."""
    if isinstance(x, dict):
        return {k: densify(v) for k, v in x.items()}
    return x.to_dense() if is_sparse(x) else x
