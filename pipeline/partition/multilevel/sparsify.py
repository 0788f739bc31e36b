"""Threshold sparsification of a coarse level (KaMinPar's): keep the heaviest edges.

Edge weights are put in classes (``BINS_PER_DOUBLING`` per doubling); a threshold class and a
share are chosen from the level's histogram so that about the wanted number of entries stays:
every heavier entry, and of the threshold class those whose edge hashes below the share. The
hash is of the edge's two ends, so both directions of an edge agree and the level stays
symmetric; it is seeded, so a seed gives the same level for any worker count and range size.

Used twice: when contraction leaves a level with more than about half of its fine level's
edges (on a random-like graph, whose clusters share few edges, level 1 kept 54% of the planted
graph's edges at 10^8 and 57% at 10^9), and when coarsening stops above the budget (METIS gets
only the budget's heaviest coarse edges). Heavy coarse edges are the many fine edges between
two clusters; light ones, single fine edges, matter least to the cut, and every level below
is refined on all of its own edges.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from graphprep.pipeline.core.arrayops import mix
from graphprep.pipeline.partition.multilevel.layout import CSRWriter, Level, RangeCSR

BINS_PER_DOUBLING = 8      # weight classes of the threshold
# A coarse level keeps at most this share of its fine level's edges: half, less the hash
# sampling's error (at 10^8 edges it kept 7.5k entries, 0.008%, above its aim of 0.5).
KEEP_EDGES = 0.49
CSR_FILES = ("indptr", "adj", "wgt")


@dataclass(frozen=True)
class Sparsifier:
    """Keep entries of weight class above ``bin``, and of class ``bin`` those whose edge
    hashes below ``share`` (by its two ends, so both directions agree)."""
    bin: int
    share: float
    seed: int

    def keep(self, u: np.ndarray, v: np.ndarray, wgt: np.ndarray) -> np.ndarray:
        b = weight_bins(wgt)
        coin = mix(self.seed, np.minimum(u, v), np.maximum(u, v)) >> np.uint64(11)
        return (b > self.bin) | ((b == self.bin) & (coin < np.uint64(self.share * 2 ** 53)))

    def kept(self, csr: RangeCSR) -> tuple[np.ndarray, np.ndarray]:
        """(local row of each kept entry, the kept entries' mask) of a CSR block."""
        rows = csr.rows()
        keep = self.keep(csr.start + rows, csr.adj.astype(np.int64), csr.wgt)
        return rows[keep], keep


def weight_bins(wgt: np.ndarray) -> np.ndarray:
    return np.floor(np.log2(np.maximum(wgt, 1)) * BINS_PER_DOUBLING).astype(np.int64)


def weight_histogram(task: tuple[Level, int]) -> np.ndarray:
    """Entries of range ``r`` per weight class (holds one block of the range's CSR)."""
    level, r = task
    hist = np.zeros(1, dtype=np.int64)
    for csr in level.read_csr_blocks(r, split_rows=True):
        h = np.bincount(weight_bins(csr.wgt))
        hist = np.pad(hist, (0, max(0, len(h) - len(hist))))
        hist[:len(h)] += h
    return hist


def sparsifier(histograms: list[np.ndarray], max_entries: int, seed: int) -> Sparsifier:
    """The threshold keeping about ``max_entries`` of the heaviest entries."""
    hist = np.zeros(max(len(h) for h in histograms), dtype=np.int64)
    for h in histograms:
        hist[:len(h)] += h
    above = np.cumsum(hist[::-1])[::-1] - hist          # entries in heavier classes
    b = int(np.flatnonzero(above < max_entries)[0])
    return Sparsifier(b, min(1.0, (max_entries - above[b]) / max(hist[b], 1)), seed)


def level_sparsifier(level: Level, max_entries: int, seed: int, runner) -> Sparsifier:
    """The threshold keeping about ``max_entries`` of ``level``'s heaviest entries (one pass
    over its weights)."""
    return sparsifier(runner(weight_histogram, [(level, r) for r in range(level.num_ranges)],
                             "multilevel: sparsify (weights)"), max_entries, seed)


@dataclass(frozen=True)
class FilterTask:
    level: Level
    r: int
    sparse: Sparsifier
    out: str          # folder of the filtered range's files


def filter_range(task: FilterTask) -> int:
    """Range ``r``'s CSR without the entries ``sparse`` drops, written under ``task.out``;
    returns the entries kept. Holds one block of the range's CSR."""
    lv, r = task.level, task.r
    start, _ = lv.bounds(r)
    writer = CSRWriter(replace(lv, folder=task.out), r, blocks=2)
    for csr in lv.read_csr_blocks(r, split_rows=True):
        rows, keep = task.sparse.kept(csr)
        writer.add(rows + (csr.start - start), csr.adj[keep], csr.wgt[keep])
    writer.close()
    return writer.entries


def sparsify_level(level: Level, max_entries: int, seed: int, runner) -> int:
    """Keep about ``max_entries`` of ``level``'s heaviest entries, range files replaced in
    place (each range is written beside the level first); returns the entries kept."""
    sparse = level_sparsifier(level, max_entries, seed, runner)
    out = level.path("sparsified")
    os.makedirs(out, exist_ok=True)
    kept = runner(filter_range, [FilterTask(level, r, sparse, out)
                                 for r in range(level.num_ranges)],
                  "multilevel: sparsify")
    new = replace(level, folder=out)
    for r in range(level.num_ranges):
        for what in CSR_FILES:
            src, dst = new.csr_path(r, what), level.csr_path(r, what)
            if os.path.exists(src):
                os.replace(src, dst)
            elif os.path.exists(dst):            # all kept weights are 1: no weight file
                os.remove(dst)
    os.rmdir(out)
    return int(sum(kept))


def thin_level(level: Level, fine_nodes: int, fine_entries: int, entries: int, floor: int,
               seed: int, runner) -> int:
    """The entries a freshly contracted ``level`` keeps: at most ``KEEP_EDGES`` of its fine
    level's, never below ``floor``, when its nodes at least halved (the clusters of a
    random-like graph share few edges: the nodes shrink, the edges hardly do). A level that
    did not halve its nodes is left as it is, to the stall check."""
    keep = max(int(KEEP_EDGES * fine_entries), floor)
    if entries <= keep or level.num_nodes > fine_nodes / 2:
        return entries
    return sparsify_level(level, keep, seed, runner)
