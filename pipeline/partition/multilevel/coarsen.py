"""Size-constrained label propagation: one level's nodes -> clusters (labels on disk).

Labels and cluster weights (``[n, ncon]``, one column per balance constraint) live in
memory-mapped ``.npy`` files, double-buffered per round. A round is three passes, each one task
per node range, every task writing only its own rows:

1. *propose*: each node picks the neighbouring cluster of largest connection weight (ties: a
   seeded hash), if it beats its own cluster's, the cluster (by the previous round's weights)
   still has room for it in every constraint, and the cluster ranks above the node's own in
   the round's seeded random order of the labels: two clusters never trade nodes both ways,
   so two singletons can never swap places. Proposals are written bucketed by the target's
   range, in ``SUB_BUCKETS`` pieces of it.
2. *accept*: per target range, a block of pieces at a time, proposals sorted by (target,
   gain desc, hash, node); each target takes them while its weight + the running sum stays
   within the cap (a vectorized segmented cumsum). A cluster that turns a proposal away is
   marked *saturated* for the rest of the level. Once a round of the level accepts fewer
   than half of its proposals, later rounds propose elsewhere: deep in the hierarchy of a
   power-law graph a few dozen clusters near the cap hold most of the weight and attract
   most proposals, and without the mark whole rounds were spent queueing at them (at 10^8
   edges coarsening stalled at 34k nodes, 0.8% of the nodes moving per round). Not before:
   elsewhere is a node's second-best cluster.
3. *apply*: labels and weights of the next round for the range.

Then *two-hop* grouping (KaMinPar's): the nodes still alone are grouped by their favourite
cluster, up to a cap per group. On a power-law graph these are mostly the leaves of hubs whose
clusters are full; as one coarse node, their edges to the hub become one edge.

Every decision depends on the previous round's files only: the same seed gives the same labels
for any worker count and range size. Hubs heavier than the cap stay singletons.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from itertools import chain

import numpy as np

from graphprep.formats.npyio import new_npy, write_rows
from graphprep.pipeline.core.arrayops import mix, stable_argsort
from graphprep.pipeline.partition.multilevel import layout
from graphprep.pipeline.partition.multilevel.buckets import (Span, TableFile, read_spans,
                                                             span_groups, span_rows, spans_into,
                                                             table_spans, write_bucketed)
from graphprep.pipeline.partition.multilevel.layout import (Level, RangeCSR, best_per_row,
                                                            sum_by_key, summed_pieces, whole_rows)

log = logging.getLogger(__name__)

ISOLATED_BLOCK = 1024      # isolated nodes are grouped within blocks of this many IDs
# ... when at least this share of the level's nodes is isolated: grouping a few (CiteSeer's 48
# of 3,327) only reshuffles the hierarchy (CiteSeer k=2, forced: 1.23x METIS's cut, 1.07x
# without), while R-MAT's 38% stalled coarsening
ISOLATED_SHARE = 1 / 16
SATURATION_TRIGGER = 0.5   # a round accepting fewer than this share of its proposals
FIXED = 5            # proposal columns before the weights: node, target, gain, tie, old label
# Proposals (and two-hop rows) are bucketed by 1/SUB_BUCKETS of a target range, and the task of
# a target range reads them at most INBOX_ROWS at a time (accept reads a bucket that alone is
# more in pieces, keeping the rows that may be accepted; two-hop grouping reads it whole).
# Whole, the inbox of the range of R-MAT's hubs grew with the graph: 20 / 37 / 77 MB of
# accept's peak at 10^7 / 10^8 / 2.7x10^8 edges, and the ranges are 4x larger at 10^9.
SUB_BUCKETS = 16
INBOX_ROWS = 1 << 18
CANDIDATES = 1 << 18       # propose decides at most this many candidates at a time


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
    inbox: tuple[tuple[Span, ...], ...] = ()   # accept: proposals into range r, by bucket
    moves: tuple[Span, ...] = ()       # apply: accepted moves of range r's nodes
    drops: tuple[Span, ...] = ()       # apply: weight leaving range r's clusters


def _bounds(lv: Level) -> np.ndarray:
    return np.arange(lv.num_ranges + 1, dtype=np.int64) * lv.range_size


def _target_bounds(lv: Level) -> np.ndarray:
    """``SUB_BUCKETS`` buckets per node range: bucket ``r * SUB_BUCKETS + j`` is the ``j``-th
    piece of range ``r``."""
    start = np.arange(lv.num_ranges, dtype=np.int64) * lv.range_size
    size = np.minimum(start + lv.range_size, lv.num_nodes) - start
    piece = start[:, None] + size[:, None] * np.arange(SUB_BUCKETS) // SUB_BUCKETS
    return np.append(piece.ravel(), lv.num_nodes)


def _connections(rows: np.ndarray, lab: np.ndarray, wgt: np.ndarray, take: np.ndarray, n: int,
                 distinct: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(local row, cluster, summed edge weight) of the entries ``take``, sorted by (row,
    cluster). ``distinct``: the taken entries are already distinct by (row, cluster) and
    sorted (every cluster a singleton, round 0), so no sort is needed."""
    if distinct:
        return _taken(take, rows, lab, wgt)
    shift = max(int(n - 1).bit_length(), 1)       # a shift, not a product: no division back
    keys = rows << shift
    keys |= lab
    keys, conn = sum_by_key(*_taken(take, keys, wgt), presorted=True)
    lab = keys & ((1 << shift) - 1)
    keys >>= shift
    return keys, lab, conn


