"""Distributed training benchmark; prints one JSON object.

GraphSAGE node classification on a synth graph (10^7 edges by default; 5% of nodes train) with
``python -m graphprep.trainer``: 1 part / 1 rank (no remote sampling, the baseline) against 2 parts /
2 ranks (RPC sampling and feature fetch, DDP; with the default 64 MB halo feature cache and
without it), in the same run. Reports mean epoch time (first
epoch excluded), accuracy, the per-rank time breakdown and RPC traffic per epoch.

``--scale-curve``: instead, the same recipe (2 parts / 2 ranks, 5% of nodes train) on R-MAT
and the planted graph at each of ``--curve-edges`` (10^6, 10^7, 10^8): per row launch -> first
batch, epoch time per 10^5 seeds, sampled edges and RPC bytes per seed, halo-cache hit rate,
each rank's peak anonymous memory (sampled from outside; memory-mapped part pages counted
apart), test accuracy beside the majority-class rate; and the largest size against the one
before it. ``--task link``: link prediction on each graph's edges instead (``prep
split-edges`` holding out about 10^4 validation and 10^4 test edges), its rows per training
edge; with ``--max-batches N`` an epoch is N batches per rank (a full link epoch at 10^8
edges is hours). ``--remote-store``: the trainer keeps remote rows on disk once fetched.
With ``--against-commit C``, each row also runs C's trainer on the same graph (before beside
after: time per seed, anonymous memory per rank, wall time outside the epochs; with ``--task
link``, C's peak memory per rank until ``--before-seconds``, as C may lack --max-batches).
``--quick``: 2*10^4 edges (scale curve: 2*10^4 and 4*10^4), 2 epochs, fanouts 5,5, batches of
64 (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import (WorkerMemorySampler, commit_tree, graph_spec,  # noqa: E402
                    importable_tree, parse_args, partitioned_synth)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_trainer(graph_json: str, workdir: str, args, *extra: str, tree: str | None = None) -> dict:
    """``python -m graphprep.trainer`` on ``graph_json`` with the run's recipe: its metrics
    JSON, and the peak anonymous and file-backed memory of each rank (sampled from outside,
    MB, sorted). ``tree``: run that source tree's trainer instead (another commit's)."""
    name = os.path.basename(os.path.dirname(graph_json)) + re.sub(r"\W|_", "", "".join(extra))
    env = None
    if tree:
        root, _ = importable_tree(tree, workdir)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get(
            "PYTHONPATH", "")])}
        name += "-" + os.path.basename(tree)
    metrics = os.path.join(workdir, f"train-{name}.json")
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--no-progress",
           "--epochs", str(args.epochs), "--fanouts", args.fanouts, "--batch-size",
           str(args.batch_size), "--metrics-out", metrics,
           "--checkpoint-dir", os.path.join(workdir, f"ckpt-{name}"), "--device", args.device,
           "--placement", args.placement, *extra]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    ran = run_ranks(cmd, env)
    with open(metrics) as f:
        data = json.load(f)
    data.update(ran, checkpoint_dir=os.path.join(workdir, f"ckpt-{name}"))
    return data


def run_ranks(cmd: list[str], env: dict | None = None, stop_after: float | None = None
              ) -> dict:
    """Run a trainer command (``python -m graphprep.trainer ...``) from the repository:
    its wall time and each rank's peak anonymous and file-backed memory (MB, sorted),
    sampled from outside every 0.1 s. ``stop_after``: end it (SIGTERM) after that many
    seconds, the peaks being those until then. Raises CalledProcessError if it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    with WorkerMemorySampler(0.1, root=proc.pid, marker="graphprep.trainer") as ranks:
        try:
            code = proc.wait(timeout=stop_after)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
            code = 0
        if code:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
    return {"wall_s": round(time.perf_counter() - start, 2),
            "rank_peak_anon_mb": ranks.peaks_mb("anon"),
            "rank_peak_file_backed_mb": ranks.peaks_mb("file")}


