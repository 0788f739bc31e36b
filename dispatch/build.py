"""Build one part from its pieces: owned nodes, CSC per edge type, halo, features.

Streaming: outputs are ``.npy`` files written front to back, one node range / one destination
sub-range at a time; inputs are read by row range (no memory-mapping: mapped pages would count
in the worker's memory). A task holds one range of node rows or one sub-range of edges
(``range_size`` destination nodes' in-edges, gathered from every chunk's bucket straight into
one buffer: about 48 bytes per edge with their order and one sorted column at a time, 57 for a
type with a link split, whose held-out flags join the sort key), plus the part's halo as bits
with running counts (``halo.BitRank``: a quarter byte per node of the source type; one byte
per node while finding it; its IDs written block by block); never the part's, let alone the
graph's, edges at once. The part is written into a temporary folder
and renamed into place when complete, with ``part.json`` (its index and dispatch id); then its
integrity manifest is computed from the files on this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from graphprep.formats import EdgeType
from graphprep.formats.integrity import (PART_JSON, FileRecord, PartStamp, part_manifest,
                               write_part_json)
from graphprep.formats.npyio import NpyWriter, npy_shape, read_rows
from graphprep.formats.partitioned import HELD_OUT_MASKS, MESSAGE_END, has_split_masks
from graphprep.formats.sparse import CSR, csr_paths
from graphprep.pipeline.core.arrayops import stable_argsort
from graphprep.dispatch.halo import BitRank, find_halo
from graphprep.dispatch.plan import DispatchPlan, atomic_folder


@dataclass(frozen=True)
class PartTask:
    plan: DispatchPlan
    p: int
    node_map: dict[str, list[list[int]]]
    target: str                         # final folder of the part (local path)
    dispatch_id: str = ""               # written into part.json (graph.json records it too)


@dataclass
class BuiltPart:
    """What the client needs of a built part: edge count per type, the integrity manifest of
    its files, the largest ``label`` per node type with integer labels (-1: none), and whether
    an earlier (interrupted) run had built it already (``reused``: nothing written now)."""

    counts: dict[str, int]
    manifest: dict[str, FileRecord] = field(default_factory=dict)
    label_max: dict[str, int] = field(default_factory=dict)
    reused: bool = False
    held_out_last: tuple[str, ...] = ()   # types with MESSAGE_END (a reused older part: none)


def build_part(task: PartTask) -> BuiltPart:
    """Write part ``p`` (skipped when already in place: a resumed run) and describe it from its
    files, the same either way. Holds one node range or destination sub-range while building,
    one 8 MiB block while hashing."""
    plan, p, g = task.plan, task.p, task.plan.graph
    reused = os.path.exists(task.target)  # renamed into place only when complete
    if not reused:
        with atomic_folder(task.target) as out:
            for t in g.node_types:
                _write_nodes(plan, t, p, task.node_map[t][p], out)
            halo = {t: find_halo(plan, t, p, task.node_map) for t in g.node_types}
            for t, h in halo.items():
                _write_halo_ids(os.path.join(out, "nodes", t, "halo_ids.npy"), h)
            for et in g.edge_types:
                _write_csc(plan, et, p, task.node_map, halo[et.src], out)
            write_part_json(out, PartStamp(p, g.graph_name, task.dispatch_id))
    if not os.path.exists(os.path.join(task.target, PART_JSON)):  # left by an older graphprep
        write_part_json(task.target, PartStamp(p, g.graph_name, task.dispatch_id))
    counts = {str(et): int(np.load(os.path.join(task.target, "edges", et.dirname,
                                                "indptr.npy"), mmap_mode="r")[-1])
              for et in g.edge_types}
    labels = {t: os.path.join(task.target, "node_feats", t, "label.npy") for t in g.node_types
              if "label" in g.node_data.get(t, {})}
    held_out_last = tuple(str(et) for et in g.edge_types if os.path.exists(
        os.path.join(task.target, "edges", et.dirname, MESSAGE_END)))
    return BuiltPart(counts, part_manifest(task.target),
                     {t: m for t, path in labels.items() if (m := _label_max(path)) is not None},
                     reused, held_out_last)


def _write_halo_ids(path: str, halo: BitRank) -> None:
    """The halo's new IDs, ascending, written block by block (never all at once: a part's
    halo can hold most of the graph's nodes)."""
    writer = NpyWriter(path, (halo.count,), np.int64)
    for ids in halo.id_blocks():
        writer.write(ids)
    writer.close()


