"""Phase 4 of key mapping, one task per edge part: the IDs phase 3 found for each bucket of
the part's source and destination pieces, put back in row order and written as two int64
``.npy`` arrays (edges with a dropped endpoint left out). Holds the part's IDs: 16 bytes per
edge, and one bucket's batch at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats.output import save_npy
from graphprep.pipeline.keys.pieces import read_batch


@dataclass(frozen=True)
class SideRef:
    piece: str                     # the phase-1 piece of this endpoint column
    ids: tuple[str, ...]           # per bucket of its node type: phase 3's IDs file
    index: int                     # this piece's batch in those files


@dataclass(frozen=True)
class TranslateTask:
    rows: int
    src: SideRef
    dst: SideRef
    target: str                    # prefix: <target>.src.npy, <target>.dst.npy


def side_ids(side: SideRef, rows: int) -> np.ndarray:
    """The IDs of one endpoint column in row order (-1: dropped)."""
    out = np.full(rows, -1, dtype=np.int64)
    for bucket, ids_path in enumerate(side.ids):
        at = read_batch(side.piece, bucket).column("row").to_numpy()
        out[at] = read_batch(ids_path, side.index).column("id").to_numpy()
    return out


def translate_part(task: TranslateTask) -> tuple[int, int]:
    """Write the part's edges as IDs; returns (edges kept, edges dropped)."""
    src, dst = side_ids(task.src, task.rows), side_ids(task.dst, task.rows)
    keep = (src >= 0) & (dst >= 0)
    dropped = int(len(keep) - keep.sum())
    os.makedirs(os.path.dirname(task.target), exist_ok=True)
    if dropped:
        src, dst = src[keep], dst[keep]
        save_npy(task.target + ".keep.npy", keep)
    save_npy(task.target + ".src.npy", src)
    save_npy(task.target + ".dst.npy", dst)
    return len(src), dropped
