"""New node IDs, per node range: owned nodes ordered by part, then by original ID.

Pass 1 (``count_range``): nodes per part in each range. The client turns the counts into the
partition book (``node_map``) and, per range, where its nodes start inside each part. Pass 2
(``relabel_range``): the range's slice of the old->new map (one memory-mapped ``.npy`` per
type, 8 B per node, each task writing its own slice) and, per part, the range's owned original
IDs and node data rows. A task holds one range.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats.npyio import write_rows
from graphprep.formats.output import write_array_chunk
from graphprep.pipeline.core.arrayops import stable_argsort
from graphprep.dispatch.plan import DispatchPlan, atomic_folder


@dataclass(frozen=True)
class RangeTask:
    plan: DispatchPlan
    ntype: str
    k: int
    start: int
    stop: int
    bases: tuple[int, ...] = ()     # per part: new ID of the range's first node in that part


def count_range(task: RangeTask) -> np.ndarray:
    parts = np.asarray(task.plan.assignment.parts_of(task.ntype)[task.start:task.stop])
    return np.bincount(parts, minlength=task.plan.num_parts)


def relabel_range(task: RangeTask) -> bool:
    """Write the range's slice of the old->new map and its per-part pieces (original IDs and
    data rows); returns True when an earlier (interrupted) run had done it already (nothing
    written), False when done now. Holds the range's parts and data rows. Raises
    :class:`FormatError` on a NaN/inf under ``plan.nan_policy`` "error" (named by chunk file,
    field and row)."""
    plan, t = task.plan, task.ntype
    final = plan.node_piece(t, task.k)
    if os.path.exists(final):
        return True
    # Read (and checked) before anything is written: bad data fails the task first.
    data = {name: f.read(task.start, task.stop) for name, f in plan.node_fields.get(t, {}).items()}
    parts = np.asarray(plan.assignment.parts_of(t)[task.start:task.stop]).astype(np.int64)
    order = stable_argsort(parts)
    counts = np.bincount(parts, minlength=plan.num_parts)
    group_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(parts), dtype=np.int64)
    rank[order] = np.arange(len(parts)) - group_start[parts[order]]
    new_ids = np.asarray(task.bases, dtype=np.int64)[parts] + rank
    write_rows(plan.map_path(t), task.start, new_ids)
    orig = np.arange(task.start, task.stop, dtype=np.int64)
    with atomic_folder(final) as tmp:
        for p in range(plan.num_parts):
            mine = order[group_start[p]:group_start[p] + counts[p]]   # ascending original IDs
            write_array_chunk(os.path.join(tmp, f"p{p:05d}.orig.npy"), orig[mine])
            for name, values in data.items():
                write_array_chunk(os.path.join(tmp, f"p{p:05d}.{name}.npy"), values[mine])
    return False


def node_book(counts_per_range: list[np.ndarray]) -> tuple[list[list[int]], list[tuple[int, ...]]]:
    """Per-type ``node_map`` ranges and each range's per-part bases from range counts."""
    counts = np.stack(counts_per_range)                 # [ranges, P]
    per_part = counts.sum(axis=0)
    part_start = np.concatenate([[0], np.cumsum(per_part)[:-1]])
    before = np.cumsum(counts, axis=0) - counts          # earlier ranges' nodes in each part
    bases = [tuple(int(x) for x in part_start + before[k]) for k in range(len(counts))]
    book = [[int(s), int(s + n)] for s, n in zip(part_start, per_part)]
    return book, bases
