"""DGL's in-memory partitioning against graphprep's partition + dispatch, where the graph fits
in memory (issue 32); prints one JSON object.

On Graph500's R-MAT at scale 20 (``prep synth --generator rmat``: 2^20 nodes, 16.8 M edges,
32-dim features, labels and masks), 4 parts:

1. DGL, in a fresh Python (its own peak RSS, ``VmHWM``): the edge rows of the same Parquet
   chunks and the node data (features, labels, masks) read into one process, a ``DGLGraph``
   built from them, then DGL 1.1.3's ``dgl.distributed.partition_graph(g, ..., num_parts=4,
   part_method="metis", balance_edges=True)``, which runs METIS and writes its parts
   (graph.dgl, node_feat.dgl per part). Reported: the seconds of the read + build and of
   ``partition_graph`` (its parts written), peak RSS, and from DGL's own part config the node
   and edge imbalance (max/mean of inner nodes and edges per part) and the edge cut (input edge
   rows whose ends DGL put in different parts, counted as our statistics count it).
2. graphprep, for ``--methods`` auto, kaminpar and metis (default ``--balance``: node counts,
   edges and training nodes): ``prep partition --method M`` then ``prep dispatch``, each on a
   fresh 2-worker cluster (as bench_partition.py measures: the cluster's start not counted);
   the seconds of each step, the busier worker's peak RSS in each, node and edge imbalance and
   edge cut from the partition's statistics; ``auto`` also says what it chose.

Ratios to DGL: total seconds (partition + dispatch over read + build + partition_graph) and the
larger worker peak over DGL's peak. DGL balances edges here (``balance_edges``, as the issue
asks: METIS's one vertex weight is then the in-degree, node counts are not balanced);
graphprep's default balances node counts, edges and training nodes. Needs dgl and torch (the
test extra: ``pip install -c constraints.txt -e '.[test]'``) and kaminpar (a dependency of
graphprep); a peer that does not import is reported with the reason.
``--quick``: R-MAT scale 13 (131,072 edges), 8-dim features (seconds; for the test suite).
DGL gets every input edge row, as prep dispatch keeps them: R-MAT repeats some edges and has
self-loops, and DGL 1.1.3 hands its symmetrized graph to METIS without removing them (METIS
wants a simple graph); at scales 10-12 that aborted the process (``free(): corrupted unsorted
chunks``, dmlc/dgl#3224: duplicate edges), from scale 13 it ran. Note also that with
``balance_edges`` alone DGL gives METIS one vertex weight, the in-degree: it balances edges,
not node counts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fresh_cluster, parse_args, run_baseline, worker_peak_rss_mb  # noqa: E402

from graphprep.pipeline import api  # noqa: E402
from graphprep.pipeline.synth import SynthSpec  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402

DGL = """
import json, os, time
import numpy as np, pyarrow.parquet as pq, torch, dgl
from graphprep.formats import load_chunked_graph, read_array_chunk
from graphprep.pipeline.partition.graph_ops import edge_cut
t = time.perf_counter()
g_ = load_chunked_graph({graph!r})
files = [g_.path(f) for f in g_.edges[g_.edge_types[0]].files]
tables = [pq.read_table(f) for f in files]
src = np.concatenate([t_.column("src").to_numpy() for t_ in tables])
dst = np.concatenate([t_.column("dst").to_numpy() for t_ in tables])
del tables
n = g_.num_nodes["_N"]
g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
del src, dst
for name, chunks in g_.node_data["_N"].items():
    g.ndata[name] = torch.from_numpy(np.concatenate(
        [np.asarray(read_array_chunk(g_.path(f), chunks)) for f in chunks.files]))
build_s = time.perf_counter() - t
t1 = time.perf_counter()
orig_nids, _ = dgl.distributed.partition_graph(
    g, "graph", {parts}, {out!r}, part_method="metis", balance_edges=True,
    return_mapping=True)
partition_s = time.perf_counter() - t1
seconds = time.perf_counter() - t
del g
conf = json.load(open(os.path.join({out!r}, "graph.json")))
node_ranges = np.asarray(conf["node_map"]["_N"])
edge_ranges = np.asarray(conf["edge_map"][next(iter(conf["edge_map"]))])
nodes = node_ranges[:, 1] - node_ranges[:, 0]
edges = edge_ranges[:, 1] - edge_ranges[:, 0]
parts = np.empty(n, dtype=np.int64)      # the part of each original node ID
parts[orig_nids.numpy()] = np.repeat(np.arange({parts}), nodes)
cut = edge_cut(g_, parts)
RESULT = {{"seconds": seconds, "seconds_read_and_build": build_s,
          "seconds_partition_graph": partition_s, "edge_cut": cut,
          "cut_ratio": round(cut / int(edges.sum()), 6),
          "imbalance_nodes": round(float(nodes.max() / nodes.mean()), 4),
          "imbalance_edges": round(float(edges.max() / edges.mean()), 4),
          "nodes_per_part": nodes.tolist(), "edges_per_part": edges.tolist()}}