def _taken(take, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``a[take]`` of each array; a boolean mask through ``np.compress``, which is 4x faster
    than boolean indexing in numpy 2.4 (1.3M entries: 4.1 ms against 13.7-19.6 ms for two)."""
    if isinstance(take, np.ndarray) and take.dtype == bool:
        return tuple(np.compress(take, a) for a in arrays)
    return tuple(a[take] for a in arrays)


def propose(task: RoundTask) -> np.ndarray:
    """Proposals of range ``r`` -> ``t###.p#####.bin``, sorted by target. Holds one block of
    the range's CSR (``Level.read_csr_blocks``) with a few arrays per entry, and the range's
    proposals (one row per node at most). Returns the offsets of each target bucket's
    proposals (``_target_bounds``)."""
    return _write_by_target(task, _propose_connections, _proposals)


def _write_by_target(task: RoundTask, connect, decide) -> np.ndarray:
    """Rows whose column 1 is a target node, from the blocks of range ``r`` (a row split in
    pieces summed piece by piece: ``whole_rows``): ``connect(task, csr, labels, cw)`` gives
    a block's ``(local row, cluster, connection)`` sorted by (row, cluster), and ``decide(task,
    start, stop, row, cluster, connection, labels, cw)`` its rows. Concatenated, sorted by
    target and written bucketed by ``_target_bounds``."""
    lv, f = task.level, task.files
    labels = np.load(f.state("labels", False), mmap_mode="r")
    cw = np.load(f.state("cw", False), mmap_mode="r")
    tables = []
    for blocks in whole_rows(lv.read_csr_blocks(task.r, split_rows=True)):
        csr = next(blocks)
        start, stop = csr.start, csr.stop
        row, cl, conn = connect(task, csr, labels, cw)
        del csr
        pieces = (connect(task, piece, labels, cw)[1:] for piece in blocks)
        second = next(pieces, None)
        if second is not None:                     # the pieces of one row
            cl, conn = summed_pieces(chain([(cl, conn), second], pieces),
                                     layout.BLOCK_ENTRIES)
            row = np.broadcast_to(np.int64(0), cl.shape)    # one row: no array per entry
        tables.append(decide(task, start, stop, row, cl, conn, labels, cw))
        del row, cl, conn
    table = np.concatenate(tables)
    table = table[stable_argsort(table[:, 1])]
    return write_bucketed(f.scratch(f"p{task.r:05d}.bin"), table, table[:, 1],
                          _target_bounds(lv))


def _propose_connections(task: RoundTask, csr: RangeCSR, labels: np.ndarray,
                         cw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The connections of the rows of ``csr`` that propose may follow: to the row's own
    cluster, and to clusters ranked above it."""
    f = task.files
    own = np.asarray(labels[csr.start:csr.stop])
    rows = csr.rows()
    lab = csr.adj.astype(np.int64) if f.round == 0 else np.asarray(labels[csr.adj])
    # A node may join a cluster ranked above its own (a seeded random order of the labels,
    # new each round): two clusters never trade nodes both ways, so singletons cannot swap
    # places, and half of all (node, cluster) pairs are open each round. (A coin splitting
    # nodes into movers and stayers opened a quarter: level 1 kept 60% of R-MAT's edges and
    # 75% of the planted graph's at 10^7, against 43% and 61% with this order.)
    up = mix(task.seed, f.round, 1, own)[rows] < mix(task.seed, f.round, 1, lab)
    return _connections(rows, lab, csr.wgt, up | (lab == own[rows]), task.level.num_nodes,
                        distinct=f.round == 0)


