"""Deep validation of a chunked graph: every chunk's rows, dtypes, shapes, ID ranges, NaN/inf.

The work is one small task per chunk (:func:`check_chunk`, holding one chunk) so a Dask cluster
can run them in parallel; :func:`validate_chunked_graph` takes any ``map``-like runner and
reports the first problem in file order, naming file, field and row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from graphprep.formats.arrays import (array_info, edge_column_names, read_array_chunk,
                                      read_edge_chunk)
from graphprep.formats.errors import FormatError
from graphprep.formats.finite import NAN_POLICIES, check_finite
from graphprep.formats.schema import METADATA, ChunkedGraph, ChunkFiles
from graphprep.formats.storage import parquet_file

log = logging.getLogger(__name__)

MAX_NODE_ID = 2**63 - 2   # the largest node ID: its type's count (ID + 1) must fit int64
_SLICE_ROWS = 1 << 18  # rows scanned at once for NaN checks: bounds memory on huge chunks


@dataclass(frozen=True)
class ChunkCheck:
    """What to check in one chunk file."""

    kind: str                       # "edges" or "data"
    path: str
    files: ChunkFiles
    field: str                      # e.g. "edges.a:r:b" or "node_data.paper.feat"
    declared_rows: int | None = None
    id_limits: tuple[int, int] | None = None   # (num src nodes, num dst nodes) for edges
    nan_policy: str = "error"


@dataclass
class ChunkReport:
    rows: int = 0
    dtype: str = ""
    row_shape: tuple[int, ...] = ()
    problem: FormatError | None = None
    warnings: list[str] = field(default_factory=list)


def check_chunk(check: ChunkCheck) -> ChunkReport:
    """Check one chunk file; returns a report (a problem is returned, not raised)."""
    try:
        if check.kind == "edges":
            return _check_edges(check)
        return _check_data(check)
    except FormatError as err:
        return ChunkReport(problem=err)


def _check_edges(check: ChunkCheck) -> ChunkReport:
    rows = None
    if check.files.format == "parquet":
        rows = parquet_file(check.path).metadata.num_rows
        _check_rows(check, rows)
        if _parquet_ids_in_range(check):
            return ChunkReport(rows=rows, dtype="int64")
    src, dst = read_edge_chunk(check.path, check.files)
    _check_rows(check, len(src))
    check_ids(src, check.id_limits[0], file=check.path, field="src")
    check_ids(dst, check.id_limits[1], file=check.path, field="dst")
    return ChunkReport(rows=len(src), dtype="int64")


def _parquet_ids_in_range(check: ChunkCheck) -> bool:
    """True when Parquet column statistics prove every ID in range (no data read)."""
    md = pq.ParquetFile(check.path).metadata if "://" not in check.path else None
    if md is None or md.num_row_groups == 0:
        return md is not None
    names = md.schema.to_arrow_schema().names
    for name, limit in zip(edge_column_names(names, check.path), check.id_limits):
        col = names.index(name)
        for g in range(md.num_row_groups):
            stats = md.row_group(g).column(col).statistics
            if stats is None or not stats.has_min_max or stats.null_count:
                return False
            if stats.min < 0 or stats.max >= limit:
                return False
    return True


def _check_rows(check: ChunkCheck, rows: int) -> None:
    if check.declared_rows is not None and rows != check.declared_rows:
        raise FormatError(f"declared {check.declared_rows} rows in metadata, found {rows}",
                          file=check.path, field=check.field)


def _check_data(check: ChunkCheck) -> ChunkReport:
    info = array_info(check.path, check.files)
    report = ChunkReport(rows=info.rows, dtype=str(info.dtype), row_shape=tuple(info.row_shape))
    if info.dtype.kind == "f" and check.nan_policy != "ignore":
        array = read_array_chunk(check.path, check.files)
        for start in range(0, len(array), _SLICE_ROWS):
            warning = check_finite(array[start:start + _SLICE_ROWS], check.nan_policy,
                                   file=check.path, field=check.field, row0=start)
            if warning:
                report.warnings.append(warning)
                break
    return report


# ------------------------------------------------------------------ checks shared by the steps
# Every step that reads chunks (partition, dispatch, verify) runs these on what it already holds
# in memory: min/max and isfinite are single vectorized passes, and the first bad row is only
# searched for once a problem is known.

def check_ids(ids: np.ndarray, limit: int | None, *, file: str, field: str, row0: int = 0,
              ntype: str | None = None) -> None:
    """Raise :class:`FormatError` at the first node ID outside ``[0, limit)``.

    Takes one chunk's IDs (int64) and the node count of their type (None: only the int64 bound
    ``[0, MAX_NODE_ID]`` applies). ``row0`` is the row of ``ids[0]`` in ``file``. Holds nothing
    beyond two reductions, unless a bad row must be located. Why before any use as an index: a
    negative ID silently indexes numpy arrays from the end.
    """
    if len(ids) == 0:
        return
    top = MAX_NODE_ID + 1 if limit is None else limit
    if int(ids.min()) >= 0 and int(ids.max()) < top:
        return
    bad = (ids < 0) | (ids >= top)
    row = int(np.flatnonzero(bad)[0])
    value = int(ids[row])
    of = f" of node type {ntype!r}" if ntype else " of its type"
    if limit is None:
        why = "is negative" if value < 0 else "is too large (IDs must be below 2^63-1)"
        raise FormatError(f"node ID {value} {why}", file=file, field=field, row=row0 + row)
    raise FormatError(f"node ID {value} out of range [0, {limit}){of}", file=file, field=field,
                      row=row0 + row)


def read_checked_edges(path: str, files: ChunkFiles, *, rows: int | None, num_src: int,
                       num_dst: int, etype=None) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of one edge chunk, checked as every step reads it: ``rows`` rows as the
    metadata declares (None: not checked), IDs in ``[0, num_src)`` / ``[0, num_dst)``.
    Raises :class:`FormatError` naming the chunk file, the column and the row within the file.
    Holds the chunk; the checks add a min and a max per column."""
    src, dst = read_edge_chunk(path, files)
    if rows is not None and len(src) != rows:
        raise FormatError(f"declared {rows} rows in metadata, found {len(src)}", file=path,
                          field=f"edges.{etype}" if etype is not None else None)
    check_ids(src, num_src, file=path, field="src", ntype=getattr(etype, "src", None))
    check_ids(dst, num_dst, file=path, field="dst", ntype=getattr(etype, "dst", None))
    return src, dst




