"""Level 0: the input chunks of every edge type -> one symmetric, simple range CSR.

Node types are offset into one ID space (``graph_ops.type_offsets``). Phase 1, one task per
input edge chunk: both directions of every non-loop edge as keys ``u * n + v``, deduplicated
and sorted (so they come bucketed by the range of ``u``), plus, for ``--balance edges``, the
sorted destinations (in-degree counts loops and duplicates, as ``--method metis`` does).
Phase 2, one task per node range: its slice of every phase-1 file, deduplicated, written as
the range's CSR with unit weights, and its rows of the vertex weights. A task holds one chunk
(phase 1) or one block of a range's entries (phase 2, ``buckets.key_blocks``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace

import numpy as np

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType
from graphprep.formats.npyio import new_npy, write_rows
from graphprep.formats.validate import read_checked_edges

from graphprep.pipeline.core.arrayops import unique_ints
from graphprep.formats.fields import DataField, open_field
from graphprep.pipeline.partition.graph_ops import train_column, type_offsets
from graphprep.pipeline.partition.weights import (balance_keys, combined_constraints,
                                                  constraint_columns, counts_combined)
from graphprep.pipeline.partition.multilevel import layout
from graphprep.pipeline.partition.multilevel.buckets import (Span, key_blocks, read_spans,
                                                             span_rows, spans_into, sub_spans,
                                                             write_bucketed)
from graphprep.pipeline.partition.multilevel.layout import CSRWriter, Level


@dataclass(frozen=True)
class ChunkTask:
    path: str
    files: ChunkFiles
    etype: EdgeType
    rows: int | None
    num_src: int
    num_dst: int
    src_offset: int
    dst_offset: int
    level: Level
    target: str
    with_in_degree: bool


def bucket_chunk(task: ChunkTask) -> tuple[np.ndarray, np.ndarray | None]:
    """Writes ``target.keys.bin`` (sorted distinct keys) and, with in-degree,
    ``target.dst.bin`` (sorted destinations). Holds the chunk. Returns both files' range
    offsets (None for the second without in-degree)."""
    src, dst = read_checked_edges(task.path, task.files, rows=task.rows, num_src=task.num_src,
                                  num_dst=task.num_dst, etype=task.etype)
    src, dst = src + task.src_offset, dst + task.dst_offset
    lv, n = task.level, task.level.num_nodes
    bounds = np.arange(lv.num_ranges + 1, dtype=np.int64) * lv.range_size
    dst_off = None
    if task.with_in_degree:
        dst_sorted = np.sort(dst)
        dst_off = write_bucketed(task.target + ".dst.bin", dst_sorted, dst_sorted, bounds)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = unique_ints(np.concatenate([src * n + dst, dst * n + src]), inplace=True)
    return write_bucketed(task.target + ".keys.bin", keys, keys,
                          np.minimum(bounds, n) * n), dst_off


@dataclass(frozen=True)
class RangeTask:
    level: Level
    r: int
    keys: tuple[Span, ...]                       # this range's slice of every chunk's keys
    dsts: tuple[Span, ...]                       # ... and of its destinations (in-degree)
    type_spans: tuple[tuple[int, int], ...]      # (offset, count) per node type
    type_columns: bool                           # one count column per type (else ones)
    train: tuple[DataField | None, ...] | None   # per type: its train_mask (None: no train col)
    with_in_degree: bool


def build_range(task: RangeTask) -> tuple[int, int]:
    """Merge range ``r`` into its CSR and fill its vertex-weight rows. Returns (stored
    entries, train nodes). Holds a block of the range's incoming keys (``key_blocks``) and a
    few arrays per node of the range."""
    lv, r = task.level, task.r
    start, stop = lv.bounds(r)
    n = lv.num_nodes
    limit = layout.BLOCK_ENTRIES
    degree = np.zeros(stop - start, dtype=np.int64)
    for group in span_rows(task.dsts, limit):
        degree += np.bincount(read_spans(group)[:, 0] - start, minlength=stop - start)
    blocks = key_blocks(task.keys, start, stop, n, limit)
    csr = CSRWriter(lv, r, len(blocks))
    entries = 0
    for _, _, lo, hi in blocks:
        # each chunk's slice is sorted: the block is as many sorted runs as chunks
        keys = unique_ints(read_spans(sub_spans(task.keys, lo, hi))[:, 0], inplace=True,
                           presorted=True)
        csr.add(keys // n - start, keys % n, None)
        entries += len(keys)
        del keys                              # not held while the next block is read
    csr.close()
    vw = np.array(lv.vwgt()[start:stop])
    ids = np.arange(start, stop)
    col = 0
    if task.type_columns:
        for off, count in task.type_spans:
            vw[:, col] = (ids >= off) & (ids < off + count)
            col += 1
    else:
        vw[:, col] = 1
        col += 1
    trains = 0
    if task.train is not None:
        for (off, count), field in zip(task.type_spans, task.train):
            a, b = max(start, off), min(stop, off + count)
            if field is not None and a < b:
                vw[a - start:b - start, col] = np.asarray(field.read(a - off, b - off)
                                                          ).astype(bool)
        trains = int(vw[:, col].sum())
        col += 1
    if task.with_in_degree:
        vw[:, col] = degree
    write_rows(lv.path("vwgt.npy"), start, vw)
    return entries, trains


def build_level0(graph: ChunkedGraph, balance: tuple[str, ...], folder: str,
                 range_size: int, runner) -> Level:
    """Shuffle the input into level 0 under ``folder``; returns the level. Its vertex weights
    are the base columns: node counts (``count_cols``), then train and in-degree where
    ``balance`` names them; ``fold_constraints`` combines them as ``balance`` says."""
    offsets = type_offsets(graph)
    n = sum(graph.num_nodes.values())
    keys = balance_keys(balance)
    type_columns = "ntypes" in keys and len(graph.node_types) > 1
    count_cols = len(graph.node_types) if type_columns else 1
    with_train, with_deg = "train" in keys, "edges" in keys
    ncon = count_cols + with_train + with_deg
    os.makedirs(folder, exist_ok=True)
    level = Level(folder, n, range_size, ncon, count_cols)
    new_npy(level.path("vwgt.npy"), (n, ncon))
    scratch = os.path.join(folder, "shuffle")
    os.makedirs(scratch, exist_ok=True)
    tasks = []
    for et in graph.edge_types:
        for rel, rows in zip(graph.edges[et].files, graph.edge_chunks[et]):
            tasks.append(ChunkTask(graph.path(rel), graph.edges[et], et, rows,
                                   graph.num_nodes[et.src], graph.num_nodes[et.dst],
                                   offsets[et.src], offsets[et.dst], level,
                                   os.path.join(scratch, f"c{len(tasks):06d}"), with_deg))
    bucketed = runner(bucket_chunk, tasks, "multilevel: shuffle edges")
    train = None
    if with_train:
        if not any("train_mask" in graph.node_data.get(t, {}) for t in graph.node_types):
            train_column(graph, 0)            # raises its FormatError
        train = tuple(open_field(graph, graph.node_data[t]["train_mask"],
                                 f"node_data.{t}.train_mask", graph.num_nodes[t],
                                 graph.node_chunks[t], "ignore")
                      if "train_mask" in graph.node_data.get(t, {}) else None
                      for t in graph.node_types)
    spans = tuple((offsets[t], graph.num_nodes[t]) for t in graph.node_types)
    keys = [t.target + ".keys.bin" for t in tasks]
    dsts = [t.target + ".dst.bin" for t in tasks] if with_deg else []
    base = RangeTask(level, 0, (), (), spans, type_columns, train, with_deg)
    done = runner(build_range, [
        replace(base, r=r, keys=spans_into(keys, [b[0] for b in bucketed], r),
                dsts=spans_into(dsts, [b[1] for b in bucketed], r) if with_deg else ())
        for r in range(level.num_ranges)], "multilevel: range CSR")
    shutil.rmtree(scratch)
    if with_train and sum(t for _, t in done) == 0:
        train_column(graph, 0)                # the same error as --method metis
    return level


def _by_key(vw: np.ndarray, count_cols: int, keys: frozenset[str]) -> dict[str, np.ndarray]:
    """Level 0's base columns (``build_level0``) of the rows ``vw``, per key."""
    base, col = {"ntypes": vw[:, :count_cols]}, count_cols
    for key in ("train", "edges"):
        if key in keys:
            base[key] = vw[:, col:col + 1]
            col += 1
    return base