def _proposals(task: RoundTask, start: int, stop: int, row: np.ndarray, cl: np.ndarray,
               conn: np.ndarray, labels: np.ndarray, cw: np.ndarray) -> np.ndarray:
    """The proposals of rows ``start:stop`` from their connections, in row order. Each row's
    best candidate that fits, decided ``CANDIDATES`` connections at a time and then among the
    winners of each row (the same pick: a tie goes to the first). Holds a few arrays of
    ``CANDIDATES`` besides the connections: a hub's coarse node has millions, and the room
    check gathers a weight row for each (a 4.1M-entry row held 445 MB at level 1 of the
    planted 10^9 graph; with candidates chunked, 152 MB, most of it arrays the size of the
    row's connections: its own cluster's mask, the candidates' indices)."""
    lv = task.level
    own = np.asarray(labels[start:stop])
    vw = np.asarray(lv.vwgt()[start:stop])
    chunks = [slice(a, a + CANDIDATES) for a in range(0, max(len(cl), 1), CANDIDATES)]
    # mapped once here, not per room check: small ranges make thousands of checks
    saturated = np.load(task.files.saturated(), mmap_mode="r") if task.avoid_saturated \
        else None
    self_conn = np.zeros(stop - start, dtype=np.int64)
    for c in chunks:          # first all own connections: a row's may lie in a later chunk
        r = row[c]
        mine = cl[c] == own[r]
        self_conn[r[mine]] = conn[c][mine]
    won = []
    for c in chunks:
        r, w = row[c], conn[c]
        take = (cl[c] != own[r]) & (w > self_conn[r])
        won.append(_best_fitting(task, start, stop, vw, cw, saturated, r[take], cl[c][take],
                                 w[take]))
    row, cl, conn, tie = (np.concatenate(x) for x in zip(*won))
    pick = best_per_row(row, conn, tie)
    tie = (tie[pick] >> np.uint64(1)).astype(np.int64)
    row, cl = row[pick], cl[pick]
    table = np.empty((len(pick), FIXED + lv.ncon), dtype=np.int64)
    table[:, 0], table[:, 1] = start + row, cl
    table[:, 2], table[:, 3] = conn[pick] - self_conn[row], tie
    table[:, 4], table[:, FIXED:] = own[row], vw[row]
    return table


