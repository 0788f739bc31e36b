"""Level 0: the input chunks of every edge type -> one symmetric, simple range CSR.

Node types are offset into one ID space (``metis_method.type_offsets``). Phase 1, one task per
input edge chunk: both directions of every non-loop edge as keys ``u * n + v``, deduplicated
and sorted (so they come bucketed by the range of ``u``), plus, for ``--balance edges``, the
sorted destinations (in-degree counts loops and duplicates, as ``--method metis`` does).
Phase 2, one task per node range: its slice of every phase-1 file, deduplicated, written as
the range's CSR with unit weights, and its rows of the vertex weights. A task holds one chunk
(phase 1) or one range's entries (phase 2).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from formats import ChunkedGraph, ChunkFiles, EdgeType
from formats.output import save_npy
from formats.validate import read_checked_edges

from ...arrayops import unique_ints
from ...convert.sources import DataField, open_field
from ..metis_method import train_column, type_offsets
from .layout import Level, new_array, write_csr


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


def bucket_chunk(task: ChunkTask) -> None:
    """Writes ``target.keys.npy`` (sorted distinct keys) and ``target.koff.npy`` (range
    offsets); with in-degree also ``target.dst.npy``/``target.doff.npy``. Holds the chunk."""
    src, dst = read_checked_edges(task.path, task.files, rows=task.rows, num_src=task.num_src,
                                  num_dst=task.num_dst, etype=task.etype)
    src, dst = src + task.src_offset, dst + task.dst_offset
    lv, n = task.level, task.level.num_nodes
    bounds = np.arange(lv.num_ranges + 1, dtype=np.int64) * lv.range_size
    if task.with_in_degree:
        dst_sorted = np.sort(dst)
        save_npy(task.target + ".dst.npy", dst_sorted)
        save_npy(task.target + ".doff.npy", np.searchsorted(dst_sorted, bounds))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = unique_ints(np.concatenate([src * n + dst, dst * n + src]), inplace=True)
    save_npy(task.target + ".keys.npy", keys)
    save_npy(task.target + ".koff.npy", np.searchsorted(keys, np.minimum(bounds, n) * n))


@dataclass(frozen=True)
class RangeTask:
    level: Level
    r: int
    sources: tuple[str, ...]
    type_spans: tuple[tuple[int, int], ...]      # (offset, count) per node type
    type_columns: bool                           # one count column per type (else ones)
    train: tuple[DataField | None, ...] | None   # per type: its train_mask (None: no train col)
    with_in_degree: bool


def build_range(task: RangeTask) -> tuple[int, int]:
    """Merge range ``r`` into its CSR and fill its vertex-weight rows. Returns (stored
    entries, train nodes)."""
    lv, r = task.level, task.r
    start, stop = lv.bounds(r)
    n = lv.num_nodes
    pieces, degree = [], np.zeros(stop - start, dtype=np.int64)
    for s in task.sources:
        off = np.load(s + ".koff.npy")
        pieces.append(np.asarray(np.load(s + ".keys.npy", mmap_mode="r")[off[r]:off[r + 1]]))
        if task.with_in_degree:
            doff = np.load(s + ".doff.npy")
            d = np.load(s + ".dst.npy", mmap_mode="r")[doff[r]:doff[r + 1]]
            degree += np.bincount(np.asarray(d) - start, minlength=stop - start)
    keys = unique_ints(np.concatenate(pieces), inplace=True) if pieces else \
        np.empty(0, np.int64)
    write_csr(lv, r, keys // n - start, keys % n, np.ones(len(keys), dtype=np.int64))
    vw = lv.vwgt("r+")
    ids = np.arange(start, stop)
    col = 0
    if task.type_columns:
        for off, count in task.type_spans:
            vw[start:stop, col] = (ids >= off) & (ids < off + count)
            col += 1
    else:
        vw[start:stop, col] = 1
        col += 1
    trains = 0
    if task.train is not None:
        for (off, count), field in zip(task.type_spans, task.train):
            a, b = max(start, off), min(stop, off + count)
            if field is not None and a < b:
                vw[a:b, col] = np.asarray(field.read(a - off, b - off)).astype(bool)
        trains = int(vw[start:stop, col].sum())
        col += 1
    if task.with_in_degree:
        vw[start:stop, col] = degree
    vw.flush()
    return len(keys), trains


def build_level0(graph: ChunkedGraph, balance: tuple[str, ...], folder: str,
                 range_size: int, runner) -> Level:
    """Shuffle the input into level 0 under ``folder``; returns the level."""
    offsets = type_offsets(graph)
    n = sum(graph.num_nodes.values())
    type_columns = "ntypes" in balance and len(graph.node_types) > 1
    count_cols = len(graph.node_types) if type_columns else 1
    with_train, with_deg = "train" in balance, "edges" in balance
    ncon = count_cols + with_train + with_deg
    os.makedirs(folder, exist_ok=True)
    level = Level(folder, n, range_size, ncon, count_cols)
    new_array(level.path("vwgt.npy"), (n, ncon))
    scratch = os.path.join(folder, "shuffle")
    os.makedirs(scratch, exist_ok=True)
    tasks = []
    for et in graph.edge_types:
        for rel, rows in zip(graph.edges[et].files, graph.edge_chunks[et]):
            tasks.append(ChunkTask(graph.path(rel), graph.edges[et], et, rows,
                                   graph.num_nodes[et.src], graph.num_nodes[et.dst],
                                   offsets[et.src], offsets[et.dst], level,
                                   os.path.join(scratch, f"c{len(tasks):06d}"), with_deg))
    runner(bucket_chunk, tasks, "multilevel: shuffle edges")
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
    done = runner(build_range, [RangeTask(level, r, tuple(t.target for t in tasks), spans,
                                   type_columns, train, with_deg)
                         for r in range(level.num_ranges)], "multilevel: range CSR")
    shutil.rmtree(scratch)
    if with_train and sum(t for _, t in done) == 0:
        train_column(graph, 0)                # the same error as --method metis
    return level
