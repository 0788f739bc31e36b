"""Uncoarsening: projection, balanced label-propagation refinement, and a balance pass.

Parts of a level live in a memory-mapped ``parts.npy`` (int64 per node). Every pass is one task
per node range writing only its own rows of the next ``parts``; the client holds only ``[P,
ncon]`` loads and small histograms, and decides from them:

* refinement round: each node picks the neighbouring part of largest gain (connection weight
  there minus at home; ties by a seeded hash) among parts with room for it; moves go only
  from lower to higher part indices in even rounds and the other way in odd ones (two
  neighbours cannot swap past each other). Tasks return a histogram ``(target, gain) ->
  weight``; per target the client accepts gains from the top while the summed weight fits its
  room (cap - load) in every constraint, and the tasks then apply exactly the moves above the
  threshold (saved by the histogram task: the CSR is read once per round). Departures are
  ignored when computing room, so no part ever goes over its cap; a part whose nodes all
  want to leave keeps them that round, so no part is ever emptied. A level's refinement ends
  after two rounds in a row that move (almost) nothing.
* balance round: nodes of over-cap parts that carry weight in an over constraint each pick
  their best part with room (most connection, then most room); histogram ``(from, to, gain,
  hash bucket) -> weight``; the client walks it by gain and accepts buckets while the source
  is over and the target stays within every cap.

Decisions depend only on the previous round's parts: identical for any worker count or range
size. Tasks that read the CSR take it block by block of rows (``Level.read_csr_blocks``,
``connections``): every decision is a node's own, so blocks give the same moves as the range.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from graphprep.formats.npyio import new_npy, write_rows
from graphprep.formats.output import save_npy

from graphprep.pipeline.core.arrayops import mix
from graphprep.pipeline.partition.multilevel.layout import (Level, best_per_row, part_dtype,
                                                            read_parts, sum_by_key, whole_rows)

log = logging.getLogger(__name__)

GAIN_BITS, HASH_BUCKETS = 32, 64
# A balance round must cut the overload by 1% for another to run: on R-MAT, Jet's rounds can
# leave a part over in edges while the parts with edge room are full in nodes, which single
# moves cannot fix, and the rounds of a few moves each that followed cost ~40% of the
# refinement time. (10% ended balance passes that a single-constraint power-law graph needed.)
STALLED_BALANCE = 0.99
SAMPLE_FACTOR, MIN_SAMPLE = 20, 0.05


def overload(loads: np.ndarray, caps: np.ndarray) -> float:
    """Summed relative excess of ``[P, ncon]`` loads over their caps (0 when balanced)."""
    return float((np.clip(loads - caps[None, :], 0, None) / np.maximum(caps, 1)).sum())


@dataclass(frozen=True)
class PartsTask:
    level: Level
    r: int
    num_parts: int
    parts: str                         # current parts of the level
    target: str = ""                   # next parts (written)
    source: str = ""                   # projection: coarse parts
    f2c: str = ""                      # projection: fine -> coarse map
    round: int = 0
    seed: int = 0
    room: tuple = ()                   # [P][ncon] caps - loads
    caps: tuple = ()
    frozen: tuple = ()                 # refine: parts no node may leave this round
    accept: tuple = ()                 # refine: min accepted gain per part; balance: keys


def part_loads(parts: np.ndarray, vw: np.ndarray, k: int) -> np.ndarray:
    """``[k, ncon]`` summed vertex weights of ``parts`` (one row per node, weights ``vw``)."""
    return np.stack([np.bincount(parts, weights=vw[:, c], minlength=k).astype(np.int64)
                     for c in range(vw.shape[1])], axis=1)


def project(task: PartsTask) -> np.ndarray:
    """``parts[r] = coarse parts[f2c[r]]``; returns the range's ``[P, ncon]`` loads."""
    start, stop = task.level.bounds(task.r)
    f2c = np.asarray(np.load(task.f2c, mmap_mode="r")[start:stop])
    parts = read_parts(task.source, f2c)
    write_rows(task.parts, start, parts)
    return part_loads(parts, np.asarray(task.level.vwgt()[start:stop]), task.num_parts)


