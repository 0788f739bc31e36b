"""Size-constrained label propagation: one level's nodes -> clusters (labels on disk).

Labels and cluster weights (``[n, ncon]``, one column per balance constraint) live in
memory-mapped ``.npy`` files, double-buffered per round. A round is three passes, each one task
per node range, every task writing only its own rows:

1. *propose*: each node picks the neighbouring cluster of largest connection weight (ties: a
   seeded hash), if it beats its own cluster's and the cluster (by the previous round's
   weights) still has room for it in every constraint. A seeded coin splits nodes into movers
   and stayers each round, and only clusters labelled by a stayer receive: two singletons can
   never swap places. Proposals are written bucketed by the target's range.
2. *accept*: per target range, proposals sorted by (target, gain desc, hash, node); each
   target takes them while its weight + the running sum stays within the cap (a vectorized
   segmented cumsum). A cluster that turns a proposal away is marked *saturated* for the rest
   of the level. Once a round of the level accepts fewer than half of its proposals, later
   rounds propose elsewhere: deep in the hierarchy of a power-law graph a few dozen clusters
   near the cap hold most of the weight and attract most proposals, and without the mark
   whole rounds were spent queueing at them (at 10^8 edges coarsening stalled at 34k nodes,
   0.8% of the nodes moving per round). Not before: elsewhere is a node's second-best cluster.
3. *apply*: labels and weights of the next round for the range.

Every decision depends on the previous round's files only: the same seed gives the same labels
for any worker count and range size. Hubs heavier than the cap stay singletons.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

import numpy as np

from ...arrayops import mix
from .buckets import Span, read_spans, spans_into, write_bucketed
from .layout import Level, best_per_row, new_array, sum_by_key, write_rows

log = logging.getLogger(__name__)

ISOLATED_BLOCK = 1024      # isolated nodes are grouped within blocks of this many IDs
# ... when at least this share of the level's nodes is isolated: grouping a few (CiteSeer's 48
# of 3,327) only reshuffles the hierarchy (CiteSeer k=2, forced: 1.23x METIS's cut, 1.07x
# without), while R-MAT's 38% stalled coarsening
ISOLATED_SHARE = 1 / 16
SATURATION_TRIGGER = 0.5   # a round accepting fewer than this share of its proposals
FIXED = 5            # proposal columns before the weights: node, target, gain, tie, old label


@dataclass(frozen=True)
class RoundFiles:
    folder: str
    round: int

    def state(self, name: str, nxt: bool) -> str:
        return os.path.join(self.folder, f"{name}_{(self.round + nxt) % 2}.npy")

    def scratch(self, name: str) -> str:
        return os.path.join(self.folder, f"t{self.round:03d}.{name}")

    def saturated(self) -> str:
        """Per cluster, 1 once it turned a proposal away for lack of room (kept for the
        level): later rounds propose elsewhere instead of queueing at a nearly full cluster."""
        return os.path.join(self.folder, "saturated.npy")

    def increase(self) -> str:
        """Per cluster, the weight accepted into it this round (``[n, ncon]``; accept writes
        it, apply adds it)."""
        return os.path.join(self.folder, "increase.npy")


@dataclass(frozen=True)
class RoundTask:
    level: Level
    r: int
    files: RoundFiles
    seed: int
    caps: tuple[float, ...]
    avoid_saturated: bool = False      # propose: skip clusters marked saturated
    inbox: tuple[Span, ...] = ()       # accept: the proposals into range r
    moves: tuple[Span, ...] = ()       # apply: accepted moves of range r's nodes
    drops: tuple[Span, ...] = ()       # apply: weight leaving range r's clusters


def _bounds(lv: Level) -> np.ndarray:
    return np.arange(lv.num_ranges + 1, dtype=np.int64) * lv.range_size


def propose(task: RoundTask) -> np.ndarray:
    """Proposals of range ``r`` -> ``t###.p#####.bin``, sorted by target. Holds the range's
    CSR and a few arrays per entry. Returns the offsets of each target range's proposals."""
    lv, r, f = task.level, task.r, task.files
    start, stop = lv.bounds(r)
    n = lv.num_nodes
    csr = lv.read_csr(r)
    labels = np.load(f.state("labels", False), mmap_mode="r")
    cw = np.load(f.state("cw", False), mmap_mode="r")
    own = np.asarray(labels[start:stop])
    vw = np.asarray(lv.vwgt()[start:stop])
    # Only movers propose: their entries alone are gathered and summed (half the sort).
    movers = (mix(task.seed, f.round, 1, np.arange(start, stop)) & np.uint64(1)) == 1
    rows = csr.rows()
    take = movers[rows]
    if f.round == 0:
        # Every cluster a singleton: the CSR's (row, neighbour) entries are already sorted
        # and distinct by (row, cluster), so neither the label gather nor the sort is needed.
        row, cl, conn = rows[take], csr.adj[take].astype(np.int64), csr.wgt[take]
    else:
        keys, conn = sum_by_key(rows[take] * n + np.asarray(labels[csr.adj[take]]),
                                csr.wgt[take])
        row, cl = keys // n, keys % n
    mine = cl == own[row]
    self_conn = np.zeros(stop - start, dtype=np.int64)
    self_conn[row[mine]] = conn[mine]
    cand = np.flatnonzero(~mine & (conn > self_conn[row]))
    stayers = (mix(task.seed, f.round, 1, cl[cand]) & np.uint64(1)) == 0
    cand = cand[stayers]
    caps = np.asarray(task.caps)
    w = vw[row[cand]]
    fits = ((np.asarray(cw[cl[cand]]) + w <= caps) | (w == 0)).all(axis=1)
    if task.avoid_saturated:
        fits &= np.asarray(np.load(f.saturated(), mmap_mode="r")[cl[cand]]) == 0
    cand = cand[fits]
    row, cl, conn = row[cand], cl[cand], conn[cand]
    tie = mix(task.seed, f.round, 2, start + row, cl)
    pick = best_per_row(row, conn, tie)              # candidates are sorted by (row, cl)
    tie = (tie[pick] >> np.uint64(1)).astype(np.int64)
    row, cl = row[pick], cl[pick]
    table = np.empty((len(pick), FIXED + lv.ncon), dtype=np.int64)
    table[:, 0], table[:, 1] = start + row, cl
    table[:, 2], table[:, 3] = conn[pick] - self_conn[row], tie
    table[:, 4], table[:, FIXED:] = own[row], vw[row]
    table = table[np.argsort(cl, kind="stable")]
    return write_bucketed(f.scratch(f"p{r:05d}.bin"), table, table[:, 1], _bounds(lv))