def train(graph_json: str, workdir: str, args, *extra: str) -> dict:
    data = run_trainer(graph_json, workdir, args, *extra)
    timed = data["epochs"][1:] or data["epochs"]
    mean = lambda key: sum(e[key] for e in timed) / len(timed)  # noqa: E731
    breakdown = {k: round(sum(e["time_per_rank_s"][k] for e in timed) / len(timed), 3)
                 for k in timed[0]["time_per_rank_s"]}
    return {"epoch_s": round(mean("epoch_s"), 3), "train_s": round(mean("train_s"), 3),
            "test_acc": data["summary"]["test_acc"], "val_acc": data["summary"]["val_acc"],
            "train_nodes": timed[-1]["train_nodes"],
            "peak_rss_mb_max_rank": data["epochs"][-1]["peak_rss_mb_max_rank"],
            "batches_per_epoch": timed[-1]["batches_total"],
            "train_seeds_per_s": round(timed[-1]["train_nodes"] / mean("train_s")),
            "time_per_rank_s": breakdown,
            "rpc_mb_per_epoch": round(mean("rpc_bytes_sent") / 1e6 +
                                      mean("rpc_bytes_received") / 1e6, 1),
            "rpc_requests_per_epoch": round(mean("rpc_requests"))}


CURVE_SPLIT = (0.05, 0.01, 0.01)
# Link scale curve: validation and test edges each (fraction capped at 1%), ranked against
# this many negatives: evaluation stays a fixed cost beside the training it measures.
LINK_HELD_OUT = 10_000
LINK_EVAL_NEGATIVES = 20


def majority_rate(graph_json: str, mask: str = "test_mask") -> float:
    """The share of the ``mask`` nodes in their most common class, over every part: the
    accuracy of always guessing it. Reads each part's labels and mask (memory-mapped)."""
    import numpy as np

    from graphprep.formats.partitioned import load_partitioned
    from graphprep.trainer.config import target_type

    g = load_partitioned(graph_json)
    t = target_type(g, None)
    counts = np.zeros(g.num_classes.get(t, 0), np.int64)
    for p in range(g.num_parts):
        label = np.load(g.part_path(p, "node_feats", t, "label.npy"), mmap_mode="r")
        picked = np.load(g.part_path(p, "node_feats", t, f"{mask}.npy"), mmap_mode="r")
        part = np.bincount(label[picked.astype(bool)], minlength=len(counts))
        counts = np.pad(counts, (0, len(part) - len(counts))) + part
    return round(float(counts.max() / max(counts.sum(), 1)), 4) if len(counts) else 0.0


def per_seed(first: dict, last: dict) -> dict:
    """The scale figures of a run's epoch records: launch -> first batch (from ``first``),
    then ``last``'s seeds, time per 10^5 seeds, sampled edges and RPC bytes per seed and the
    halo-cache hit rate."""
    seeds = max(last["seeds_sampled"], 1)
    return {"launch_to_first_batch_s": first["launch_to_first_batch_s"],
            "train_seeds": last["train_nodes"],
            "epoch_s_per_1e5_seeds": round(last["train_s"] / last["train_nodes"] * 1e5, 3),
            "sampled_edges_per_seed": round(last["sampled_edges"] / seeds, 2),
            "rpc_bytes_per_seed": round(last["train_rpc_bytes"] / seeds),
            "halo_cache_hit_rate": round(last["halo_cache_hits"] / max(last["halo_rows"], 1),
                                         4),
            "remote_store_hits": last.get("halo_store_hits", 0)}


def per_positive(first: dict, last: dict) -> dict:
    """:func:`per_seed`'s figures for the link task, per training edge (positive) of the
    last epoch: its seeds are the ends of positives and negatives."""
    positives = max(last["train_edges"], 1)
    return {"launch_to_first_batch_s": first["launch_to_first_batch_s"],
            "train_edges": last["train_edges"],
            "epoch_s_per_1e5_edges": round(last["train_s"] / positives * 1e5, 3),
            "sampled_edges_per_edge": round(last["sampled_edges"] / positives, 2),
            "rpc_bytes_per_edge": round(last["train_rpc_bytes"] / positives),
            "halo_cache_hit_rate": round(last["halo_cache_hits"] / max(last["halo_rows"], 1),
                                         4)}


# the figures compared between sizes, per task: (time per unit, RPC bytes per unit)
CURVE_KEYS = {"node": ("epoch_s_per_1e5_seeds", "rpc_bytes_per_seed"),
              "link": ("epoch_s_per_1e5_edges", "rpc_bytes_per_edge")}


def trainer_task_args(args, workdir: str) -> tuple[str, ...]:
    """The trainer options of the scale curve's ``--task`` besides the recipe."""
    extra = ("--remote-store", os.path.join(workdir, "store")) if args.remote_store else ()
    extra += ("--remote-store-fill",) if args.remote_store_fill else ()
    if args.max_batches:
        extra += ("--max-batches", str(args.max_batches))
    if args.task == "link":
        extra += ("--task", "link", "--eval-negatives", str(LINK_EVAL_NEGATIVES))
    return extra