@dataclass(frozen=True)
class Connections:
    """A block of rows ``start:start + len(own)`` of a range: per node its part and weights,
    per (node, part) pair with a connection, sorted by (node, part), the node's row in the
    block, the part and the summed edge weight; per node its connection to its own part."""
    start: int
    own: np.ndarray
    vw: np.ndarray
    row: np.ndarray
    q: np.ndarray
    conn: np.ndarray
    self_conn: np.ndarray


def connections(task: PartsTask, select=None) -> Iterator[Connections]:
    """Range ``task.r``'s ``Connections``, one per block of its CSR (``read_csr_blocks``; a
    row split in pieces is summed piece by piece, into one); with ``select(own, vw, start)
    -> bool mask`` (``start``: the block's first node), for the selected rows only (the
    others get no entries and 0 own connection). Holds one block of the CSR and a few
    arrays per entry of it: a caller drops its block (``del``) before it asks for the
    next."""
    for blocks in whole_rows(task.level.read_csr_blocks(task.r, split_rows=True)):
        csr = next(blocks)
        c = _connections(task, csr, select)
        del csr
        pieces = [_connections(task, piece, select) for piece in blocks]  # <= k entries each
        if pieces:
            c = _summed_row(c, pieces, task.num_parts)
        yield c
        del c


def _summed_row(first: Connections, rest: list[Connections], k: int) -> Connections:
    """The ``Connections`` of one row from those of its pieces."""
    pieces = [first, *rest]
    q = np.concatenate([c.q for c in pieces])
    conn = np.bincount(q, weights=np.concatenate([c.conn for c in pieces]), minlength=k)
    q = np.flatnonzero(conn)
    return Connections(first.start, first.own, first.vw, np.zeros(len(q), dtype=np.int64), q,
                       conn[q].astype(np.int64), sum(c.self_conn for c in pieces))


def _connections(task: PartsTask, csr, select) -> Connections:
    """``connections`` of one CSR block: a few arrays per entry of it while it runs, per
    (node, part) pair when it returns."""
    lv = task.level
    own = read_parts(task.parts, slice(csr.start, csr.stop))
    vw = np.asarray(lv.vwgt()[csr.start:csr.stop])
    rows, adj, wgt = csr.rows(), csr.adj, csr.wgt
    if select is not None:
        keep = select(own, vw, csr.start)[rows]
        rows, adj, wgt = rows[keep], adj[keep], wgt[keep]
    row, q, conn = connection_table(rows, read_parts(task.parts, adj), wgt, len(own),
                                    task.num_parts)
    mine = q == own[row]
    self_conn = np.zeros(len(own), dtype=np.int64)
    self_conn[row[mine]] = conn[mine]
    return Connections(csr.start, own, vw, row, q, conn, self_conn)


