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

from .arrays import _parquet_file, array_info, read_array_chunk, read_edge_chunk
from .errors import FormatError
from .schema import METADATA, ChunkedGraph, ChunkFiles

log = logging.getLogger(__name__)

NAN_POLICIES = ("error", "warn", "ignore")
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
        rows = _parquet_file(check.path).metadata.num_rows
        _check_rows(check, rows)
        if _parquet_ids_in_range(check):
            return ChunkReport(rows=rows, dtype="int64")
    src, dst = read_edge_chunk(check.path, check.files)
    _check_rows(check, len(src))
    for name, ids, limit in (("src", src, check.id_limits[0]), ("dst", dst, check.id_limits[1])):
        bad = (ids < 0) | (ids >= limit)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise FormatError(f"node ID {int(ids[row])} out of range [0, {limit}) of its type",
                              file=check.path, field=name, row=row)
    return ChunkReport(rows=len(src), dtype="int64")


def _parquet_ids_in_range(check: ChunkCheck) -> bool:
    """True when Parquet column statistics prove every ID in range (no data read)."""
    md = pq.ParquetFile(check.path).metadata if "://" not in check.path else None
    if md is None or md.num_row_groups == 0:
        return md is not None
    names = md.schema.to_arrow_schema().names
    for name, limit in (("src", check.id_limits[0]), ("dst", check.id_limits[1])):
        if name not in names:
            return False
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
            part = np.asarray(array[start:start + _SLICE_ROWS])
            finite = np.isfinite(part).reshape(len(part), -1).all(axis=1)
            if not finite.all():
                row = start + int(np.flatnonzero(~finite)[0])
                err = FormatError("NaN or inf value", file=check.path, field=check.field, row=row)
                if check.nan_policy == "error":
                    raise FormatError(err.message + " (use --nan warn to accept)", file=err.file,
                                      field=err.field, row=err.row)
                report.warnings.append(str(err))
                break
    return report


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
