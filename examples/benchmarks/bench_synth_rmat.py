"""Benchmark and profile of ``prep synth --generator rmat``; prints one JSON object.

At ``--scale`` (default 20, edge factor 16): ``prep synth`` end to end (fresh workers: time,
edges/s, worker peak RSS) for R-MAT and, in the same run, for the planted generator at the same
node and edge counts; edge generation alone in this process (one core, best of two); and the
graph's shape read back: isolated nodes against the analytic R-MAT expectation, the top hub's
in-degree against ``m (a+c)^S``, repeated edges and self-loops. At ``--label-scale`` (default
14): the same shape figures, each class's mean degree over the mean, the isolated share of the
last class, edge homophily and a nearest-class-mean classifier on the features alone (class
means from the train mask, accuracy on the test mask). Holds the graph in memory (16 B/edge).

``--quick``: scale 12, label scale 11 (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import fresh_cluster, parse_args, timer, worker_peak_rss_mb  # noqa: E402

from graphprep.formats import EdgeType, load_chunked_graph, read_array_chunk, read_edge_chunk  # noqa: E402
from graphprep.pipeline.rmat import expected_isolated_fraction  # noqa: E402
from graphprep.pipeline.synth import SynthSpec, generate_edges, make_spec  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402


def synth_run(spec: SynthSpec, out: str) -> dict:
    with fresh_cluster() as (opts, client):
        with timer() as t:
            run_synth(spec, out, 1 << 20, opts)
        rss = worker_peak_rss_mb(client)
    return {"seconds": round(t["s"], 2), "edges_per_s": round(spec.num_edges / t["s"]),
            "worker_peak_rss_mb": rss}


def edge_generation_per_s(spec: SynthSpec) -> float:
    """Edges/s of ``generate_edges`` alone, one core, chunks of 2^20, best of two."""
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        for start in range(0, spec.num_edges, 1 << 20):
            generate_edges(spec, 0, start, min(start + (1 << 20), spec.num_edges))
        best = min(best, time.perf_counter() - t)
    return spec.num_edges / best


def read_graph(path: str):
    g = load_chunked_graph(path)
    et = EdgeType("_N", "_E", "_N")
    pairs = [read_edge_chunk(g.path(f), g.edges[et]) for f in g.edges[et].files]
    src = np.concatenate([p[0] for p in pairs])
    dst = np.concatenate([p[1] for p in pairs])

    def data(name):
        files = g.node_data["_N"][name]
        return np.concatenate([np.asarray(read_array_chunk(g.path(f), files))
                               for f in files.files])
    return g.num_nodes["_N"], src, dst, data


def shape(spec: SynthSpec, n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    a, _, c = spec.rmat_abc
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    indeg = np.bincount(dst, minlength=n)
    keys = src * n + dst
    keys.sort()
    distinct = 1 + int(np.count_nonzero(keys[1:] != keys[:-1]))
    return {"nodes": n, "edges": len(src),
            "isolated_fraction": round(float((deg == 0).mean()), 4),
            "isolated_expected": round(expected_isolated_fraction(spec.scale, spec.edge_factor,
                                                                  spec.rmat_abc), 4),
            "max_in_degree": int(indeg.max()),
            "max_in_degree_expected": round(len(src) * (a + c) ** spec.scale),
            "repeated_edge_fraction": round(1 - distinct / len(src), 4),
            "self_loop_fraction": round(float((src == dst).mean()), 6)}


def labels(spec: SynthSpec, n, src, dst, data) -> dict:
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    label, feat = data("label"), data("feat")
    train, test = data("train_mask"), data("test_mask")
    k = spec.num_classes
    means = np.stack([feat[train & (label == c)].mean(0) for c in range(k)])
    pred = np.argmin(((feat[test, None, :] - means[None]) ** 2).sum(-1), axis=1)
    return {"class_sizes": np.bincount(label, minlength=k).tolist(),
            "class_degree_over_mean": [round(float(deg[label == c].mean() / deg.mean()), 2)
                                       for c in range(k)],
            "last_class_isolated_fraction": round(float((deg[label == k - 1] == 0).mean()), 3),
            "edge_homophily": round(float((label[src] == label[dst]).mean()), 3),
            "nearest_class_mean_accuracy": round(float((pred == label[test]).mean()), 3),
            "chance": round(1 / k, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--label-scale", type=int, default=14)
    args = parse_args(ap, quick={"scale": 12, "label_scale": 11})
    tmp = tempfile.mkdtemp(prefix="bench_synth_rmat_", dir=os.getcwd())
    try:
        rmat = make_spec("rmat", scale=args.scale, edge_factor=args.edge_factor)
        planted = make_spec("planted", nodes=rmat.num_nodes, edges=rmat.num_edges)
        result = {"load_average_1min": round(os.getloadavg()[0], 1),
                  "scale": args.scale, "edge_factor": args.edge_factor,
                  "synth_rmat": synth_run(rmat, os.path.join(tmp, "rmat")),
                  "synth_planted_same_size": synth_run(planted, os.path.join(tmp, "planted"))}
        result["edge_generation_per_s"] = {"rmat": round(edge_generation_per_s(rmat)),
                                           "planted": round(edge_generation_per_s(planted))}
        n, src, dst, _ = read_graph(os.path.join(tmp, "rmat"))
        result["shape"] = shape(rmat, n, src, dst)
        del src, dst
        small = make_spec("rmat", scale=args.label_scale, edge_factor=args.edge_factor)
        with fresh_cluster() as (opts, _):
            run_synth(small, os.path.join(tmp, "small"), 1 << 20, opts)
        n, src, dst, data = read_graph(os.path.join(tmp, "small"))
        result["label_scale"] = {**shape(small, n, src, dst),
                                 **labels(small, n, src, dst, data)}
        result["load_average_1min_end"] = round(os.getloadavg()[0], 1)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
