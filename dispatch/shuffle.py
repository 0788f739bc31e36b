"""Edges relabelled and bucketed by owner part (the part of their destination), per chunk.

A task reads one input edge chunk (and its edge data rows), maps both endpoints through the
memory-mapped old->new maps, and writes one bucket per part: ``[m, 3]`` int64 rows
(new dst, new src, original edge ID) sorted by destination (ties in input order), the edge
data rows in the same order, and the offsets of the part's destination sub-ranges (blocks of
``range_size`` owned nodes) so that a part is later built one sub-range at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from formats import EdgeType, read_edge_chunk
from formats.output import write_array_chunk
from pipeline.convert.sources import ChunkedArray
from .plan import DispatchPlan, atomic_folder


@dataclass(frozen=True)
class BucketTask:
    plan: DispatchPlan
    etype: EdgeType
    k: int
    path: str
    start: int
    stop: int
    dst_ranges: tuple[tuple[int, int], ...]   # node_map of the destination type


def edge_data_sources(plan: DispatchPlan, et: EdgeType) -> dict[str, ChunkedArray]:
    return {name: ChunkedArray.of(plan.graph, files)
            for name, files in plan.graph.edge_data.get(et, {}).items()}


def bucket_edges(task: BucketTask) -> list[int]:
    """Write the chunk's buckets; returns edges per part."""
    plan, et = task.plan, task.etype
    final = plan.edge_bucket(et, task.k)
    if os.path.exists(final):
        return list(np.load(os.path.join(final, "counts.npy")))
    src, dst = read_edge_chunk(task.path, plan.graph.edges[et])
    new_src = np.asarray(np.load(plan.map_path(et.src), mmap_mode="r")[src])
    new_dst = np.asarray(np.load(plan.map_path(et.dst), mmap_mode="r")[dst])
    starts = np.array([r[0] for r in task.dst_ranges])
    owner = np.searchsorted(starts, new_dst, side="right") - 1
    order = np.argsort(new_dst, kind="stable")  # by destination: grouped by owner part too
    counts = np.bincount(owner, minlength=plan.num_parts)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    eids = np.arange(task.start, task.stop, dtype=np.int64)
    rows = np.stack([new_dst, new_src, eids])[:, order]
    data = {name: np.asarray(s.read(task.start, task.stop))[order]
            for name, s in edge_data_sources(plan, et).items()}
    with atomic_folder(final) as tmp:
        for p in range(plan.num_parts):
            sl = slice(bounds[p], bounds[p + 1])
            write_array_chunk(os.path.join(tmp, f"p{p:05d}.npy"), rows[:, sl].T)
            lo, hi = task.dst_ranges[p]
            subs = np.append(np.arange(lo, hi, plan.range_size), hi)
            write_array_chunk(os.path.join(tmp, f"p{p:05d}.offsets.npy"),
                              np.searchsorted(rows[0, sl], subs))
            for name, values in data.items():
                write_array_chunk(os.path.join(tmp, f"p{p:05d}.{name}.npy"), values[sl])
        np.save(os.path.join(tmp, "counts.npy"), counts)
    return counts.tolist()
