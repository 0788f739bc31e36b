"""A node or edge data field read by row range: the chunk files of a field as one array.

:class:`ArraySource` is what every reader of a field's rows answers (``num_rows``,
``csr_dim``, ``read(start, stop)``, ``blocks()``); :class:`ChunkedArray` reads the chunk
files of a chunked graph's field as one array (holding only the files a read overlaps), and
:func:`open_field` opens such a field after checking its chunks' headers agree
(:class:`DataField` applies the NaN policy to each file's rows as they are read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from graphprep.formats.arrays import array_info, read_array_chunk
from graphprep.formats.errors import FormatError
from graphprep.formats.finite import check_finite
from graphprep.formats.schema import METADATA, ChunkedGraph, ChunkFiles
from graphprep.formats.sparse import CSR, CsrRows, as_rows, concat_rows
from graphprep.formats.storage import join
from graphprep.formats.validate import FieldSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArraySource:
    """Rows of one node or edge data field. Random access when ``num_rows`` is known."""

    path: str

    @property
    def num_rows(self) -> int | None:
        return None

    @property
    def csr_dim(self) -> int:
        """Row width of a sparse source (reads give :class:`CsrRows`); 0 for dense."""
        return 0

    def read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def blocks(self) -> Iterator[np.ndarray]:
        yield self.read(0, self.num_rows)



@dataclass(frozen=True)
class ChunkedArray(ArraySource):
    """Data chunk files read as one array (DGL's node/edge data). Holds the files a read
    overlaps (``.npy`` chunks only the rows asked for)."""

    root: str = ""
    files: ChunkFiles = None
    rows_per_file: tuple[int, ...] = ()

    @classmethod
    def of(cls, graph, files: ChunkFiles) -> "ChunkedArray":
        """A field of a chunked graph (rows per file read from the files' headers)."""
        rows = tuple(array_info(graph.path(f), files).rows for f in files.files)
        return cls(graph.root, graph.root, files, rows)

    @property
    def num_rows(self) -> int:
        return sum(self.rows_per_file)

    @property
    def csr_dim(self) -> int:
        return self.files.dim if self.files.format == CSR else 0

    def read(self, start: int, stop: int,
             check: Callable[[str, np.ndarray, int], None] | None = None) -> np.ndarray:
        """Rows ``[start, stop)``. ``check(path, rows, first row in that file)`` sees each file's
        piece before the pieces are joined (so an error can name the file and its row)."""
        bounds = np.concatenate([[0], np.cumsum(self.rows_per_file)])
        parts = []
        for i, rel in enumerate(self.files.files):
            lo, hi = max(start, bounds[i]), min(stop, bounds[i + 1])
            if lo < hi:
                path = join(self.root, rel)
                piece = as_rows(read_array_chunk(path, self.files)[lo - bounds[i]:
                                                                   hi - bounds[i]])
                if check is not None:
                    check(path, piece, int(lo - bounds[i]))
                parts.append(piece)
        if not parts:
            return CsrRows.empty(self.files.dim) if self.files.format == CSR else np.empty(0)
        return concat_rows(parts)


@dataclass(frozen=True)
class DataField:
    """One node or edge data field of the input: its chunk files read as one array.

    ``spec`` is the first chunk's dtype and row shape (every chunk was checked against it when
    the field was opened). :meth:`read` applies ``nan_policy`` to each file's rows as they
    arrive. Holds the rows of one read.
    """

    field: str                 # e.g. "node_data.paper.feat": what errors name
    array: ChunkedArray
    spec: FieldSpec
    nan_policy: str = "error"

    @property
    def csr_dim(self) -> int:
        """Row width of a sparse field (0: dense)."""
        return self.array.csr_dim

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the field; a NaN/inf under "error" raises
        :class:`FormatError` naming the chunk file and its row, under "warn" is logged."""
        return as_rows(self.array.read(start, stop, check=self._check))

    def _check(self, path: str, rows: np.ndarray, row0: int) -> None:
        warning = check_finite(rows, self.nan_policy, file=path, field=self.field, row0=row0)
        if warning:
            log.warning(warning)


def open_field(graph: ChunkedGraph, files: ChunkFiles, field: str, expected_rows: int,
               aligned: tuple[int, ...], nan_policy: str) -> DataField:
    """A :class:`DataField` of ``files``, after checking from the chunk headers (a few bytes
    each) that every chunk has the first one's dtype and row shape and that the rows add up
    to ``expected_rows``. ``aligned``: rows per chunk when chunk *i* is known to cover the same
    rows as chunk *i* of the owner's chunking (graphprep's own files), so a short chunk is
    named; else ``()``. Raises :class:`FormatError` naming the file and field."""
    paths = [graph.path(rel) for rel in files.files]
    infos = [array_info(p, files) for p in paths]
    # A chunk of 0 rows (DGL writes them for types smaller than the chunk count) holds no
    # values: it neither sets nor must match the field's dtype and row shape.
    ref = next((i for i, info in enumerate(infos) if info.rows), 0)
    spec = FieldSpec(str(infos[ref].dtype), tuple(int(x) for x in infos[ref].row_shape),
                     paths[ref])
    for path, info in zip(paths, infos):
        if not info.rows:
            continue
        found = FieldSpec(str(info.dtype), tuple(int(x) for x in info.row_shape), path)
        if (found.dtype, found.row_shape) != (spec.dtype, spec.row_shape):
            raise FormatError(f"dtype/shape {found.describe()} differs from the first chunk "
                              f"{spec.first_file} ({spec.describe()})", file=path, field=field,
                              row=0)
    rows = tuple(info.rows for info in infos)
    if sum(rows) != expected_rows:
        if len(aligned) == len(rows):
            i = next(i for i, (r, a) in enumerate(zip(rows, aligned)) if r != a)
            raise FormatError(f"has {rows[i]} rows, its chunk of the type has {aligned[i]} "
                              f"(all chunks: {sum(rows)} rows for {expected_rows})",
                              file=paths[i], field=field)
        raise FormatError(f"has {sum(rows)} rows in its chunks, the type has {expected_rows}",
                          file=graph.path(METADATA), field=field)
    return DataField(field, ChunkedArray(graph.root, graph.root, files, rows), spec, nan_policy)


def data_fields(graph: ChunkedGraph, nan_policy: str = "error"):
    """``(node fields {ntype: {name: DataField}}, edge fields {etype: {name: DataField}})``."""
    nodes = {t: {name: open_field(graph, files, f"node_data.{t}.{name}", graph.num_nodes[t],
                                  graph.node_chunks[t], nan_policy)
                 for name, files in fields.items()}
             for t, fields in graph.node_data.items()}
    edges = {et: {name: open_field(graph, files, f"edge_data.{et}.{name}", graph.num_edges[et],
                                   graph.edge_chunks[et], nan_policy)
                  for name, files in fields.items()}
             for et, fields in graph.edge_data.items()}
    return nodes, edges