@dataclass(frozen=True)
class FieldSpec:
    """dtype and per-row shape every chunk of a data field must have: its first chunk's."""

    dtype: str
    row_shape: tuple[int, ...]
    first_file: str

    @classmethod
    def of(cls, path: str, files: ChunkFiles) -> "FieldSpec":
        """The spec of the chunk at ``path`` (from its header where the format has one)."""
        info = array_info(path, files)
        return cls(str(info.dtype), tuple(int(x) for x in info.row_shape), path)

    def describe(self) -> str:
        return f"{self.dtype}{list(self.row_shape)}"


def chunk_checks(graph: ChunkedGraph, nan_policy: str = "error") -> list[ChunkCheck]:
    """One :class:`ChunkCheck` per chunk file of ``graph``, in metadata order."""
    checks = []
    for et in graph.edge_types:
        files = graph.edges[et]
        limits = (graph.num_nodes[et.src], graph.num_nodes[et.dst])
        for rel, rows in zip(files.files, graph.edge_chunks[et]):
            checks.append(ChunkCheck("edges", graph.path(rel), files, f"edges.{et}", rows, limits))
    for section, fields in _data_sections(graph):
        for name, files in fields.items():
            for rel in files.files:
                checks.append(ChunkCheck("data", graph.path(rel), files, f"{section}.{name}",
                                         nan_policy=nan_policy))
    return checks


def _data_sections(graph: ChunkedGraph):
    for t, fields in graph.node_data.items():
        yield f"node_data.{t}", fields
    for et, fields in graph.edge_data.items():
        yield f"edge_data.{et}", fields


def collate(graph: ChunkedGraph, checks: list[ChunkCheck], reports: list[ChunkReport]) -> list[str]:
    """Raise the first problem in file order; check totals, dtypes and shapes across chunks.

    Returns the warnings (NaN/inf under ``--nan warn``).
    """
    warnings = []
    first: dict[str, tuple[ChunkCheck, ChunkReport]] = {}
    totals: dict[str, int] = {}
    for check, report in zip(checks, reports):
        if report.problem is not None:
            raise report.problem
        warnings += report.warnings
        if check.kind != "data":
            continue
        totals[check.field] = totals.get(check.field, 0) + report.rows
        if report.rows == 0:
            continue   # no rows, nothing to compare (DGL writes 0-row chunks for tiny types)
        if check.field not in first:
            first[check.field] = (check, report)
            continue
        ref_check, ref = first[check.field]
        if (report.dtype, report.row_shape) != (ref.dtype, ref.row_shape):
            raise FormatError(
                f"dtype/shape {report.dtype}{list(report.row_shape)} differs from the first chunk "
                f"{ref_check.path} ({ref.dtype}{list(ref.row_shape)})",
                file=check.path, field=check.field, row=0)
    expected = {f"node_data.{t}": graph.num_nodes[t] for t in graph.node_types}
    expected.update({f"edge_data.{et}": n for et, n in graph.num_edges.items()})
    for fieldname, rows in totals.items():
        owner = fieldname.rsplit(".", 1)[0]
        if rows != expected[owner]:
            what = "nodes" if owner.startswith("node_data") else "edges"
            raise FormatError(f"has {rows} rows in its chunks, the type has {expected[owner]} "
                              f"{what}", file=graph.path(METADATA), field=fieldname)
    return warnings


def validate_chunked_graph(graph: ChunkedGraph, *, nan_policy: str = "error",
                           runner=None) -> list[str]:
    """Check every chunk of ``graph``. ``runner(fn, items)`` maps ``fn`` over ``items`` in order
    (default: the builtin map; the CLI passes a Dask runner). Raises :class:`FormatError`;
    returns warnings. Each task holds one chunk (NaN scans go in slices of 256 Ki rows).
    """
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}")
    checks = chunk_checks(graph, nan_policy)
    run = runner or (lambda fn, items: list(map(fn, items)))
    reports = run(check_chunk, checks)
    warnings = collate(graph, checks, reports)
    for w in warnings:
        log.warning(w)
    return warnings
