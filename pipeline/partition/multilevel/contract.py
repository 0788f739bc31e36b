"""Contract a clustered level into the next, coarser level (a second shuffle by range).

Coarse IDs are the ranks of the non-empty clusters (so they follow the label order and do not
depend on the range size). Passes, one task per range: count non-empty clusters; write the
cluster -> coarse map (``cmap.npy``) and the coarse vertex weights (a contiguous slice, since
the map is monotone); write ``f2c.npy`` (fine -> coarse, also kept for uncoarsening); map the
range's edges to coarse endpoints (one gather from ``f2c``), drop self-loops, sum duplicate
weights and bucket them by coarse range; merge each coarse range's buckets into its CSR. A
task holds one range's CSR or one coarse range's incoming entries.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from .buckets import Span, read_spans, spans_into, write_bucketed
from .layout import Level, narrowest, new_array, sum_by_key, write_csr, write_rows


@dataclass(frozen=True)
class ContractTask:
    fine: Level
    r: int
    labels: str
    cw: str
    coarse: Level | None = None
    offset: int = 0


def _nonempty(task: ContractTask) -> np.ndarray:
    start, stop = task.fine.bounds(task.r)
    cw = np.asarray(np.load(task.cw, mmap_mode="r")[start:stop, :task.fine.count_cols])
    return cw.sum(axis=1) > 0


def count_clusters(task: ContractTask) -> int:
    """Non-empty clusters labelled by range ``r``'s nodes (those keep a coarse node)."""
    return int(_nonempty(task).sum())


def write_map(task: ContractTask) -> None:
    """``cmap`` rows of range ``r`` (-1 for empty clusters) and their coarse vertex weights."""
    start, stop = task.fine.bounds(task.r)
    keep = _nonempty(task)
    write_rows(task.fine.path("cmap.npy"), start,
               np.where(keep, task.offset + np.cumsum(keep) - 1, -1))
    cw = np.asarray(np.load(task.cw, mmap_mode="r")[start:stop])[keep]
    vw = task.coarse.vwgt("r+")
    vw[task.offset:task.offset + len(cw)] = cw
    vw.flush()


def write_f2c(task: ContractTask) -> None:
    """``f2c`` rows of range ``r``: the coarse node of each fine node."""
    start, stop = task.fine.bounds(task.r)
    labels = np.asarray(np.load(task.labels, mmap_mode="r")[start:stop])
    write_rows(task.fine.path("f2c.npy"), start,
               np.asarray(np.load(task.fine.path("cmap.npy"), mmap_mode="r")[labels]))


def _bucket_path(fine: Level, r: int, what: str) -> str:
    return fine.path(f"contract/b{r:05d}.{what}.bin")


def bucket_edges(task: ContractTask) -> tuple[np.ndarray, str]:
    """Coarse entries of range ``r``, summed, sorted by key ``cu * nc + cv``, into two raw
    files (keys, weights); returns the coarse-range offsets and the weights' dtype."""
    fine, coarse = task.fine, task.coarse
    start, stop = fine.bounds(task.r)
    f2c = np.load(fine.path("f2c.npy"), mmap_mode="r")
    csr = fine.read_csr(task.r)
    cu = np.asarray(f2c[start:stop])[csr.rows()]
    cv = np.asarray(f2c[csr.adj])
    keep = cu != cv
    nc = coarse.num_nodes
    keys, wgt = sum_by_key(cu[keep] * nc + cv[keep], csr.wgt[keep])
    bounds = np.minimum(np.arange(coarse.num_ranges + 1, dtype=np.int64) * coarse.range_size,
                        nc) * nc
    wgt = wgt.astype(narrowest(wgt.max() + 1 if len(wgt) else 0))
    write_bucketed(_bucket_path(fine, task.r, "wgt"), wgt, keys, bounds)
    return write_bucketed(_bucket_path(fine, task.r, "keys"), keys, keys, bounds), \
        wgt.dtype.name


@dataclass(frozen=True)
class MergeTask:
    coarse: Level
    s: int
    keys: tuple[Span, ...]
    wgts: tuple[Span, ...]


def merge_range(task: MergeTask) -> int:
    """Coarse range ``s``'s CSR from its slices of every bucket file. Returns its stored
    entries."""
    keys, wgt = sum_by_key(read_spans(task.keys)[:, 0], read_spans(task.wgts)[:, 0])
    nc = task.coarse.num_nodes
    start, _ = task.coarse.bounds(task.s)
    write_csr(task.coarse, task.s, keys // nc - start, keys % nc, wgt)
    return len(keys)


def coarse_range_size(fine: Level, coarse_nodes: int, min_range: int) -> int:
    """Nodes per coarse range: the fine size scaled by the node shrink (the range count stays
    that of the fine level), at least ``min_range``. A coarse node has several times the
    entries of a fine one (average degree 20 -> 46 at the first level of a 10^7-edge synth),
    so keeping the fine node count per range made the merge task of the first contraction
    the peak of a worker (~750 MB of 840 MB measured); scaled, a coarse range holds no more
    entries than a fine one."""
    scaled = -(-fine.range_size * coarse_nodes // max(fine.num_nodes, 1))
    return max(1, min(fine.range_size, max(scaled, min_range)))


def contract(fine: Level, labels: str, cw: str, folder: str, runner,
             min_range: int = 1) -> tuple[Level, int]:
    """The coarse level under ``folder`` and its number of stored entries. ``min_range``:
    the fewest nodes per coarse range (tiny ranges cost more in task overhead than work)."""
    ranges = range(fine.num_ranges)
    counts = runner(count_clusters, [ContractTask(fine, r, labels, cw) for r in ranges],
                    "multilevel: contract (count)")
    offsets = np.concatenate([[0], np.cumsum(counts)])
    os.makedirs(folder, exist_ok=True)
    nc = int(offsets[-1])
    coarse = Level(folder, nc, coarse_range_size(fine, nc, min_range), fine.ncon,
                   fine.count_cols)
    new_array(coarse.path("vwgt.npy"), (coarse.num_nodes, coarse.ncon))
    new_array(fine.path("cmap.npy"), (fine.num_nodes,))
    new_array(fine.path("f2c.npy"), (fine.num_nodes,))
    tasks = [ContractTask(fine, r, labels, cw, coarse, int(offsets[r])) for r in ranges]
    runner(write_map, tasks, "multilevel: contract (map)")
    runner(write_f2c, tasks, "multilevel: contract (f2c)")
    os.makedirs(fine.path("contract"), exist_ok=True)
    buckets = runner(bucket_edges, tasks, "multilevel: contract (edges)")
    offsets, dtypes = [b[0] for b in buckets], [b[1] for b in buckets]
    keys = [_bucket_path(fine, r, "keys") for r in ranges]
    wgts = [_bucket_path(fine, r, "wgt") for r in ranges]
    entries = runner(merge_range, [MergeTask(coarse, s, spans_into(keys, offsets, s),
                                             spans_into(wgts, offsets, s, dtypes))
                                   for s in range(coarse.num_ranges)], "multilevel: contract")
    shutil.rmtree(fine.path("contract"))
    shutil.rmtree(fine.path("coarsen"))
    os.remove(fine.path("cmap.npy"))
    return coarse, int(sum(entries))