@dataclass(frozen=True)
class FoldTask:
    level: Level
    r: int
    balance: tuple[str, ...]
    totals: tuple[int, ...]      # the base columns' totals
    target: str                  # the folded ``vwgt.npy``


def fold_range(task: FoldTask) -> None:
    """Range ``r``'s rows of the folded vertex weights: the node counts, then one column per
    other constraint (``weights.constraint_columns``). Holds the range's rows."""
    lv, keys = task.level, balance_keys(task.balance)
    start, stop = lv.bounds(task.r)
    base = _by_key(np.asarray(lv.vwgt()[start:stop]), lv.count_cols, keys)
    totals = {k: v[0] for k, v in _by_key(np.asarray([task.totals]), lv.count_cols,
                                          keys).items()}
    columns = constraint_columns(base, task.balance, totals, lv.num_nodes)
    if counts_combined(task.balance):      # coarsening and refinement still count nodes
        columns.insert(0, base["ntypes"])
    write_rows(task.target, start, np.concatenate(columns, axis=1))


def fold_constraints(level: Level, balance: tuple[str, ...], totals: np.ndarray,
                     runner) -> Level:
    """``level`` (level 0) with its base columns folded into ``balance``'s constraints where
    some are combined (``a+b``: one weight), range by range; else ``level`` itself. The node
    count columns stay first, uncapped when ``ntypes`` is combined."""
    if not combined_constraints(balance):
        return level
    folded = replace(level, ncon=level.count_cols + sum(c != "ntypes" for c in balance))
    target = level.path("vwgt.folded.npy")
    new_npy(target, (level.num_nodes, folded.ncon))
    runner(fold_range, [FoldTask(level, r, balance, tuple(int(t) for t in totals), target)
                        for r in range(level.num_ranges)], "multilevel: combine weights")
    os.replace(target, level.path("vwgt.npy"))
    return folded
