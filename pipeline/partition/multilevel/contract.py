"""Contract a clustered level into the next, coarser level (a second shuffle by range).

Coarse IDs are the ranks of the non-empty clusters (so they follow the label order and do not
depend on the range size). Passes, one task per range: count non-empty clusters; write the
cluster -> coarse map (``cmap.npy``) and the coarse vertex weights (a contiguous slice, since
the map is monotone); write ``f2c.npy`` (fine -> coarse, also kept for uncoarsening); map the
range's edges to coarse endpoints (one gather from ``f2c``), drop self-loops, sum duplicate
weights and bucket them by coarse range; merge each coarse range's buckets into its CSR. A
task holds one block of a range's CSR (``Level.read_csr_blocks``: its buckets are one table
per block, appended to the range's files) or of a coarse range's incoming entries
(``buckets.key_blocks``, which cuts a row of more entries by column; what a block has is
read and summed ``BLOCK_ENTRIES`` entries at a time, :func:`summed_spans`), and a few arrays
per node of its range.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from graphprep.formats.npyio import new_npy, write_rows
from graphprep.pipeline.partition.multilevel import layout
from graphprep.pipeline.partition.multilevel.buckets import (Span, append_bucketed, key_blocks,
                                                             read_spans, span_rows, spans_into,
                                                             sub_spans)
from graphprep.pipeline.partition.multilevel.layout import (CSRWriter, Level, narrowest, sum_by_key,
                                                            summed_pieces)


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
    write_rows(task.coarse.path("vwgt.npy"), task.offset, cw)


def write_f2c(task: ContractTask) -> None:
    """``f2c`` rows of range ``r``: the coarse node of each fine node."""
    start, stop = task.fine.bounds(task.r)
    labels = np.asarray(np.load(task.labels, mmap_mode="r")[start:stop])
    write_rows(task.fine.path("f2c.npy"), start,
               np.asarray(np.load(task.fine.path("cmap.npy"), mmap_mode="r")[labels]))


def _bucket_path(fine: Level, r: int, what: str) -> str:
    return fine.path(f"contract/b{r:05d}.{what}.bin")


@dataclass(frozen=True)
class Buckets:
    """One table of a range's bucket files (one per CSR block)."""
    offsets: np.ndarray     # row offsets of each coarse range's slice
    keys_base: int          # byte offset of the table in the keys file
    wgt_base: int           # ... in the weights file
    dtype: str              # the weights' dtype


def bucket_edges(task: ContractTask) -> list[Buckets]:
    """Coarse entries of range ``r``, summed per CSR block, sorted by key ``cu * nc + cv``,
    into two raw files (keys, weights), one table per block. Holds one block."""
    fine, coarse = task.fine, task.coarse
    f2c = np.load(fine.path("f2c.npy"), mmap_mode="r")
    nc = coarse.num_nodes
    bounds = np.minimum(np.arange(coarse.num_ranges + 1, dtype=np.int64) * coarse.range_size,
                        nc) * nc
    out = []
    with open(_bucket_path(fine, task.r, "keys"), "wb") as fk, \
            open(_bucket_path(fine, task.r, "wgt"), "wb") as fw:
        for csr in fine.read_csr_blocks(task.r, split_rows=True):
            keys, wgt = _coarse_entries(csr, f2c, nc)
            del csr
            keys, wgt = sum_by_key(keys, wgt)
            wgt = wgt.astype(narrowest(wgt.max() + 1 if len(wgt) else 0))
            wgt_base, _ = append_bucketed(fw, wgt, keys, bounds)
            keys_base, offsets = append_bucketed(fk, keys, keys, bounds)
            out.append(Buckets(offsets, keys_base, wgt_base, wgt.dtype.name))
            del keys, wgt                     # not held while the next block is read
    return out


def _coarse_entries(csr, f2c: np.ndarray, nc: int) -> tuple[np.ndarray, np.ndarray]:
    """A CSR block's entries as coarse keys ``cu * nc + cv``, self-loops dropped, and their
    weights (not summed). Holds ~30 B per entry of the block besides it."""
    key = np.asarray(f2c[csr.start:csr.stop])[csr.rows()]
    cv = np.asarray(f2c[csr.adj])
    keep = key != cv
    key *= nc
    key += cv
    del cv
    return key[keep], csr.wgt[keep]


@dataclass(frozen=True)
class MergeTask:
    coarse: Level
    s: int
    keys: tuple[Span, ...]
    wgts: tuple[Span, ...]


def merge_range(task: MergeTask) -> int:
    """Coarse range ``s``'s CSR from its slices of every bucket table, block by block of
    rows (``key_blocks``). Returns its stored entries. Holds one block of its entries."""
    nc = task.coarse.num_nodes
    start, stop = task.coarse.bounds(task.s)
    blocks = key_blocks(task.keys, start, stop, nc, layout.BLOCK_ENTRIES)
    csr = CSRWriter(task.coarse, task.s, len(blocks))
    entries = 0
    for _, _, lo, hi in blocks:
        keys, wgt = summed_spans(sub_spans(task.keys, lo, hi), sub_spans(task.wgts, lo, hi),
                                 layout.BLOCK_ENTRIES)
        csr.add(keys // nc - start, keys % nc, wgt)
        entries += len(keys)
        del keys, wgt                         # not held while the next block is read
    csr.close()
    return entries


def summed_spans(keys: tuple[Span, ...], wgts: tuple[Span, ...], limit: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``sum_by_key`` of the entries of ``keys`` and ``wgts`` (parallel spans), read at most
    ``limit`` at a time and summed as they come. Holds ``limit`` entries and the distinct
    keys summed so far (re-summed once they pass ``limit``). A block of ``key_blocks`` may
    still be over its limit where its rounds found no cut: at 10^9 R-MAT edges the coarse
    node of the hubs' cluster received ~50M unsummed entries, and summing them at once was
    a 593 MB task (the worker peak: 945 MB)."""
    return summed_pieces(((read_spans(kg)[:, 0], read_spans(wg)[:, 0])
                          for kg, wg in zip(span_rows(keys, limit), span_rows(wgts, limit))),
                         limit)


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
    new_npy(coarse.path("vwgt.npy"), (coarse.num_nodes, coarse.ncon))
    new_npy(fine.path("cmap.npy"), (fine.num_nodes,))
    new_npy(fine.path("f2c.npy"), (fine.num_nodes,))
    tasks = [ContractTask(fine, r, labels, cw, coarse, int(offsets[r])) for r in ranges]
    runner(write_map, tasks, "multilevel: contract (map)")
    runner(write_f2c, tasks, "multilevel: contract (f2c)")
    os.makedirs(fine.path("contract"), exist_ok=True)
    tables = [(r, b) for r, blocks in enumerate(runner(bucket_edges, tasks,
                                                       "multilevel: contract (edges)"))
              for b in blocks]
    keys = [_bucket_path(fine, r, "keys") for r, _ in tables]
    wgts = [_bucket_path(fine, r, "wgt") for r, _ in tables]
    offsets = [b.offsets for _, b in tables]
    entries = runner(merge_range, [
        MergeTask(coarse, s, spans_into(keys, offsets, s, None, [b.keys_base for _, b in tables]),
                  spans_into(wgts, offsets, s, [b.dtype for _, b in tables],
                             [b.wgt_base for _, b in tables]))
        for s in range(coarse.num_ranges)], "multilevel: contract")
    shutil.rmtree(fine.path("contract"))
    shutil.rmtree(fine.path("coarsen"))
    os.remove(fine.path("cmap.npy"))
    return coarse, int(sum(entries))
