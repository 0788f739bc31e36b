"""Jet refinement (Gilbert et al., "Jet: Multilevel Graph Partitioning on GPUs", 2023),
chunked: unconstrained moves that may lose a little, filtered so that neighbours moving at once
do not undo each other, then a balance pass; the best balanced state of a level is kept.

Positive-gain label propagation stalls where a good partition needs an exchange: on a graph
with a dense core and a periphery (power-law degrees), the nodes that want to enter a full part
stay out, and the cut stays 20-30% above METIS's. A Jet round lets both sides move:

1. *propose* (one task per range): each node's best other part by connection weight (ties by
   a seeded hash) is its candidate when the loss is small: gain > -floor(c * own connection).
   Target and priority (gain, then hash) go to memory-mapped ``[n]`` arrays; the task returns
   the range's cut, loads, departing counts and a histogram of the candidates' weight by
   (home, target, rank).
2. *throttle* (client, once free rounds fail, see ``JetState``): the candidates' weight by
   (home, target, rank) buckets, accepted best rank first while the target stays within
   every cap, each accepted bucket freeing room at home (``accept_moves``). Unthrottled, on
   R-MAT one round sent most nodes to the part of the hubs, 2.7x its edge cap, which the
   balance pass could not undo.
3. *filter and apply* (one task per range, the "afterburner"): an accepted candidate moves
   only if its gain stays >= 0 when every accepted neighbour of higher priority has moved.
   Writes the range's rows of the next parts.

Balance is then restored by ``Refiner.balance``; a round it cannot restore ends the level
with its best balanced state. Decisions depend on the previous round's files only: identical
for any worker count or range size.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from graphprep.formats.npyio import new_npy, write_rows
from graphprep.pipeline.core.arrayops import mix
from graphprep.pipeline.partition.multilevel.layout import (Level, RangeCSR, best_per_row,
                                                            part_dtype, read_parts, sum_by_key,
                                                            whole_rows)
from graphprep.pipeline.partition.multilevel.refine import (GAIN_BITS, Connections, PartsTask,
                                                            connections, merge_histograms,
                                                            part_loads, write_parts)

log = logging.getLogger(__name__)

PRIORITY_SHIFT = 32
REPAIR_ROUNDS = 3                             # balance rounds after a throttled round
TIE_BITS = 6                                  # hash bits that order equal gains
RANK_GAIN = 1 << (GAIN_BITS - TIE_BITS - 1)   # gains are clipped to +-this in a rank


@dataclass(frozen=True)
class JetProposals:
    """What a range's propose task hands the client."""
    cut2: int                  # twice the range's cut weight
    loads: np.ndarray          # [P, ncon] loads of the range's nodes
    departing: np.ndarray      # [P] node counts of the candidates, by home part
    keys: np.ndarray           # histogram: move key (``move_keys``)
    weights: np.ndarray        # [m, ncon] candidate weight per key


@dataclass(frozen=True)
class JetFiles:
    target: str          # [n] parts dtype: candidate's target part, -1 for none
    priority: str        # [n] int64: (gain + 2^31) << 32 | hash bits


def jet_propose(args: tuple[PartsTask, JetFiles, float]) -> JetProposals:
    """Candidates of range ``r`` into the memory-mapped target and priority arrays; returns
    the range's ``JetProposals``. Block by block of the CSR (``connections``): holds one
    block and a few arrays per entry of it."""
    task, files, loss = args
    k = task.num_parts
    cut2, loads, departing, hists = 0, 0, np.zeros(k, dtype=np.int64), []
    for c in connections(task):
        block_cut2, block_departing, hist = _propose_block(task, files, loss, c)
        cut2, departing = cut2 + block_cut2, departing + block_departing
        hists.append(hist)
        loads = loads + part_loads(c.own, c.vw, k)
        del c
    keys, weights = merge_histograms(hists)
    return JetProposals(cut2, loads, departing, keys, weights)