def _best_fitting(task: RoundTask, start: int, stop: int, vw: np.ndarray, cw: np.ndarray,
                  saturated: np.ndarray | None, row: np.ndarray, cl: np.ndarray,
                  conn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of these candidates (sorted by (row, cluster)), the one of largest connection
    (then tie hash) whose cluster has room: ``(row, cluster, connection, tie hash)``
    (``saturated``: the clusters' flags, where the round avoids saturated ones)."""
    tie = mix(task.seed, task.files.round, 2, start + row, cl)
    # Tried first on each row's best candidate alone: the room check gathers a cluster
    # weight row per candidate from the O(nodes) mapped file, most of propose's time when
    # done for every candidate (1.36 of 3.4 s).
    fits = np.zeros(len(row), dtype=bool)
    best = best_per_row(row, conn, tie)
    fits[best] = _room(task, vw, cw, saturated, row[best], cl[best])
    retry = np.flatnonzero(~fits[best])
    if len(retry):                                   # rows whose best is full: all the rest
        full = np.zeros(stop - start, dtype=bool)
        full[row[best[retry]]] = True
        again = full[row]
        again[best] = False
        fits[again] = _room(task, vw, cw, saturated, row[again], cl[again])
    keep = np.flatnonzero(fits)
    pick = keep[best_per_row(row[keep], conn[keep], tie[keep])]
    return row[pick], cl[pick], conn[pick], tie[pick]


def _room(task: RoundTask, vw: np.ndarray, cw: np.ndarray, saturated: np.ndarray | None,
          row: np.ndarray, cl: np.ndarray) -> np.ndarray:
    """Whether cluster ``cl`` (by the round's weights) has room for local row ``row`` in every
    constraint (a weightless node fits anywhere), and is not flagged in ``saturated`` (None:
    the round does not avoid saturated clusters)."""
    w = vw[row]
    fits = ((np.asarray(cw[cl]) + w <= np.asarray(task.caps)) | (w == 0)).all(axis=1)
    if saturated is not None:
        fits &= np.asarray(saturated[cl]) == 0
    return fits


def accept(task: RoundTask) -> tuple[int, list, list]:
    """Accept proposals into the clusters of range ``s = task.r`` within the caps; writes the
    accepted moves by node range (``a#####.bin``) and by old-label range (``d#####.bin``),
    one table per block of the inbox, and the dense weight increases of the range. Holds one
    block of the proposals into this range (at most ``INBOX_ROWS``, plus the rows kept of a
    bucket that alone is more) and a few arrays per node of it. Returns
    (accepted moves, the ``a`` file's tables, the ``d`` file's tables)."""
    lv, s, f = task.level, task.r, task.files
    start, stop = lv.bounds(s)
    cw = np.load(f.state("cw", False), mmap_mode="r")
    inc = np.zeros((stop - start, lv.ncon), dtype=np.int64)
    turned_away, moved = [], 0
    with TableFile(f.scratch(f"a{s:05d}.bin")) as by_node, \
            TableFile(f.scratch(f"d{s:05d}.bin")) as by_old:
        for spans in span_groups(task.inbox, INBOX_ROWS):
            moves, away = _accept_group(spans, FIXED + lv.ncon, cw, np.asarray(task.caps))
            turned_away.append(away)
            moved += len(moves)
            np.add.at(inc, moves[:, 1] - start, moves[:, FIXED:])
            bynode = moves[:, :2][stable_argsort(moves[:, 0])]
            by_node.append(bynode, bynode[:, 0], _bounds(lv))
            del bynode
            byold = moves[:, [4] + list(range(FIXED, FIXED + lv.ncon))]
            del moves
            byold = byold[stable_argsort(byold[:, 0])]
            by_old.append(byold, byold[:, 0], _bounds(lv))
            del byold
    turned_away = np.concatenate(turned_away) if turned_away else np.empty(0, np.int64)
    if len(turned_away):
        saturated = np.array(np.load(f.saturated(), mmap_mode="r")[start:stop])
        saturated[turned_away - start] = 1
        write_rows(f.saturated(), start, saturated)
    write_rows(f.increase(), start, inc)
    return moved, by_node.tables, by_old.tables


def _accept_group(spans: tuple[Span, ...], cols: int, cw: np.ndarray, caps: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``_accept_block`` of the proposals in ``spans``, read ``INBOX_ROWS`` at a time when
    they are more (one bucket alone: the cluster of a hub, whose neighbours may all propose to
    it in one round). Before the next piece is added, the rows so far are narrowed to those
    that could be accepted (``_candidates``: a target keeps about as many rows as it has
    room for), and the rows at the end are decided: the same moves, in the same order, as
    deciding every row at once."""
    pieces = list(span_rows(spans, INBOX_ROWS)) or [()]
    rows = read_spans(pieces[0], cols)
    for piece in pieces[1:]:
        rows = np.concatenate([_candidates(rows, cw, caps), read_spans(piece, cols)])
    return _accept_block(rows, cw, caps)


def _accept_order(props: np.ndarray, cw: np.ndarray, caps: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(order, target, first, ok)`` of proposals: ``order`` sorts them by (target, gain
    desc, hash, node), ``target`` and ``first`` (a target's first row) follow it, and ``ok``
    says which fit their target: its weight + the running sum within the cap (a segmented
    cumsum, one constraint at a time: a hub's cluster may receive a million proposals at
    10^9 edges, and the block's sorted copy plus [rows, ncon] temporaries were most of the
    task's peak). Weights are not negative, so each target's ``ok`` rows are a prefix of
    its rows."""
    order = np.lexsort((props[:, 0], props[:, 3], -props[:, 2], props[:, 1]))
    target = props[order, 1]
    first = np.ones(len(order), dtype=bool)
    first[1:] = target[1:] != target[:-1]
    group = np.cumsum(first) - 1
    ok = np.ones(len(order), dtype=bool)
    for c in range(props.shape[1] - FIXED):
        w = props[order, FIXED + c]
        running = np.cumsum(w)
        running -= (running - w)[first][group]          # segmented cumsum per target
        ok &= (np.asarray(cw[target, c]) + running <= caps[c]) | (running == 0)
    return order, target, first, ok


def _accept_block(props: np.ndarray, cw: np.ndarray, caps: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(accepted proposals, the distinct targets that turned any away) of a block holding
    every proposal into its targets: per target by gain (ties: hash, node) while the
    target's weight + the running sum stays within the cap."""
    order, target, _, ok = _accept_order(props, cw, caps)
    return props[order[ok]], np.unique(target[~ok])


def _candidates(props: np.ndarray, cw: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """The rows of some of the proposals into their targets that deciding all of them
    together may accept, plus each target's first row that does not fit (sorted). A row's
    running sum over all proposals is at least its sum over these, so a row that does not
    fit here is never accepted; the first of them stays, so that the rows after it are
    turned away again when all are decided together."""
    order, _, first, ok = _accept_order(props, cw, caps)
    keep = ok.copy()
    keep[1:] |= ~ok[1:] & (ok[:-1] | first[1:])
    keep[0] = True
    return props[order[keep]]


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


def favourites(task: RoundTask) -> np.ndarray:
    """Two-hop clustering, first pass: every singleton of range ``r`` that has neighbours
    names its favourite cluster (the strongest connection, whatever its room) ->
    ``t###.p#####.bin`` rows (node, favourite, weights), sorted by favourite. Holds one block
    of the range's CSR with a few arrays per entry of its singletons, and the range's rows.
    Returns the offsets of each favourite range's rows."""
    return _write_by_target(task, _favourite_connections, _favourites)


def _singletons(task: RoundTask, start: int, stop: int, labels: np.ndarray,
                cw: np.ndarray) -> np.ndarray:
    """Which of nodes ``start:stop`` are alone in their cluster."""
    c = task.level.count_cols
    own = np.asarray(labels[start:stop])
    alone = np.asarray(cw[start:stop, :c]).sum(axis=1)
    vw = np.asarray(task.level.vwgt()[start:stop, :c])
    return (own == np.arange(start, stop)) & (alone == vw.sum(axis=1))


def _favourite_connections(task: RoundTask, csr: RangeCSR, labels: np.ndarray,
                           cw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The connections of the singletons among the rows of ``csr``."""
    rows = csr.rows()
    take = _singletons(task, csr.start, csr.stop, labels, cw)[rows]
    return _connections(rows[take], np.asarray(labels[csr.adj[take]]), csr.wgt[take],
                        slice(None), task.level.num_nodes)


def _favourites(task: RoundTask, start: int, stop: int, row: np.ndarray, cl: np.ndarray,
                conn: np.ndarray, labels: np.ndarray, cw: np.ndarray) -> np.ndarray:
    """(node, favourite, weights) of the singletons among rows ``start:stop``."""
    vw = np.asarray(task.level.vwgt()[start:stop])
    pick = best_per_row(row, conn, mix(task.seed, task.files.round, 3, start + row, cl))
    return np.column_stack([start + row[pick], cl[pick], vw[row[pick]]])


def group_by_favourite(task: RoundTask) -> tuple[int, list, list]:
    """Two-hop clustering, second pass: the singletons whose favourite lies in range ``s``,
    per favourite in node order, cut into groups of up to about a cap, each led by its first
    node (KaMinPar's two-hop clustering: the leaves of a hub whose cluster is full become one
    coarse node, and their edges to the hub one edge). Writes the followers' moves (node,
    leader, weights) by node range (``a#####.bin``) and the leaders' gains (leader, weights)
    by leader range (``g#####.bin``), one table per block of the inbox. Holds one block of
    the rows into this range. Returns (followers, the ``a`` file's tables, the ``g`` file's
    tables)."""
    lv, s, f = task.level, task.r, task.files
    followers = 0
    with TableFile(f.scratch(f"a{s:05d}.bin")) as by_node, \
            TableFile(f.scratch(f"g{s:05d}.bin")) as by_leader:
        for spans in span_groups(task.inbox, INBOX_ROWS):
            rows = read_spans(spans, 2 + lv.ncon)
            rows = rows[np.lexsort((rows[:, 0], rows[:, 1]))]
            first = np.ones(len(rows), dtype=bool)
            first[1:] = rows[1:, 1] != rows[:-1, 1]
            leader = rows[group_leaders(first, rows[:, 2:], np.asarray(task.caps)), 0]
            follow = leader != rows[:, 0]
            moves = np.column_stack([rows[follow, 0], leader[follow], rows[follow, 2:]])
            del rows, leader
            followers += len(moves)
            moves = moves[stable_argsort(moves[:, 0])]
            by_node.append(moves, moves[:, 0], _bounds(lv))
            gains = moves[stable_argsort(moves[:, 1])][:, 1:]
            by_leader.append(gains, gains[:, 0], _bounds(lv))
    return followers, by_node.tables, by_leader.tables


def apply_groups(task: RoundTask) -> None:
    """Two-hop clustering, last pass: the next labels and cluster weights of range ``r``:
    followers take their leader's label and leave their own (singleton) cluster empty."""
    lv, r, f = task.level, task.r, task.files
    start, stop = lv.bounds(r)
    labels = np.array(np.load(f.state("labels", False), mmap_mode="r")[start:stop])
    cw = np.array(np.load(f.state("cw", False), mmap_mode="r")[start:stop])
    moves = read_spans(task.moves, 2 + lv.ncon)
    labels[moves[:, 0] - start] = moves[:, 1]
    cw[moves[:, 0] - start] -= moves[:, 2:]
    gains = read_spans(task.drops, 1 + lv.ncon)
    np.add.at(cw, gains[:, 0] - start, gains[:, 1:])
    write_rows(f.state("labels", True), start, labels)
    write_rows(f.state("cw", True), start, cw)


def two_hop(level: Level, folder: str, t: int, seed: int, caps_t: tuple[float, ...],
            runner) -> int:
    """Group the singletons left after round ``t`` by favourite cluster (state ``t`` ->
    ``t + 1``); returns how many joined a group."""
    files = RoundFiles(folder, t)
    tasks = [RoundTask(level, r, files, seed, caps_t) for r in range(level.num_ranges)]
    _, grouped = run_round(tasks, runner, (favourites, "two-hop"),
                           (group_by_favourite, "two-hop group"), (apply_groups, "two-hop apply"),
                           "g")
    return sum(g[0] for g in grouped)


def run_round(tasks: list[RoundTask], runner, first, middle, last, second: str):
    """One round's three passes over ``tasks`` (one per range), each a (function, name):
    ``first`` writes ``p`` files bucketed by ``_target_bounds`` and returns their offsets;
    ``middle`` reads its buckets of them, block by block, and writes ``a`` files (by node
    range) and ``second`` files, returning (count, ``a`` tables, ``second`` tables); ``last``
    reads its spans of both as ``moves`` and ``drops``. Removes the round's scratch files;
    returns the first and middle passes' results."""
    files, ranges = tasks[0].files, range(len(tasks))
    offsets = runner(first[0], tasks, f"multilevel: coarsen {first[1]}")
    inbox = [files.scratch(f"p{r:05d}.bin") for r in ranges]
    out = runner(middle[0], [replace(x, inbox=tuple(
        spans_into(inbox, offsets, x.r * SUB_BUCKETS + j) for j in range(SUB_BUCKETS)))
        for x in tasks], f"multilevel: coarsen {middle[1]}")
    by_node = [files.scratch(f"a{s:05d}.bin") for s in ranges]
    by_second = [files.scratch(f"{second}{s:05d}.bin") for s in ranges]
    runner(last[0], [replace(x, moves=table_spans(by_node, [o[1] for o in out], x.r),
                             drops=table_spans(by_second, [o[2] for o in out], x.r))
                     for x in tasks], f"multilevel: coarsen {last[1]}")
    for name in os.listdir(files.folder):
        if name.startswith(f"t{files.round:03d}."):
            os.remove(os.path.join(files.folder, name))
    return offsets, out


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
    block = nodes // ISOLATED_BLOCK
    first = np.ones(len(nodes), dtype=bool)
    first[1:] = block[1:] != block[:-1]
    return nodes, nodes[group_leaders(first, np.asarray(level.vwgt()[nodes]), caps)]


def group_leaders(first: np.ndarray, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Items in runs (``first`` marks each run's first item) cut, run by run, into groups
    whose weight reaches at most about one cap (a group closes with the item that crosses
    it); returns the index of each item's group leader, its group's first item."""
    share = (weights / np.maximum(caps, 1e-9)).max(axis=1)
    before = np.cumsum(share) - share                  # exclusive cumsum, then per run
    before -= before[first][np.cumsum(first) - 1]
    group = np.floor(before).astype(np.int64)
    new = first.copy()
    new[1:] |= group[1:] != group[:-1]
    return np.flatnonzero(new)[np.cumsum(new) - 1]


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
            min_moves: float = 0.01, group_isolated: bool = True,
            group_singletons: bool = True) -> tuple[str, str]:
    """Run label propagation on ``level``; returns the paths of the final labels and cluster
    weights (under ``level.folder/coarsen``). Stops after ``max_rounds`` or when two rounds
    in a row move fewer than ``min_moves`` of the nodes; then, with ``group_singletons``,
    the nodes still alone are grouped by favourite cluster (:func:`two_hop`)."""
    folder = level.path("coarsen")
    os.makedirs(folder, exist_ok=True)
    for b in (0, 1):
        new_npy(os.path.join(folder, f"labels_{b}.npy"), (level.num_nodes,))
        new_npy(os.path.join(folder, f"cw_{b}.npy"), (level.num_nodes, level.ncon))
    new_npy(RoundFiles(folder, 0).saturated(), (level.num_nodes,), np.int8)
    new_npy(RoundFiles(folder, 0).increase(), (level.num_nodes, level.ncon))
    ranges = range(level.num_ranges)
    caps_t = tuple(float(c) for c in caps)
    runner(init_range, [InitTask(level, r, RoundFiles(folder, 0), caps_t, group_isolated)
                        for r in ranges],
           "multilevel: coarsen init")
    t, quiet, avoid = 0, 0, False
    for t in range(max_rounds):
        files = RoundFiles(folder, t)
        tasks = [RoundTask(level, r, files, seed, caps_t, avoid_saturated=avoid) for r in ranges]
        offsets, accepted = run_round(tasks, runner, (propose, "propose"), (accept, "accept"),
                                      (apply, "apply"), "d")
        proposed = sum(int(o[-1]) for o in offsets)
        moved = sum(a[0] for a in accepted)
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
    if group_singletons:
        joined = two_hop(level, folder, t, seed, caps_t, runner)
        log.debug("coarsen: %d nodes: two-hop grouped %d singletons", level.num_nodes, joined)
        t += 1
    final = RoundFiles(folder, t)
    return final.state("labels", False), final.state("cw", False)