def _label_max(path: str, rows: int = 1 << 22) -> int | None:
    """Largest value of an integer label array (-1 when empty), scanned in slices; None for a
    non-integer array (no class count to record)."""
    labels = np.load(path, mmap_mode="r")
    if labels.dtype.kind not in "iu":
        return None
    top = -1
    for start in range(0, len(labels), rows):
        top = max(top, int(labels[start:start + rows].max()))
    return top


def _write_nodes(plan: DispatchPlan, t: str, p: int, book: list[int], out: str) -> None:
    pieces = [plan.node_piece(t, k) for k in range(len(plan.ranges(t)))]
    n = book[1] - book[0]
    fields = ["orig", *plan.graph.node_data.get(t, {})]
    for name in fields:
        rows = [os.path.join(d, f"p{p:05d}.{name}") for d in pieces]
        if name != "orig" and plan.graph.node_data[t][name].format == CSR:
            _join_csr(rows, n, os.path.join(out, "node_feats", t, name))
            continue
        shape, dtype = npy_shape(rows[0] + ".npy")
        path = os.path.join(out, "nodes", t, "orig_ids.npy") if name == "orig" else \
            os.path.join(out, "node_feats", t, f"{name}.npy")
        writer = NpyWriter(path, (n, *shape[1:]), dtype)
        for piece in rows:
            writer.write(np.load(piece + ".npy"))
        writer.close()


def _join_csr(pieces: list[str], n: int, base: str) -> None:
    """The sparse rows saved at ``pieces`` (CSR ``.npy`` triples, in row order) as one CSR
    triple at ``base``, written front to back; holds one piece."""
    paths = [csr_paths(piece) for piece in pieces]
    nnz = sum(npy_shape(f["values"])[0][0] for f in paths)
    out = csr_paths(base)
    index_dtype = npy_shape(paths[0]["indices"])[1]
    writers = {"indptr": NpyWriter(out["indptr"], (n + 1,), np.int64),
               "indices": NpyWriter(out["indices"], (nnz,), index_dtype),
               "values": NpyWriter(out["values"], (nnz,), npy_shape(paths[0]["values"])[1])}
    writers["indptr"].write(np.zeros(1, np.int64))
    before = 0
    for files in paths:
        indptr = np.load(files["indptr"])
        writers["indptr"].write(indptr[1:] + before)
        writers["indices"].write(np.load(files["indices"]))
        writers["values"].write(np.load(files["values"]))
        before += int(indptr[-1])
    for writer in writers.values():
        writer.close()


def _sub_range_slices(plan: DispatchPlan, et: EdgeType, p: int):
    """``(bucket files, [slice per file])`` of each destination sub-range of part ``p``'s
    edges of ``et``: where its rows lie in every chunk's bucket (each sorted by destination)."""
    buckets = [plan.edge_bucket(et, k) for k in range(len(plan.graph.edge_chunks[et]))]
    offsets = [np.load(os.path.join(b, f"p{p:05d}.offsets.npy")) for b in buckets]
    files = [os.path.join(b, f"p{p:05d}") for b in buckets]
    for j in range(len(offsets[0]) - 1 if offsets else 0):
        yield files, [slice(int(o[j]), int(o[j + 1])) for o in offsets]


def _gather_rows(files: list[str], slices: list[slice], name: str = "",
                 row_shape: tuple = (3,), dtype=np.int64) -> np.ndarray:
    """The rows ``slices`` of each file's ``.npy`` (the edge rows, or the edge data field
    ``name``), read straight into one array in file (= edge ID) order."""
    rows = np.empty((sum(sl.stop - sl.start for sl in slices), *row_shape), dtype)
    at = 0
    for base, sl in zip(files, slices):
        n = sl.stop - sl.start
        if n:
            read_rows(f"{base}.{name}.npy" if name else f"{base}.npy", sl.start, sl.stop,
                      out=rows[at:at + n])
        at += n
    return rows