def connection_table(rows: np.ndarray, parts: np.ndarray, wgt: np.ndarray, num_rows: int,
                     k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (row, part) pair with a connection, sorted by (row, part): ``(rows, parts, summed
    edge weight)``. A dense ``bincount`` over ``num_rows * k`` cells where that is no bigger
    than the entries (10x faster than the sort of ``sum_by_key``, measured on a 2^17-node
    range at k=4); the sort otherwise. Holds a few arrays of the entries' length."""
    if num_rows * k > 2 * len(rows) + (1 << 16):
        keys, conn = sum_by_key(rows * k + parts, wgt)
        return keys // k, keys % k, conn
    cells = rows * k + parts
    if len(wgt) and wgt.min() == wgt.max():           # unit weights (level 0): counts
        dense = np.bincount(cells, minlength=num_rows * k) * int(wgt[0])
    else:     # float64 sums of int64 weights: exact below 2^53, far above any real degree
        dense = np.bincount(cells, weights=wgt, minlength=num_rows * k).astype(np.int64)
    hit = np.flatnonzero(dense)
    return hit // k, hit % k, dense[hit]


def _refine_moves(task: PartsTask, c: Connections):
    """Each node's best move this round in block ``c``: ``(rows in the block, targets,
    gains)``."""
    own, vw, row, q, conn, self_conn = c.own, c.vw, c.row, c.q, c.conn, c.self_conn
    forward = task.round % 2 == 0
    room = np.asarray(task.room, dtype=np.float64)
    cand = (q > own[row]) if forward else (q < own[row])
    cand &= conn > self_conn[row]
    cand = np.flatnonzero(cand)
    w = vw[row[cand]]
    # A constraint the node carries no weight in never blocks it (the target may be over it).
    cand = cand[((w <= room[q[cand]]) | (w == 0)).all(axis=1)]
    row, q, conn = row[cand], q[cand], conn[cand]
    pick = best_per_row(row, conn, mix(task.seed, task.round, 4, c.start + row, q))
    return row[pick], q[pick], conn[pick] - self_conn[row[pick]]


def _moves_path(task: PartsTask) -> str:
    return f"{task.parts[:-4]}.moves{task.r:05d}.npy"


def refine_histogram(task: PartsTask):
    """``(keys = target << GAIN_BITS | gain, [m, ncon] weights, [P] departing node counts)``
    of the range's moves. The moves (row, target, gain) are saved next to ``parts`` for
    ``refine_apply``, which then needs no second pass over the CSR. Holds a block of the
    CSR (``connections``) and the range's moves."""
    start = task.level.bounds(task.r)[0]
    moves, hists = [], []
    departing = np.zeros(task.num_parts, dtype=np.int64)
    for c in connections(task):
        row, q, gain = _refine_moves(task, c)
        moves.append(np.stack([c.start - start + row, q, gain], axis=1))
        departing += np.bincount(c.own[row], weights=c.vw[row, :task.level.count_cols].sum(
            axis=1), minlength=task.num_parts).astype(np.int64)
        hists.append(sum_by_key((q << GAIN_BITS) | np.minimum(gain, (1 << GAIN_BITS) - 1),
                                c.vw[row]))
        del c
    save_npy(_moves_path(task), np.concatenate(moves))
    keys, weights = merge_histograms(hists)
    return keys, weights, departing


def refine_apply(task: PartsTask) -> tuple[np.ndarray, int]:
    """Apply the saved moves at or above each target's threshold, except out of the parts in
    ``task.frozen`` (they could be emptied); returns (loads, moves)."""
    start, stop = task.level.bounds(task.r)
    own = read_parts(task.parts, slice(start, stop))
    vw = np.asarray(task.level.vwgt()[start:stop])
    moves = np.load(_moves_path(task))
    os.remove(_moves_path(task))
    row, q, gain = moves[:, 0], moves[:, 1], moves[:, 2]
    ok = np.minimum(gain, (1 << GAIN_BITS) - 1) >= np.asarray(task.accept)[q]
    if task.frozen:
        ok &= ~np.isin(own[row], np.asarray(task.frozen, dtype=np.int64))
    return write_parts(task, own, vw, row[ok], q[ok])


def write_parts(task: PartsTask, own, vw, rows, targets, start: int | None = None
                ) -> tuple[np.ndarray, int]:
    """The next parts of the nodes from ``start`` (default: the range's first) on: ``own``
    with ``rows`` moved to ``targets``, into ``task.target``; returns (their loads, moves)."""
    start = task.level.bounds(task.r)[0] if start is None else start
    new = own.copy()
    new[rows] = targets
    write_rows(task.target, start, new)
    return part_loads(new, vw, task.num_parts), len(rows)


def _balance_moves(task: PartsTask) -> Iterator[tuple[Connections, np.ndarray, np.ndarray]]:
    """Moves out of over-cap parts, per block of the range (``connections``): ``(the block,
    its rows, keys)``, key = (from, to, gain, bucket). Only the candidates' entries are read
    into connections (at the finest level of R-MAT, a quarter of them or fewer)."""
    room = np.asarray(task.room, dtype=np.float64)
    over = room < 0                                                  # [P, ncon]
    caps = np.asarray(task.caps, dtype=np.float64)
    # A part a little over needs few moves: a seeded sample of its nodes, SAMPLE_FACTOR times
    # its relative excess, are the candidates (all of them from 1/SAMPLE_FACTOR over). On
    # R-MAT the repairs after Jet rounds were 0.1-0.7% over, and reading every node's
    # connections of the over part made balance 6 of 26 s.
    # Each round draws another sample, and never under MIN_SAMPLE of the part.
    share = np.clip(SAMPLE_FACTOR * (np.clip(-room, 0, None) / np.maximum(caps, 1)).max(axis=1),
                    MIN_SAMPLE, 1)                                   # [P]

    def candidates(own, vw, start):
        sampled = (mix(task.seed, 9, task.round, start + np.arange(len(own))) >>
                   np.uint64(11)).astype(np.float64) < share[own] * float(1 << 53)
        return (vw * over[own] > 0).any(axis=1) & sampled

    for c in connections(task, candidates):
        rows, keys = _balance_block(task, c, candidates(c.own, c.vw, c.start), room, caps)
        yield c, rows, keys
        del c, rows, keys


def _balance_block(task: PartsTask, c: Connections, candidates: np.ndarray, room, caps):
    """``_balance_moves`` of one block: (its candidate rows that have a move, their keys).
    Holds a few arrays per candidate and a ``[candidates, P]`` table."""
    own, vw, row, k = c.own, c.vw, c.row, task.num_parts
    cand = np.flatnonzero(candidates)
    if len(cand) == 0:
        return cand, cand
    local = np.full(len(own), -1, dtype=np.int64)
    local[cand] = np.arange(len(cand))
    sel = local[row] >= 0
    dense = np.zeros((len(cand), k), dtype=np.float64)
    np.add.at(dense, (local[row[sel]], c.q[sel]), c.conn[sel])
    w = vw[cand][:, None, :]
    fits = ((w <= room[None, :, :]) | (w == 0)).all(axis=2)
    fits[np.arange(len(cand)), own[cand]] = False
    spare = np.clip((room / np.maximum(caps, 1)).min(axis=1), 0, 0.99)   # < 1: conn first
    score = np.where(fits, dense + spare[None, :], -np.inf)
    best = score.argmax(axis=1)
    ok = np.isfinite(score[np.arange(len(cand)), best])
    cand, best = cand[ok], best[ok]
    gain = dense[ok][np.arange(len(cand)), best].astype(np.int64) - c.self_conn[cand]
    gain = np.clip(gain, -(1 << (GAIN_BITS - 1)), (1 << (GAIN_BITS - 1)) - 1) + \
        (1 << (GAIN_BITS - 1))
    bucket = (mix(task.seed, 5, c.start + cand) % np.uint64(HASH_BUCKETS)).astype(np.int64)
    return cand, (((own[cand] * k + best) << GAIN_BITS | gain) * HASH_BUCKETS) + bucket


def balance_histogram(task: PartsTask):
    """``(keys, [m, ncon] weights)`` of the range's balance moves, keyed by
    (from, to, gain, hash bucket). Holds one CSR block and the blocks' histograms."""
    hists = []
    for c, rows, keys in _balance_moves(task):
        hists.append(sum_by_key(keys, c.vw[rows]))
        del c
    return merge_histograms(hists)


def balance_apply(task: PartsTask) -> tuple[np.ndarray, int]:
    """Apply the moves whose key the client accepted, block by block of the CSR (writing
    each block's rows of the next parts); returns (loads, moves). Holds one block."""
    accepted = np.asarray(task.accept, dtype=np.int64)
    k = task.num_parts
    loads, moved = 0, 0
    for c, rows, keys in _balance_moves(task):
        pos = np.minimum(np.searchsorted(accepted, keys), max(len(accepted) - 1, 0))
        ok = (accepted[pos] == keys) if len(accepted) else np.zeros(len(keys), dtype=bool)
        targets = (keys // HASH_BUCKETS >> GAIN_BITS) % k
        block_loads, block_moved = write_parts(task, c.own, c.vw, rows[ok], targets[ok],
                                               c.start)
        loads, moved = loads + block_loads, moved + block_moved
        del c
    return loads, moved


def merge_histograms(histograms):
    keys = np.concatenate([h[0] for h in histograms])
    weights = np.concatenate([h[1] for h in histograms])
    return sum_by_key(keys, weights)


def _thresholds(keys, weights, room: np.ndarray) -> np.ndarray:
    """Per target part, the lowest gain accepted (gains from the top while the weight fits)."""
    k = len(room)
    accept = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    target, gain = keys >> GAIN_BITS, keys & ((1 << GAIN_BITS) - 1)
    for q in range(k):   # a loop over parts; each step vectorized over its histogram
        mine = np.flatnonzero(target == q)[::-1]                     # gain descending
        total = np.cumsum(weights[mine], axis=0)
        fit = ((total <= room[q]) | (total == 0)).all(axis=1)
        n_fit = int(np.argmin(fit)) if not fit.all() else len(fit)
        if n_fit:
            accept[q] = gain[mine[n_fit - 1]]
    return accept


def _balance_accept(keys, weights, loads: np.ndarray, caps: np.ndarray, k: int) -> np.ndarray:
    """Histogram buckets to move, best gain first, while the source is over and the target
    stays within every cap. A loop over buckets (not nodes); holds the histogram."""
    loads = loads.astype(np.float64).copy()
    bucket_key = keys // HASH_BUCKETS
    gain = bucket_key & ((1 << GAIN_BITS) - 1)
    pair = bucket_key >> GAIN_BITS
    src, dst = pair // k, pair % k
    order = np.lexsort((keys, -gain))
    chosen = []
    for i in order:
        w = weights[i]
        p, q = src[i], dst[i]
        if not ((loads[p] > caps) & (w > 0)).any():
            continue
        if ((loads[q] + w <= caps) | (w == 0)).all():
            loads[p] -= w
            loads[q] += w
            chosen.append(keys[i])
        if not (loads > caps).any():
            break
    return np.sort(np.asarray(chosen, dtype=np.int64))


@dataclass
class Refiner:
    """Runs the passes of one level; holds ``[P, ncon]`` loads."""

    level: Level
    num_parts: int
    caps: np.ndarray
    seed: int
    runner: object
    free: int = 0          # leading count columns that are no constraint (caps at their totals)

    @property
    def constraints(self) -> int:
        """The balance constraints the caps hold."""
        return self.level.ncon - self.free

    def tasks(self, **kw) -> list[PartsTask]:
        """One ``PartsTask`` per range of the level, with the fields ``kw``."""
        return [PartsTask(self.level, r, self.num_parts, **kw)
                for r in range(self.level.num_ranges)]

    def swap(self, parts: str, nxt: str, results) -> tuple[np.ndarray, int]:
        """Make ``nxt`` the level's parts; returns the summed (loads, moves) of ``results``."""
        os.replace(nxt, parts)
        return sum(r[0] for r in results), sum(r[1] for r in results)

    def project(self, coarse_parts: str, f2c: str, parts: str) -> np.ndarray:
        new_npy(parts, (self.level.num_nodes,), part_dtype(self.num_parts))
        return sum(self.runner(project, self.tasks(parts=parts, source=coarse_parts, f2c=f2c),
                               "multilevel: project"))

    def refine(self, parts: str, loads: np.ndarray, rounds: int,
               min_moves: float = 0.0) -> np.ndarray:
        """Up to ``rounds`` rounds; stops after two quiet ones in a row (one per direction)
        moving fewer than ``min_moves`` of the nodes."""
        nxt = parts[:-4] + ".next.npy"
        quiet = 0
        for t in range(rounds):
            room = self.caps[None, :] - loads
            room_t = tuple(map(tuple, room.tolist()))
            hists = self.runner(refine_histogram, self.tasks(parts=parts, round=t,
                                seed=self.seed, room=room_t), "multilevel: refine")
            keys, weights = merge_histograms([h[:2] for h in hists])
            if len(keys) == 0:       # nothing to move in this direction: a quiet round
                for r in range(self.level.num_ranges):
                    os.remove(_moves_path(PartsTask(self.level, r, self.num_parts, parts)))
                moved = 0
            else:
                loads, moved = self._apply(parts, nxt, loads, room, t, hists, keys, weights)
            quiet = quiet + 1 if moved <= min_moves * self.level.num_nodes else 0
            if quiet >= 2:
                break
        return loads

    def _apply(self, parts, nxt, loads, room, t, hists, keys, weights):
        # A part whose every node wants to leave could be emptied: it keeps them this round
        # (dropping moves only lowers arrivals, so the thresholds stay safe).
        counts = loads[:, :self.level.count_cols].sum(axis=1)
        frozen = tuple(np.flatnonzero(sum(h[2] for h in hists) >= counts).tolist())
        accept = tuple(_thresholds(keys, weights, room).tolist())
        new_npy(nxt, (self.level.num_nodes,), part_dtype(self.num_parts))
        return self.swap(parts, nxt, self.runner(refine_apply, self.tasks(
            parts=parts, target=nxt, round=t, seed=self.seed,
            room=tuple(map(tuple, room.tolist())), accept=accept, frozen=frozen),
            "multilevel: refine apply"))

    def balance(self, parts: str, loads: np.ndarray, max_rounds: int = 30) -> np.ndarray:
        """Balance rounds until every load is within its cap, a round stops helping
        (``STALLED_BALANCE``) or ``max_rounds``; returns the loads."""
        before = np.inf
        for t in range(max_rounds):
            over = overload(loads, self.caps)
            if over == 0:
                return loads
            if over > STALLED_BALANCE * before:
                break
            before = over
            moved = self._balance_round(parts, loads, t)
            if moved is None:
                break
            loads = moved
        if (loads > self.caps[None, :]).any():
            # Not a warning: Jet's next round or a finer level usually restores balance (the
            # method warns when its output stays over a cap).
            log.info("multilevel: a balance pass left a part over its cap (max load/cap "
                     "%.4f): nodes heavier than the room left", float((loads / self.caps).max()))
        return loads

    def _balance_round(self, parts: str, loads: np.ndarray, t: int):
        """Round ``t``'s histogram + apply; the new loads, or None when no move was
        accepted."""
        nxt = parts[:-4] + ".next.npy"
        caps_t = tuple(self.caps.tolist())
        room_t = tuple(map(tuple, (self.caps[None, :] - loads).tolist()))
        keys, weights = merge_histograms(self.runner(balance_histogram, self.tasks(
            parts=parts, seed=self.seed, round=t, room=room_t, caps=caps_t),
            "multilevel: balance"))
        accept = _balance_accept(keys, weights, loads, self.caps, self.num_parts)
        if len(accept) == 0:
            return None
        new_npy(nxt, (self.level.num_nodes,), part_dtype(self.num_parts))
        return self.swap(parts, nxt, self.runner(balance_apply, self.tasks(
            parts=parts, target=nxt, seed=self.seed, round=t, room=room_t, caps=caps_t,
            accept=tuple(accept.tolist())), "multilevel: balance apply"))[0]

    def loads(self, parts: str) -> np.ndarray:
        return sum(self.runner(range_loads, self.tasks(parts=parts), "multilevel: loads"))


def range_loads(task: PartsTask) -> np.ndarray:
    """``[P, ncon]`` loads of range ``r``."""
    start, stop = task.level.bounds(task.r)
    return part_loads(read_parts(task.parts, slice(start, stop)),
                      np.asarray(task.level.vwgt()[start:stop]), task.num_parts)