def curve_row(graph_json: str, workdir: str, args) -> dict:
    """One scale-curve row: 2 parts / 2 ranks with the run's recipe; figures of the last
    epoch (the first warms caches up when there are two)."""
    data = run_trainer(graph_json, workdir, args, *trainer_task_args(args, workdir))
    first, last, summary = data["epochs"][0], data["epochs"][-1], data["summary"]
    if args.task == "link":
        figures = {**per_positive(first, last), "test_auc": round(summary["test_auc"], 4),
                   "test_mrr": round(summary["test_mrr"], 4)}
    else:
        figures = {**per_seed(first, last), "test_acc": round(summary["test_acc"], 4),
                   "majority_class_rate": majority_rate(graph_json)}
    return {**figures, "rank_peak_anon_mb": data["rank_peak_anon_mb"],
            "rank_peak_file_backed_mb": data["rank_peak_file_backed_mb"],
            "time_per_rank_s": last["time_per_rank_s"],
            "wall_outside_epochs_s": outside_epochs(data)}


def outside_epochs(data: dict) -> float:
    """A run's wall time outside its epochs (launch, start-up, the final test, exit): the
    start-up figure that code without ``launch_to_first_batch_s`` records too."""
    return round(data["wall_s"] - sum(e["epoch_s"] for e in data["epochs"]), 2)


def before_link_row(graph_json: str, workdir: str, args, tree: str) -> dict:
    """``tree``'s trainer on the link recipe, stopped after ``--before-seconds`` (it has no
    --max-batches: a full epoch at 10^8 edges is hours): each rank's peak memory until
    then, past its start-up (what it holds per edge is made before the first batch)."""
    root, _ = importable_tree(tree, workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH",
                                                                              "")])}
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--no-progress",
           "--epochs", "1", "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
           "--task", "link", "--eval-negatives", str(LINK_EVAL_NEGATIVES),
           "--checkpoint-dir", os.path.join(workdir, "ckpt-before-" + os.path.basename(
               os.path.dirname(graph_json)) + "-" + os.path.basename(tree))]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    ran = run_ranks(cmd, env, stop_after=args.before_seconds)
    return {**ran, "stopped_after_s": args.before_seconds}


def before_row(graph_json: str, workdir: str, args, tree: str) -> dict:
    """The recipe on ``tree``'s trainer (an earlier commit's, run as it was): the figures
    its epoch records already had, and the same ones measured from outside."""
    if args.task == "link":
        return before_link_row(graph_json, workdir, args, tree)
    data = run_trainer(graph_json, workdir, args, *trainer_task_args(args, workdir), tree=tree)
    last, metric = data["epochs"][-1], "test_auc" if args.task == "link" else "test_acc"
    unit = "train_edges" if args.task == "link" else "train_nodes"
    return {CURVE_KEYS[args.task][0]: round(last["train_s"] / max(last[unit], 1) * 1e5, 3),
            "rank_peak_anon_mb": data["rank_peak_anon_mb"],
            "rank_peak_file_backed_mb": data["rank_peak_file_backed_mb"],
            "wall_outside_epochs_s": outside_epochs(data),
            metric: round(data["summary"][metric], 4)}


