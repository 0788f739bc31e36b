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

from graphprep.formats import EdgeType
from graphprep.formats.output import write_array_chunk
from graphprep.formats.validate import read_checked_edges
from graphprep.dispatch.plan import DispatchPlan, atomic_folder
from graphprep.pipeline.core.arrayops import stable_argsort


@dataclass(frozen=True)
class BucketTask:
    plan: DispatchPlan
    etype: EdgeType
    k: int
    path: str                                 # "" for the empty chunk of an edgeless type
    start: int
    stop: int
    dst_ranges: tuple[tuple[int, int], ...]   # node_map of the destination type


def chunk_edges(task: BucketTask) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's ``(src, dst)``, checked: as many rows as the metadata declares, every ID in
    ``[0, count)`` of its type (a min and a max per column). Raises :class:`FormatError` naming
    the chunk file, the column and the row within the file."""
    plan, et = task.plan, task.etype
    if not task.path:  # the empty chunk of an edge type without edges
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return read_checked_edges(task.path, plan.graph.edges[et], rows=task.stop - task.start,
                              num_src=plan.graph.num_nodes[et.src],
                              num_dst=plan.graph.num_nodes[et.dst], etype=et)


def bucket_edges(task: BucketTask) -> bool:
    """Write the chunk's buckets; returns True when an earlier (interrupted) run had written
    them already (nothing written), False when written now. Holds the chunk and its edge
    data."""
    plan, et = task.plan, task.etype
    final = plan.edge_bucket(et, task.k)
    if os.path.exists(final):
        return True
    src, dst = chunk_edges(task)
    # Checked before use as indices: a negative ID would silently index from the end.
    new_src = np.asarray(np.load(plan.map_path(et.src), mmap_mode="r")[src])
    new_dst = np.asarray(np.load(plan.map_path(et.dst), mmap_mode="r")[dst])
    starts = np.array([r[0] for r in task.dst_ranges])
    owner = np.searchsorted(starts, new_dst, side="right") - 1
    order = stable_argsort(new_dst)  # by destination: grouped by owner part too
    counts = np.bincount(owner, minlength=plan.num_parts)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    eids = np.arange(task.start, task.stop, dtype=np.int64)
    rows = np.stack([new_dst, new_src, eids])[:, order]
    data = {name: f.read(task.start, task.stop)[order]
            for name, f in plan.edge_fields.get(et, {}).items()}
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
    return False
