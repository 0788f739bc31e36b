"""Sparse against dense node features, same graph, same run; prints one JSON object.

A graph whose nodes carry multi-hot features (bag-of-words: thousands of columns, a few dozen
set) goes through what a user runs, twice: the node table declares the feature ``sparse:``
(CSR from the table to the model's first layer) or as a dense ``features:`` list column (the
baseline: what every step did before sparse fields existed). Each run: ``prep chunk CONFIG``
-> ``prep partition -p 2`` -> ``prep dispatch`` -> ``python -m graphprep.trainer --task link`` (2
ranks, one per part). Reported per representation: bytes of the chunked graph and the parts,
the epoch's time and its forward/backward share, RPC bytes, test AUC, and the ratios.

The graph: ``--musae DIR`` reads MUSAE's Facebook page-page files as published
(github.com/benedekrozemberczki/MUSAE, ``input/``: ``facebook_edges.csv``, ``facebook.json``,
``facebook_target.csv``; 22,470 nodes, 171,002 edges, 4,714 feature columns); without it a
synthetic graph of the same shape (power-law degrees, class-correlated words, homophilous
edges). ``--quick``: a small synthetic graph (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import parse_args  # noqa: E402


def musae_graph(folder: str):
    """``(words per node, labels, src, dst, width)`` of MUSAE's Facebook files."""
    with open(os.path.join(folder, "facebook.json")) as f:
        feats = json.load(f)
    n = len(feats)
    words = [sorted(set(feats[str(i)])) for i in range(n)]
    target = pacsv.read_csv(os.path.join(folder, "facebook_target.csv"))
    labels = target.column("page_type").to_numpy(zero_copy_only=False)[
        np.argsort(target.column("id").to_numpy())]
    edges = pacsv.read_csv(os.path.join(folder, "facebook_edges.csv"))
    width = 1 + max(max(w) for w in words if w)
    return (words, labels, edges.column("id_1").to_numpy(), edges.column("id_2").to_numpy(),
            width)


