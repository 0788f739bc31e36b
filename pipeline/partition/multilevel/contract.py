"""Contract a clustered level into the next, coarser level (a second shuffle by range).

Coarse IDs are the ranks of the non-empty clusters (so they follow the label order and do not
depend on the range size). Passes, one task per range: count non-empty clusters; write the
cluster -> coarse map (``cmap.npy``) and the coarse vertex weights (a contiguous slice, since
the map is monotone); map the range's edges to coarse endpoints, drop self-loops, sum
duplicate weights and bucket them by coarse range (also writing ``f2c.npy``, fine -> coarse,
for uncoarsening); merge each coarse range's buckets into its CSR. A task holds one range's
CSR or one coarse range's incoming entries.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from formats.output import save_npy

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


def bucket_edges(task: ContractTask) -> None:
    """Coarse entries of range ``r``, summed, sorted, with coarse-range offsets; ``f2c`` rows."""
    fine, coarse = task.fine, task.coarse
    start, stop = fine.bounds(task.r)
    labels = np.load(task.labels, mmap_mode="r")
    cmap = np.load(fine.path("cmap.npy"), mmap_mode="r")
    f2c = np.asarray(cmap[np.asarray(labels[start:stop])])
    write_rows(fine.path("f2c.npy"), start, f2c)
    csr = fine.read_csr(task.r)
    cu = f2c[csr.rows()]
    cv = np.asarray(cmap[np.asarray(labels[csr.adj])])
    keep = cu != cv
    nc = coarse.num_nodes
    keys, wgt = sum_by_key(cu[keep] * nc + cv[keep], csr.wgt[keep])
    bounds = np.minimum(np.arange(coarse.num_ranges + 1, dtype=np.int64) * coarse.range_size,
                        nc) * nc
    target = fine.path(f"contract/b{task.r:05d}")
    save_npy(target + ".keys.npy", keys)
    save_npy(target + ".wgt.npy", wgt.astype(narrowest(wgt.max() + 1 if len(wgt) else 0)))
    save_npy(target + ".off.npy", np.searchsorted(keys, bounds))


@dataclass(frozen=True)
class MergeTask:
    fine: Level
    coarse: Level
    s: int


def merge_range(task: MergeTask) -> int:
    """Coarse range ``s``'s CSR from every bucket file. Returns its stored entries."""
    keys, wgts = [], []
    for r in range(task.fine.num_ranges):
        base = task.fine.path(f"contract/b{r:05d}")
        off = np.load(base + ".off.npy")
        keys.append(np.asarray(np.load(base + ".keys.npy", mmap_mode="r")[off[task.s]:
                                                                          off[task.s + 1]]))
        wgts.append(np.asarray(np.load(base + ".wgt.npy", mmap_mode="r")[off[task.s]:
                                                                         off[task.s + 1]]))
    keys, wgt = sum_by_key(np.concatenate(keys), np.concatenate(wgts).astype(np.int64))
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
    os.makedirs(fine.path("contract"), exist_ok=True)
    runner(bucket_edges, tasks, "multilevel: contract (edges)")
    entries = runner(merge_range, [MergeTask(fine, coarse, s)
                                   for s in range(coarse.num_ranges)], "multilevel: contract")
    shutil.rmtree(fine.path("contract"))
    shutil.rmtree(fine.path("coarsen"))
    os.remove(fine.path("cmap.npy"))
    return coarse, int(sum(entries))
