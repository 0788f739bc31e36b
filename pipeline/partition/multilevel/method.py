"""``MultilevelPartitioner``: shuffle -> coarsen until the budget -> METIS -> uncoarsen.

Every pass is one Dask task per node range (or per input chunk) holding O(range) data plus
memory-mapped O(nodes) arrays; only the coarsest graph is held whole, by one task, and its size
is the budget (``budget.py``). Intermediate files live in ``out/.multilevel`` (``out`` is the
assignment's temporary folder), removed at the end.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass

import numpy as np

from graphprep.formats import ChunkedGraph
from graphprep.formats.npyio import write_rows

from graphprep.pipeline.core.cluster import fix_mmap_threshold
from graphprep.pipeline.core.recycle import on_every_worker
from graphprep.pipeline.partition.base import (PartitionOptions, create_assignment_files,
                                               require_a_node_per_part)
from graphprep.pipeline.partition.graph_ops import OBJECTIVES, type_offsets
from graphprep.pipeline.partition.weights import counts_combined
from graphprep.pipeline.partition.multilevel.budget import derive_budget, worker_memory_bytes
from graphprep.pipeline.partition.multilevel.coarsen import ISOLATED_SHARE, cluster, count_isolated
from graphprep.pipeline.partition.multilevel.coarsest import CoarsestTask, partition_coarsest
from graphprep.pipeline.partition.multilevel.contract import contract
from graphprep.pipeline.partition.multilevel.layout import Level
from graphprep.pipeline.partition.multilevel.jet import JetState, jet_refine
from graphprep.pipeline.partition.multilevel.refine import Refiner
from graphprep.pipeline.partition.multilevel.sparsify import level_sparsifier, thin_level
from graphprep.pipeline.partition.multilevel.symmetric import build_level0, fold_constraints

log = logging.getLogger(__name__)

# A level keeping > 95% of both its nodes and its entries ends coarsening. Nodes alone count
# too: at 10^8 edges the coarse graph turns dense and random-like (average degree 260 at 34k
# nodes), where merging clusters barely merges edges until the node count nears sqrt(edges).
STALL = 0.95
CAP_FACTOR = 16       # cluster weight cap: total / (P * CAP_FACTOR) per constraint
MAX_LEVELS = 30
MIN_RANGE_DIV = 16    # coarse ranges hold at least range_size / 16 nodes (task overhead)
# Every shuffle (coarsening's proposals and moves, contraction) writes ranges x ranges slices,
# and each task opens one file per range: quadratic in the range count. At 10^9 edges, 763
# ranges of 2^17 nodes cost ~6 min of file opens per coarsening round; above this many ranges
# a range grows with the graph instead (~16M entries per range at 10^9 edges).
MAX_RANGES = 128


@dataclass(frozen=True)
class WriteTask:
    level: Level
    r: int
    parts: str
    out: str
    spans: tuple[tuple[str, int, int], ...]       # (type, offset, count)


def write_assignment(task: WriteTask) -> None:
    """Range ``r`` of level-0 parts -> its slices of ``out/<ntype>.npy`` (int32)."""
    start, stop = task.level.bounds(task.r)
    parts = np.asarray(np.load(task.parts, mmap_mode="r")[start:stop]).astype(np.int32)
    for t, off, count in task.spans:
        a, b = max(start, off), min(stop, off + count)
        if a < b:
            write_rows(os.path.join(task.out, f"{t}.npy"), a - off, parts[a - start:b - start])


def range_totals(task: tuple[Level, int]) -> np.ndarray:
    level, r = task
    start, stop = level.bounds(r)
    return np.asarray(level.vwgt()[start:stop]).sum(axis=0)


def uncapped(caps: np.ndarray, totals: np.ndarray, free: int) -> np.ndarray:
    """``caps`` with the first ``free`` columns raised to their totals (never binding)."""
    caps = caps.copy()
    caps[:free] = totals[:free]
    return caps


class MultilevelPartitioner:
    name = "multilevel"

    def __init__(self, range_size: int = 1 << 17, coarsen_rounds: int = 8,
                 refine_rounds: int = 12, min_moves: float = 0.001,
                 refinement: str = "jet", jet_loss: float = 0.25, jet_patience: int = 2,
                 two_hop: bool = True, sparsify: bool = True):
        # "jet" (default): Jet rounds (jet.py), up to refine_rounds, ending after
        # jet_patience rounds without a 0.1% better balanced cut (2: at 10^7 edges rounds
        # after the second gain < 0.01%; 1 let a power-law graph's cut reach 1.10x METIS). "lp": positive-gain label propagation within the
        # room of each part (refine.py), kept as the reference Jet is measured against: it
        # ends after two rounds in a row (one per direction) moving fewer than min_moves of
        # the nodes. jet_loss: a Jet candidate may lose up to this share of its home
        # connection.
        self.refinement, self.jet_loss, self.jet_patience = refinement, jet_loss, jet_patience
        self.range_size, self.coarsen_rounds, self.two_hop = range_size, coarsen_rounds, two_hop
        # sparsify: a coarse level keeps at most KEEP_EDGES of its fine level's edges
        self.sparsify = sparsify
        self.refine_rounds, self.min_moves = refine_rounds, min_moves
        self.info: dict = {}

    def assign(self, graph: ChunkedGraph, options: PartitionOptions, runner, out: str) -> str:
        k = options.num_parts
        require_a_node_per_part(graph, k)
        work = os.path.join(out, ".multilevel")
        shutil.rmtree(work, ignore_errors=True)
        # Freed heap holes held a 10^9-edge worker's peak up: arrays over 8 MB go back at free.
        with on_every_worker(runner, fix_mmap_threshold):
            try:
                parts0 = self._run(graph, options, runner, work)
                create_assignment_files(graph, out)
                spans = tuple((t, off, graph.num_nodes[t])
                              for t, off in type_offsets(graph).items())
                runner(write_assignment, [WriteTask(self.levels[0], r, parts0, out, spans)
                                          for r in range(self.levels[0].num_ranges)],
                       "multilevel: write")
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return self.name

    def _run(self, graph, options: PartitionOptions, runner, work: str) -> str:
        k, seed = options.num_parts, options.seed
        n = sum(graph.num_nodes.values())
        range_size = max(self.range_size, -(-n // MAX_RANGES))
        level = build_level0(graph, options.balance, os.path.join(work, "L00"), range_size,
                             runner)
        totals = self._totals(level, runner)
        folded = fold_constraints(level, options.balance, totals, runner)
        if folded is not level:
            level, totals = folded, self._totals(folded, runner)
        # Node counts inside a combined weight are no constraint of their own: a part may hold
        # all of them (caps stay finite, so that room / cap is defined).
        free = level.count_cols if counts_combined(options.balance) else 0
        budget = derive_budget(sum(graph.num_edges.values()), worker_memory_bytes(runner),
                               getattr(options, "coarse_edges", None))
        log.info("multilevel: coarse-edge budget: %s", budget.how)
        entries = level.num_entries()
        levels, sizes = [level], [(level.num_nodes, entries // 2, entries // 2)]
        many_isolated = sum(runner(count_isolated, [(level, r) for r in range(level.num_ranges)],
                                   "multilevel: isolated")) >= ISOLATED_SHARE * n
        while entries // 2 > budget.edges and len(levels) < MAX_LEVELS:
            # Isolated nodes are grouped at the first level only, where they are the input's
            # own: later, an isolated coarse node is a contracted component or such a group,
            # and grouping those cost Cora 1.10x METIS's cut at k=4 (1.03x without).
            labels, cw = cluster(level, seed * 1000 + len(levels),
                                 uncapped(totals / (k * CAP_FACTOR), totals, free),
                                 runner, self.coarsen_rounds,
                                 group_isolated=len(levels) == 1 and many_isolated,
                                 group_singletons=self.two_hop)
            level, new_entries = contract(level, labels, cw,
                                          os.path.join(work, f"L{len(levels):02d}"), runner,
                                          min_range=max(1, range_size // MIN_RANGE_DIV))
            levels.append(level)
            fine_nodes = levels[-2].num_nodes
            contracted = new_entries
            if self.sparsify:
                new_entries = thin_level(level, fine_nodes, entries, new_entries,
                                         2 * budget.edges, seed * 1000 + len(levels), runner)
            sizes.append((level.num_nodes, new_entries // 2, contracted // 2))
            log.info("multilevel: level %d: %d nodes, %d edges%s", len(levels) - 1,
                     level.num_nodes, new_entries // 2,
                     f" (sparsified from {contracted // 2})" if contracted != new_entries
                     else "")
            stalled = (new_entries > STALL * entries and
                       level.num_nodes > STALL * fine_nodes)
            entries = new_entries
            if stalled:
                log.info("multilevel: coarsening stalled (< %d%% shrink)",
                         round(100 * (1 - STALL)))
                break
        self.levels = levels
        top = levels[-1]
        coarse_parts = top.path("parts.npy")
        sparse = None
        if entries // 2 > budget.edges:
            # Never more than the budget in one task: METIS gets the heaviest coarse edges
            # only, and the top level is refined on all of them below.
            sparse = level_sparsifier(top, 2 * budget.edges, seed, runner)
            log.warning("multilevel: coarsening stopped at %s nodes / %s edges, above the "
                        "budget of %s edges: METIS partitions its %s heaviest edges, and "
                        "refinement the whole level", f"{top.num_nodes:,}",
                        f"{entries // 2:,}", f"{budget.edges:,}", f"{budget.edges:,}")
        (info,) = runner(partition_coarsest, [CoarsestTask(top, k, seed,
                                                           OBJECTIVES[options.objective],
                                                           options.imbalance, coarse_parts,
                                                           sparse, first_column=free)],
                         "multilevel: METIS")
        caps = uncapped(totals / k * (1 + options.imbalance), totals, free)
        jet_state = JetState()
        if sparse is not None or len(levels) == 1:
            refiner = Refiner(top, k, caps, seed, runner, free)
            loads = refiner.balance(coarse_parts, refiner.loads(coarse_parts))
            if sparse is not None:
                loads = self._refine(refiner, coarse_parts, loads, jet_state)
        for d in range(len(levels) - 2, -1, -1):
            fine = levels[d]
            refiner = Refiner(fine, k, caps, seed, runner, free)
            parts = fine.path("parts.npy")
            loads = refiner.project(coarse_parts, fine.path("f2c.npy"), parts)
            loads = self._refine(refiner, parts, refiner.balance(parts, loads), jet_state)
            coarse_parts = parts
        if (loads > caps[None, :]).any():
            log.warning("multilevel: the output stays over a balance cap (max load/cap %.4f): "
                        "nodes heavier than the room left", float((loads / caps).max()))
        self.info = dict(info, levels=[{"nodes": n, "edges": m,
                                                **({"contracted_edges": c} if c != m else {})}
                                               for n, m, c in sizes],
                         coarse_edge_budget=budget.edges, budget=budget.how,
                         sparsified=sparse is not None)
        return coarse_parts

    @staticmethod
    def _totals(level: Level, runner) -> np.ndarray:
        return sum(runner(range_totals, [(level, r) for r in range(level.num_ranges)],
                          "multilevel: totals")).astype(np.float64)

    def _refine(self, refiner: Refiner, parts: str, loads: np.ndarray,
                jet_state: JetState) -> np.ndarray:
        """Refine one level's ``parts`` in place; returns the part loads."""
        if self.refinement == "jet":
            return jet_refine(refiner, parts, loads, self.refine_rounds, state=jet_state,
                              patience=self.jet_patience, loss=self.jet_loss)
        return refiner.refine(parts, loads, self.refine_rounds, self.min_moves)
