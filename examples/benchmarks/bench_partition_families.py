#!/usr/bin/env python
"""Multilevel's edge cut against METIS's on graph families of different shape, with coarsening
forced (issue 18: ``--coarse-edges`` = edges/32, at least 10^4), k in 2, 4, 8; prints one JSON
object with every ratio, their geometric mean and each family's time.

Families: random geometric (mesh-like), a square grid, Chung-Lu power law (no communities), a
block model of many small blocks, and the ``prep synth`` graph; Cora and CiteSeer (bundled)
forced to 1000 coarse edges. Both partitioners run in this process on the same chunked graph
(``local_runner``: quality, not throughput; ``bench_partition.py`` measures time and memory).

    python examples/benchmarks/bench_partition_families.py [--scale 1.0] [--coarsen-rounds N]

``--quick`` (the test suite): ``--scale 0.02`` and a budget floor of 200 coarse edges instead of
10^4, so that the small graphs are still coarsened (the ``*_ge_1e5_edges`` keys then cover
smaller graphs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import parse_args  # noqa: E402
from graphprep.formats import load_chunked_graph  # noqa: E402
from graphprep.pipeline import api  # noqa: E402
from graphprep.pipeline.core.cluster import local_runner  # noqa: E402
from graphprep.pipeline.partition.base import PartitionOptions  # noqa: E402
from graphprep.pipeline.partition.graph_ops import edge_cut  # noqa: E402
from graphprep.pipeline.partition.metis_method import MetisPartitioner  # noqa: E402
from graphprep.pipeline.partition.multilevel import MultilevelPartitioner  # noqa: E402

PLANETOID = os.path.join(ROOT, "examples", "data", "planetoid")


def random_geometric(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Points in the unit square joined within the radius of ~8 neighbours on average (above
    the percolation threshold: one giant component), found through a grid of cells."""
    pts = rng.random((n, 2))
    side = int(np.sqrt(n / 8))
    cell = (pts * side).astype(np.int64).clip(0, side - 1)
    key = cell[:, 0] * side + cell[:, 1]
    order = np.argsort(key, kind="stable")
    starts = np.searchsorted(key[order], np.arange(side * side + 1))
    src, dst = [], []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            x, y = cell[:, 0] + dx, cell[:, 1] + dy
            inside = (x >= 0) & (x < side) & (y >= 0) & (y < side)
            nb = np.where(inside, x * side + y, 0)
            lo, hi = starts[nb], np.where(inside, starts[nb + 1], starts[nb])
            for j in range(int((hi - lo).max())):
                has = lo + j < hi
                i = np.flatnonzero(has)
                other = order[lo[i] + j]
                src.append(i)
                dst.append(other)
    src, dst = np.concatenate(src), np.concatenate(dst)
    keep = (src != dst) & (((pts[src] - pts[dst]) ** 2).sum(1) < 8 / (np.pi * n))
    return src[keep], dst[keep]


def grid(side: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(side * side).reshape(side, side)
    return (np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()]),
            np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()]))


def chung_lu(n: int, m: int, rng) -> tuple[np.ndarray, np.ndarray]:
    w = np.arange(1, n + 1) ** -0.7
    w /= w.sum()
    return rng.choice(n, m, p=w), rng.choice(n, m, p=w)


def block_model(blocks: int, size: int, m: int, rng, inside: float = 0.9):
    src = rng.integers(0, blocks * size, m)
    same = rng.random(m) < inside
    dst = np.where(same, src // size * size + rng.integers(0, size, m),
                   rng.integers(0, blocks * size, m))
    return src, dst


def chunked_edges(root: str, name: str, src, dst, n: int) -> str:
    path = os.path.join(root, f"{name}.npz")
    np.savez(path, src=src, dst=dst, num_nodes=np.int64(n))
    out = os.path.join(root, name)
    api.chunk(path, out, chunk_size=1 << 18, client=None)
    return out


def parts_of(partitioner, graph, k: int, coarse_edges, out: str) -> np.ndarray:
    """The part of every node (one ID space of all types) as ``partitioner`` assigns them."""
    os.makedirs(out, exist_ok=True)
    partitioner.assign(graph, PartitionOptions(k, 0, (), "cut", 0.03, coarse_edges),
                       local_runner, out)
    return np.concatenate([np.load(os.path.join(out, f"{t}.npy")) for t in graph.node_types])


def family_ratios(graph_dir: str, coarse_edges: int, rounds: int, work: str) -> dict:
    graph = load_chunked_graph(graph_dir)
    out = {}
    for k in (2, 4, 8):
        start = time.perf_counter()
        ml = parts_of(MultilevelPartitioner(range_size=4096, coarsen_rounds=rounds), graph, k,
                      coarse_edges, os.path.join(work, f"ml{k}"))
        took = time.perf_counter() - start
        ref = parts_of(MetisPartitioner(), graph, k, None, os.path.join(work, f"metis{k}"))
        cut, ref_cut = edge_cut(graph, ml), edge_cut(graph, ref)
        ratio = cut / ref_cut if ref_cut else (1.0 if cut == 0 else float("inf"))
        out[k] = {"ratio": round(ratio, 4), "cut": cut, "metis_cut": ref_cut,
                  "multilevel_s": round(took, 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="graph sizes x this")
    ap.add_argument("--coarsen-rounds", type=int, default=None,
                    help="label-propagation rounds per level (default: the partitioner's)")
    ap.add_argument("--min-coarse-edges", type=int, default=10_000,
                    help="floor of the forced budget (edges/32) on the synthetic families")
    args = parse_args(ap, {"scale": 0.02, "min_coarse_edges": 200})
    rounds = args.coarsen_rounds or MultilevelPartitioner().coarsen_rounds
    rng = np.random.default_rng(5)
    n = int(100_000 * args.scale)
    side = int(300 * np.sqrt(args.scale))
    families = {
        "random_geometric": (random_geometric(n, rng), n),
        "grid": (grid(side), side * side),
        "chung_lu": (chung_lu(n, 6 * n, rng), n),
        "block_model": (block_model(n // 100, 100, 5 * n, rng), n),
    }
    results = {}
    with tempfile.TemporaryDirectory(prefix="families-") as root:
        graphs = {name: (chunked_edges(root, name, s, d, nodes), None)
                  for name, ((s, d), nodes) in families.items()}
        synth = os.path.join(root, "synth")
        api.synth(synth, nodes=n, edges=10 * n, client=None)
        graphs["synth"] = (synth, None)
        for name in ("cora", "citeseer"):
            if os.path.exists(PLANETOID):
                out = os.path.join(root, name)
                api.chunk(PLANETOID, out, name=name, client=None)
                graphs[name] = (out, 1000)
        for name, (graph_dir, forced) in graphs.items():
            edges = sum(load_chunked_graph(graph_dir).num_edges.values())
            budget = forced or max(args.min_coarse_edges, edges // 32)
            results[name] = {"edges": edges, "coarse_edges": budget,
                             **family_ratios(graph_dir, budget, rounds,
                                             os.path.join(root, f"{name}-out"))}
    ratios = [r[k]["ratio"] for name, r in results.items() for k in (2, 4, 8)
              if name not in ("cora", "citeseer")]
    print(json.dumps({"coarsen_rounds": rounds, "families": results,
                      "geomean_ge_1e5_edges": round(float(np.exp(np.mean(np.log(ratios)))), 4),
                      "max_ge_1e5_edges": max(ratios)}, indent=1))


if __name__ == "__main__":
    main()