"""


def missing(*names: str) -> str | None:
    """The reason a peer cannot run here (the first of ``names`` that does not import)."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            return (f"{name} is not installed: pip install -c constraints.txt -e '.[test]' "
                    "(from the project root)")
    return None


def dgl_partition(graph: str, out: str, parts: int) -> dict:
    """``partition_graph`` in a fresh process (``DGL``); its parts removed after."""
    try:
        r = run_baseline(DGL.format(graph=graph, out=out, parts=parts))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {k: round(v, 2) if isinstance(v, float) and not k.startswith(("cut", "imb")) else v
            for k, v in r.items()}


def ours(graph: str, work: str, method: str, parts: int) -> dict:
    """``prep partition --method method`` then ``prep dispatch``, each on a fresh cluster."""
    assignment, dispatched = os.path.join(work, f"a-{method}"), os.path.join(work, f"d-{method}")
    with fresh_cluster() as (opts, client):
        t = time.perf_counter()
        a = api.partition(graph, assignment, num_parts=parts, method=method, overwrite=True,
                          scheduler=opts.scheduler, progress=False)
        partition_s = time.perf_counter() - t
        partition_peak = worker_peak_rss_mb(client)
    with fresh_cluster() as (opts, client):
        t = time.perf_counter()
        api.dispatch(graph, assignment, dispatched, overwrite=True, scheduler=opts.scheduler,
                     progress=False)
        dispatch_s = time.perf_counter() - t
        dispatch_peak = worker_peak_rss_mb(client)
    shutil.rmtree(dispatched, ignore_errors=True)
    s = a.stats
    row = {"partition_seconds": round(partition_s, 2), "dispatch_seconds": round(dispatch_s, 2),
           "seconds": round(partition_s + dispatch_s, 2),
           "partition_worker_peak_rss_mb": partition_peak,
           "dispatch_worker_peak_rss_mb": dispatch_peak,
           "worker_peak_rss_mb": max(partition_peak + dispatch_peak),
           "edge_cut": s["edge_cut"], "cut_ratio": s["cut_ratio"],
           "imbalance_nodes": s["imbalance"]["nodes"],
           "imbalance_edges": s["imbalance"]["edges"],
           "imbalance_train": s["imbalance"].get("train"), "warnings": s["warnings"]}
    if "auto" in s:
        row["auto_chose"] = s["auto"]["chosen"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20, help="R-MAT: 2^SCALE nodes")
    ap.add_argument("--edge-factor", type=int, default=16, help="R-MAT: edges per node")
    ap.add_argument("--feat-dim", type=int, default=32)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--methods", default="auto,kaminpar,metis",
                    help="graphprep's partition methods to run (each followed by dispatch)")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp folder)")
    args = parse_args(ap, {"scale": 13, "feat_dim": 8})
    work = args.workdir or tempfile.mkdtemp(prefix="bench_dgl_partition_")
    os.makedirs(work, exist_ok=True)
    try:
        graph = os.path.join(work, "graph")
        spec = SynthSpec.from_scale(args.scale, args.edge_factor, feat_dim=args.feat_dim)
        with fresh_cluster() as (opts, _):
            run_synth(spec, graph, 1 << 20, opts)
        result = {"graph": {"generator": "rmat", "scale": args.scale, "nodes": spec.num_nodes,
                            "edges": spec.num_edges, "feat_dim": args.feat_dim},
                  "parts": args.parts}
        reason = missing("torch", "dgl")
        dgl = result["dgl"] = ({"error": reason} if reason else
                               dgl_partition(graph, os.path.join(work, "dgl"), args.parts))
        result["graphprep"] = {}
        for method in args.methods.split(","):
            reason = missing("kaminpar") if method == "kaminpar" else None
            row = result["graphprep"][method] = ({"error": reason} if reason else
                                                 ours(graph, work, method, args.parts))
            if "seconds" in dgl and "seconds" in row:
                row["time_vs_dgl"] = round(row["seconds"] / dgl["seconds"], 3)
                row["peak_rss_vs_dgl"] = round(row["worker_peak_rss_mb"] / dgl["peak_rss_mb"],
                                               3)
        print(json.dumps(result, indent=2))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