def _propose_block(task: PartsTask, files: JetFiles, loss: float, c: Connections):
    """``jet_propose`` of one block: writes its rows of the target and priority arrays;
    returns its (cut2, departing, histogram). Holds a few arrays per (node, part) pair of
    the block."""
    own, vw, row, q, conn = c.own, c.vw, c.row, c.q, c.conn
    other = q != own[row]
    cut2 = int(conn[other].sum())
    row, q, conn = row[other], q[other], conn[other]
    tie = mix(task.seed, task.round, 6, c.start + row, q)
    pick = best_per_row(row, conn, tie)
    row, q, conn = row[pick], q[pick], conn[pick]
    gain = conn - c.self_conn[row]
    ok = gain > -np.floor(loss * c.self_conn[row])
    row, q, gain = row[ok], q[ok], gain[ok]
    target = np.full(len(own), -1, dtype=np.int64)
    target[row] = q
    priority = np.zeros(len(own), dtype=np.int64)
    bits = (mix(task.seed, task.round, 7, c.start + row) >> np.uint64(33)).astype(np.int64)
    priority[row] = ((np.clip(gain, -(1 << 30), 1 << 30) + (1 << 31)) << PRIORITY_SHIFT) | bits
    write_rows(files.target, c.start, target)
    write_rows(files.priority, c.start, priority)
    counted = vw[row, :task.level.count_cols].sum(axis=1)
    departing = np.bincount(own[row], weights=counted, minlength=task.num_parts)
    return cut2, departing.astype(np.int64), sum_by_key(
        move_keys(own[row], q, priority[row], task.num_parts), vw[row])


def rank_of(priority: np.ndarray) -> np.ndarray:
    """A candidate's rank among the throttled moves (< 2^GAIN_BITS): the gain, then the top
    ``TIE_BITS`` of its hash, so that a target with room for some of many equal-gain
    candidates (R-MAT's leaves of a hub, all gaining 1) takes some instead of none."""
    gain = np.clip((priority >> PRIORITY_SHIFT) - (1 << 31), -RANK_GAIN, RANK_GAIN - 1)
    tie = (priority & ((1 << PRIORITY_SHIFT) - 1)) >> (31 - TIE_BITS)
    return ((gain + RANK_GAIN) << TIE_BITS) | tie


def move_keys(home: np.ndarray, target: np.ndarray, priority: np.ndarray, k: int
              ) -> np.ndarray:
    """Histogram key of a move: ``(home * k + target) << GAIN_BITS | rank``."""
    return ((home * k + target) << GAIN_BITS) | rank_of(priority)


def jet_mark(args: tuple[PartsTask, JetFiles, np.ndarray]) -> None:
    """Throttled rounds: withdraw range ``r``'s candidates whose move key the client did not
    accept (``accept``: sorted keys), in the memory-mapped target array. A pass of its own so
    that the apply tasks read their neighbours' decisions instead of recomputing them per
    edge entry (a searchsorted per entry took 0.25 s per task at 10^7 edges)."""
    task, files, accept = args
    start, stop = task.level.bounds(task.r)
    target = read_parts(files.target, slice(start, stop))
    cand = np.flatnonzero(target >= 0)
    if len(cand) == 0:
        return
    own = read_parts(task.parts, start + cand)
    priority = np.asarray(np.load(files.priority, mmap_mode="r")[start + cand])
    keys = move_keys(own, target[cand], priority, task.num_parts)
    pos = np.minimum(np.searchsorted(accept, keys), max(len(accept) - 1, 0))
    accepted = (accept[pos] == keys) if len(accept) else np.zeros(len(keys), dtype=bool)
    target[cand[~accepted]] = -1
    write_rows(files.target, start, target)


def accept_moves(keys: np.ndarray, weights: np.ndarray, loads: np.ndarray, caps: np.ndarray,
                 k: int) -> np.ndarray:
    """The move keys to apply, sorted: buckets by rank, best first, each accepted while its
    target stays within every cap (``caps``: ``[ncon]``), its weight then counted out of its
    home part. Departures free room as they are accepted, so exchanges between full parts
    go through, which per-target thresholds could not allow without risking overfull parts.
    A loop over buckets (not nodes); holds the histogram."""
    loads = loads.astype(np.float64).copy()
    pair, rank = keys >> GAIN_BITS, keys & ((1 << GAIN_BITS) - 1)
    home, target = pair // k, pair % k
    chosen = []
    for i in np.lexsort((keys, -rank)):
        w, p, q = weights[i], home[i], target[i]
        if ((loads[q] + w <= caps) | (w == 0)).all():
            loads[q] += w
            loads[p] -= w
            chosen.append(keys[i])
    return np.sort(np.asarray(chosen, dtype=np.int64))


