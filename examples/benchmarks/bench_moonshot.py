"""The moonshot: R-MAT scale 26 (1.07*10^9 edges) from raw edges to a trained model and its
embeddings, on this machine; prints one JSON object and keeps each phase's figures in
``WORKDIR/moonshot.json`` (a long run that stops keeps what it finished).

``--phase prep``: ``prep synth --generator rmat`` (split 0.05,0.01,0.01) -> multilevel
partition into 2 parts -> dispatch -> verify, each step on fresh workers (seconds, the largest
worker's peak anonymous and file-backed memory, disk). ``--phase train``: ``python -m
graphprep.trainer`` on the 2 parts / 2 ranks for one epoch over the training seeds,
checkpoint written, then ``trainer embed`` of every node: launch -> first batch, epoch time,
peak anonymous RSS per rank (sampled from outside), test accuracy against the majority-class
rate, embed time and a check that every node is embedded once by its original ID. ``--phase
all``: both; the chunked graph and assignment are removed once verified (the trainer reads
only the parts; ``--keep-input`` keeps them). ``--scale``: a smaller R-MAT (e.g. 20 for a rehearsal); ``--quick``: scale 12 (seconds;
for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from bench_pipeline import du, step  # noqa: E402
from common import parse_args  # noqa: E402

from graphprep.dispatch.job import run_dispatch  # noqa: E402
from graphprep.dispatch.verify import run_verify  # noqa: E402
from graphprep.pipeline.partition import PartitionOptions, run_partition  # noqa: E402
from graphprep.pipeline.synth import SynthSpec  # noqa: E402
from graphprep.pipeline.synth_job import run_synth  # noqa: E402

SPLIT = (0.05, 0.01, 0.01)


def record(workdir: str, phase: str, figures: dict) -> dict:
    """Merge ``figures`` under ``phase`` into ``WORKDIR/moonshot.json``; returns the whole."""
    path = os.path.join(workdir, "moonshot.json")
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[phase] = figures
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    return data


def prep(workdir: str, args) -> dict:
    """synth -> partition (multilevel, ``--parts``) -> dispatch -> verify into ``workdir``."""
    spec = SynthSpec.from_scale(args.scale, args.edge_factor, feat_dim=args.feat_dim,
                                split=SPLIT)
    g, a, d = (os.path.join(workdir, x) for x in ("graph", "assign", "parts"))
    res = {"scale": args.scale, "edges": spec.num_edges, "nodes": spec.num_nodes,
           "parts": args.parts, "feat_dim": args.feat_dim, "split": SPLIT}
    res["synth"] = step("synth", spec.num_edges, lambda o: run_synth(spec, g, 1 << 20, o),
                        workdir)
    res["partition"] = step("partition", spec.num_edges, lambda o: run_partition(
        g, a, "multilevel", PartitionOptions(args.parts, balance=None), o), workdir)
    res["dispatch"] = step("dispatch", spec.num_edges, lambda o: run_dispatch(g, a, d, o),
                           workdir)
    res["verify"] = step("verify", spec.num_edges, lambda o: run_verify(g, d, o), workdir)
    res["parts_mb"] = round(du(d) / 2**20)
    if not args.keep_input:       # disk for the checkpoint, layer files and embeddings
        for folder in (g, a):
            shutil.rmtree(folder)
    res["prep_s"] = round(sum(res[s]["seconds"] for s in
                              ("synth", "partition", "dispatch", "verify")), 1)
    res["prep_min"] = round(res["prep_s"] / 60, 1)
    return res


def train(workdir: str, args) -> dict:
    """One epoch on the parts (2 parts / 2 ranks), checkpoint written, then ``trainer embed``
    of every node; the figures of both and a check of the embedding files."""
    from bench_train import majority_rate, per_seed, run_ranks, run_trainer

    graph_json = os.path.join(workdir, "parts", "graph.json")
    recipe = argparse.Namespace(epochs=1, fanouts=args.fanouts, batch_size=args.batch_size,
                                device="cpu", placement="cpu", threads=0)
    store = (("--remote-store", os.path.join(workdir, "store"), "--remote-store-fill")
             if args.remote_store_fill else ())
    data = run_trainer(graph_json, workdir, recipe, "--hidden", str(args.hidden), *store)
    epoch = data["epochs"][0]
    res = {"hidden": args.hidden, "fanouts": args.fanouts, "batch_size": args.batch_size,
           "remote_store_fill": args.remote_store_fill,
           "train_wall_s": data["wall_s"], **per_seed(epoch, epoch),
           "epoch_train_s": round(epoch["train_s"], 1), "epoch_s": round(epoch["epoch_s"], 1),
           "test_acc": round(data["summary"]["test_acc"], 4),
           "val_acc": round(data["summary"]["val_acc"], 4),
           "test_nodes": epoch["test_nodes"],
           "majority_class_rate": majority_rate(graph_json),
           "train_rank_peak_anon_mb": data["rank_peak_anon_mb"],
           "train_rank_peak_file_backed_mb": data["rank_peak_file_backed_mb"],
           "time_per_rank_s": epoch["time_per_rank_s"]}
    print(json.dumps({"train": res}), file=sys.stderr, flush=True)
    if args.no_embed:
        return res
    out = os.path.join(workdir, "embeddings")
    ran = run_ranks([sys.executable, "-m", "graphprep.trainer", "embed", "--graph", graph_json,
                     "--checkpoint", data["checkpoint_dir"], "--out", out, "--overwrite",
                     "--no-progress"])
    res.update({"embed_wall_s": ran["wall_s"], "embed_min": round(ran["wall_s"] / 60, 1),
                "embed_rank_peak_anon_mb": ran["rank_peak_anon_mb"],
                "embed_rank_peak_file_backed_mb": ran["rank_peak_file_backed_mb"]})
    res.update(check_embeddings(out))
    return res


def check_embeddings(out: str) -> dict:
    """Every node has its row, once, by original ID: the files hold one row per node of the
    graph, and no row is left as created (all zeros) or holds NaN/inf. Read in slices."""
    import numpy as np

    info = json.load(open(os.path.join(out, "embed.json")))
    found = {}
    for name in info["files"]:
        arr = np.load(os.path.join(out, name), mmap_mode="r")
        unwritten = not_finite = 0
        for start in range(0, len(arr), 1 << 22):
            block = np.asarray(arr[start:start + (1 << 22)], dtype=np.float64)
            block = block.reshape(len(block), -1)
            if not name.endswith("predictions.npy"):
                unwritten += int((~block.any(axis=1)).sum())
            not_finite += int((~np.isfinite(block)).any(axis=1).sum())
        found[name] = {"shape": list(arr.shape), "rows_all_zero": unwritten,
                       "rows_not_finite": not_finite}
    return {"embed_inference": info["inference"], "embed_files": found,
            "embed_test_acc": info.get("full_neighbor", {}).get("test_acc")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("prep", "train", "all"), default="all")
    ap.add_argument("--scale", type=int, default=26, help="R-MAT scale: 2^SCALE nodes")
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--feat-dim", type=int, default=16)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--workdir", default=None,
                    help="where the graph, parts, checkpoint and embeddings go (kept); "
                         "needs ~60 GB at scale 26")
    ap.add_argument("--keep-input", action="store_true",
                    help="keep the chunked graph and the assignment after verify")
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=32,
                    help="the model's hidden width (trainer embed writes a part's hidden "
                         "layer, nodes x width float32, to disk: 8.6 GB at scale 26)")
    ap.add_argument("--remote-store-fill", action="store_true",
                    help="train with --remote-store WORKDIR/store --remote-store-fill: every "
                         "halo row fetched into a memory-mapped store at start-up")
    ap.add_argument("--no-embed", action="store_true",
                    help="--phase train: stop after the epoch and its checkpoint")
    args = parse_args(ap, {"scale": 12})
    workdir = args.workdir or tempfile.mkdtemp(prefix="moonshot-", dir=os.getcwd())
    os.makedirs(workdir, exist_ok=True)
    data = {}
    if args.phase in ("prep", "all"):
        data = record(workdir, "prep", prep(workdir, args))
    if args.phase in ("train", "all"):
        data = record(workdir, "train", train(workdir, args))
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
