"""Distributed training benchmark; prints one JSON object.

GraphSAGE node classification on a synth graph (10^7 edges by default; 5% of nodes train) with
``python -m graphprep.trainer``: 1 part / 1 rank (no remote sampling, the baseline) against 2 parts /
2 ranks (RPC sampling and feature fetch, DDP; with the default 64 MB halo feature cache and
without it), in the same run. Reports mean epoch time (first
epoch excluded), accuracy, the per-rank time breakdown and RPC traffic per epoch.
``--quick``: 2*10^4 edges, 2 epochs, fanouts 5,5, batches of 64 (seconds; for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import parse_args, partitioned_synth  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train(graph_json: str, workdir: str, args, *extra: str) -> dict:
    name = os.path.basename(os.path.dirname(graph_json)) + "".join(extra).replace("-", "")
    metrics = os.path.join(workdir, f"train-{name}.json")
    cmd = [sys.executable, "-m", "graphprep.trainer", "--graph", graph_json, "--no-progress",
           "--epochs", str(args.epochs), "--fanouts", args.fanouts, "--batch-size",
           str(args.batch_size), "--metrics-out", metrics,
           "--checkpoint-dir", os.path.join(workdir, f"ckpt-{name}"), "--device", args.device,
           "--placement", args.placement, *extra]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        data = json.load(f)
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
    # --quick keeps 2 epochs: the mean leaves the first one out.
    args = parse_args(ap, {"edges": 2 * 10**4, "epochs": 2, "fanouts": "5,5",
                           "batch_size": 64})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-train-")
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
