"""Partition statistics, streamed over the chunks of the graph and of the assignment.

One task per edge chunk (holds the chunk; looks up parts in the memory-mapped assignment;
writes the distinct halo sources of each part to a scratch file), one per node range (holds
the range and its masks), and one per (node type, part) that counts distinct halo nodes with a
1-byte-per-node bitmap, reading one scratch file at a time. The client merges small counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import os
import shutil
import tempfile

import numpy as np

from graphprep.formats import ChunkedGraph, ChunkFiles, EdgeType
from graphprep.formats.assignment import Assignment
from graphprep.formats.output import save_npy
from graphprep.formats.validate import read_checked_edges
from graphprep.pipeline.core.arrayops import unique_ints
from graphprep.formats.fields import DataField, open_field
from graphprep.pipeline.partition.weights import combined_constraints, constraint_keys

SPLITS = ("train_mask", "val_mask", "test_mask")
NODE_SLICE = 1 << 22


@dataclass(frozen=True)
class EdgeStatsTask:
    path: str
    files: ChunkFiles
    etype: EdgeType
    assignment: Assignment
    num_src: int
    scratch: str
    index: int
    num_dst: int
    rows: int | None = None          # declared in the metadata (None: not checked)


def edge_chunk_stats(task: EdgeStatsTask):
    """``(owned edges per part, cut edges)``; writes each part's distinct halo sources."""
    p = task.assignment.meta.num_parts
    # Checked before the IDs index the assignment: a negative one would read from its end.
    src, dst = read_checked_edges(task.path, task.files, rows=task.rows, num_src=task.num_src,
                                  num_dst=task.num_dst, etype=task.etype)
    ps = np.asarray(task.assignment.parts_of(task.etype.src)[src])
    pd = np.asarray(task.assignment.parts_of(task.etype.dst)[dst])
    cut = ps != pd
    keys = unique_ints(pd[cut].astype(np.int64) * task.num_src + src[cut], inplace=True)
    bounds = np.searchsorted(keys, np.arange(p + 1) * task.num_src)
    for q in range(p):
        if bounds[q + 1] > bounds[q]:
            folder = os.path.join(task.scratch, task.etype.src, f"p{q:05d}")
            os.makedirs(folder, exist_ok=True)
            save_npy(os.path.join(folder, f"c{task.index:06d}.npy"),
                    keys[bounds[q]:bounds[q + 1]] - q * task.num_src)
    return np.bincount(pd, minlength=p), int(cut.sum())


def count_halo(task: tuple[str, int]) -> int:
    """Distinct halo nodes in one (type, part) scratch folder: a bitmap of the type's nodes."""
    folder, num_nodes = task
    if not os.path.isdir(folder):
        return 0
    seen = np.zeros(num_nodes, dtype=bool)
    for f in os.listdir(folder):
        seen[np.load(os.path.join(folder, f))] = True
    return int(seen.sum())


@dataclass(frozen=True)
class NodeStatsTask:
    ntype: str
    start: int
    stop: int
    assignment: Assignment
    masks: tuple[tuple[str, DataField], ...]


def node_range_stats(task: NodeStatsTask) -> dict[str, np.ndarray]:
    p = task.assignment.meta.num_parts
    parts = np.asarray(task.assignment.parts_of(task.ntype)[task.start:task.stop])
    out = {"nodes": np.bincount(parts, minlength=p)}
    for name, source in task.masks:
        mask = np.asarray(source.read(task.start, task.stop)).astype(bool)
        out[name] = np.bincount(parts[mask], minlength=p)
    return out


def _imbalance(counts) -> float:
    counts = np.asarray(counts, dtype=float)
    return round(float(counts.max() / counts.mean()), 4) if counts.sum() else 1.0


