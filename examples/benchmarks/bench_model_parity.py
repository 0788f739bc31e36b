"""``--model sage`` against the trainer before user models (a baseline commit), same run; prints
one JSON object.

Node classification on a synth graph (2 parts, 2 ranks) with the same options and seed, run
alternately by the baseline commit's trainer (checked out into a temporary git worktree and run
from there: its own ``trainer`` and ``formats`` packages) and by this tree's. Reports each one's
mean epoch time over the runs (first epoch of each run excluded), the ratio, and whether the
per-epoch losses and accuracies are identical (same seed: same sampling, same initial weights,
same dropout draws, so they should be bit-equal). Dropout is off by default (``--dropout 0``):
since commit 6ad4f59 the models draw their dropout mask with ``torch.rand``, the same
distribution as torch's dropout from another random stream, so with dropout on the two runs
differ from the first draw (``--dropout 0.5`` compares their speed that way).
``--quick``: a small graph, 2 epochs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from graphprep.formats.partitioned import load_partitioned  # noqa: E402
from common import (add_graph_options, graph_spec, importable_tree, parse_args,  # noqa: E402
                    partitioned_synth)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = "dc4bc56"     # the last commit before the trainer took user models (issue 31)


def run(tree: str, graph_json: str, workdir: str, name: str, args) -> dict:
    """One training run of the trainer in ``tree``; returns its metrics file's content."""
    metrics = os.path.join(workdir, f"{name}.json")
    path, module = importable_tree(tree, workdir)
    cmd = [sys.executable, "-m", module, "--graph", graph_json, "--no-progress",
           "--epochs", str(args.epochs), "--fanouts", args.fanouts, "--batch-size",
           str(args.batch_size), "--dropout", str(args.dropout), "--metrics-out", metrics,
           "--overwrite",
           "--checkpoint-dir", os.path.join(workdir, f"ckpt-{name}")]
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(metrics) as f:
        return json.load(f)


def outcome(data: dict) -> list[tuple]:
    """What must be identical: per epoch, the loss and the accuracies."""
    return [(e["loss"], e["train_acc"], e["val_acc"], e["test_acc"]) for e in data["epochs"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=2 * 10**6)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs of each")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="the runs' --dropout (bit-equal runs need 0: see above)")
    ap.add_argument("--baseline", default=BASELINE, help="commit of the baseline trainer")
    ap.add_argument("--workdir", default=None, help="keep the prepared graph here")
    add_graph_options(ap)
    args = parse_args(ap, {"edges": 2 * 10**4, "epochs": 2, "fanouts": "5,5",
                           "batch_size": 64, "repeats": 1})
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-parity-")
    spec = graph_spec(args, args.edges, 32) if args.graph == "rmat" else None
    graph_json = partitioned_synth(workdir, args.edges, (2,), spec=spec)[2]
    baseline_tree = os.path.join(workdir, "baseline-tree")
    if not os.path.isdir(baseline_tree):
        subprocess.run(["git", "worktree", "add", "--detach", baseline_tree, args.baseline],
                       cwd=ROOT, check=True, capture_output=True)
    runs = {"baseline": [], "now": []}
    try:
        for i in range(args.repeats):
            for name, tree in (("baseline", baseline_tree), ("now", ROOT)):
                runs[name].append(run(tree, graph_json, workdir, f"{name}-{i}", args))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", baseline_tree], cwd=ROOT,
                       capture_output=True)

    def epoch_s(name):
        return statistics.mean(e["epoch_s"] for d in runs[name] for e in d["epochs"][1:]
                               or d["epochs"])
    total = sum(load_partitioned(graph_json).num_edges.values())
    res = {"graph": args.graph, "edges": args.edges, "graph_edges": total,
           "epochs": args.epochs, "fanouts": args.fanouts,
           "batch_size": args.batch_size, "dropout": args.dropout, "repeats": args.repeats,
           "baseline_commit": args.baseline,
           "cores": os.cpu_count()}
    for name in runs:
        res[name] = {"epoch_s": round(epoch_s(name), 3),
                     "test_acc": runs[name][0]["summary"]["test_acc"],
                     "val_acc": runs[name][0]["summary"]["val_acc"]}
    res["epoch_time_ratio_now_over_baseline"] = round(epoch_s("now") / epoch_s("baseline"), 3)
    res["identical_losses_and_accuracies"] = all(
        outcome(a) == outcome(b) for a, b in zip(runs["baseline"], runs["now"]))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