def synthetic_graph(nodes: int, edges: int, width: int, active: int, seed: int = 0):
    """MUSAE-shaped: 4 classes, each with its own likelier words; power-law degrees; 80% of
    edges inside the source's class."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, 4, nodes)
    topic = rng.permutation(width).reshape(4, -1)          # each class's favourite words
    words = []
    for c in classes:
        k = max(1, int(rng.poisson(active)))
        own = rng.choice(topic[c], size=k // 2 + 1, replace=False)
        words.append(sorted(set(own.tolist()) | set(rng.integers(0, width, k // 2).tolist())))
    weight = rng.pareto(1.5, nodes) + 1
    src = rng.choice(nodes, edges, p=weight / weight.sum())
    by_class = [np.flatnonzero(classes == c) for c in range(4)]
    dst = rng.integers(0, nodes, edges)
    inside = rng.random(edges) < 0.8
    for c in range(4):
        pick = inside & (classes[src] == c)
        dst[pick] = rng.choice(by_class[c], int(pick.sum()))
    keep = src != dst
    return words, np.array([f"class{c}" for c in classes]), src[keep], dst[keep], width


def write_tables(folder: str, graph, dense: bool) -> str:
    """The node and edge tables and the config that declares ``feat`` sparse or dense."""
    words, labels, src, dst, width = graph
    os.makedirs(folder, exist_ok=True)
    keys = np.array([f"page-{i}" for i in range(len(words))])
    columns = {"key": keys, "label": labels}
    if dense:
        x = np.zeros((len(words), width), np.float32)
        for i, w in enumerate(words):
            x[i, w] = 1
        columns["feat"] = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), width)
    else:
        columns["words"] = pa.array(words, pa.list_(pa.int32()))
    pq.write_table(pa.table(columns), os.path.join(folder, "pages.parquet"),
                   row_group_size=4096)
    pq.write_table(pa.table({"a": keys[src], "b": keys[dst]}),
                   os.path.join(folder, "links.parquet"))
    node = {"type": "page", "files": "pages.parquet", "key": "key", "label": "label"}
    node.update({"features": {"feat": "feat"}} if dense else
                {"sparse": {"feat": {"indices": "words", "dim": int(width)}}})
    config = {"name": "pages", "nodes": [node],
              "edges": [{"type": ["page", "links", "page"], "files": "links.parquet",
                         "src": "a", "dst": "b",
                         "split": {"fractions": [0.85, 0.05, 0.10], "seed": 0}}]}
    path = os.path.join(folder, "pages.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def prep(*args) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphprep.pipeline.cli", *map(str, args), "--no-progress"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - start, 2)


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def run(workdir: str, graph, dense: bool, args) -> dict:
    """One representation end to end; its figures."""
    name = "dense" if dense else "sparse"
    base = os.path.join(workdir, name)
    config = write_tables(os.path.join(base, "tables"), graph, dense)
    out = {"chunk_s": prep("chunk", config, os.path.join(base, "g"))}
    out["partition_s"] = prep("partition", os.path.join(base, "g"), os.path.join(base, "a"),
                              "-p", 2, "--seed", 0)
    out["dispatch_s"] = prep("dispatch", os.path.join(base, "g"), os.path.join(base, "a"),
                             os.path.join(base, "d"))
    out["chunked_mb"] = round(folder_bytes(os.path.join(base, "g")) / 1e6, 1)
    out["parts_mb"] = round(folder_bytes(os.path.join(base, "d")) / 1e6, 1)
    metrics = os.path.join(base, "metrics.json")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphprep.trainer", "--graph",
                    os.path.join(base, "d", "graph.json"), "--task", "link", "--epochs",
                    str(args.epochs), "--fanouts", args.fanouts, "--batch-size",
                    str(args.batch_size), "--hidden", str(args.hidden), "--seed", "0",
                    "--no-progress", "--metrics-out", metrics, "--checkpoint-dir",
                    os.path.join(base, "ckpt")], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    out["trainer_s"] = round(time.perf_counter() - start, 1)
    with open(metrics) as f:
        data = json.load(f)
    epochs = data["epochs"]
    out["epoch_s"] = [round(e["epoch_s"], 1) for e in epochs]
    out["forward_backward_s"] = [round(e["time_per_rank_s"]["forward_backward"], 1)
                                 for e in epochs]
    out["feature_fetch_s"] = [round(e["time_per_rank_s"]["feature_fetch"], 1) for e in epochs]
    out["rpc_mb_per_epoch"] = [round((e["rpc_bytes_sent"] + e["rpc_bytes_received"]) / 1e6, 1)
                               for e in epochs]
    out["peak_rss_mb_max_rank"] = max(e["peak_rss_mb_max_rank"] for e in epochs)
    out["test_auc"] = round(data["summary"].get("test_auc", float("nan")), 4)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--musae", default=None, help="folder with MUSAE's facebook_edges.csv, "
                    "facebook.json, facebook_target.csv (default: a synthetic graph of that "
                    "shape)")
    ap.add_argument("--nodes", type=int, default=22470, help="synthetic graph: nodes")
    ap.add_argument("--edges", type=int, default=171002, help="synthetic graph: edges")
    ap.add_argument("--width", type=int, default=4714, help="synthetic graph: feature columns")
    ap.add_argument("--active", type=int, default=20,
                    help="synthetic graph: mean active columns per node")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--only", default="sparse,dense", help="which representations to run")
    ap.add_argument("--workdir", default=None)
    args = parse_args(ap, {"nodes": 2000, "edges": 12000, "width": 500, "batch_size": 512})
    graph = musae_graph(args.musae) if args.musae else \
        synthetic_graph(args.nodes, args.edges, args.width, args.active)
    words = graph[0]
    result = {"graph": "musae-facebook" if args.musae else "synthetic", "nodes": len(words),
              "edges": int(len(graph[2])), "width": int(graph[4]),
              "mean_active": round(float(np.mean([len(w) for w in words])), 1),
              "epochs": args.epochs, "fanouts": args.fanouts, "batch_size": args.batch_size,
              "hidden": args.hidden, "cores": os.cpu_count()}
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-sparse-")
    for name in args.only.split(","):
        result[name] = run(workdir, graph, name == "dense", args)
    if "sparse" in result and "dense" in result:
        s, d = result["sparse"], result["dense"]
        result["dense_over_sparse"] = {
            "epoch_s": round(d["epoch_s"][-1] / max(s["epoch_s"][-1], 1e-9), 1),
            "forward_backward_s": round(d["forward_backward_s"][-1] /
                                        max(s["forward_backward_s"][-1], 1e-9), 1),
            "rpc_bytes": round(d["rpc_mb_per_epoch"][-1] / max(s["rpc_mb_per_epoch"][-1], 1e-9),
                               1),
            "parts_bytes": round(d["parts_mb"] / max(s["parts_mb"], 1e-9), 1)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