def _local_sources(src: np.ndarray, s0: int, s1: int, halo: BitRank,
                   block: int = 1 << 20) -> np.ndarray:
    """Part-local source IDs, in place of ``src`` (new IDs): owned sources as offsets from
    ``s0``, the halo's after them by rank. Ranks ``block`` halo sources at a time (their
    temporaries are a few arrays of that size)."""
    outside = np.flatnonzero((src < s0) | (src >= s1))
    for lo in range(0, len(outside), block):
        at = outside[lo:lo + block]
        src[at] = (s1 - s0) + halo.rank(src[at]) + s0   # s0 comes off with the rest below
    src -= s0
    return src


def _write_csc(plan: DispatchPlan, et: EdgeType, p: int, node_map, halo: BitRank,
               out: str) -> int:
    """Write part ``p``'s CSC of ``et`` (indptr, local source indices, original edge IDs,
    edge data) one destination sub-range at a time. Within a destination, edges keep their
    edge ID order; for a type with a link split, its held-out (validation, test) edges come
    last, from ``message_end.npy`` on, so that training serves each destination's head
    without copying the CSC. Holds about 57 bytes per edge of the sub-range (its rows, their
    order and sort key, one sorted column at a time), not the part's edges."""
    d0, d1 = node_map[et.dst][p]
    s0, s1 = node_map[et.src][p]
    buckets = [plan.edge_bucket(et, k) for k in range(len(plan.graph.edge_chunks[et]))]
    m = sum(int(np.load(os.path.join(b, f"p{p:05d}.offsets.npy"))[-1]) for b in buckets)
    base = os.path.join(out, "edges", et.dirname)
    dtype = np.int32 if (s1 - s0) + halo.count < 2**31 else np.int64
    indptr = NpyWriter(os.path.join(base, "indptr.npy"), (d1 - d0 + 1,), np.int64)
    indices = NpyWriter(os.path.join(base, "indices.npy"), (m,), dtype)
    orig_ids = NpyWriter(os.path.join(base, "orig_ids.npy"), (m,), np.int64)
    feats = {}
    for name in plan.graph.edge_data.get(et, {}):
        shape, fdtype = npy_shape(os.path.join(buckets[0], f"p{p:05d}.{name}.npy"))
        feats[name] = (NpyWriter(os.path.join(out, "edge_feats", et.dirname, f"{name}.npy"),
                                 (m, *shape[1:]), fdtype), shape[1:], fdtype)
    message_end = NpyWriter(os.path.join(base, MESSAGE_END), (d1 - d0,), np.int64) \
        if has_split_masks(feats) else None
    indptr.write(np.zeros(1, np.int64))
    pos, sub_start = 0, d0
    for files, slices in _sub_range_slices(plan, et, p):
        sub_end = min(sub_start + plan.range_size, d1)
        rows = _gather_rows(files, slices)          # [m, 3]: new dst, new src, edge ID
        dst = rows[:, 0] - sub_start
        if message_end is None:
            order = stable_argsort(dst)  # ties keep chunk (= edge ID) order
        else:
            held = _held_out(files, slices, feats)
            order = stable_argsort(dst * 2 + held)   # held-out edges last
            kept = np.bincount(dst[~held], minlength=sub_end - sub_start)
            del held
        counts = np.bincount(dst, minlength=sub_end - sub_start)
        ends = pos + np.cumsum(counts)
        indptr.write(ends)
        if message_end is not None:
            message_end.write(ends - counts + kept)
        del dst
        orig_ids.write(rows[order, 2])
        src = rows[order, 1]
        del rows                                    # the sub-range's 24 B per edge
        indices.write(_local_sources(src, s0, s1, halo))
        del src
        for name, (writer, row_shape, fdtype) in feats.items():
            writer.write(_gather_rows(files, slices, name, row_shape, fdtype)[order])
        pos += len(order)
        sub_start = sub_end
        del order
    for writer in (indptr, indices, orig_ids, *(w for w, _, _ in feats.values()),
                   *([message_end] if message_end is not None else [])):
        writer.close()
    return m


def _held_out(files: list[str], slices: list[slice], feats: dict) -> np.ndarray:
    """Whether each edge of a sub-range (file order) is in the validation or test split."""
    held = None
    for name in HELD_OUT_MASKS:
        _, row_shape, fdtype = feats[name]
        mask = _gather_rows(files, slices, name, row_shape, fdtype).astype(bool)
        held = mask if held is None else held | mask
    return held
