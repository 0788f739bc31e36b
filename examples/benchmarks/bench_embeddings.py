"""Learnable embeddings of featureless node types and R-GCN; prints one JSON object.

An ogbn-mag-shaped synth graph (``prep synth --hetero``: papers, authors, institutions, fields
of study; 8 planted communities, papers labeled by theirs) with ``paper/feat`` dropped from the
chunked metadata, so no node type has features: only the structure tells the classes. 2 random
parts, 2 ranks. The same runs (same seeds) with ``--featureless embed`` (learnable rows, sparse
Adam at the owners) and ``--featureless constant``, for ``--model rgcn`` and ``--model sage``.
Reports accuracy, mean epoch time (first epoch excluded), the embedding pulls and pushes per
epoch (seconds per rank, gradient rows, bytes sent to other parts) and RPC traffic, and the
cost of the embeddings: epoch time and traffic of ``embed`` over ``constant``.
``--quick``: 6000 nodes, 4*10^4 edges, 2 epochs (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import fresh_cluster, parse_args  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def featureless_graph(workdir: str, nodes: int, edges: int, seed: int) -> str:
    """The synth graph without ``paper/feat``, dispatched into 2 random parts: graph.json's
    path. Reuses what ``workdir`` already holds."""
    from graphprep.dispatch.job import run_dispatch
    from graphprep.pipeline.partition import PartitionOptions, run_partition
    from graphprep.pipeline.synth import SynthSpec
    from graphprep.pipeline.synth_job import run_synth

    graph = os.path.join(workdir, f"featureless-{nodes}-{edges}")
    dispatched = f"{graph}-d2"
    if os.path.exists(os.path.join(dispatched, "graph.json")):
        return os.path.join(dispatched, "graph.json")
    with fresh_cluster() as (options, _):
        run_synth(SynthSpec(num_nodes=nodes, num_edges=edges, hetero=True, seed=seed), graph,
                  1 << 20, options)
        meta_path = os.path.join(graph, "metadata.json")
        with open(meta_path) as f:
            meta = json.load(f)
        del meta["node_data"]["paper"]["feat"]      # a chunked graph without the array
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
        shutil.rmtree(os.path.join(graph, "node_data", "paper", "feat"))
        run_partition(graph, f"{graph}-a2", "random", PartitionOptions(2), options)
        run_dispatch(graph, f"{graph}-a2", dispatched, options)
    return os.path.join(dispatched, "graph.json")


def train(graph_json: str, workdir: str, args, model: str, featureless: str) -> dict:
    name = f"{model}-{featureless}"
    metrics = os.path.join(workdir, f"train-{name}.json")
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--no-progress",
           "--model", model, "--featureless", featureless, "--epochs", str(args.epochs),
           "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--lr", "0.01",
           "--seed", str(args.seed), "--metrics-out", metrics, "--overwrite",
           "--checkpoint-dir", os.path.join(workdir, f"ckpt-{name}")]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        data = json.load(f)
    timed = data["epochs"][1:] or data["epochs"]
    mean = lambda key: sum(e.get(key, 0) for e in timed) / len(timed)  # noqa: E731
    out = {"test_acc": round(data["summary"]["test_acc"], 4),
           "val_acc": round(data["summary"]["val_acc"], 4),
           "test_acc_by_epoch": [round(e["test_acc"], 4) for e in data["epochs"]],
           "epoch_s": round(mean("epoch_s"), 3), "train_s": round(mean("train_s"), 3),
           "batches_per_epoch": timed[-1]["batches_total"],
           "rpc_mb_per_epoch": round((mean("rpc_bytes_sent") + mean("rpc_bytes_received"))
                                     / 1e6, 2),
           "peak_rss_mb_max_rank": data["epochs"][-1]["peak_rss_mb_max_rank"]}
    if featureless == "embed":
        out.update({"embedding_pull_s_per_rank": round(mean("embedding_pull_s"), 3),
                    "embedding_push_s_per_rank": round(mean("embedding_push_s"), 3),
                    "embedding_rows_per_epoch": round(mean("embedding_rows")),
                    "embedding_push_mb_per_epoch": round(mean("embedding_push_bytes") / 1e6,
                                                         2)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=2_000_000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0, help="the trainer's (same for every run)")
    ap.add_argument("--models", default="rgcn,sage")
    ap.add_argument("--workdir", default=None, help="keep the prepared graph here")
    args = parse_args(ap, {"nodes": 6000, "edges": 40_000, "epochs": 2, "batch_size": 128,
                           "models": "rgcn"})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-embeddings-")
    os.makedirs(workdir, exist_ok=True)
    graph = featureless_graph(workdir, args.nodes, args.edges, seed=1)
    res = {"nodes": args.nodes, "edges": args.edges, "epochs": args.epochs,
           "fanouts": args.fanouts, "batch_size": args.batch_size, "seed": args.seed,
           "parts": 2, "ranks": 2, "cores": os.cpu_count()}
    for model in args.models.split(","):
        runs = {mode: train(graph, workdir, args, model, mode) for mode in ("embed", "constant")}
        runs["embed_over_constant"] = {
            "test_acc_gain": round(runs["embed"]["test_acc"] - runs["constant"]["test_acc"], 4),
            "epoch_time_ratio": round(runs["embed"]["epoch_s"] / runs["constant"]["epoch_s"], 2),
            "extra_rpc_mb_per_epoch": round(runs["embed"]["rpc_mb_per_epoch"] -
                                            runs["constant"]["rpc_mb_per_epoch"], 2)}
        res[model] = runs
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
