"""Build one part from its pieces: owned nodes, CSC per edge type, halo, features.

A task holds its part only: the owned nodes' IDs and data, and the edges whose destination the
part owns (about E/P), never all edges. The part is written into a temporary folder and renamed
into place when complete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from formats import EdgeType
from formats.output import write_array_chunk
from pipeline.arrayops import unique_ints
from .plan import DispatchPlan, atomic_folder


@dataclass(frozen=True)
class PartTask:
    plan: DispatchPlan
    p: int
    node_map: dict[str, list[list[int]]]
    target: str                         # final folder of the part (local path)


def _concat(paths) -> np.ndarray:
    arrays = [np.load(f) for f in paths]
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


def build_part(task: PartTask) -> dict:
    """Write part ``p``; returns its edge count per type. Skips a part already in place."""
    plan, p = task.plan, task.p
    g = plan.graph
    if os.path.exists(task.target):  # renamed into place only when complete
        return {str(et): int(np.load(os.path.join(task.target, "edges", et.dirname,
                                                  "indptr.npy"))[-1]) for et in g.edge_types}
    with atomic_folder(task.target) as out:
        for t in g.node_types:
            pieces = [plan.node_piece(t, k) for k in range(len(plan.ranges(t)))]
            orig = _concat([os.path.join(d, f"p{p:05d}.orig.npy") for d in pieces])
            write_array_chunk(os.path.join(out, "nodes", t, "orig_ids.npy"), orig)
            for name in g.node_data.get(t, {}):
                rows = np.concatenate([np.load(os.path.join(d, f"p{p:05d}.{name}.npy"))
                                       for d in pieces])
                write_array_chunk(os.path.join(out, "node_feats", t, f"{name}.npy"), rows)
        counts, sources = {}, {t: [] for t in g.node_types}
        edges = {}
        for et in g.edge_types:
            edges[et] = _part_edges(plan, et, p)
            sources[et.src].append(edges[et][0][1])
        halo = {}
        for t in g.node_types:
            start, end = task.node_map[t][p]
            src = np.concatenate(sources[t]) if sources[t] else np.empty(0, np.int64)
            halo[t] = unique_ints(src[(src < start) | (src >= end)], inplace=True)
            write_array_chunk(os.path.join(out, "nodes", t, "halo_ids.npy"), halo[t])
        for et in g.edge_types:
            counts[str(et)] = _write_csc(out, et, edges[et], task.node_map, halo[et.src], p)
    return counts


def _part_edges(plan: DispatchPlan, et: EdgeType, p: int):
    """``(rows [3, m] in CSC order, edge data in CSC order)`` of part ``p`` for ``et``."""
    buckets = [plan.edge_bucket(et, k) for k in range(len(plan.graph.edge_chunks[et]))]
    rows = np.concatenate([np.load(os.path.join(b, f"p{p:05d}.npy")) for b in buckets], axis=1) \
        if buckets else np.empty((3, 0), np.int64)
    order = np.argsort(rows[0], kind="stable")  # by destination; ties keep original edge order
    data = {name: np.concatenate([np.load(os.path.join(b, f"p{p:05d}.{name}.npy"))
                                  for b in buckets])[order]
            for name in plan.graph.edge_data.get(et, {})}
    return rows[:, order], data


def _write_csc(out: str, et: EdgeType, edges, node_map, halo: np.ndarray, p: int) -> int:
    rows, data = edges
    new_dst, new_src, eids = rows
    dst_start, dst_end = node_map[et.dst][p]
    src_start, src_end = node_map[et.src][p]
    owned_src = src_end - src_start
    indptr = np.zeros(dst_end - dst_start + 1, dtype=np.int64)
    np.cumsum(np.bincount(new_dst - dst_start, minlength=dst_end - dst_start), out=indptr[1:])
    local = np.where((new_src >= src_start) & (new_src < src_end), new_src - src_start,
                     owned_src + np.searchsorted(halo, new_src))
    dtype = np.int32 if owned_src + len(halo) < 2**31 else np.int64
    base = os.path.join(out, "edges", et.dirname)
    write_array_chunk(os.path.join(base, "indptr.npy"), indptr)
    write_array_chunk(os.path.join(base, "indices.npy"), local.astype(dtype))
    write_array_chunk(os.path.join(base, "orig_ids.npy"), eids)
    for name, values in data.items():
        write_array_chunk(os.path.join(out, "edge_feats", et.dirname, f"{name}.npy"), values)
    return int(len(eids))
