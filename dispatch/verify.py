"""``prep verify``: the DESIGN §3 invariant, checked chunk by chunk.

Phase 1, one task per part: map every edge back to original IDs (destination through the
part's ``orig_ids``, source through the owner part's ``orig_ids``), check the CSC arrays and
the halo list exactly, and bucket ``(edge ID, src, dst, part, row)`` by input edge chunk and
``(node ID, part, row)`` by input node range. Phase 2, one task per input chunk or range: every
ID exactly once, endpoints equal to the input, every feature/label/mask row equal.
A task holds one part's arrays (phase 1) or one input chunk and its rows (phase 2).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from formats import ChunkedGraph, EdgeType, load_chunked_graph, read_edge_chunk
from formats.npyio import npy_shape, read_rows
from formats.output import write_array_chunk
from formats.partitioned import PartitionedGraph, load_partitioned
from pipeline.arrayops import unique_ints
from pipeline.cluster import ClusterOptions, TaskRunner, dask_client
from .relabel import node_data_sources
from .shuffle import edge_data_sources
from .plan import RANGE_SIZE, DispatchPlan


class VerifyError(Exception):
    """The partitioned graph differs from its input; the message names part, type and ID."""


@dataclass(frozen=True)
class VerifyPlan:
    graph: ChunkedGraph
    parts: PartitionedGraph
    work: str
    range_size: int = RANGE_SIZE

    def node_ranges(self, t: str) -> np.ndarray:
        return np.arange(0, self.graph.num_nodes[t], self.range_size)

    def edge_starts(self, et: EdgeType) -> np.ndarray:
        return np.cumsum((0,) + self.graph.edge_chunks[et])[:-1]

    def load(self, p: int, *rel: str) -> np.ndarray:
        return np.load(self.parts.part_path(p, *rel), mmap_mode="r")


def _fail(p, kind, name, orig_id, what) -> str:
    where = f"part {p}, {kind} type {name}" if p is not None else f"{kind} type {name}"
    return f"{where}, original ID {orig_id}: {what}"


def check_part(task: tuple[VerifyPlan, int]) -> str | None:
    """Phase 1 for part ``p``: structural checks and buckets. Returns a mismatch or None."""
    plan, p = task
    g, pg = plan.graph, plan.parts
    orig = {t: np.asarray(plan.load(p, "nodes", t, "orig_ids.npy")) for t in g.node_types}
    halo = {t: np.asarray(plan.load(p, "nodes", t, "halo_ids.npy")) for t in g.node_types}
    referenced = {t: np.zeros(len(halo[t]), bool) for t in g.node_types}
    for t in g.node_types:
        start, end = pg.node_map[t][p]
        if len(orig[t]) != end - start:
            return _fail(p, "node", t, "-", f"{len(orig[t])} orig_ids for node_map range "
                                            f"[{start}, {end})")
        h = halo[t]
        if len(h) and ((np.diff(h) <= 0).any() or ((h >= start) & (h < end)).any()
                       or h.min() < 0 or h.max() >= g.num_nodes[t]):
            return _fail(p, "node", t, "-", "halo_ids not sorted, unique, outside the part's "
                                            "range and inside the type")
        _bucket_nodes(plan, t, p, orig[t])
    for et in g.edge_types:
        problem = _check_edges(plan, et, p, orig, halo, referenced)
        if problem:
            return problem
    for t in g.node_types:
        if not referenced[t].all():
            pos = int(np.flatnonzero(~referenced[t])[0])
            return _fail(p, "node", t, int(_orig_of(plan, t, halo[t][pos:pos + 1])[0]),
                         "in halo_ids but not the source of any edge of the part")
    return None


def _check_edges(plan: VerifyPlan, et: EdgeType, p: int, orig, halo, referenced) -> str | None:
    """CSC checks and edge buckets of one type of part ``p``, one slice of destinations at a
    time (the part's edge arrays stay memory-mapped)."""
    pg = plan.parts
    base = ("edges", et.dirname)
    indptr = np.asarray(plan.load(p, *base, "indptr.npy"))
    indices_path = pg.part_path(p, *base, "indices.npy")
    eids_path = pg.part_path(p, *base, "orig_ids.npy")
    n_idx, n_eid = npy_shape(indices_path)[0][0], npy_shape(eids_path)[0][0]
    d0, d1 = pg.node_map[et.dst][p]
    s0, s1 = pg.node_map[et.src][p]
    e0, e1 = pg.edge_map[et][p]
    owned, limit = s1 - s0, (s1 - s0) + len(halo[et.src])
    if (len(indptr) != d1 - d0 + 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any()
            or indptr[-1] != n_idx or n_eid != n_idx or n_idx != e1 - e0):
        return _fail(p, "edge", et, "-", "indptr/indices/orig_ids inconsistent with edge_map")
    for j, a in enumerate(range(0, d1 - d0, plan.range_size)):
        b = min(a + plan.range_size, d1 - d0)
        lo, hi = int(indptr[a]), int(indptr[b])
        indices = read_rows(indices_path, lo, hi).astype(np.int64)
        eids = read_rows(eids_path, lo, hi)
        bad = (indices < 0) | (indices >= limit)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return _fail(p, "edge", et, int(eids[i]), f"source index {indices[i]} out of range")
        dst_orig = np.repeat(orig[et.dst][a:b], np.diff(indptr[a:b + 1]))
        is_halo = indices >= owned
        src_orig = np.empty(len(indices), np.int64)
        src_orig[~is_halo] = orig[et.src][indices[~is_halo]]
        hpos = indices[is_halo] - owned
        referenced[et.src][hpos] = True
        src_orig[is_halo] = _orig_of(plan, et.src, halo[et.src][hpos])
        _bucket_edges(plan, et, f"p{p:05d}-{j:05d}", eids, src_orig, dst_orig, p, lo)
    return None


def _orig_of(plan: VerifyPlan, t: str, new_ids: np.ndarray) -> np.ndarray:
    """Original IDs of new IDs owned by any part (reads the owners' orig_ids, memory-mapped)."""
    out = np.empty(len(new_ids), np.int64)
    owners = plan.parts.owner(t, new_ids)
    for q in unique_ints(owners):
        sel = owners == q
        out[sel] = np.asarray(plan.load(int(q), "nodes", t, "orig_ids.npy"))[
            new_ids[sel] - plan.parts.node_map[t][q][0]]
    return out


def _bucket_nodes(plan, t, p, orig):
    k = np.searchsorted(plan.node_ranges(t), orig, side="right") - 1
    rows = np.stack([orig, np.full(len(orig), p), np.arange(len(orig))])
    for r in unique_ints(k):
        write_array_chunk(os.path.join(plan.work, "nodes", t, f"r{r:05d}", f"p{p:05d}.npy"),
                          rows[:, k == r])


def _bucket_edges(plan, et, tag, eids, src, dst, p, first_row):
    k = np.searchsorted(plan.edge_starts(et), eids, side="right") - 1
    rows = np.stack([eids, src, dst, np.full(len(eids), p),
                     first_row + np.arange(len(eids))])
    for c in unique_ints(k):
        write_array_chunk(os.path.join(plan.work, "edges", et.dirname, f"c{c:05d}",
                                       f"{tag}.npy"), rows[:, k == c])


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


def check_edge_chunk(task) -> str | None:
    plan, et, k, path, start, stop = task
    rows = _gather(os.path.join(plan.work, "edges", et.dirname, f"c{k:05d}"), 5)
    rows = rows[:, np.argsort(rows[0], kind="stable")]
    problem = _exactly_once(rows[0], start, stop)
    if problem:
        oid, what = problem.split(": ", 1)
        return _fail(None, "edge", et, oid, what)
    src, dst = read_edge_chunk(path, plan.graph.edges[et])
    bad = (rows[1] != src) | (rows[2] != dst)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return _fail(int(rows[3, i]), "edge", et, start + i,
                     f"endpoints ({rows[1, i]}, {rows[2, i]}) but input has ({src[i]}, {dst[i]})")
    dplan = DispatchPlan(plan.graph, None, "")
    for name, source in edge_data_sources(dplan, et).items():
        expect = np.asarray(source.read(start, stop))
        got = _rows(plan, rows[3], rows[4], ("edge_feats", et.dirname, f"{name}.npy"), expect)
        msg = _compare(got, expect)
        if msg is not None:
            i = msg
            return _fail(int(rows[3, i]), "edge", et, start + i, f"edge data '{name}' differs")
    return None


def check_node_range(task) -> str | None:
    plan, t, start, stop = task
    k = int(start // plan.range_size)
    rows = _gather(os.path.join(plan.work, "nodes", t, f"r{k:05d}"), 3)
    rows = rows[:, np.argsort(rows[0], kind="stable")]
    problem = _exactly_once(rows[0], start, stop)
    if problem:
        oid, what = problem.split(": ", 1)
        return _fail(None, "node", t, oid, what)
    dplan = DispatchPlan(plan.graph, None, "")
    for name, source in node_data_sources(dplan, t).items():
        expect = np.asarray(source.read(start, stop))
        got = _rows(plan, rows[1], rows[2], ("node_feats", t, f"{name}.npy"), expect)
        i = _compare(got, expect)
        if i is not None:
            return _fail(int(rows[1, i]), "node", t, start + i,
                         f"node data '{name}' differs from the input row")
    return None


def _rows(plan, parts, rows, rel, like) -> np.ndarray:
    out = np.empty_like(like)
    for q in unique_ints(parts):
        sel = parts == q
        out[sel] = np.asarray(plan.load(int(q), *rel))[rows[sel]]
    return out


def _compare(got: np.ndarray, expect: np.ndarray) -> int | None:
    """Index of the first differing row (NaN equals NaN), or None."""
    eq = (got == expect) | ((got != got) & (expect != expect)) if got.dtype.kind == "f" \
        else got == expect
    eq = eq.reshape(len(eq), -1).all(axis=1)
    return None if eq.all() else int(np.flatnonzero(~eq)[0])


def run_verify(chunked: str, partitioned: str, cluster: ClusterOptions) -> dict:
    """Check ``partitioned`` against ``chunked``; raises :class:`VerifyError` on the first
    mismatch, returns counts checked."""
    graph = load_chunked_graph(chunked)
    parts = load_partitioned(partitioned)
    if parts.num_nodes != graph.num_nodes or parts.num_edges != graph.num_edges:
        raise VerifyError("node or edge counts in graph.json differ from the input")
    work = tempfile.mkdtemp(prefix="graphprep-verify-")
    try:
        plan = VerifyPlan(graph, parts, work)
        with dask_client(cluster) as client:
            run = TaskRunner(client, cluster.progress)
            problems = run(check_part, [(plan, p) for p in range(parts.num_parts)], "verify parts")
            problems += run(check_edge_chunk, [
                (plan, et, k, graph.path(f), int(s), int(s) + n)
                for et in graph.edge_types
                for k, (f, s, n) in enumerate(zip(graph.edges[et].files, plan.edge_starts(et),
                                                  graph.edge_chunks[et]))], "verify edges")
            problems += run(check_node_range, [
                (plan, t, int(s), int(min(s + plan.range_size, graph.num_nodes[t])))
                for t in graph.node_types for s in plan.node_ranges(t)], "verify nodes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = next((m for m in problems if m), None)
    if first:
        raise VerifyError(first)
    return {"edges": sum(graph.num_edges.values()), "nodes": sum(graph.num_nodes.values())}