def scale_curve(args, workdir: str) -> dict:
    """The recipe on each of ``--graphs`` at each of ``--curve-edges``; ratios of the largest
    size against the one before it (the issue's targets: time and RPC bytes per seed <= 1.25x,
    anonymous memory per rank <= 1.5x and <= 2 GB, launch -> first batch <= 60 s)."""
    res = {"task": args.task, "fanouts": args.fanouts, "batch_size": args.batch_size,
           "epochs": args.epochs, "max_batches": args.max_batches, "split": CURVE_SPLIT,
           "parts": 2, "cores": os.cpu_count(), "remote_store": args.remote_store,
           "remote_store_fill": args.remote_store_fill}
    sizes = [int(float(e)) for e in args.curve_edges.split(",")]
    time_key, rpc_key = CURVE_KEYS[args.task]
    for name in args.graphs.split(","):
        rows = {}
        for edges in sizes:
            spec = None
            if name == "rmat":
                args.graph = "rmat"
                spec = graph_spec(args, edges, 32)
            held_out = min(0.01, LINK_HELD_OUT / edges)      # ~LINK_HELD_OUT edges each
            graphs = partitioned_synth(os.path.join(workdir, name), edges, (2,),
                                       split=CURVE_SPLIT, spec=spec,
                                       edge_split=(held_out, held_out)
                                       if args.task == "link" else None)
            row = curve_row(graphs[2], workdir, args)
            row["edges"] = spec.num_edges if spec else edges
            if args.against_commit:
                row[args.against_commit] = before_row(
                    graphs[2], workdir, args, commit_tree(args.against_commit, workdir))
            rows[str(edges)] = row
            print(json.dumps({name: {str(edges): row}}), file=sys.stderr, flush=True)
        big, small = (rows[str(e)] for e in sizes[-1:-3:-1]) if len(sizes) > 1 else \
            (rows[str(sizes[0])],) * 2
        res[name] = {"rows": rows, "largest_vs_previous": {
            "time_per_unit": round(big[time_key] / small[time_key], 3),
            "rpc_bytes_per_unit": round(big[rpc_key] / max(small[rpc_key], 1), 3),
            "rank_peak_anon": round(max(big["rank_peak_anon_mb"]) /
                                    max(small["rank_peak_anon_mb"]), 3)}}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10**7)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--placement", default="cpu", choices=["cpu", "pinned", "cuda"])
    ap.add_argument("--workdir", default=None, help="keep the prepared graphs here")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank; 0 = the trainer's default (cores / ranks)")
    ap.add_argument("--scale-curve", action="store_true",
                    help="instead: 2 parts / 2 ranks on --graphs at each of --curve-edges "
                         "(launch -> first batch, time, sampled edges and RPC bytes per "
                         "seed, halo-cache hit rate, anonymous memory per rank, accuracy "
                         "against the majority class)")
    ap.add_argument("--curve-edges", default="1e6,1e7,1e8",
                    help="--scale-curve: graph sizes in edges (R-MAT: the nearest scale)")
    ap.add_argument("--graphs", default="rmat,planted", help="--scale-curve: graphs")
    ap.add_argument("--task", default="node", choices=["node", "link"],
                    help="--scale-curve: node classification, or link prediction on the "
                         "graph's edges (prep split-edges: about 10^4 validation and 10^4 "
                         "test edges at every size; rows per training edge)")
    ap.add_argument("--before-seconds", type=float, default=180.0,
                    help="--task link --against-commit: stop the commit's trainer after this "
                         "long (its peak memory so far is the row's figure)")
    ap.add_argument("--max-batches", type=int, default=None,
                    help="the trainer's --max-batches: training batches per epoch and rank "
                         "[default: all]")
    ap.add_argument("--remote-store", action="store_true",
                    help="--scale-curve: the trainer keeps remote rows on disk once fetched "
                         "(--remote-store W/store)")
    ap.add_argument("--remote-store-fill", action="store_true",
                    help="--scale-curve, with --remote-store: the store filled with every halo "
                         "row at start-up (--remote-store-fill)")
    ap.add_argument("--against-commit", default=None, metavar="COMMIT",
                    help="--scale-curve: also COMMIT's trainer on each row's graph (its tree "
                         "git-archived under --workdir and run as it was), before beside after")
    ap.add_argument("--graph", default="planted", help=argparse.SUPPRESS)  # for graph_spec
    ap.add_argument("--edge-factor", type=int, default=16, help=argparse.SUPPRESS)
    # --quick keeps 2 epochs: the mean leaves the first one out.
    args = parse_args(ap, {"edges": 2 * 10**4, "epochs": 2, "fanouts": "5,5",
                           "batch_size": 64, "curve_edges": "2e4,4e4"})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-train-")
    if args.scale_curve:
        print(json.dumps(scale_curve(args, workdir), indent=1))
        return
    graphs = partitioned_synth(workdir, args.edges, (1, 2))
    res = {"edges": args.edges, "fanouts": args.fanouts, "batch_size": args.batch_size,
           "device": args.device, "placement": args.placement, "cores": os.cpu_count(),
           "threads_per_rank": args.threads or "cores / ranks"}
    res["1_part_1_rank"] = train(graphs[1], workdir, args)
    res["2_parts_2_ranks"] = train(graphs[2], workdir, args)
    res["2_parts_2_ranks_no_halo_cache"] = train(graphs[2], workdir, args, "--cache-mb", "0")
    res["epoch_time_ratio_2_over_1"] = round(res["2_parts_2_ranks"]["epoch_s"] /
                                             res["1_part_1_rank"]["epoch_s"], 2)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
