"""``prep verify``: the partitioned graph (FORMATS.md §3) holds exactly its input, chunk by chunk.

Phase 0, on the client: graph.json's ``node_feats``/``edge_feats`` against the input's fields
(every chunk's header: dtype and row shape). Phase 1, one task per part: every file's ``.npy``
header (present, complete, dtype and shape as graph.json and the partition book say), then map
every edge back to original IDs (destination through the part's ``orig_ids``, source through
the owner part's ``orig_ids``), check the CSC arrays and the halo list exactly, and fingerprint
every edge (original ID, endpoints, data rows) by input edge chunk and every node (original
ID, data rows) by input node range (``fingerprint.py``: a count and a hash sum per piece).
Phase 2, one task per input chunk or range: the same fingerprint from the input; the client
compares piece by piece. Nothing is written on this path. A piece whose fingerprints differ
is then checked row by row, as the localizer: phase 1 again, bucketing
``(edge ID, src, dst, part, row)`` / ``(node ID, part, row)`` of those pieces only into a
scratch folder, and phase 2 naming the first ID missing, repeated or different.
A task holds one destination slice of a part (phase 1) or one input chunk and its rows
(phase 2).

A task never raises: a difference or a damaged part file comes back as a message (raised on
the client as :class:`VerifyError`, exit 1, naming part, file, type and ID where known), bad
input as the :class:`FormatError` itself (exit 2).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace

import numpy as np

from graphprep.formats import ChunkedGraph, EdgeType, FormatError, load_chunked_graph
from graphprep.formats.npyio import npy_header_of, read_rows
from graphprep.formats.output import is_disk_full, write_array_chunk
from graphprep.formats.partitioned import (HELD_OUT_MASKS, MESSAGE_END, PartitionedGraph,
                                           load_partitioned)
from graphprep.formats.sparse import CSR, concat_rows, csr_paths, is_csr, load_csr
from graphprep.formats.validate import read_checked_edges
from graphprep.pipeline.core.arrayops import stable_argsort, unique_ints
from graphprep.pipeline.core.cluster import ClusterOptions, TaskRunner, dask_client, workers_info
from graphprep.dispatch.fingerprint import add_prints, edge_hash, new_prints, node_hash, row_hash
from graphprep.dispatch.plan import RANGE_SIZE, data_fields


class VerifyError(Exception):
    """The partitioned graph differs from its input; the message names part, type and ID."""


class DamagedFile(Exception):
    """A part file that cannot be what graph.json says: missing, truncated, wrong header."""

    def __init__(self, p: int, path: str, what: str, where: str = ""):
        self.p, self.path, self.what, self.where = p, path, what, where
        super().__init__(f"part {p}{', ' + where if where else ''}: {path}: {what}")

    def __reduce__(self):
        return (DamagedFile, (self.p, self.path, self.what, self.where))


@dataclass(frozen=True)
class VerifyPlan:
    """What every verify task needs (pickled into each: metadata only); the input's data
    fields were opened once on the client (every chunk's header checked)."""

    graph: ChunkedGraph
    parts: PartitionedGraph
    work: str
    range_size: int = RANGE_SIZE
    node_fields: dict | None = None     # {ntype: {name: DataField}} of the input
    edge_fields: dict | None = None     # {etype: {name: DataField}}
    # None: fingerprint every piece (no scratch). Else the localizer: bucket only the rows of
    # these pieces, {("edge", etype) | ("node", ntype): sorted piece indices}.
    focus: dict | None = None

    def node_ranges(self, t: str) -> np.ndarray:
        return np.arange(0, self.graph.num_nodes[t], self.range_size)

    def edge_starts(self, et: EdgeType) -> np.ndarray:
        return np.cumsum((0,) + self.graph.edge_chunks[et])[:-1]

    def load(self, p: int, *rel: str) -> np.ndarray:
        """A part's ``.npy`` memory-mapped; a missing or damaged file is :class:`DamagedFile`."""
        path = self.parts.part_path(p, *rel)
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise DamagedFile(p, path, "file is missing") from None
        except (ValueError, OSError, EOFError) as err:
            raise DamagedFile(p, path, f"unreadable or truncated .npy ({err})") from None

    def node_field(self, p: int, t: str, name: str):
        """Node data ``name`` of ``t`` in part ``p``, memory-mapped: an array, or
        :class:`CsrRows` for a sparse field (graph.json's spec says "format": "csr")."""
        spec = self.parts.node_feats[t][name]
        if spec.get("format") != CSR:
            return self.load(p, "node_feats", t, f"{name}.npy")
        base = self.parts.part_path(p, "node_feats", t, name)
        try:
            return load_csr(base, int(spec["shape"][0]))
        except FormatError as err:
            raise DamagedFile(p, err.file, err.message) from None

    def node_rows(self, p: int, t: str, name: str, start: int, stop: int):
        """Rows ``[start, stop)`` of node data ``name`` of ``t`` in part ``p`` (read, not
        mapped): an array, or :class:`CsrRows` for a sparse field."""
        if self.parts.node_feats[t][name].get("format") == CSR:
            return self.node_field(p, t, name).rows_between(start, stop).copy()
        return self.rows(p, ("node_feats", t, f"{name}.npy"), start, stop)

    def rows(self, p: int, rel: tuple[str, ...], start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of a part's ``.npy`` (read, not mapped)."""
        path = self.parts.part_path(p, *rel)
        try:
            return read_rows(path, start, stop)
        except FileNotFoundError:
            raise DamagedFile(p, path, "file is missing") from None
        except (ValueError, OSError, EOFError) as err:
            raise DamagedFile(p, path, f"unreadable or truncated .npy ({err})") from None


def _fail(p, kind, name, orig_id, what) -> str:
    where = f"part {p}, {kind} type {name}" if p is not None else f"{kind} type {name}"
    return f"{where}, original ID {orig_id}: {what}"


# ------------------------------------------------------------------ file headers (phase 1)

def npy_header(p: int, path: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a part's ``.npy`` from its header, after checking the file holds all
    the bytes the header announces (a truncated file fails here, not deep inside a task).
    Reads the header only. Raises :class:`DamagedFile`."""
    try:
        shape, dtype, offset, fortran = npy_header_of(path)
    except FileNotFoundError:
        raise DamagedFile(p, path, "file is missing") from None
    except (ValueError, OSError, EOFError) as err:
        raise DamagedFile(p, path, f"not a readable .npy file ({err})") from None
    if fortran or dtype.hasobject:
        raise DamagedFile(p, path, "Fortran-ordered or object .npy: not what dispatch writes")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = os.path.getsize(path)
    if found != expected:
        raise DamagedFile(p, path, f"{found} bytes, its header announces {expected} "
                                   f"({dtype}{list(shape)}): truncated or padded")
    return tuple(shape), dtype


def _expect(p: int, path: str, rows: int, dtypes: tuple[str, ...],
            row_shape: tuple[int, ...] = (), why: str = "") -> None:
    """The header of ``path`` says ``rows`` rows of one of ``dtypes`` with ``row_shape``;
    ``why`` says where graph.json sets that (named in the error)."""
    shape, dtype = npy_header(p, path)
    if str(dtype) not in dtypes or tuple(shape[1:]) != tuple(row_shape) or not shape or \
            shape[0] != rows:
        want = "/".join(dtypes) + f"{[rows, *row_shape]}"
        raise DamagedFile(p, path, f"holds {dtype}{list(shape)}, expected {want}"
                                   + (f" ({why})" if why else ""))


def check_headers(plan: VerifyPlan, p: int) -> None:
    """Every file of part ``p`` exists, is complete and has the dtype and shape that
    graph.json (partition book, node_feats, edge_feats) implies. Raises DamagedFile naming
    the part, the node or edge type and the file. Reads headers only."""
    for kind, owner, check in ([("node", t, _node_headers) for t in plan.graph.node_types] +
                               [("edge", et, _edge_headers) for et in plan.graph.edge_types]):
        try:
            check(plan, p, owner)
        except DamagedFile as err:
            raise DamagedFile(err.p, err.path, err.what, f"{kind} type {owner}") from None


def _node_headers(plan: VerifyPlan, p: int, t: str) -> None:
    pg = plan.parts
    start, end = pg.node_map[t][p]
    rows = f"rows: node_map [{start}, {end})"
    _expect(p, pg.part_path(p, "nodes", t, "orig_ids.npy"), end - start, ("int64",), (), rows)
    shape, dtype = npy_header(p, pg.part_path(p, "nodes", t, "halo_ids.npy"))
    if str(dtype) != "int64" or len(shape) != 1:
        raise DamagedFile(p, pg.part_path(p, "nodes", t, "halo_ids.npy"),
                          f"holds {dtype}{list(shape)}, expected int64[n]")
    for name, spec in pg.node_feats.get(t, {}).items():
        if spec.get("format") == CSR:
            files = csr_paths(pg.part_path(p, "node_feats", t, name))
            _expect(p, files["indptr"], end - start + 1, ("int64",), (), f"{rows} + 1")
            nnz = npy_header(p, files["values"])[0][:1]
            _expect(p, files["values"], nnz[0] if nnz else 0, (spec["dtype"],), (),
                    "sparse values")
            _expect(p, files["indices"], nnz[0] if nnz else 0, ("int32", "int64"), (),
                    "one column index per value")
            plan.node_field(p, t, name)      # indptr's last entry = values stored
            continue
        _expect(p, pg.part_path(p, "node_feats", t, f"{name}.npy"), end - start,
                (spec["dtype"],), tuple(spec["shape"]), f"{rows}; node_feats")


def _edge_headers(plan: VerifyPlan, p: int, et: EdgeType) -> None:
    pg = plan.parts
    d0, d1 = pg.node_map[et.dst][p]
    e0, e1 = pg.edge_map[et][p]
    base = ("edges", et.dirname)
    rows = f"rows: edge_map [{e0}, {e1})"
    _expect(p, pg.part_path(p, *base, "indptr.npy"), d1 - d0 + 1, ("int64",), (),
            f"rows: node_map [{d0}, {d1}) of {et.dst} + 1")
    _expect(p, pg.part_path(p, *base, "indices.npy"), e1 - e0, ("int32", "int64"), (), rows)
    _expect(p, pg.part_path(p, *base, "orig_ids.npy"), e1 - e0, ("int64",), (), rows)
    if et in pg.held_out_last:
        _expect(p, pg.part_path(p, *base, MESSAGE_END), d1 - d0, ("int64",), (),
                f"rows: node_map [{d0}, {d1}) of {et.dst}; held_out_last")
    for name, spec in pg.edge_feats.get(et, {}).items():
        _expect(p, pg.part_path(p, "edge_feats", et.dirname, f"{name}.npy"), e1 - e0,
                (spec["dtype"],), tuple(spec["shape"]), f"{rows}; edge_feats")


def check_feature_specs(plan: VerifyPlan) -> str | None:
    """graph.json's ``node_feats``/``edge_feats``: exactly the input's fields, each with the
    dtype and row shape of the input's chunks. Returns the first difference or None."""
    pg = plan.parts
    sections = [("node_feats", "node", t, pg.node_feats.get(t, {}), plan.node_fields.get(t, {}))
                for t in plan.graph.node_types]
    sections += [("edge_feats", "edge", et, pg.edge_feats.get(et, {}),
                  plan.edge_fields.get(et, {})) for et in plan.graph.edge_types]
    for key, kind, owner, listed, fields in sections:
        where = f"graph.json {key} of {kind} type {owner}"
        if set(listed) != set(fields):
            return (f"{where}: fields {sorted(listed)}, the input has {sorted(fields)}")
        for name, f in fields.items():
            spec = listed[name]
            if not isinstance(spec, dict) or spec.get("dtype") != f.spec.dtype or \
                    tuple(spec.get("shape", ())) != f.spec.row_shape or \
                    (spec.get("format") == CSR) != bool(f.csr_dim):
                return (f"{where}: '{name}' is {spec}, the input's chunks hold "
                        f"{f.spec.describe()} ({f.spec.first_file})")
    return None


# ------------------------------------------------------------------ phase 1

def check_part(task: tuple[VerifyPlan, int]) -> str | PartPrints | None:
    """Phase 1 for part ``p``: headers, structural checks, then the part's fingerprints (or,
    with ``plan.focus``, buckets of the focused pieces, returning None). Returns a mismatch
    as a message otherwise; never raises (a damaged file, even another part's, is named in
    the message)."""
    plan, p = task
    try:
        check_headers(plan, p)
        sink = PartPrints.empty(plan) if plan.focus is None else _Buckets(plan)
        return _check_part(plan, p, sink) or (sink if plan.focus is None else None)
    except DamagedFile as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - whatever a damaged part makes numpy raise
        if is_disk_full(err):    # our scratch buckets, not the part: a failure, said as such
            raise
        return f"part {p}: its files cannot be read as dispatch wrote them " \
               f"({type(err).__name__}: {err})"


def _check_part(plan: VerifyPlan, p: int, sink) -> str | None:
    g, pg = plan.graph, plan.parts
    orig = {t: np.asarray(plan.load(p, "nodes", t, "orig_ids.npy")) for t in g.node_types}
    halo = {t: np.asarray(plan.load(p, "nodes", t, "halo_ids.npy")) for t in g.node_types}
    referenced = {t: np.zeros(len(halo[t]), bool) for t in g.node_types}
    for t in g.node_types:
        start, end = pg.node_map[t][p]
        o = orig[t]
        if len(o) and (o.min() < 0 or o.max() >= g.num_nodes[t]):
            bad = int(np.flatnonzero((o < 0) | (o >= g.num_nodes[t]))[0])
            return _fail(p, "node", t, int(o[bad]), f"orig_ids row {bad} is outside "
                                                    f"[0, {g.num_nodes[t]})")
        h = halo[t]
        if len(h) and ((np.diff(h) <= 0).any() or ((h >= start) & (h < end)).any()
                       or h.min() < 0 or h.max() >= g.num_nodes[t]):
            return _fail(p, "node", t, "-", "halo_ids not sorted, unique, outside the part's "
                                            "range and inside the type")
        sink.nodes(t, p, o)
    for et in g.edge_types:
        problem = _check_edges(plan, et, p, orig, halo, referenced, sink)
        if problem:
            return problem
    for t in g.node_types:
        if not referenced[t].all():
            pos = int(np.flatnonzero(~referenced[t])[0])
            return _fail(p, "node", t, int(_orig_of(plan, t, halo[t][pos:pos + 1])[0]),
                         "in halo_ids but not the source of any edge of the part")
    return None


def _check_edges(plan: VerifyPlan, et: EdgeType, p: int, orig, halo, referenced,
                 sink) -> str | None:
    """CSC checks and edge buckets of one type of part ``p``, one slice of destinations at a
    time (the part's edge arrays stay memory-mapped)."""
    g, pg = plan.graph, plan.parts
    base = ("edges", et.dirname)
    indptr = np.asarray(plan.load(p, *base, "indptr.npy"))
    d0, d1 = pg.node_map[et.dst][p]
    s0, s1 = pg.node_map[et.src][p]
    e0, e1 = pg.edge_map[et][p]
    owned, limit = s1 - s0, (s1 - s0) + len(halo[et.src])
    if indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != e1 - e0:
        return _fail(p, "edge", et, "-", "indptr/indices/orig_ids inconsistent with edge_map")
    for j, a in enumerate(range(0, d1 - d0, plan.range_size)):
        b = min(a + plan.range_size, d1 - d0)
        lo, hi = int(indptr[a]), int(indptr[b])
        indices = plan.rows(p, (*base, "indices.npy"), lo, hi).astype(np.int64)
        eids = plan.rows(p, (*base, "orig_ids.npy"), lo, hi)
        bad = (indices < 0) | (indices >= limit)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return _fail(p, "edge", et, int(eids[i]), f"source index {indices[i]} out of range")
        if len(eids) and (eids.min() < 0 or eids.max() >= g.num_edges[et]):
            i = int(np.flatnonzero((eids < 0) | (eids >= g.num_edges[et]))[0])
            return _fail(p, "edge", et, int(eids[i]), f"orig_ids row {lo + i} is outside "
                                                      f"[0, {g.num_edges[et]})")
        if et in pg.held_out_last:
            problem = _check_held_out_last(plan, et, p, indptr, a, b, eids)
            if problem:
                return problem
        dst_orig = np.repeat(orig[et.dst][a:b], np.diff(indptr[a:b + 1]))
        is_halo = indices >= owned
        src_orig = np.empty(len(indices), np.int64)
        src_orig[~is_halo] = orig[et.src][indices[~is_halo]]
        hpos = indices[is_halo] - owned
        referenced[et.src][hpos] = True
        src_orig[is_halo] = _orig_of(plan, et.src, halo[et.src][hpos])
        sink.edges(et, f"p{p:05d}-{j:05d}", eids, src_orig, dst_orig, p, lo)
    return None


def _check_held_out_last(plan: VerifyPlan, et: EdgeType, p: int, indptr: np.ndarray,
                         a: int, b: int, eids: np.ndarray) -> str | None:
    """Destinations ``a:b`` of part ``p``: each one's in-edges up to its ``message_end``
    are not held out (neither ``val_mask`` nor ``test_mask``), those from there on are: what
    training relies on to serve the head alone."""
    lo, hi = int(indptr[a]), int(indptr[b])
    ends = np.asarray(plan.load(p, "edges", et.dirname, MESSAGE_END)[a:b])
    starts, stops = indptr[a:b], indptr[a + 1:b + 1]
    if ((ends < starts) | (ends > stops)).any():
        v = int(np.flatnonzero((ends < starts) | (ends > stops))[0])
        return _fail(p, "edge", et, "-", f"{MESSAGE_END} row {a + v} is {ends[v]}, outside "
                                         f"its destination's edges [{starts[v]}, {stops[v]})")
    held = np.zeros(hi - lo, bool)
    for name in HELD_OUT_MASKS:
        held |= plan.rows(p, ("edge_feats", et.dirname, f"{name}.npy"), lo, hi).astype(bool)
    tail = np.arange(lo, hi) >= np.repeat(ends, stops - starts)
    if (held != tail).any():
        i = int(np.flatnonzero(held != tail)[0])
        what = "held out but before" if held[i] else "not held out but at or after"
        return _fail(p, "edge", et, int(eids[i]), f"edge at CSC row {lo + i} is {what} its "
                                                  f"destination's {MESSAGE_END}")
    return None


def _orig_of(plan: VerifyPlan, t: str, new_ids: np.ndarray) -> np.ndarray:
    """Original IDs of new IDs owned by any part (reads the owners' orig_ids, memory-mapped)."""
    out = np.empty(len(new_ids), np.int64)
    owners = plan.parts.owner(t, new_ids)
    for q in unique_ints(owners):
        sel = owners == q
        ids = plan.load(int(q), "nodes", t, "orig_ids.npy")
        local = new_ids[sel] - plan.parts.node_map[t][q][0]
        if len(local) and local.max() >= len(ids):  # the owner's file is shorter than its range
            raise DamagedFile(int(q), plan.parts.part_path(int(q), "nodes", t, "orig_ids.npy"),
                              f"{len(ids)} rows, shorter than its node_map range")
        out[sel] = np.asarray(ids)[local]
    return out


@dataclass
class PartPrints:
    """Fingerprints of one part's rows (or, summed, of all parts'), per input piece:
    ``{etype: [chunks, 2]}`` and ``{ntype: [ranges, 2]}`` uint64 (count, hash sum)."""

    plan: VerifyPlan | None
    edge: dict
    node: dict

    @classmethod
    def empty(cls, plan: VerifyPlan) -> "PartPrints":
        g = plan.graph
        return cls(plan, {et: new_prints(len(plan.edge_starts(et))) for et in g.edge_types},
                   {t: new_prints(len(plan.node_ranges(t))) for t in g.node_types})

    def nodes(self, t: str, p: int, orig: np.ndarray) -> None:
        """Add part ``p``'s owned nodes of type ``t`` (one node range of rows at a time)."""
        plan = self.plan
        names = sorted(plan.parts.node_feats.get(t, {}))
        for a in range(0, len(orig), plan.range_size):
            ids = orig[a:a + plan.range_size]
            fields = [plan.node_rows(p, t, name, a, a + len(ids))
                      for name in names]
            add_prints(self.node[t], ids // plan.range_size, node_hash(ids, fields))

    def edges(self, et: EdgeType, tag, eids, src, dst, p: int, first_row: int) -> None:
        """Add one slice of part ``p``'s edges of type ``et`` (rows from ``first_row``)."""
        plan = self.plan
        fields = [plan.rows(p, ("edge_feats", et.dirname, f"{name}.npy"), first_row,
                            first_row + len(eids))
                  for name in sorted(plan.parts.edge_feats.get(et, {}))]
        piece = np.searchsorted(plan.edge_starts(et), eids, side="right") - 1
        add_prints(self.edge[et], piece, edge_hash(eids, src, dst, fields))

    def __add__(self, other: "PartPrints") -> "PartPrints":
        return PartPrints(None, {k: v + other.edge[k] for k, v in self.edge.items()},
                          {k: v + other.node[k] for k, v in self.node.items()})

    def __getstate__(self):       # the plan stays on the client: it came with the task
        return {"plan": None, "edge": self.edge, "node": self.node}


@dataclass
class _Buckets:
    """The localizer's phase-1 sink: rows of the focused pieces only, bucketed by piece into
    ``plan.work`` for a row-by-row comparison."""

    plan: VerifyPlan

    def nodes(self, t: str, p: int, orig: np.ndarray) -> None:
        plan = self.plan
        k = np.searchsorted(plan.node_ranges(t), orig, side="right") - 1
        rows = np.stack([orig, np.full(len(orig), p), np.arange(len(orig))])
        for r in np.intersect1d(unique_ints(k), plan.focus.get(("node", t), [])):
            write_array_chunk(os.path.join(plan.work, "nodes", t, f"r{r:05d}",
                                           f"p{p:05d}.npy"), rows[:, k == r])

    def edges(self, et: EdgeType, tag, eids, src, dst, p: int, first_row: int) -> None:
        plan = self.plan
        k = np.searchsorted(plan.edge_starts(et), eids, side="right") - 1
        rows = np.stack([eids, src, dst, np.full(len(eids), p),
                         first_row + np.arange(len(eids))])
        for c in np.intersect1d(unique_ints(k), plan.focus.get(("edge", et), [])):
            write_array_chunk(os.path.join(plan.work, "edges", et.dirname, f"c{c:05d}",
                                           f"{tag}.npy"), rows[:, k == c])


# ------------------------------------------------------------------ phase 2

def _gather(folder: str, width: int) -> np.ndarray:
    if not os.path.isdir(folder):
        return np.empty((width, 0), np.int64)
    return np.concatenate([np.load(os.path.join(folder, f)) for f in sorted(os.listdir(folder))],
                          axis=1)


def _exactly_once(ids: np.ndarray, start: int, stop: int) -> str | None:
    if len(ids) == stop - start and (ids == np.arange(start, stop)).all():
        return None
    expected = np.arange(start, stop)
    missing = np.setdiff1d(expected, ids)
    if len(missing):
        return f"{int(missing[0])}: missing from every part"
    dup = ids[1:][ids[1:] == ids[:-1]]
    return f"{int(dup[0])}: appears more than once" if len(dup) else "unexpected IDs"


class _Guarded:
    """Phase 2 task wrapper: bad input comes back as its FormatError (exit 2), a damaged part
    file or anything else as a message (exit 1); nothing is raised inside the task (a picklable
    class, not a closure, so Dask ships it by reference)."""

    def __init__(self, check):
        self.check, self.__name__ = check, check.__name__.lstrip("_")

    def __call__(self, task):
        try:
            return self.check(task)
        except FormatError as err:
            return err
        except DamagedFile as err:
            return str(err)
        except Exception as err:  # noqa: BLE001 - named, with the input piece it was checking
            what = f"edge type {task[1]}, input chunk {task[3]}" if len(task) == 6 else \
                f"node type {task[1]}, nodes [{task[2]}, {task[3]})"
            return f"{what}: cannot be compared with the parts ({type(err).__name__}: {err})"


def _check_edge_chunk(task) -> str | None:
    plan, et, k, path, start, stop = task
    rows = _gather(os.path.join(plan.work, "edges", et.dirname, f"c{k:05d}"), 5)
    rows = rows[:, stable_argsort(rows[0])]
    problem = _exactly_once(rows[0], start, stop)
    if problem:
        oid, what = problem.split(": ", 1)
        return _fail(None, "edge", et, oid, what)
    src, dst = read_checked_edges(path, plan.graph.edges[et], rows=stop - start,
                                  num_src=plan.graph.num_nodes[et.src],
                                  num_dst=plan.graph.num_nodes[et.dst], etype=et)
    bad = (rows[1] != src) | (rows[2] != dst)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return _fail(int(rows[3, i]), "edge", et, start + i,
                     f"endpoints ({rows[1, i]}, {rows[2, i]}) but input has ({src[i]}, {dst[i]})")
    for name, source in plan.edge_fields.get(et, {}).items():
        expect = source.read(start, stop)
        got = _rows(rows[3], rows[4], lambda q: plan.load(q, "edge_feats", et.dirname,
                                                          f"{name}.npy"), expect)
        i = _compare(got, expect)
        if i is not None:
            return _fail(int(rows[3, i]), "edge", et, start + i, f"edge data '{name}' differs")
    return None


def _check_node_range(task) -> str | None:
    plan, t, start, stop = task
    k = int(start // plan.range_size)
    rows = _gather(os.path.join(plan.work, "nodes", t, f"r{k:05d}"), 3)
    rows = rows[:, stable_argsort(rows[0])]
    problem = _exactly_once(rows[0], start, stop)
    if problem:
        oid, what = problem.split(": ", 1)
        return _fail(None, "node", t, oid, what)
    for name, source in plan.node_fields.get(t, {}).items():
        expect = source.read(start, stop)
        got = _rows(rows[1], rows[2], lambda q: plan.node_field(q, t, name), expect)
        i = _compare(got, expect)
        if i is not None:
            return _fail(int(rows[1, i]), "node", t, start + i,
                         f"node data '{name}' differs from the input row")
    return None


def _print_edge_chunk(task) -> np.ndarray:
    """The input side of an edge chunk's fingerprint: ``[count, hash sum]`` uint64."""
    plan, et, k, path, start, stop = task
    src, dst = read_checked_edges(path, plan.graph.edges[et], rows=stop - start,
                                  num_src=plan.graph.num_nodes[et.src],
                                  num_dst=plan.graph.num_nodes[et.dst], etype=et)
    fields = plan.edge_fields.get(et, {})
    hashes = edge_hash(np.arange(start, stop), src, dst,
                       [fields[name].read(start, stop) for name in sorted(fields)])
    return np.array([stop - start, hashes.sum(dtype=np.uint64)], np.uint64)


def _print_node_range(task) -> np.ndarray:
    """The input side of a node range's fingerprint: ``[count, hash sum]`` uint64."""
    plan, t, start, stop = task
    fields = plan.node_fields.get(t, {})
    hashes = node_hash(np.arange(start, stop),
                       [fields[name].read(start, stop) for name in sorted(fields)])
    return np.array([stop - start, hashes.sum(dtype=np.uint64)], np.uint64)


check_edge_chunk = _Guarded(_check_edge_chunk)
check_node_range = _Guarded(_check_node_range)
print_edge_chunk = _Guarded(_print_edge_chunk)
print_node_range = _Guarded(_print_node_range)


def _rows(parts, rows, array_of, like) -> np.ndarray:
    """Row ``rows[i]`` of part ``parts[i]``'s array (``array_of(part)``: mapped, or
    :class:`CsrRows`) for every ``i``, shaped like ``like``."""
    if is_csr(like):     # each part's rows, then put in the asked order
        where = [np.flatnonzero(parts == q) for q in unique_ints(parts)]
        got = concat_rows([array_of(int(parts[w[0]])).take(rows[w]) for w in where]) \
            if where else like[:0]
        return got.take(np.argsort(np.concatenate(where))) if where else got
    out = np.empty_like(like)
    for q in unique_ints(parts):
        sel = parts == q
        out[sel] = np.asarray(array_of(int(q)))[rows[sel]]
    return out


def _compare(got: np.ndarray, expect: np.ndarray) -> int | None:
    """Index of the first differing row (NaN equals NaN), or None. Sparse rows are compared
    by their 64-bit row hashes (the stored entries, in order)."""
    if is_csr(got):
        got, expect = row_hash(got), row_hash(expect)
    eq = (got == expect) | ((got != got) & (expect != expect)) if got.dtype.kind == "f" \
        else got == expect
    eq = eq.reshape(len(eq), -1).all(axis=1)
    return None if eq.all() else int(np.flatnonzero(~eq)[0])


def _raise_first(results: list) -> list:
    """Raise the first problem of a phase: a FormatError as is, a message as VerifyError.
    Returns the results (fingerprints) when there is none."""
    for problem in results:
        if isinstance(problem, FormatError):
            raise problem
        if isinstance(problem, str):
            raise VerifyError(problem)
    return results


def _holders(client, parts: PartitionedGraph) -> list[str | None] | None:
    """Per part, the worker of the machine that holds it (``dispatch --machines``) when the
    cluster has a worker of every such name: each part is then read where it lies. Else None:
    parts are read by any worker (they must reach the output, as on one host)."""
    holders = [info.machine or None for info in parts.parts]
    names = {w.get("name") for w in workers_info(client).values()}
    if not any(holders) or not set(filter(None, holders)) <= names:
        return None
    return holders


def _pieces(plan: VerifyPlan) -> tuple[list, list]:
    """Phase 2's tasks: one per input edge chunk, one per input node range."""
    g = plan.graph
    edges = [(plan, et, k, g.path(f), int(s), int(s) + n) for et in g.edge_types
             for k, (f, s, n) in enumerate(zip(g.edges[et].files, plan.edge_starts(et),
                                               g.edge_chunks[et]))]
    nodes = [(plan, t, int(s), int(min(s + plan.range_size, g.num_nodes[t])))
             for t in g.node_types for s in plan.node_ranges(t)]
    return edges, nodes


def _differing(plan: VerifyPlan, parts: PartPrints, edge_prints: list,
               node_prints: list) -> dict:
    """The pieces whose input fingerprint differs from the parts' sum:
    ``{("edge", etype) | ("node", ntype): [piece indices]}`` (empty when all agree)."""
    edges, nodes = _pieces(plan)
    focus: dict = {}
    for (_, et, k, *_), got in zip(edges, edge_prints):
        if (parts.edge[et][k] != got).any():
            focus.setdefault(("edge", et), []).append(k)
    for (_, t, start, _), got in zip(nodes, node_prints):
        k = start // plan.range_size
        if (parts.node[t][k] != got).any():
            focus.setdefault(("node", t), []).append(k)
    return focus


def _localize(run: TaskRunner, plan: VerifyPlan, focus: dict, holders) -> None:
    """Row-by-row check of the ``focus`` pieces (whose fingerprints differ): raises the
    VerifyError naming the first ID that differs. Scratch: the focused rows, in a temporary
    folder beside nothing else."""
    work = tempfile.mkdtemp(prefix="graphprep-verify-")
    try:
        plan = replace(plan, work=work, focus=focus)
        _raise_first(run(check_part, [(plan, p) for p in range(plan.parts.num_parts)],
                         "verify: locate the difference", workers=holders))
        edges, nodes = _pieces(plan)
        _raise_first(run(check_edge_chunk, [x for x in edges if x[2] in
                                             focus.get(("edge", x[1]), ())],
                         "verify: locate (edges)"))
        _raise_first(run(check_node_range, [x for x in nodes if x[2] // plan.range_size in
                                             focus.get(("node", x[1]), ())],
                         "verify: locate (nodes)"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kind, owner = next(iter(focus))
    raise VerifyError(f"{kind} type {owner}, input piece {focus[kind, owner][0]}: the parts' "
                      "fingerprint differs from the input's, yet every row compares equal")


def run_verify(chunked: str, partitioned: str, cluster: ClusterOptions,
               nan_policy: str = "error", tables: str | None = None) -> dict:
    """Check ``partitioned`` against ``chunked`` (and, with ``tables``, a tables config,
    ``chunked`` against those tables by key first: :mod:`graphprep.dispatch.tables_check`); raises
    :class:`VerifyError` on the first mismatch or damaged part file, :class:`FormatError` on
    bad input (``nan_policy`` applies to the input's float data as it is read); returns counts
    checked. Writes nothing unless a difference must be located."""
    graph = load_chunked_graph(chunked)
    parts = load_partitioned(partitioned)
    if parts.num_nodes != graph.num_nodes or parts.num_edges != graph.num_edges:
        raise VerifyError("node or edge counts in graph.json differ from the input")
    node_fields, edge_fields = data_fields(graph, nan_policy)   # every chunk's header checked
    plan = VerifyPlan(graph, parts, "", node_fields=node_fields, edge_fields=edge_fields)
    _raise_first([check_feature_specs(plan)])
    checked_tables = None
    with dask_client(cluster) as client:
        run = TaskRunner(client, cluster.progress)
        if tables is not None:
            from graphprep.dispatch.tables_check import TablesMismatch, check_tables
            try:
                checked_tables = check_tables(tables, chunked, run)
            except TablesMismatch as err:
                raise VerifyError(f"tables: {err}") from None
        holders = _holders(client, parts)
        # Phase 2 reads what phase 1 vouched for: a damaged part stops the run here.
        printed = _raise_first(run(check_part, [(plan, p) for p in range(parts.num_parts)],
                                   "verify parts", workers=holders))
        total = printed[0]
        for other in printed[1:]:
            total = total + other
        edges, nodes = _pieces(plan)
        focus = _differing(plan, total, _raise_first(run(print_edge_chunk, edges,
                                                         "verify edges")),
                           _raise_first(run(print_node_range, nodes, "verify nodes")))
        if focus:
            _localize(run, plan, focus, holders)
    return {"edges": sum(graph.num_edges.values()), "nodes": sum(graph.num_nodes.values()),
            "tables": checked_tables}