def partition_stats(graph: ChunkedGraph, assignment: Assignment, runner) -> dict:
    """Edge cut, per-part nodes/edges/splits/halo and imbalance per constraint (a JSON dict)."""
    p = assignment.meta.num_parts
    scratch = tempfile.mkdtemp(prefix="graphprep-stats-")
    chunks = [(et, rel, rows) for et in graph.edge_types
              for rel, rows in zip(graph.edges[et].files, graph.edge_chunks[et])]
    edge_tasks = [EdgeStatsTask(graph.path(rel), graph.edges[et], et, assignment,
                                graph.num_nodes[et.src], scratch, i, graph.num_nodes[et.dst],
                                rows)
                  for i, (et, rel, rows) in enumerate(chunks)]
    node_tasks = []
    for t in graph.node_types:
        # Opened from the chunk headers: rows must add up to the type's count.
        masks = tuple((name, open_field(graph, graph.node_data[t][name],
                                        f"node_data.{t}.{name}", graph.num_nodes[t],
                                        graph.node_chunks[t], "ignore"))
                      for name in SPLITS if name in graph.node_data.get(t, {}))
        node_tasks += [NodeStatsTask(t, s, min(s + NODE_SLICE, graph.num_nodes[t]), assignment,
                                     masks) for s in range(0, graph.num_nodes[t], NODE_SLICE)]
    try:
        edge_results = runner(edge_chunk_stats, edge_tasks, "stats (edges)")
        halo_tasks = [(os.path.join(scratch, t, f"p{q:05d}"), graph.num_nodes[t])
                      for t in graph.node_types for q in range(p)]
        halo_counts = runner(count_halo, halo_tasks, "stats (halo)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    node_results = runner(node_range_stats, node_tasks, "stats (nodes)")

    edges_per_part = np.zeros(p, dtype=np.int64)
    cut = 0
    for owned, n_cut in edge_results:
        edges_per_part += owned
        cut += n_cut
    halo = {t: halo_counts[i * p:(i + 1) * p] for i, t in enumerate(graph.node_types)}
    nodes = {t: np.zeros(p, dtype=np.int64) for t in graph.node_types}
    splits = {name: np.zeros(p, dtype=np.int64) for name in SPLITS}
    has_split = set()
    for task, res in zip(node_tasks, node_results):
        nodes[task.ntype] += res["nodes"]
        for name in SPLITS:
            if name in res:
                splits[name] += res[name]
                has_split.add(name)
    total_edges = sum(graph.num_edges.values())
    stats = {
        "num_parts": p,
        "num_edges": total_edges,
        "edge_cut": cut,
        "cut_ratio": round(cut / total_edges, 6) if total_edges else 0.0,
        "nodes_per_part": {t: v.tolist() for t, v in nodes.items()},
        "edges_per_part": edges_per_part.tolist(),
        "halo_per_part": halo,
    }
    for name in SPLITS:
        if name in has_split:
            stats[f"{name.split('_')[0]}_per_part"] = splits[name].tolist()
    all_nodes = sum(nodes.values())
    imbalance = {"nodes": _imbalance(all_nodes), "edges": _imbalance(edges_per_part)}
    imbalance.update({f"nodes[{t}]": _imbalance(v) for t, v in nodes.items()})
    if "train_mask" in has_split:
        imbalance["train"] = _imbalance(splits["train_mask"])
    stats["imbalance"] = imbalance
    return stats


def combined_imbalance(stats: dict, balance: tuple[str, ...]) -> dict[str, float]:
    """Imbalance (max/mean) of each combined constraint of ``balance`` (``ntypes+edges``: per
    part, its share of the nodes plus its share of the edges; node types counted apart when
    there are several), from the per-part figures of :func:`partition_stats`."""
    nodes = [np.asarray(v) for v in stats["nodes_per_part"].values()]
    per_key = {"ntypes": nodes if len(nodes) > 1 else [sum(nodes)],
               "edges": [np.asarray(stats["edges_per_part"])],
               "train": [np.asarray(stats.get("train_per_part", [0]))]}
    out = {}
    for constraint in combined_constraints(balance):
        share = sum(v / v.sum() for key in constraint_keys(constraint) for v in per_key[key]
                    if v.sum())
        out[constraint] = _imbalance(share)
    return out


def format_table(stats: dict) -> str:
    """The statistics as a text table, one row per part."""
    p = stats["num_parts"]
    cols = [(f"nodes[{t}]", v) for t, v in stats["nodes_per_part"].items()]
    cols.append(("edges", stats["edges_per_part"]))
    cols += [(k.replace("_per_part", ""), stats[k]) for k in
             ("train_per_part", "val_per_part", "test_per_part") if k in stats]
    cols += [(f"halo[{t}]", v) for t, v in stats["halo_per_part"].items() if sum(v)]
    widths = [max(len(name), *(len(f"{x:,}") for x in vals)) for name, vals in cols]
    lines = ["part  " + "  ".join(name.rjust(w) for (name, _), w in zip(cols, widths))]
    for i in range(p):
        lines.append(f"{i:>4}  " + "  ".join(f"{vals[i]:,}".rjust(w)
                                            for (_, vals), w in zip(cols, widths)))
    imb = ", ".join(f"{k} {v:.3f}" for k, v in stats["imbalance"].items())
    lines.append(f"edge cut {stats['edge_cut']:,} of {stats['num_edges']:,} edges "
                 f"({100 * stats['cut_ratio']:.2f}%); imbalance (max/mean): {imb}")
    return "\n".join(lines)