def accept(task: RoundTask) -> tuple[int, np.ndarray, np.ndarray]:
    """Accept proposals into the clusters of range ``s = task.r`` within the caps; writes the
    accepted moves by node range (``a#####.bin``) and by old-label range (``d#####.bin``),
    and the dense weight increases of the range. Holds the proposals into this range.
    Returns (accepted moves, offsets of the ``a`` file, offsets of the ``d`` file)."""
    lv, s, f = task.level, task.r, task.files
    start, stop = lv.bounds(s)
    cw = np.load(f.state("cw", False), mmap_mode="r")
    props = read_spans(task.inbox, FIXED + lv.ncon)
    props = props[np.lexsort((props[:, 0], props[:, 3], -props[:, 2], props[:, 1]))]
    w = props[:, FIXED:]
    first = np.ones(len(props), dtype=bool)
    first[1:] = props[1:, 1] != props[:-1, 1]
    group = np.cumsum(first) - 1
    running = np.cumsum(w, axis=0)
    running -= (running - w)[first][group]          # segmented cumsum per target
    ok = ((np.asarray(cw[props[:, 1]]) + running <= np.asarray(task.caps)) |
          (running == 0)).all(axis=1)
    moves = props[ok]
    turned_away = props[~ok, 1]
    if len(turned_away):
        saturated = np.array(np.load(f.saturated(), mmap_mode="r")[start:stop])
        saturated[turned_away - start] = 1
        write_rows(f.saturated(), start, saturated)
    bynode = moves[np.argsort(moves[:, 0], kind="stable")][:, :2]
    a_off = write_bucketed(f.scratch(f"a{s:05d}.bin"), bynode, bynode[:, 0], _bounds(lv))
    byold = moves[np.argsort(moves[:, 4], kind="stable")][:, [4] + list(range(FIXED, FIXED +
                                                                              lv.ncon))]
    d_off = write_bucketed(f.scratch(f"d{s:05d}.bin"), byold, byold[:, 0], _bounds(lv))
    inc = np.zeros((stop - start, lv.ncon), dtype=np.int64)
    np.add.at(inc, moves[:, 1] - start, moves[:, FIXED:])
    write_rows(f.increase(), start, inc)
    return len(moves), a_off, d_off