def jet_apply(args: tuple[PartsTask, JetFiles]) -> tuple[np.ndarray, int]:
    """Move range ``r``'s candidates (those ``jet_mark`` left) whose gain stays >= 0 after
    their higher-priority candidate neighbours' moves, except out of ``task.frozen`` parts;
    returns (loads, moves). Block by block of the CSR (a row split in pieces gains their
    sum): holds one block and the entries of its movers."""
    task, files = args
    loads, moved = 0, 0
    for blocks in whole_rows(_mover_blocks(task, files)):
        csr = next(blocks)
        start = csr.start
        own, vw, target, movers, gain = _mover_gains(task, files, csr)
        del csr
        for piece in blocks:
            gain = gain + _mover_gains(task, files, piece)[4]
        keep = movers[gain >= 0]
        block_loads, block_moved = write_parts(task, own, vw, keep, target[keep], start)
        loads, moved = loads + block_loads, moved + block_moved
    return loads, moved


def _mover_gains(task: PartsTask, files: JetFiles, csr: RangeCSR):
    """``(own parts, vertex weights, targets, movers, gains)`` of the rows of ``csr``: the
    movers' gains after their higher-priority neighbours' moves. Holds a few arrays per
    entry of the block's movers."""
    start, stop = csr.start, csr.stop
    own = read_parts(task.parts, slice(start, stop))
    vw = np.asarray(task.level.vwgt()[start:stop])
    target = read_parts(files.target, slice(start, stop))
    if task.frozen:
        target[np.isin(own, np.asarray(task.frozen, dtype=np.int64))] = -1
    movers = np.flatnonzero(target >= 0)
    if len(movers) == 0:
        return own, vw, target, movers, np.zeros(0)
    # Entries of the movers' rows, gathered without a Python loop; neighbours' parts stay in
    # the parts dtype (compared, never added): ~40 B per entry at the peak.
    counts = np.diff(csr.indptr)[movers]
    local = np.repeat(np.arange(len(movers)), counts)
    idx = np.arange(len(local))
    idx += np.repeat(csr.indptr[movers] - np.cumsum(counts) + counts, counts)
    nbr, w = csr.adj[idx], csr.wgt[idx]
    del idx
    pmap = np.load(files.priority, mmap_mode="r")
    after = np.asarray(np.load(files.target, mmap_mode="r")[nbr])      # their target...
    ahead = after >= 0
    ahead &= np.asarray(pmap[nbr]) > np.repeat(np.asarray(pmap[start:stop])[movers], counts)
    stay = np.asarray(np.load(task.parts, mmap_mode="r")[nbr])         # ... or their part
    np.copyto(after, stay, where=~ahead)
    del nbr, ahead, stay
    to_dest = after == np.repeat(target[movers], counts)
    to_home = after == np.repeat(own[movers], counts)
    del after
    m = len(movers)
    gain = (np.bincount(local, weights=w * to_dest, minlength=m) -
            np.bincount(local, weights=w * to_home, minlength=m))
    return own, vw, target, movers, gain


def _mover_blocks(task: PartsTask, files: JetFiles):
    """``read_csr_blocks`` of range ``r``, or, when none of its nodes moves, its rows as one
    block without entries (the CSR is not read)."""
    start, stop = task.level.bounds(task.r)
    moving = np.asarray(np.load(files.target, mmap_mode="r")[start:stop]) >= 0
    if task.frozen:
        moving &= ~np.isin(np.load(task.parts, mmap_mode="r")[start:stop], task.frozen)
    if not moving.any():
        return [RangeCSR(start, stop, np.zeros(stop - start + 1, dtype=np.int64),
                         np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))]
    return task.level.read_csr_blocks(task.r, split_rows=True)


def new_jet_files(level: Level, parts: str, num_parts: int) -> JetFiles:
    files = JetFiles(parts[:-4] + ".jet_target.npy", parts[:-4] + ".jet_priority.npy")
    new_npy(files.target, (level.num_nodes,), part_dtype(num_parts))
    new_npy(files.priority, (level.num_nodes,))
    return files


def remove_jet_files(files: JetFiles) -> None:
    for path in (files.target, files.priority):
        if os.path.exists(path):
            os.remove(path)


@dataclass
class JetState:
    """Kept across the levels of one run: whether rounds are throttled (``accept_moves``).
    They start free, as in Jet; with several constraints, the first round whose moves no
    balance pass can repair is undone and throttling is on for the rest of the run. Free moves
    are what a power-law graph balanced on one constraint needs (a dense core trading places
    with the periphery: throttled, its cut was 1.42x METIS's at k=2); with several (R-MAT under
    nodes, train and edges) free rounds overfill parts beyond repair, and throttled ones
    improve the cut."""
    throttled: bool = False