def apply(task: RoundTask) -> None:
    """The next round's labels and cluster weights of range ``r``."""
    lv, r, f = task.level, task.r, task.files
    start, stop = lv.bounds(r)
    labels = np.array(np.load(f.state("labels", False), mmap_mode="r")[start:stop])
    cw = np.array(np.load(f.state("cw", False), mmap_mode="r")[start:stop])
    moves = read_spans(task.moves, 2)
    labels[moves[:, 0] - start] = moves[:, 1]
    cw += np.asarray(np.load(f.increase(), mmap_mode="r")[start:stop])
    dec = read_spans(task.drops, 1 + lv.ncon)
    np.subtract.at(cw, dec[:, 0] - start, dec[:, 1:])
    write_rows(f.state("labels", True), start, labels)
    write_rows(f.state("cw", True), start, cw)


@dataclass(frozen=True)
class InitTask:
    level: Level
    r: int
    files: RoundFiles
    caps: tuple[float, ...]
    group_isolated: bool = True


def degrees(level: Level, a: int, b: int) -> np.ndarray:
    """Degrees of nodes ``[a, b)`` (any ranges) from the indptr files alone."""
    parts = []
    for r in range(a // level.range_size, (b - 1) // level.range_size + 1):
        lo, hi = level.bounds(r)
        indptr = np.load(level.csr_path(r, "indptr"), mmap_mode="r")
        parts.append(np.diff(np.asarray(indptr[max(a, lo) - lo:min(b, hi) - lo + 1])))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def count_isolated(task: tuple[Level, int]) -> int:
    """Nodes of range ``r`` without edges (from its indptr file alone)."""
    level, r = task
    return int((degrees(level, *level.bounds(r)) == 0).sum())


def isolated_leaders(level: Level, a: int, b: int, caps: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The isolated nodes of blocks ``[a, b)`` (``a``, ``b`` block-aligned) and the leader
    each joins: the block's isolated nodes in ID order, cut into groups whose weight reaches
    at most about one cap (a group closes with the node that crosses it)."""
    nodes = a + np.flatnonzero(degrees(level, a, b) == 0)
    if len(nodes) == 0:
        return nodes, nodes
    w = np.asarray(level.vwgt()[nodes]) / np.maximum(caps, 1e-9)
    share = w.max(axis=1)
    block = nodes // ISOLATED_BLOCK
    first = np.ones(len(nodes), dtype=bool)
    first[1:] = block[1:] != block[:-1]
    before = np.cumsum(share) - share                  # exclusive cumsum, then per block
    before -= before[first][np.cumsum(first) - 1]
    group = np.floor(before).astype(np.int64)
    new = first.copy()
    new[1:] |= group[1:] != group[:-1]
    return nodes, nodes[new][np.cumsum(new) - 1]


def init_range(task: InitTask) -> None:
    """Round 0 of range ``r``: every node its own cluster with its own weight, except isolated
    nodes, which label propagation can never merge: they are grouped, block by block of
    ``ISOLATED_BLOCK`` IDs, into clusters of up to about a cap (KaMinPar pairs them
    likewise). On R-MAT 38% of the nodes are isolated, and before this every level carried
    them (coarsening stalled near 480k of 1M nodes). Blocks are read whole, across range
    ends, so the groups do not depend on the range size."""
    lv, r, f = task.level, task.r, task.files
    start, stop = lv.bounds(r)
    a = start // ISOLATED_BLOCK * ISOLATED_BLOCK
    b = min(-(-stop // ISOLATED_BLOCK) * ISOLATED_BLOCK, lv.num_nodes)
    nodes, leaders = isolated_leaders(lv, a, b, np.asarray(task.caps)) if \
        task.group_isolated else (np.empty(0, np.int64), np.empty(0, np.int64))
    labels = np.arange(start, stop)
    cw = np.array(lv.vwgt()[start:stop])
    mine = (nodes >= start) & (nodes < stop)
    labels[nodes[mine] - start] = leaders[mine]
    members = nodes[mine & (leaders != nodes)]
    cw[members - start] = 0
    # Leaders in this range gain their followers' weight, wherever the followers lie.
    followers = (leaders >= start) & (leaders < stop) & (leaders != nodes)
    np.add.at(cw, leaders[followers] - start, np.asarray(lv.vwgt()[nodes[followers]]))
    write_rows(f.state("labels", False), start, labels)
    write_rows(f.state("cw", False), start, cw)


def cluster(level: Level, seed: int, caps: np.ndarray, runner, max_rounds: int = 4,
            min_moves: float = 0.01, group_isolated: bool = True) -> tuple[str, str]:
    """Run label propagation on ``level``; returns the paths of the final labels and cluster
    weights (under ``level.folder/coarsen``). Stops after ``max_rounds`` or when two rounds
    in a row move fewer than ``min_moves`` of the nodes."""
    folder = level.path("coarsen")
    os.makedirs(folder, exist_ok=True)
    for b in (0, 1):
        new_array(os.path.join(folder, f"labels_{b}.npy"), (level.num_nodes,))
        new_array(os.path.join(folder, f"cw_{b}.npy"), (level.num_nodes, level.ncon))
    new_array(RoundFiles(folder, 0).saturated(), (level.num_nodes,), np.int8)
    new_array(RoundFiles(folder, 0).increase(), (level.num_nodes, level.ncon))
    ranges = range(level.num_ranges)
    caps_t = tuple(float(c) for c in caps)
    runner(init_range, [InitTask(level, r, RoundFiles(folder, 0), caps_t, group_isolated)
                        for r in ranges],
           "multilevel: coarsen init")
    t, quiet, avoid = 0, 0, False
    for t in range(max_rounds):
        files = RoundFiles(folder, t)
        tasks = [RoundTask(level, r, files, seed, caps_t, avoid_saturated=avoid) for r in ranges]
        offsets = runner(propose, tasks, "multilevel: coarsen propose")
        proposed = sum(int(o[-1]) for o in offsets)
        inbox = [files.scratch(f"p{r:05d}.bin") for r in ranges]
        accepted = runner(accept, [replace(x, inbox=spans_into(inbox, offsets, x.r))
                                   for x in tasks], "multilevel: coarsen accept")
        moved = sum(a[0] for a in accepted)
        by_node = [files.scratch(f"a{s:05d}.bin") for s in ranges]
        by_old = [files.scratch(f"d{s:05d}.bin") for s in ranges]
        runner(apply, [replace(x, moves=spans_into(by_node, [a[1] for a in accepted], x.r),
                               drops=spans_into(by_old, [a[2] for a in accepted], x.r))
                       for x in tasks], "multilevel: coarsen apply")
        for name in os.listdir(folder):
            if name.startswith(f"t{t:03d}."):
                os.remove(os.path.join(folder, name))
        log.debug("coarsen: %d nodes, round %d: %d of %d proposals accepted%s",
                  level.num_nodes, t, moved, proposed, " (avoiding saturated)" if avoid else "")
        # Most proposals turned away: they queue at full clusters, so later rounds of this
        # level avoid the clusters that turned any away. Only then: avoiding them always sends
        # nodes to their second-best cluster, and at 10^7 edges, k=2, forced to 3x10^5
        # coarse edges, that merged across communities (cut 1.33x METIS instead of 1.00x).
        avoid = avoid or moved < SATURATION_TRIGGER * proposed
        # two quiet rounds in a row: one can be quiet only because its coin made the
        # attractive clusters movers, or because its proposals queued at full clusters
        quiet = quiet + 1 if moved < min_moves * level.num_nodes else 0
        if quiet == 2:
            t += 1
            break
    else:
        t = max_rounds
    final = RoundFiles(folder, t)
    return final.state("labels", False), final.state("cw", False)