def jet_refine(refiner, parts: str, loads: np.ndarray, rounds: int = 12, patience: int = 2,
               loss: float = 0.25, state: JetState | None = None) -> np.ndarray:
    """Jet rounds on ``parts`` (a ``Refiner``'s level) until ``patience`` rounds in a row
    bring no better balanced cut, or ``rounds``; leaves the best balanced state in ``parts``
    and returns its loads. ``state``: shared by the levels of a run (a fresh one: start
    free). Holds ``[P, ncon]`` loads; saved states are hard links, not copies."""
    state = state if state is not None else JetState()
    lv, caps = refiner.level, refiner.caps[None, :]
    one = refiner.constraints == 1
    files = new_jet_files(lv, parts, refiner.num_parts)
    nxt, best = parts[:-4] + ".next.npy", parts[:-4] + ".best.npy"
    before = parts[:-4] + ".before.npy"
    best_cut, best_loads, stale, current_is_best = None, loads, 0, False

    def apply_round(t, frozen, accept):
        if accept is not None:
            refiner.runner(jet_mark, [(x, files, accept) for x in refiner.tasks(parts=parts)],
                           "multilevel: jet mark")
        new_npy(nxt, (lv.num_nodes,), part_dtype(refiner.num_parts))
        return refiner.swap(parts, nxt, refiner.runner(
            jet_apply, [(x, files) for x in refiner.tasks(
                parts=parts, target=nxt, round=t, seed=refiner.seed, frozen=frozen)],
            "multilevel: jet apply"))[0]

    try:
        for t in range(rounds + 1):
            tasks = refiner.tasks(parts=parts, round=t, seed=refiner.seed)
            res = refiner.runner(jet_propose, [(x, files, loss) for x in tasks],
                                 "multilevel: jet")
            cut, loads = sum(r.cut2 for r in res) // 2, sum(r.loads for r in res)
            current_is_best = not (loads > caps).any() and (best_cut is None or
                                                            cut < best_cut)
            log.debug("jet: %d nodes, round %d: cut %d%s", lv.num_nodes, t, cut,
                      "" if not (loads > caps).any() else " (over a cap)")
            if current_is_best:
                stale = 0 if best_cut is None or cut < 0.999 * best_cut else stale + 1
                best_cut, best_loads = cut, loads
                _keep(parts, best)
            else:
                stale += 1
            if t == rounds or stale >= patience:
                break
            counts = loads[:, :lv.count_cols].sum(axis=1)
            frozen = tuple(np.flatnonzero(sum(r.departing for r in res) >= counts).tolist())
            if not state.throttled:
                _keep(parts, before)
                moved = apply_round(t, frozen, None)
                if (moved > caps).any():
                    # several constraints: a short pass tells whether balance is in reach
                    moved = refiner.balance(parts, moved, max_rounds=30 if one else
                                            REPAIR_ROUNDS)
                # One constraint: balance can always move something somewhere, and the next
                # round goes on from here, as in Jet.
                if not (moved > caps).any() or one:
                    loads = moved
                    continue
                os.replace(before, parts)
                state.throttled = True
                log.info("multilevel: a Jet round at %d nodes could not be balanced (max "
                         "load/cap %.4f): its moves are throttled by each part's room from "
                         "now on", lv.num_nodes, float((moved / caps).max()))
            # Throttled: accepted while the targets stay within their caps. The afterburner
            # may still keep a move out of a part whose departures made room for arrivals: a
            # short balance pass repairs most such rounds; one that does not (on R-MAT a part
            # over in edges while the parts with edge room are full in nodes needs swaps; full
            # passes then cost up to 2.7 s at the finest level) is undone, and the level keeps
            # its best.
            keys, weights = merge_histograms([(r.keys, r.weights) for r in res])
            _keep(parts, before)
            moved = apply_round(t, frozen, accept_moves(keys, weights, loads, refiner.caps,
                                                        refiner.num_parts))
            if (moved > caps).any():
                moved = refiner.balance(parts, moved, max_rounds=REPAIR_ROUNDS)
            if (moved > caps).any():
                os.replace(before, parts)
                break
            loads = moved
        if best_cut is not None and not current_is_best:
            os.replace(best, parts)
            loads = best_loads
    finally:
        remove_jet_files(files)
        for path in (best, before):
            if os.path.exists(path):
                os.remove(path)
    return loads


def _keep(parts: str, best: str) -> None:
    if os.path.exists(best):
        os.remove(best)
    try:
        os.link(parts, best)
    except OSError:                   # a file system without hard links
        import shutil
        shutil.copyfile(parts, best)
